"""Lambert shading, shared by every path: ``shade = ambient + intensity * max(0, n . l)``.

``n`` is the unit surface normal and ``l`` the unit vector towards the light, both in the
primitive's local frame (``Light.direction``). Two-sided surfaces use the normal facing the
camera (against the ray direction ``d``).
"""

from __future__ import annotations

import torch

from ..primitives import surface_normal


def lambert(cos, ambient, intensity):
    """Shading factor from the cosine ``n . l`` (any shape): ambient + intensity * max(0, cos)."""
    return ambient + intensity * cos.clamp(min=0)


def shade_at(code: int, p, d, h, light_dir, ambient, intensity, two_sided: bool):
    """Shading factor (...) at local hit points ``p`` (..., 3) of a primitive of kind ``code``
    with half sizes ``h`` and ray directions ``d`` (broadcast against ``p``); ``light_dir``
    (..., 3) unit direction towards the light (local frame).

    ``two_sided``: flip the normal towards the camera where it faces away. The hard-edge paths
    flip for every kind; soft edges only for planar kinds, since closed solids keep the outward
    normal there (the camera sees their outside, and at the points soft edges shade for rays
    that miss, the closest approach, n . d is 0 up to rounding, so a sign test would flicker).
    """
    n = surface_normal(code, p, h)
    n = n / torch.linalg.vector_norm(n, dim=-1, keepdim=True).clamp(min=1e-12)
    if two_sided:
        n = torch.where((n * d).sum(-1, keepdim=True) > 0, -n, n)
    return lambert((n * light_dir).sum(-1), ambient, intensity)


def planar_shade(oz, light_z, ambient, intensity):
    """Shading factor of planar primitives, per (b, k): their normal is body +z, flipped
    towards the camera (two-sided), so ``n . l = +-l_z`` by the side ``oz`` (the camera's
    local z) is on. oz, light_z: (B, K, 1)."""
    return lambert(torch.where(oz >= 0, light_z, -light_z), ambient, intensity)
