"""Convex hulls against boxes, hulls, spheres and capsules, batched over worlds and pairs
(leading dims (B, P)).

A hull's faces and edges come from `physics.polyhedron` at build time, in its size units, padded
to the largest hull its role takes in the world (`physics.contacts._hulls`): K corners (padding repeats corner 0), F faces (``face_valid``)
whose loops have M corners (padding repeats a loop's last corner), E edges (``edge_valid``).
A box is the hull of its 8 corners. `Shapes` carries them in metres, in the world frame:
corners scale with the size, face normals with its inverse, so a size gradient moves both.

Hull against box or hull (`hull_hull`): a separating-axis test over both hulls' face normals
and the cross products of the edge pairs that make a face of their Minkowski difference
(Gregorius' Gauss-map test: the arcs of the two edges on the unit sphere cross), as
`physics.contact_box` does for two boxes and with its tolerances (a face of a before a face of b
before an edge pair, unless the latter separates by more):

- face axis: the reference face (the chosen face) clips the incident face (of the other hull's
  faces at its corner deepest along the reference normal, the most anti-parallel to it), both
  convex polygons, in the reference face's frame: the incident
  corners inside the reference loop, the crossings of the two loops' edges, and the reference
  corners inside the incident loop (lifted onto the incident plane). `contact_box`'s reduction
  keeps up to 4 of them, each with its separation from the reference plane.
- edge axis: one point, the closest points of the two edges.

Hull against sphere or capsule (`hull_segment`): as `physics.contact_box_segment` (3 slots: the
segment's ends and its point closest to the hull), with the exact closest point of the hull to
a centre: inside, the face plane it is least deep under; outside, the nearest of the faces it
projects into and of the edges (which hold the corners).

Which axis, faces, feature and points are used is decided without gradient; the chosen
points' positions and distances are differentiable in both bodies' poses and sizes.

Limits, as for two boxes: a penetration depth is exact, but a gap is the face clipping's (when
the nearest corner lies outside the reference face's prism, the clipped points are farther:
up to 1.1 mm in tests/physics/test_hull_contacts.py); a curved hull rolling fast onto a face can
sink a few millimetres for a step (its points that come down were not in the previous step's 4).
The cost grows with the hulls: faces times the other's corners, edges times the other's edges.
"""

from __future__ import annotations

import dataclasses

import torch

from .contact_box import choose_manifold, closest_edge_parameters, reduce_manifold
from .contact_geometry import gather_rows, sign
from .math3d import safe_norm, safe_normalize, tangent_basis

Tensor = torch.Tensor

_FACE_TOLERANCE = 5e-4  # m, as `physics.contact_box`
_EDGE_TOLERANCE = 1e-3  # m
_PROJECTIONS = 4  # a capsule's closest point, as `physics.contact_box_segment`
_INTERIOR = 1e-3  # of the segment's length, at each end
_INSIDE = 1e-10  # m^2: slack of the 2D inside tests (cross products)
_BIG = 1e9


@dataclasses.dataclass
class Shapes:
    """Hulls in the world frame (m), one per pair.

    corners: (B, P, K, 3); normals: (B, P, F, 3) unit, outward; faces: (P, F, M) long each
    face's corners (indices), counter-clockwise about its normal; face_valid: (P, F) bool;
    edges: (B, P, E, 2, 3) end corners; edge_faces: (P, E, 2) long, the faces an edge joins;
    edge_valid: (P, E) bool; centre: (B, P, 3) a point inside (the corners' mean).
    """

    corners: Tensor
    normals: Tensor
    faces: Tensor
    face_valid: Tensor
    edges: Tensor
    edge_faces: Tensor
    edge_valid: Tensor
    centre: Tensor


def _detached(hulls: Shapes) -> Shapes:
    return Shapes(*(getattr(hulls, f.name).detach() for f in dataclasses.fields(Shapes)))


def _gather(rows: Tensor, index: Tensor) -> Tensor:
    """``rows[b, p, index[p, ...]]`` for rows (B, P, R, 3) and index (P, ...) long:
    (B, P, ..., 3)."""
    batch, pairs = rows.shape[:2]
    flat = index.reshape(pairs, -1)
    picked = rows.gather(2, flat[None, :, :, None].expand(batch, pairs, flat.shape[1], 3))
    return picked.reshape(batch, pairs, *index.shape[1:], 3)


