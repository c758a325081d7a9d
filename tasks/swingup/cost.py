"""The training losses (the paper's, averaged over a trajectory, and the balance loss), the
scale of the baseline's features, and the upright stretches evaluation reports. (The state's
features, the upright error and the paper's per-step cost are the library's:
`diffcam.cartpole`.)"""

from __future__ import annotations

import dataclasses

import torch

import physics
from diffcam.cartpole import CartPole, pole_direction, step_cost

# Brings the features (m, m/s, 1, 1, rad/s: `diffcam.cartpole.STATE_FEATURES`) to order one
# for the baseline's MLP.
FEATURE_SCALE = [1.0, 0.5, 1.0, 1.0, 0.1]


def swingup_loss(
    trajectory: physics.State,
    cartpole: CartPole,
    speed_weight: float = 0.01,
    target: str = "fixed",
):
    """Scalar loss of a trajectory (T + 1, B, N, ...): `step_cost` averaged over every physics
    step after the start (index 1..T) and over the batch (paper, sections 3.2 and 3.4)."""
    return step_cost(trajectory[1:], cartpole, speed_weight, target).mean()


@dataclasses.dataclass(frozen=True)
class BalanceWeights:
    """Weights of `balance_cost`'s four quadratic terms, as in an LQR state cost.

    angle: on 2 (1 - cos e), e the pole's angle from upright (about e^2 near upright), 1/rad^2.
    angular_velocity: on the pole's angular velocity squared, s^2/rad^2.
    position: on the cart's x squared (the rail's centre is 0), 1/m^2.
    velocity: on the cart's velocity squared, s^2/m^2.

    The defaults make a 0.2 rad lean cost as much as the cart 0.28 m off centre, 0.9 rad/s of
    pole spin or 0.9 m/s of cart speed.
    """

    angle: float = 1.0
    angular_velocity: float = 0.05
    position: float = 0.5
    velocity: float = 0.05


def balance_cost(
    state: physics.State,
    cartpole: CartPole,
    weights: BalanceWeights = BalanceWeights(),  # noqa: B008 (frozen, so a shared default is safe)
) -> torch.Tensor:
    """(...,) a quadratic per-step cost of the state for balancing the pole upright.

    cost = w_a 2 (1 - cos e) + w_w omega^2 + w_x x^2 + w_v x_dot^2 (`BalanceWeights`), with e
    the pole's angle from upright, omega its angular velocity (rad/s), x and x_dot the cart's
    position (m) and velocity (m/s). Smooth everywhere, and near upright the LQR-like sum of
    squares: its gradient vanishes at the balanced state, where the paper's distance
    (`step_cost`) keeps a gradient of norm 1 however close the tip is. Controllers trained on
    that distance alone with a short horizon held the pole in a limit cycle of 0.2-0.3 rad
    (state and pixels alike); the balance loss, from starts near upright, settles it.
    """
    g = cartpole
    u = pole_direction(state, g)
    omega = state.angular_velocity[..., g.pole, 1]
    x = state.position[..., g.cart, 0]
    x_dot = state.linear_velocity[..., g.cart, 0]
    return (
        weights.angle * 2.0 * (1.0 - u[..., 2])
        + weights.angular_velocity * omega.square()
        + weights.position * x.square()
        + weights.velocity * x_dot.square()
    )


def balance_loss(
    trajectory: physics.State,
    cartpole: CartPole,
    weights: BalanceWeights = BalanceWeights(),  # noqa: B008 (frozen)
) -> torch.Tensor:
    """Scalar loss of a trajectory (T + 1, B, N, ...): `balance_cost` averaged over every
    physics step after the start (index 1..T) and over the batch."""
    return balance_cost(trajectory[1:], cartpole, weights).mean()


def upright_stretches(
    error: torch.Tensor, timestep: float, threshold: float = 0.2
) -> dict[str, torch.Tensor]:
    """Evaluation metrics from per-state upright errors.

    A state is *upright* when its error is below ``threshold`` (rad). Each state counts for one
    timestep of time.

    Args:
        error: (T, B) `upright_error` of every state of B rollouts.
        timestep: seconds per state.
        threshold: rad.

    Returns:
        dict of (B,) tensors:
        ``success``: bool, upright at the last state.
        ``upright_fraction``: fraction of the T states that are upright.
        ``upright_seconds``: the longest stretch of consecutive upright states, in seconds: how
            long the pole stays within ``threshold`` of upright once it gets there, counted from
            entering the band to leaving it (or to the end of the rollout). 0 if never upright.
        ``swing_up_seconds``: time of the first state of that longest stretch (NaN if never).
    """
    upright = error < threshold
    steps = error.shape[0]
    index = torch.arange(steps, device=error.device)[:, None].expand_as(error)
    # Index of the last non-upright state at or before each t: the run of upright states
    # ending at t is t minus that index.
    last_out = torch.cummax(torch.where(upright, -1, index), 0).values
    run = index - last_out
    longest, end = run.max(0)
    first = (end - longest + 1).to(error.dtype) * timestep
    return {
        "success": upright[-1],
        "upright_fraction": upright.to(error.dtype).mean(0),
        "upright_seconds": longest.to(error.dtype) * timestep,
        "swing_up_seconds": torch.where(longest > 0, first, torch.nan),
    }
