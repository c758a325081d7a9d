"""Actions: the shape check, the force motors' clipping and the servos' wanted speeds, shared by
both formulations."""

from __future__ import annotations

import torch

from .world import World

Tensor = torch.Tensor


def checked_action(world: World, action: Tensor | None, like: Tensor) -> Tensor:
    """The action (B, A) in ``like``'s dtype, zeros when None; a clear error for a wrong shape.

    Args:
        action: (B, A) one column per actuator in ``world.actuator_names`` order, or None.
        like: any (B, ...) tensor of the step's dtype and batch.
    """
    names = world.actuator_names
    if action is None:
        return like.new_zeros(like.shape[0], len(names))
    if action.dim() != 2 or action.shape[-1] != len(names):
        raise ValueError(
            f"action must have shape (B, {len(names)}) for actuators {names}, "
            f"got {tuple(action.shape)}"
        )
    return action.to(like.dtype)


def clipped_motor_forces(world: World, action: Tensor) -> Tensor:
    """The force motors' columns of a checked action, clipped to ±motor_max: (B, F) N or N m,
    in ``world.structure.force_actuators`` order (their joints: ``force_joints``)."""
    index = world.structure.force_actuators
    limit = world.motor_max.index_select(1, index)
    return torch.minimum(torch.maximum(action.index_select(1, index), -limit), limit)


def servo_speeds(world: World, action: Tensor, servo_q: Tensor) -> tuple[Tensor, Tensor]:
    """The paper's servos: each asks for the speed gain (target - q) (position target) or the
    target itself (velocity target), within +-max_velocity, and may use at most max_torque dt
    of impulse per step to get it.

    Args:
        action: a checked action (B, A).
        servo_q: (B, S) the servos' joint coordinates (m or rad), in
            ``world.structure.servo_actuators`` order.

    Returns:
        wanted: (B, S) joint speeds (m/s or rad/s); bound: (B, S) impulse bounds (N s or N m s).
    """
    index = world.structure.servo_actuators
    target = action.index_select(1, index)
    gain = world.motor_gain.index_select(1, index)
    wanted = torch.where(world.structure.servo_position_mode, gain * (target - servo_q), target)
    speed = world.motor_max_velocity.index_select(1, index)
    wanted = torch.minimum(torch.maximum(wanted, -speed), speed)
    return wanted, world.motor_max_torque.index_select(1, index) * world.timestep
