"""Contact candidates: the pairs of bodies that may touch, found once at build time as static
index lists and matrices that map a body's padded size to the points and radii it collides with."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .polyhedron import Polyhedron, polyhedron
from .spec import Body, Joint

Tensor = torch.Tensor

# Static matrices that map a body's padded size [a, b, c] to the body-frame points it collides
# with. Sizes stay tensors (they may require grad), so contact points are computed in the step.
_BOX_CORNERS = [(sx, sy, sz) for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]
_CYLINDER_RIM = 8


def _hull_scaled(body: Body) -> Tensor:
    """A hull's points (K, 3) in units of its size: `size -> point` is diagonal."""
    return torch.as_tensor(body.points, dtype=torch.float64).detach().cpu()


def _plane_points(body: Body) -> list[tuple[list[list[float]], list[float]]]:
    """Points (as `size -> point` matrices) and radii (as `size -> radius` rows) a shape touches a
    plane with: a sphere its centre (radius r), a capsule its two end centres (radius r), a box
    its 8 corners, a cylinder 8 points on each rim, a hull its points."""
    shape = body.shape
    if shape == "hull":
        return [(torch.diag(point).tolist(), [0, 0, 0]) for point in _hull_scaled(body)]
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


def _box_half(body: Body) -> list[list[float]] | None:
    """``size -> half extents`` of the box a shape collides as with boxes, spheres and capsules:
    a box its own; a cylinder [r, length] the box [2r, 2r, length] around it (exact on its flat
    ends, which is what stacking needs, and on four lines of its side; up to r (sqrt 2 - 1)
    too big between them); a hull (against a cylinder only) the box centred on its centre of
    mass that bounds its points."""
    shape = body.shape
    if shape == "hull":
        return torch.diag(_hull_scaled(body).abs().amax(0)).tolist()
    if shape == "box":
        return [[0.5, 0, 0], [0, 0.5, 0], [0, 0, 0.5]]
    if shape == "cylinder":
        return [[1, 0, 0], [1, 0, 0], [0, 0.5, 0]]
    return None


def _pair_kind(first: Body, second: Body) -> tuple[str, bool] | None:
    """How two bodies collide, and whether the second one comes first in the candidate."""
    shapes = (first.shape, second.shape)
    if shapes.count("plane") == 1:
        return "plane", first.shape != "plane"
    if "hull" in shapes:
        # A hull meets a box or a hull by their faces and edges, a sphere or a capsule by its
        # closest point (`physics.contact_hull`), a cylinder as the boxes that bound both.
        hull_first = first.shape == "hull"
        other = shapes[1] if hull_first else shapes[0]
        if other in ("hull", "box"):
            return "hull", False
        if other in ("sphere", "capsule"):
            return "hull_segment", not hull_first
    box = (_box_half(first) is not None, _box_half(second) is not None)
    segment = (_segment(first.shape) is not None, _segment(second.shape) is not None)
    if all(segment):
        return "segment", False
    if all(box):
        return "box", False
    if box[0] and segment[1]:
        return "box_segment", False
    if box[1] and segment[0]:
        return "box_segment", True
    return None


# A box as a hull: its 8 corners in units of its size (full extents).
_BOX_POINTS = [[sx * 0.5, sy * 0.5, sz * 0.5] for sx, sy, sz in _BOX_CORNERS]


def _shape_id(lists: dict, index: int, body: Body) -> int:
    """The index of ``body``'s polyhedron in ``lists["hull_shapes"]`` (found once per hull body;
    every box shares one)."""
    key = "box" if body.shape == "box" else index
    known = lists["hull_shape_keys"]
    if key not in known:
        points = _BOX_POINTS if body.shape == "box" else _hull_scaled(body).numpy()
        known[key] = len(lists["hull_shapes"])
        lists["hull_shapes"].append(polyhedron(points))
    return known[key]


def _add_candidate(lists: dict, kind: str, a: int, body_a: Body, b: int, body_b: Body) -> None:
    """Append the pair (a, b) to the lists of its kind (a: the plane, the box, the hull, or
    either)."""
    if kind == "hull":
        lists["hull_contact_a"].append(a)
        lists["hull_contact_b"].append(b)
        lists["hull_contact_shape_a"].append(_shape_id(lists, a, body_a))
        lists["hull_contact_shape_b"].append(_shape_id(lists, b, body_b))
    elif kind == "hull_segment":
        segment_map, radius_map = _segment(body_b.shape)
        lists["hull_segment_hull"].append(a)
        lists["hull_segment_other"].append(b)
        lists["hull_segment_shape"].append(_shape_id(lists, a, body_a))
        lists["hull_segment_map"].append(segment_map)
        lists["hull_segment_radius"].append(radius_map)
    elif kind == "plane":
        for point_map, radius_map in _plane_points(body_b):
            lists["plane_contact_plane"].append(a)
            lists["plane_contact_body"].append(b)
            lists["plane_contact_point_map"].append(point_map)
            lists["plane_contact_radius_map"].append(radius_map)
    elif kind == "segment":
        (map_a, radius_a), (map_b, radius_b) = _segment(body_a.shape), _segment(body_b.shape)
        for key, value in (("segment_contact_a", a), ("segment_contact_b", b),
                           ("segment_map_a", map_a), ("segment_map_b", map_b),
                           ("segment_radius_a", radius_a), ("segment_radius_b", radius_b)):  # fmt: skip
            lists[key].append(value)
    elif kind == "box":
        lists["box_contact_a"].append(a)
        lists["box_contact_b"].append(b)
        lists["box_map_a"].append(_box_half(body_a))
        lists["box_map_b"].append(_box_half(body_b))
    else:
        segment_map, radius_map = _segment(body_b.shape)
        lists["box_segment_box"].append(a)
        lists["box_segment_other"].append(b)
        lists["box_segment_box_map"].append(_box_half(body_a))
        lists["box_segment_map"].append(segment_map)
        lists["box_segment_radius"].append(radius_map)


