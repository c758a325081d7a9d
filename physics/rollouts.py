"""Rollouts for backpropagation through time: checkpointing, gradient decay, finiteness checks."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

from . import dispatch, notices
from .ahead_of_time import run_step
from .aot_rollout import aot_reduced_rollout
from .articulated import reduced_step
from .state import State
from .stepping import step
from .world import TENSOR_FIELDS, World

Tensor = torch.Tensor
Policy = Callable[[State, int], Tensor]


class SimulationError(RuntimeError):
    """The state became non-finite; the message names the step and the body."""


def decay_gradient(tensor: Tensor, factor: float) -> Tensor:
    """Identity in the forward pass; multiplies the gradient by ``factor`` in the backward pass.

    Applied to the state once per step, the gradient from k steps later is scaled by factor^k
    (Degrave et al. 2019, section 3.2), which tames exploding gradients through long rollouts.
    """
    if factor == 1.0:
        return tensor
    detached = tensor.detach()
    return detached + factor * (tensor - detached)


def decay_state_gradient(state: State, factor: float) -> State:
    """`decay_gradient` on every tensor of a state."""
    return State(*(decay_gradient(t, factor) for t in state.tensors()))


_COMPILED: dict[tuple, Callable] = {}


def _inductor_recomputing_backward(graph, example_inputs):
    """Inductor (scalar C++ loops), with a backward that recomputes the forward's intermediates
    instead of receiving them: for the reduced step the forward then returns its outputs only,
    not about 100 saved (B, 3)-sized tensors that each cost an allocation and a pass through
    autograd's bookkeeping (figures in docs/performance.md, "The engine's step"). The maximal engine's step
    does more arithmetic per saved tensor and keeps the default partitioner."""
    import torch._functorch.config
    from torch._inductor.compile_fx import compile_fx

    recompute = (
        torch._functorch.config.patch(activation_memory_budget=0.0)
        if hasattr(torch._functorch.config, "activation_memory_budget")
        else contextlib.nullcontext()  # an older torch: its default partitioner
    )
    with recompute:
        return compile_fx(graph, example_inputs, config_patches=_SCALAR_LOOPS)


# Scalar C++ loops, not Inductor's vector code: the engine's innermost dimensions are 2, 3 or 6,
# which vector code covers with masked 16-wide vectors (slower here: docs/decisions/
# inductor-options.md); for float64 the vector code also failed an internal assert in torch 2.13.
_SCALAR_LOOPS = {"cpp.simdlen": 1}


def mark_batch_dynamic(world: World, state: State, action: Tensor | None = None) -> None:
    """Mark the batch axis of every batched tensor of a step's inputs dynamic for torch.compile
    (`torch._dynamo.maybe_mark_dynamic`), so that one compiled graph serves every batch size:
    changing the batch size neither recompiles nor counts against Dynamo's recompile limit.
    (A batch of one is still a graph of its own: Dynamo specialises sizes 0 and 1.) The world's
    tensors are marked once per world object, the state's and the action's on every call."""
    batch = state.position.shape[0]
    if not world.__dict__.get("_batch_marked", False):
        for value in _world_tensors(world):
            if value.dim() and value.shape[0] == batch:
                torch._dynamo.maybe_mark_dynamic(value, 0)
        world.__dict__["_batch_marked"] = True
    for tensor in state.tensors():
        torch._dynamo.maybe_mark_dynamic(tensor, 0)
    if action is not None:
        torch._dynamo.maybe_mark_dynamic(action, 0)


def _world_tensors(world: World):
    """The world's tensor fields, one after another."""
    return (getattr(world, name) for name in TENSOR_FIELDS)


def _world_requires_grad(world: World) -> bool:
    """Whether any of the world's tensors requires grad (checked on every call: a tensor's
    flag can be switched in place)."""
    return any(t.requires_grad for t in _world_tensors(world))


