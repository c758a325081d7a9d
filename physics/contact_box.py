"""Box-box contact manifolds, batched over worlds and pairs (leading dims (B, K)).

A separating-axis test over the 15 axes (3 + 3 face normals, 9 edge-edge cross products) picks
the axis of largest separation (negative: penetration depth). A face axis is preferred to an
edge axis unless the edge separates by ``_EDGE_TOLERANCE`` more, and box a's face to box b's
unless b's separates by ``_FACE_TOLERANCE`` more, so that resting contacts do not flicker.

- Face axis: the reference face (the chosen box's face along the axis, towards the other box)
  clips the incident face (the other box's face most anti-parallel to it). Both are rectangles,
  so the clipped polygon's vertices are found all at once (what Sutherland-Hodgman clipping by
  the reference face's four side planes would give, without its sequential passes), in the
  reference face's frame (u, v along its sides, w along its outward normal): the incident
  corners inside the reference face, the crossings of the incident edges with the reference
  face's sides, and the reference corners inside the incident face (on the incident plane).
  Each candidate's w is its separation from the reference plane. Points more than
  ``_MANIFOLD_BAND`` above the deepest are dropped, then the manifold is reduced to 4 points of
  largest spread (the deepest, the farthest from it, the two of largest positive and negative
  area with those two).
- Edge axis: one point, the closest points of the two edges.

Which axis, face and points are used is decided without gradient (the active set); the chosen
points' positions and distances are differentiable in both boxes' poses and sizes.

Every result has a fixed shape: 4 slots and a validity mask; speculative (a positive distance
is a gap, the solver decides which slots are active). Cylinders collide here as the box of the
same extents ([2r, 2r, length]): see `physics.collision_pairs`.
"""

from __future__ import annotations

import torch

from .contact_geometry import gather_rows, sign
from .math3d import safe_norm

Tensor = torch.Tensor

_FACE_TOLERANCE = 5e-4  # m
_EDGE_TOLERANCE = 1e-3  # m
_MANIFOLD_BAND = 0.02  # m above the deepest point
_BIG = 1e9
# Corners of a rectangle with half sides (h1, h2), in order around it: rows (1, s1, s2) of
# ``centre + s1 h1 side_1 + s2 h2 side_2``.
_CORNERS = [[1.0, 1.0, 1.0], [1.0, -1.0, 1.0], [1.0, -1.0, -1.0], [1.0, 1.0, -1.0]]


def _separations(d: Tensor, axes_a: Tensor, half_a: Tensor, axes_b: Tensor, half_b: Tensor,
                 cross: Tensor, length: Tensor) -> tuple[Tensor, Tensor]:  # fmt: skip
    """Separation along the 6 face axes (..., 2, 3) (a's, b's) and the 9 edge axes (..., 3, 3)
    (a's axis i, b's axis j), in a's frame (Gottschalk's OBB test).

    d: (..., 3) centre of b minus centre of a; axes_*: (..., 3, 3) one box axis per row;
    cross, length: (..., 3, 3, 3), (..., 3, 3) the edge cross products a_i x b_j and their
    lengths. Near-parallel edge pairs (no cross product) get a separation of -_BIG.
    """
    c = (axes_a[..., :, None, :] * axes_b[..., None, :, :]).sum(-1)  # c[i, j] = a_i . b_j
    size = c.abs()
    d_a = (axes_a * d[..., None, :]).sum(-1)
    d_b = (axes_b * d[..., None, :]).sum(-1)
    face_a = d_a.abs() - half_a - (size * half_b[..., None, :]).sum(-1)
    face_b = d_b.abs() - half_b - (size * half_a[..., :, None]).sum(-2)
    # Axis a_i x b_j: the extent of a along it is h_a[i+1] |c[i+2, j]| + h_a[i+2] |c[i+1, j]|
    # (indices mod 3), of b likewise h_b[j+1] |c[i, j+2]| + h_b[j+2] |c[i, j+1]|.
    extent_a = half_a.roll(-1, -1)[..., :, None] * size.roll(-2, -2)
    extent_a = extent_a + half_a.roll(-2, -1)[..., :, None] * size.roll(-1, -2)
    extent_b = half_b.roll(-1, -1)[..., None, :] * size.roll(-2, -1)
    extent_b = extent_b + half_b.roll(-2, -1)[..., None, :] * size.roll(-1, -1)
    along = (cross * d[..., None, None, :]).sum(-1).abs()
    usable = length > 1e-6
    edge = (along - extent_a - extent_b) / torch.where(usable, length, 1.0)
    face = torch.stack([face_a, face_b], -2)
    return face, torch.where(usable, edge, -_BIG)


