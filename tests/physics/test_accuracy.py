"""Consistency against independent references (analytic solutions and scipy ODE solutions)."""

import math

import numpy as np
import pytest
import torch

import physics
from physics.contacts import find_contacts
from physics.joints import joint_frames
from tests.physics import models
from tests.physics.reference import (
    bouncing_ball_apexes,
    cart_pole,
    double_pendulum,
    free_rigid_body,
    physical_pendulum,
    small_angle_period,
)

G = 9.81
# The accuracy goals hold for both formulations of jointed models.
COORDINATES = pytest.mark.parametrize("coordinates", ["maximal", "reduced"])


@COORDINATES
@pytest.mark.slow
def test_pendulum_matches_ode_solution_over_5_seconds(coordinates):
    world = models.pendulum(theta0=-math.pi / 2, coordinates=coordinates)
    trajectory = physics.rollout(world, physics.initial_state(world), 500)
    angle = models.pendulum_angle(trajectory)[:, 0].numpy()
    t = np.arange(501) * 0.01
    reference, _ = physical_pendulum(-math.pi / 2, 0.0, t, mass=1.0, com_distance=0.5,
                                     inertia_com=models.rod_inertia_com())  # fmt: skip
    assert np.abs(angle - reference).max() < 0.01


@COORDINATES
@pytest.mark.slow
def test_pendulum_small_angle_period(coordinates):
    world = models.pendulum(theta0=0.05, coordinates=coordinates)
    trajectory = physics.rollout(world, physics.initial_state(world), 700)
    angle = models.pendulum_angle(trajectory)[:, 0].numpy()
    t = np.arange(angle.size) * 0.01
    # Downward zero crossings, linearly interpolated.
    crossings = [t[i] + 0.01 * angle[i] / (angle[i] - angle[i + 1])
                 for i in range(angle.size - 1) if angle[i] > 0 >= angle[i + 1]]  # fmt: skip
    period = np.diff(crossings).mean()
    expected = small_angle_period(1.0, 0.5, models.rod_inertia_com())
    assert abs(period - expected) / expected < 0.005


@COORDINATES
@pytest.mark.slow
def test_pendulum_energy_drift_under_one_percent_over_10_seconds(coordinates):
    world = models.pendulum(theta0=-math.pi / 2, coordinates=coordinates)
    trajectory = physics.rollout(world, physics.initial_state(world), 1000)
    inertia = models.rod_inertia_com()
    v = trajectory.linear_velocity[:, 0, 0]
    w = trajectory.angular_velocity[:, 0, 0]
    height = trajectory.position[:, 0, 0, 2] - 2.0
    energy = 0.5 * (v * v).sum(-1) + 0.5 * inertia * (w * w).sum(-1) + G * height
    # Energy measured from the lowest point of the centre of mass: E0 = m g d.
    total = energy[0] + G * 0.5
    assert ((energy - energy[0]).abs().max() / total).item() < 0.01


@COORDINATES
@pytest.mark.parametrize("force", [None, "sine"])
@pytest.mark.slow
def test_cart_pole_matches_equations_of_motion(force, coordinates):
    world = models.cart_pole(theta0=0.5, coordinates=coordinates)
    steps = 300
    t = np.arange(steps + 1) * 0.01
    force_fn = (lambda s: 3.0 * np.sin(2.0 * s)) if force else None
    actions = None
    if force:
        # The engine holds an action over a step; kick-drift-kick samples it at the step's start
        # and end halves, so feed the reference the same piecewise-constant force.
        actions = torch.tensor([3.0 * math.sin(2.0 * k * 0.01) for k in range(steps)],
                               dtype=torch.float64)[:, None, None]  # fmt: skip
        force_fn = lambda s: 3.0 * math.sin(2.0 * math.floor(s / 0.01 + 1e-9) * 0.01)  # noqa: E731
    trajectory = physics.rollout(world, physics.initial_state(world), steps, actions=actions)
    q, _ = physics.joint_positions(world, trajectory[-1])
    x = trajectory.position[:, 0, 0, 0].numpy()
    theta = models.pendulum_angle(trajectory, pivot=(0.0, 0.0, 1.0), body=1)[:, 0].numpy()
    # The pendulum angle is measured from the moving pivot.
    offset = (trajectory.position[:, 0, 1] - trajectory.position[:, 0, 0]).numpy()
    theta = np.arctan2(-offset[:, 0], -offset[:, 2])
    reference = cart_pole(0.0, 0.5, 0.0, 0.0, t, cart_mass=1.0, pole_mass=0.1, com_distance=0.5,
                          pole_inertia_com=models.rod_inertia_com(mass=0.1), force=force_fn)  # fmt: skip
    assert np.abs(theta - reference["theta"]).max() < 0.02
    assert np.abs(x - reference["x"]).max() < 0.01
    assert q.shape == (1, 2)


