"""Conventions (z up, gravity -z, pose, quaternion order, joint signs), model errors, rollout tools."""

import math

import pytest
import torch

import physics
from physics.joints import equality_rows, joint_frames
from physics.rollouts import assert_finite
from tests.physics import models


def test_convention_gravity_points_down_z():
    world = models.ball_on_floor(height=3.0)
    trajectory = physics.rollout(world, physics.initial_state(world), 10)
    velocity = trajectory.linear_velocity[-1, 0, 1]
    torch.testing.assert_close(velocity, torch.tensor([0.0, 0.0, -9.81 * 0.1], dtype=torch.float64))


def test_convention_free_flight_is_exact_parabola():
    # Kick-drift-kick integrates constant acceleration exactly.
    world = models.ball_on_floor(height=10.0, velocity=(1.0, 2.0, 3.0))
    trajectory = physics.rollout(world, physics.initial_state(world), 50)
    t = 0.5
    expected = torch.tensor(
        [1.0 * t, 2.0 * t, 10.1 + 3.0 * t - 0.5 * 9.81 * t * t], dtype=torch.float64
    )
    torch.testing.assert_close(trajectory.position[-1, 0, 1], expected, atol=1e-10, rtol=0)


def test_convention_quaternion_is_w_x_y_z_and_pose_maps_body_to_world():
    # 90 degrees about +z: body x -> world y.
    quat = [math.cos(math.pi / 4), 0.0, 0.0, math.sin(math.pi / 4)]
    body = physics.Body("b", "box", [1, 1, 1], mass=1.0, position=[1, 2, 3], quat=quat)
    world = physics.build_world(physics.WorldSpec([body], gravity=[0, 0, 0]), dtype=torch.float64)
    state = physics.initial_state(world)
    x_body = torch.tensor([1.0, 0.0, 0.0], dtype=torch.float64)
    x_world = state.rotation[0, 0] @ x_body + state.position[0, 0]
    torch.testing.assert_close(x_world, torch.tensor([1.0, 3.0, 3.0], dtype=torch.float64))


def test_convention_angular_velocity_is_world_frame_and_rotation_stays_orthonormal():
    body = physics.Body("b", "box", [0.1, 0.2, 0.3], mass=1.0, angular_velocity=[0.0, 0.0, 2.0])
    world = physics.build_world(physics.WorldSpec([body], gravity=[0, 0, 0]), dtype=torch.float64)
    trajectory = physics.rollout(world, physics.initial_state(world), 100)
    rotation = trajectory.rotation[-1, 0, 0]
    angle = 2.0 * 1.0
    expected = torch.tensor([[math.cos(angle), -math.sin(angle), 0], [math.sin(angle), math.cos(angle), 0], [0, 0, 1]],
                            dtype=torch.float64)  # fmt: skip
    torch.testing.assert_close(rotation, expected, atol=1e-9, rtol=0)
    torch.testing.assert_close(
        rotation @ rotation.T, torch.eye(3, dtype=torch.float64), atol=1e-12, rtol=0
    )


def test_convention_joint_coordinates_hinge_right_handed_slider_along_axis():
    world = models.cart_pole(theta0=0.3)
    state = physics.initial_state(world)
    q, _ = physics.joint_positions(world, state)
    torch.testing.assert_close(q, torch.zeros(1, 2, dtype=torch.float64), atol=1e-12, rtol=0)
    pushed = physics.rollout(
        world, state, 20, actions=torch.full((20, 1, 1), 5.0, dtype=torch.float64)
    )
    q, q_dot = physics.joint_positions(world, pushed[-1])
    assert q[0, 0] > 0 and q_dot[0, 0] > 0  # the cart moved along +x
    # Pole about +y: a pole swinging toward -x has a positive angle (right-handed about +y).
    offset = pushed.position[-1, 0, 1] - pushed.position[-1, 0, 0]
    relative = math.atan2(-offset[0], -offset[2]) - 0.3
    assert abs(q[0, 1].item() - relative) < 1e-6


