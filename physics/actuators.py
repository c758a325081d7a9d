"""Actions: the shape check and the force motors' clipping, shared by both formulations."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
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