def uniform_grad_flags(world: World, state: State, action: Tensor | None = None) -> State:
    """``state`` with every tensor requiring grad when, with grad enabled, any tensor of the
    step's inputs does (tensors that do not become requiring-grad aliases, ``detach()``
    views: the caller's tensors are untouched and no gradient changes); else ``state``.

    A step's output requires grad in every tensor as soon as any input does, and a compiled
    step guards on the flags: a rollout from an `initial_state` (no grad) with actions that
    require grad would otherwise compile its first step and the rest as two graphs."""
    if not torch.is_grad_enabled():
        return state
    tensors = state.tensors()
    flags = [t.requires_grad for t in tensors]
    if all(flags):
        return state
    wanted = any(flags) or (action is not None and action.requires_grad)
    if not (wanted or _world_requires_grad(world)):
        return state
    return State(*(t if t.requires_grad else t.detach().requires_grad_() for t in tensors))


def compiled_step(dtype: torch.dtype, ahead_of_time: bool = True) -> Callable:
    """`step` compiled, made once per dtype and reused; `physics.dispatch` decides each call's
    path (`physics.explain` says which and why, `physics.last_route` which it took).

    Worlds in reduced coordinates (batches of 2 and more) step through `physics.ahead_of_time`
    (with ``ahead_of_time``, the default): the step built by AOTInductor into a library whose
    C++ runner replaces torch.compile's per-call Python, one library per world structure for
    every batch size, its backward a second library (the step's VJP), both kept on disk for
    other processes. The rest goes through torch.compile (Inductor): the maximal step, a batch
    of one, and any reduced step that could not be built ahead of time.

    Under torch.compile, the first call per world structure and grad mode compiles (tens of
    seconds to minutes on a 2-core CPU); one graph serves every batch size
    (`mark_batch_dynamic`; a batch of one has its own); Inductor keeps the compiled code in its
    on-disk cache (``TORCHINDUCTOR_CACHE_DIR``), so another process pays only Dynamo's
    tracing. A state whose tensors disagree in requiring grad is aligned first
    (`uniform_grad_flags`), so that a rollout from `initial_state` with actions that require
    grad is one graph. Past Dynamo's recompile limit (8 per function) it runs eager, with a
    warning. Reduced steps compiled there use a recomputing backward.

    Eager `step` stays the reference; the tests check both paths agree. Worlds whose own
    tensors require grad (system identification) step through the ahead-of-time step with a
    VJP library that gives those tensors their gradients; where it does not serve, they step
    eagerly in reduced coordinates, since torch.compile's code got their gradients wrong
    (torch 2.13): a fallback, warned once per world structure (`physics.fallbacks`). The first torch.compile of a world structure in a process
    is announced (`physics.notices.announce_build`).
    """
    key = (dtype, ahead_of_time)
    if key not in _COMPILED:
        _watch_dynamo()
        # dynamic=False: no size becomes dynamic but the batch axis `mark_batch_dynamic` marks.
        # With Dynamo's automatic dynamic shapes a second world structure (say 2 bodies, then
        # 7) recompiled with the body count symbolic, and that graph of the reduced step gave
        # NaN from its first step (torch 2.13, the bundled pendulum-cart after a cart-pole).
        maximal = torch.compile(step, dynamic=False, options=_SCALAR_LOOPS)
        reduced = torch.compile(reduced_step, dynamic=False, backend=_inductor_recomputing_backward)

        def compiled(world: World, state: State, action: Tensor | None = None) -> State:
            route, found = dispatch.plan(
                world, state, action, requested=True, ahead_of_time=ahead_of_time
            )
            if route.path == "ahead_of_time":
                stepped = run_step(found, state)
                if stepped is not None:
                    dispatch.record(route)
                    return stepped
                # its build failed just now (warned and recorded by physics.ahead_of_time)
                route = dispatch.decide(dataclasses.replace(route.facts, step_build="failed"))
            dispatch.record(route)
            if route.cause == "world_grad":
                _world_grad_fallback(world, route)
                return reduced_step(world, state, action)
            through_compile = maximal if route.formulation == "maximal" else reduced
            return _through_compile(through_compile, world, state, action, route)

        _COMPILED[key] = compiled
    return _COMPILED[key]


def _world_grad_fallback(world: World, route: dispatch.Route) -> None:
    """Warn once per world structure that gradients to its tensors make `compiled_step` step
    it eagerly, and record it."""
    structure = notices.structure_of(world)
    notices.fall_back(
        structure.label, structure.key, "world_grad", "compiled step", "eager",
        f"physics: gradients to the world's tensors ({', '.join(route.facts.world_grad)}) of "
        f"{structure.label}: compiled_step steps it eagerly where the ahead-of-time step does "
        "not serve (torch.compile's reduced step got them wrong, torch 2.13)",
    )  # fmt: skip


