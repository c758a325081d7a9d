"""Reduced joint coordinates (physics.articulated): conventions, agreement with the maximal
engine, exact joints and model errors.

Accuracy against the ODE references, finite-difference gradients, no-NaN gradients and batch
consistency run for both formulations in test_accuracy.py and test_gradients.py, compiled =
eager in test_conventions.py.
"""

import math

import numpy as np
import pytest
import torch

import physics
from physics.joints import joint_frames
from tests.finite_differences import check_directional
from tests.physics import models
from tests.physics.reference import physical_pendulum


def _joint_gap(world, trajectory):
    """Largest anchor separation (m) and hinge-axis misalignment over a trajectory."""
    frames = joint_frames(
        world, trajectory.position.flatten(0, 1), trajectory.rotation.flatten(0, 1)
    )
    gap = (frames.child_anchor - frames.parent_anchor).norm(dim=-1).max()
    tilt = torch.linalg.cross(frames.axis, frames.child_axis).norm(dim=-1).max()
    return gap.item(), tilt.item()


def test_smoke_reduced_step_keeps_shapes_and_dtype():
    world = models.cart_pole(theta0=0.3, batch_size=4, dtype=torch.float32, coordinates="reduced")
    state = physics.step(world, physics.initial_state(world), torch.ones(4, 1))
    assert state.position.shape == (4, 2, 3) and state.rotation.shape == (4, 2, 3, 3)
    assert state.linear_velocity.dtype == torch.float32
    assert world.coordinates == "reduced" and world.structure.tree is not None


def test_convention_joint_coordinates_read_back(dtype):
    """After a reduced step, `physics.joint_positions` reads the q and q' the step integrated:
    q is zero in the initial configuration, and velocity Verlet moves it by dt q' + O(dt^2)."""
    world = models.cart_pole(theta0=0.0, dtype=dtype, coordinates="reduced")
    state = physics.initial_state(world)
    q0, q_dot0 = physics.joint_positions(world, state)
    assert q0.abs().max() < 1e-6 and q_dot0.abs().max() < 1e-6
    push = torch.tensor([[5.0]], dtype=dtype)  # the cart accelerates along +x
    after = physics.step(world, state, push)
    q1, q_dot1 = physics.joint_positions(world, after)
    # Cart from rest, pole hanging: (M + m) x'' + m l th'' = F and (I + m l^2) th'' + m l x'' = 0
    # give x'' = F / (M + m - (m l)^2 / (I + m l^2)).
    pole_inertia = 0.1 * 0.5**2 + models.rod_inertia_com(mass=0.1)
    expected = 5.0 / (1.1 - (0.1 * 0.5) ** 2 / pole_inertia)
    assert q_dot1[0, 0].item() == pytest.approx(expected * 0.01, rel=0.02)
    assert q1[0, 0].item() == pytest.approx(0.5 * expected * 0.01**2, rel=0.02)
    assert q_dot1[0, 1].item() > 0  # the pole lags: its lower end toward -x, positive about +y


@pytest.mark.parametrize(
    "world_fn,tolerance",
    [
        (lambda c: models.pendulum(theta0=-math.pi / 2, coordinates=c), 1e-3),
        (lambda c: models.cart_pole(theta0=0.5, coordinates=c), 1e-3),
        (lambda c: models.double_pendulum(coordinates=c), 1e-3),
    ],
)
def test_reduced_matches_maximal_engine(world_fn, tolerance):
    runs = {}
    for coordinates in ("maximal", "reduced"):
        world = world_fn(coordinates)
        actions = None
        if world.actuator_names:
            actions = torch.sin(torch.arange(100, dtype=torch.float64) * 0.05)[:, None, None]
        runs[coordinates] = physics.rollout(
            world, physics.initial_state(world), 100, actions=actions
        )
    for field in ("position", "rotation", "linear_velocity"):
        difference = getattr(runs["maximal"], field) - getattr(runs["reduced"], field)
        assert difference.abs().max().item() < tolerance * (10 if field != "position" else 1)