def _pick_axis(pos: Tensor, axes: Tensor, half: Tensor):
    """The separating-axis decision (call without gradient) for centres (..., 2, 3), axes
    (..., 2, 3, 3) and half extents (..., 2, 3) of a and b: ``use_b`` (b holds the reference
    face), ``face`` (its axis, 0-2), ``use_edge`` and ``edge`` (0-8, a's axis // 3 x b's % 3)."""
    axes_a, axes_b = axes[..., 0, :, :], axes[..., 1, :, :]
    cross = torch.linalg.cross(axes_a[..., :, None, :], axes_b[..., None, :, :])
    length = (cross * cross).sum(-1).sqrt()
    face_sep, edge_sep = _separations(
        pos[..., 1, :] - pos[..., 0, :], axes_a, half[..., 0, :], axes_b, half[..., 1, :],
        cross, length,
    )  # fmt: skip
    edge_sep = edge_sep.flatten(-2)
    best_face_sep, best_face = face_sep.amax(-1), face_sep.argmax(-1)  # (..., 2)
    use_b = best_face_sep[..., 1] > best_face_sep[..., 0] + _FACE_TOLERANCE
    face = torch.where(use_b, best_face[..., 1], best_face[..., 0])
    chosen_face_sep = torch.where(use_b, best_face_sep[..., 1], best_face_sep[..., 0])
    use_edge = edge_sep.amax(-1) > chosen_face_sep + _EDGE_TOLERANCE
    return use_b, face, use_edge, edge_sep.argmax(-1)


def _roll(boxes: Tensor, first: Tensor) -> Tensor:
    """Rows (first, first + 1, first + 2) mod 3 of packed boxes (..., 3, 4) (rows: axis, half
    extent), first (...) long."""
    index = (first[..., None] + torch.arange(3, device=first.device)) % 3
    return gather_rows(boxes, index)


def _frames(pos: Tensor, packed: Tensor, use_b: Tensor, face: Tensor):
    """Reference and incident faces. pos: (..., 2, 3) centres of a and b; packed: (..., 2, 3, 4)
    their axes (rows) with half extents in the last column.

    Returns frame (..., 3, 3) rows (side_1, side_2, normal) of the reference face, normal out of
    it towards the incident box; centre (..., 3) of the reference face; its half sides (..., 2);
    the incident face's centre and half-side vectors as rows (..., 3, 3) in that frame; the
    sign (...) that turns a 2D cross product of (u, v) into an area along the normal."""
    order = torch.stack([use_b, ~use_b], -1).long()  # (..., 2): reference, incident
    pos = torch.gather(pos, -2, order[..., None].expand(*order.shape, 3))
    packed = torch.gather(packed, -3, order[..., None, None].expand(*order.shape, 3, 4))
    reference = _roll(packed[..., 0, :, :], face)
    towards = pos[..., 1, :] - pos[..., 0, :]
    flip = sign((reference[..., 0, :3] * towards).sum(-1))
    normal = flip[..., None] * reference[..., 0, :3]
    frame = torch.stack([reference[..., 1, :3], reference[..., 2, :3], normal], -2)
    centre = pos[..., 0, :] + reference[..., 0, 3:] * normal
    # Incident face: the other box's face most anti-parallel to the reference normal.
    facing = (packed[..., 1, :, :3] * normal[..., None, :]).sum(-1)  # (..., 3)
    incident = _roll(packed[..., 1, :, :], facing.abs().argmax(-1))
    outward = -sign((incident[..., 0, :3] * normal).sum(-1))
    offset = torch.stack([outward, torch.ones_like(outward), torch.ones_like(outward)], -1)
    vectors = (offset * incident[..., 3])[..., None] * incident[..., :3]
    vectors = torch.cat([(pos[..., 1, :] - centre)[..., None, :], vectors], -2)
    # Rows: incident face centre (centre of its box + the offset to the face), half sides.
    local = (vectors[..., :, None, :] * frame[..., None, :, :]).sum(-1)
    local = torch.cat([local[..., :1, :] + local[..., 1:2, :], local[..., 2:, :]], -2)
    return frame, centre, reference[..., 1:, 3], local, flip


