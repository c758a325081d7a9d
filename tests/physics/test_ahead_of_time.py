"""The reduced step built ahead of time (`physics.ahead_of_time`): values and gradients against
the eager step, both builds of its VJP, the disk cache, and the fallbacks."""

import dataclasses
import logging

import pytest
import torch

import physics
from physics import ahead_of_time
from physics.articulated import reduced_step
from tests.physics import models

# every test here builds (or loads, or fails to build) ahead-of-time compiled libraries
pytestmark = pytest.mark.compile


def _world(batch: int, dtype=torch.float32):
    """The reduced cart-pole with a welded tip and rail stops (the compiled-step tests' model)."""
    return models.cart_pole(theta0=0.7, batch_size=batch, dtype=dtype, coordinates="reduced",
                            tip_mass=0.05, limits=[-1e-3, 4e-4])  # fmt: skip


def _run(step, world, actions, steps: int):
    """``steps`` steps from the start with gradients to the actions and the start velocity:
    (final state, grad actions, grad start velocity)."""
    actions = actions.clone().requires_grad_(True)
    state = physics.initial_state(world)
    start_velocity = state.angular_velocity.clone().requires_grad_(True)
    state = state.replace(angular_velocity=start_velocity)
    for _ in range(steps):
        state = step(world, state, actions)
    loss = (state.position[..., 0].square().sum() + state.angular_velocity[..., 1].sum()
            + state.linear_velocity[..., 0].square().sum())  # fmt: skip
    return (state, *torch.autograd.grad(loss, (actions, start_velocity)))


def _aot(world, state, action):
    stepped = ahead_of_time.aot_reduced_step(world, state, action)
    assert stepped is not None, "the ahead-of-time step did not serve"
    return stepped


def _assert_matches_eager(batch: int, steps: int):
    world = _world(batch)
    actions = torch.linspace(-2.0, 1.0, batch)[:, None]
    (eager, *eager_grads), (built, *built_grads) = (
        _run(step, world, actions, steps) for step in (reduced_step, _aot)
    )
    _assert_same(built, built_grads, eager, eager_grads)