@pytest.mark.slow
def test_joints_hold_to_round_off_over_10_seconds():
    world = models.double_pendulum(coordinates="reduced")
    trajectory = physics.rollout(world, physics.initial_state(world), 1000)
    gap, tilt = _joint_gap(world, trajectory)
    assert gap < 1e-12 and tilt < 1e-12
    rotation = trajectory.rotation
    identity = torch.eye(3, dtype=rotation.dtype)
    assert (rotation @ rotation.transpose(-1, -2) - identity).abs().max() < 1e-12


@pytest.mark.slow
def test_double_pendulum_energy_is_conserved():
    world = models.double_pendulum(coordinates="reduced")
    trajectory = physics.rollout(world, physics.initial_state(world), 1000)
    inertia = models.rod_inertia_com()
    v, w = trajectory.linear_velocity[:, 0], trajectory.angular_velocity[:, 0]
    kinetic = 0.5 * (v * v).sum((-1, -2)) + 0.5 * inertia * (w * w).sum((-1, -2))
    potential = 9.81 * trajectory.position[:, 0, :, 2].sum(-1)
    energy = kinetic + potential
    # Scale: the largest kinetic energy reached (the motion is chaotic and fast).
    drift = (energy - energy[0]).abs().max() / kinetic.max()
    assert drift.item() < 0.01


def test_joint_order_and_static_bodies_do_not_matter():
    """Joints listed child first, and a static body that collides with nothing, give the same
    motion as the plain double pendulum."""
    plain = models.double_pendulum(coordinates="reduced")
    spec_bodies = [
        physics.Body("post", "box", [0.1, 0.1, 1.0], static=True, collide=False,
                     position=[2.0, 0.0, 0.5]),
        physics.Body("lower", "box", [0.02, 0.02, 1.0], mass=1.0,
                     position=plain.initial_position[0, 1].tolist(),
                     rotation=plain.initial_rotation[0, 1].tolist()),
        physics.Body("upper", "box", [0.02, 0.02, 1.0], mass=1.0,
                     position=plain.initial_position[0, 0].tolist(),
                     rotation=plain.initial_rotation[0, 0].tolist()),
    ]  # fmt: skip
    pivot2 = plain.initial_position[0, 0] + plain.initial_rotation[0, 0] @ torch.tensor(
        [0.0, 0.0, -0.5], dtype=torch.float64
    )
    joints = [
        physics.Joint("elbow", "hinge", "upper", "lower", anchor=pivot2.tolist(), axis=[0, 1, 0]),
        physics.Joint("shoulder", "hinge", "world", "upper", anchor=[0, 0, 3.0], axis=[0, 1, 0]),
    ]
    shuffled = physics.build_world(
        physics.WorldSpec(spec_bodies, joints, coordinates="reduced"), dtype=torch.float64
    )
    a = physics.rollout(plain, physics.initial_state(plain), 100)
    b = physics.rollout(shuffled, physics.initial_state(shuffled), 100)
    torch.testing.assert_close(b.position[:, :, 1], a.position[:, :, 1], atol=1e-10, rtol=0)
    torch.testing.assert_close(b.position[:, :, 2], a.position[:, :, 0], atol=1e-10, rtol=0)
    assert (b.position[:, :, 0] == shuffled.initial_position[:, 0]).all()  # the post stays


@pytest.mark.slow
def test_cart_at_its_rail_stop_matches_the_maximal_engine():
    """Pushed into its stop for 3 s, the pole swinging on it: the limit holds exactly (the drift
    ends at the limit) and the motion is the maximal engine's (whose soft stop yields 16 um)."""
    runs = {}
    for coordinates in ("maximal", "reduced"):
        world = models.cart_pole(theta0=0.3, limits=[-0.5, 0.3], coordinates=coordinates)
        trajectory = physics.rollout(world, physics.initial_state(world), 300,
                                     actions=torch.full((300, 1, 1), 8.0, dtype=torch.float64))  # fmt: skip
        runs[coordinates], _ = physics.joint_positions(world, trajectory[:, 0])  # time as batch
    cart = runs["reduced"][:, 0]
    assert cart.max() <= 0.3 + 1e-12 and cart[-1] == pytest.approx(0.3, abs=1e-12)
    assert (cart == 0.3).sum() > 250  # it got there early and stayed
    difference = (runs["maximal"] - runs["reduced"]).abs()
    assert difference[:, 0].max() < 1e-4 and difference[:, 1].max() < 1e-3
    assert runs["reduced"][:, 1].abs().max() > 0.5  # the pole swings hard on the stop


