"""`physics.dispatch`: which path a step or a rollout runs (eager, torch.compile, ahead of
time), `physics.explain`, `physics.last_route`, the first-build notice and the fallbacks
(`physics.notices`). Nothing here compiles but the one test marked slow and compile: the
decision is tested on facts, and the compiled paths with torch.compile replaced by the eager
function and the ahead-of-time build made to fail."""

from __future__ import annotations

import dataclasses
import logging

import pytest
import torch

import diffcam
import physics
from diffcam.fit import model as fit_model
from diffcam.fit.model import PhysicsTier, VideoModel
from physics import ahead_of_time, dispatch, notices, rollouts
from physics.dispatch import Facts, Tier, decide
from tests.physics import models

SCENE_TIER = Tier("Scene.compile_after", 0, 500_000, "state-steps", shortcut=", or past 50,000")
FIT_TIER = Tier("the fit's PhysicsTier", 0.0, 40.0, "s", reduced_only=True)


def facts(**changes) -> Facts:
    """A reduced step at B = 8 with compile=True, nothing requiring grad, as changed."""
    return dataclasses.replace(Facts("step", "reduced", 8, True, step_build="untried"), **changes)


@pytest.fixture(autouse=True)
def fresh_records(monkeypatch, tmp_path):
    """Each test its own last route, compiled steps and programs, and an empty library
    cache (its own notices and fallbacks: tests/conftest.py)."""
    monkeypatch.setattr(dispatch, "_LAST", [])
    monkeypatch.setattr(rollouts, "_COMPILED", {})
    monkeypatch.setattr(ahead_of_time, "_PROGRAMS", {})
    monkeypatch.setenv("DIFFCAM_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def eager_compile(monkeypatch):
    """torch.compile replaced by the function itself (``calls`` counts its calls): the
    compiled paths run eagerly, and nothing is compiled."""
    calls = []

    def fake_compile(fn, **kwargs):
        def run(*args):
            calls.append(fn.__name__)
            return fn(*args)

        return run

    monkeypatch.setattr(torch, "compile", fake_compile)
    return calls


def _no_build(monkeypatch):
    """Every ahead-of-time build fails (as if there were no compiler)."""

    def fails(key, export):
        raise RuntimeError("no compiler here")

    monkeypatch.setattr(ahead_of_time, "_build", fails)


def _reduced(batch: int = 2, **kwargs):
    return models.cart_pole(theta0=0.7, batch_size=batch, dtype=torch.float64,
                            coordinates="reduced", **kwargs)  # fmt: skip


# --------------------------------------------------------------------------- the rules
def test_a_step_with_compile_true():
    assert decide(facts()).path == "ahead_of_time" and decide(facts()).cause == "aot"
    assert decide(facts(formulation="maximal")).path == "compiled"
    one = decide(facts(batch=1))  # a single world steps as a pair of identical worlds
    assert (one.path, one.cause) == ("ahead_of_time", "aot") and "B=1 stepped as two" in one.reason
    empty = decide(facts(batch=0))
    assert (empty.path, empty.cause) == ("compiled", "batch")
    assert decide(facts(plain_reverse_mode=False)).cause == "not_plain"
    assert decide(facts(action_missing=True)).path == "compiled"
    assert decide(facts(ahead_of_time=False)).cause == "aot_off"
    failed = decide(facts(step_build="failed"))
    assert (failed.path, failed.cause) == ("compiled", "build_failed")
    refused = decide(facts(formulation="maximal", dynamo_refused=True))
    assert (refused.path, refused.cause, refused.compile) == ("eager", "recompile_limit", True)


def test_gradients_to_the_world_take_its_vjp_library_or_step_eagerly():
    mass = decide(facts(world_grad=("mass",)))
    assert (mass.path, mass.cause, mass.compile) == ("ahead_of_time", "aot", True)
    assert "mass through the VJP to the world" in mass.reason
    assert decide(facts(batch=1, world_grad=("mass",))).path == "ahead_of_time"
    # a field the reduced step does not read takes the plain libraries
    friction = decide(facts(world_grad=("friction",)))
    assert friction.path == "ahead_of_time" and "VJP to the world" not in friction.reason
    # where the libraries do not serve, eager rather than torch.compile's reduced step
    failed = decide(facts(world_grad=("mass",), step_build="failed"))
    assert (failed.path, failed.cause) == ("eager", "world_grad")
    # without grad nothing is differentiated (the facts then list no field)
    assert decide(facts(grad_enabled=False)).path == "ahead_of_time"
    assert decide(facts(formulation="maximal", world_grad=("mass",))).path == "compiled"


def test_a_rollout_with_compile_true():
    base = facts(kind="rollout", steps=10, rollout_build="untried")
    chained = decide(base)
    assert (chained.path, chained.chained, chained.kind) == ("ahead_of_time", True, "rollout")
    policy = decide(dataclasses.replace(base, policy=True, rollout_build=None))
    assert (policy.path, policy.chained, policy.cause) == ("ahead_of_time", False, "aot")
    assert "a policy" in policy.reason
    failed = decide(dataclasses.replace(base, rollout_build="failed"))
    assert (failed.path, failed.chained) == ("ahead_of_time", False)
    assert "failed to build" in failed.reason
    assert decide(dataclasses.replace(base, steps=0)).chained is False
    maximal = decide(dataclasses.replace(base, formulation="maximal"))
    assert (maximal.path, maximal.chained) == ("compiled", False)
    grads = decide(dataclasses.replace(base, world_grad=("mass",)))
    assert (grads.path, grads.chained, grads.cause) == ("ahead_of_time", False, "aot")
    assert "the chained rollout's libraries give them none: one step at a time" in grads.reason


def test_compile_false_and_the_automatic_choice():
    assert decide(facts(requested=False)).cause == "asked"
    with pytest.raises(ValueError, match="Tier"):
        decide(facts(requested=None))
    warming = decide(facts(requested=None, tier=SCENE_TIER))
    assert (warming.path, warming.compile, warming.cause) == ("eager", False, "warming_up")
    assert "0 of 500,000 state-steps" in warming.reason
    assert warming.once_compiled().path == "ahead_of_time"
    for tier in (dataclasses.replace(SCENE_TIER, spent=500_000),
                 dataclasses.replace(SCENE_TIER, ready=True)):  # fmt: skip
        route = decide(facts(requested=None, tier=tier))
        assert (route.path, route.compile) == ("ahead_of_time", True)
        assert "compiled: Scene.compile_after" in route.reason
    never = decide(facts(requested=None, tier=dataclasses.replace(SCENE_TIER, price=float("inf"))))
    assert never.cause == "warming_up" and "never" in never.reason
    under_ad = decide(facts(requested=None, tier=SCENE_TIER, plain_reverse_mode=False))
    assert (under_ad.path, under_ad.cause) == ("eager", "not_plain")


def test_the_fit_tier():
    ready = dataclasses.replace(FIT_TIER, ready=True)
    assert decide(facts(requested=None, tier=ready)).compile
    grads = decide(facts(requested=None, tier=ready, world_grad=("mass",)))
    assert grads.path == "ahead_of_time" and "mass" in grads.reason
    assert decide(facts(requested=None, tier=ready, state_grad=True)).compile
    maximal = decide(facts(requested=None, tier=ready, formulation="maximal"))
    assert (maximal.path, maximal.cause) == ("eager", "maximal")
    assert decide(facts(requested=None, tier=FIT_TIER)).cause == "warming_up"
    paid = dataclasses.replace(FIT_TIER, spent=41.0)
    assert decide(facts(requested=None, tier=paid, kind="rollout", steps=5)).chained


def test_decide_is_pure():
    assert decide(facts()) == decide(facts())
    assert decide(facts()) != decide(facts(batch=1))


# --------------------------------------------------------------------------- the facts
def test_facts_of_real_calls():
    world = _reduced(4)
    state = physics.initial_state(world)
    action = torch.zeros(4, 1, dtype=torch.float64)
    step = dispatch.step_facts(world, state, action)
    assert (step.formulation, step.batch, step.world_grad, step.step_build) == (
        "reduced", 4, (), "untried")  # fmt: skip
    assert dispatch.step_facts(world, state, None).action_missing
    heavy = dataclasses.replace(world, mass=world.mass.clone().requires_grad_())
    assert dispatch.step_facts(heavy, state, action).world_grad == ("mass",)
    with torch.no_grad():
        assert dispatch.step_facts(heavy, state, action).world_grad == ()
    actions = torch.zeros(6, 4, 1, dtype=torch.float64)
    rollout = dispatch.rollout_facts(world, state, 6, actions=actions)
    assert (rollout.kind, rollout.steps, rollout.rollout_build) == ("rollout", 6, "untried")
    assert dispatch.rollout_facts(world, state, 6, policy=lambda s, t: action).policy
    # an eager warm-up looks nothing up
    warming = dispatch.step_facts(world, state, action, requested=None, tier=SCENE_TIER)
    assert warming.step_build is None
    maximal = models.cart_pole(batch_size=4, dtype=torch.float64)
    assert dispatch.step_facts(maximal, physics.initial_state(maximal), action).step_build is None


def test_explain_looks_on_disk(monkeypatch):
    world = _reduced(4)
    state = physics.initial_state(world)
    action = torch.zeros(4, 1, dtype=torch.float64)
    route = physics.explain(world, state, action, compile=True)
    assert route.path == "ahead_of_time" and route.built is False
    assert route.cache_dir == str(ahead_of_time.cache_dir())
    assert "to be built first" in str(route) and "1–3 minutes" in str(route)
    monkeypatch.setattr(ahead_of_time, "on_disk", lambda *args, **kwargs: True)
    route = physics.explain(world, state, action, compile=True)
    assert route.built is True and "on disk in" in str(route)
    assert physics.explain(world, state, action).path == "eager"  # physics.step's default
    with pytest.raises(ValueError):
        physics.explain(world, state, action, steps=3)


# --------------------------------------------------------------------------- the three calls
def test_explain_a_scene_step_loop():
    """(a) `scene.step` in a loop on the bundled pendulum-cart: eager while the default path
    warms up, then the step's library built ahead of time."""
    scene = diffcam.load_scene("pendulum_cart", batch_size=8)
    action = torch.zeros(8, 1)
    route = scene.explain("step", action=action)
    assert (route.kind, route.path, route.cause) == ("step", "eager", "warming_up")
    text = str(route)
    assert "Scene.compile_after: 0 of 500,000 state-steps" in text
    assert "Once compiled: ahead-of-time library (reduced coordinates, B=8, " in text
    state = scene.initial_state()
    for _ in range(3):
        state = scene.step(state, action)
    taken = physics.last_route()
    assert (taken.path, taken.cause) == ("eager", "warming_up") and "24 of 500,000" in str(
        scene.explain("step", action=action)
    )
    scene.compile_after = 0
    compiled = scene.explain("step", action=action)
    assert (compiled.path, compiled.compile, compiled.built) == ("ahead_of_time", True, False)
    assert scene.explain("step", action=action, compile=False).cause == "asked"


def test_explain_a_scene_rollout_under_actions():
    """(b) `scene.rollout(steps, actions=...)`: eager while warming up, then the rollout's own
    libraries as one autograd node."""
    scene = diffcam.load_scene("pendulum_cart", batch_size=8)
    actions = torch.zeros(20, 8, 1)
    route = scene.explain("rollout", actions=actions)
    assert (route.kind, route.path, route.cause) == ("rollout", "eager", "warming_up")
    later = route.once_compiled()
    assert (later.path, later.chained) == ("ahead_of_time", True)
    assert "the whole rollout as one autograd node" in str(route)
    forced = scene.explain("rollout", actions=actions, compile=True)
    assert forced.chained and forced.compile and "a fixed action sequence" in forced.reason
    scene.rollout(20, actions=actions)
    taken = physics.last_route()
    assert (taken.kind, taken.path, taken.cause) == ("rollout", "eager", "warming_up")
    policy = scene.explain("rollout", steps=20, policy=lambda state, t: actions[0], compile=True)
    assert (policy.path, policy.chained) == ("ahead_of_time", False)


def test_explain_a_fit_with_a_gradient_to_a_mass(monkeypatch):
    """(c) a fit's rollout with a gradient to the pole's mass (a world tensor that requires
    grad): eager while the tier warms up (its price a build of the backward's libraries too),
    then the ahead-of-time step with its VJP to the world, one step at a time."""
    tier = PhysicsTier()
    monkeypatch.setattr(fit_model, "PHYSICS_TIER", tier)
    monkeypatch.setattr(ahead_of_time, "on_disk", lambda *args, **kwargs: False)
    scene = diffcam.load_scene("pendulum_cart")
    times = torch.arange(4, dtype=torch.float32) * 0.02
    model = VideoModel(scene, times, torch.zeros(7, 1), None)
    mass = torch.tensor(1.0, requires_grad=True)
    route = model.explain({"bodies.pole.mass": mass})
    assert (route.kind, route.path, route.cause, route.compile) == (
        "rollout", "eager", "warming_up", False)  # fmt: skip
    assert f"of {tier.gradient_build_seconds:.0f} s stepped eagerly" in route.reason
    built = model.build({"bodies.pole.mass": mass})
    assert physics.last_route() == route
    built.trajectory.position.sum().backward()
    assert mass.grad is not None
    tier.eager_seconds = tier.gradient_build_seconds + 1
    paid = model.explain({"bodies.pole.mass": mass})
    assert (paid.path, paid.chained, paid.compile) == ("ahead_of_time", False, True)
    assert "mass through the VJP to the world" in paid.reason
    with torch.no_grad():  # no gradient: the price of the forward's libraries
        assert model.explain({"bodies.pole.mass": mass}).compile
        tier.eager_seconds = tier.build_seconds - 1
        assert model.explain({"bodies.pole.mass": mass}).cause == "warming_up"


def test_the_fit_tier_switches_as_before(monkeypatch, caplog):
    """`PhysicsTier.compiles`: eager in maximal coordinates, compiled where the libraries are
    on disk or once eager rollouts cost a build (said once)."""
    world = _reduced(2)
    state = physics.initial_state(world)
    actions = torch.zeros(5, 2, 1, dtype=torch.float64)
    tier = PhysicsTier()
    maximal = models.cart_pole(batch_size=2, dtype=torch.float64)
    with torch.no_grad():
        assert not tier.compiles(maximal, physics.initial_state(maximal), actions)
        assert not tier.compiles(world, state, actions)
        tier.eager_seconds = tier.build_seconds + 1
        with caplog.at_level(logging.WARNING):
            assert tier.compiles(world, state, actions) and tier.compiles(world, state, actions)
        assert caplog.text.count("from now on they step compiled") == 1
        monkeypatch.setattr(ahead_of_time, "on_disk", lambda *args, **kwargs: True)
        assert PhysicsTier().compiles(world, state, actions)


# --------------------------------------------------------------------------- records
def test_fallbacks_are_warned_once_and_recorded(eager_compile, monkeypatch, caplog):
    """A failed ahead-of-time build: torch.compile instead, warned and recorded once; gradients
    to the world's tensors: eager, warned and recorded once."""
    _no_build(monkeypatch)
    world = _reduced(2)
    action = torch.zeros(2, 1, dtype=torch.float64)
    compiled = physics.compiled_step(torch.float64)
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            compiled(world, physics.initial_state(world), action)
    taken = physics.last_route()
    assert (taken.path, taken.cause) == ("compiled", "build_failed")
    assert caplog.text.count("could not be built ahead of time") == 1
    (failed,) = physics.fallbacks()
    assert (failed.reason, failed.from_path, failed.to_path) == (
        "aot_build:single", "ahead-of-time step", "torch.compile")  # fmt: skip
    assert "no compiler here" in failed.detail and "cart" in failed.structure
    assert physics.explain(world, physics.initial_state(world), action, compile=True).cause == (
        "build_failed"
    )
    assert eager_compile == ["reduced_step"] * 3
    heavy = dataclasses.replace(world, mass=world.mass.clone().requires_grad_())
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        for _ in range(2):
            compiled(heavy, physics.initial_state(heavy), action)
    assert caplog.text.count("compiled_step steps it eagerly") == 1
    assert [f.reason for f in physics.fallbacks()] == ["aot_build:single", "world_grad"]
    assert physics.last_route().cause == "world_grad" and len(eager_compile) == 3


def test_a_rollout_whose_libraries_fail_takes_single_steps(eager_compile, monkeypatch):
    _no_build(monkeypatch)
    world = _reduced(2)
    actions = torch.zeros(4, 2, 1, dtype=torch.float64)
    trajectory = physics.rollout(world, physics.initial_state(world), 4, actions=actions,
                                 compile=True)  # fmt: skip
    taken = physics.last_route()
    assert (taken.kind, taken.path, taken.chained) == ("rollout", "compiled", False)
    eager = physics.rollout(world, physics.initial_state(world), 4, actions=actions)
    torch.testing.assert_close(trajectory.position, eager.position)
    assert [f.reason for f in physics.fallbacks()] == ["rollout_library:first:single",
                                                       "aot_build:single"]  # fmt: skip


def test_dynamo_refusing_is_recorded_once(monkeypatch, caplog):
    """Past Dynamo's recompile limit torch.compile runs the step eagerly: seen in its log,
    warned once per structure and grad mode, recorded, and the route taken says so."""

    def refusing_compile(fn, **kwargs):
        def run(*args):
            logging.getLogger(rollouts.DYNAMO_LOGGER).warning(
                "torch._dynamo hit config.%s (%s)", "recompile_limit", 8
            )
            return fn(*args)

        return run

    monkeypatch.setattr(torch, "compile", refusing_compile)
    world = models.cart_pole(batch_size=2, dtype=torch.float64)
    action = torch.zeros(2, 1, dtype=torch.float64)
    compiled = physics.compiled_step(torch.float64)
    with torch.no_grad(), caplog.at_level(logging.WARNING, logger="physics"):
        for _ in range(2):
            compiled(world, physics.initial_state(world), action)
        assert physics.explain(world, physics.initial_state(world), action,
                               compile=True).cause == "recompile_limit"  # fmt: skip
    taken = physics.last_route()
    assert (taken.path, taken.cause) == ("eager", "recompile_limit")
    assert [f.reason for f in physics.fallbacks()] == ["recompile_limit:no_grad"]
    assert caplog.text.count("Dynamo's recompile limit was reached") == 1


def test_a_first_torch_compile_is_announced_once(eager_compile, caplog):
    world = models.cart_pole(batch_size=2, dtype=torch.float64)
    action = torch.zeros(2, 1, dtype=torch.float64)
    compiled = physics.compiled_step(torch.float64)
    with caplog.at_level(logging.WARNING):
        for batch in (2, 3, 2):
            w = models.cart_pole(batch_size=batch, dtype=torch.float64)
            compiled(w, physics.initial_state(w), torch.zeros(batch, 1, dtype=torch.float64))
    notices_logged = [r for r in caplog.records if "with torch.compile" in r.getMessage()]
    assert len(notices_logged) == 1 and notices_logged[0].levelno == logging.WARNING
    assert notices_logged[0].name.startswith("physics")
    message = notices_logged[0].getMessage()
    assert "about 1–3 minutes on a 2-core CPU" in message and "TORCHINDUCTOR_CACHE_DIR" in message
    route = physics.explain(world, physics.initial_state(world), action, compile=True)
    assert route.built is True and "compiled in this process" in str(route)


def test_announce_once_per_structure(caplog):
    with caplog.at_level(logging.WARNING):
        assert notices.announce_build("abc", "building abc")
        assert not notices.announce_build("abc", "building abc")
        assert notices.announce_build("def", "building def")
    assert [r.getMessage() for r in caplog.records] == ["building abc", "building def"]


@pytest.mark.slow
@pytest.mark.compile
def test_a_real_first_build_is_announced_once(caplog):
    """A reduced pendulum's step built ahead of time for real, in an empty cache: one notice
    before the build, none for the next calls."""
    world = models.pendulum(batch_size=2, dtype=torch.float64, coordinates="reduced")
    compiled = physics.compiled_step(torch.float64)
    with torch.no_grad(), caplog.at_level(logging.WARNING):
        for _ in range(3):
            compiled(world, physics.initial_state(world))
    assert physics.last_route().path == "ahead_of_time"
    announced = [r for r in caplog.records if "ahead of time (AOTInductor" in r.getMessage()]
    assert len(announced) == 1 and "DIFFCAM_CACHE_DIR" in announced[0].getMessage()
    assert str(ahead_of_time.cache_dir()) in announced[0].getMessage()