def test_sphere_inertia_has_r_squared():
    from physics.inertia import shape_inertia

    inertia = shape_inertia("sphere", torch.tensor(2.0), torch.tensor([0.5, 0.0, 0.0]))
    torch.testing.assert_close(inertia, torch.full((3,), 0.4 * 2.0 * 0.25))


@pytest.mark.parametrize(
    "spec,message",
    [
        (physics.WorldSpec([physics.Body("a", "sphere", 0.1, mass=-1.0)]), "mass"),
        (physics.WorldSpec([physics.Body("a", "sphere", 0.1)]), "needs a mass"),
        (physics.WorldSpec([physics.Body("a", "cone", 0.1, mass=1.0)]), "shape 'cone' is unknown"),
        (physics.WorldSpec([physics.Body("a", "plane", [1, 1])]), "must be static"),
        (physics.WorldSpec([physics.Body("a", "box", [1, 0, 1], mass=1.0)]), "size"),
        (
            physics.WorldSpec(
                [physics.Body("a", "sphere", 0.1, mass=1.0)],
                [physics.Joint("j", "hinge", "world", "b")],
            ),
            "child 'b' is not a body",
        ),  # fmt: skip
        (
            physics.WorldSpec(
                [physics.Body("a", "sphere", 0.1, mass=1.0)],
                [physics.Joint("j", "hinge", "world", "a", axis=[0, 0, 0])],
            ),
            "axis has zero length",
        ),  # fmt: skip
        (
            physics.WorldSpec(
                [physics.Body("a", "sphere", 0.1, mass=1.0)],
                [physics.Joint("j", "ball", "world", "a", motor=physics.Motor())],
            ),
            "motor needs",
        ),  # fmt: skip
    ],
)
def test_invalid_models_raise_clear_errors(spec, message):
    with pytest.raises(physics.ModelError, match=message):
        physics.build_world(spec)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
@pytest.mark.parametrize("field", ["position", "rotation", "angular_velocity"])
def test_non_finite_state_names_step_and_body(field, value):
    world = models.ball_on_floor(height=1.0)
    state = physics.initial_state(world)
    trajectory = physics.rollout(world, state, 3, check_finite=False)
    assert_finite(world, trajectory)  # finite: no error
    broken = trajectory.replace(**{field: getattr(trajectory, field).clone()})
    getattr(broken, field)[2, 0, 1, 0] = value
    with pytest.raises(physics.SimulationError, match=r"step 2 .*body 'ball'"):
        assert_finite(world, broken)


@pytest.mark.slow
def test_checkpointed_rollout_gives_the_same_gradient():
    world = models.cart_pole(theta0=0.4)
    actions = torch.linspace(-1, 1, 24, dtype=torch.float64)[:, None, None]

    def grad(checkpoint_every):
        a = actions.clone().requires_grad_(True)
        trajectory = physics.rollout(
            world, physics.initial_state(world), 24, actions=a, checkpoint_every=checkpoint_every
        )
        trajectory.position[..., 0].pow(2).sum().backward()
        return a.grad

    torch.testing.assert_close(grad(None), grad(5), atol=1e-12, rtol=1e-10)


def test_gradient_decay_is_identity_forward_and_scales_backward():
    x = torch.tensor([1.0, 2.0], requires_grad=True)
    y = physics.decay_gradient(x, 0.3)
    assert torch.equal(y, x)
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((2,), 0.3))
    world = models.pendulum(theta0=0.5)
    state = physics.initial_state(world)
    spin = state.angular_velocity.clone().requires_grad_(True)
    plain = physics.rollout(world, state.replace(angular_velocity=spin), 10)
    decayed = physics.rollout(world, state.replace(angular_velocity=spin), 10, gradient_decay=0.5)
    torch.testing.assert_close(plain.position, decayed.position)
    (g_plain,) = torch.autograd.grad(plain.position[-1].sum(), spin)
    (g_decay,) = torch.autograd.grad(decayed.position[-1].sum(), spin)
    assert g_decay.abs().sum() < 0.01 * g_plain.abs().sum()