def _candidates(local: Tensor, half: Tensor) -> tuple[Tensor, Tensor]:
    """Vertices of the incident face clipped by the reference face, in the reference frame.

    local: (..., 3, 3) rows: the incident face's centre and its two half-side vectors;
    half: (..., 2) the reference face's half sides. Returns 24 candidate points (..., 24, 3)
    (4 incident corners, 16 edge-side crossings, 4 reference corners) and which are vertices
    of the clipped polygon (..., 24)."""
    corners = (local.new_tensor(_CORNERS)[:, :, None] * local[..., None, :, :]).sum(
        -2
    )  # (..., 4, 3), in order around the face
    uv = corners[..., :2]
    inside = uv.abs() <= half[..., None, :]
    inside = inside[..., 0] & inside[..., 1]
    # Incident edge k (corner k to k + 1) against side line s * (u, v)[axis] = half[axis]:
    # gaps (..., 4, 2, 2) indexed (edge, s, axis), <= 0 inside.
    following = corners.roll(-1, -2)
    gap = uv[..., :, None, :] * uv.new_tensor([[1.0], [-1.0]]) - half[..., None, None, :]
    following_gap = gap.roll(-1, -3)
    crossing = (gap <= 0) != (following_gap <= 0)
    denominator = gap - following_gap
    t = (gap / torch.where(denominator.abs() > 1e-12, denominator, 1.0)).clamp(0.0, 1.0)
    step = (following - corners)[..., :, None, None, :]
    crossed = corners[..., :, None, None, :] + t[..., None] * step  # (..., 4, 2, 2, 3)
    across = torch.diagonal(crossed[..., :2].flip(-1), dim1=-2, dim2=-1)  # the other coordinate
    crossing = crossing & (across.abs() <= half.flip(-1)[..., None, None, :])
    # Reference corners, lifted onto the incident plane, inside the incident face.
    base, sides = local[..., 0, :], local[..., 1:, :]
    plane = torch.linalg.cross(sides[..., 0, :], sides[..., 1, :])
    tilt = torch.where(plane[..., 2:].abs() > 1e-12, plane[..., 2:], 1.0)
    corner_uv = local.new_tensor(_CORNERS)[:, 1:] * half[..., None, :]  # (..., 4, 2)
    offset_uv = corner_uv - base[..., None, :2]
    rise = -(offset_uv * (plane[..., None, :2] / tilt[..., None, :])).sum(-1, keepdim=True)
    lifted = torch.cat([corner_uv, base[..., None, 2:] + rise], -1)
    offset = torch.cat([offset_uv, rise], -1)
    along = (offset[..., :, None, :] * sides[..., None, :, :]).sum(-1)  # (..., 4, 2)
    covered = along.abs() <= (sides * sides).sum(-1)[..., None, :]
    covered = covered[..., 0] & covered[..., 1]
    points = torch.cat([corners, crossed.flatten(-4, -2), lifted], -2)
    return points, torch.cat([inside, crossing.flatten(-3), covered], -1)


