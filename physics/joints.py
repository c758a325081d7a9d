"""Joint kinematics: constraint rows, their position errors, and joint coordinates.

Every joint owns up to 3 point rows (the anchor of the child must stay on the parent's anchor,
or on its axis for a slider) and up to 3 angular rows:

    ball    3 point rows                         (3 rotational degrees of freedom left)
    hinge   3 point rows + 2 rows keeping the child's axis on the parent's axis
    slider  2 point rows normal to the axis + 3 rows locking the relative rotation
    fixed   3 point rows + 3 rows locking the relative rotation
"""

from __future__ import annotations

import dataclasses

import torch

from .math3d import hinge_angle, rotation_error
from .rows import Rows, angular_rows, point_rows, row_velocity
from .state import State
from .world import World

Tensor = torch.Tensor


@dataclasses.dataclass
class JointFrames:
    """World-frame joint geometry at the current state, (B, J, ...) each.

    parent_position, child_position: (B, J, 3) centres of mass (the world slot is the origin).
    parent_anchor, child_anchor: (B, J, 3) the anchor as attached to each body.
    axis: (B, J, 3) the joint axis as attached to the parent; child_axis as attached to the child.
    parent_ref, child_ref: (B, J, 3) unit vectors normal to the axis that coincided initially.
    parent_rotation, child_rotation: (B, J, 3, 3).
    """

    parent_position: Tensor
    child_position: Tensor
    parent_anchor: Tensor
    child_anchor: Tensor
    axis: Tensor
    child_axis: Tensor
    parent_ref: Tensor
    child_ref: Tensor
    parent_rotation: Tensor
    child_rotation: Tensor


def _rotate(rotation: Tensor, vector: Tensor) -> Tensor:
    return (rotation @ vector[..., None])[..., 0]


def _take(tensor: Tensor, index: Tensor) -> Tensor:
    """Gather along the body/joint/row axis (dim 1); index_select is much faster than []."""
    return tensor.index_select(1, index)


def joint_frames(world: World, position: Tensor, rotation: Tensor) -> JointFrames:
    """Joint geometry from body poses: position (B, N, 3), rotation (B, N, 3, 3)."""
    parent, child = world.structure.joint_parent, world.structure.joint_child
    batch = position.shape[0]
    origin = torch.zeros(batch, 1, 3, dtype=position.dtype, device=position.device)
    identity = torch.eye(3, dtype=position.dtype, device=position.device).expand(batch, 1, 3, 3)
    positions = torch.cat([position, origin], 1)
    rotations = torch.cat([rotation, identity], 1)
    parent_position, parent_rotation = _take(positions, parent), _take(rotations, parent)
    child_position, child_rotation = _take(position, child), _take(rotation, child)
    return JointFrames(
        parent_position=parent_position,
        child_position=child_position,
        parent_anchor=parent_position + _rotate(parent_rotation, world.anchor_parent),
        child_anchor=child_position + _rotate(child_rotation, world.anchor_child),
        axis=_rotate(parent_rotation, world.axis_parent),
        child_axis=_rotate(child_rotation, world.axis_child),
        parent_ref=_rotate(parent_rotation, world.ref_parent),
        child_ref=_rotate(child_rotation, world.ref_child),
        parent_rotation=parent_rotation,
        child_rotation=child_rotation,
    )