@COORDINATES
@pytest.mark.slow
def test_double_pendulum_matches_ode_solution_over_3_seconds(coordinates):
    world = models.double_pendulum(coordinates=coordinates)
    trajectory = physics.rollout(world, physics.initial_state(world), 300)
    t = np.arange(301) * 0.01
    inertia = models.rod_inertia_com()
    reference = double_pendulum(1.0, 2.0, 0.0, 0.0, t, m1=1.0, m2=1.0, d1=0.5, d2=0.5, l1=1.0,
                                i1=inertia, i2=inertia)  # fmt: skip
    upper = trajectory.position[:, 0, 0]
    theta1 = models.pendulum_angle(trajectory, pivot=(0.0, 0.0, 3.0), body=0)[:, 0].numpy()
    # The elbow sits at twice the upper arm's centre from the shoulder.
    elbow = 2.0 * upper - torch.tensor([0.0, 0.0, 3.0], dtype=upper.dtype)
    offset = (trajectory.position[:, 0, 1] - elbow).numpy()
    theta2 = np.arctan2(-offset[:, 0], -offset[:, 2])
    wrapped = np.angle(np.exp(1j * (theta2 - reference["theta2"])))
    assert np.abs(theta1 - reference["theta1"]).max() < 0.01
    assert np.abs(wrapped).max() < 0.01


@COORDINATES
@pytest.mark.slow
def test_double_pendulum_joints_stay_together_over_10_seconds(coordinates):
    world = models.double_pendulum(coordinates=coordinates)
    trajectory = physics.rollout(world, physics.initial_state(world), 1000)
    frames = joint_frames(
        world, trajectory.position.flatten(0, 1), trajectory.rotation.flatten(0, 1)
    )
    gap = (frames.child_anchor - frames.parent_anchor).norm(dim=-1)
    assert gap.max().item() < 1e-3
    # And it really moved: the lower arm swept across more than a metre.
    lower_x = trajectory.position[:, 0, 1, 0]
    assert (lower_x.max() - lower_x.min()).item() > 1.0


