"""`physics.states_at`: states between steps (camera frame times, motion-blur samples)."""

from __future__ import annotations

import math

import pytest
import torch

import physics
from physics.interpolate import rotation_log

from .models import pendulum, pendulum_angle


def _spinning_ball(dtype=torch.float64):
    """A free ball in flight that also spins about a tilted axis: positions are quadratic in
    time and the rotation turns at a constant rate (no torque on a sphere)."""
    ball = physics.Body("ball", "sphere", 0.1, mass=1.0, position=[0, 0, 1], velocity=[1, 0.5, 3],
                        angular_velocity=[0.3, -2.0, 1.0], collide=False)  # fmt: skip
    world = physics.build_world(physics.WorldSpec(bodies=[ball]), dtype=dtype)
    return world, physics.rollout(world, physics.initial_state(world), 20)


def test_convention_step_times_give_the_steps(dtype):
    world, trajectory = _spinning_ball(dtype)
    times = torch.arange(0, 20, dtype=dtype) * world.timestep
    got = physics.states_at(trajectory, times, world.timestep)
    tol = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(got.position, trajectory.position[:20], **tol)
    torch.testing.assert_close(got.rotation, trajectory.rotation[:20], **tol)


def test_free_flight_is_exact_between_steps():
    """Ballistic positions are cubic-exact; a constant spin is exactly the geodesic."""
    world, trajectory = _spinning_ball()
    dt = world.timestep
    times = torch.tensor([0.0037, 0.05, 0.1234, 0.1999], dtype=torch.float64)
    got = physics.states_at(trajectory, times, dt)
    p0 = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
    v0 = torch.tensor([1.0, 0.5, 3.0], dtype=torch.float64)
    g = torch.tensor([0.0, 0.0, -9.81], dtype=torch.float64)
    t = times[:, None, None, None]
    torch.testing.assert_close(got.position, p0 + v0 * t + 0.5 * g * t * t)
    torch.testing.assert_close(got.linear_velocity, (v0 + g * t).expand_as(got.position))
    spin = torch.tensor([0.3, -2.0, 1.0], dtype=torch.float64)
    expected = physics.math3d.axis_angle_to_matrix(spin * t[..., 0, 0, :, None].squeeze(-1))
    torch.testing.assert_close(got.rotation[:, 0, 0], expected, atol=1e-9, rtol=0)
    torch.testing.assert_close(got.angular_velocity[:, 0, 0], spin.expand(4, 3), atol=1e-9, rtol=0)


@pytest.mark.slow
def test_pendulum_between_steps_matches_a_finer_rollout():
    """Against the same pendulum stepped at dt / 10: the interpolant's error is well below
    the integrator's own difference between the two step sizes."""
    coarse = pendulum(theta0=0.8, dt=0.01)
    fine = pendulum(theta0=0.8, dt=0.001)
    a = physics.rollout(coarse, physics.initial_state(coarse), 100)
    b = physics.rollout(fine, physics.initial_state(fine), 1000)
    times = torch.arange(5, 1000, 10, dtype=torch.float64) * 0.001  # the coarse mid-steps
    mid = physics.states_at(a, times, 0.01)
    at_steps = pendulum_angle(a[1:]) - pendulum_angle(b[10::10])
    between = pendulum_angle(mid) - pendulum_angle(b[5::10])
    assert float(between.abs().max()) < 2.0 * float(at_steps.abs().max()) + 1e-6


def test_gradient_in_time_is_the_velocity():
    world, trajectory = _spinning_ball()
    t = torch.tensor([0.0731], dtype=torch.float64, requires_grad=True)
    state = physics.states_at(trajectory, t, world.timestep)
    (dx,) = torch.autograd.grad(state.position[0, 0, 0, 2], t)
    assert abs(float(dx) - float(state.linear_velocity[0, 0, 0, 2].detach())) < 1e-9


def test_finite_differences_in_time_and_trajectory():
    world, trajectory = _spinning_ball()
    traj = physics.State(*(x.detach().clone().requires_grad_(True) for x in trajectory.tensors()))
    times = torch.tensor([0.0425, 0.117], dtype=torch.float64, requires_grad=True)

    def f(position, rotation, velocity, times):
        state = physics.states_at(
            physics.State(position, rotation, velocity, traj.angular_velocity), times, 0.01
        )
        return state.position.sum(), (state.rotation @ torch.ones(3, dtype=torch.float64)).sum()

    assert torch.autograd.gradcheck(
        f, (traj.position, traj.rotation, traj.linear_velocity, times), eps=1e-6, atol=1e-6
    )


def test_no_nan_gradient_at_a_body_at_rest():
    """Zero rotation between steps (a body at rest) is the log map's degenerate point."""
    world = pendulum(theta0=0.0)
    trajectory = physics.rollout(world, physics.initial_state(world), 5)
    rotation = trajectory.rotation.detach().requires_grad_(True)
    times = torch.tensor([0.015], dtype=torch.float64, requires_grad=True)
    state = physics.states_at(trajectory.replace(rotation=rotation), times, world.timestep)
    grads = torch.autograd.grad(
        state.rotation.sum() + state.angular_velocity.sum(), [rotation, times]
    )
    assert all(torch.isfinite(g).all() for g in grads)


def test_rotation_log_inverts_the_exponential():
    vectors = torch.tensor([[0.0, 0.0, 0.0], [1e-5, 0, 0], [0.3, -1.1, 2.0], [0, 3.0, 0]],
                           dtype=torch.float64)  # fmt: skip
    back = rotation_log(physics.math3d.axis_angle_to_matrix(vectors))
    torch.testing.assert_close(back, vectors, atol=1e-9, rtol=0)
    assert math.isclose(float(back[3].norm()), 3.0, rel_tol=1e-9)


def test_batch_of_times_per_world():
    """(M, B) times pick per-world times."""
    world = pendulum(theta0=0.5, batch_size=2)
    trajectory = physics.rollout(world, physics.initial_state(world), 10)
    times = torch.tensor([[0.02, 0.05]], dtype=torch.float64)
    got = physics.states_at(trajectory, times, world.timestep)
    torch.testing.assert_close(got.position[0, 0], trajectory.position[2, 0])
    torch.testing.assert_close(got.position[0, 1], trajectory.position[5, 1])