def _through_compile(
    compiled: Callable, world: World, state: State, action: Tensor | None, route: dispatch.Route
) -> State:
    """``compiled(world, state, action)`` (a torch.compile'd step): the first compile of the
    world's structure announced; Dynamo refusing it (its recompile limit: it then runs the
    step eagerly) warned once per structure and grad mode, recorded, and the route taken
    recorded as eager."""
    structure = notices.structure_of(world)
    if not notices.announced(structure.key):
        notices.announce_build(
            structure.key,
            f"physics: compiling the {route.formulation} step of {structure.label} with "
            f"torch.compile, {notices.BUILD_COST} and grad mode; Inductor keeps its code in "
            f"{route.cache_dir} (TORCHINDUCTOR_CACHE_DIR), so a later process pays only the "
            "tracing",
        )
    state = uniform_grad_flags(world, state, action)
    mark_batch_dynamic(world, state, action)
    refused = _REFUSALS.count
    stepped = compiled(world, state, action)
    if _REFUSALS.count != refused:
        grad = torch.is_grad_enabled()
        notices.fall_back(
            structure.label, structure.key, dispatch.refusal(grad), "torch.compile", "eager",
            f"physics: Dynamo's recompile limit was reached for {structure.label} "
            f"({'with' if grad else 'without'} grad): torch.compile steps it eagerly (the "
            "limit counts graphs per step function: world structures, grad modes, B = 1)",
        )  # fmt: skip
        dispatch.record(dataclasses.replace(
            route, path="eager", cause="recompile_limit",
            reason=f"{route.reason}; Dynamo's recompile limit was reached: torch.compile ran "
            "it eagerly",
        ))  # fmt: skip
    return stepped


class _Refusals(logging.Filter):
    """Counts Dynamo's "hit config.recompile_limit" records (it then runs the function
    eagerly); lets every record through."""

    count = 0

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("torch._dynamo hit config."):
            self.count += 1
        return True


_REFUSALS = _Refusals()
#: The logger Dynamo reports its recompile limit on.
DYNAMO_LOGGER = "torch._dynamo.convert_frame"


def _watch_dynamo() -> None:
    """Count Dynamo's recompile-limit records (`_REFUSALS`), once per process."""
    logger = logging.getLogger(DYNAMO_LOGGER)
    if _REFUSALS not in logger.filters:
        logger.addFilter(_REFUSALS)


