"""Contact geometry: every candidate pair's normal, point and signed distance.

Candidates are static (see `collision_pairs.contact_candidates`): each is evaluated every
step, whether touching or not; the solver decides which are active. Six kinds, each fully
vectorised:

- point-plane: a body point with a radius (sphere centre, capsule end centres, box corners,
  cylinder rim points) against an infinite plane (normal: the plane body's +z);
- segment-segment: spheres (segments of zero length) and capsules against each other;
- box-box (`physics.contact_box`): separating axes and face clipping, 4 slots per pair;
- box-segment (`physics.contact_box_segment`): a box against a sphere or capsule, 3 slots;
- hull-hull (`physics.contact_hull`): a hull against a box or another hull, 4 slots;
- hull-segment (`physics.contact_hull`): a hull against a sphere or capsule, 3 slots.

Cylinders collide with planes by their rims and with boxes, spheres, capsules and cylinders as
the box of the same extents [2r, 2r, length]; a hull meets a cylinder as the box that bounds
it (see `physics.collision_pairs`).
"""

from __future__ import annotations

import dataclasses
import math

import torch

from .contact_box import box_box
from .contact_box_segment import box_segment
from .contact_geometry import closest_segment_parameters
from .contact_hull import hull_hull, hull_segment, shapes
from .math3d import safe_norm, tangent_basis
from .world import World

Tensor = torch.Tensor

FAR = 1.0e3  # m: the distance of a padded (invalid) manifold slot
# A hull meets a plane by a few of its points in each step (`hull_support`): the nearest in
# each of 8 sectors around the normal, if the step's velocity would bring it within 1 mm.
HULL_PLANE_SECTORS = 8
HULL_PLANE_REACH = 1.0e-3  # m


@dataclasses.dataclass
class Contacts:
    """c candidate contacts, from body a to body b.

    body_a, body_b: (c,) long body slots.
    normal: (B, c, 3) unit normal pointing from a to b.
    point: (B, c, 3) world contact point (on b's surface).
    distance: (B, c) signed gap (m): positive apart, negative penetrating.
    friction, restitution: (B, c) combined coefficients.
    valid: (B, c) bool: False for the padded slots of a manifold (box-box: 4 slots per pair,
        box-sphere/capsule: 3), whose distance is `FAR` (so the solver never activates them).
    """

    body_a: Tensor
    body_b: Tensor
    normal: Tensor
    point: Tensor
    distance: Tensor
    friction: Tensor
    restitution: Tensor
    valid: Tensor | None = None


def _rotate(rotation: Tensor, vector: Tensor) -> Tensor:
    """``rotation @ vector`` for (..., 3, 3) and (..., 3), by a product and a sum: a batched
    matmul of 3x3 matrices costs more than that, and on CPU it dispatches every small batch to
    the thread pool."""
    return (rotation * vector[..., None, :]).sum(-1)


def _take(tensor: Tensor, index: Tensor) -> Tensor:
    return tensor.index_select(1, index)


def _combine(world: World, body_a: Tensor, body_b: Tensor, batch: int) -> tuple[Tensor, Tensor]:
    friction_a = _take(world.friction, body_a)
    friction_b = _take(world.friction, body_b)
    product = friction_a * friction_b
    # Geometric mean (Box2D / ODE habit), with a finite gradient at zero friction.
    positive = product > 1e-12
    friction = torch.where(positive, torch.sqrt(torch.where(positive, product, 1.0)), 0.0)
    restitution = torch.maximum(_take(world.restitution, body_a), _take(world.restitution, body_b))
    return friction, restitution


def _plane_part(world: World, position: Tensor, rotation: Tensor) -> tuple:
    plane, body = world.structure.plane_contact_plane, world.structure.plane_contact_body
    size = _take(world.size, body)  # (B, P, 3)
    local = _rotate(world.plane_contact_point_map, size)
    radius = (world.plane_contact_radius_map * size).sum(-1)
    centre = _take(position, body) + _rotate(_take(rotation, body), local)
    normal = _take(rotation, plane)[..., :, 2]
    distance = (normal * (centre - _take(position, plane))).sum(-1) - radius
    point = centre - radius[..., None] * normal
    return plane, body, normal, point, distance, None


