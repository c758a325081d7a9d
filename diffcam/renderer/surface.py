"""Texture coordinates and Lambert shading at local surface points, by components (the
`geometry` module's layout: x, y, z as separate (nb, n) tensors, per-image sizes as (nb, 1)
columns), for soft samples and hard hits alike. The arithmetic of ``primitives.surface_uv``
and ``shading.shade_at`` (tests/diffcam/test_geometry.py holds them to those in float64)."""

from __future__ import annotations

import math

import torch

from .._safe import safe_atan2, safe_sqrt
from ..primitives import BOX, CYLINDER, PLANE, RECT, SPHERE, longitude
from .geometry import Vec, clamp_symmetric
from .shading import lambert


def _on_cylinder_cap(p: Vec, r, hl):
    """Whether points ``p`` lie on a cylinder's caps rather than its side:
    |z| / hl > rho / r, without dividing (as ``primitives``)."""
    return p.z.abs() * r > safe_sqrt(p.x * p.x + p.y * p.y) * hl


def _box_face(p: Vec, h: Vec):
    """``primitives._box_face``: the face a point is on, as bool masks on the x face, on the
    y face (else z), and whether it is the face on the positive side (no autograd)."""
    p, h = Vec(*(x.detach() for x in p)), Vec(*(x.detach() for x in h))
    rx, ry, rz = (pi.abs() / torch.where(hi > 0, hi, 1.0) for pi, hi in zip(p, h, strict=True))
    on_x = (rx >= ry) & (rx >= rz)
    on_y = ~on_x & (ry >= rz)
    return on_x, on_y, torch.where(on_x, p.x, torch.where(on_y, p.y, p.z)) >= 0


def texture_coords(code: int, p: Vec, h: Vec):
    """``primitives.surface_uv`` (u, v), each (nb, n), of local points ``p``."""
    if code == PLANE:
        return p.x, p.y
    if code == RECT:
        return clamp_symmetric(p.x, h.x) / (2 * h.x) + 0.5, clamp_symmetric(p.y, h.y) / (
            2 * h.y
        ) + 0.5
    if code == SPHERE:
        rho = safe_sqrt(p.x * p.x + p.y * p.y)
        return longitude(p.x, p.y), 0.5 + safe_atan2(p.z, rho) / math.pi
    if code == BOX:
        sx, sy, sz = (clamp_symmetric(pi, hi) / (2 * hi) for pi, hi in zip(p, h, strict=True))
        on_x, on_y, pos = _box_face(p, h)
        # u: sy on the x faces, -sx on the y faces, sx on the z faces; negated on the
        # negative sides (the sign applied as a factor of +-1: one select of sx or sy)
        flip = torch.where(pos != on_y, 1.0, -1.0).to(sx.dtype)
        u = flip * torch.where(on_x, sy, sx) + 0.5
        return u, torch.where(on_x | on_y, sz, sy) + 0.5
    r, hl = h.x, h.y
    if code == CYLINDER:
        cap = _on_cylinder_cap(p, r, hl)
        u_cap = torch.where(p.z >= 0, p.x, -p.x) / (2 * r) + 0.5
        v_cap = p.y / (2 * r) + 0.5
        v_side = clamp_symmetric(p.z, hl) / (2 * hl) + 0.5
        return torch.where(cap, u_cap, longitude(p.x, p.y)), torch.where(cap, v_cap, v_side)
    return longitude(p.x, p.y), (clamp_symmetric(p.z, hl + r) + hl + r) / (2 * hl + 2 * r)


def _normal(code: int, p: Vec, h: Vec) -> Vec:
    """An outward normal (not normalised) at local surface points ``p`` (not of a box:
    `shading` takes its faces' unit normals directly)."""
    if code == SPHERE:
        return p
    r, hl = h.x, h.y
    if code == CYLINDER:
        cap = _on_cylinder_cap(p, r, hl)
        n_z = torch.where(cap, torch.where(p.z >= 0, 1.0, -1.0), 0.0).to(p.x.dtype)
        return Vec(torch.where(cap, 0.0, p.x), torch.where(cap, 0.0, p.y), n_z)
    return Vec(p.x, p.y, p.z - clamp_symmetric(p.z, hl))


def shading(code: int, p: Vec, d: Vec, h: Vec, light: Vec, ambient, intensity, two_sided=None):
    """``shading.shade_at``: Lambert shading at local points ``p`` on rays ``d`` with the
    light direction ``light`` (unit). ``two_sided`` flips the normal to face the camera; by
    default (soft samples) planar kinds only, since at the closest approach of a ray that
    misses a solid ``n . d`` is 0 up to rounding (see ``shade_at``); hard hits flip for
    every kind."""
    if two_sided is None:
        two_sided = code in (PLANE, RECT)
    if code in (PLANE, RECT):
        lz = torch.where(d.z > 0, -light.z, light.z) if two_sided else light.z
        cos = lz.expand_as(d.z)
    elif code == BOX:  # the unit normal +-e_i of face i: n . v = +-v_i
        on_x, on_y, pos = _box_face(p, h)
        side = torch.where(pos, 1.0, -1.0).to(p.x.dtype)
        cos = side * torch.where(on_x, light.x, torch.where(on_y, light.y, light.z))
        if two_sided:
            cos = torch.where(
                side * torch.where(on_x, d.x, torch.where(on_y, d.y, d.z)) > 0, -cos, cos
            )
    else:
        n = _normal(code, p, h)
        length = safe_sqrt(n.dot(n)).clamp(min=1e-12)
        cos = n.dot(light) / length
        if two_sided:
            cos = torch.where(n.dot(d) > 0, -cos, cos)
    return lambert(cos, ambient, intensity)
