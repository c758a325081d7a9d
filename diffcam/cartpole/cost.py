"""What a controller of the pendulum-cart sees of its state, how far the pole is from upright,
and the paper's per-step cost."""

from __future__ import annotations

import torch

import physics

from .._safe import safe_norm
from .structure import CartPole

STATE_FEATURES = ("x", "x_dot", "sin_theta", "cos_theta", "theta_dot")


def pole_direction(state: physics.State, cartpole: CartPole) -> torch.Tensor:
    """(..., 3) unit vector from the hinge to the pole's centre, world frame."""
    g = cartpole
    return state.rotation[..., g.pole, :, :] @ state.rotation.new_tensor(g.hanging_in_pole)


def upright_error(state: physics.State, cartpole: CartPole) -> torch.Tensor:
    """(...,) angle (rad, in [0, pi]) between the pole and the upright direction.

    For a state (B, N, ...) it is (B,), for a trajectory (T, B, N, ...) (T, B). In the plane
    of the hinge it is |theta - pi| wrapped to [0, pi]. Not meant for gradients (use the loss).
    """
    u = pole_direction(state, cartpole)
    return torch.atan2(torch.hypot(u[..., 0], u[..., 1]), u[..., 2])


def state_features(state: physics.State, cartpole: CartPole) -> torch.Tensor:
    """(..., 5) features (x, x_dot, sin theta, cos theta, theta_dot) of a state (m, m/s, 1, 1,
    rad/s): what the state-based baseline sees. sin and cos come from the pole's direction, so
    they are smooth at every angle."""
    g = cartpole
    u = pole_direction(state, g)
    return torch.stack(
        [
            state.position[..., g.cart, 0],
            state.linear_velocity[..., g.cart, 0],
            -u[..., 0],
            -u[..., 2],
            state.angular_velocity[..., g.pole, 1],
        ],
        -1,
    )


def step_cost(
    state: physics.State, cartpole: CartPole, speed_weight: float, target: str = "fixed"
) -> torch.Tensor:
    """(...,) the per-step cost of the paper's loss (section 3.4).

    cost = |tip - target| + speed_weight |v_tip|^2, where tip is the pole's far end and v_tip
    its velocity: m plus (s^2/m)(m/s)^2. The distance uses a norm whose gradient is finite at
    zero (exactly upright).

    target: ``"fixed"`` (default; the paper's "desired point"): ``cartpole.upright_tip``, the
        tip of an upright pole on the cart at the rail's centre, so a pole balanced away from
        the centre still costs its offset. ``"cart"``: the tip of an upright pole on the cart
        wherever it is (hinge + tip_distance e_z): no cost for the cart's position, and a
        controller trained on it drifts into the rail's stops in long runs, which knocks the
        pole over.
    """
    g = cartpole
    u = pole_direction(state, g)
    centre = state.position[..., g.pole, :]
    tip = centre + (g.tip_distance - g.centre_distance) * u
    if target == "fixed":
        goal = u.new_tensor(g.upright_tip)
    elif target == "cart":
        cart_rotation = state.rotation[..., g.cart, :, :]
        hinge = state.position[..., g.cart, :] + cart_rotation @ u.new_tensor(g.hinge_in_cart)
        goal = hinge + u.new_tensor([0.0, 0.0, g.tip_distance])
    else:
        raise ValueError(f"step_cost: target must be 'fixed' or 'cart', got {target!r}")
    tip_velocity = state.linear_velocity[..., g.pole, :] + torch.linalg.cross(
        state.angular_velocity[..., g.pole, :], tip - centre
    )
    return safe_norm(tip - goal) + speed_weight * tip_velocity.square().sum(-1)