def shapes(points: Tensor, normals: Tensor, loops: Tensor, face_valid: Tensor, edges: Tensor,
           edge_valid: Tensor, size: Tensor, position: Tensor, rotation: Tensor) -> Shapes:  # fmt: skip
    """Hulls given in size units, placed in the world.

    Args:
        points: (P, K, 3) corners in size units; normals: (P, F, 3) unit face normals in size
            units; loops: (P, F, M) long corner indices; face_valid: (P, F) bool;
        edges: (P, E, 4) long: corner i, corner j, the two faces; edge_valid: (P, E) bool;
        size: (B, P, 3) padded sizes (m); position: (B, P, 3); rotation: (B, P, 3, 3)
            world_from_body.
    """
    turn = rotation.transpose(-1, -2)
    corners = position[..., None, :] + (points * size[..., None, :]) @ turn
    metric = normals / size[..., None, :]  # a plane n.p = h in size units is (n / size).x = h
    metric = safe_normalize(metric)  # padded faces: zero normals stay zero
    return Shapes(
        corners=corners,
        normals=metric @ turn,
        faces=loops,
        face_valid=face_valid,
        edges=_gather(corners, edges[..., :2]),
        edge_faces=edges[..., 2:],
        edge_valid=edge_valid,
        centre=corners.mean(-2),
    )


def _cross2(a: Tensor, b: Tensor) -> Tensor:
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def _face_separations(a: Shapes, b: Shapes) -> Tensor:
    """(B, P, F) separation of b from each face plane of a (-_BIG for padded faces)."""
    offset = (a.normals * _gather(a.corners, a.faces[..., 0])).sum(-1)
    lowest = (a.normals @ b.corners.transpose(-1, -2)).amin(-1)
    return torch.where(a.face_valid, lowest - offset, -_BIG)


def _edge_separations(a: Shapes, b: Shapes) -> Tensor:
    """(B, P, E_a, E_b) separation along each edge pair's cross product that makes a face of the
    Minkowski difference (-_BIG for the others, parallel and padded pairs)."""
    normals_a = _gather(a.normals, a.edge_faces)  # (B, P, E, 2, 3)
    normals_b = -_gather(b.normals, b.edge_faces)
    first_a, second_a = normals_a.unbind(-2)
    first_b, second_b = normals_b.unbind(-2)
    arc_a = torch.linalg.cross(second_a, first_a)
    arc_b = torch.linalg.cross(second_b, first_b)
    cba = arc_a @ first_b.transpose(-1, -2)  # c . (b x a)
    dba = arc_a @ second_b.transpose(-1, -2)
    adc = first_a @ arc_b.transpose(-1, -2)  # a . (d x c)
    bdc = second_a @ arc_b.transpose(-1, -2)
    crossing = (cba * dba < 0) & (adc * bdc < 0) & (cba * bdc > 0)
    start_a, start_b = a.edges[..., 0, :], b.edges[..., 0, :]
    along_a = a.edges[..., 1, :] - start_a
    along_b = b.edges[..., 1, :] - start_b
    # (d_a x d_b) . x as triple products, by matrix products over the edge pairs.
    at_b = along_a @ torch.linalg.cross(along_b, start_b).transpose(-1, -2)
    at_a = torch.linalg.cross(start_a, along_a) @ along_b.transpose(-1, -2)
    from_centre = start_a - a.centre[..., None, :]
    out_of_a = torch.linalg.cross(from_centre, along_a) @ along_b.transpose(-1, -2)
    dots = along_a @ along_b.transpose(-1, -2)
    square = (along_a * along_a).sum(-1)[..., :, None] * (along_b * along_b).sum(-1)[..., None, :]
    length2 = square - dots * dots
    usable = crossing & (length2 > 1e-12 * square)
    usable = usable & a.edge_valid[:, :, None] & b.edge_valid[:, None, :]
    length = torch.where(usable, length2, 1.0).sqrt()
    # The axis points away from a (from its centre to its edge).
    separation = sign(out_of_a) * (at_b - at_a) / length
    return torch.where(usable, separation, -_BIG)


