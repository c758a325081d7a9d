"""Box-box contact manifolds, batched over worlds and pairs (leading dims (B, K)).

A separating-axis test over the 15 axes (3 + 3 face normals, 9 edge-edge cross products) picks
the axis of largest separation (negative: penetration depth). A face axis is preferred to an
edge axis unless the edge separates by ``_EDGE_TOLERANCE`` more, and box a's face to box b's
unless b's separates by ``_FACE_TOLERANCE`` more, so that resting contacts do not flicker.

- Face axis: the reference face (the chosen box's face along the axis, towards the other box)
  clips the incident face (the other box's face most anti-parallel to it) by Sutherland-Hodgman
  against the reference face's four side planes: up to 8 points, each with its separation from
  the reference plane. Points more than ``_MANIFOLD_BAND`` above the deepest are dropped, then
  the manifold is reduced to 4 points of largest spread (the deepest, the farthest from it, the
  two of largest positive and negative area with those two).
- Edge axis: one point, the closest points of the two edges.

Every result has a fixed shape: 4 slots and a validity mask; speculative (a positive distance
is a gap, the solver decides which slots are active). Cylinders collide here as the box of the
same extents ([2r, 2r, length]): see `physics.collision_pairs`.
"""

from __future__ import annotations

import torch

from .contact_geometry import closest_segment_parameters, gather_rows, sign
from .math3d import safe_norm

Tensor = torch.Tensor

_FACE_TOLERANCE = 5e-4  # m
_EDGE_TOLERANCE = 1e-3  # m
_MANIFOLD_BAND = 0.02  # m above the deepest point
_POLYGON = 8  # a quad clipped by four half-planes has at most 8 vertices
_BIG = 1e9


def _separations(d: Tensor, axes_a: Tensor, half_a: Tensor, axes_b: Tensor, half_b: Tensor):
    """Separation along each of the 15 axes, (..., 15), and the axes (..., 15, 3).

    d: (..., 3) centre of b minus centre of a; axes_*: (..., 3, 3) one box axis per row.
    Near-parallel edge pairs (no cross product) get a separation of -_BIG.
    """
    cross = torch.linalg.cross(axes_a[..., :, None, :], axes_b[..., None, :, :]).flatten(-3, -2)
    length = safe_norm(cross, keepdim=True)
    usable = length[..., 0] > 1e-6
    edge_axes = cross / torch.where(length > 1e-6, length, 1.0)
    axes = torch.cat([axes_a, axes_b, edge_axes], -2)  # (..., 15, 3)
    extent_a = ((axes @ axes_a.transpose(-1, -2)).abs() * half_a[..., None, :]).sum(-1)
    extent_b = ((axes @ axes_b.transpose(-1, -2)).abs() * half_b[..., None, :]).sum(-1)
    separation = (axes * d[..., None, :]).sum(-1).abs() - extent_a - extent_b
    usable = torch.cat([torch.ones_like(usable[..., :6]), usable], -1)
    return torch.where(usable, separation, -_BIG), axes


def _clip(polygon: Tensor, count: Tensor, axis: Tensor, offset: Tensor):
    """One Sutherland-Hodgman pass: keep the part of the polygon with ``p . axis <= offset``.

    polygon: (..., M, 3) vertices in order, the first ``count`` (...) valid; axis (..., 3),
    offset (...). Returns the clipped polygon, compacted to the same M slots, and its count.
    """
    slots = polygon.shape[-2]
    index = torch.arange(slots, device=polygon.device)
    valid = index < count[..., None]
    following = torch.where(index + 1 < count[..., None], index + 1, 0)
    following_point = gather_rows(polygon, following)
    gap = (polygon * axis[..., None, :]).sum(-1) - offset[..., None]
    following_gap = torch.gather(gap, -1, following)
    inside, following_inside = gap <= 0, following_gap <= 0
    denominator = gap - following_gap
    safe = torch.where(denominator.abs() > 1e-12, denominator, 1.0)
    t = (gap / safe).clamp(0.0, 1.0)
    crossing = polygon + t[..., None] * (following_point - polygon)
    candidates = torch.stack([polygon, crossing], -2).flatten(-3, -2)  # v0, x0, v1, x1, ...
    keep = torch.stack([valid & inside, valid & (inside != following_inside)], -1).flatten(-2)
    order = torch.sort((~keep).to(torch.uint8), dim=-1, stable=True).indices[..., :slots]
    return gather_rows(candidates, order), keep.sum(-1).clamp(max=slots)


