"""The joint tree a reduced-coordinates world steps on: the order joints are visited in, the
bodies each joint moves, and each joint's column of q; or why the model does not fit."""

from __future__ import annotations

import dataclasses

from ..spec import ModelError
from ..world import World


class ReducedCoordinatesError(ModelError):
    """The model cannot use ``coordinates = "reduced"``: the message names the joint, body or
    actuator in the way and what would make it fit."""


@dataclasses.dataclass(frozen=True)
class Tree:
    """The static shape of an articulated tree.

    order: joint indices, each joint after the joint that moves its parent.
    moved: per joint index, the bodies it moves (its child and the child's descendants).
    coordinate: per joint index, its column of q, None for a fixed joint (it has none).
    coordinate_joints: per column of q (C of them), its joint.
    force_coordinates: per force motor (in ``world.structure.force_actuators`` order), the
        column of q it drives.
    servos: per servo, its action column and the column of q it drives.
    limited: the columns of q whose joints have limits.
    """

    order: tuple[int, ...]
    moved: tuple[tuple[int, ...], ...]
    coordinate: tuple[int | None, ...]
    coordinate_joints: tuple[int, ...]
    force_coordinates: tuple[int, ...]
    servos: tuple[tuple[int, int], ...]
    limited: tuple[int, ...]


def articulated_tree(world: World) -> Tree:
    """The tree of ``world``'s joints, or a `ModelError` saying why reduced coordinates do not
    apply and what would make them apply."""
    why = "coordinates = 'reduced'"
    n = world.n_bodies
    if not world.joint_names:
        raise ReducedCoordinatesError(
            f"world: {why} needs at least one joint; use coordinates = 'maximal'"
        )
    for name, kind in zip(world.joint_names, world.joint_types, strict=True):
        if kind not in ("hinge", "slider", "fixed"):
            raise ReducedCoordinatesError(
                f"joint {name!r}: {why} supports hinge, slider and fixed joints, not {kind!r}; "
                "use coordinates = 'maximal'"
            )
    coordinate_joints = tuple(j for j, kind in enumerate(world.joint_types) if kind != "fixed")
    if not coordinate_joints:
        raise ReducedCoordinatesError(
            f"world: {why} needs a hinge or slider joint (fixed joints alone move nothing); "
            "use coordinates = 'maximal'"
        )
    coordinate = tuple(
        coordinate_joints.index(j) if j in coordinate_joints else None
        for j in range(world.n_joints)
    )
    pairs = [
        (world.body_names[a], world.body_names[b])
        for a, b in (
            *zip(world.plane_contact_plane, world.plane_contact_body, strict=True),
            *zip(world.segment_contact_a, world.segment_contact_b, strict=True),
            *zip(world.box_contact_a, world.box_contact_b, strict=True),
            *zip(world.box_segment_box, world.box_segment_other, strict=True),
            *zip(world.hull_contact_a, world.hull_contact_b, strict=True),
            *zip(world.hull_segment_hull, world.hull_segment_other, strict=True),
        )
    ]
    if pairs:
        raise ReducedCoordinatesError(
            f"bodies {pairs[0][0]!r} and {pairs[0][1]!r} may collide: {why} has no contacts; "
            "set collide = false on one of them or use coordinates = 'maximal'"
        )
    parent_joint: list[int | None] = [None] * n
    for joint, child in enumerate(world.joint_child):
        if parent_joint[child] is not None:
            raise ReducedCoordinatesError(
                f"body {world.body_names[child]!r} is the child of two joints: {why} needs a "
                "tree (one parent joint per body); use coordinates = 'maximal'"
            )
        parent_joint[child] = joint
    for body in range(n):
        if world.is_static[body]:
            if parent_joint[body] is not None:
                raise ReducedCoordinatesError(
                    f"body {world.body_names[body]!r} is static and the child of joint "
                    f"{world.joint_names[parent_joint[body]]!r}: remove the joint or static = true"
                )
            continue
        if parent_joint[body] is None:
            raise ReducedCoordinatesError(
                f"body {world.body_names[body]!r} has no joint: {why} needs every dynamic body "
                "joined to the world or to another body; use coordinates = 'maximal'"
            )
    depth: list[int] = []
    for joint, parent in enumerate(world.joint_parent):
        steps, body = 0, parent
        while body < n:
            if world.is_static[body]:
                raise ReducedCoordinatesError(
                    f"joint {world.joint_names[joint]!r}: {why} needs joints to hang from the "
                    f"world or a dynamic body, not the static body {world.body_names[body]!r}; "
                    'use parent = "world"'
                )
            steps += 1
            if steps > n:
                raise ReducedCoordinatesError(
                    f"joint {world.joint_names[joint]!r} is on a closed loop: {why} needs a "
                    "tree; use coordinates = 'maximal'"
                )
            body = world.joint_parent[parent_joint[body]]
        depth.append(steps)
    order = tuple(sorted(range(len(depth)), key=lambda j: depth[j]))
    moved = []
    for joint in range(len(depth)):
        bodies = []
        for body in range(n):
            walk = body
            while walk < n and parent_joint[walk] is not None:
                if parent_joint[walk] == joint:
                    bodies.append(body)
                    break
                walk = world.joint_parent[parent_joint[walk]]
        moved.append(tuple(bodies))
    return Tree(
        order=order,
        moved=tuple(moved),
        coordinate=coordinate,
        coordinate_joints=coordinate_joints,
        force_coordinates=tuple(
            coordinate[j]
            for j, kind in zip(world.actuator_joint, world.actuator_type, strict=True)
            if kind == "force"
        ),
        servos=tuple(
            (actuator, coordinate[j])
            for actuator, (j, kind) in enumerate(
                zip(world.actuator_joint, world.actuator_type, strict=True)
            )
            if kind == "servo"
        ),
        limited=tuple(c for c, j in enumerate(coordinate_joints) if world.joint_has_limits[j]),
    )
