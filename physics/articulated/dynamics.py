"""Joint-space dynamics: the mass matrix M(q) and its inverse, the projection of body velocities
onto the joints, and the joint accelerations from gravity, velocity products, motors and damping."""

from __future__ import annotations

import dataclasses

import torch

from ..actuators import clipped_motor_forces
from ..math3d import spd_inverse
from ..state import State
from ..world import World
from .kinematics import Configuration, apply, apply_transposed, cross, jacobians, velocity_products
from .tree import Tree

Tensor = torch.Tensor


@dataclasses.dataclass
class JointSpace:
    """The tree's mass properties at one configuration.

    bodies: the dynamic body indices (D of them), in the order of the stacked axis.
    linear, angular: (B, D, 3, C) Jacobians (see `jacobians`).
    inverse: (B, C, C) inverse of the joint-space mass matrix M(q) (kg, kg m^2, ...).
    """

    bodies: list[int]
    linear: Tensor
    angular: Tensor
    inverse: Tensor


def inertia_times(rotation: Tensor, moment: Tensor, vector: Tensor) -> Tensor:
    """World-frame inertia R diag(moment) R^T times a (B, 3) vector."""
    return apply(rotation, moment * apply_transposed(rotation, vector))


def joint_space(world: World, tree: Tree, config: Configuration, moments: Tensor):
    """M(q) = sum_b m_b Jv_b^T Jv_b + Jw_b^T I_b Jw_b and its inverse, with the Jacobians."""
    bodies, linear, angular = jacobians(world, tree, config)
    mass = world.mass[:, bodies]  # (B, D)
    # The angular Jacobians in the body frames, where the inertia is diagonal.
    angular_local = torch.stack(
        [
            (config.rotation[body][..., :, :, None] * angular[:, k, :, None, :]).sum(-3)
            for k, body in enumerate(bodies)
        ],
        1,
    )  # (B, D, 3, J)
    body_moments = moments[:, bodies, :, None, None]  # (B, D, 3, 1, 1)
    matrix = (mass[:, :, None, None, None] * linear[..., :, None] * linear[..., None, :]).sum(
        (1, 2)
    ) + (body_moments * angular_local[..., :, None] * angular_local[..., None, :]).sum((1, 2))
    return JointSpace(bodies, linear, angular, spd_inverse(matrix))


def solve(space: JointSpace, generalised: Tensor) -> Tensor:
    """M(q)^-1 times (B, C) generalised forces or momenta."""
    return (space.inverse * generalised[:, None, :]).sum(-1)


def project_velocity(world, config, moments, space: JointSpace, state: State) -> Tensor:
    """q' (B, C) whose body velocities are closest to the state's in kinetic energy: the joint
    momenta J^T (m v, I w) through M(q)^-1, as the maximal engine projects onto its joints. For
    a state that satisfies the joints it is the joints' own velocity."""
    momentum, angular_momentum = [], []
    for body in space.bodies:
        momentum.append(world.mass[:, body, None] * state.linear_velocity[:, body])
        angular_momentum.append(
            inertia_times(config.rotation[body], moments[:, body], state.angular_velocity[:, body])
        )
    generalised = (space.linear * torch.stack(momentum, 1)[..., None]).sum((1, 2)) + (
        space.angular * torch.stack(angular_momentum, 1)[..., None]
    ).sum((1, 2))
    return solve(space, generalised)


def acceleration(world, tree, config, moments, space: JointSpace, q_dot, applied):
    """q'' (B, C) at a configuration and joint velocity q' (B, C), with ``applied`` (B, C)
    generalised motor forces (N or N m)."""
    spin, angular_bias, linear_bias = velocity_products(world, tree, config, q_dot)
    force, torque = [], []
    for body in space.bodies:
        rotation, moment = config.rotation[body], moments[:, body]
        force.append(world.mass[:, body, None] * (world.gravity - linear_bias[body]))
        torque.append(
            -inertia_times(rotation, moment, angular_bias[body])
            - cross(spin[body], inertia_times(rotation, moment, spin[body]))
        )
    generalised = (
        (space.linear * torch.stack(force, 1)[..., None]).sum((1, 2))
        + (space.angular * torch.stack(torque, 1)[..., None]).sum((1, 2))
        + applied
        - coordinate_damping(world, tree) * q_dot
    )
    return solve(space, generalised)


def coordinate_damping(world: World, tree: Tree) -> Tensor:
    """The hinges' and sliders' damping (B, C) (N s/m or N m s/rad)."""
    if len(tree.coordinate_joints) == world.n_joints:
        return world.joint_damping
    return torch.stack([world.joint_damping[:, j] for j in tree.coordinate_joints], 1)


def motor_forces(world: World, tree: Tree, action: Tensor, like: Tensor) -> Tensor:
    """Clipped force-motor actions (B, A) as generalised forces (B, C); ``like``: (B, C)."""
    columns = [torch.zeros_like(like[:, 0])] * len(tree.coordinate_joints)
    if tree.force_coordinates:
        forces = clipped_motor_forces(world, action)
        for force, column in enumerate(tree.force_coordinates):
            columns[column] = columns[column] + forces[:, force]
    return torch.stack(columns, 1)