def reduce_manifold(points: Tensor, keep: Tensor, area_sign: Tensor) -> tuple[Tensor, Tensor]:
    """Up to 4 of the candidate points (..., M, 3) (reference frame: w is the separation) that
    span the manifold: indices (..., 4) and validity (..., 4). ``area_sign`` (...) turns the
    (u, v) cross product into the area along the contact normal."""
    separation = points[..., 2]
    deepest = torch.where(keep, separation, _BIG)
    keep = keep & (separation <= deepest.amin(-1, keepdim=True) + _MANIFOLD_BAND)
    first = deepest.argmin(-1, keepdim=True)
    spread = ((points - gather_rows(points, first)) ** 2).sum(-1)
    second = torch.where(keep, spread, -1.0).argmax(-1, keepdim=True)
    ends = gather_rows(points[..., :2], torch.cat([first, second], -1))  # (..., 2, 2)
    to_first = ends[..., None, 0, :] - points[..., :2]
    to_second = ends[..., None, 1, :] - points[..., :2]
    area = to_first[..., 0] * to_second[..., 1] - to_first[..., 1] * to_second[..., 0]
    area = area * area_sign[..., None]
    third = torch.where(keep, area, -_BIG).argmax(-1, keepdim=True)
    fourth = torch.where(keep, area, _BIG).argmin(-1, keepdim=True)
    index = torch.cat([first, second, third, fourth], -1)
    picked = torch.cat(
        [torch.gather(spread, -1, second), torch.gather(area, -1, index[..., 2:])], -1
    )
    valid = torch.cat(
        [keep.any(-1, keepdim=True), picked[..., :2] > 1e-8, picked[..., 2:] < -1e-8], -1
    )
    return index, valid


def _face_manifold(pos: Tensor, packed: Tensor, use_b: Tensor, face: Tensor):
    """The clipped manifold of a face axis: normal (a to b) (..., 3), points on b (..., 4, 3),
    distances (..., 4), validity (..., 4). ``use_b``: b holds the reference face; ``face``:
    its axis index (0-2)."""
    frame, centre, half, local, area_sign = _frames(pos, packed, use_b, face)
    points, keep = _candidates(local, half)
    with torch.no_grad():
        index, valid = reduce_manifold(points, keep, area_sign)
    chosen = gather_rows(points, index)
    # The point on b: the incident point when b is incident, else its projection on b's face.
    on_b = torch.stack([torch.ones_like(use_b), torch.ones_like(use_b), ~use_b], -1)
    point = centre[..., None, :] + (
        (chosen * on_b[..., None, :])[..., None] * frame[..., None, :, :]
    ).sum(-2)
    normal = torch.where(use_b[..., None], -frame[..., 2, :], frame[..., 2, :])
    return normal, point, chosen[..., 2], valid


def closest_edge_parameters(start: Tensor, delta: Tensor) -> Tensor:
    """Parameters (..., 2) in [0, 1] of the closest points of two box edges, start (..., 2, 3)
    + parameter * delta (..., 2, 3) (Ericson, RTCD 5.1.9: the general case of
    `closest_segment_parameters`, since a box's edges have a length; parallel edges take s = 0).
    """
    offset = start[..., 0, :] - start[..., 1, :]
    # Dot products of (delta_a, delta_b) with (delta_a, delta_b, offset): (..., 2, 3).
    dots = delta[..., :, None, :] * torch.stack([*delta.unbind(-2), offset], -2)[..., None, :, :]
    dots = dots.sum(-1)
    aa, b, c = dots[..., 0, 0], dots[..., 0, 1], dots[..., 0, 2]
    ee, f = dots[..., 1, 1], dots[..., 1, 2]
    denominator = aa * ee - b * b
    parallel = denominator <= 1e-12 * aa * ee
    s = ((b * f - c * ee) / torch.where(parallel, 1.0, denominator)).clamp(0.0, 1.0)
    s = torch.where(parallel, 0.0, s)
    t = (b * s + f) / ee
    clamped = t.clamp(0.0, 1.0)
    # Where t was clamped, s is the closest point to the clamped end.
    s = torch.where(t == clamped, s, ((b * clamped - c) / aa).clamp(0.0, 1.0))
    return torch.stack([s, clamped], -1)


