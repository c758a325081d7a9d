"""Which path a step or a rollout runs — eager, torch.compile, or the libraries built ahead of
time (`physics.ahead_of_time`, `physics.aot_rollout`) — decided in one place.

A caller gathers the facts of a call (`step_facts`, `rollout_facts`: a `Facts` record), asks
`decide` (a pure function of them) for a `Route`, runs what the route says and `record`s the
route it took; `explain` answers for a call before it is made, `last_route` says which route
the last call took, and `physics.notices.fallbacks` lists the fallbacks taken. `compiled_step`,
`rollout`, `diffcam.Scene.step` / `rollout` and the fit's rollouts all go through here. The
rules, in order:

compile=False: eager.

compile=None (automatic): the caller's `Tier` chooses between eager and compile=True. Eager
under forward-mode AD or a functorch transform (the compiled paths serve plain reverse mode);
for a fit's tier also in maximal coordinates; then
compiled once the caller's eager calls have cost what compiling costs (``spent >= price``: a
ski rental) or at once when the compiled libraries are on disk (``ready``); eager until then.

compile=True, a step (`compiled_step`):

1. maximal coordinates: torch.compile.
2. reduced coordinates, plain reverse mode, an action where the world has actuators and no
   failed build for this structure and kind of batch: the ahead-of-time library (a single
   world as a pair of identical ones: the libraries serve batches from 2; gradients to the
   world's tensors through a VJP library that gives them too).
3. otherwise, with grad enabled and any of the world's tensors requiring grad: eager
   (torch.compile's Inductor code of the reduced step got those gradients wrong, torch 2.13).
4. otherwise torch.compile; where Dynamo's recompile limit was reached for this structure and
   grad mode, torch.compile runs it eagerly.

compile=True, a rollout (`rollout`): under a fixed action sequence in reduced coordinates,
with rule 2's conditions, ``steps >= 1`` and the rollout's libraries not failed, the whole
rollout through its own libraries as one autograd node (they give the world's tensors no
gradient: with such gradients, step by step); otherwise step by step, each step as above.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable
from typing import Literal

import torch

from . import ahead_of_time as aot
from . import notices
from .articulated.step import WORLD_FIELDS
from .state import State
from .world import TENSOR_FIELDS, World

Tensor = torch.Tensor
Path = Literal["ahead_of_time", "compiled", "eager"]
Kind = Literal["step", "rollout"]
#: A build's status: "ready" (in this process), "on_disk" (an earlier process built it: a
#: load, an export and a trace, seconds), "to_build" (neither: minutes), "untried" (not in
#: this process, the disk not looked at) or "failed".
Build = Literal["ready", "on_disk", "to_build", "untried", "failed"]
_STEP_FIELDS = frozenset(WORLD_FIELDS)


@dataclasses.dataclass(frozen=True)
class Tier:
    """A caller's rule for ``compile=None``: eager until its eager calls have cost about what
    compiling costs, then compiled (a ski rental: never much more than twice the better choice
    made in hindsight); compiled at once when the compiled libraries are on disk.

    Attributes:
        owner: who applies it, as the reasons name it (``"Scene.compile_after"``).
        spent: what eager calls have cost so far, in ``unit``.
        price: the cost at which it compiles (``inf``: never).
        unit: ``spent``'s and ``price``'s unit ("state-steps", "s").
        ready: the compiled libraries are on disk: compile now.
        shortcut: when ``ready`` turns true, in words (for the reasons).
        reduced_only: stay eager in maximal coordinates (a fit).
    """

    owner: str
    spent: float
    price: float
    unit: str
    ready: bool = False
    shortcut: str = ""
    reduced_only: bool = False


@dataclasses.dataclass(frozen=True)
class Facts:
    """What `decide` decides from: the facts of one step or rollout call.

    Attributes:
        kind: "step" or "rollout".
        formulation: "reduced" (joint coordinates) or "maximal".
        batch: B, the state's batch size.
        requested: the caller's ``compile``: True, False or None (automatic: ``tier``).
        tier: the caller's `Tier`, for ``requested=None``.
        grad_enabled: `torch.is_grad_enabled()`.
        world_grad: the world's tensor fields that require grad (looked at only with grad
            enabled: empty otherwise).
        state_grad: with grad enabled, whether any of the state's tensors requires grad.
        plain_reverse_mode: not inside forward-mode AD or a functorch transform.
        policy: a rollout under a policy (closed loop), not a fixed action sequence.
        action_missing: the world has actuators and the call gives no action(s).
        steps: a rollout's step count (None for a step).
        ahead_of_time: `compiled_step`'s flag (False: never the ahead-of-time step).
        step_build: the ahead-of-time step's forward build for this batch (`Build`), None
            where no program applies or it was not looked up (an eager choice).
        rollout_build: the same for a rollout's forward libraries.
        compiled_before: torch.compile compiled this structure in this process.
        dynamo_refused: Dynamo's recompile limit was reached for this structure and grad mode.
    """

    kind: Kind
    formulation: str
    batch: int
    requested: bool | None
    tier: Tier | None = None
    grad_enabled: bool = True
    world_grad: tuple[str, ...] = ()
    state_grad: bool = False
    plain_reverse_mode: bool = True
    policy: bool = False
    action_missing: bool = False
    steps: int | None = None
    ahead_of_time: bool = True
    step_build: Build | None = None
    rollout_build: Build | None = None
    compiled_before: bool = False
    dynamo_refused: bool = False

    @property
    def step_world_grad(self) -> bool:
        """Gradients flow to world tensors the reduced step reads (`WORLD_FIELDS`): the
        ahead-of-time step takes its VJP to the world for them."""
        return self.grad_enabled and bool(_STEP_FIELDS.intersection(self.world_grad))


@dataclasses.dataclass(frozen=True)
class Route:
    """Which path a call runs and why. ``str(route)`` is the sentence `explain` prints.

    Attributes:
        path: "ahead_of_time" (AOTInductor libraries), "compiled" (torch.compile) or "eager".
        kind: "step" or "rollout".
        formulation: "reduced" or "maximal".
        batch: B.
        compile: whether the call goes through the compiled entry points (``compile=True``,
            or ``None`` resolved so by the caller's tier); eager routes of those entry points
            (gradients to the world's tensors, Dynamo's limit) have it True.
        cause: the rule that decided, a short name: "asked" (compile=False), "warming_up",
            "gradients", "not_plain", "maximal", "aot", "batch", "no_action", "aot_off",
            "build_failed", "world_grad" or "recompile_limit" (a rollout step by step: its
            steps' cause; its reason says why it is not chained).
        reason: the rule and the facts it read, in words.
        built: nothing to build: True for eager, for libraries in this process or on disk and
            for a structure torch.compile compiled in this process; False when the libraries
            are to be built; None when not known (not looked up, or Inductor's own cache).
        chained: a rollout as one autograd node through its own libraries.
        facts: the `Facts` it was decided from.
    """

    path: Path
    kind: Kind
    formulation: str
    batch: int
    compile: bool
    cause: str
    reason: str
    built: bool | None = True
    chained: bool = False
    facts: Facts | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def cache_dir(self) -> str | None:
        """Where the route's compiled code is kept (None for eager), as the environment says
        now: ``DIFFCAM_CACHE_DIR`` for the ahead-of-time libraries, ``TORCHINDUCTOR_CACHE_DIR``
        for torch.compile's."""
        if self.path == "ahead_of_time":
            return _aot_cache()
        return _inductor_cache() if self.path == "compiled" else None

    def once_compiled(self) -> Route | None:
        """For an automatic choice that is eager while it warms up: the route the call takes
        once its tier compiles (None otherwise)."""
        if self.cause != "warming_up" or self.facts is None:
            return None
        return decide(dataclasses.replace(self.facts, requested=True, tier=None))

    def __str__(self) -> str:
        what = _PATH_NAMES[self.path]
        if self.chained:
            what = "ahead-of-time rollout libraries, the whole rollout as one autograd node"
        text = f"{self.kind}: {what} ({self.reason}){_where(self)}"
        later = self.once_compiled()
        if later is not None:
            text += f". Once compiled: {str(later).split(': ', 1)[1]}"
        return text


_PATH_NAMES = {
    "ahead_of_time": "ahead-of-time library",
    "compiled": "torch.compile",
    "eager": "eager",
}


def _where(route: Route) -> str:
    """The route's cache and build status, as a clause."""
    if route.path == "eager":
        return ""
    if route.path == "compiled":
        if route.built:
            return f"; compiled in this process (Inductor's cache: {route.cache_dir})"
        return (f"; its first call compiles ({notices.BUILD_COST}) unless Inductor's cache "
                f"{route.cache_dir} (TORCHINDUCTOR_CACHE_DIR) holds it from an earlier process")  # fmt: skip
    facts = route.facts
    status = None if facts is None else (facts.rollout_build if route.chained else facts.step_build)
    if status == "ready":
        return f"; loaded in this process (from {route.cache_dir})"
    if status == "on_disk":
        return f"; on disk in {route.cache_dir} (a load, an export and a trace: seconds)"
    if status == "to_build":
        return f"; to be built first ({notices.BUILD_COST}), then kept in {route.cache_dir}"
    return f"; not loaded in this process yet ({route.cache_dir}: DIFFCAM_CACHE_DIR)"


# --------------------------------------------------------------------------- the decision
@functools.lru_cache(maxsize=512)
def decide(facts: Facts) -> Route:
    """The `Route` for a call with these `Facts` (the rules are in the module's docstring).
    A pure function: the same facts give the same route."""
    eager = _eager_by_request(facts)
    if eager is not None:
        cause, reason = eager
        return _route(facts, "eager", False, cause, reason)
    route = _rollout_route(facts) if facts.kind == "rollout" else _step_route(facts)
    tier = facts.tier if facts.requested is None else None
    if tier is not None:  # why the automatic choice compiles
        why = (
            "the compiled libraries are on disk"
            if tier.ready
            else (f"{_amount(tier.spent)} {tier.unit} stepped eagerly, past {_amount(tier.price)}")
        )
        route = dataclasses.replace(route, reason=f"{route.reason}; compiled: {tier.owner}, {why}")
    return route


def _eager_by_request(f: Facts) -> tuple[str, str] | None:
    """(cause, reason) when the request, or for ``compile=None`` the caller's tier, says
    eager; None when the call goes through the compiled entry points."""
    if f.requested is False:
        return "asked", "compile=False"
    if f.requested:
        return None
    tier = f.tier
    if tier is None:
        raise ValueError("compile=None is a caller's automatic choice: give its Tier (tier=...)")
    if not f.plain_reverse_mode:
        return "not_plain", (
            "forward-mode AD or a functorch transform: the compiled paths serve plain reverse "
            "mode only"
        )
    if tier.reduced_only and f.formulation == "maximal":
        return "maximal", (
            f"{tier.owner}: maximal coordinates step eagerly (torch.compile's build of their "
            "step takes many minutes)"
        )
    if tier.ready or tier.spent >= tier.price:
        return None
    if tier.price == float("inf"):
        return "warming_up", f"{tier.owner}: never compiles by default"
    return "warming_up", (
        f"{tier.owner}: {_amount(tier.spent)} of {_amount(tier.price)} {tier.unit} stepped "
        f"eagerly so far; it compiles past them{tier.shortcut}"
    )


def _step_route(f: Facts) -> Route:
    """A step through `compiled_step` (rules 1-4)."""
    if f.formulation == "maximal":
        return _compiled(f, "maximal", "maximal coordinates: only reduced ones are built ahead "
                         "of time")  # fmt: skip
    blocked = _ahead_of_time_blocked(f, f.step_build, f.ahead_of_time, world_grads=True)
    if blocked is None:
        return _route(f, "ahead_of_time", True, "aot", _aot_reason(f), built=_built(f.step_build))
    if f.grad_enabled and f.world_grad:
        return _route(f, "eager", True, "world_grad", _world_grad_reason(f))
    return _compiled(f, *blocked)


def _rollout_route(f: Facts) -> Route:
    """A rollout with compile=True: chained through its libraries, or step by step."""
    if f.formulation == "reduced":
        if f.policy:
            blocked = ("policy", "a policy (a closed loop)")
        elif f.steps is not None and f.steps < 1:
            blocked = ("no_steps", "no steps")
        else:
            blocked = _ahead_of_time_blocked(f, f.rollout_build, True, world_grads=False)
        if blocked is None:
            reason = f"{_aot_reason(f)}, a fixed action sequence"
            built = _built(f.rollout_build)
            return _route(f, "ahead_of_time", True, "aot", reason, built=built, chained=True)
        if blocked[0] == "build_failed":
            blocked = ("build_failed", "the rollout's libraries failed to build (physics."
                       "fallbacks()): one step at a time")  # fmt: skip
        else:
            blocked = (blocked[0], f"{blocked[1]}: one step at a time")
    else:
        blocked = None
    per_step = dataclasses.replace(f, kind="step", ahead_of_time=True)
    step = _step_route(per_step)
    if blocked is None or step.cause == blocked[0]:  # the step's reason says it
        reason = step.reason
    else:
        reason = f"{blocked[1]}; each step: {step.reason}"
    return dataclasses.replace(step, kind="rollout", reason=reason, facts=f)


def _ahead_of_time_blocked(f: Facts, build: Build | None, allowed: bool, world_grads: bool):
    """(cause, reason) of what keeps a reduced call from the libraries built ahead of time,
    or None when they serve it; ``world_grads``: whether they give the world's tensors
    gradients (a step's do, a chained rollout's do not)."""
    if not allowed:
        return "aot_off", "compiled_step(ahead_of_time=False)"
    if f.batch < 1:
        return "batch", f"B={f.batch}: an empty batch"
    if not f.plain_reverse_mode:
        return "not_plain", ("forward-mode AD or a functorch transform: the ahead-of-time "
                             "libraries take plain tensors")  # fmt: skip
    if f.action_missing:
        return "no_action", ("no action (zeros) for a world with actuators: the ahead-of-time "
                             "libraries take one")  # fmt: skip
    if not world_grads and f.step_world_grad:
        return "world_grad", ("gradients to the world's tensors "
                              f"({', '.join(f.world_grad)}): the chained rollout's libraries "
                              "give them none")  # fmt: skip
    if build == "failed":
        return "build_failed", "its ahead-of-time build failed (physics.fallbacks())"
    return None


def _compiled(f: Facts, cause: str, reason: str) -> Route:
    """torch.compile, or eager through it past Dynamo's recompile limit."""
    if f.dynamo_refused:
        return _route(f, "eager", True, "recompile_limit", f"{reason}; Dynamo's recompile limit "
                      "was reached for this structure: torch.compile runs it eagerly")  # fmt: skip
    return _route(f, "compiled", True, cause, reason, built=True if f.compiled_before else None)


def _route(f: Facts, path: Path, compile: bool, cause: str, reason: str, built=True,
           chained: bool = False) -> Route:  # fmt: skip
    return Route(path, f.kind, f.formulation, f.batch, compile, cause, reason, built, chained, f)


def _built(build: Build | None) -> bool | None:
    return {"ready": True, "on_disk": True, "to_build": False}.get(build)


def _aot_reason(f: Facts) -> str:
    if not f.grad_enabled:
        grads = "no gradients"
    elif f.step_world_grad:
        grads = f"gradients to the world's {', '.join(f.world_grad)} through the VJP to the world"
    else:
        grads = "no gradient to the world's tensors"
    if f.batch == 1:
        return f"reduced coordinates, B=1 stepped as two identical worlds, {grads}"
    return f"reduced coordinates, B={f.batch}, {grads}"


def _world_grad_reason(f: Facts) -> str:
    return (f"gradients to the world's tensors ({', '.join(f.world_grad)}) in reduced "
            "coordinates step eagerly where the ahead-of-time libraries do not serve: "
            "torch.compile's reduced step got them wrong (torch 2.13)")  # fmt: skip


def _amount(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


# --------------------------------------------------------------------------- the facts
def step_facts(
    world: World,
    state: State,
    action: Tensor | None = None,
    *,
    requested: bool | None = True,
    tier: Tier | None = None,
    ahead_of_time: bool = True,
    look_on_disk: bool = False,
) -> Facts:
    """The `Facts` of stepping ``world`` from ``state`` (B, N, ...) with ``action`` (B|1, A)
    or None; ``look_on_disk``: tell "untried" builds apart into "on_disk" and "to_build"
    (`physics.ahead_of_time.on_disk`: a few file checks)."""
    return gather(world, state, action, requested=requested, tier=tier,
                  ahead_of_time=ahead_of_time, look_on_disk=look_on_disk)[0]  # fmt: skip


def rollout_facts(
    world: World,
    state: State,
    steps: int,
    policy: Callable | None = None,
    actions: Tensor | None = None,
    *,
    requested: bool | None = True,
    tier: Tier | None = None,
    look_on_disk: bool = False,
) -> Facts:
    """The `Facts` of a rollout of ``steps`` steps from ``state`` under ``policy`` or the
    action sequence ``actions`` (steps, B|1, A) (or neither, for a world without actuators)."""
    return gather(world, state, None, steps=steps, policy=policy, actions=actions,
                  requested=requested, tier=tier, look_on_disk=look_on_disk)[0]  # fmt: skip


def gather(
    world: World,
    state: State,
    action: Tensor | None = None,
    *,
    steps: int | None = None,
    policy: Callable | None = None,
    actions: Tensor | None = None,
    requested: bool | None = True,
    tier: Tier | None = None,
    ahead_of_time: bool = True,
    look_on_disk: bool = False,
) -> tuple[Facts, aot.Lookup | None]:
    """A call's `Facts` and the ahead-of-time step's `physics.ahead_of_time.Lookup` (None where
    none applies or none was looked up); a rollout when ``steps`` is given. Builds nothing.
    The programs are looked up only where the request can compile (or ``look_on_disk``):
    an eager warm-up step leaves the ahead-of-time registry alone. Equal facts are one
    object (kept in a bounded cache)."""
    key, found = _gather(world, state, action, steps, policy, actions, requested, tier,
                         ahead_of_time, look_on_disk, True)  # fmt: skip
    return _facts(key), found


def plan(
    world: World,
    state: State,
    action: Tensor | None = None,
    *,
    steps: int | None = None,
    policy: Callable | None = None,
    actions: Tensor | None = None,
    requested: bool | None = True,
    tier: Tier | None = None,
    ahead_of_time: bool = True,
    look_up: bool = True,
) -> tuple[Route, aot.Lookup | None]:
    """`decide` of `gather`'s facts, and the lookup: what a call runs (its facts are
    ``route.facts``). Equal facts give the route from a bounded cache without making a
    `Facts` record again: this runs on every compiled step. ``look_up=False`` leaves the
    builds unknown (None): enough for a caller that only asks whether the call goes through
    the compiled entry points (``route.compile``), which then decide again."""
    key, found = _gather(world, state, action, steps, policy, actions, requested, tier,
                         ahead_of_time, False, look_up)  # fmt: skip
    return _route_of(key), found


@functools.lru_cache(maxsize=1024)
def _facts(key: tuple) -> Facts:
    return Facts(*key)


@functools.lru_cache(maxsize=1024)
def _route_of(key: tuple) -> Route:
    return decide(_facts(key))


def _gather(world, state, action, steps, policy, actions, requested, tier, ahead_of_time,
            look_on_disk, look_up) -> tuple[tuple, aot.Lookup | None]:  # fmt: skip
    """`Facts`' fields in order, as a tuple, and the lookup (see `gather`)."""
    rollout = steps is not None
    batch = state.position.shape[0]
    reduced = world.structure.tree is not None
    grad = torch.is_grad_enabled()
    world_grad = _world_grad(world) if grad else ()
    state_grad = grad and any([t.requires_grad for t in state.tensors()])
    if rollout:
        missing = bool(world.actuator_names) and policy is None and actions is None
    else:
        missing = bool(world.actuator_names) and action is None
    plain = aot.plain_reverse_mode()
    formulation = "reduced" if reduced else "maximal"
    structure = notices.structure_of(world)
    head = ("rollout" if rollout else "step", formulation, batch, requested, tier, grad,
            world_grad, state_grad, plain, policy is not None, missing, steps, ahead_of_time)  # fmt: skip
    tail = (notices.announced(structure.key), notices.fell_back(structure.key, refusal(grad)))
    found = step_build = rollout_build = None
    applies = look_up and reduced and batch >= 1 and plain and not missing
    if applies and (look_on_disk or _may_compile(requested, head, tail)):
        if rollout:
            first = actions[0] if actions is not None else None
            if first is None and world.actuator_names:  # a policy's action: its shape
                first = state.position.new_zeros(batch, len(world.actuator_names))
        else:
            first = action
        found = aot.lookup_step(world, state, first)
        backward = grad and bool(
            state_grad or world_grad or (first is not None and first.requires_grad)
        )
        to_world = grad and bool(_STEP_FIELDS.intersection(world_grad))
        look = (world, state, first, backward, to_world) if look_on_disk else None
        step_build = _status(found, batch, None, look)
        if rollout and policy is None:
            rollout_build = _status(found, batch, aot.ROLLOUT_LIBRARIES, look)
    return (*head, step_build, rollout_build, *tail), found


def _may_compile(requested: bool | None, head: tuple, tail: tuple) -> bool:
    """Whether a call with these `Facts` fields (before and after the builds, unknown) goes
    through the compiled entry points."""
    if requested is None:
        return _eager_by_request(_facts((*head, None, None, *tail))) is None
    return requested


def _status(found, batch: int, names, look) -> Build | None:
    """A build's `Build` status: the step's forward (``names`` None) or a rollout's
    libraries; ``look``: (world, state, action, backward) to look on disk with, or None."""
    if found is None:
        return None
    program = found.program
    if program is None:
        return "failed"
    threaded = batch >= aot.THREADED_BATCH
    status = program.status(batch) if names is None else program.library_status(names, threaded)
    if status == "untried" and look is not None:
        world, state, action, backward, world_grad = look
        found_on_disk = aot.on_disk(
            world, state, action, backward, rollout=names is not None, world_grad=world_grad
        )
        return "on_disk" if found_on_disk else "to_build"
    return status


def _world_grad(world: World) -> tuple[str, ...]:
    """The world's tensor fields that require grad."""
    fields = world.__dict__
    return tuple([name for name in TENSOR_FIELDS if fields[name].requires_grad])


def refusal(grad: bool) -> str:
    """The fallback reason under which Dynamo's recompile limit is recorded."""
    return "recompile_limit:grad" if grad else "recompile_limit:no_grad"


def _aot_cache() -> str:
    return str(aot.cache_dir())


def _inductor_cache() -> str:
    """Inductor's cache folder, as torch would choose it (without creating it)."""
    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    return os.path.abspath(chosen) if chosen else _default_inductor_cache()


@functools.cache
def _default_inductor_cache() -> str:
    try:
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        return default_cache_dir()
    except Exception:  # noqa: BLE001 - an older or newer torch: say where to look instead
        return "torch's temporary folder (TORCHINDUCTOR_CACHE_DIR)"


# --------------------------------------------------------------------------- the record
_LAST: list[Route] = []


def record(route: Route) -> Route:
    """Keep ``route`` as the one the last call took (`last_route`); returns it."""
    _LAST[:] = [route]
    return route


def last_route() -> Route | None:
    """The `Route` the last step or rollout call took in this process (after any fallback),
    or None before the first. A rollout step by step records the rollout, with its steps'
    path."""
    return _LAST[0] if _LAST else None


def explain(
    world: World,
    state: State,
    action: Tensor | None = None,
    *,
    steps: int | None = None,
    actions: Tensor | None = None,
    policy: Callable | None = None,
    compile: bool | None = False,
    tier: Tier | None = None,
    ahead_of_time: bool = True,
) -> Route:
    """Which route a call with these arguments takes now, and why, without running it:
    ``print(physics.explain(world, state, action, compile=True))``.

    A step (`physics.step`, or `physics.compiled_step` with ``compile=True``) from ``state``
    (B, N, ...) with ``action`` (B|1, A); a rollout (`physics.rollout`) when ``steps``,
    ``actions`` (steps, B|1, A) or ``policy`` is given. ``compile`` as the call's (the
    default, False, is `physics.rollout`'s); None is a caller's automatic choice and takes
    its ``tier`` (`diffcam.Scene.explain` passes the scene's). It builds nothing, but looks
    on disk for the libraries a route would load.

    Returns:
        The `Route`; ``str(route)`` says which path, why, and where its compiled code is.
    """
    rollout = steps is not None or actions is not None or policy is not None
    if rollout and action is not None:
        raise ValueError("explain: give an action (a step) or steps/actions/policy (a rollout)")
    if rollout and steps is None:
        steps = actions.shape[0] if actions is not None else 1
    facts, _ = gather(world, state, action, steps=steps if rollout else None, policy=policy,
                      actions=actions, requested=compile, tier=tier, ahead_of_time=ahead_of_time,
                      look_on_disk=True)  # fmt: skip
    return decide(facts)