def _pick_axis(a: Shapes, b: Shapes):
    """The separating-axis decision (call without gradient): ``use_b`` (b holds the reference
    face), ``face`` (its index), ``use_edge`` and ``edge`` (E_b * edge of a + edge of b)."""
    face_a, face_b = _face_separations(a, b), _face_separations(b, a)
    edge = _edge_separations(a, b).flatten(-2)
    best_a, index_a = face_a.max(-1)
    best_b, index_b = face_b.max(-1)
    use_b = best_b > best_a + _FACE_TOLERANCE
    face = torch.where(use_b, index_b, index_a)
    chosen = torch.where(use_b, best_b, best_a)
    use_edge = edge.amax(-1) > chosen + _EDGE_TOLERANCE
    return use_b, face, use_edge, edge.argmax(-1)


def _face(hull: Shapes, index: Tensor) -> tuple[Tensor, Tensor]:
    """Face ``index`` (B, P) long of each hull: its normal (B, P, 3) and loop (B, P, M, 3)."""
    normal = gather_rows(hull.normals, index[..., None])[..., 0, :]
    batch, pairs = index.shape
    pair = torch.arange(pairs, device=index.device)
    corners = hull.faces[pair, index]  # (B, P, M)
    loop = hull.corners.gather(2, corners.reshape(batch, pairs, -1, 1).expand(-1, -1, -1, 3))
    return normal, loop


def _most_facing(hull: Shapes, normal: Tensor) -> Tensor:
    """(B, P) long: of the hull's faces at its corner deepest along -``normal`` (B, P, 3), the
    one most anti-parallel to it. (The face most anti-parallel of all may not hold that
    corner: a long sliver's normal can be closer to -normal than its neighbours'.)"""
    deepest = (hull.corners * normal[..., None, :]).sum(-1).argmin(-1)  # (B, P)
    holds = (hull.faces == deepest[..., None, None]).any(-1) & hull.face_valid  # (B, P, F)
    # A padding copy of corner 0 is in no loop: then every face may be the incident one.
    holds = holds | (~holds.any(-1, keepdim=True) & hull.face_valid)
    facing = (hull.normals * normal[..., None, :]).sum(-1)
    return torch.where(holds, facing, _BIG).argmin(-1)


def _clip(reference: Tensor, incident: Tensor, incident_normal: Tensor):
    """Candidate points of the incident loop clipped by the reference loop, in the reference
    frame (u, v on its plane, w its normal).

    reference: (..., M, 2) loop, counter-clockwise; incident: (..., M, 3) loop;
    incident_normal: (..., 3). Returns points (..., 2M + M^2, 3) (the incident corners, the
    crossings of incident edge i with reference edge j, the reference corners lifted onto the
    incident plane) and which are corners of the clipped polygon (..., 2M + M^2)."""
    side = reference.roll(-1, -2) - reference  # reference edge j: reference[j] + s side[j]
    flat = incident[..., :2]
    inside = _cross2(side[..., None, :, :], flat[..., :, None, :] - reference[..., None, :, :])
    inside = (inside >= -_INSIDE).all(-1)  # (..., M)
    step = incident.roll(-1, -2) - incident  # incident edge i: incident[i] + t step[i]
    step2 = step[..., :2]
    between = reference[..., None, :, :] - flat[..., :, None, :]  # (..., M_i, M_r, 2)
    denominator = _cross2(step2[..., :, None, :], side[..., None, :, :])
    usable = denominator.abs() > _INSIDE
    safe = torch.where(usable, denominator, 1.0)
    t = _cross2(between, side[..., None, :, :]) / safe
    s = _cross2(between, step2[..., :, None, :]) / safe
    crossing = usable & (t >= 0) & (t <= 1) & (s >= 0) & (s <= 1)
    crossed = incident[..., :, None, :] + t[..., None] * step[..., :, None, :]
    # Reference corners inside the incident loop (either winding: it faces the other way).
    turns = _cross2(step2[..., None, :, :], reference[..., :, None, :] - flat[..., None, :, :])
    covered = (turns >= -_INSIDE).all(-1) | (turns <= _INSIDE).all(-1)
    tilt = incident_normal[..., 2:]
    flat_tilt = tilt.abs() > 1e-6
    covered = covered & flat_tilt
    offset = reference - flat[..., :1, :]
    rise = -(offset * incident_normal[..., None, :2]).sum(-1) / torch.where(flat_tilt, tilt, 1.0)
    lifted = torch.cat([reference, (incident[..., :1, 2] + rise)[..., None]], -1)
    points = torch.cat([incident, crossed.flatten(-3, -2), lifted], -2)
    return points, torch.cat([inside, crossing.flatten(-2), covered], -1)


