"""A start in joint coordinates (`Joint.position`, `Joint.velocity`): conventions, an analytic
reference, nested joints, gradients and errors."""

from __future__ import annotations

import math

import pytest
import torch

import physics
from physics.math3d import quat_to_matrix

from .models import hanging_pose


def _pendulum(position=None, velocity=None, coordinates="maximal", dtype=torch.float64, batch=1):
    """A rod hanging from a hinge about +y at (0, 0, 2) with a ball welded to its end."""
    pivot = [0.0, 0.0, 2.0]
    rod = physics.Body("rod", "box", [0.02, 0.02, 1.0], mass=1.0, position=[0.0, 0.0, 1.5])
    ball = physics.Body("ball", "sphere", 0.1, mass=0.5, position=[0.0, 0.0, 1.0], collide=False)
    joints = [
        physics.Joint(
            "hinge",
            "hinge",
            "world",
            "rod",
            anchor=pivot,
            axis=[0, 1, 0],
            position=position,
            velocity=velocity,
        ),  # fmt: skip
        physics.Joint("weld", "fixed", "rod", "ball", anchor=[0.0, 0.0, 1.0]),
    ]
    spec = physics.WorldSpec(bodies=[rod, ball], joints=joints, coordinates=coordinates)
    return physics.build_world(spec, batch_size=batch, dtype=dtype)


def _cart_pole(rail=(None, None), hinge=(None, None), coordinates="maximal"):
    cart = physics.Body("cart", "box", [0.3, 0.2, 0.1], mass=1.0, position=[0.0, 0.0, 1.0])
    pole = physics.Body("pole", "box", [0.02, 0.02, 1.0], mass=0.1, position=[0.0, 0.0, 0.5])
    joints = [
        physics.Joint(
            "rail",
            "slider",
            "world",
            "cart",
            anchor=[0, 0, 1],
            axis=[1, 0, 0],
            position=rail[0],
            velocity=rail[1],
        ),  # fmt: skip
        physics.Joint(
            "hinge",
            "hinge",
            "cart",
            "pole",
            anchor=[0, 0, 1],
            axis=[0, 1, 0],
            position=hinge[0],
            velocity=hinge[1],
        ),  # fmt: skip
    ]
    spec = physics.WorldSpec(bodies=[cart, pole], joints=joints, coordinates=coordinates)
    return physics.build_world(spec, dtype=torch.float64)


@pytest.mark.parametrize("coordinates", ["maximal", "reduced"])
def test_convention_joint_coordinates_read_back(coordinates):
    """The start's q and q' are what `joint_positions` reads, for a slider carrying a hinge."""
    world = _cart_pole(rail=(0.2, -0.3), hinge=(0.7, 1.5), coordinates=coordinates)
    q, q_dot = physics.joint_positions(world, physics.initial_state(world))
    torch.testing.assert_close(q[0], torch.tensor([0.2, 0.7], dtype=torch.float64))
    torch.testing.assert_close(q_dot[0], torch.tensor([-0.3, 1.5], dtype=torch.float64))


def test_convention_positive_hinge_angle_turns_right_handed_about_the_axis():
    """A hinge about +y at +q swings the hanging rod toward -x (right-handed about +y)."""
    world = _pendulum(position=0.5)
    com, quat = hanging_pose(0.5, [0.0, 0.0, 2.0], 0.5)
    state = physics.initial_state(world)
    torch.testing.assert_close(state.position[0, 0], torch.tensor(com, dtype=torch.float64))
    rotation = quat_to_matrix(torch.tensor(quat, dtype=torch.float64))
    torch.testing.assert_close(state.rotation[0, 0], rotation)
    assert float(state.position[0, 0, 0]) < 0.0


def test_welded_child_moves_and_spins_with_the_hinge():
    """Analytic: a body welded below the hinge sits at pivot + 1 m at angle q and moves with
    speed q' * 1 m along the tangent; its spin is q' about +y."""
    q, rate = 0.4, -2.0
    state = physics.initial_state(_pendulum(position=q, velocity=rate))
    ball = state.position[0, 1]
    expected = torch.tensor([-math.sin(q), 0.0, 2.0 - math.cos(q)], dtype=torch.float64)
    torch.testing.assert_close(ball, expected)
    tangent = torch.tensor([-math.cos(q), 0.0, math.sin(q)], dtype=torch.float64)
    torch.testing.assert_close(state.linear_velocity[0, 1], rate * tangent)
    torch.testing.assert_close(
        state.angular_velocity[0, 1], torch.tensor([0.0, rate, 0.0], dtype=torch.float64)
    )


def test_drawn_pose_stays_the_zero_of_the_joint():
    """Starting at q moves the bodies, not the joint's zero: the bodies drawn at q = 0 read 0."""
    world = _pendulum(position=0.9)
    drawn = _pendulum()
    q, _ = physics.joint_positions(world, physics.initial_state(drawn))
    assert abs(float(q[0, 0])) < 1e-12