def _reduce(points: Tensor, separation: Tensor, keep: Tensor, normal: Tensor):
    """Up to 4 of the M candidate points (..., M, 3) that span the manifold: indices (..., 4)
    and validity (..., 4)."""
    first = torch.where(keep, separation, _BIG).argmin(-1)
    p1 = gather_rows(points, first[..., None])
    spread = ((points - p1) ** 2).sum(-1)
    second = torch.where(keep, spread, -1.0).argmax(-1)
    p2 = gather_rows(points, second[..., None])
    area = (torch.linalg.cross(p1 - points, p2 - points) * normal[..., None, :]).sum(-1)
    third = torch.where(keep, area, -_BIG).argmax(-1)
    fourth = torch.where(keep, area, _BIG).argmin(-1)
    index = torch.stack([first, second, third, fourth], -1)
    picked_spread = torch.gather(spread, -1, second[..., None])[..., 0]
    picked_area = torch.gather(area, -1, index[..., 2:])
    valid = torch.stack(
        [
            keep.any(-1),
            picked_spread > 1e-8,
            picked_area[..., 0] > 1e-8,
            picked_area[..., 1] < -1e-8,
        ],
        -1,
    )
    return index, valid


def _face_manifold(d, axes_a, half_a, axes_b, half_b, pos_a, pos_b, use_b, face):
    """The clipped manifold of a face axis: normal (a to b) (..., 3), points on b (..., 4, 3),
    distances (..., 4), validity (..., 4). ``use_b``: b holds the reference face; ``face``:
    its axis index (0-2)."""
    flip = use_b[..., None]
    ref_axes = torch.where(flip[..., None], axes_b, axes_a)
    inc_axes = torch.where(flip[..., None], axes_a, axes_b)
    ref_half, inc_half = torch.where(flip, half_b, half_a), torch.where(flip, half_a, half_b)
    ref_pos, inc_pos = torch.where(flip, pos_b, pos_a), torch.where(flip, pos_a, pos_b)
    towards = torch.where(flip, -d, d)  # reference centre to incident centre
    axis = gather_rows(ref_axes, face[..., None])[..., 0, :]
    normal = sign((axis * towards).sum(-1))[..., None] * axis  # out of the reference face
    depth = torch.gather(ref_half, -1, face[..., None])[..., 0]
    centre = ref_pos + depth[..., None] * normal

    # Incident face: the other box's face most anti-parallel to the reference normal.
    facing = (inc_axes * normal[..., None, :]).sum(-1)  # (..., 3)
    inc = facing.abs().argmax(-1)
    rolled = torch.stack([inc, (inc + 1) % 3, (inc + 2) % 3], -1)
    inc_axes = gather_rows(inc_axes, rolled)
    inc_half = torch.gather(inc_half, -1, rolled)
    inc_sign = -sign(torch.gather(facing, -1, inc[..., None]))
    inc_centre = inc_pos + inc_sign * inc_half[..., :1] * inc_axes[..., 0, :]
    edge_1 = inc_half[..., 1:2] * inc_axes[..., 1, :]
    edge_2 = inc_half[..., 2:3] * inc_axes[..., 2, :]
    corners = [edge_1 + edge_2, -edge_1 + edge_2, -edge_1 - edge_2, edge_1 - edge_2]
    polygon = inc_centre[..., None, :] + torch.stack(corners, -2)
    polygon = torch.cat([polygon, polygon[..., :1, :].expand_as(polygon)], -2)  # 8 slots
    count = torch.full(polygon.shape[:-2], 4, dtype=torch.long, device=polygon.device)

    # Clip by the reference face's four side planes.
    sides = torch.stack([(face + 1) % 3, (face + 2) % 3], -1)
    side_axes = gather_rows(ref_axes, sides)
    side_half = torch.gather(ref_half, -1, sides)
    for k in range(2):
        for s in (1.0, -1.0):
            side = s * side_axes[..., k, :]
            offset = (side * ref_pos).sum(-1) + side_half[..., k]
            polygon, count = _clip(polygon, count, side, offset)

    separation = ((polygon - centre[..., None, :]) * normal[..., None, :]).sum(-1)
    keep = torch.arange(_POLYGON, device=polygon.device) < count[..., None]
    deepest = torch.where(keep, separation, _BIG).amin(-1, keepdim=True)
    keep = keep & (separation <= deepest + _MANIFOLD_BAND)
    index, valid = _reduce(polygon, separation, keep, normal)
    points = gather_rows(polygon, index)
    distance = torch.gather(separation, -1, index)
    # The point on b: the incident point when b is incident, else its projection on b's face.
    on_reference = points - distance[..., None] * normal[..., None, :]
    points = torch.where(flip[..., None], on_reference, points)
    return torch.where(flip, -normal, normal), points, distance, valid


