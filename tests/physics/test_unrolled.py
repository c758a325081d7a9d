"""The reduced step's two forms, from one source (`physics.articulated.step`): on per-world
scalars (`unrolled_step`, the form built ahead of time) and on whole (B, 3) and (B, 3, 3)
tensors (`reduced_step`, the eager form): the same states and gradients to round-off on models
that use every part of the step (the two algebras, `lanes` and `packed`, agree)."""

import math

import pytest
import torch

import diffcam
import physics
from physics import ahead_of_time
from physics.articulated import reduced_step
from physics.articulated.step import WORLD_FIELDS, unrolled_step
from physics.world import TENSOR_FIELDS
from tests.physics import models

F64 = torch.float64


def branched_arm(batch_size=3, dtype=F64, masses=None):
    """Two trees and a static post: a cart on a limited, motored rail carrying an arm whose
    shoulder is a position servo, whose forearm slides along the turning arm (a slider on a
    moving parent) and carries a welded ball; beside it a pendulum whose hinge has limits and
    a velocity servo. Coordinates of different trees do not couple (exact zeros in M)."""
    bodies = [
        physics.Body("post", "box", [0.1, 0.1, 1.0], static=True, collide=False,
                     position=[3.0, 0.0, 0.5]),
        physics.Body("cart", "box", [0.3, 0.2, 0.1], mass=1.0, position=[0.0, 0.0, 1.0]),
        physics.Body("arm", "capsule", [0.03, 0.6], mass=0.4, position=[0.0, 0.0, 1.3],
                     collide=False),
        physics.Body("forearm", "cylinder", [0.02, 0.3], mass=0.2,
                     position=[0.0, 0.0, 1.75], collide=False),
        physics.Body("ball", "sphere", 0.05, mass=0.1, position=[0.0, 0.0, 1.9], collide=False),
        physics.Body("rod", "box", [0.02, 0.02, 1.0], mass=1.0, position=[1.5, 0.0, 1.5],
                     quat=[math.cos(0.4), 0.0, math.sin(0.4), 0.0], collide=False),
    ]  # fmt: skip
    servo = physics.Motor("servo", gain=8.0, max_torque=6.0, max_velocity=2.0)
    spin = physics.Motor("servo", gain=1.0, max_torque=3.0, max_velocity=1.5, target="velocity")
    joints = [
        physics.Joint("weld", "fixed", "forearm", "ball", anchor=[0.0, 0.0, 1.9]),
        physics.Joint("rail", "slider", "world", "cart", anchor=[0.0, 0.0, 1.0], axis=[1, 0, 0],
                      limits=[-0.4, 0.3], damping=0.1, motor=physics.Motor("force", max=8.0)),
        physics.Joint("shoulder", "hinge", "cart", "arm", anchor=[0.0, 0.0, 1.05],
                      axis=[0, 1, 0], motor=servo, damping=0.02),
        physics.Joint("extend", "slider", "arm", "forearm", anchor=[0.0, 0.0, 1.6],
                      axis=[0, 0, 1], limits=[-0.1, 0.1]),
        physics.Joint("swing", "hinge", "world", "rod", anchor=[1.5, 0.0, 2.0],
                      axis=[0.3, 1.0, 0.1], limits=[-0.15, 0.12], motor=spin),
    ]  # fmt: skip
    spec = physics.WorldSpec(bodies, joints, coordinates="reduced", solver_iterations=6)
    world = physics.build_world(spec, batch_size=batch_size, dtype=dtype)
    if masses is not None:
        world.mass = masses
    return world


def _actions(world, steps: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    batch = world.initial_position.shape[0]
    return 4.0 * torch.randn(steps, batch, world.n_actuators, generator=g, dtype=world.dtype)


def _scene_world(name: str, batch: int, dtype):
    return diffcam.load_scene(name, batch_size=batch, dtype=dtype).world


WORLDS = {
    "branched_arm": lambda dtype: branched_arm(dtype=dtype),
    "per_world_masses": lambda dtype: branched_arm(
        dtype=dtype, masses=torch.linspace(0.5, 2.0, 18, dtype=dtype).view(3, 6)
    ),
    "cart_pole_with_stops": lambda dtype: models.cart_pole(
        theta0=0.7,
        batch_size=3,
        dtype=dtype,
        coordinates="reduced",
        tip_mass=0.05,
        limits=[-1e-3, 4e-4],
        hinge_damping=0.05,
    ),  # fmt: skip
    "double_pendulum": lambda dtype: models.double_pendulum(dtype=dtype, coordinates="reduced"),
    "pendulum_cart_scene": lambda dtype: _scene_world("pendulum_cart", 2, dtype),
    "bob_pendulum_scene": lambda dtype: _scene_world("bob_pendulum", 2, dtype),
}


def _run(step, world, actions, state=None):
    state = physics.initial_state(world) if state is None else state
    states = []
    for action in actions if world.n_actuators else [None] * actions.shape[0]:
        state = step(world, state, action)
        states.append(state)
    return physics.State.stack(states)


@pytest.mark.parametrize("name", list(WORLDS))
@pytest.mark.slow
def test_unrolled_step_is_the_reduced_step(name, dtype):
    """60 steps under random pushes (limits and servos active): the same trajectory."""
    world = WORLDS[name](dtype)
    actions = _actions(world, 60)
    unrolled, reference = _run(unrolled_step, world, actions), _run(reduced_step, world, actions)
    tolerance = 1e-11 if dtype == F64 else 2e-4
    for got, want in zip(unrolled.tensors(), reference.tensors(), strict=True):
        assert got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got, want, atol=tolerance, rtol=tolerance)