# Candidate list -> the shape of one entry's map (None: a body index).
_LISTS = {
    "plane_contact_plane": None, "plane_contact_body": None,
    "plane_contact_point_map": (3, 3), "plane_contact_radius_map": (3,),
    "segment_contact_a": None, "segment_contact_b": None,
    "segment_map_a": (3, 3), "segment_map_b": (3, 3),
    "segment_radius_a": (3,), "segment_radius_b": (3,),
    "box_contact_a": None, "box_contact_b": None, "box_map_a": (3, 3), "box_map_b": (3, 3),
    "box_segment_box": None, "box_segment_other": None, "box_segment_box_map": (3, 3),
    "box_segment_map": (3, 3), "box_segment_radius": (3,),
    "hull_contact_a": None, "hull_contact_b": None, "hull_contact_shape_a": None,
    "hull_contact_shape_b": None, "hull_segment_hull": None, "hull_segment_other": None,
    "hull_segment_shape": None, "hull_segment_map": (3, 3), "hull_segment_radius": (3,),
}  # fmt: skip


def _padded_shapes(shapes: list[Polyhedron], dtype, device) -> dict:
    """The polyhedra as padded tables: ``hull_points`` (G, K, 3) and ``hull_normals`` (G, F, 3)
    tensors in size units (padding: corner 0, zero normals), and as static lists
    ``hull_faces`` (G, F, M) corner indices (a loop padded with its last corner, a padded face
    with corner 0) with ``hull_face_valid`` (G, F), and ``hull_edges`` (G, E, 4) (corner i,
    corner j, their two faces; padding zeros) with ``hull_edge_valid`` (G, E); and
    ``hull_counts`` (G, 3): each one's corners, faces and edges before padding."""
    corners = max((len(s.points) for s in shapes), default=1)
    faces = max((len(s.faces) for s in shapes), default=1)
    loop = max((len(f) for s in shapes for f in s.faces), default=1)
    edges = max((len(s.edges) for s in shapes), default=1)
    out: dict[str, list] = {k: [] for k in ("hull_points", "hull_normals", "hull_faces",
                                             "hull_face_valid", "hull_edges", "hull_edge_valid",
                                             "hull_counts")}  # fmt: skip
    for shape in shapes:
        points = shape.points.tolist()
        out["hull_points"].append(points + [points[0]] * (corners - len(points)))
        normals = shape.normals.tolist()
        out["hull_normals"].append(normals + [[0.0, 0.0, 0.0]] * (faces - len(normals)))
        loops = [f + [f[-1]] * (loop - len(f)) for f in shape.faces]
        out["hull_faces"].append(loops + [[0] * loop] * (faces - len(loops)))
        out["hull_face_valid"].append([k < len(loops) for k in range(faces)])
        rows = shape.edges.tolist()
        out["hull_edges"].append(rows + [[0, 0, 0, 0]] * (edges - len(rows)))
        out["hull_edge_valid"].append([k < len(rows) for k in range(edges)])
        out["hull_counts"].append([len(points), len(loops), len(rows)])
    for key, width in (("hull_points", corners), ("hull_normals", faces)):
        out[key] = torch.tensor(out[key], dtype=dtype, device=device).reshape(len(shapes), width, 3)
    return out


def contact_candidates(bodies: list[Body], joints: Sequence[Joint], dtype, device) -> dict:
    """Every pair of bodies that may touch, as static index lists and size->geometry maps.

    Bodies joined by a joint never collide with each other; two static bodies never do; a body
    with ``collide = False`` never does. Supported: every shape against planes; sphere and
    capsule against each other; box and cylinder against each other, against spheres and against
    capsules (a cylinder as a box, see `_box_half`); a hull against hulls, boxes, spheres and
    capsules by its faces and edges (`physics.polyhedron`, `physics.contact_hull`), and against
    cylinders as the box that bounds it. Two planes never collide.
    """
    jointed = {frozenset((j.parent, j.child)) for j in joints}
    lists: dict = {key: [] for key in _LISTS}
    lists["hull_shapes"], lists["hull_shape_keys"] = [], {}
    for i, first in enumerate(bodies):
        for j, second in enumerate(bodies):
            if j <= i or not (first.collide and second.collide):
                continue
            if (first.static and second.static) or frozenset((first.name, second.name)) in jointed:
                continue
            kind = _pair_kind(first, second)
            if kind is None:
                continue
            name, swap = kind
            pair = ((j, second), (i, first)) if swap else ((i, first), (j, second))
            _add_candidate(lists, name, *pair[0], *pair[1])
    out = {}
    for key, tail in _LISTS.items():
        values = lists[key]
        if tail is not None:
            values = torch.tensor(values, dtype=dtype, device=device).reshape(len(values), *tail)
        out[key] = values
    out.update(_padded_shapes(lists["hull_shapes"], dtype, device))
    return out