@pytest.mark.slow
def test_pendulum_comes_to_rest_on_its_hinge_limit(dtype):
    """Released level, the pendulum falls onto a hinge limit 1.2 rad on (q is zero in the initial
    configuration) and stays there; the lower limit is never reached."""
    runs = {}
    for coordinates in ("maximal", "reduced"):
        pivot = [0.0, 0.0, 2.0]
        com, quat = models.hanging_pose(-math.pi / 2, pivot, 0.5)
        rod = physics.Body("rod", "box", [0.02, 0.02, 1.0], mass=1.0, position=com, quat=quat)
        hinge = physics.Joint("hinge", "hinge", "world", "rod", anchor=pivot, axis=[0, 1, 0],
                              limits=[-0.3, 1.2])  # fmt: skip
        world = physics.build_world(
            physics.WorldSpec([rod], [hinge], coordinates=coordinates), dtype=dtype
        )
        trajectory = physics.rollout(world, physics.initial_state(world), 300)
        runs[coordinates] = physics.joint_positions(world, trajectory[:, 0])  # time as batch
    angle, rate = runs["reduced"]
    slack = 1e-12 if dtype == torch.float64 else 1e-6
    assert angle.max() <= 1.2 + slack and angle.min() >= -slack
    assert angle[-100:].sub(1.2).abs().max() < slack and rate[-100:].abs().max() < 1e-3
    assert (runs["maximal"][0] - angle).abs().max() < 1e-3


def _servo_pendulum(coordinates, target, max_torque, dtype=torch.float64):
    """The test pendulum released level, its hinge driven by the paper's servo (gain 10,
    max_velocity 3 rad/s)."""
    pivot = [0.0, 0.0, 2.0]
    com, quat = models.hanging_pose(-math.pi / 2, pivot, 0.5)
    rod = physics.Body("rod", "box", [0.02, 0.02, 1.0], mass=1.0, position=com, quat=quat)
    servo = physics.Motor("servo", gain=10.0, max_torque=max_torque, max_velocity=3.0,
                          target=target)  # fmt: skip
    hinge = physics.Joint("hinge", "hinge", "world", "rod", anchor=pivot, axis=[0, 1, 0],
                          motor=servo)  # fmt: skip
    spec = physics.WorldSpec([rod], [hinge], coordinates=coordinates)
    return physics.build_world(spec, dtype=dtype)


@pytest.mark.parametrize(
    "target,action,max_torque",
    [
        ("position", 0.8, 20.0),  # reaches 0.8 rad and holds it against gravity
        ("position", 0.8, 3.0),  # too weak: it sags past the target, at its torque bound
        ("velocity", 1.0, 20.0),  # turns at 1 rad/s
    ],
)
@pytest.mark.slow
def test_servos_match_the_maximal_engine(target, action, max_torque):
    runs = {}
    for coordinates in ("maximal", "reduced"):
        world = _servo_pendulum(coordinates, target, max_torque)
        actions = torch.full((300, 1, 1), action, dtype=torch.float64)
        trajectory = physics.rollout(world, physics.initial_state(world), 300, actions=actions)
        runs[coordinates] = physics.joint_positions(world, trajectory[:, 0])  # time as batch
    (angle, rate), (reference, _) = runs["reduced"], runs["maximal"]
    assert (angle - reference).abs().max() < 1e-3
    if target == "velocity":
        assert rate[-50:].sub(action).abs().max() < 1e-9
    elif max_torque > 10.0:
        assert angle[-1].item() == pytest.approx(action, abs=1e-9)
    else:  # gravity's torque at the target, m g d cos(0.8), is beyond 3 N m
        assert angle[-1].item() > action + 0.05


def test_force_motor_is_clipped():
    world = models.cart_pole(theta0=0.0, motor_max=2.0, coordinates="reduced")
    state = physics.initial_state(world)
    big = physics.step(world, state, torch.tensor([[50.0]], dtype=torch.float64))
    at_limit = physics.step(world, state, torch.tensor([[2.0]], dtype=torch.float64))
    torch.testing.assert_close(big.linear_velocity, at_limit.linear_velocity)
    with pytest.raises(ValueError, match=r"action must have shape \(B, 1\)"):
        physics.step(world, state, torch.zeros(1, 2, dtype=torch.float64))