def _face_manifold(a: Shapes, b: Shapes, use_b: Tensor, face: Tensor):
    """The clipped manifold of a face axis: normal (a to b) (B, P, 3), points on b
    (B, P, 4, 3), distances (B, P, 4), validity (B, P, 4)."""
    # Either hull may hold the reference face; each is read with an index in its own range.
    count_a, count_b = a.normals.shape[2], b.normals.shape[2]
    normal_a, loop_a = _face(a, face.clamp(max=count_a - 1))
    normal_b, loop_b = _face(b, face.clamp(max=count_b - 1))
    normal = torch.where(use_b[..., None], normal_b, normal_a)
    loop = torch.where(use_b[..., None, None], loop_b, loop_a)
    with torch.no_grad():
        other_a, other_b = _most_facing(a, normal), _most_facing(b, normal)
    normal_a, loop_a = _face(a, other_a)
    normal_b, loop_b = _face(b, other_b)
    incident_normal = torch.where(use_b[..., None], normal_a, normal_b)
    incident_loop = torch.where(use_b[..., None, None], loop_a, loop_b)
    first, second = tangent_basis(normal)
    frame = torch.stack([first, second, normal], -2)  # rows u, v, w
    origin = loop[..., 0, :]
    local = ((loop - origin[..., None, :]) @ frame.transpose(-1, -2))[..., :2]
    incident_local = (incident_loop - origin[..., None, :]) @ frame.transpose(-1, -2)
    incident_normal = (frame @ incident_normal[..., None])[..., 0]
    points, keep = _clip(local, incident_local, incident_normal)
    with torch.no_grad():
        slots, valid = reduce_manifold(points, keep, torch.ones_like(normal[..., 0]))
    chosen = gather_rows(points, slots)
    # The point on b: the incident point when b is incident, else its projection on b's face.
    on_b = torch.stack([torch.ones_like(use_b), torch.ones_like(use_b), ~use_b], -1)
    point = origin[..., None, :] + (chosen * on_b[..., None, :]) @ frame
    normal = torch.where(use_b[..., None], -normal, normal)
    return normal, point, chosen[..., 2], valid


