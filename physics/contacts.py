"""Contact geometry: every candidate pair's normal, point and signed distance.

Candidates are static (see `world._contact_candidates`): each is evaluated every step, whether
touching or not; the solver decides which are active. Two kinds, each fully vectorised:

- point-plane: a body point with a radius (sphere centre, capsule end centres, box corners,
  cylinder rim points) against an infinite plane (normal: the plane body's +z);
- segment-segment: spheres (segments of zero length) and capsules against each other.
"""

from __future__ import annotations

import dataclasses

import torch

from .math3d import safe_norm
from .world import World

Tensor = torch.Tensor


@dataclasses.dataclass
class Contacts:
    """c candidate contacts, from body a to body b.

    body_a, body_b: (c,) long body slots.
    normal: (B, c, 3) unit normal pointing from a to b.
    point: (B, c, 3) world contact point (on b's surface).
    distance: (B, c) signed gap (m): positive apart, negative penetrating.
    friction, restitution: (B, c) combined coefficients.
    """

    body_a: Tensor
    body_b: Tensor
    normal: Tensor
    point: Tensor
    distance: Tensor
    friction: Tensor
    restitution: Tensor


def _rotate(rotation: Tensor, vector: Tensor) -> Tensor:
    return (rotation @ vector[..., None])[..., 0]


def _take(tensor: Tensor, index: Tensor) -> Tensor:
    return tensor.index_select(1, index)


def _closest_segment_parameters(
    start_a: Tensor, delta_a: Tensor, start_b: Tensor, delta_b: Tensor
) -> tuple[Tensor, Tensor]:
    """Parameters s, t in [0, 1] of the closest points of two segments (Ericson, RTCD 5.1.9).

    Handles degenerate (zero-length) segments and parallel ones without NaN gradients.
    """
    eps = 1e-12
    offset = start_a - start_b
    aa = (delta_a * delta_a).sum(-1)
    ee = (delta_b * delta_b).sum(-1)
    f = (delta_b * offset).sum(-1)
    c = (delta_a * offset).sum(-1)
    b = (delta_a * delta_b).sum(-1)
    a_point, b_point = aa <= eps, ee <= eps
    safe_aa = torch.where(a_point, 1.0, aa)
    safe_ee = torch.where(b_point, 1.0, ee)
    denom = aa * ee - b * b
    parallel = denom <= eps * torch.clamp(aa * ee, min=eps)
    s_general = torch.where(parallel, 0.0, (b * f - c * ee) / torch.where(parallel, 1.0, denom))
    s = s_general.clamp(0.0, 1.0)
    t = (b * s + f) / safe_ee
    # Clamp t, then recompute s for the clamped t.
    s = torch.where(
        t < 0,
        (-c / safe_aa).clamp(0.0, 1.0),
        torch.where(t > 1, ((b - c) / safe_aa).clamp(0.0, 1.0), s),
    )
    t = t.clamp(0.0, 1.0)
    # Degenerate cases.
    s = torch.where(a_point, 0.0, torch.where(b_point, (-c / safe_aa).clamp(0.0, 1.0), s))
    t = torch.where(
        a_point,
        torch.where(b_point, 0.0, (f / safe_ee).clamp(0.0, 1.0)),
        torch.where(b_point, 0.0, t),
    )
    return s, t


def _combine(world: World, body_a: Tensor, body_b: Tensor, batch: int) -> tuple[Tensor, Tensor]:
    friction_a = _take(world.friction, body_a)
    friction_b = _take(world.friction, body_b)
    product = friction_a * friction_b
    # Geometric mean (Box2D / ODE habit), with a finite gradient at zero friction.
    positive = product > 1e-12
    friction = torch.where(positive, torch.sqrt(torch.where(positive, product, 1.0)), 0.0)
    restitution = torch.maximum(_take(world.restitution, body_a), _take(world.restitution, body_b))
    return friction, restitution


def find_contacts(world: World, position: Tensor, rotation: Tensor) -> Contacts:
    """Evaluate every candidate contact at the given poses (B, N, 3), (B, N, 3, 3)."""
    structure = world.structure
    plane, plane_body = structure.plane_contact_plane, structure.plane_contact_body
    seg_a, seg_b = structure.segment_contact_a, structure.segment_contact_b
    batch = position.shape[0]
    parts = []
    if plane.numel():
        size = _take(world.size, plane_body)  # (B, P, 3)
        local = (world.plane_contact_point_map @ size[..., None])[..., 0]
        radius = (world.plane_contact_radius_map * size).sum(-1)
        centre = _take(position, plane_body) + _rotate(_take(rotation, plane_body), local)
        normal = _take(rotation, plane)[..., :, 2]
        distance = (normal * (centre - _take(position, plane))).sum(-1) - radius
        point = centre - radius[..., None] * normal
        parts.append((plane, plane_body, normal, point, distance))
    if seg_a.numel():
        size_a, size_b = _take(world.size, seg_a), _take(world.size, seg_b)
        half_a = _rotate(_take(rotation, seg_a), (world.segment_map_a @ size_a[..., None])[..., 0])
        half_b = _rotate(_take(rotation, seg_b), (world.segment_map_b @ size_b[..., None])[..., 0])
        start_a, start_b = _take(position, seg_a) - half_a, _take(position, seg_b) - half_b
        s, t = _closest_segment_parameters(start_a, 2 * half_a, start_b, 2 * half_b)
        closest_a = start_a + s[..., None] * 2 * half_a
        closest_b = start_b + t[..., None] * 2 * half_b
        gap = closest_b - closest_a
        length = safe_norm(gap, keepdim=True)
        up = torch.zeros_like(gap)
        up[..., 2] = 1.0
        # Coincident centres have no direction: push along +z rather than produce NaN.
        normal = torch.where(length > 1e-9, gap / torch.where(length > 1e-9, length, 1.0), up)
        radius_a = (world.segment_radius_a * size_a).sum(-1)
        radius_b = (world.segment_radius_b * size_b).sum(-1)
        distance = length[..., 0] - radius_a - radius_b
        point = closest_b - radius_b[..., None] * normal
        parts.append((seg_a, seg_b, normal, point, distance))
    if not parts:
        empty = position.new_zeros(batch, 0)
        index = torch.zeros(0, dtype=torch.long, device=position.device)
        return Contacts(
            index,
            index,
            empty[..., None].expand(batch, 0, 3),
            empty[..., None].expand(batch, 0, 3),
            empty,
            empty,
            empty,
        )
    body_a = torch.cat([p[0] for p in parts])
    body_b = torch.cat([p[1] for p in parts])
    friction, restitution = _combine(world, body_a, body_b, batch)
    return Contacts(
        body_a=body_a,
        body_b=body_b,
        normal=torch.cat([p[2] for p in parts], 1),
        point=torch.cat([p[3] for p in parts], 1),
        distance=torch.cat([p[4] for p in parts], 1),
        friction=friction,
        restitution=restitution,
    )