def hull_support(gap: Tensor, lever: Tensor, normal: Tensor, rows: Tensor) -> Tensor:
    """(B, c) bool: every candidate that is not a hull's point and, of each hull-plane pair's
    points (``rows`` (H, K) candidate indices, -1 padded), the nearest to the plane in each
    of `HULL_PLANE_SECTORS` sectors around the plane's normal if its gap is under
    `HULL_PLANE_REACH`: a support spread around the centre of mass (a box's corners, a torus
    lying flat on its ring) with at most a few rows per pair. Every point of a tessellated
    sphere within the contact slop of the floor would otherwise be an active row, and many
    active rows of one body slow the Jacobi sweeps to a crawl.

    Args:
        gap: (B, c) signed gaps (m): the step passes those its velocity would leave, so a
            point that comes fast is kept in time;
        lever: (B, c, 3) contact points less their body's centre of mass;
        normal: (B, c, 3) the planes' normals.
    """
    padded = rows < 0
    safe = rows.clamp(min=0)
    batch = gap.shape[0]
    gaps = torch.where(padded, torch.inf, gap.detach()[:, safe])  # (B, H, K)
    first, second = tangent_basis(normal.detach())
    lever = lever.detach()
    angle = torch.atan2((lever * second).sum(-1), (lever * first).sum(-1))[:, safe]
    sector = ((angle + math.pi) * (HULL_PLANE_SECTORS / (2 * math.pi))).long()
    sector = sector.clamp(max=HULL_PLANE_SECTORS - 1)
    in_sector = sector[..., None] == torch.arange(HULL_PLANE_SECTORS, device=rows.device)
    keyed = torch.where(in_sector, gaps[..., None], torch.inf)  # (B, H, K, S)
    best, chosen = keyed.min(-2)  # (B, H, S)
    chosen = safe.expand(batch, -1, -1).gather(-1, chosen).flatten(1)
    hull = torch.zeros(gap.shape[1], dtype=torch.bool, device=gap.device)
    hull[safe[~padded]] = True
    # An empty sector's argmin is some point of the hull: it counts nothing (scatter_add).
    marks = gap.new_zeros(batch, gap.shape[1])
    marks = marks.scatter_add(1, chosen, torch.isfinite(best).flatten(1).to(marks.dtype))
    return ~hull | ((marks > 0) & (gap.detach() < HULL_PLANE_REACH))


def _segment_part(world: World, position: Tensor, rotation: Tensor) -> tuple:
    seg_a, seg_b = world.structure.segment_contact_a, world.structure.segment_contact_b
    size_a, size_b = _take(world.size, seg_a), _take(world.size, seg_b)
    half_a = _rotate(_take(rotation, seg_a), _rotate(world.segment_map_a, size_a))
    half_b = _rotate(_take(rotation, seg_b), _rotate(world.segment_map_b, size_b))
    start_a, start_b = _take(position, seg_a) - half_a, _take(position, seg_b) - half_b
    s, t = closest_segment_parameters(start_a, 2 * half_a, start_b, 2 * half_b)
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
    return seg_a, seg_b, normal, point, distance, None


def _slots(body_a: Tensor, body_b: Tensor, normal, point, distance, valid) -> tuple:
    """Flatten (B, K, s, ...) slot results to s candidates per pair; padded slots far apart."""
    slots = valid.shape[-1]
    if normal.dim() == 3:
        normal = normal[:, :, None, :].expand(*valid.shape, 3)
    distance = torch.where(valid, distance, FAR)
    return (
        body_a.repeat_interleave(slots),
        body_b.repeat_interleave(slots),
        normal.flatten(1, 2),
        point.flatten(1, 2),
        distance.flatten(1, 2),
        valid.flatten(1, 2),
    )


def _box_part(world: World, position: Tensor, rotation: Tensor) -> tuple:
    box_a, box_b = world.structure.box_contact_a, world.structure.box_contact_b
    half_a = _rotate(world.box_map_a, _take(world.size, box_a))
    half_b = _rotate(world.box_map_b, _take(world.size, box_b))
    result = box_box(
        _take(position, box_a), _take(rotation, box_a), half_a,
        _take(position, box_b), _take(rotation, box_b), half_b,
    )  # fmt: skip
    return _slots(box_a, box_b, *result)


