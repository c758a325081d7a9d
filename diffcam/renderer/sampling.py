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

from ..autodiff import plain_autograd
from ..textures import bilerp, quad_coords


def _bilinear_slopes(q, ax, ay):
    """Bilinear colour (n, 3) of corners ``q`` (n, 12) at fractions ax, ay (n,), and its
    derivatives along ax and along ay (n, 3) each, from the same corner differences."""
    corners = q[:, 0:3], q[:, 3:6], q[:, 6:9], q[:, 9:12]
    return _slopes(*corners, ax.unsqueeze(1), ay.unsqueeze(1))


def _slopes(c00, c01, c10, c11, ax, ay, out=(None, None, None)):
    """`_bilinear_slopes` of the four corners' colours, in any layout ax and ay broadcast
    against; written into ``out`` (colour, d/d ax, d/d ay; each a tensor or None)."""
    e_top, e_bot = c01 - c00, c11 - c10
    top = torch.addcmul(c00, e_top, ax)
    d_ay = torch.addcmul(c10, e_bot, ax, out=out[2]).sub_(top)  # bottom - top
    d_ax = torch.addcmul(e_top, e_bot - e_top, ay, out=out[1])
    return torch.addcmul(top, d_ay, ay, out=out[0]), d_ax, d_ay


class _QuadSample(torch.autograd.Function):
    """Bilinear colours (M, 3) of (u, v) (M,) in one texture of the atlas (its quad-table
    rows from ``offset``, ``width`` x ``height`` texels, ``repeat`` wrap), from ``quad``
    (N, 12)."""

    @staticmethod
    def forward(ctx, quad, u, v, offset, width, height, repeat):
        row, ax, ay, sx, sy = quad_coords(u, v, offset, width, height, repeat)
        # a repeating texture's scales come as Python numbers: saved as tensors
        sx, sy = (torch.full_like(u, x) if isinstance(x, float) else x for x in (sx, sy))
        q = quad.index_select(0, row)
        col = bilerp(q, ax, ay)[0]
        ctx.save_for_backward(row, ax, ay, sx, sy, q)
        ctx.save_for_forward(row, ax, ay, sx, sy, q)
        ctx.n_rows = quad.shape[0]
        return col

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
            _, d_ax, d_ay = _bilinear_slopes(q, ax, ay)
            g_u = (g * d_ax).sum(1) * sx if need_u else None
            g_v = (g * d_ay).sum(1) * sy if need_v else None
        return g_quad, g_u, g_v, None, None, None, None

    @staticmethod
    def jvp(ctx, t_quad, t_u, t_v, *_):
        row, ax, ay, sx, sy, q = ctx.saved_tensors
        out = torch.zeros_like(q[:, :3])
        if t_quad is not None:
            out = out + bilerp(t_quad.index_select(0, row), ax, ay)[0]
        if t_u is not None or t_v is not None:
            _, d_ax, d_ay = _bilinear_slopes(q, ax, ay)
            if t_u is not None:
                out = out + d_ax * (t_u * sx).unsqueeze(1)
            if t_v is not None:
                out = out + d_ay * (t_v * sy).unsqueeze(1)
        return out


def sample_quad(quad, u, v, offset, width, height, repeat):
    """Bilinear colours (M, 3) at texture coordinates u, v (M,) (v up) of one texture of an
    atlas: ``quad`` (N, 12) its quad table (may require grad), the texture's rows from
    ``offset`` (long), ``width`` x ``height`` texels (long), ``repeat`` (bool) its wrap mode
    (0-d tensors, or Python numbers as in ``TextureAtlas.level0``). Differentiable in
    ``quad``, ``u`` and ``v`` (reverse and forward mode); the same values as
    ``TextureAtlas.sample``."""
    return _QuadSample.apply(quad, u, v, offset, width, height, repeat)


_CHUNK = 1 << 16  # samples per pass of the block sampler (its corner rows stay in cache)


