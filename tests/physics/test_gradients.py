"""float64 finite differences, no-NaN gradients at degenerate states, batch consistency."""

import dataclasses
import math

import pytest
import torch

import physics
from tests.finite_differences import check_directional
from tests.physics import models

# Jointed models are checked in both formulations (see physics.articulated).
COORDINATES = pytest.mark.parametrize("coordinates", ["maximal", "reduced"])


def finite_difference_check(loss_fn, parameter: torch.Tensor, eps: float = 1e-6, tol: float = 1e-4):
    """Compare autograd with central differences along every coordinate of ``parameter``."""
    parameter = parameter.detach().clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(loss_fn(parameter), parameter)
    numeric = torch.zeros_like(parameter)
    flat = numeric.view(-1)
    for i in range(parameter.numel()):
        bump = torch.zeros_like(parameter).view(-1)
        bump[i] = eps
        bump = bump.view_as(parameter)
        with torch.no_grad():
            flat[i] = (loss_fn(parameter + bump) - loss_fn(parameter - bump)) / (2 * eps)
    error = (grad - numeric).norm() / numeric.norm().clamp_min(1e-12)
    assert torch.isfinite(grad).all()
    assert numeric.norm() > 1e-8, "the loss does not depend on the parameter"
    assert error < tol, f"relative error {error:.2e}\nautograd {grad}\nnumeric {numeric}"


def final_position_loss(world_fn, steps, body):
    weights = torch.tensor([0.3, -0.7, 1.1], dtype=torch.float64)

    def loss(velocity):
        world = world_fn()
        state = physics.initial_state(world)
        mask = torch.zeros_like(state.linear_velocity)
        mask[0, body] = 1.0
        state = state.replace(linear_velocity=state.linear_velocity * (1 - mask) + mask * velocity)
        final = physics.rollout(world, state, steps, check_finite=False)[-1]
        return (final.position[0, body] * weights).sum()

    return loss