def equality_rows(world: World, frames: JointFrames) -> tuple[Rows, Tensor]:
    """The joints' constraint rows and their position errors.

    Returns:
        rows: m rows (all joints' used slots).
        error: (B, m) position error of each row (m or rad); zero when the joint is satisfied.
    """
    structure = world.structure
    parent, child, slider = structure.joint_parent, structure.joint_child, structure.joint_slider
    used_joint, used_slot = structure.row_joint, structure.row_slot
    batch, joints = frames.axis.shape[:2]
    eye = torch.eye(3, dtype=frames.axis.dtype, device=frames.axis.device).expand(
        batch, joints, 3, 3
    )
    second_ref = torch.linalg.cross(frames.axis, frames.parent_ref)

    # Point rows: world axes for ball, hinge and fixed; the two normals of a slider's axis.
    slider_dirs = torch.stack([frames.parent_ref, second_ref, frames.axis], 2)
    point_dirs = torch.where(slider[None, :, None, None], slider_dirs, eye)  # (B, J, 3, 3)
    separation = frames.child_anchor - frames.parent_anchor
    point_error = (point_dirs @ separation[..., None])[..., 0]  # (B, J, 3)

    # Angular rows: a hinge keeps the child's axis normal to both parent reference vectors;
    # slider and fixed joints lock the relative rotation.
    hinge_normals = torch.stack([frames.parent_ref, second_ref], 2)  # (B, J, 2, 3)
    child_axis = frames.child_axis[:, :, None, :].expand_as(hinge_normals)
    hinge_dirs = -torch.linalg.cross(hinge_normals, child_axis)  # row: -(u x w) . (w_b - w_a)
    hinge_error = (hinge_normals * child_axis).sum(-1)
    hinge_dirs = torch.cat([hinge_dirs, torch.zeros_like(hinge_dirs[:, :, :1])], 2)
    hinge_error = torch.cat([hinge_error, torch.zeros_like(hinge_error[..., :1])], -1)
    target = frames.parent_rotation @ world.rest_rotation
    lock_error = rotation_error(frames.child_rotation @ target.transpose(-1, -2))
    is_hinge = structure.joint_hinge
    angle_dirs = torch.where(is_hinge[None, :, None, None], hinge_dirs, eye)
    angle_error = torch.where(is_hinge[None, :, None], hinge_error, lock_error)

    # Gather the used slots into m rows: slot k of joint j is entry 6 j + k.
    flat = used_joint * 6 + used_slot
    is_point = used_slot < 3
    dirs = _take(torch.cat([point_dirs, angle_dirs], 2).flatten(1, 2), flat)
    error = _take(torch.cat([point_error, angle_error], 2).flatten(1, 2), flat)
    body_a, body_b = parent[used_joint], child[used_joint]  # static, tiny
    lever_b = frames.child_anchor - frames.child_position
    # The parent's lever goes to the child's anchor: the exact derivative of a slider's
    # separation along its (rotating) normal.
    lever_a = frames.child_anchor - frames.parent_position
    rows = _point_or_angular_rows(
        body_a, body_b, dirs, _take(lever_a, used_joint), _take(lever_b, used_joint), is_point
    )
    return rows, error


def _point_or_angular_rows(body_a, body_b, dirs, lever_a, lever_b, use_point) -> Rows:
    """Per row, a point row (relative velocity of two body points along ``dirs``) where
    ``use_point`` (r,) is true, else an angular row (relative angular velocity along ``dirs``)."""
    linear = point_rows(body_a, body_b, dirs, lever_a, lever_b)
    angular = angular_rows(body_a, body_b, dirs)
    point = use_point[None, :, None]
    return Rows(
        body_a,
        body_b,
        torch.where(point, linear.jac_a, angular.jac_a),
        torch.where(point, linear.jac_b, angular.jac_b),
    )


def axis_rows(world: World, frames: JointFrames) -> tuple[Rows, Tensor]:
    """One row per joint along its axis, and the joint coordinate.

    The row's velocity is the joint velocity q' (m/s along a slider, rad/s about a hinge);
    applying an impulse lambda to it is a generalised force along the joint. Ball and fixed
    joints get a row too (unused).

    Returns:
        rows: J rows.
        q: (B, J) joint coordinate: slider displacement (m) or hinge angle (rad, in (-pi, pi]),
            both zero in the initial configuration.
    """
    structure = world.structure
    parent, child, slider = structure.joint_parent, structure.joint_child, structure.joint_slider
    # A slider's axis row moves points along the axis; a hinge's turns about it.
    rows = _point_or_angular_rows(
        parent,
        child,
        frames.axis,
        frames.child_anchor - frames.parent_position,
        frames.child_anchor - frames.child_position,
        slider,
    )
    displacement = (frames.axis * (frames.child_anchor - frames.parent_anchor)).sum(-1)
    angle = hinge_angle(frames.axis, frames.parent_ref, frames.child_ref)
    return rows, torch.where(slider[None], displacement, angle)


def joint_positions(world: World, state: State) -> tuple[Tensor, Tensor]:
    """Joint coordinates q (B, J) and velocities q' (B, J) of a state (hinge: rad, slider: m)."""
    frames = joint_frames(world, state.position, state.rotation)
    rows, q = axis_rows(world, frames)
    velocity = torch.cat([state.linear_velocity, state.angular_velocity], -1)
    velocity = torch.cat([velocity, velocity.new_zeros(velocity.shape[0], 1, 6)], 1)
    return q, row_velocity(rows, velocity)
