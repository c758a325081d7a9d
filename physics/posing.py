"""The initial state from joint coordinates: a hinge's angle and rate, a slider's offset and speed.

A model's bodies are drawn in one configuration (the joints' zero); `Joint.position` and
`Joint.velocity` start the world elsewhere in joint space. `pose_joints` moves every body of a
joint's subtree (the bodies reached from its child through further joints) rigidly: a hinge
turns them about its axis through its anchor by q, a slider shifts them along its axis by q.
Joints are applied parents first, so a child joint turns about where its parent joint put it.
Velocities then add each joint's rate along its final axis: a hinge adds q' * axis to the
angular velocity of its subtree and q' * axis x (p - anchor) to their linear velocities, a
slider q' * axis; for a tree this is the exact body velocity of the joint rates.
"""

from __future__ import annotations

import dataclasses

import torch

from .math3d import axis_angle_to_matrix
from .spec import ModelError

Tensor = torch.Tensor


@dataclasses.dataclass(frozen=True)
class JointMotion:
    """What `pose_joints` needs of one joint.

    name: for error messages; kind: "hinge" or "slider"; parent: body index, or N for the
    world; child: body index; anchor_parent, axis_parent: (B, 3) the anchor (m) and the unit
    axis in the parent's body frame (the world frame for the world); position: (B,) q (rad or
    m) or None; velocity: (B,) q' (rad/s or m/s) or None.
    """

    name: str
    kind: str
    parent: int
    child: int
    anchor_parent: Tensor
    axis_parent: Tensor
    position: Tensor | None
    velocity: Tensor | None


def _subtrees(n_bodies: int, parents: list[int], children: list[int]) -> dict[int, list[int]]:
    """Body index -> the bodies below it through joints (itself included)."""
    below: dict[int, list[int]] = {b: [] for b in range(n_bodies)}
    for parent, child in zip(parents, children, strict=True):
        if parent < n_bodies:
            below[parent].append(child)

    def collect(body: int, seen: list[int]) -> list[int]:
        if body in seen:
            raise ModelError(
                "joint position/velocity: the joints form a loop; a start in joint "
                "coordinates needs a tree of joints"
            )
        seen.append(body)
        for child in below[body]:
            collect(child, seen)
        return seen

    return {b: collect(b, []) for b in range(n_bodies)}


def _parents_first(joints: list[JointMotion], n_bodies: int) -> list[JointMotion]:
    """The joints ordered so that a joint whose parent is another joint's child comes after it."""
    child_of = {j.child: j for j in joints}
    depth: dict[str, int] = {}

    def level(joint: JointMotion, guard: int) -> int:
        if joint.name not in depth:
            if guard > len(joints):
                raise ModelError(
                    "joint position/velocity: the joints form a loop; a start in joint "
                    "coordinates needs a tree of joints"
                )
            above = child_of.get(joint.parent) if joint.parent < n_bodies else None
            depth[joint.name] = 0 if above is None else level(above, guard + 1) + 1
        return depth[joint.name]

    return sorted(joints, key=lambda j: level(j, 0))


def pose_joints(
    position: Tensor,
    rotation: Tensor,
    linear_velocity: Tensor,
    angular_velocity: Tensor,
    joints: list[JointMotion],
    all_parents: list[int],
    all_children: list[int],
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Move the drawn configuration to the joints' coordinates and add their rates.

    Args:
        position: (B, N, 3) body positions (m) as drawn; rotation (B, N, 3, 3).
        linear_velocity, angular_velocity: (B, N, 3) world-frame velocities as given per body.
        joints: the hinges and sliders with a position or velocity to apply.
        all_parents, all_children: every joint's parent (N = the world) and child, for the
            subtrees (fixed and ball joints carry their children along).

    Returns:
        position, rotation, linear_velocity, angular_velocity with the same shapes.
    """
    n = position.shape[1]
    subtree = _subtrees(n, all_parents, all_children)
    batch = position.shape[0]
    eye = torch.eye(3, dtype=position.dtype, device=position.device).expand(batch, 3, 3)
    origin = position.new_zeros(batch, 3)

    def frame_of(joint: JointMotion, position: Tensor, rotation: Tensor):
        p = origin if joint.parent == n else position[:, joint.parent]
        r = eye if joint.parent == n else rotation[:, joint.parent]
        anchor = p + (r @ joint.anchor_parent[..., None])[..., 0]
        return anchor, (r @ joint.axis_parent[..., None])[..., 0]

    ordered = _parents_first(joints, n)
    for joint in ordered:
        if joint.position is None:
            continue
        anchor, axis = frame_of(joint, position, rotation)
        moved = torch.zeros(n, dtype=torch.bool, device=position.device)
        moved[subtree[joint.child]] = True
        q = joint.position[:, None]
        if joint.kind == "hinge":
            turn = axis_angle_to_matrix(axis * q)[:, None]  # (B, 1, 3, 3)
            new_position = (
                anchor[:, None] + (turn @ (position - anchor[:, None])[..., None])[..., 0]
            )
            new_rotation = turn @ rotation
        else:
            new_position = position + (axis * q)[:, None]
            new_rotation = rotation
        position = torch.where(moved[None, :, None], new_position, position)
        rotation = torch.where(moved[None, :, None, None], new_rotation, rotation)

    for joint in ordered:
        if joint.velocity is None:
            continue
        anchor, axis = frame_of(joint, position, rotation)
        moved = torch.zeros(n, dtype=torch.bool, device=position.device)
        moved[subtree[joint.child]] = True
        rate = joint.velocity[:, None, None]
        if joint.kind == "hinge":
            spin = axis[:, None] * rate
            linear = torch.linalg.cross(spin.expand_as(position), position - anchor[:, None])
            angular_velocity = torch.where(
                moved[None, :, None], angular_velocity + spin, angular_velocity
            )
        else:
            linear = (axis[:, None] * rate).expand_as(position)
        linear_velocity = torch.where(
            moved[None, :, None], linear_velocity + linear, linear_velocity
        )
    return position, rotation, linear_velocity, angular_velocity
