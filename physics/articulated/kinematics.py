"""Kinematics of the joint tree: joint coordinates read from a state, body poses from joint
coordinates (forward kinematics), body Jacobians and the velocity-product accelerations."""

from __future__ import annotations

import dataclasses

import torch

from ..math3d import hinge_angle
from ..state import State
from ..world import World
from .tree import Tree

Tensor = torch.Tensor


# Small products written as sums over an axis of 3: Inductor unrolls them into the surrounding
# fused loop, where a matrix product would be a library call per product.
def apply(rotation: Tensor, vector: Tensor) -> Tensor:
    """rotation @ vector: (B, 3, 3), (B, 3) -> (B, 3)."""
    return (rotation * vector[..., None, :]).sum(-1)


def apply_transposed(rotation: Tensor, vector: Tensor) -> Tensor:
    """rotation^T @ vector: (B, 3, 3), (B, 3) -> (B, 3)."""
    return (rotation * vector[..., :, None]).sum(-2)


def compose(left: Tensor, right: Tensor) -> Tensor:
    """left @ right for (B, 3, 3) matrices."""
    return (left[..., :, :, None] * right[..., None, :, :]).sum(-2)


def dot(a: Tensor, b: Tensor) -> Tensor:
    return (a * b).sum(-1)


def cross(a: Tensor, b: Tensor) -> Tensor:
    return torch.linalg.cross(a, b)


@dataclasses.dataclass
class Configuration:
    """World-frame geometry of the tree in one configuration (lists indexed by body / joint).

    rotation[b]: (B, 3, 3) and position[b]: (B, 3) of each dynamic body (None for static ones);
    axis[j]: (B, 3) unit joint axis and anchor[j]: (B, 3) joint point, as attached to the parent.
    """

    rotation: list[Tensor | None]
    position: list[Tensor | None]
    axis: list[Tensor]
    anchor: list[Tensor]


def parent_pose(world: World, config: Configuration, parent: int):
    """The parent's rotation and position, None for the world frame (identity and origin: the
    products with them are skipped, not computed)."""
    if parent >= world.n_bodies:
        return None, None
    return config.rotation[parent], config.position[parent]


def attach(rotation: Tensor | None, vector: Tensor) -> Tensor:
    """A parent-frame vector (B, 3) in the world frame."""
    return vector if rotation is None else apply(rotation, vector)


def offset(position: Tensor | None, vector: Tensor) -> Tensor:
    return vector if position is None else position + vector


def read_joints(world: World, tree: Tree, state: State):
    """The state's configuration and its joint coordinates q (B, C) (rad or m), as
    `physics.joint_positions` defines them (zero in the initial configuration)."""
    config = Configuration(
        rotation=[None if s else state.rotation[:, b] for b, s in enumerate(world.is_static)],
        position=[None if s else state.position[:, b] for b, s in enumerate(world.is_static)],
        axis=[None] * world.n_joints,
        anchor=[None] * world.n_joints,
    )
    q = [None] * len(tree.coordinate_joints)
    for joint in tree.order:
        parent, child = world.joint_parent[joint], world.joint_child[joint]
        parent_rotation, parent_position = parent_pose(world, config, parent)
        child_rotation, child_position = config.rotation[child], config.position[child]
        axis = attach(parent_rotation, world.axis_parent[:, joint])
        anchor = offset(parent_position, attach(parent_rotation, world.anchor_parent[:, joint]))
        config.axis[joint], config.anchor[joint] = axis, anchor
        kind, column = world.joint_types[joint], tree.coordinate[joint]
        if kind == "hinge":
            parent_ref = attach(parent_rotation, world.ref_parent[:, joint])
            child_ref = apply(child_rotation, world.ref_child[:, joint])
            q[column] = hinge_angle(axis, parent_ref, child_ref)
        elif kind == "slider":
            child_anchor = child_position + apply(child_rotation, world.anchor_child[:, joint])
            q[column] = dot(axis, child_anchor - anchor)
    return config, torch.stack(q, 1)


