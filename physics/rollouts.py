"""Rollouts for backpropagation through time: checkpointing, gradient decay, finiteness checks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

from .ahead_of_time import aot_reduced_step
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
    """`step` compiled, made once per dtype and reused.

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
    tensors require grad (system identification) step eagerly in reduced coordinates, since
    Inductor's code got their gradients wrong (torch 2.13).
    """
    key = (dtype, ahead_of_time)
    if key not in _COMPILED:
        # dynamic=False: no size becomes dynamic but the batch axis `mark_batch_dynamic` marks.
        # With Dynamo's automatic dynamic shapes a second world structure (say 2 bodies, then
        # 7) recompiled with the body count symbolic, and that graph of the reduced step gave
        # NaN from its first step (torch 2.13, the bundled pendulum-cart after a cart-pole).
        maximal = torch.compile(step, dynamic=False, options=_SCALAR_LOOPS)
        reduced = torch.compile(reduced_step, dynamic=False, backend=_inductor_recomputing_backward)

        def compiled(world: World, state: State, action: Tensor | None = None) -> State:
            through_compile = maximal
            if world.structure.tree is not None:
                if ahead_of_time:  # None where it does not serve (world tensors with grad...)
                    stepped = aot_reduced_step(world, state, action)
                    if stepped is not None:
                        return stepped
                if torch.is_grad_enabled() and _world_requires_grad(world):
                    # Inductor's reduced step gave wrong gradients to the world's own tensors
                    # (masses; torch 2.13) while the state's were right: differentiating
                    # the model's parameters takes the eager step
                    return reduced_step(world, state, action)
                through_compile = reduced
            state = uniform_grad_flags(world, state, action)
            mark_batch_dynamic(world, state, action)
            return through_compile(world, state, action)

        _COMPILED[key] = compiled
    return _COMPILED[key]


def rollout(
    world: World,
    state: State,
    steps: int,
    policy: Policy | None = None,
    actions: Tensor | None = None,
    checkpoint_every: int | None = None,
    gradient_decay: float = 1.0,
    check_finite: bool = True,
    compile: bool = False,
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
            nothing left to save there.

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

    if compile and policy is None and world.structure.tree is not None:
        # a fixed action sequence in reduced coordinates: the whole rollout as one node
        # through the step built ahead of time (its memory is the trajectory's, as with
        # checkpointing every step), where that serves
        trajectory = aot_reduced_rollout(world, state, steps, actions, gradient_decay)
        if trajectory is not None:
            if check_finite:
                assert_finite(world, trajectory)
            return trajectory

    # One unbind, not an index per step: its backward stacks the per-step gradients once,
    # where each index's backward would fill a zero tensor of the whole sequence.
    per_step = None if actions is None else actions.unbind(0)

    def action_at(current: State, t: int) -> Tensor | None:
        if policy is not None:
            return policy(current, t)
        return None if per_step is None else per_step[t]

    step_fn = compiled_step(world.dtype) if compile else step

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