def rollout(
    world: World,
    state: State,
    steps: int,
    policy: Policy | None = None,
    actions: Tensor | None = None,
    checkpoint_every: int | None = None,
    gradient_decay: float = 1.0,
    check_finite: bool = True,
    compile: bool | None = False,
    tier: dispatch.Tier | None = None,
) -> State:
    """Simulate ``steps`` steps and return the whole trajectory.

    Args:
        world: the model (B worlds).
        state: initial state, (B, N, ...).
        steps: number of timesteps.
        policy: ``policy(state, t) -> action (B, A)``; called once per step.
        actions: alternatively, a fixed action sequence (steps, B, A).
        checkpoint_every: if set, keep only every k-th state for the backward pass and recompute
            the steps in between (torch.utils.checkpoint): memory O(steps / k + k), about one
            more forward pass of compute.
        gradient_decay: per-step gradient factor alpha (1 = plain BPTT).
        check_finite: after the rollout, raise `SimulationError` naming the first non-finite step
            and body (one host sync per rollout, none per step).
        compile: use `compiled_step` instead of eager `step`. For a world in reduced
            coordinates with a batch of 2 or more and a fixed action sequence (no ``policy``),
            the whole rollout is one autograd node through the step built ahead of time
            (`aot_rollout.aot_reduced_rollout`): the same values and gradients with less
            per-step work (`aot_rollout`: it steps in joint coordinates); its backward keeps
            the joint coordinates and velocities after each step, so ``checkpoint_every`` has
            nothing left to save there. None: the caller's ``tier`` chooses (a
            `physics.dispatch.Tier`: eager until compiling pays). `physics.explain` says which
            path a call takes and why; `physics.dispatch` decides it.
        tier: the caller's `physics.dispatch.Tier`, for ``compile=None``.

    Returns:
        A State with a leading time axis: (steps + 1, B, N, ...), index 0 the initial state.
    """
    if policy is not None and actions is not None:
        raise ValueError("give a policy or an action sequence, not both")
    if actions is not None:
        if actions.shape[0] < steps:
            raise ValueError(
                f"rollout: actions has {actions.shape[0]} steps, fewer than steps={steps}; "
                "give one action per step, (steps, B, A)"
            )
        actions = actions[:steps]

    route, _ = dispatch.plan(world, state, steps=steps, policy=policy, actions=actions,
                             requested=compile, tier=tier)  # fmt: skip
    if route.chained:
        # a fixed action sequence in reduced coordinates: the whole rollout as one node
        # through the step built ahead of time (its memory is the trajectory's, as with
        # checkpointing every step)
        trajectory = aot_reduced_rollout(world, state, steps, actions, gradient_decay)
        if trajectory is not None:
            dispatch.record(route)
            if check_finite:
                assert_finite(world, trajectory)
            return trajectory
        # its libraries failed to build just now (warned and recorded there): single steps
        route = dispatch.decide(dataclasses.replace(route.facts, rollout_build="failed"))
    dispatch.record(route)

    # One unbind, not an index per step: its backward stacks the per-step gradients once,
    # where each index's backward would fill a zero tensor of the whole sequence.
    per_step = None if actions is None else actions.unbind(0)

    def action_at(current: State, t: int) -> Tensor | None:
        if policy is not None:
            return policy(current, t)
        return None if per_step is None else per_step[t]

    step_fn = compiled_step(world.dtype) if route.compile else step

    def advance(current: State, start: int, count: int) -> list[State]:
        out = []
        for t in range(start, start + count):
            current = step_fn(
                world, decay_state_gradient(current, gradient_decay), action_at(current, t)
            )
            out.append(current)
        return out

    states = [state]
    segment = checkpoint_every or steps
    start = 0
    while start < steps:
        count = min(segment, steps - start)
        if checkpoint_every and torch.is_grad_enabled():

            def run(*tensors, _start=start, _count=count):
                segment_states = advance(State(*tensors), _start, _count)
                return tuple(t for s in segment_states for t in s.tensors())

            flat = checkpoint(run, *states[-1].tensors(), use_reentrant=False)
            states += [State(*flat[4 * i : 4 * i + 4]) for i in range(count)]
        else:
            states += advance(states[-1], start, count)
        start += count
    trajectory = State.stack(states)
    taken = dispatch.last_route()
    if taken is not route and taken is not None and taken.path != route.path:
        # its compiled steps took another path (a fallback): the rollout took theirs
        dispatch.record(dataclasses.replace(
            route, path=taken.path, cause=taken.cause,
            reason=f"{route.reason}; its steps took: {taken.reason}",
        ))  # fmt: skip
    else:
        dispatch.record(route)
    if check_finite:
        assert_finite(world, trajectory)
    return trajectory


def assert_finite(world: World, trajectory: State) -> None:
    """Raise `SimulationError` at the first non-finite entry of a (T, B, N, ...) trajectory."""
    if all(_all_finite(t) for t in trajectory.tensors()):
        return
    bad = torch.zeros(
        trajectory.position.shape[:3], dtype=torch.bool, device=trajectory.position.device
    )
    for tensor in trajectory.tensors():
        bad |= ~torch.isfinite(tensor.detach()).flatten(3).all(-1)
    if bool(bad.any()):
        t, b, n = (int(i) for i in bad.nonzero()[0])
        raise SimulationError(
            f"the state became non-finite at step {t} (t = {t * world.timestep:.4g} s), batch "
            f"element {b}, body {world.body_names[n]!r}; check its mass, size and inertia, the "
            "timestep, and the actions"
        )


def _all_finite(tensor: Tensor) -> bool:
    """Whether every entry is finite: one pass of `torch.aminmax` (NaN propagates into both,
    an infinity into one), where ``isfinite(...).all()`` makes several passes over the
    trajectory."""
    if tensor.numel() == 0:
        return True
    low, high = torch.aminmax(tensor.detach())
    return bool(torch.isfinite(low) & torch.isfinite(high))