def forward_kinematics(world: World, tree: Tree, q: Tensor) -> Configuration:
    """Body poses and joint frames at joint coordinates q (B, C), from the initial
    configuration's joint frames."""
    config = Configuration(
        rotation=[None] * world.n_bodies,
        position=[None] * world.n_bodies,
        axis=[None] * world.n_joints,
        anchor=[None] * world.n_joints,
    )
    for joint in tree.order:
        parent, child = world.joint_parent[joint], world.joint_child[joint]
        parent_rotation, parent_position = parent_pose(world, config, parent)
        axis = attach(parent_rotation, world.axis_parent[:, joint])
        anchor = offset(parent_position, attach(parent_rotation, world.anchor_parent[:, joint]))
        rest = world.rest_rotation[:, joint]  # the child at q = 0
        if parent_rotation is not None:
            rest = compose(parent_rotation, rest)
        kind = world.joint_types[joint]
        if kind == "hinge":
            angle = q[:, tree.coordinate[joint]]
            # Rodrigues on each column c of the rest rotation, about the world axis a:
            # c cos + (a x c) sin + a (a . c)(1 - cos).
            cosine, sine = torch.cos(angle)[:, None, None], torch.sin(angle)[:, None, None]
            axis_col = axis[:, :, None]
            rotation = (
                rest * cosine
                + torch.linalg.cross(axis_col.expand_as(rest), rest, dim=1) * sine
                + axis_col * (axis_col * rest).sum(1, keepdim=True) * (1 - cosine)
            )
            point = anchor
        elif kind == "slider":
            rotation = rest
            point = anchor + q[:, tree.coordinate[joint], None] * axis
        else:  # fixed: the rest pose on the parent
            rotation, point = rest, anchor
        config.axis[joint], config.anchor[joint] = axis, anchor
        config.rotation[child] = rotation
        config.position[child] = point - apply(rotation, world.anchor_child[:, joint])
    return config


def jacobians(world: World, tree: Tree, config: Configuration):
    """Each dynamic body's Jacobian: linear and angular velocity per unit q' of each coordinate.

    Returns:
        bodies: the dynamic body indices, in the order of the stacked axis.
        linear, angular: (B, D, 3, C) for the D dynamic bodies (m or rad per unit of q').
    """
    bodies = [b for b in range(world.n_bodies) if not world.is_static[b]]
    zero = torch.zeros_like(config.anchor[0])
    linear_rows, angular_rows = [], []
    for body in bodies:
        linear, angular = [], []
        for joint in tree.coordinate_joints:
            if body not in tree.moved[joint]:
                linear.append(zero)
                angular.append(zero)
            elif world.joint_types[joint] == "hinge":
                axis = config.axis[joint]
                linear.append(cross(axis, config.position[body] - config.anchor[joint]))
                angular.append(axis)
            else:
                linear.append(config.axis[joint])
                angular.append(zero)
        linear_rows.append(torch.stack(linear, -1))
        angular_rows.append(torch.stack(angular, -1))
    return bodies, torch.stack(linear_rows, 1), torch.stack(angular_rows, 1)


def velocity_products(world: World, tree: Tree, config: Configuration, q_dot: Tensor):
    """Body spins at q' (B, C) and the accelerations at q'' = 0 (the velocity-product terms).

    Returns per body index (zero for static bodies): spin, and the bias angular and linear
    accelerations, each (B, 3).
    """
    n = world.n_bodies
    zero = torch.zeros_like(config.anchor[0])
    spin = [zero] * (n + 1)
    angular_bias, linear_bias = [zero] * (n + 1), [zero] * (n + 1)
    for joint in tree.order:
        parent, child = world.joint_parent[joint], world.joint_child[joint]
        axis, anchor = config.axis[joint], config.anchor[joint]
        kind, column = world.joint_types[joint], tree.coordinate[joint]
        parent_position = zero if parent >= n else config.position[parent]
        w_p = spin[min(parent, n)]
        alpha_p, acc_p = angular_bias[min(parent, n)], linear_bias[min(parent, n)]
        lever = config.position[child] - parent_position
        if kind == "hinge":
            rate = q_dot[:, column, None]
            to_anchor, from_anchor = anchor - parent_position, config.position[child] - anchor
            w_c = w_p + rate * axis
            # The axis turns with the parent: d(axis)/dt = w_p x axis.
            alpha_c = alpha_p + rate * cross(w_p, axis)
            acc_c = (
                acc_p
                + cross(alpha_p, to_anchor)
                + cross(w_p, cross(w_p, to_anchor))
                + cross(alpha_c, from_anchor)
                + cross(w_c, cross(w_c, from_anchor))
            )
        else:  # slider or fixed: the child turns with its parent
            w_c, alpha_c = w_p, alpha_p
            acc_c = acc_p + cross(alpha_p, lever) + cross(w_p, cross(w_p, lever))
            if kind == "slider":  # the Coriolis term of sliding along a turning axis
                acc_c = acc_c + 2.0 * q_dot[:, column, None] * cross(w_p, axis)
        spin[child] = w_c
        angular_bias[child], linear_bias[child] = alpha_c, acc_c
    return spin[:n], angular_bias[:n], linear_bias[:n]