@pytest.mark.slow
def test_servo_tracks_target_position_within_torque_limit():
    rod = physics.Body("rod", "box", [0.02, 0.02, 1.0], mass=1.0, position=[0, 0, 1.5])
    servo = physics.Motor("servo", gain=10.0, max_torque=50.0, max_velocity=3.0)
    hinge = physics.Joint(
        "hinge", "hinge", "world", "rod", anchor=[0, 0, 2], axis=[0, 1, 0], motor=servo
    )
    world = physics.build_world(physics.WorldSpec([rod], [hinge]), dtype=torch.float64)
    target = torch.full((150, 1, 1), 0.8, dtype=torch.float64)
    trajectory = physics.rollout(world, physics.initial_state(world), 150, actions=target)
    q, q_dot = physics.joint_positions(world, trajectory[-1])
    assert abs(q.item() - 0.8) < 0.02
    # Speed never exceeded max_velocity (the servo asks for at most 3 rad/s).
    speeds = trajectory.angular_velocity[:, 0, 0, 1].abs()
    assert speeds.max().item() < 3.0 + 1e-6
    weak = physics.build_world(physics.WorldSpec([rod], [physics.Joint("hinge", "hinge", "world", "rod", anchor=[0, 0, 2],
                               axis=[0, 1, 0], motor=physics.Motor("servo", gain=10.0, max_torque=1.0, max_velocity=3.0))]),
                               dtype=torch.float64)  # fmt: skip
    weak_q, _ = physics.joint_positions(
        weak, physics.rollout(weak, physics.initial_state(weak), 150, actions=target)[-1]
    )
    assert weak_q.item() < 0.3  # 1 N m cannot lift a 1 kg rod far (needs up to 4.9 N m)


@pytest.mark.slow
def test_slider_limits_stop_the_cart():
    cart = physics.Body("cart", "box", [0.3, 0.2, 0.1], mass=1.0, position=[0, 0, 1])
    rail = physics.Joint("rail", "slider", "world", "cart", anchor=[0, 0, 1], axis=[1, 0, 0], limits=[-0.5, 0.5],
                         motor=physics.Motor("force", max=10.0))  # fmt: skip
    world = physics.build_world(physics.WorldSpec([cart], [rail]), dtype=torch.float64)
    trajectory = physics.rollout(
        world,
        physics.initial_state(world),
        200,
        actions=torch.full((200, 1, 1), 10.0, dtype=torch.float64),
    )
    x = trajectory.position[:, 0, 0, 0]
    assert x.max().item() < 0.5 + 1e-3
    assert abs(x[-1].item() - 0.5) < 2e-3


@pytest.mark.slow
def test_cart_pole_with_rail_limits_under_strong_force_stays_finite_and_limited(dtype):
    # Regression: joints plus bounded rows (limits) under a hard push went non-finite.
    pivot = [0.0, 0.0, 1.2]
    cart = physics.Body("cart", "box", [0.4, 0.16, 0.2], mass=1.0, position=pivot)
    pole = physics.Body("pole", "capsule", [0.035, 0.93], mass=0.2, position=[0, -0.13, 0.7])
    rail = physics.Joint("rail", "slider", "world", "cart", anchor=pivot, axis=[1, 0, 0], limits=[-1, 1],
                         damping=0.5, motor=physics.Motor("force", max=30.0))  # fmt: skip
    hinge = physics.Joint("hinge", "hinge", "cart", "pole", anchor=[0, -0.13, 1.2], axis=[0, 1, 0])
    world = physics.build_world(
        physics.WorldSpec([cart, pole], [rail, hinge]), batch_size=2, dtype=dtype
    )
    t = torch.arange(300, dtype=dtype) * 0.01
    force = torch.stack([30.0 * torch.sign(torch.sin(3.0 * t)), torch.full_like(t, 30.0)], 1)[
        ..., None
    ]
    trajectory = physics.rollout(world, physics.initial_state(world), 300, actions=force)
    q, _ = physics.joint_positions(world, trajectory[-1])
    x = trajectory.position[:, :, 0, 0]
    # The limit is a speculative one-sided row; the joints' position-level correction can push
    # a little past it while the pole swings hard, and the penetration is then recovered.
    assert x.abs().max().item() < 1.0 + 0.015
    assert abs(x[-1, 1].item() - 1.0) < 3e-3  # pressed against the stop, it rests there
    for t in range(0, 301, 10):
        frames = joint_frames(world, trajectory.position[t], trajectory.rotation[t])
        _, error = equality_rows(world, frames)  # every joint row's position error (m, rad)
        assert error.abs().max().item() < 2e-3
    assert torch.isfinite(q).all()