@pytest.mark.slow
def test_the_branched_arm_uses_its_limits_and_slider():
    """The model the tests rely on does use what it is meant to: the rail, the slider on the
    turning arm and the swing's hinge each reach a limit."""
    world = branched_arm()
    trajectory = _run(unrolled_step, world, _actions(world, 150))
    q = torch.stack([physics.joint_positions(world, trajectory[t])[0] for t in range(150)])
    rail, extend, swing = q[..., 1], q[..., 3], q[..., 4]  # (time, world), by joint index
    at = lambda x, bound: (x - bound).abs().min().item() < 1e-7  # noqa: E731
    assert at(rail, 0.3) or at(rail, -0.4)
    assert at(extend, 0.1) or at(extend, -0.1)
    assert at(swing, 0.12) or at(swing, -0.15)


@pytest.mark.parametrize("name", ["branched_arm", "cart_pole_with_stops", "pendulum_cart_scene"])
@pytest.mark.slow
def test_unrolled_gradients_are_the_reduced_steps(name):
    """float64 gradients of a loss on 12 steps to the actions, the start state and the
    world's masses, damping and gravity: those of the batched reduced step."""
    grads = []
    for step in (unrolled_step, reduced_step):
        world = WORLDS[name](F64)
        leaves = {k: getattr(world, k).clone().requires_grad_() for k in ("mass", "gravity")}
        leaves["joint_damping"] = (world.joint_damping + 0.01).requires_grad_()
        for key, leaf in leaves.items():
            setattr(world, key, leaf)
        actions = _actions(world, 12).requires_grad_()
        state = physics.initial_state(world)
        start = state.linear_velocity.clone().requires_grad_()
        state = state.replace(linear_velocity=start)
        for t in range(12):
            state = step(world, state, actions[t] if world.n_actuators else None)
        loss = state.position.square().sum() + state.angular_velocity.sin().sum()
        wrt = [start, *leaves.values()] + ([actions] if world.n_actuators else [])
        grads.append(torch.autograd.grad(loss, wrt))
    for got, want in zip(*grads, strict=True):
        assert want.abs().max() > 0
        torch.testing.assert_close(got, want, atol=1e-9, rtol=1e-9)


def _chain_grads(world, steps: int, decay: float, compile: bool):
    """A rollout with a loss on every state: (trajectory, gradients of the start state's 4
    tensors and of the actions, if any)."""
    state = physics.initial_state(world)
    g = torch.Generator().manual_seed(1)
    start = [(t + 0.01 * torch.randn(t.shape, generator=g, dtype=t.dtype)).requires_grad_()
             for t in state.tensors()]  # fmt: skip
    actions = _actions(world, steps).requires_grad_() if world.n_actuators else None
    trajectory = physics.rollout(world, physics.State(*start), steps, actions=actions,
                                 gradient_decay=decay, compile=compile)  # fmt: skip
    weights = [torch.randn(t.shape, generator=g, dtype=t.dtype) for t in trajectory.tensors()]
    loss = sum((w * t.sin()).sum() for w, t in zip(weights, trajectory.tensors(), strict=True))
    wrt = start + ([actions] if world.n_actuators else [])
    return trajectory, torch.autograd.grad(loss, wrt)


@pytest.mark.parametrize(
    ("name", "steps", "decay"),
    [(n, 9, d) for n in WORLDS if n != "double_pendulum" for d in (1.0, 0.7)]  # B = 1: eager
    + [("branched_arm", steps, 0.7) for steps in (1, 2, 5)],  # a first step only; padded blocks
)
@pytest.mark.slow
def test_the_rollout_chain_is_the_reduced_steps(name, steps, decay, monkeypatch):
    """The compiled rollout's chain in joint coordinates (`physics.aot_rollout`), its traces
    run eagerly in float64, from a start state off its joints' manifold: the trajectory of
    steps one by one (`reduced_step`), and the gradients of a loss on every state to the start
    state's 4 tensors (static bodies' too) and to the actions, with and without decay."""
    monkeypatch.setattr(ahead_of_time.Program, "library",
                        lambda self, name, trace, *args, **kwargs: lambda x: list(trace(*x)))  # fmt: skip
    world = WORLDS[name](F64)
    (chained, chained_grads), (stepped, stepped_grads) = (
        _chain_grads(world, steps, decay, compile) for compile in (True, False)
    )
    assert type(chained.position.grad_fn).__name__ == "_RolloutBackward"
    for got, want in zip(chained.tensors(), stepped.tensors(), strict=True):
        torch.testing.assert_close(got, want, atol=1e-10, rtol=1e-10)
    for got, want in zip(chained_grads, stepped_grads, strict=True):
        assert want.abs().max() > 0
        torch.testing.assert_close(got, want, atol=1e-9, rtol=1e-9)


def test_the_step_reads_only_its_world_fields():
    """`WORLD_FIELDS` lists every world tensor the step reads (the built step takes only
    those as inputs: another would be baked into the library as a constant)."""
    world = branched_arm()
    actions, start = _actions(world, 3), physics.initial_state(world)
    reference = _run(unrolled_step, world, actions, start)
    for name in set(TENSOR_FIELDS) - set(WORLD_FIELDS):
        setattr(world, name, None)
    for got, want in zip(_run(unrolled_step, world, actions, start).tensors(),
                         reference.tensors(), strict=True):  # fmt: skip
        assert torch.equal(got, want)
