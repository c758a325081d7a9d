"""The nearest hit of many rays with one mesh, without autograd: through its `BVH`, or by
brute force (every ray against every triangle, in chunks), the reference.

The BVH traversal is breadth first over a frontier of (ray, node) pairs, processed a level at
a time with tensor ops: the pairs whose ray meets the node's box within the ray's best depth
so far survive; an internal node's pairs become pairs with its two children, a leaf's pairs
(ray, triangle) pairs with its triangles, tested at once (`triangles.ray_triangle`) and
reduced into each ray's nearest hit. No Python loop over rays or nodes.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .bvh import BVH
from .triangles import Shear, ray_shear, ray_triangle

__all__ = ["RayCast", "cast_rays", "cast_rays_brute_force"]


class RayCast(NamedTuple):
    """Per ray (R,): t the ray parameter of the nearest hit (``inf`` where none); face the
    hit triangle's index (long, -1 where none)."""

    t: torch.Tensor
    face: torch.Tensor


def _take(shear: Shear, idx) -> Shear:
    return Shear(shear.px[idx], shear.py[idx], shear.pz[idx])


def _reduce(best_t, best_f, ray, face, t):
    """Fold candidate hits (ray, face, t; t = inf: a miss) into the per-ray nearest (ties: the smaller face
    index, so the result does not depend on the order of the pairs)."""
    if ray.numel() == 0:
        return best_t, best_f
    best_t = best_t.scatter_reduce(0, ray, t, reduce="amin")
    at_best = (t == best_t[ray]) & torch.isfinite(t)
    cand = torch.where(at_best, face, torch.iinfo(torch.long).max)
    f = torch.full_like(best_f, torch.iinfo(torch.long).max).scatter_reduce(
        0, ray, cand, reduce="amin"
    )
    improved = f != torch.iinfo(torch.long).max
    return best_t, torch.where(improved, f, best_f)


def cast_rays(
    bvh: BVH, corners: torch.Tensor, o: torch.Tensor, d: torch.Tensor, max_pairs: int = 1 << 21
) -> RayCast:
    """The nearest hit (`RayCast`) of rays ``o + t d`` (o, d (R, 3) or o (3,); mesh frame)
    with triangles ``corners`` (F, 3, 3), through ``bvh`` (built or refitted for these
    corners). ``max_pairs`` bounds the (ray, node) pairs held at once: the rays are taken in
    chunks of about ``max_pairs / 8``. No gradient."""
    with torch.no_grad():
        d = d.detach()
        o = o.detach().expand_as(d)
        R = d.shape[0]
        chunk = max(1, max_pairs // 8)
        parts = [
            _cast_chunk(bvh, corners.detach(), o[i : i + chunk], d[i : i + chunk], max_pairs)
            for i in range(0, R, chunk)
        ]
        if not parts:
            e = d.new_zeros(0)
            return RayCast(e, e.long())
        return RayCast(torch.cat([p.t for p in parts]), torch.cat([p.face for p in parts]))


def _cast_chunk(bvh: BVH, corners, o, d, max_pairs: int) -> RayCast:
    R = d.shape[0]
    device, dtype = d.device, d.dtype
    best_t = torch.full((R,), float("inf"), dtype=dtype, device=device)
    best_f = torch.full((R,), -1, dtype=torch.long, device=device)
    shear = ray_shear(d)
    # slab test; an axis the ray runs parallel to bounds nothing when the origin is
    # between the planes (all t), everything when not (no t)
    flat = d == 0
    inv = 1.0 / torch.where(flat, 1.0, d)
    inf = torch.tensor(float("inf"), dtype=dtype, device=device)
    # robust traversal (Ize 2013): the far distance grown by a few ulps, so that rounding
    # in the slab test never drops a box whose surface the ray just touches (a ray through a
    # vertex on a box's face)
    grow = 1.0 + 4.0 * torch.finfo(dtype).eps
    ray = torch.arange(R, device=device)
    node = torch.zeros(R, dtype=torch.long, device=device)
    a, b, c = corners[:, 0], corners[:, 1], corners[:, 2]
    while ray.numel():
        lo, hi, org, fl = bvh.lo[node], bvh.hi[node], o[ray], flat[ray]
        ta = (lo - org) * inv[ray]
        tb = (hi - org) * inv[ray]
        between = (lo <= org) & (org <= hi)
        near_ax = torch.where(fl, torch.where(between, -inf, inf), torch.minimum(ta, tb))
        far_ax = torch.where(fl, torch.where(between, inf, -inf), torch.maximum(ta, tb))
        near = near_ax.amax(-1)
        far = far_ax.amin(-1) * grow
        keep = (far >= near) & (far >= 0) & (near <= best_t[ray])
        ray, node = ray[keep], node[keep]
        kids = bvh.children[node]
        leaf = kids[:, 0] < 0
        # leaves: (ray, triangle) pairs, tested at once
        lr, ln = ray[leaf], node[leaf]
        if lr.numel():
            faces = bvh.leaf_faces[ln]  # (n, leaf_size)
            real = faces >= 0
            pr = lr.unsqueeze(1).expand_as(faces)[real]
            pf = faces[real]
            for s in range(0, pr.numel(), max_pairs):
                r_, f_ = pr[s : s + max_pairs], pf[s : s + max_pairs]
                h = ray_triangle(o[r_], _take(shear, r_), a[f_], b[f_], c[f_])
                best_t, best_f = _reduce(best_t, best_f, r_, f_, torch.where(h.hit, h.t, inf))
        # internal nodes: pairs with both children
        ir, kn = ray[~leaf], kids[~leaf]
        ray = ir.repeat_interleave(2)
        node = kn.reshape(-1)
    return RayCast(best_t, best_f)


def cast_rays_brute_force(
    corners: torch.Tensor, o: torch.Tensor, d: torch.Tensor, max_pairs: int = 1 << 22
) -> RayCast:
    """`cast_rays` without a hierarchy: every ray against every triangle, ``max_pairs``
    (ray, triangle) pairs at a time. The reference. No gradient."""
    with torch.no_grad():
        d = d.detach()
        o = o.detach().expand_as(d)
        c = corners.detach()
        R, F = d.shape[0], c.shape[0]
        inf = torch.tensor(float("inf"), dtype=d.dtype, device=d.device)
        shear = ray_shear(d)
        rows = max(1, max_pairs // F)
        ts, fs = [], []
        for i in range(0, R, rows):
            sl = slice(i, i + rows)
            sh = Shear(*(p[sl].unsqueeze(1) for p in shear))
            h = ray_triangle(o[sl].unsqueeze(1), sh, c[:, 0], c[:, 1], c[:, 2])
            t = torch.where(h.hit, h.t, inf)  # (rows, F)
            best, face = t.min(1)  # the first (smallest) face among equal depths
            ts.append(best)
            fs.append(torch.where(torch.isfinite(best), face, -1))
        if not ts:
            e = d.new_zeros(0)
            return RayCast(e, e.long())
        return RayCast(torch.cat(ts), torch.cat(fs))