@pytest.mark.slow
def test_inactive_bounded_rows_skip_the_sweeps_with_the_same_step_and_gradients(monkeypatch):
    # A cart-pole mid-rail: its limit rows exist but are inactive, so step() replaces the
    # projected sweeps by one joint projection. Forcing the sweeps must give the same states
    # and the same gradients with respect to the actions.

    from physics import stepping as step_module

    pivot = [0.0, 0.0, 1.2]
    cart = physics.Body("cart", "box", [0.4, 0.16, 0.2], mass=1.0, position=pivot)
    pole = physics.Body("pole", "capsule", [0.035, 0.93], mass=0.2, position=[0, -0.13, 0.7])
    rail = physics.Joint("rail", "slider", "world", "cart", anchor=pivot, axis=[1, 0, 0], limits=[-1, 1],
                         damping=0.5, motor=physics.Motor("force", max=30.0))  # fmt: skip
    hinge = physics.Joint("hinge", "hinge", "cart", "pole", anchor=[0, -0.13, 1.2], axis=[0, 1, 0])
    world = physics.build_world(
        physics.WorldSpec([cart, pole], [rail, hinge]), batch_size=3, dtype=torch.float64
    )
    state = physics.initial_state(world)
    spin = torch.tensor([[0.0, 4.0, 0.0], [0.0, -2.0, 0.0], [0.0, 6.0, 0.0]], dtype=torch.float64)
    state = physics.State(state.position, state.rotation, state.linear_velocity,
                          torch.stack([torch.zeros_like(spin), spin], 1))  # fmt: skip

    original, solve, sweeps = step_module._needs_sweep, step_module._solve, []

    def counted_solve(*args):
        sweeps.append(1)
        return solve(*args)

    monkeypatch.setattr(step_module, "_solve", counted_solve)

    def run(force: bool):
        sweeps.clear()
        monkeypatch.setattr(step_module, "_needs_sweep", (lambda g: bool(g)) if force else original)
        actions = torch.linspace(-3.0, 3.0, 40 * 3, dtype=torch.float64).reshape(40, 3, 1)
        actions.requires_grad_(True)
        trajectory = physics.rollout(world, state, 40, actions=actions)
        loss = (trajectory.position[..., 1, :] ** 2).sum() + trajectory.angular_velocity.sum()
        (grad,) = torch.autograd.grad(loss, actions)
        return trajectory, grad, len(sweeps)

    skipped, grad_skipped, solves_skipped = run(force=False)
    swept, grad_swept, solves_swept = run(force=True)
    assert solves_skipped == 0 and solves_swept == 2 * 40
    assert skipped.position[:, :, 0, 0].abs().max() < 0.5  # the limits were never active
    for a, b in zip(skipped.tensors(), swept.tensors(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-9, rtol=0)
    assert grad_skipped.abs().max() > 1e-3
    torch.testing.assert_close(grad_skipped, grad_swept, atol=1e-8, rtol=1e-6)


def test_redundant_joints_float32_stay_finite():
    rod = physics.Body(
        "rod",
        "box",
        [0.02, 0.02, 1.0],
        mass=1.0,
        position=[0.5, 0, 2],
        quat=[0.7071068, 0, 0.7071068, 0],
    )
    joints = [
        physics.Joint(name, "hinge", "world", "rod", anchor=[0, 0, 2], axis=[0, 1, 0])
        for name in ("a", "b")
    ]
    world = physics.build_world(physics.WorldSpec([rod], joints), dtype=torch.float32)
    trajectory = physics.rollout(world, physics.initial_state(world), 100)
    assert (trajectory.position[:, 0, 0] - torch.tensor([0, 0, 2.0])).norm(dim=-1).sub(
        0.5
    ).abs().max() < 1e-3


def _cart_pole_five_steps(step, coordinates, actions):
    """The compiled-step tests' model (B = len(actions)) stepped 5 times by ``step`` from its
    start, with gradients to the actions and the start velocity: (state, grad actions,
    grad start velocity). The reduced model has a welded tip and rail stops. The five steps are
    one compiled graph: the step returns `initial_state`'s layout, and `compiled_step` aligns
    the start state's requires-grad flags with its outputs'."""
    reduced = coordinates == "reduced"
    world = models.cart_pole(theta0=0.7, batch_size=actions.shape[0], dtype=torch.float32,
                             coordinates=coordinates, tip_mass=0.05 if reduced else None,
                             limits=[-1e-3, 4e-4] if reduced else None)  # fmt: skip
    actions = actions.clone().requires_grad_(True)
    state = physics.initial_state(world)
    start_velocity = state.linear_velocity.clone().requires_grad_(True)
    state = state.replace(linear_velocity=start_velocity)
    for _ in range(5):
        state = step(world, state, actions)
    loss = state.position[..., 0].square().sum() + state.angular_velocity[..., 1].sum()
    return (state, *torch.autograd.grad(loss, (actions, start_velocity)))


@pytest.mark.compile
@pytest.mark.parametrize("coordinates", ["maximal", "reduced"])
def test_compiled_step_matches_eager_step(coordinates):
    """Values and gradients. torch.compile takes another path for the joint solve (Gauss-Jordan
    instead of LAPACK), and for reduced worlds a backward that recomputes the forward; the
    reduced model has a welded tip (a fixed joint) as well, and rail stops that two of the
    three carts reach (one each way) within the five steps."""
    actions = torch.tensor([[1.0], [-2.0], [0.5]])
    runs = {}
    for name, step in (("eager", physics.step), ("compiled", physics.compiled_step(torch.float32))):
        runs[name] = _cart_pole_five_steps(step, coordinates, actions)
    (eager, *eager_grads), (compiled, *compiled_grads) = runs["eager"], runs["compiled"]
    torch.testing.assert_close(compiled.position, eager.position, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        compiled.linear_velocity, eager.linear_velocity, atol=1e-4, rtol=1e-4
    )
    for compiled_grad, eager_grad in zip(compiled_grads, eager_grads, strict=True):
        assert eager_grad.abs().max() > 0
        torch.testing.assert_close(compiled_grad, eager_grad, atol=1e-4, rtol=1e-3)


@pytest.mark.parametrize("coordinates", ["maximal", "reduced"])
def test_convention_step_returns_the_initial_state_layout(coordinates):
    """A step's state has `initial_state`'s shapes and strides (contiguous tensors): a
    compiled step guards on strides, and views of one velocity buffer made a rollout from
    `initial_state` compile the step twice (40 s more on this CPU)."""
    world = models.cart_pole(theta0=0.7, batch_size=3, dtype=torch.float32,
                             coordinates=coordinates)  # fmt: skip
    start = physics.initial_state(world)
    after = physics.step(world, start, torch.ones(3, 1))
    for a, b in zip(after.tensors(), start.tensors(), strict=True):
        assert a.shape == b.shape and a.stride() == b.stride() and a.is_contiguous()


@pytest.mark.compile
@pytest.mark.parametrize("coordinates", ["maximal", "reduced"])
def test_compiled_step_does_not_recompile_for_a_new_batch_size(coordinates):
    """One compiled graph per world structure and grad mode serves every batch size (the batch
    axis is marked dynamic; the reduced step is built ahead of time with it dynamic): the same
    model as above at B = 3, then 5 and 8, compiles nothing more after the first batch size
    (run after the test above, it compiles nothing at all)."""
    from torch._dynamo.utils import counters

    from physics.ahead_of_time import BUILT, LOADED

    def run(batch, step):
        actions = torch.linspace(-2.0, 1.0, batch)[:, None]
        state, *grads = _cart_pole_five_steps(step, coordinates, actions)
        return (state.position, *grads)

    def builds():  # Dynamo's graphs; the reduced step's libraries built ahead of time
        return counters["stats"]["unique_graphs"], len(BUILT) + len(LOADED)

    compiled = physics.compiled_step(torch.float32)
    run(3, compiled)
    before = builds()
    for batch in (5, 8):
        out = run(batch, compiled)
        assert builds() == before, f"recompiled for B = {batch}"
        for got, want in zip(out, run(batch, physics.step), strict=True):
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)


