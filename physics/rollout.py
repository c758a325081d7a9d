"""Rollouts for backpropagation through time: checkpointing, gradient decay, finiteness checks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
from torch.utils.checkpoint import checkpoint

from .articulated import reduced_step
from .state import State
from .step import step
from .world import World

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
    autograd's bookkeeping. Measured on the cart-pole (benchmarks/bench_physics.py, B = 64,
    float32, 2 threads): forward+backward 142k-151k -> 161k-171k state-steps/s. The maximal
    engine's step does more arithmetic per saved tensor and is kept as it was (36k -> 34k)."""
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
# which vector code covers with masked 16-wide vectors. Measured on the cart-pole
# (benchmarks/bench_physics.py, float32, 2 threads): B = 64 forward 88k -> 109k state-steps/s;
# B = 1024 forward 196k -> 252k, forward+backward 49k -> 58k. (For float64 the vector code also
# failed an internal assert in torch 2.13.)
_SCALAR_LOOPS = {"cpp.simdlen": 1}


def compiled_step(dtype: torch.dtype) -> Callable:
    """`step` through torch.compile (Inductor), made once per dtype and reused.

    The first call per world structure compiles (about 30-60 s on a 2-core CPU); after that a
    small world's step runs several times faster than eager, forward and backward. Eager `step`
    stays the reference; the tests check both agree. Each batch size and grad mode is a graph
    of its own: past Dynamo's recompile limit (8 per function) it runs eager, with a warning.
    Worlds in reduced coordinates compile `reduced_step` (a function of its own, so its graphs
    do not count against the maximal step's limit) with a recomputing backward.
    """
    key = (dtype,)
    if key not in _COMPILED:
        maximal = torch.compile(step, dynamic=False, options=_SCALAR_LOOPS)
        reduced = torch.compile(reduced_step, dynamic=False, backend=_inductor_recomputing_backward)

        def compiled(world: World, state: State, action: Tensor | None = None) -> State:
            if world.structure.tree is not None:
                return reduced(world, state, action)
            return maximal(world, state, action)

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
        compile: use `compiled_step` (torch.compile) instead of eager `step`.

    Returns:
        A State with a leading time axis: (steps + 1, B, N, ...), index 0 the initial state.
    """
    if policy is not None and actions is not None:
        raise ValueError("give a policy or an action sequence, not both")

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