@pytest.mark.parametrize(
    "name,world_fn,body,steps,velocity",
    [
        ("free flight", lambda: models.ball_on_floor(height=5.0), 1, 30, [1.0, 0.5, 2.0]),
        ("pendulum", lambda: models.pendulum(theta0=0.7), 0, 40, [0.3, 0.0, 0.2]),
        ("cart-pole", lambda: models.cart_pole(theta0=0.4), 0, 40, [0.5, 0.0, 0.0]),
        ("pendulum, reduced", lambda: models.pendulum(theta0=0.7, coordinates="reduced"), 0, 40,
         [0.3, 0.0, 0.2]),
        ("cart-pole, reduced", lambda: models.cart_pole(theta0=0.4, coordinates="reduced"), 0, 40,
         [0.5, 0.0, 0.0]),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_initial_velocity_to_final_position(name, world_fn, body, steps, velocity):
    finite_difference_check(
        final_position_loss(world_fn, steps, body), torch.tensor(velocity, dtype=torch.float64)
    )


def test_gradient_through_a_bounce():
    # The ball hits the floor once (at about 0.3 s) and flies up again before the end.
    finite_difference_check(
        final_position_loss(
            lambda: models.ball_on_floor(height=0.4, restitution=0.6, friction=0.3), 40, 1
        ),
        torch.tensor([0.8, 0.2, -0.5], dtype=torch.float64),
        tol=1e-4,
    )


@pytest.mark.parametrize("friction", [0.0, 0.5])
def test_static_box_velocity_through_a_sphere_contact(friction):
    """A static plate's velocity (a moving surface) against a sphere that lands on it and
    stays: the sphere does not slip along y, so where the friction bound is zero (no friction,
    or no normal impulse once it rests) both clamps of a friction row tie; the gradient must
    not leak through them. The plate moves into the sphere (-x): at rest, d/dv_x has a kink
    (moving away, the sphere follows at zero impulse; towards it, the plate pushes)."""

    def loss(velocity):
        plate = physics.Body(
            "plate", "box", [0.002, 1.0, 1.0], static=True, position=[1.0, 0, 0.6],
            friction=friction,
        )  # fmt: skip
        pellet = physics.Body(
            "pellet", "sphere", 0.01, mass=0.02, position=[0.5, -0.2, 0.5],
            velocity=[5.0, 0, 0.5], friction=friction,
        )  # fmt: skip
        spec = physics.WorldSpec(bodies=[plate, pellet], gravity=[0, 0, 0], timestep=0.01)
        world = physics.build_world(spec, dtype=torch.float64)
        world.initial_velocity = torch.cat([velocity[None, None], world.initial_velocity[:, 1:]], 1)
        trajectory = physics.rollout(world, physics.initial_state(world), 20)
        return (
            (trajectory.position[-7:] ** 2).sum()
            + trajectory.linear_velocity.sum()
            + trajectory.rotation[-1].sum()
        )

    finite_difference_check(loss, torch.tensor([-0.3, 0.0, 0.0], dtype=torch.float64))


@COORDINATES
@pytest.mark.slow
def test_gradient_through_a_joint_limit(coordinates):
    """The cart runs into its rail stop (at about 0.1 s) and the pole swings on: initial cart
    velocity -> the pole's final position."""

    def loss(velocity):
        world = models.cart_pole(theta0=0.4, limits=[-0.5, 0.05], coordinates=coordinates)
        state = physics.initial_state(world)
        state = state.replace(
            linear_velocity=torch.cat([velocity[None, None], state.linear_velocity[:, 1:]], 1)
        )
        final = physics.rollout(world, state, 40)[-1]
        return final.position[0, 1, 0] + 0.3 * final.position[0, 1, 2]  # fmt: skip

    finite_difference_check(loss, torch.tensor([0.6, 0.0, 0.0], dtype=torch.float64))


@COORDINATES
@pytest.mark.slow
def test_servo_targets_to_final_state(coordinates):
    """A position servo (gain 10, max_torque 20 N m: at its torque bound part of the time)
    swinging the test pendulum: target sequence -> final position and spin."""
    pivot = [0.0, 0.0, 2.0]
    com, quat = models.hanging_pose(0.3, pivot, 0.5)
    rod = physics.Body("rod", "box", [0.02, 0.02, 1.0], mass=1.0, position=com, quat=quat)
    servo = physics.Motor("servo", gain=10.0, max_torque=20.0, max_velocity=3.0)
    hinge = physics.Joint("hinge", "hinge", "world", "rod", anchor=pivot, axis=[0, 1, 0],
                          motor=servo)  # fmt: skip
    world = physics.build_world(
        physics.WorldSpec([rod], [hinge], coordinates=coordinates), dtype=torch.float64
    )

    def loss(targets):
        final = physics.rollout(world, physics.initial_state(world), 12,
                                actions=targets[:, None, None])[-1]  # fmt: skip
        return final.position[0, 0, 0] + 0.2 * final.angular_velocity[0, 0, 1]

    finite_difference_check(loss, torch.linspace(-0.1, 0.15, 12, dtype=torch.float64))


def trajectory_loss(trajectory):
    return (trajectory.position[..., 0] ** 2).sum() + trajectory.position[..., 2].sum()


@COORDINATES
@pytest.mark.slow
def test_parameters_to_trajectory(coordinates):
    """Mass, damping and length of the cart-pole's pole -> a loss over the whole trajectory."""

    def loss(params):
        mass, damping, length = params
        pivot = [0.0, 0.0, 1.0]
        com, quat = models.hanging_pose(0.6, pivot, length / 2)
        cart = physics.Body("cart", "box", [0.3, 0.2, 0.1], mass=1.0, position=pivot)
        pole = physics.Body("pole", "box", torch.stack([length * 0 + 0.02, length * 0 + 0.02, length]),
                            mass=mass, position=torch.stack([torch.as_tensor(c, dtype=torch.float64) for c in com]),
                            quat=quat)  # fmt: skip
        joints = [
            physics.Joint("rail", "slider", "world", "cart", anchor=pivot, axis=[1, 0, 0]),
            physics.Joint(
                "hinge", "hinge", "cart", "pole", anchor=pivot, axis=[0, 1, 0], damping=damping
            ),
        ]
        spec = physics.WorldSpec([cart, pole], joints, coordinates=coordinates)
        world = physics.build_world(spec, dtype=torch.float64)
        return trajectory_loss(physics.rollout(world, physics.initial_state(world), 40))

    finite_difference_check(loss, torch.tensor([0.2, 0.05, 0.8], dtype=torch.float64))


@COORDINATES
@pytest.mark.slow
def test_actions_to_final_state(coordinates):
    world = models.cart_pole(theta0=0.2, coordinates=coordinates)

    def loss(actions):
        final = physics.rollout(
            world, physics.initial_state(world), 12, actions=actions[:, None, None]
        )[-1]
        return final.position[0, 1, 0] + 0.5 * final.linear_velocity[0, 0, 0]

    finite_difference_check(loss, torch.linspace(-2, 3, 12, dtype=torch.float64))


def test_gravity_and_friction_and_restitution_get_gradients():
    """A ball thrown onto a floor: the gradients to gravity, friction and restitution along
    random directions equal the central differences."""

    def loss(gravity, friction, restitution):
        floor = physics.Body(
            "floor", "plane", [5, 5], static=True, friction=friction, restitution=restitution
        )
        ball = physics.Body("ball", "sphere", 0.1, mass=1.0, position=[0, 0, 0.5],
                            velocity=[2.0, 0, 0], friction=friction,
                            restitution=restitution)  # fmt: skip
        world = physics.build_world(
            physics.WorldSpec([floor, ball], gravity=gravity), dtype=torch.float64
        )
        final = physics.rollout(world, physics.initial_state(world), 40)[-1]
        return final.position[0, 1, 0] + final.position[0, 1, 2]

    values = [torch.tensor(v, dtype=torch.float64) for v in ([0.0, 0.0, -9.81], 0.3, 0.5)]
    check_directional(loss, values, rtol=1e-5,
                      names=["gravity", "friction", "restitution"])  # fmt: skip


@pytest.mark.parametrize(
    "world_fn",
    [
        lambda: models.pendulum(theta0=math.pi),  # exactly upright, at rest
        lambda: models.pendulum(theta0=0.0),  # hanging, at rest: zero velocity everywhere
        lambda: models.ball_on_floor(height=0.0),  # a contact just touching
        lambda: models.cart_pole(theta0=math.pi),
        lambda: models.pendulum(theta0=math.pi, coordinates="reduced"),
        lambda: models.pendulum(theta0=0.0, coordinates="reduced"),
        lambda: models.cart_pole(theta0=math.pi, coordinates="reduced"),
        # at its rail stop, at rest: the limit's row exactly touching
        lambda: models.cart_pole(theta0=0.0, limits=[-0.5, 0.0], coordinates="reduced"),
    ],
)
def test_no_nan_gradient_at_degenerate_states(world_fn):
    world = world_fn()
    state = physics.initial_state(world)
    velocity = state.linear_velocity.clone().requires_grad_(True)
    spin = state.angular_velocity.clone().requires_grad_(True)
    trajectory = physics.rollout(
        world, state.replace(linear_velocity=velocity, angular_velocity=spin), 5
    )
    (
        trajectory.position.sum() + trajectory.rotation.sum() + trajectory.linear_velocity.sum()
    ).backward()
    assert torch.isfinite(velocity.grad).all() and torch.isfinite(spin.grad).all()


@COORDINATES
def test_batch_equals_single_runs(dtype, coordinates):
    masses = torch.tensor([0.1, 0.3, 0.7], dtype=dtype)
    angles = [0.2, -1.0, 2.5]
    # A batch of 3 cart-poles with different pole masses and starting angles ...
    worlds = [models.cart_pole(theta0=a, dtype=dtype, coordinates=coordinates) for a in angles]
    pivot = [0.0, 0.0, 1.0]
    poses = [models.hanging_pose(a, pivot, 0.5) for a in angles]
    cart = physics.Body("cart", "box", [0.3, 0.2, 0.1], mass=1.0, position=pivot)
    pole = physics.Body("pole", "box", [0.02, 0.02, 1.0], mass=masses,
                        position=torch.tensor([p[0] for p in poses], dtype=dtype),
                        quat=torch.tensor([p[1] for p in poses], dtype=dtype))  # fmt: skip
    joints = [
        physics.Joint(
            "rail",
            "slider",
            "world",
            "cart",
            anchor=pivot,
            axis=[1, 0, 0],
            motor=physics.Motor("force", max=100.0),
        ),
        physics.Joint("hinge", "hinge", "cart", "pole", anchor=pivot, axis=[0, 1, 0]),
    ]
    batched = physics.build_world(
        physics.WorldSpec([cart, pole], joints, coordinates=coordinates), batch_size=3, dtype=dtype
    )
    actions = torch.randn(50, 3, 1, dtype=dtype, generator=torch.Generator().manual_seed(0))
    together = physics.rollout(batched, physics.initial_state(batched), 50, actions=actions)
    for b, angle in enumerate(angles):
        single_world = models.cart_pole(
            theta0=angle, pole_mass=float(masses[b]), dtype=dtype, coordinates=coordinates
        )
        alone = physics.rollout(
            single_world, physics.initial_state(single_world), 50, actions=actions[:, b : b + 1]
        )
        tol = 1e-4 if dtype == torch.float32 else 1e-10
        torch.testing.assert_close(
            together.position[:, b], alone.position[:, 0], atol=tol, rtol=tol
        )
    assert len(worlds) == 3


def test_batch_of_bouncing_balls_equals_single_runs():
    heights = [0.3, 0.8]
    floor = physics.Body("floor", "plane", [10, 10], static=True, restitution=0.5)
    ball = physics.Body("ball", "sphere", 0.1, mass=1.0, restitution=0.5, velocity=[0.5, 0, 0],
                        position=torch.tensor([[0, 0, h + 0.1] for h in heights], dtype=torch.float64))  # fmt: skip
    batched = physics.build_world(
        physics.WorldSpec([floor, ball]), batch_size=2, dtype=torch.float64
    )
    together = physics.rollout(batched, physics.initial_state(batched), 60)
    for b, h in enumerate(heights):
        single = models.ball_on_floor(height=h, restitution=0.5, velocity=(0.5, 0, 0))
        alone = physics.rollout(single, physics.initial_state(single), 60)
        torch.testing.assert_close(
            together.position[:, b], alone.position[:, 0], atol=1e-10, rtol=1e-10
        )


@pytest.mark.parametrize(
    "world_fn",
    [
        lambda: models.cart_pole(theta0=0.4),
        models.double_pendulum,
        lambda: models.double_pendulum(coordinates="reduced"),
    ],
)
def test_forward_mode_equals_reverse_mode(world_fn):
    """Jacobian columns by forward-mode AD (jvp) equal reverse mode's through a jointed rollout.

    Forward mode is how `diffcam.fit_scene` with `Schedule(optimizer="lm")` gets Jacobians; the
    joint solve's SPD inverse had a wrong forward derivative through torch.cholesky_inverse.
    """
    from torch.autograd import forward_ad

    world0 = world_fn()
    state0 = physics.initial_state(world0)
    direction = torch.randn(
        world0.mass.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3)
    )

    def final(mass):
        return physics.rollout(dataclasses.replace(world0, mass=mass), state0, 15).position[-1]

    mass = world0.mass.clone().requires_grad_(True)
    out = final(mass)
    weights = torch.randn(
        out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(4)
    )
    (reverse,) = torch.autograd.grad(out, mass, weights)
    with forward_ad.dual_level():
        tangent = forward_ad.unpack_dual(
            final(forward_ad.make_dual(world0.mass, direction))
        ).tangent
    forward = (tangent * weights).sum()
    expected = (reverse * direction).sum()
    assert torch.isfinite(forward) and expected.abs() > 1e-6
    assert torch.allclose(forward, expected, rtol=1e-9, atol=1e-12)
