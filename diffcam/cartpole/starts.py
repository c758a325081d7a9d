"""Batched starts: states from (x, theta, x_dot, theta_dot) and random starts in ranges."""

from __future__ import annotations

import dataclasses
import math

import torch

import physics

from .structure import CartPole


def _rotation_y(theta: torch.Tensor) -> torch.Tensor:
    """(..., 3, 3) rotations by ``theta`` (...) radians about +y."""
    c, s = torch.cos(theta), torch.sin(theta)
    zero, one = torch.zeros_like(theta), torch.ones_like(theta)
    rows = [c, zero, s, zero, one, zero, -s, zero, c]
    return torch.stack(rows, -1).reshape(*theta.shape, 3, 3)


def initial_states(
    scene,
    x: torch.Tensor,
    theta: torch.Tensor,
    x_dot: torch.Tensor,
    theta_dot: torch.Tensor,
    cartpole: CartPole | None = None,
) -> physics.State:
    """Joint-consistent states of the pendulum-cart, one per batch element.

    The cart sits at world x = ``x`` (its file's y, z and rotation), the pole is the file's
    hanging pole turned by ``theta`` about the hinge axis (+y) around the hinge anchor:
    centre = hinge + R_y(theta) (centre_file - hinge_file), rotation R_y(theta) R_file. The cart
    moves at ``x_dot`` along x; the pole turns at ``theta_dot`` about +y, and its centre moves
    at x_dot e_x + omega x (centre - hinge). Every other body keeps its file state.

    Args:
        scene: a pendulum-cart `diffcam.Scene` of batch size B.
        x: (B,) cart position (m).
        theta: (B,) pole angle (rad): 0 hanging down, pi upright.
        x_dot: (B,) cart velocity (m/s).
        theta_dot: (B,) pole angular velocity about +y (rad/s).
        cartpole: the layout (default: read from ``scene``).

    Returns:
        physics.State (B, N, ...), differentiable with respect to the four inputs.
    """
    g = CartPole.from_scene(scene) if cartpole is None else cartpole
    base = scene.initial_state()
    batch = base.position.shape[0]
    for name, value in (("x", x), ("theta", theta), ("x_dot", x_dot), ("theta_dot", theta_dot)):
        if value.shape != (batch,):
            raise ValueError(
                f"initial_states: {name} has shape {tuple(value.shape)}, expected "
                f"({batch},) (the scene's batch size)"
            )
    like = base.position
    x, theta, x_dot, theta_dot = (v.to(like) for v in (x, theta, x_dot, theta_dot))
    zero = torch.zeros_like(x)
    cart_position = torch.stack([x, base.position[:, g.cart, 1], base.position[:, g.cart, 2]], -1)
    hinge = cart_position + base.rotation[:, g.cart] @ like.new_tensor(g.hinge_in_cart)
    turn = _rotation_y(theta)
    pole_rotation = turn @ base.rotation[:, g.pole]
    arm = g.centre_distance * (pole_rotation @ like.new_tensor(g.hanging_in_pole))
    cart_velocity = torch.stack([x_dot, zero, zero], -1)
    spin = torch.stack([zero, theta_dot, zero], -1)

    def with_bodies(tensor: torch.Tensor, cart: torch.Tensor, pole: torch.Tensor) -> torch.Tensor:
        parts = list(tensor.unbind(1))
        parts[g.cart], parts[g.pole] = cart, pole
        return torch.stack(parts, 1)

    return physics.State(
        with_bodies(base.position, cart_position, hinge + arm),
        with_bodies(base.rotation, base.rotation[:, g.cart], pole_rotation),
        with_bodies(
            base.linear_velocity, cart_velocity, cart_velocity + torch.linalg.cross(spin, arm)
        ),
        with_bodies(base.angular_velocity, torch.zeros_like(spin), spin),
    )


@dataclasses.dataclass(frozen=True)
class StartRanges:
    """Half-widths of the uniform start distribution: each of (x, theta, x_dot, theta_dot) is
    drawn from [-r, r], theta from [theta_centre - r, theta_centre + r]. Units: m, rad, m/s,
    rad/s. theta spans every angle by default; theta_centre = pi centres it on upright.

    ``upright_share`` of each batch (its last rows, rounded) instead draws theta within
    ``upright_theta`` of upright, the other three as above: balancing is then practised from
    the first iteration instead of waiting for the swing-up to bring the pole there. The loss
    stays as it is; only the starts the gradient averages over change. The measured swing-up
    recipe uses 0.5 (docs/tutorials/swingup.md).

    Keep some spread: from the exact hanging start at rest the zero policy is a saddle point of
    the loss (pushing left or right lowers it alike, so its gradient is exactly zero) and
    training would never leave it."""

    x: float = 0.5
    theta: float = math.pi
    x_dot: float = 0.5
    theta_dot: float = 1.0
    theta_centre: float = 0.0
    upright_share: float = 0.0
    upright_theta: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.upright_share <= 1.0:
            raise ValueError(f"StartRanges.upright_share is {self.upright_share}; use 0 to 1")


def random_starts(
    count: int,
    generator: torch.Generator,
    ranges: StartRanges = StartRanges(),  # noqa: B008 (frozen, so a shared default is safe)
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """(count, 4) random starts (x, theta, x_dot, theta_dot), uniform within ``ranges``; the
    last round(upright_share * count) rows have theta uniform within ``upright_theta`` of pi.

    Draws on the CPU from ``generator`` (one call, a fixed number of draws), so the same
    generator state gives the same starts on any machine.
    """
    half = torch.tensor([ranges.x, ranges.theta, ranges.x_dot, ranges.theta_dot], dtype=dtype)
    centre = torch.tensor([0.0, ranges.theta_centre, 0.0, 0.0], dtype=dtype)
    unit = 2 * torch.rand(count, 4, generator=generator, dtype=dtype) - 1
    starts = centre + unit * half
    near = round(ranges.upright_share * count)
    if near:
        starts[count - near :, 1] = math.pi + unit[count - near :, 1] * ranges.upright_theta
    return starts


def states_from_starts(scene, starts: torch.Tensor, cartpole: CartPole | None = None):
    """`initial_states` from a (B, 4) tensor of (x, theta, x_dot, theta_dot)."""
    return initial_states(scene, *starts.unbind(-1), cartpole=cartpole)
