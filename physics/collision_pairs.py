"""Contact candidates: the pairs of bodies that may touch, found once at build time as static
index lists and matrices that map a body's padded size to the points and radii it collides with."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .spec import Body, Joint

Tensor = torch.Tensor

# Static matrices that map a body's padded size [a, b, c] to the body-frame points it collides
# with. Sizes stay tensors (they may require grad), so contact points are computed in the step.
_BOX_CORNERS = [(sx, sy, sz) for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]
_CYLINDER_RIM = 8


def _plane_points(shape: str) -> list[tuple[list[list[float]], list[float]]]:
    """Points (as `size -> point` matrices) and radii (as `size -> radius` rows) a shape touches a
    plane with: a sphere its centre (radius r), a capsule its two end centres (radius r), a box
    its 8 corners, a cylinder 8 points on each rim."""
    if shape == "sphere":
        return [([[0, 0, 0], [0, 0, 0], [0, 0, 0]], [1, 0, 0])]
    if shape == "capsule":
        return [([[0, 0, 0], [0, 0, 0], [0, s * 0.5, 0]], [1, 0, 0]) for s in (-1, 1)]
    if shape == "box":
        return [
            ([[sx * 0.5, 0, 0], [0, sy * 0.5, 0], [0, 0, sz * 0.5]], [0, 0, 0])
            for sx, sy, sz in _BOX_CORNERS
        ]
    if shape == "cylinder":
        points = []
        for s in (-1, 1):
            for k in range(_CYLINDER_RIM):
                angle = 2 * math.pi * k / _CYLINDER_RIM
                points.append(
                    ([[math.cos(angle), 0, 0], [math.sin(angle), 0, 0], [0, s * 0.5, 0]], [0, 0, 0])
                )
        return points
    return []


def _segment(shape: str) -> tuple[list[list[float]], list[float]] | None:
    """Half-segment (`size -> half axis` matrix) and radius row of a sphere or capsule."""
    if shape == "sphere":
        return [[0, 0, 0], [0, 0, 0], [0, 0, 0]], [1, 0, 0]
    if shape == "capsule":
        return [[0, 0, 0], [0, 0, 0], [0, 0.5, 0]], [1, 0, 0]
    return None


def _contact_candidates(bodies: list[Body], joints: Sequence[Joint], dtype, device) -> dict:
    """Every pair of bodies that may touch, as static index lists and size->geometry maps.

    Bodies joined by a joint never collide with each other; two static bodies never do.
    Supported: sphere/capsule/box/cylinder against planes; sphere and capsule against each other.
    """
    jointed = {frozenset((j.parent, j.child)) for j in joints}
    plane_plane, plane_body, point_maps, radius_maps = [], [], [], []
    seg_a, seg_b, seg_map_a, seg_map_b, seg_rad_a, seg_rad_b = [], [], [], [], [], []
    for i, first in enumerate(bodies):
        for j, second in enumerate(bodies):
            if j <= i or not (first.collide and second.collide):
                continue
            if (first.static and second.static) or frozenset((first.name, second.name)) in jointed:
                continue
            pair = [(i, first), (j, second)]
            planes = [(k, b) for k, b in pair if b.shape == "plane"]
            if len(planes) == 1:
                (plane_index, _), (body_index, body) = (
                    planes[0],
                    next(p for p in pair if p[1].shape != "plane"),
                )
                for point_map, radius_map in _plane_points(body.shape):
                    plane_plane.append(plane_index)
                    plane_body.append(body_index)
                    point_maps.append(point_map)
                    radius_maps.append(radius_map)
                continue
            segment_first, segment_second = _segment(first.shape), _segment(second.shape)
            if segment_first is not None and segment_second is not None:
                seg_a.append(i)
                seg_b.append(j)
                seg_map_a.append(segment_first[0])
                seg_rad_a.append(segment_first[1])
                seg_map_b.append(segment_second[0])
                seg_rad_b.append(segment_second[1])

    def tensor(rows: list, tail: tuple[int, ...]) -> Tensor:
        return torch.tensor(rows, dtype=dtype, device=device).reshape(len(rows), *tail)

    return {
        "plane_contact_plane": plane_plane,
        "plane_contact_body": plane_body,
        "plane_contact_point_map": tensor(point_maps, (3, 3)),
        "plane_contact_radius_map": tensor(radius_maps, (3,)),
        "segment_contact_a": seg_a,
        "segment_contact_b": seg_b,
        "segment_map_a": tensor(seg_map_a, (3, 3)),
        "segment_map_b": tensor(seg_map_b, (3, 3)),
        "segment_radius_a": tensor(seg_rad_a, (3,)),
        "segment_radius_b": tensor(seg_rad_b, (3,)),
    }