@pytest.mark.parametrize("coordinates", ["maximal", "reduced"])
def test_start_matches_the_same_pose_drawn_by_hand(coordinates):
    """A rollout from q0, q0' equals one from the bodies drawn at that pose with those
    velocities (the same world, the same dynamics)."""
    q0, rate = 0.6, 0.8
    posed = _pendulum(position=q0, velocity=rate, coordinates=coordinates)
    state = physics.initial_state(posed)
    a = physics.rollout(posed, state, 100)
    com, quat = hanging_pose(q0, [0.0, 0.0, 2.0], 0.5)
    tip, _ = hanging_pose(q0, [0.0, 0.0, 2.0], 1.0)
    rod = physics.Body("rod", "box", [0.02, 0.02, 1.0], mass=1.0, position=com, quat=quat,
                       velocity=[-rate * 0.5 * math.cos(q0), 0.0, rate * 0.5 * math.sin(q0)],
                       angular_velocity=[0.0, rate, 0.0])  # fmt: skip
    ball = physics.Body("ball", "sphere", 0.1, mass=0.5, position=tip, quat=quat, collide=False,
                        velocity=[-rate * math.cos(q0), 0.0, rate * math.sin(q0)],
                        angular_velocity=[0.0, rate, 0.0])  # fmt: skip
    joints = [
        physics.Joint("hinge", "hinge", "world", "rod", anchor=[0, 0, 2], axis=[0, 1, 0]),
        physics.Joint("weld", "fixed", "rod", "ball", anchor=tip),
    ]
    spec = physics.WorldSpec(bodies=[rod, ball], joints=joints, coordinates=coordinates)
    drawn = physics.build_world(spec, dtype=torch.float64)
    b = physics.rollout(drawn, physics.initial_state(drawn), 100)
    torch.testing.assert_close(a.position, b.position, atol=1e-9, rtol=0)


@pytest.mark.parametrize("coordinates", ["maximal", "reduced"])
@pytest.mark.slow
def test_finite_differences_through_the_start(coordinates):
    """d(final ball position)/d(q0, q0') against central differences, float64."""

    def final(q0: torch.Tensor, rate: torch.Tensor) -> torch.Tensor:
        world = _pendulum(position=q0, velocity=rate, coordinates=coordinates)
        trajectory = physics.rollout(world, physics.initial_state(world), 60)
        return trajectory.position[-1, 0, 1, [0, 2]].sum()

    q0 = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    rate = torch.tensor(-0.7, dtype=torch.float64, requires_grad=True)
    grads = torch.autograd.grad(final(q0, rate), [q0, rate])
    eps = 1e-6
    with torch.no_grad():
        numeric = [
            (final(q0 + eps, rate) - final(q0 - eps, rate)) / (2 * eps),
            (final(q0, rate + eps) - final(q0, rate - eps)) / (2 * eps),
        ]
    for g, n in zip(grads, numeric, strict=True):
        assert abs(float(g) - float(n)) <= 1e-5 * max(1.0, abs(float(n)))


def test_no_nan_gradient_at_a_zero_start():
    """q0 = q0' = 0 as tensors (the drawn pose exactly) gives finite gradients."""
    q0 = torch.zeros((), dtype=torch.float64, requires_grad=True)
    rate = torch.zeros((), dtype=torch.float64, requires_grad=True)
    world = _pendulum(position=q0, velocity=rate)
    trajectory = physics.rollout(world, physics.initial_state(world), 20)
    grads = torch.autograd.grad(trajectory.position[-1].sum(), [q0, rate])
    assert all(torch.isfinite(g).all() for g in grads)


def test_batch_of_starts_equals_single_starts(dtype):
    starts = torch.tensor([0.1, -0.4, 1.2], dtype=dtype)
    rates = torch.tensor([0.0, 0.5, -1.0], dtype=dtype)
    batch = physics.initial_state(_pendulum(starts, rates, dtype=dtype, batch=3))
    for b in range(3):
        one = physics.initial_state(_pendulum(float(starts[b]), float(rates[b]), dtype=dtype))
        torch.testing.assert_close(batch.position[b], one.position[0])
        torch.testing.assert_close(batch.linear_velocity[b], one.linear_velocity[0])


def test_start_on_a_ball_joint_is_a_model_error():
    a = physics.Body("a", "sphere", 0.1, mass=1.0)
    joint = physics.Joint("j", "ball", "world", "a", position=0.3)
    with pytest.raises(physics.ModelError, match=r"joint 'j': an initial position needs a hinge"):
        physics.build_world(physics.WorldSpec(bodies=[a], joints=[joint]))