def _edge_manifold(pos: Tensor, packed: Tensor, edge: Tensor):
    """One point for the edge-edge axis ``edge`` (...) (a's axis edge // 3 x b's edge % 3):
    normal (a to b) (..., 3), the point on b's edge (..., 3), the distance (...)."""
    axes, half = packed[..., :3], packed[..., 3]  # (..., 2, 3, 3), (..., 2, 3)
    along = torch.stack([edge // 3, edge % 3], -1)  # (..., 2): each box's edge direction
    directions = gather_rows(axes, along[..., None])[..., 0, :]  # (..., 2, 3)
    cross = torch.linalg.cross(directions[..., 0, :], directions[..., 1, :])
    length = safe_norm(cross, keepdim=True)
    axis = cross / torch.where(length > 1e-6, length, 1.0)
    normal = sign((axis * (pos[..., 1, :] - pos[..., 0, :])).sum(-1))[..., None] * axis
    mask = along[..., None] == torch.arange(3, device=edge.device)  # (..., 2, 3)
    # Each box's edge nearest the other: the other axes' half extents, towards the other box.
    towards = torch.stack([normal, -normal], -2)[..., None, :]  # (..., 2, 1, 3)
    offset = sign((axes * towards).sum(-1)) * half * ~mask
    weights = torch.stack([offset, half * mask], -2)  # (..., 2, 2, 3): centre, half edge
    centre_offset, direction = (weights[..., None] * axes[..., None, :, :]).sum(-2).unbind(-2)
    start = pos + centre_offset - direction
    closest = start + closest_edge_parameters(start, 2 * direction)[..., None] * 2 * direction
    gap = closest[..., 1, :] - closest[..., 0, :]
    return normal, closest[..., 1, :], (gap * normal).sum(-1)


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
    pos = torch.stack([pos_a, pos_b], -2)
    axes = torch.stack([rot_a, rot_b], -3).transpose(-1, -2)  # (..., 2, 3, 3) axes as rows
    half = torch.stack([half_a, half_b], -2)
    with torch.no_grad():
        use_b, face, use_edge, edge = _pick_axis(pos, axes, half)
    packed = torch.cat([axes, half[..., None]], -1)
    normal, point, distance, valid = _face_manifold(pos, packed, use_b, face)
    edges = _edge_manifold(pos, packed, edge)
    return choose_manifold(use_edge, (normal, point, distance, valid), edges)


def choose_manifold(use_edge: Tensor, face: tuple, edge: tuple) -> tuple:
    """Per pair, the edge-edge contact (one point, in slot 0) where ``use_edge`` (...) bool,
    else the face manifold. ``face``: normal (..., 3), point (..., 4, 3), distance (..., 4),
    valid (..., 4); ``edge``: normal (..., 3), point (..., 3), distance (...). Returns the
    face manifold's four tensors."""
    normal, point, distance, valid = face
    edge_normal, edge_point, edge_distance = edge
    slot = torch.arange(4, device=normal.device)
    normal = torch.where(use_edge[..., None], edge_normal, normal)
    point = torch.where(use_edge[..., None, None], edge_point[..., None, :], point)
    distance = torch.where(use_edge[..., None], edge_distance[..., None], distance)
    valid = torch.where(use_edge[..., None], slot == 0, valid)
    return normal, point, distance, valid