@pytest.mark.slow
def test_gradients_reach_every_parameter_it_uses():
    """Each parameter's gradient along a random direction equals the central difference."""
    world = models.cart_pole(theta0=0.4, hinge_damping=0.1, coordinates="reduced")
    names = ("mass", "size", "gravity", "joint_damping", "motor_max", "anchor_parent")
    actions = torch.full((30, 1, 1), 200.0, dtype=torch.float64)

    def loss(*values):
        for name, value in zip(names, values, strict=True):
            setattr(world, name, value)
        trajectory = physics.rollout(world, physics.initial_state(world), 30, actions=actions)
        return trajectory.position[..., 0].square().sum() + trajectory.position[..., 2].sum()

    check_directional(loss, [getattr(world, name).detach().clone() for name in names],
                      rtol=1e-5, names=names)  # fmt: skip


def _welded_pendulum(theta0: float, coordinates: str, bob_mass: float = 0.5):
    """The test pendulum's 1 m rod with a sphere (radius 0.1 m) welded at its lower end, its
    centre 1 m from the pivot; the fixed joint listed before the hinge."""
    pivot = [0.0, 0.0, 2.0]
    rod_com, quat = models.hanging_pose(theta0, pivot, 0.5)
    bob_centre, _ = models.hanging_pose(theta0, pivot, 1.0)
    bodies = [
        physics.Body("rod", "box", [0.02, 0.02, 1.0], mass=1.0, position=rod_com, quat=quat),
        physics.Body("bob", "sphere", 0.1, mass=bob_mass, position=bob_centre, collide=False),
    ]
    joints = [
        physics.Joint("weld", "fixed", "rod", "bob", anchor=bob_centre),
        physics.Joint("pivot", "hinge", "world", "rod", anchor=pivot, axis=[0, 1, 0]),
    ]
    spec = physics.WorldSpec(bodies, joints, coordinates=coordinates)
    return physics.build_world(spec, dtype=torch.float64)


def test_welded_pendulum_matches_ode_solution():
    """A fixed joint has no coordinate: rod and bob swing as one rigid body, whose pivot inertia
    and centre of mass the ODE reference takes."""
    world = _welded_pendulum(1.0, "reduced")
    trajectory = physics.rollout(world, physics.initial_state(world), 300)
    rod, bob = 1.0, 0.5
    mass = rod + bob
    com_distance = (rod * 0.5 + bob * 1.0) / mass
    pivot_inertia = models.rod_inertia_com() + rod * 0.25 + 0.4 * bob * 0.1**2 + bob * 1.0
    t = np.arange(301) * 0.01
    reference, _ = physical_pendulum(1.0, 0.0, t, mass=mass, com_distance=com_distance,
                                     inertia_com=pivot_inertia - mass * com_distance**2)  # fmt: skip
    angle = models.pendulum_angle(trajectory)[:, 0].numpy()
    assert np.abs(angle - reference).max() < 0.01
    # The weld holds to round-off: the bob's centre stays 1 m from the pivot along the rod.
    position, rotation = trajectory.position[:, 0], trajectory.rotation[:, 0]  # world 0
    tip = position[:, 0] + rotation[:, 0] @ torch.tensor([0.0, 0.0, -0.5], dtype=torch.float64)
    assert (tip - position[:, 1]).abs().max() < 1e-12
    relative = rotation[:, 0].transpose(-1, -2) @ rotation[:, 1]
    assert (relative - relative[0]).abs().max() < 1e-12


