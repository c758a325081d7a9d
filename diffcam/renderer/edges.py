"""Soft samples' silhouette distance of boxes and rectangles, with a hand-written backward.

Their distance is the minimum over silhouette edges of the signed pixel distance to the
edge's image line, ``(n_e . d) / norm_e`` (``primitive_silhouettes.edge_planes_sd``).
Recorded op by op that is a (samples, edges) product, a division, a mask and a minimum,
each with its own (samples, edges) buffers in the backward. `edge_distance` does it in one
node on the directions' components: the forward keeps only the nearest edge's index per
sample, and the backward sends each sample's gradient to that edge alone,
``d sd / d d = n_e / norm_e``, ``d sd / d n_e = d / norm_e``,
``d sd / d norm_e = -sd / norm_e``. ``geometry`` uses it for
these kinds (the values of ``primitive_silhouettes.edge_planes_sd``; the gradients of the
minimum's one edge where the reference splits them among exact ties).
"""

from __future__ import annotations

import torch

from .. import primitive_silhouettes
from .. import primitives as prim


class _EdgeDistance(torch.autograd.Function):
    """min over active edges of ``(n_e . d) / norm_e`` (nb, m) of directions d by components
    dx, dy, dz (nb, m), edge normals n (nb, E, 3), norms (nb, E) and active (nb, E).

    The (nb, E, m) table of the edges' distances is the reference's batched matrix product
    (the same rounding: element-wise products and sums gave other last bits, enough to change
    a shipped controller's closed loop), inactive edges are pushed to ``BIG`` by adding it
    (an exact 0 is added to the active ones), and the minimum is an ``amin`` over the edge
    axis: ``min`` or ``argmin`` with indices over a small axis are an order of magnitude
    slower. The nearest edge per sample, which the backward needs, is found from the table
    by float ops alone (`_first_nearest`); the backward works on d's components."""

    @staticmethod
    def forward(ctx, dx, dy, dz, n, norm, active):
        # (nb, 1, m, 3) @ (nb, 1, 3, E), the shapes of `primitive_silhouettes.edge_planes_sd`'s
        # product, seen as (nb, E, m)
        d = torch.stack((dx, dy, dz), -1).unsqueeze(1)
        val = (d @ n.unsqueeze(1).transpose(-1, -2))[:, 0].transpose(1, 2)
        val.div_(norm.unsqueeze(2)).add_(
            torch.zeros_like(norm).masked_fill_(~active, prim.BIG).unsqueeze(2)
        )
        sd = val.amin(1)
        edge = _first_nearest(val, sd) if any(ctx.needs_input_grad[:5]) else None
        ctx.save_for_backward(dx, dy, dz, n, norm, active, sd, edge)
        return sd

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        dx, dy, dz, n, norm, active, sd, edge = ctx.saved_tensors
        # the nearest edge's 1 / norm per sample (0 where no edge is active: sd is constant)
        gs = g * torch.where(active, 1.0 / norm, 0.0).gather(1, edge)  # (nb, m)
        need_d, need_n, need_norm = any(ctx.needs_input_grad[:3]), *ctx.needs_input_grad[3:5]
        g_d = (None, None, None)
        g_n = g_norm = None
        if need_d:  # n of each sample's edge
            g_d = tuple(gs * n[:, :, i].gather(1, edge) for i in range(3))
        if need_n or need_norm:  # each sample's share added into its edge's entries
            # by component (a scatter of (nb, m, 4) rows, and their stack, are slower)
            table = gs.new_zeros(4, *norm.shape)  # d sd / d n_e by component, d sd / d norm_e
            for i, part in enumerate((dx, dy, dz, -sd)):
                table[i].scatter_add_(1, edge, gs * part)
            g_n, g_norm = table[:3].permute(1, 2, 0), table[3]
        return *g_d, (g_n if need_n else None), (g_norm if need_norm else None), None


def _first_nearest(val, sd):
    """The index (nb, m) long of the first edge e where ``val`` (nb, E, m) attains its
    minimum ``sd`` (nb, m) (0 where it is NaN): the minimum over e of
    ``e + E * ceil(min(val_e - sd, 1))``, in which the attaining edges count e and the others
    at least E."""
    E = val.shape[1]
    key = torch.ceil((val - sd.unsqueeze(1)).clamp_(max=1.0)).mul_(E)
    key.add_(torch.arange(E, dtype=val.dtype, device=val.device).view(1, E, 1))
    return key.amin(1).nan_to_num_(0.0).long()


def edge_distance(o, d, starts, dirs, active, A, fx, fy):
    """``primitive_silhouettes.edge_planes_sd`` (centre reference at the local origin) in one
    node, for one primitive per image: o (nb, 1, 3); d a :class:`~geometry.Vec` of (nb, m)
    ray directions; starts, dirs (nb, 1, E, 3); active (nb, 1, E); A (nb, 1, 3, 3);
    fx, fy (nb, 1) -> (nb, m)."""
    n, _, norm = primitive_silhouettes.edge_lines(o, starts, dirs, torch.zeros_like(o), A, fx, fy)
    dx, dy, dz = torch.broadcast_tensors(d.x, d.y, d.z)
    return _EdgeDistance.apply(dx, dy, dz, n[:, 0], norm[:, 0], active[:, 0])