def _assert_same(built, built_grads, eager, eager_grads):
    """The built path's states and gradients are the eager step's (and no gradient is 0)."""
    for a, b in zip(built.tensors(), eager.tensors(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    for got, want in zip(built_grads, eager_grads, strict=True):
        assert want.abs().max() > 0
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-3)


def test_single_threaded_vjp_matches_eager_and_serves_every_small_batch():
    """B = 3, then 5, 8 and 1 (a single world, stepped as a pair): values and gradients as
    eager, and nothing built after B = 3."""
    _assert_matches_eager(3, steps=5)
    before = len(ahead_of_time.BUILT) + len(ahead_of_time.LOADED)
    for batch in (5, 8, 1):
        _assert_matches_eager(batch, steps=3)
    assert len(ahead_of_time.BUILT) + len(ahead_of_time.LOADED) == before


def test_threaded_vjp_matches_eager():
    """A batch of `THREADED_BATCH`: the VJP build whose loops are split between threads."""
    _assert_matches_eager(ahead_of_time.THREADED_BATCH, steps=2)


def _rollout_grads(world, actions, decay: float, compile: bool):
    """A 6-step rollout with a loss on every state: (trajectory, grad actions, grad start
    velocity)."""
    actions = actions.clone().requires_grad_(True)
    state = physics.initial_state(world)
    start_velocity = state.angular_velocity.clone().requires_grad_(True)
    state = state.replace(angular_velocity=start_velocity)
    trajectory = physics.rollout(world, state, actions.shape[0], actions=actions,
                                 gradient_decay=decay, compile=compile)  # fmt: skip
    weight = torch.arange(1.0, actions.shape[0] + 2).view(-1, 1, 1)
    loss = ((weight * trajectory.position[..., 0]).square().sum()
            + (weight * trajectory.angular_velocity[..., 1]).sum())  # fmt: skip
    return (trajectory, *torch.autograd.grad(loss, (actions, start_velocity)))


@pytest.mark.parametrize("decay", [1.0, 0.6])
@pytest.mark.parametrize("action_batch", [3, 1])
def test_a_rollout_is_one_node_with_the_eager_values_and_gradients(decay, action_batch, caplog):
    """`rollout(compile=True)` with an action sequence: one autograd node for the whole
    trajectory, stepped in joint coordinates (none of the rollout's libraries fell back);
    the values, and the gradients of a loss on every state (with and without gradient
    decay, per-image and shared actions), as the eager step's."""
    world = _world(3)
    actions = torch.linspace(-2.0, 1.0, 6 * action_batch).view(6, action_batch, 1)
    with caplog.at_level(logging.WARNING, logger="physics"):
        built, *built_grads = _rollout_grads(world, actions, decay, compile=True)
    assert physics.fallbacks() == [], caplog.text  # (a first build's notice may be there)
    assert type(built.position.grad_fn).__name__ == "_RolloutBackward"
    eager, *eager_grads = _rollout_grads(world, actions, decay, compile=False)
    _assert_same(built, built_grads, eager, eager_grads)


def test_shared_actions_take_the_per_world_program():
    """Actions shared by every world ((steps, 1, A), or (1, A) for a step) run the program
    of per-world actions: nothing more is built or loaded, and the values are the same."""
    world = _world(3)
    state = physics.initial_state(world)
    shared = torch.linspace(-1.0, 2.0, 6).view(6, 1, 1)
    with torch.no_grad():
        per_world = physics.rollout(world, state, 6, actions=shared.expand(6, 3, 1), compile=True)
        one = physics.compiled_step(world.dtype)(world, state, shared[0].expand(3, 1))
        before = (len(ahead_of_time.BUILT), len(ahead_of_time.LOADED))
        rolled = physics.rollout(world, state, 6, actions=shared, compile=True)
        stepped = physics.compiled_step(world.dtype)(world, state, shared[0])
    assert (len(ahead_of_time.BUILT), len(ahead_of_time.LOADED)) == before
    for a, b in [
        *zip(rolled.tensors(), per_world.tensors(), strict=True),
        *zip(stepped.tensors(), one.tensors(), strict=True),
    ]:
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_rollout_takes_the_first_steps_of_a_longer_action_sequence():
    world = _world(3)
    actions = torch.linspace(-1.0, 2.0, 15).view(5, 3, 1).requires_grad_(True)
    trajectory = physics.rollout(world, physics.initial_state(world), 3, actions=actions,
                                 compile=True)  # fmt: skip
    assert trajectory.position.shape[0] == 4
    (grad,) = torch.autograd.grad(trajectory.position.sum(), actions)
    assert grad[:2].abs().sum() > 0 and grad[3:].abs().sum() == 0
    with pytest.raises(ValueError, match="actions has 5 steps, fewer than steps=6"):
        physics.rollout(world, physics.initial_state(world), 6, actions=actions, compile=True)


def test_a_rollout_without_grad_matches_eager():
    world = _world(4)
    actions = torch.linspace(-1.0, 2.0, 20).view(5, 4, 1)
    with torch.no_grad():
        state = physics.initial_state(world)
        built = physics.rollout(world, state, 5, actions=actions, compile=True)
        eager = physics.rollout(world, state, 5, actions=actions)
    assert not any(t.requires_grad for t in built.tensors())
    for a, b in zip(built.tensors(), eager.tensors(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_a_policy_rollout_steps_node_by_node():
    """A policy sees each state, so its rollout is not one node (the per-step path)."""
    world = _world(3)
    gain = torch.tensor(0.5, requires_grad=True)
    trajectory = physics.rollout(world, physics.initial_state(world), 3, compile=True,
                                 policy=lambda state, t: gain * state.linear_velocity[:, 1, :1])  # fmt: skip
    assert type(trajectory.position.grad_fn).__name__ != "_RolloutBackward"
    (grad,) = torch.autograd.grad(trajectory.linear_velocity.sum(), gain)
    assert torch.isfinite(grad)


def test_no_grad_step_matches_eager():
    world = _world(4)
    action = torch.tensor([[1.0], [-2.0], [0.5], [0.0]])
    with torch.no_grad():
        state = physics.initial_state(world)
        built = _aot(world, state, action)
        assert not any(t.requires_grad for t in built.tensors())
        eager = reduced_step(world, state, action)
        for a, b in zip(built.tensors(), eager.tensors(), strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_a_new_process_loads_the_library_from_the_disk_cache(monkeypatch):
    """With the in-memory programs gone (a new process), the step loads what an earlier one
    built: building again would fail here."""
    _assert_matches_eager(3, steps=1)  # built (or loaded) once
    monkeypatch.setattr(ahead_of_time, "_PROGRAMS", {})

    def no_build(*args, **kwargs):
        raise AssertionError("built again instead of loading from the disk cache")

    monkeypatch.setattr(torch._inductor, "aoti_compile_and_package", no_build)
    loaded = len(ahead_of_time.LOADED)
    _assert_matches_eager(3, steps=1)
    assert len(ahead_of_time.LOADED) == loaded + 2  # the forward and the VJP


def test_on_disk_tells_whether_the_libraries_are_built(monkeypatch, tmp_path):
    """`on_disk`: True for the forward and VJP a grad step just used and for the libraries
    of a grad rollout, and for a single world (its pair's); False in an empty cache and for
    maximal coordinates."""
    _assert_matches_eager(3, steps=1)  # builds or loads the B < THREADED_BATCH pair
    world = _world(3)
    _rollout_grads(world, torch.zeros(4, 3, 1), 1.0, compile=True)
    state, action = physics.initial_state(world), torch.zeros(3, 1)
    assert ahead_of_time.on_disk(world, state, action, backward=True)
    assert ahead_of_time.on_disk(world, state, action, backward=True, rollout=True)
    assert ahead_of_time.on_disk(_world(7), physics.initial_state(_world(7)), torch.zeros(7, 1),
                                 backward=False)  # fmt: skip
    one = _world(1)
    assert ahead_of_time.on_disk(one, physics.initial_state(one), torch.zeros(1, 1), True)
    maximal = models.cart_pole(batch_size=3, coordinates="maximal")
    assert not ahead_of_time.on_disk(maximal, physics.initial_state(maximal), action, False)
    monkeypatch.setenv("DIFFCAM_CACHE_DIR", str(tmp_path))
    assert not ahead_of_time.on_disk(world, state, action, backward=False)
    assert not ahead_of_time.on_disk(world, state, action, backward=False, rollout=True)


def test_a_failed_export_falls_back_with_a_warning(monkeypatch, caplog, tmp_path):
    """`compiled_step` then takes torch.compile; here the ahead-of-time step answers None."""

    def broken(*args, **kwargs):
        raise RuntimeError("cannot export")

    monkeypatch.setenv("DIFFCAM_CACHE_DIR", str(tmp_path))  # nothing built there
    monkeypatch.setattr(ahead_of_time, "_PROGRAMS", {})
    monkeypatch.setattr(ahead_of_time, "_export", broken)
    world = _world(2, dtype=torch.float64)
    with caplog.at_level(logging.WARNING, logger="physics"):
        stepped = ahead_of_time.aot_reduced_step(
            world, physics.initial_state(world), torch.zeros(2, 1, dtype=torch.float64)
        )
    assert stepped is None
    assert "RuntimeError: cannot export" in caplog.text
    assert "torch.compile instead" in caplog.text


@pytest.mark.parametrize("failing", ["block", "vjp"])
def test_a_failed_rollout_build_falls_back_with_a_warning(failing, monkeypatch, caplog, tmp_path):
    """A rollout library that cannot be built: the block's makes the rollout take single steps;
    the VJP's runs its trace eagerly. Either way the values and gradients are eager's."""
    build = ahead_of_time._build

    def fails(key, export):
        if f"-rollout-{failing}-" in key:
            raise RuntimeError("no compiler here")
        return build(key, export)

    monkeypatch.setattr(ahead_of_time, "_PROGRAMS", {})
    monkeypatch.setattr(ahead_of_time, "_build", fails)
    world = _world(3)
    actions = torch.linspace(-2.0, 1.0, 18).view(6, 3, 1)
    with caplog.at_level(logging.WARNING, logger="physics"):
        built, *built_grads = _rollout_grads(world, actions, 1.0, compile=True)
    assert f"rollout's {failing!r} could not be built" in caplog.text
    one_node = type(built.position.grad_fn).__name__ == "_RolloutBackward"
    assert one_node == (failing == "vjp")
    eager, *eager_grads = _rollout_grads(world, actions, 1.0, compile=False)
    _assert_same(built, built_grads, eager, eager_grads)


def test_a_failed_threaded_build_falls_back_for_large_batches_only(monkeypatch, caplog):
    """The forward build for batches of `THREADED_BATCH` and more fails: those batches get
    None (torch.compile then), with a warning; smaller ones are still served."""
    build = ahead_of_time._build

    def threaded_fails(key, export):
        if "-threaded-" in key:
            raise RuntimeError("cannot build")
        return build(key, export)

    monkeypatch.setattr(ahead_of_time, "_PROGRAMS", {})
    monkeypatch.setattr(ahead_of_time, "_build", threaded_fails)
    small, large = ahead_of_time.THREADED_BATCH - 1, ahead_of_time.THREADED_BATCH
    with caplog.at_level(logging.WARNING, logger="physics"):
        for batch, served in ((small, True), (large, False), (small, True)):
            world = _world(batch)
            stepped = ahead_of_time.aot_reduced_step(
                world, physics.initial_state(world), torch.zeros(batch, 1)
            )
            assert (stepped is not None) == served
    assert sum("cannot build" in r.getMessage() for r in caplog.records) == 1


def test_an_empty_batch_is_not_served():
    world = _world(1)
    state = physics.initial_state(world)
    state = physics.State(*(t[:0] for t in state.tensors()))
    assert ahead_of_time.aot_reduced_step(world, state, torch.zeros(0, 1)) is None


@pytest.mark.parametrize("decay", [1.0, 0.6])
def test_a_single_world_rolls_out_as_a_pair(decay):
    """B = 1 (the libraries' batch axis starts at 2): the rollout runs as two identical worlds
    through the same libraries as B = 3, one node, with the eager values and gradients."""
    _rollout_grads(_world(3), torch.zeros(6, 3, 1), decay, compile=True)  # built or loaded
    before = len(ahead_of_time.BUILT) + len(ahead_of_time.LOADED)
    world = _world(1)
    actions = torch.linspace(-2.0, 1.0, 6).view(6, 1, 1)
    built, *built_grads = _rollout_grads(world, actions, decay, compile=True)
    assert physics.last_route().path == "ahead_of_time" and "B=1" in physics.last_route().reason
    node = built.position.grad_fn.next_functions[0][0]  # the pair's first world, sliced out
    assert type(node).__name__ == "_RolloutBackward"
    assert built.position.shape[1] == 1
    assert len(ahead_of_time.BUILT) + len(ahead_of_time.LOADED) == before
    eager, *eager_grads = _rollout_grads(world, actions, decay, compile=False)
    _assert_same(built, built_grads, eager, eager_grads)


def test_a_failed_vjp_build_falls_back_to_eager_gradients(monkeypatch, caplog):
    """The VJP is built in the backward: if that fails, the backward runs eagerly, with the
    same gradients and a warning. (Only the VJP's build fails: the forward library is loaded
    or built as usual.)"""
    build = ahead_of_time._build

    def vjp_broken(key, export):
        if "-vjp-" in key:
            raise RuntimeError("cannot trace the VJP")
        return build(key, export)

    monkeypatch.setattr(ahead_of_time, "_PROGRAMS", {})
    monkeypatch.setattr(ahead_of_time, "_build", vjp_broken)
    with caplog.at_level(logging.WARNING, logger="physics"):
        _assert_matches_eager(3, steps=2)
    assert "RuntimeError: cannot trace the VJP" in caplog.text


def test_forward_mode_ad_is_not_served():
    """The libraries run on plain tensors: under forward-mode AD the step answers None (the
    caller steps eagerly or through torch.compile), and so inside a functorch transform."""
    from torch.autograd import forward_ad

    world = _world(2)
    state = physics.initial_state(world)
    action = torch.zeros(2, 1)
    with forward_ad.dual_level():
        dual = forward_ad.make_dual(action, torch.ones_like(action))
        assert ahead_of_time.aot_reduced_step(world, state, dual) is None
    seen = []
    torch.func.vmap(lambda a: seen.append(ahead_of_time.plain_reverse_mode()) or a)(action)
    assert seen == [False]


def test_gradients_to_the_world_take_the_vjp_to_the_world():
    """A fit's case: the world's own tensors (masses, sizes, hinge damping, gravity) require
    grad. A rollout then steps one at a time through the ahead-of-time step, whose backward is
    the VJP to the world's tensors too: the eager gradients, for a single world (a pair) as
    for three, and after an optimizer's in-place update of those tensors (no stale copy of
    them is kept). Under Inductor through torch.compile (torch 2.13) the reduced step's mass
    gradient was wrong while the state's were right (docs/decisions/
    eager-parameter-gradients.md)."""
    for batch in (3, 1):
        world = models.cart_pole(theta0=0.7, batch_size=batch, dtype=torch.float32,
                                 coordinates="reduced", hinge_damping=0.05, tip_mass=0.05,
                                 limits=[-1e-3, 4e-4])  # `_world`'s structure  # fmt: skip
        leaves = {f: getattr(world, f).detach().clone().requires_grad_(True)
                  for f in ("mass", "size", "joint_damping", "gravity")}  # fmt: skip
        world = dataclasses.replace(world, **leaves)
        actions = torch.linspace(-2.0, 1.0, 4 * batch).view(4, batch, 1)
        for _update in range(2):
            runs = []
            for compile in (True, False):
                trajectory = physics.rollout(world, physics.initial_state(world), 4,
                                             actions=actions, compile=compile)  # fmt: skip
                if compile:
                    route = physics.last_route()
                    assert (route.path, route.chained) == ("ahead_of_time", False), route
                    assert "through the VJP to the world" in route.reason
                loss = (trajectory.position[..., 0].square().sum()
                        + trajectory.angular_velocity[..., 1].sum())  # fmt: skip
                runs.append((trajectory, torch.autograd.grad(loss, list(leaves.values()))))
            (built, built_grads), (eager, eager_grads) = runs
            _assert_same(built, built_grads, eager, eager_grads)
            with torch.no_grad():  # as an optimizer steps
                leaves["mass"].mul_(1.5)
                leaves["joint_damping"].add_(0.1)
                leaves["gravity"].mul_(0.9)