@pytest.mark.compile
def test_compiled_step_after_another_world_structure():
    """A second world structure compiles a graph of its own with only the batch axis dynamic:
    Dynamo's automatic dynamic shapes once made the body count symbolic there, and that
    reduced step gave NaN. The first structure is the reduced model above with its welded tip
    (its graph, with gradients, is compiled already when the tests above ran), the second a
    cart-pole without the tip, stepped without gradients. (Checked: with automatic dynamic
    shapes, the second gives NaN in this order, and differs from eager by 6e-3 the other way
    round.)"""
    compiled = physics.compiled_step(torch.float32)
    _cart_pole_five_steps(compiled, "reduced", torch.tensor([[1.0], [-2.0], [0.5]]))
    world = models.cart_pole(theta0=0.7, batch_size=4, dtype=torch.float32,
                             coordinates="reduced")  # fmt: skip
    runs = []
    with torch.no_grad():
        for step in (compiled, physics.step):
            state = physics.initial_state(world)
            for _ in range(5):
                state = step(world, state, torch.ones(4, 1))
            runs.append(state.position)
    assert torch.isfinite(runs[0]).all()
    torch.testing.assert_close(runs[0], runs[1], atol=1e-5, rtol=1e-5)


def test_convention_a_cart_pressed_against_its_stop_is_solved_in_one_sweep(dtype):
    # The bounded rows are swept in the joints' free space with Gershgorin step sizes: a row
    # alone (the cart at its stop, the pole swinging on it) is exact after one sweep, so few
    # sweeps give the same step as many.
    def run(iterations):
        world = models.cart_pole(
            theta0=2.0, limits=[-0.5, 0.0], solver_iterations=iterations, batch_size=3, dtype=dtype
        )
        state = physics.initial_state(world)
        push = torch.tensor([[40.0], [10.0], [80.0]], dtype=dtype)
        for _ in range(50):
            state = physics.step(world, state, push)
        return state

    many, one = run(30), run(1)
    x = many.position[:, 0, 0]
    assert (x <= 1e-3).all() and (x > -1e-3).all()  # held at the stop (x0 = 0), not through it
    tolerance = 1e-5 if dtype == torch.float32 else 1e-10
    for a, b in zip(one.tensors(), many.tensors(), strict=True):
        torch.testing.assert_close(a, b, atol=tolerance, rtol=0)


