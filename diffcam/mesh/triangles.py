"""The watertight ray-triangle test of Woop, Benthin and Wald (2013), batched in torch.

A ray is sheared and scaled so that it runs along +z from the origin (its largest direction
component becomes z, the order of the other two kept right-handed); the three 2D edge
functions U, V, W of the triangle's sheared corners then decide the hit. Two triangles that
share an edge compute that edge's function from the same two corners by the same operations,
so a ray through a shared edge (or vertex) hits at least one of them: no gaps between the
triangles of a closed mesh. Both sides of a triangle are hit.

Everything is written by components on broadcastable tensors, autograd-safe (no division by
zero, no NaN gradients): the no-grad hit search and the differentiable recomputation of a
winner's depth and barycentric coordinates share `ray_triangle`.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

__all__ = ["Shear", "TriangleHit", "ray_shear", "ray_triangle"]


class Shear(NamedTuple):
    """A ray's shear to +z (Woop et al. 2013): per ray (...,), the rows ``px``, ``py``,
    ``pz`` (..., 3) of the map ``x -> (x_kx - Sx x_kz, x_ky - Sy x_kz, Sz x_kz)`` (exact zeros
    off the two components each uses, so ``px . x`` rounds as Woop's expression does)."""

    px: torch.Tensor
    py: torch.Tensor
    pz: torch.Tensor


class TriangleHit(NamedTuple):
    """t (...,) ray parameter of the hit (1 where missed; the units of the direction's
    length: with camera-frame z = 1 directions, the depth in m); bary (..., 3) barycentric
    weights of the corners a, b, c (sum to 1); hit (...,) bool."""

    t: torch.Tensor
    bary: torch.Tensor
    hit: torch.Tensor


def ray_shear(d: torch.Tensor) -> Shear:
    """The :class:`Shear` of ray directions ``d`` (..., 3) (any length, not zero)."""
    kz = d.abs().argmax(-1)
    kx = (kz + 1) % 3
    ky = (kx + 1) % 3
    dz = d.gather(-1, kz.unsqueeze(-1)).squeeze(-1)
    # keep the winding: swapping x and y when d_z < 0 keeps the sheared frame right-handed
    kx, ky = torch.where(dz < 0, ky, kx), torch.where(dz < 0, kx, ky)
    dz_s = torch.where(dz == 0, torch.ones_like(dz), dz)
    sx = d.gather(-1, kx.unsqueeze(-1)).squeeze(-1) / dz_s
    sy = d.gather(-1, ky.unsqueeze(-1)).squeeze(-1) / dz_s
    sz = 1.0 / dz_s
    ex, ey, ez = (torch.nn.functional.one_hot(k, 3).to(d.dtype) for k in (kx, ky, kz))
    return Shear(ex - sx.unsqueeze(-1) * ez, ey - sy.unsqueeze(-1) * ez, sz.unsqueeze(-1) * ez)


def _components(x: torch.Tensor):
    """The three components of ``x`` (..., 3), each contiguous: the per-pair arithmetic
    below then runs on contiguous memory (a strided last-axis slice of a (rows, F, 3)
    broadcast is several times slower)."""
    return tuple(c.contiguous() for c in x.unbind(-1))


def _sheared(corner, origin, px, py, pz):
    """A corner's sheared coordinates relative to the ray origin: (x, y, z) each (...),
    from components ``corner``, ``origin`` and the shear rows ``px``, ``py``, ``pz``."""
    r = [c - q for c, q in zip(corner, origin, strict=True)]
    return (
        r[0] * px[0] + r[1] * px[1] + r[2] * px[2],
        r[0] * py[0] + r[1] * py[1] + r[2] * py[2],
        r[0] * pz[0] + r[1] * pz[1] + r[2] * pz[2],
    )


def ray_triangle(
    o: torch.Tensor,
    shear: Shear,
    a: torch.Tensor,
    b: torch.Tensor,
    c: torch.Tensor,
    t_min: float | None = None,
) -> TriangleHit:
    """The :class:`TriangleHit` of rays from ``o`` (..., 3) with shear ``shear``
    (`ray_shear` of their directions) and triangles with corners ``a``, ``b``, ``c``
    (..., 3), all broadcastable; only hits with ``t > t_min`` count (default 1e-9 in
    float64, 1e-5 otherwise). Differentiable in ``o``, the directions (through ``shear``)
    and the corners; the hit mask is piecewise constant."""
    if t_min is None:
        t_min = 1e-9 if o.dtype == torch.float64 else 1e-5
    oc = _components(o)
    px, py, pz = (_components(p) for p in shear)
    ax, ay, az = _sheared(_components(a), oc, px, py, pz)
    bx, by, bz = _sheared(_components(b), oc, px, py, pz)
    cx, cy, cz = _sheared(_components(c), oc, px, py, pz)
    u = cx * by - cy * bx
    v = ax * cy - ay * cx
    w = bx * ay - by * ax
    if u.dtype != torch.float64 and not torch.is_grad_enabled():
        # Woop et al.: an edge function that rounds to exactly 0 in single precision is
        # recomputed in double, so that its sign is that of the exact value
        zero = (u == 0) | (v == 0) | (w == 0)
        if bool(zero.any()):
            u64 = cx.double() * by.double() - cy.double() * bx.double()
            v64 = ax.double() * cy.double() - ay.double() * cx.double()
            w64 = bx.double() * ay.double() - by.double() * ax.double()
            u = torch.where(zero, u64.to(u.dtype), u)
            v = torch.where(zero, v64.to(v.dtype), v)
            w = torch.where(zero, w64.to(w.dtype), w)
    det = u + v + w
    inside = ((u >= 0) & (v >= 0) & (w >= 0)) | ((u <= 0) & (v <= 0) & (w <= 0))
    ok = inside & (det != 0)
    det_s = torch.where(ok, det, torch.ones_like(det))
    tz = u * az + v * bz + w * cz
    t = tz / det_s
    hit = ok & (t > t_min)
    bary = torch.stack([u, v, w], -1) / det_s.unsqueeze(-1)
    return TriangleHit(torch.where(hit, t, torch.ones_like(t)), bary, hit)