def test_fixed_joints_match_the_maximal_engine_with_motor_and_damping():
    """Fixed joints listed first shift the coordinates off the joint indices: the motor and
    the damping must still reach the right ones."""
    runs = {}
    for coordinates in ("maximal", "reduced"):
        spec = _spec(hinge__damping=0.05, rail__damping=0.2,
                     rail__motor=physics.Motor("force", max=20.0))  # fmt: skip
        tip = [0.0, 0.0, 0.0]
        spec.bodies.append(physics.Body("bob", "sphere", 0.05, mass=0.2, position=tip,
                                        collide=False))  # fmt: skip
        spec.joints.insert(0, physics.Joint("weld", "fixed", "pole", "bob", anchor=tip))
        spec.coordinates = coordinates
        world = physics.build_world(spec, dtype=torch.float64)
        actions = 3.0 * torch.sin(torch.arange(100, dtype=torch.float64) * 0.1)[:, None, None]
        # Pole and bob turning at 2 rad/s about the pivot (a state on the joints).
        state = physics.initial_state(world)
        spin = torch.tensor(
            [[[0.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 2.0, 0.0]]], dtype=torch.float64
        )
        pivot = torch.tensor([0.0, 0.0, 1.0], dtype=torch.float64)
        velocity = torch.linalg.cross(spin, state.position - pivot)
        state = state.replace(linear_velocity=velocity, angular_velocity=spin)
        runs[coordinates] = physics.rollout(world, state, 100, actions=actions)
    # The formulations differ by their integrators' error: 1.1 mm here (2.4 mm without the
    # weld; both halve with the timestep). A motor or damping on the wrong coordinate would be
    # centimetres off: the push moves the cart by decimetres.
    difference = runs["maximal"].position - runs["reduced"].position
    assert difference.abs().max() < 3e-3
    assert (runs["reduced"].position[-1, 0] - runs["reduced"].position[0, 0]).abs().max() > 0.05


def test_only_fixed_joints_is_a_model_error():
    spec = _spec(rail__type="fixed", hinge__type="fixed")
    with pytest.raises(physics.ReducedCoordinatesError, match=r"fixed joints alone move nothing"):
        physics.build_world(spec)


def _spec(**changes):
    """A cart-pole spec with a change: a dict of body/joint field overrides."""
    pivot = [0.0, 0.0, 1.0]
    cart = physics.Body("cart", "box", [0.3, 0.2, 0.1], mass=1.0, position=pivot)
    pole = physics.Body("pole", "box", [0.02, 0.02, 1.0], mass=0.1, position=[0, 0, 0.5])
    rail = physics.Joint("rail", "slider", "world", "cart", anchor=pivot, axis=[1, 0, 0])
    hinge = physics.Joint("hinge", "hinge", "cart", "pole", anchor=pivot, axis=[0, 1, 0])
    bodies, joints = [cart, pole], [rail, hinge]
    for key, value in changes.items():
        target, field = key.split("__")
        item = {"cart": cart, "pole": pole, "rail": rail, "hinge": hinge}.get(target)
        if item is None:
            bodies.append(value)
        else:
            setattr(item, field, value)
    return physics.WorldSpec(bodies, joints, coordinates="reduced")


@pytest.mark.parametrize(
    "changes,message",
    [
        ({"hinge__type": "ball"}, r"joint 'hinge': .*hinge, slider and fixed joints, not 'ball'"),
        ({"floor__": physics.Body("floor", "plane", [5, 5], static=True)},
         r"bodies 'floor' and 'cart' may collide: .*collide = false"),
        ({"extra__": physics.Body("ball", "sphere", 0.1, mass=1.0, collide=False)},
         r"body 'ball' has no joint"),
        ({"rail__parent": "post", "post__": physics.Body("post", "box", [1, 1, 1], static=True,
                                                        collide=False)},
         r"not the static body 'post'"),
    ],
)  # fmt: skip
def test_model_errors_say_why_reduced_coordinates_do_not_apply(changes, message):
    with pytest.raises(physics.ModelError, match=message):
        physics.build_world(_spec(**changes))


def test_unknown_coordinates_is_a_model_error():
    spec = _spec()
    spec.coordinates = "generalised"
    with pytest.raises(physics.ModelError, match=r"world: coordinates must be one of maximal"):
        physics.build_world(spec)


def test_world_without_joints_is_a_model_error():
    ball = physics.Body("ball", "sphere", 0.1, mass=1.0)
    spec = physics.WorldSpec([ball], coordinates="reduced")
    with pytest.raises(physics.ModelError, match=r"needs at least one joint"):
        physics.build_world(spec)


def test_closed_loop_is_a_model_error():
    spec = _spec()
    spec.joints.append(physics.Joint("loop", "hinge", "pole", "cart", anchor=[0, 0, 1.0]))
    with pytest.raises(physics.ModelError, match=r"body 'cart' is the child of two joints"):
        physics.build_world(spec)