class _QuadSampleBlocks(torch.autograd.Function):
    """Bilinear colours (S, 3) of (u, v) (S,) in several textures of the atlas at once,
    times a shading factor ``shade`` (S,) (or None): the samples come in blocks (start, stop,
    offset, width, height, repeat), each in one texture. One autograd node for all of them,
    so the backward adds every block's texture gradient into one (N, 12) table (per-texture
    calls would each zero-fill and add a whole table), a cache-sized chunk at a time.

    When (u, v) or the shading need gradients, the forward keeps each sample's unshaded
    colour's derivatives along the two bilinear fractions and the colour itself (the
    corner differences it forms anyway), so that the backward is three row products with
    the incoming gradient instead of a second gather of the corners.

    The arithmetic runs channel by channel on (3, n) rows, from the transposed quad table
    (12, N): on (n, 3) columns every op is a strided, barely vectorised pass. The colours
    come back as the (S, 3) transpose of a (3, S) tensor."""

    @staticmethod
    def forward(ctx, quad, u, v, shade, blocks):
        S = u.shape[0]
        quad_t = quad.t().contiguous()  # (12, N): corner i's channel c in row 3 i + c
        row = torch.empty(S, dtype=torch.long, device=u.device)
        ax, ay, sx, sy = (u.new_empty(S) for _ in range(4))
        need_uvs = any(ctx.needs_input_grad[1:4])
        # d colour / d ax, d colour / d ay and the unshaded colour, each (3, S)
        jac = quad.new_empty(3, 3, S) if need_uvs else None
        unshaded = quad.new_empty(3, S) if jac is None else jac[2]  # written in place
        for start, stop, *meta in blocks:
            for c0 in range(start, stop, _CHUNK):
                sl = slice(c0, min(stop, c0 + _CHUNK))
                r, ax[sl], ay[sl], sx[sl], sy[sl] = quad_coords(u[sl], v[sl], *meta)
                row[sl] = r
                q = quad_t.index_select(1, r)
                views = (unshaded[:, sl], None, None)
                if jac is not None:
                    views = (unshaded[:, sl], jac[0, :, sl], jac[1, :, sl])
                _slopes(q[0:3], q[3:6], q[6:9], q[9:12], ax[sl], ay[sl], views)
        if shade is not None:
            col = unshaded.mul_(shade) if jac is None else unshaded * shade
        else:  # never a view of what the backward keeps
            col = unshaded if jac is None else unshaded.clone()
        ctx.save_for_backward(quad, row, ax, ay, sx, sy, shade, jac)
        return col.t()

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        quad, row, ax, ay, sx, sy, shade, jac = ctx.saved_tensors
        need_q, need_u, need_v, need_s = ctx.needs_input_grad[:4]
        S = row.shape[0]
        g_quad = g_u = g_v = g_s = None
        if need_q:
            g_quad = quad.new_zeros(quad.shape)
            for c0 in range(0, S, _CHUNK):
                sl = slice(c0, min(S, c0 + _CHUNK))
                gq = g[sl] if shade is None else g[sl] * shade[sl].unsqueeze(1)
                g_quad.index_add_(0, row[sl], _QuadSample._weights(gq, ax[sl], ay[sl]))
        if need_u or need_v or need_s:
            g_t = g.t()  # (3, S)
            g_ax, g_ay, g_col = (_dot3_rows(j, g_t) for j in jac)  # g . each (3, S) column
            if shade is not None:
                g_ax, g_ay = g_ax * shade, g_ay * shade
            g_u = g_ax * sx if need_u else None
            g_v = g_ay * sy if need_v else None
            g_s = g_col if need_s else None
        return g_quad, g_u, g_v, g_s, None


def _dot3_rows(a, b):
    """Column dot products (n,) of a, b (3, n)."""
    return torch.addcmul(torch.addcmul(a[0] * b[0], a[1], b[1]), a[2], b[2])


def sample_quad_blocks(quad, u, v, blocks, shade=None):
    """Bilinear colours (S, 3) at texture coordinates u, v (S,) (v up), in blocks of samples
    (start, stop, offset, width, height, repeat) each in one texture of the atlas (its
    ``sample_quad`` arguments), times ``shade`` (S,) if given. One autograd node (reverse
    mode; forward-mode AD and functorch transforms take ``sample_quad`` per block instead):
    the same values and gradients as ``sample_quad`` per block times ``shade``."""
    if plain_autograd():
        return _QuadSampleBlocks.apply(quad, u, v, shade, blocks)
    parts = [sample_quad(quad, u[a:b], v[a:b], *meta) for a, b, *meta in blocks]
    colour = torch.cat(parts) if parts else quad.new_zeros(0, 3)
    return colour if shade is None else colour * shade.unsqueeze(1)