def _edge_manifold(d, axes_a, half_a, axes_b, half_b, pos_a, pos_b, axis, edge):
    """One point for an edge-edge axis ``axis`` (..., 3) = a's axis edge // 3 x b's edge % 3:
    normal (a to b), the point on b's edge (..., 3), the distance (...)."""
    normal = sign((axis * d).sum(-1))[..., None] * axis
    along_a, along_b = edge // 3, edge % 3
    mask_a = torch.nn.functional.one_hot(along_a, 3).to(d.dtype)
    mask_b = torch.nn.functional.one_hot(along_b, 3).to(d.dtype)
    # Each box's edge nearest the other: the other axes' half extents, towards the other box.
    toward_a = sign((axes_a * normal[..., None, :]).sum(-1)) * half_a * (1 - mask_a)
    toward_b = -sign((axes_b * normal[..., None, :]).sum(-1)) * half_b * (1 - mask_b)
    centre_a = pos_a + (toward_a[..., None] * axes_a).sum(-2)
    centre_b = pos_b + (toward_b[..., None] * axes_b).sum(-2)
    direction_a = ((mask_a * half_a)[..., None] * axes_a).sum(-2)  # half edge
    direction_b = ((mask_b * half_b)[..., None] * axes_b).sum(-2)
    start_a, start_b = centre_a - direction_a, centre_b - direction_b
    s, t = closest_segment_parameters(start_a, 2 * direction_a, start_b, 2 * direction_b)
    closest_a = start_a + s[..., None] * 2 * direction_a
    closest_b = start_b + t[..., None] * 2 * direction_b
    return normal, closest_b, ((closest_b - closest_a) * normal).sum(-1)


def box_box(pos_a: Tensor, rot_a: Tensor, half_a: Tensor, pos_b: Tensor, rot_b: Tensor,
            half_b: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """Contact manifold of boxes a and b.

    Args:
        pos_*: (..., 3) centres; rot_*: (..., 3, 3) world_from_body; half_*: (..., 3) half
            extents (m).

    Returns:
        normal: (..., 3) unit, from a to b (shared by the 4 slots).
        point: (..., 4, 3) contact points on b's surface.
        distance: (..., 4) signed gap along the normal (m), negative when penetrating.
        valid: (..., 4) bool: which slots hold a contact point.
    """
    d = pos_b - pos_a
    axes_a, axes_b = rot_a.transpose(-1, -2), rot_b.transpose(-1, -2)
    separation, axes = _separations(d, axes_a, half_a, axes_b, half_b)
    face_a_sep, face_a = separation[..., :3].max(-1)
    face_b_sep, face_b = separation[..., 3:6].max(-1)
    edge_sep, edge = separation[..., 6:].max(-1)
    use_b = face_b_sep > face_a_sep + _FACE_TOLERANCE
    face_sep = torch.where(use_b, face_b_sep, face_a_sep)
    use_edge = edge_sep > face_sep + _EDGE_TOLERANCE
    face = torch.where(use_b, face_b, face_a)
    normal, point, distance, valid = _face_manifold(
        d, axes_a, half_a, axes_b, half_b, pos_a, pos_b, use_b, face
    )
    edge_axis = gather_rows(axes[..., 6:, :], edge[..., None])[..., 0, :]
    edge_normal, edge_point, edge_distance = _edge_manifold(
        d, axes_a, half_a, axes_b, half_b, pos_a, pos_b, edge_axis, edge
    )
    slot = torch.arange(4, device=d.device)
    normal = torch.where(use_edge[..., None], edge_normal, normal)
    point = torch.where(use_edge[..., None, None], edge_point[..., None, :], point)
    distance = torch.where(use_edge[..., None], edge_distance[..., None], distance)
    valid = torch.where(use_edge[..., None], slot == 0, valid)
    return normal, point, distance, valid