@pytest.mark.parametrize(
    "spin",
    [
        pytest.param([3.0, 0.5, 0.2], id="near-major-axis"),
        pytest.param([0.2, 0.5, 3.0], id="near-minor-axis"),
        pytest.param([0.05, 4.0, 0.05], id="near-intermediate-axis"),
    ],
)
def test_tumbling_box_keeps_its_angular_momentum_and_follows_euler(spin):
    """A box with three different moments in free flight (5 s, dt = 0.01 s): angular momentum
    constant to round-off, kinetic energy to 1e-4, and the rotation that of Euler's equations
    (the intermediate axis flips: the hardest of the three)."""
    size = [0.1, 0.2, 0.4]
    body = physics.Body("box", "box", size, mass=1.0, angular_velocity=spin)
    spec = physics.WorldSpec([body], gravity=[0.0, 0.0, 0.0], timestep=0.01)
    world = physics.build_world(spec, dtype=torch.float64)
    trajectory = physics.rollout(world, physics.initial_state(world), 500)
    rotation = trajectory.rotation[:, 0, 0].numpy()
    angular_velocity = trajectory.angular_velocity[:, 0, 0].numpy()
    f64 = {"dtype": torch.float64}
    moments = physics.inertia.shape_inertia(
        "box", torch.tensor(1.0, **f64), torch.tensor(size, **f64)
    )
    moments = moments.numpy()

    local = np.einsum("tji,tj->ti", rotation, angular_velocity)
    momentum = np.einsum("tij,tj->ti", rotation, moments * local)
    energy = 0.5 * (moments * local * local).sum(-1)
    assert np.abs(momentum - momentum[0]).max() < 1e-12 * np.linalg.norm(momentum[0])
    assert np.abs(energy - energy[0]).max() < 1e-4 * energy[0]

    reference, reference_velocity = free_rigid_body(moments, spin, np.arange(501) * 0.01)
    relative = np.einsum("tij,tkj->tik", rotation, reference)
    angle = np.arccos(np.clip((np.trace(relative, axis1=1, axis2=2) - 1) / 2, -1.0, 1.0))
    assert angle.max() < 0.02
    assert np.abs(angular_velocity - reference_velocity).max() < 0.05 * np.abs(spin).max()


@pytest.mark.slow
def test_ball_bounce_apexes_ratio_restitution_squared():
    e = 0.5
    world = models.ball_on_floor(height=1.0, restitution=e)
    trajectory = physics.rollout(world, physics.initial_state(world), 300)
    z = (trajectory.position[:, 0, 1, 2] - 0.1).numpy()
    apexes = [z[0]] + [z[i] for i in range(1, z.size - 1) if z[i] > z[i - 1] and z[i] >= z[i + 1]]
    expected = bouncing_ball_apexes(1.0, e, n=2)
    assert len(apexes) >= 3
    for k in range(2):
        assert abs(apexes[k + 1] / apexes[k] - e**2) / e**2 < 0.05
    assert abs(apexes[1] - expected[1]) / expected[1] < 0.05
    assert z.min() > -1e-3  # never sinks into the floor


def test_box_sliding_decelerates_at_mu_g_and_stays_stopped():
    mu = 0.4
    world = models.box_on_floor(speed=3.0, friction=mu)
    trajectory = physics.rollout(world, physics.initial_state(world), 150)
    vx = trajectory.linear_velocity[:, 0, 1, 0]
    deceleration = ((vx[1] - vx[60]) / (59 * 0.01)).item()
    assert abs(deceleration - mu * G) / (mu * G) < 0.02
    stop_time = 3.0 / (mu * G)
    after = trajectory[int(stop_time / 0.01) + 5 :]
    assert after.linear_velocity[:, 0, 1].abs().max().item() < 1e-3
    assert after.angular_velocity[:, 0, 1].abs().max().item() < 1e-3
    travelled = after.position[:, 0, 1, 0]
    assert (travelled - 9.0 / (2 * mu * G)).abs().max().item() < 0.01
    assert (after.position[:, 0, 1, 2] - 0.1).abs().max().item() < 1e-3


@pytest.mark.slow
def test_sphere_sphere_and_capsule_contacts_keep_bodies_apart():
    floor = physics.Body("floor", "plane", [5, 5], static=True)
    bodies = [floor]
    for k in range(3):
        bodies.append(
            physics.Body(
                f"ball{k}", "sphere", 0.1, mass=1.0, position=[0.02 * k, 0, 0.15 + 0.25 * k]
            )
        )
    bodies.append(physics.Body("stick", "capsule", [0.05, 0.4], mass=1.0, position=[0, 0, 1.2],
                               quat=[0.7071, 0.7071, 0, 0]))  # fmt: skip
    world = physics.build_world(physics.WorldSpec(bodies=bodies), dtype=torch.float64)
    trajectory = physics.rollout(world, physics.initial_state(world), 200)
    contacts = find_contacts(world, trajectory.position[-1], trajectory.rotation[-1])
    assert contacts.distance.min().item() > -0.02
    assert torch.isfinite(trajectory.position).all()
