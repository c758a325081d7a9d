"""Per-sample texture colours from an atlas's quad table, with a hand-written backward.

The soft-edge path colours every sample a primitive's soft edge reaches, often more samples
than pixels. `sample_quad` reads each sample's four bilinear corners as one 12-float row of
the quad table (``textures._quad_table``) instead of four gathers, and its backward adds the
corner weights into the table by ``index_add_`` and forms d colour / d (u, v) from the corner
differences, instead of recording the interpolation op by op. Forward-mode AD (the fit's
Jacobians) gets its own ``jvp``.
"""

from __future__ import annotations

import torch

from ..textures import _bilerp, _quad_coords


class _QuadSample(torch.autograd.Function):
    """Bilinear colours (M, 3) of (u, v) (M,) in one texture of the atlas (its quad-table
    rows from ``offset``, ``width`` x ``height`` texels, ``repeat`` wrap), from ``quad``
    (N, 12)."""

    @staticmethod
    def forward(ctx, quad, u, v, offset, width, height, repeat):
        row, ax, ay, sx, sy = _quad_coords(u, v, offset, width, height, repeat)
        q = quad.index_select(0, row)
        col = _bilerp(q, ax, ay)[0]
        ctx.save_for_backward(row, ax, ay, sx, sy, q)
        ctx.save_for_forward(row, ax, ay, sx, sy, q)
        ctx.n_rows = quad.shape[0]
        return col

    @staticmethod
    def _slopes(q, ax, ay):
        """d colour / d ax and d colour / d ay (M, 3) of the corners ``q`` (M, 12)."""
        c00, c01, c10, c11 = q[:, 0:3], q[:, 3:6], q[:, 6:9], q[:, 9:12]
        axe, aye = ax.unsqueeze(1), ay.unsqueeze(1)
        d_ax = (c01 - c00) * (1 - aye) + (c11 - c10) * aye
        top = c00 + (c01 - c00) * axe
        bot = c10 + (c11 - c10) * axe
        return d_ax, bot - top

    @staticmethod
    def _weights(g, ax, ay):
        """(M, 12): ``g`` (M, 3) times each corner's bilinear weight."""
        axe, aye = ax.unsqueeze(1), ay.unsqueeze(1)
        w00, w01 = (1 - axe) * (1 - aye), axe * (1 - aye)
        w10, w11 = (1 - axe) * aye, axe * aye
        return torch.cat([g * w00, g * w01, g * w10, g * w11], 1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        row, ax, ay, sx, sy, q = ctx.saved_tensors
        need_q, need_u, need_v = ctx.needs_input_grad[:3]
        g_quad = g_u = g_v = None
        if need_q:
            g_quad = g.new_zeros(ctx.n_rows, 12).index_add_(0, row, _QuadSample._weights(g, ax, ay))
        if need_u or need_v:
            d_ax, d_ay = _QuadSample._slopes(q, ax, ay)
            g_u = (g * d_ax).sum(1) * sx if need_u else None
            g_v = (g * d_ay).sum(1) * sy if need_v else None
        return g_quad, g_u, g_v, None, None, None, None

    @staticmethod
    def jvp(ctx, t_quad, t_u, t_v, *_):
        row, ax, ay, sx, sy, q = ctx.saved_tensors
        out = torch.zeros_like(q[:, :3])
        if t_quad is not None:
            out = out + _bilerp(t_quad.index_select(0, row), ax, ay)[0]
        if t_u is not None or t_v is not None:
            d_ax, d_ay = _QuadSample._slopes(q, ax, ay)
            if t_u is not None:
                out = out + d_ax * (t_u * sx).unsqueeze(1)
            if t_v is not None:
                out = out + d_ay * (t_v * sy).unsqueeze(1)
        return out


def sample_quad(quad, u, v, offset, width, height, repeat):
    """Bilinear colours (M, 3) at texture coordinates u, v (M,) (v up) of one texture of an
    atlas: ``quad`` (N, 12) its quad table (may require grad), the texture's rows from
    ``offset`` (long), ``width`` x ``height`` texels (long), ``repeat`` (bool) its wrap mode
    (0-d tensors). Differentiable in ``quad``, ``u`` and ``v`` (reverse and forward mode);
    the same values as ``TextureAtlas.sample``."""
    return _QuadSample.apply(quad, u, v, offset, width, height, repeat)
