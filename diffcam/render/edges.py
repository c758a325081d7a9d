"""Soft samples' silhouette distance of boxes and rectangles, with a hand-written backward.

Their distance is the minimum over silhouette edges of the signed pixel distance to the
edge's image line, ``(n_e . d) / norm_e`` (``primitive_silhouettes._edge_planes_sd``).
Recorded op by op that is a (samples, edges) product, a division, a mask and a minimum,
each with its own (samples, edges) buffers in the backward. `edge_distance` does it in one
node: the forward keeps only the nearest edge's index per sample, and the backward sends
each sample's gradient to that edge alone, ``d sd / d d = n_e / norm_e``,
``d sd / d n_e = d / norm_e``, ``d sd / d norm_e = -sd / norm_e``. ``geometry`` uses it for
these kinds (the values of ``primitive_silhouettes._edge_planes_sd``; the gradients of the
minimum's one edge where the reference splits them among exact ties).
"""

from __future__ import annotations

import torch

from .. import primitive_silhouettes
from .. import primitives as prim


class _EdgeDistance(torch.autograd.Function):
    """min over active edges of ``(n_e . d) / norm_e`` (nb, K, m) of directions d
    (nb, K, m, 3), edge normals n (nb, K, E, 3), norms (nb, K, E) and active (nb, K, E)."""

    @staticmethod
    def forward(ctx, d, n, norm, active):
        sd = (d @ n.transpose(-1, -2)).div_(norm.unsqueeze(2))
        sd.masked_fill_(~active.unsqueeze(2), prim._BIG)
        sd, edge = sd.min(-1)
        ctx.save_for_backward(d, n, norm, active, sd, edge)
        return sd

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        d, n, norm, active, sd, edge = ctx.saved_tensors
        # the nearest edge's 1 / norm per sample (0 where no edge is active: sd is constant)
        inv = torch.where(active, 1.0 / norm, 0.0).gather(2, edge)
        gs = g * inv  # (nb, K, m)
        g_d = g_n = g_norm = None
        need_d, need_n, need_norm = ctx.needs_input_grad[:3]
        if need_d:  # n of each sample's edge (a batched product with the one-hot of edges)
            g_d = gs.unsqueeze(-1) * _take_edges(n, edge)
        if need_n:
            idx = edge.unsqueeze(-1).expand(*edge.shape, 3)
            g_n = torch.zeros_like(n).scatter_add_(2, idx, gs.unsqueeze(-1) * d)
        if need_norm:
            g_norm = torch.zeros_like(norm).scatter_add_(2, edge, -gs * sd)
        return g_d, g_n, g_norm, None


def _take_edges(n, edge):
    """n (nb, K, E, 3) at edge indices ``edge`` (nb, K, m) -> (nb, K, m, 3)."""
    nb, K, E, _ = n.shape
    m = edge.shape[-1]
    flat = edge + torch.arange(nb * K, device=edge.device).view(nb, K, 1) * E
    return n.reshape(nb * K * E, 3).index_select(0, flat.reshape(-1)).view(nb, K, m, 3)


def edge_distance(o, d, starts, dirs, active, A, fx, fy):
    """``primitive_silhouettes._edge_planes_sd`` (centre reference at the local origin) in one
    node."""
    n, _, norm = primitive_silhouettes._edge_lines(o, starts, dirs, torch.zeros_like(o), A, fx, fy)
    return _EdgeDistance.apply(d, n, norm, active)
