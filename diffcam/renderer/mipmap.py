"""Mip-level selection for the eager hard-edge path: trilinear mip-mapping with a per-pixel
level from screen-space (u, v) differences, so that minified textures do not alias."""

from __future__ import annotations

import torch

from .hits import Hits


def texture_levels(atlas, hits: Hits, oid, mipmap: bool, B: int, H: int, W: int):
    """Texture slot data of each hit for ``textures.composite``: (meta0, meta1, blend), the
    (offset, width, height, repeat) (N,) of the two mip levels around each hit's level and
    the blend (N,) between them; meta1 and blend are None for level 0 only (no mip-mapping,
    or single-level textures). oid (B, H, W) the winner map."""
    slot = hits.prim
    meta0 = (atlas.offset[slot, 0], atlas.width[slot, 0], atlas.height[slot, 0], atlas.repeat[slot])
    if not mipmap or atlas.offset.shape[1] == 1:
        return meta0, None, None
    uv = torch.stack([hits.u, hits.v], 1).detach()
    level = _mip_level(uv, hits.pix, slot, oid, atlas, B, H, W)
    nl = atlas.num_levels[slot]
    lv = torch.minimum(level, (nl - 1).to(level.dtype))
    l0 = torch.floor(lv).long()
    l1 = torch.minimum(l0 + 1, nl - 1)
    blend = lv - l0.to(lv.dtype)
    meta0 = (
        atlas.offset[slot, l0],
        atlas.width[slot, l0],
        atlas.height[slot, l0],
        atlas.repeat[slot],
    )
    meta1 = (
        atlas.offset[slot, l1],
        atlas.width[slot, l1],
        atlas.height[slot, l1],
        atlas.repeat[slot],
    )
    return meta0, meta1, blend


def _mip_level(uv, idx, k, best_k, atlas, B, H, W):
    """Per-sample mip level (detached float) from screen-space (u, v) differences in texels.

    uv (N, 2) detached texture coordinates of the samples at flat indices ``idx`` (N,) long,
    on primitives ``k`` (N,) long; best_k (B, H, W) the winner map. Differences are taken to
    the neighbour on the same primitive; of the forward and backward neighbours the smaller
    difference is used, which ignores texture seams and face edges.
    """
    dtype = uv.dtype
    P = H * W
    uvi = torch.zeros(B * P, 2, dtype=dtype, device=uv.device)
    uvi[idx] = uv * torch.stack([atlas.width[k, 0], atlas.height[k, 0]], 1).to(dtype)
    uvi = uvi.view(B, H, W, 2)
    kid = best_k

    def deriv(dim):
        n = uvi.shape[dim]
        fwd = uvi.narrow(dim, 1, n - 1) - uvi.narrow(dim, 0, n - 1)
        same = kid.narrow(dim, 1, n - 1) == kid.narrow(dim, 0, n - 1)
        mag = torch.where(same, torch.linalg.vector_norm(fwd, dim=-1), float("inf"))
        pad_shape = list(mag.shape)
        pad_shape[dim] = 1
        inf = torch.full(pad_shape, float("inf"), dtype=dtype, device=uv.device)
        f = torch.cat([mag, inf], dim)  # forward difference of each pixel
        bwd = torch.cat([inf, mag], dim)  # backward difference
        m = torch.minimum(f, bwd)
        return torch.where(torch.isfinite(m), m, torch.zeros_like(m))

    rho = torch.maximum(deriv(2), deriv(1)).reshape(-1)[idx]
    return torch.log2(rho.clamp(min=1.0))