@pytest.mark.compile
def test_convention_compiled_step_aligns_the_start_state_grad_flags():
    """`uniform_grad_flags`: with grad enabled and any input requiring grad, every state
    tensor requires grad (as every step output then does, so a compiled rollout from
    `initial_state` is one graph); the caller's tensors and the gradients are unchanged;
    without grad, or with nothing requiring it, the state itself comes back."""
    from physics.rollouts import uniform_grad_flags

    world = models.cart_pole(theta0=0.7, batch_size=3, dtype=torch.float64)
    start = physics.initial_state(world)
    actions = torch.tensor([[1.0], [-2.0], [0.5]], dtype=torch.float64, requires_grad=True)
    aligned = uniform_grad_flags(world, start, actions)
    after = physics.step(world, start, actions)
    assert [t.requires_grad for t in aligned.tensors()] == [True] * 4
    assert [t.requires_grad for t in after.tensors()] == [True] * 4
    assert not any(t.requires_grad for t in start.tensors())
    assert uniform_grad_flags(world, start, actions.detach()) is start
    with torch.no_grad():
        assert uniform_grad_flags(world, start, actions) is start
    (g_aligned,) = torch.autograd.grad(
        physics.step(world, aligned, actions).position.sum(), actions
    )
    (g_plain,) = torch.autograd.grad(after.position.sum(), actions)
    torch.testing.assert_close(g_aligned, g_plain, rtol=0, atol=0)
