"""The index tensors of a world's static structure (`Structure`), made once at build time: which
bodies move, each joint's rows, the actuators by kind, the limited joints, the contact pairs and,
for reduced coordinates, the joint tree."""

from __future__ import annotations

import torch

from .articulated import ReducedCoordinatesError, articulated_tree
from .spec import SHAPES
from .world import Structure, World

Tensor = torch.Tensor

_SLOTS = {
    "ball": (0, 1, 2),
    "hinge": (0, 1, 2, 3, 4),
    "slider": (0, 1, 3, 4, 5),
    "fixed": (0, 1, 2, 3, 4, 5),
}


_HULL_INDICES = ("hull_contact_a", "hull_contact_b", "hull_contact_shape_a", "hull_contact_shape_b",
                 "hull_segment_hull", "hull_segment_other", "hull_segment_shape")  # fmt: skip


_HULL_TABLES = {"hull_faces": torch.long, "hull_face_valid": torch.bool, "hull_edges": torch.long,
                "hull_edge_valid": torch.bool}  # fmt: skip


def _table(values: list, dtype, device) -> Tensor:
    """A polyhedron table (`World.hull_faces` and the like) as a tensor; empty without hulls."""
    return (
        torch.tensor(values, dtype=dtype, device=device)
        if values
        else torch.zeros(0, 1, dtype=dtype, device=device)
    )


def _extent(world: World, shapes: list[int]) -> tuple[int, int, int]:
    """The most corners, faces and edges of the polyhedra ``shapes`` (indices)."""
    counts = [world.hull_counts[s] for s in shapes]
    return tuple(max((c[k] for c in counts), default=0) for k in range(3))


def reduced_coordinates_fit(world: World) -> bool:
    """Whether ``world``'s model can step in reduced coordinates (a tree of hinges, sliders and
    fixed joints with nothing that collides: `articulated_tree` raises nothing)."""
    try:
        articulated_tree(world)
    except ReducedCoordinatesError:
        return False
    return True


def index_structure(world: World) -> Structure:
    """The index tensors of ``world``, on its device; the joint tree when its coordinates are
    reduced (a `ReducedCoordinatesError` when they cannot be)."""
    device = world.device
    long = {"dtype": torch.long, "device": device}

    def index(values) -> Tensor:
        return torch.tensor(list(values), **long)

    def mask(values) -> Tensor:
        return torch.tensor(list(values), dtype=torch.bool, device=device)

    row_joint, row_slot = [], []
    for joint, kind in enumerate(world.joint_types):
        for slot in _SLOTS[kind]:
            row_joint.append(joint)
            row_slot.append(slot)
    force = [i for i, t in enumerate(world.actuator_type) if t == "force"]
    servo = [i for i, t in enumerate(world.actuator_type) if t == "servo"]
    limited = [i for i, has in enumerate(world.joint_has_limits) if has]
    groups = {}
    for shape in SHAPES:
        members = [i for i, s in enumerate(world.shapes) if s == shape and not world.is_static[i]]
        if members:
            groups[shape] = index(members)
    return Structure(
        dynamic=mask(not s for s in world.is_static),
        shape_groups=groups,
        joint_parent=index(world.joint_parent),
        joint_child=index(world.joint_child),
        joint_slider=mask(t == "slider" for t in world.joint_types),
        joint_hinge=mask(t == "hinge" for t in world.joint_types),
        row_joint=index(row_joint),
        row_slot=index(row_slot),
        force_actuators=index(force),
        force_joints=index(world.actuator_joint[i] for i in force),
        servo_actuators=index(servo),
        servo_joints=index(world.actuator_joint[i] for i in servo),
        servo_position_mode=mask(world.actuator_target[i] == "position" for i in servo),
        limited_joints=index(limited),
        limit_rows=index(limited + limited),
        limit_sign=torch.tensor(
            [1.0] * len(limited) + [-1.0] * len(limited), dtype=world.dtype, device=device
        ),
        plane_contact_plane=index(world.plane_contact_plane),
        plane_contact_body=index(world.plane_contact_body),
        segment_contact_a=index(world.segment_contact_a),
        segment_contact_b=index(world.segment_contact_b),
        box_contact_a=index(world.box_contact_a),
        box_contact_b=index(world.box_contact_b),
        box_segment_box=index(world.box_segment_box),
        box_segment_other=index(world.box_segment_other),
        **{key: index(getattr(world, key)) for key in _HULL_INDICES},
        **{key: _table(getattr(world, key), dtype, device) for key, dtype in _HULL_TABLES.items()},
        hull_extent_a=_extent(world, world.hull_contact_shape_a),
        hull_extent_b=_extent(world, world.hull_contact_shape_b),
        hull_extent_segment=_extent(world, world.hull_segment_shape),
        hull_plane_rows=_hull_plane_rows(world, long),
        tree=articulated_tree(world) if world.coordinates == "reduced" else None,
    )


def _hull_plane_rows(world: World, long: dict) -> Tensor | None:
    """(H, K) the plane candidates of each hull-plane pair's points, -1 padded; None if none."""
    pairs: dict[tuple[int, int], list[int]] = {}
    for row, (plane, body) in enumerate(
        zip(world.plane_contact_plane, world.plane_contact_body, strict=True)
    ):
        if world.shapes[body] == "hull":
            pairs.setdefault((plane, body), []).append(row)
    if not pairs:
        return None
    width = max(len(rows) for rows in pairs.values())
    padded = [rows + [-1] * (width - len(rows)) for rows in pairs.values()]
    return torch.tensor(padded, **long)
