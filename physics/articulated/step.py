"""One timestep in reduced coordinates (see `physics.articulated`)."""

from __future__ import annotations

import torch

from ..actuators import checked_action
from ..inertia import body_moments
from ..state import State
from ..world import World
from .constraints import limit_rows, servo_rows, solve_rows
from .dynamics import acceleration, joint_space, motor_forces, project_velocity
from .kinematics import forward_kinematics, read_joints

Tensor = torch.Tensor


def reduced_step(world: World, state: State, action: Tensor | None = None) -> State:
    """One timestep in joint coordinates (see the module docstring); same contract as
    `physics.step`: state (B, N, ...) in, the state one timestep later out."""
    tree = world.structure.tree
    dt = world.timestep
    config, q = read_joints(world, tree, state)
    moments = body_moments(world.mass, world.size, world.structure.shape_groups)
    space = joint_space(world, tree, config, moments)
    q_dot = project_velocity(world, config, moments, space, state)
    # As in the maximal engine, a world without actuators ignores the action.
    action = checked_action(world, action if world.actuator_names else None, q)
    applied = motor_forces(world, tree, action, q)
    # Velocity Verlet: half kick at the start, drift, half kick at the end configuration. The
    # end kick's velocity-dependent terms (Coriolis, centripetal, damping) take the end velocity
    # predicted by a whole Euler kick, q' + dt q'': off by O(dt^2), so the step stays second
    # order (at the half-step velocity it would be first order: 30x the error on the double
    # pendulum at 0.5 s).
    q_ddot = acceleration(world, tree, config, moments, space, q_dot, applied)
    q_dot = q_dot + 0.5 * dt * q_ddot
    # Servos and limits act on the velocity of the drift (the drift stops at the limits) and
    # again on the stored velocity (which then does not point through a limit). The servos'
    # second solve continues their accumulated impulses (at most max_torque dt per step, as in
    # the maximal engine's relax pass); the limits' starts afresh.
    servos = servo_rows(world, tree, q, action)
    rows = servos + limit_rows(world, tree, q)
    impulses = {}
    if rows:
        q_dot, impulses = solve_rows(world, space, rows, q_dot, {})
    predicted = q_dot + 0.5 * dt * q_ddot
    q = q + dt * q_dot
    config = forward_kinematics(world, tree, q)
    space = joint_space(world, tree, config, moments)
    q_dot = q_dot + 0.5 * dt * acceleration(world, tree, config, moments, space, predicted, applied)
    if rows:
        servo_impulses = {row.key: impulses[row.key] for row in servos}
        rows = servos + limit_rows(world, tree, q)
        q_dot, _ = solve_rows(world, space, rows, q_dot, servo_impulses)
    bodies, linear, angular = space.bodies, space.linear, space.angular
    linear_velocity = (linear * q_dot[:, None, None, :]).sum(-1)  # (B, D, 3)
    angular_velocity = (angular * q_dot[:, None, None, :]).sum(-1)
    if len(bodies) == world.n_bodies:
        return State(
            position=torch.stack(config.position, 1),
            rotation=torch.stack(config.rotation, 1),
            linear_velocity=linear_velocity,
            angular_velocity=angular_velocity,
        )
    # Static bodies keep their state.
    slot = {body: k for k, body in enumerate(bodies)}

    def merge(moving, kept):
        return torch.stack(
            [moving[slot[b]] if b in slot else kept[:, b] for b in range(world.n_bodies)], 1
        )

    return State(
        position=merge([config.position[b] for b in bodies], state.position),
        rotation=merge([config.rotation[b] for b in bodies], state.rotation),
        linear_velocity=merge(linear_velocity.unbind(1), state.linear_velocity),
        angular_velocity=merge(angular_velocity.unbind(1), state.angular_velocity),
    )