def _edge_manifold(a: Shapes, b: Shapes, edge: Tensor):
    """One point for the edge pair ``edge`` (B, P) (E_b * edge of a + edge of b): normal (a to
    b) (B, P, 3), the point on b's edge (B, P, 3), the distance (B, P)."""
    count = b.edges.shape[2]
    pair = []
    for shape, index in ((a, edge // count), (b, edge % count)):
        ends = torch.gather(shape.edges, 2, index[..., None, None, None].expand(-1, -1, 1, 2, 3))
        pair.append(ends[:, :, 0])
    ends = torch.stack(pair, -3)  # (B, P, 2, 2, 3): edge of a, edge of b; start, end
    start, delta = ends[..., 0, :], ends[..., 1, :] - ends[..., 0, :]
    cross = torch.linalg.cross(delta[..., 0, :], delta[..., 1, :])
    length = safe_norm(cross, keepdim=True)
    axis = cross / torch.where(length > 1e-9, length, 1.0)
    normal = sign((axis * (start[..., 0, :] - a.centre)).sum(-1))[..., None] * axis
    closest = start + closest_edge_parameters(start, delta)[..., None] * delta
    gap = closest[..., 1, :] - closest[..., 0, :]
    return normal, closest[..., 1, :], (gap * normal).sum(-1)


def hull_hull(a: Shapes, b: Shapes) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Contact manifold of hulls a and b (a box is the hull of its corners).

    Returns:
        normal: (B, P, 3) unit, from a to b (shared by the 4 slots).
        point: (B, P, 4, 3) contact points on b's surface.
        distance: (B, P, 4) signed gap along the normal (m), negative when penetrating.
        valid: (B, P, 4) bool: which slots hold a contact point.
    """
    with torch.no_grad():
        use_b, face, use_edge, edge = _pick_axis(_detached(a), _detached(b))
    faces = _face_manifold(a, b, use_b, face)
    return choose_manifold(use_edge, faces, _edge_manifold(a, b, edge))


def _closest(hull: Shapes, query: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The hull's point closest to each of ``query`` (B, P, S, 3) (all in the same frame):
    normal (B, P, S, 3) out of the hull towards the query, signed distance (B, P, S) (negative
    inside), closest point (B, P, S, 3)."""
    normals = hull.normals[:, :, None]  # (B, P, 1, F, 3)
    loops = _gather(hull.corners, hull.faces)[:, :, None]  # (B, P, 1, F, M, 3)
    height = ((query[..., None, :] - loops[..., 0, :]) * normals).sum(-1)  # (B, P, S, F)
    valid = hull.face_valid[:, None, :]
    deepest, face = torch.where(valid, height, -_BIG).max(-1)
    # Outside: the faces the query projects into, and the edges.
    sides = torch.linalg.cross(loops.roll(-1, -2) - loops, normals[..., None, :])
    within = ((query[..., None, None, :] - loops) * sides).sum(-1) <= 1e-12
    over = torch.where(valid & within.all(-1) & (height > 0), height, _BIG)
    face_gap, over_face = over.min(-1)
    start = hull.edges[:, :, None, :, 0, :]  # (B, P, 1, E, 3)
    delta = hull.edges[:, :, None, :, 1, :] - start
    t = ((query[..., None, :] - start) * delta).sum(-1) / (delta * delta).sum(-1).clamp(min=1e-18)
    on_edge = start + t.clamp(0.0, 1.0)[..., None] * delta  # (B, P, S, E, 3)
    apart = safe_norm(query[..., None, :] - on_edge)
    apart = torch.where(hull.edge_valid[:, None, :], apart, _BIG)
    edge_gap, edge = apart.min(-1)
    nearest = torch.gather(on_edge, -2, edge[..., None, None].expand(*edge.shape, 1, 3))
    nearest = nearest[..., 0, :]
    inside = deepest <= 0
    use_face = ~inside & (face_gap <= edge_gap)
    chosen_face = torch.where(use_face, over_face, face)
    face_normal = torch.gather(
        hull.normals[:, :, None].expand(-1, -1, query.shape[2], -1, -1), -2,
        chosen_face[..., None, None].expand(*chosen_face.shape, 1, 3),
    )[..., 0, :]  # fmt: skip
    face_height = torch.gather(height, -1, chosen_face[..., None])[..., 0]
    gap = query - nearest
    length = safe_norm(gap, keepdim=True)
    edge_normal = torch.where(length > 1e-9, gap / torch.where(length > 1e-9, length, 1.0),
                              face_normal)  # fmt: skip
    use_plane = inside | use_face
    normal = torch.where(use_plane[..., None], face_normal, edge_normal)
    distance = torch.where(use_plane, face_height, length[..., 0])
    point = torch.where(use_plane[..., None], query - face_height[..., None] * face_normal,
                        nearest)  # fmt: skip
    return normal, distance, point


def hull_segment(hull: Shapes, centre: Tensor, half_axis: Tensor,
                 radius: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:  # fmt: skip
    """Contacts of a hull (a) with a sphere or capsule (b), 3 slots as
    `physics.contact_box_segment.box_segment`.

    Args:
        hull: the hulls (world frame); centre, half_axis: (B, P, 3) the segment's centre and
            half axis (zero for a sphere); radius: (B, P).

    Returns:
        normal (B, P, 3, 3) hull to sphere/capsule, point (B, P, 3, 3) on the capsule's
        surface, distance (B, P, 3) signed gap (m), valid (B, P, 3) bool, per slot.
    """
    start, delta = centre - half_axis, 2 * half_axis
    length2 = (delta * delta).sum(-1)
    safe = torch.where(length2 > 1e-12, length2, 1.0)
    with torch.no_grad():
        t = torch.full_like(length2, 0.5)
        detached = _detached(hull)
        for _ in range(_PROJECTIONS):
            point = (start + t[..., None] * delta)[..., None, :].detach()
            nearest = _closest(detached, point)[2][..., 0, :]
            t = (((nearest - start) * delta).sum(-1) / safe).clamp(0.0, 1.0)
        t = torch.where(length2 > 1e-12, t, 0.0)
    parameters = torch.stack([torch.zeros_like(t), torch.ones_like(t), t], -1)
    centres = start[..., None, :] + parameters[..., None] * delta[..., None, :]
    normal, distance, _ = _closest(hull, centres)
    point = centres - radius[..., None, None] * normal
    segment = length2 > 1e-12
    interior = (t > _INTERIOR) & (t < 1 - _INTERIOR)
    valid = torch.stack([torch.ones_like(segment), segment, segment & interior], -1)
    return normal, point, distance - radius[..., None], valid
