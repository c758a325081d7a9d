"""States between the steps of a trajectory: what a camera sees at its own frame times.

A camera's frames fall between physics steps (30 fps against dt = 0.01 s), have a time offset
of their own, and a shutter that stays open for part of a frame (motion blur). `states_at`
gives the state at any time inside a trajectory, differentiably in that time and in the
trajectory: positions by cubic Hermite interpolation with the stored velocities (continuous
position and velocity across steps), rotations along the geodesic between consecutive steps.
"""

from __future__ import annotations

import torch

from .math3d import axis_angle_to_matrix
from .state import State

Tensor = torch.Tensor


def _vee(matrix: Tensor) -> Tensor:
    """(..., 3) vector of the antisymmetric part of (..., 3, 3): R - R^T = 2 skew(vee)."""
    return 0.5 * torch.stack(
        [
            matrix[..., 2, 1] - matrix[..., 1, 2],
            matrix[..., 0, 2] - matrix[..., 2, 0],
            matrix[..., 1, 0] - matrix[..., 0, 1],
        ],
        -1,
    )


def rotation_log(rotation: Tensor) -> Tensor:
    """Rotation vector (..., 3) (rad) of rotations (..., 3, 3) by less than pi, safe at 0."""
    half_skew = _vee(rotation)  # sin(angle) * axis
    cos = 0.5 * (rotation.diagonal(dim1=-2, dim2=-1).sum(-1) - 1.0)
    sin_sq = (half_skew * half_skew).sum(-1)
    small = sin_sq < 1e-12
    sin = torch.sqrt(torch.where(small, torch.ones_like(sin_sq), sin_sq))
    angle = torch.atan2(sin, cos)
    # angle / sin(angle), by its series near 0 so that the gradient stays finite
    ratio = torch.where(small, 1.0 + sin_sq / 6.0, angle / sin)
    return half_skew * ratio[..., None]


def states_at(trajectory: State, times: Tensor, timestep: float) -> State:
    """The states at continuous times from a trajectory sampled every ``timestep``.

    Args:
        trajectory: a State with a leading time axis, (T, B, N, ...), step k at t = k dt.
        times: (M,) or (M, B) times (s); a time outside [0, (T - 1) dt] extrapolates the
            first or last step's motion (keep them within a step of the ends).
        timestep: dt (s).

    Returns:
        A State of (M, B, N, ...) tensors. Positions follow the cubic Hermite curve through
        the steps' positions and velocities, linear velocities its derivative; rotations turn
        at constant rate along the geodesic between consecutive steps, and the angular
        velocity is that rate (world frame). Gradients reach the trajectory and ``times``.
    """
    steps = trajectory.position.shape[0]
    if steps < 2:
        raise ValueError(f"states_at: need a trajectory of at least 2 states, got {steps}")
    batch = trajectory.position.shape[1]
    times = times.to(trajectory.position.dtype)
    if times.dim() == 1:
        times = times[:, None].expand(-1, batch)
    scaled = times / timestep
    index = scaled.detach().floor().long().clamp(0, steps - 2)  # (M, B)
    s = (scaled - index.to(scaled.dtype))[..., None, None]  # (M, B, 1, 1) in [0, 1] inside
    batch_index = torch.arange(batch, device=index.device).expand_as(index)

    def at(tensor: Tensor, offset: int) -> Tensor:
        return tensor[index + offset, batch_index]

    p0, p1 = at(trajectory.position, 0), at(trajectory.position, 1)
    v0, v1 = at(trajectory.linear_velocity, 0), at(trajectory.linear_velocity, 1)
    s2, s3 = s * s, s * s * s
    position = (
        (2 * s3 - 3 * s2 + 1) * p0
        + (s3 - 2 * s2 + s) * timestep * v0
        + (-2 * s3 + 3 * s2) * p1
        + (s3 - s2) * timestep * v1
    )
    velocity = (
        (6 * s2 - 6 * s) * (p0 - p1) / timestep + (3 * s2 - 4 * s + 1) * v0 + (3 * s2 - 2 * s) * v1
    )
    r0, r1 = at(trajectory.rotation, 0), at(trajectory.rotation, 1)
    turn = rotation_log(r1 @ r0.transpose(-1, -2))  # (M, B, N, 3) world-frame step rotation
    rotation = axis_angle_to_matrix(turn * s) @ r0
    return State(position, rotation, velocity, turn / timestep)