def _box_segment_part(world: World, position: Tensor, rotation: Tensor) -> tuple:
    box, other = world.structure.box_segment_box, world.structure.box_segment_other
    half = _rotate(world.box_segment_box_map, _take(world.size, box))
    size = _take(world.size, other)
    half_axis = _rotate(_take(rotation, other), _rotate(world.box_segment_map, size))
    radius = (world.box_segment_radius * size).sum(-1)
    result = box_segment(
        _take(position, box), _take(rotation, box), half, _take(position, other), half_axis, radius
    )
    return _slots(box, other, *result)


def _hulls(world: World, bodies: Tensor, shape: Tensor, extent: tuple[int, int, int],
           position: Tensor, rotation: Tensor):  # fmt: skip
    """`physics.contact_hull.Shapes` of ``bodies`` (P,) with polyhedra ``shape`` (P,), their
    tables cut to ``extent`` (corners, faces, edges: the most these polyhedra have)."""
    structure = world.structure
    corners, faces, edges = extent
    return shapes(
        world.hull_points.index_select(0, shape)[:, :corners],
        world.hull_normals.index_select(0, shape)[:, :faces],
        structure.hull_faces.index_select(0, shape)[:, :faces],
        structure.hull_face_valid.index_select(0, shape)[:, :faces],
        structure.hull_edges.index_select(0, shape)[:, :edges],
        structure.hull_edge_valid.index_select(0, shape)[:, :edges],
        _take(world.size, bodies),
        _take(position, bodies),
        _take(rotation, bodies),
    )


def _hull_part(world: World, position: Tensor, rotation: Tensor) -> tuple:
    structure = world.structure
    hull_a, hull_b = structure.hull_contact_a, structure.hull_contact_b
    result = hull_hull(
        _hulls(
            world,
            hull_a,
            structure.hull_contact_shape_a,
            structure.hull_extent_a,
            position,
            rotation,
        ),
        _hulls(
            world,
            hull_b,
            structure.hull_contact_shape_b,
            structure.hull_extent_b,
            position,
            rotation,
        ),  # fmt: skip
    )
    return _slots(hull_a, hull_b, *result)


def _hull_segment_part(world: World, position: Tensor, rotation: Tensor) -> tuple:
    structure = world.structure
    hull, other = structure.hull_segment_hull, structure.hull_segment_other
    size = _take(world.size, other)
    half_axis = _rotate(_take(rotation, other), _rotate(world.hull_segment_map, size))
    radius = (world.hull_segment_radius * size).sum(-1)
    result = hull_segment(
        _hulls(
            world,
            hull,
            structure.hull_segment_shape,
            structure.hull_extent_segment,
            position,
            rotation,
        ),  # fmt: skip
        _take(position, other),
        half_axis,
        radius,
    )
    return _slots(hull, other, *result)


_PARTS = (
    ("plane_contact_plane", _plane_part),
    ("segment_contact_a", _segment_part),
    ("box_contact_a", _box_part),
    ("box_segment_box", _box_segment_part),
    ("hull_contact_a", _hull_part),
    ("hull_segment_hull", _hull_segment_part),
)


def find_contacts(world: World, position: Tensor, rotation: Tensor) -> Contacts:
    """Evaluate every candidate contact at the given poses (B, N, 3), (B, N, 3, 3)."""
    batch = position.shape[0]
    parts = [
        part(world, position, rotation)
        for key, part in _PARTS
        if getattr(world.structure, key).numel()
    ]
    if not parts:
        empty = position.new_zeros(batch, 0)
        index = torch.zeros(0, dtype=torch.long, device=position.device)
        vector = empty[..., None].expand(batch, 0, 3)
        return Contacts(index, index, vector, vector, empty, empty, empty, empty.bool())
    body_a = torch.cat([p[0] for p in parts])
    body_b = torch.cat([p[1] for p in parts])
    friction, restitution = _combine(world, body_a, body_b, batch)
    distance = torch.cat([p[4] for p in parts], 1)
    valid = [torch.ones_like(p[4], dtype=torch.bool) if p[5] is None else p[5] for p in parts]
    return Contacts(
        body_a=body_a,
        body_b=body_b,
        normal=torch.cat([p[2] for p in parts], 1),
        point=torch.cat([p[3] for p in parts], 1),
        distance=distance,
        friction=friction,
        restitution=restitution,
        valid=torch.cat(valid, 1),
    )
