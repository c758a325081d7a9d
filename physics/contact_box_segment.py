"""Box against sphere and capsule, batched over worlds and pairs (leading dims (B, K)).

A sphere is a capsule whose segment has zero length. Each pair has 3 slots, each a sphere of the
capsule's radius at one point of its segment, against the box by its closest point:

- slots 0 and 1: the segment's two ends (a lying capsule rests on both);
- slot 2: the segment point closest to the box, by a few alternating projections (segment
  point -> closest box point -> closest segment point; ``_PROJECTIONS`` of them), valid only
  strictly inside the segment (at an end it would repeat slot 0 or 1).

A sphere uses slot 0 only. The closest box point of a centre outside the box is its clamp to
the box; inside, the nearest face gives the normal and the (negative) distance.
"""

from __future__ import annotations

import torch

from .math3d import safe_norm

Tensor = torch.Tensor

_PROJECTIONS = 4
_INTERIOR = 1e-3  # of the segment's length, at each end


def _point_box(local: Tensor, half: Tensor, radius: Tensor) -> tuple[Tensor, Tensor]:
    """Body-frame normal (box to sphere) (..., 3) and signed distance (...) of spheres centred
    at ``local`` (..., 3) with ``radius`` (...) against the box of half extents ``half``."""
    clamped = torch.maximum(torch.minimum(local, half), -half)
    outside = local - clamped
    length = safe_norm(outside, keepdim=True)
    is_outside = length > 1e-9
    out_normal = outside / torch.where(is_outside, length, 1.0)
    # Inside: leave through the nearest face.
    room = half - local.abs()
    face = room.argmin(-1, keepdim=True)
    towards = torch.where(local >= 0, 1.0, -1.0).to(local.dtype)
    in_normal = (face == torch.arange(3, device=face.device)).to(local.dtype) * towards
    normal = torch.where(is_outside, out_normal, in_normal)
    gap = torch.where(is_outside, length, -torch.gather(room, -1, face))[..., 0]
    return normal, gap - radius


def _closest_parameter(start: Tensor, delta: Tensor, half: Tensor) -> Tensor:
    """Parameter t in [0, 1] of the segment point (body frame) closest to the box, (...)."""
    length2 = (delta * delta).sum(-1)
    safe = torch.where(length2 > 1e-12, length2, 1.0)
    t = torch.full_like(length2, 0.5)
    for _ in range(_PROJECTIONS):
        point = start + t[..., None] * delta
        nearest = torch.maximum(torch.minimum(point, half), -half)
        t = (((nearest - start) * delta).sum(-1) / safe).clamp(0.0, 1.0)
    return torch.where(length2 > 1e-12, t, 0.0)


def box_segment(pos_box: Tensor, rot_box: Tensor, half: Tensor, centre: Tensor,
                half_axis: Tensor, radius: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """Contacts of a box (a) with a sphere or capsule (b).

    Args:
        pos_box, rot_box, half: (..., 3), (..., 3, 3), (..., 3) the box's centre, rotation and
            half extents.
        centre, half_axis: (..., 3) the segment's centre and half axis (zero for a sphere);
        radius: (...).

    Returns:
        normal (..., 3, 3) box to sphere/capsule, point (..., 3, 3) on the capsule's surface,
        distance (..., 3) signed gap (m), valid (..., 3) bool, per slot.
    """
    # Body frame: rot_box^T v, as a product and a sum (cheaper than tiny batched matmuls).
    local_centre = ((centre - pos_box)[..., :, None] * rot_box).sum(-2)
    local_axis = (half_axis[..., :, None] * rot_box).sum(-2)
    start, delta = local_centre - local_axis, 2 * local_axis
    t = _closest_parameter(start, delta, half)
    ends = torch.stack([torch.zeros_like(t), torch.ones_like(t)], -1)
    parameters = torch.cat([ends, t[..., None]], -1)  # (..., 3)
    local = start[..., None, :] + parameters[..., None] * delta[..., None, :]
    normal, distance = _point_box(local, half[..., None, :], radius[..., None])
    normal = (rot_box[..., None, :, :] * normal[..., None, :]).sum(-1)
    world_centres = pos_box[..., None, :] + (rot_box[..., None, :, :] * local[..., None, :]).sum(-1)
    point = world_centres - radius[..., None, None] * normal
    segment = (delta * delta).sum(-1) > 1e-12
    interior = (t > _INTERIOR) & (t < 1 - _INTERIOR)
    valid = torch.stack([torch.ones_like(segment), segment, segment & interior], -1)
    return normal, point, distance, valid
