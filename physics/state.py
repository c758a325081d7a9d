"""The simulation state: an immutable bundle of batched tensors."""

from __future__ import annotations

import dataclasses

import torch

Tensor = torch.Tensor


@dataclasses.dataclass(frozen=True)
class State:
    """Pose and velocity of every body (static bodies included), world frame.

    Attributes:
        position: (B, N, 3) centre-of-mass positions (m).
        rotation: (B, N, 3, 3) world_from_body rotations: ``x_world = R @ x_body + p``.
        linear_velocity: (B, N, 3) centre-of-mass velocities (m/s).
        angular_velocity: (B, N, 3) angular velocities (rad/s), world frame.

    A trajectory from `physics.rollout` is a State whose tensors carry a leading time axis.
    """

    position: Tensor
    rotation: Tensor
    linear_velocity: Tensor
    angular_velocity: Tensor

    def replace(self, **changes: Tensor) -> State:
        """A copy with some fields replaced."""
        return dataclasses.replace(self, **changes)

    def __getitem__(self, index) -> State:
        """Index every field along the leading axes (time, for a trajectory)."""
        return State(*(getattr(self, f.name)[index] for f in dataclasses.fields(self)))

    def tensors(self) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        return (self.position, self.rotation, self.linear_velocity, self.angular_velocity)

    @staticmethod
    def stack(states: list[State], dim: int = 0) -> State:
        """Stack states along a new axis (time, usually)."""
        return State(
            *(torch.stack(parts, dim) for parts in zip(*(s.tensors() for s in states), strict=True))
        )

    def to(self, *args, **kwargs) -> State:
        return State(*(t.to(*args, **kwargs) for t in self.tensors()))
