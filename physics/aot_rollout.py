"""A rollout under a fixed action sequence as one autograd node through the step built ahead
of time (`physics.ahead_of_time`): `aot_reduced_rollout`.

The forward runs `BLOCK_STEPS` steps per library call where the batch is small (the call's
fixed cost then outweighs a step's arithmetic) and single steps for the rest; the backward
runs the step's VJP from the last step back. It saves the trajectory only: each step's VJP
recomputes that step from the state it started from.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from . import ahead_of_time as aot
from .state import State
from .world import World

Tensor = torch.Tensor
_STATE_TENSORS = 4


def aot_reduced_rollout(
    world: World, state: State, steps: int, actions: Tensor | None, gradient_decay: float = 1.0
) -> State | None:
    """`steps` reduced steps from ``state`` under a fixed action sequence ``actions``
    (steps, B|1, A) (None for a world without actuators) through the world structure's
    `Program`, as one autograd node (`_Rollout`): the trajectory (steps + 1, B, ...), index 0
    the initial state, or None where `aot.aot_reduced_step` would not serve.
    ``gradient_decay`` scales the gradient reaching each step's input state, as
    `rollout.decay_state_gradient` applied before every step does."""
    batch = state.position.shape[0]
    if batch < 2 or steps < 1 or not aot._plain_reverse_mode():
        return None
    if not world.actuator_names:
        actions = None
    elif actions is None:
        return None  # the step's own error (no action for a world with actuators)
    else:
        actions = aot.per_world(actions, batch, dim=3).contiguous()
    program, world_inputs, world_grad = aot._lookup(
        world, state, None if actions is None else actions[0]
    )
    if program is None or (world_grad and torch.is_grad_enabled()) or not program.serves(batch):
        return None
    inputs = [t.contiguous() for t in state.tensors()]
    if actions is not None:
        inputs.append(actions)
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        return State(*_Rollout.apply(program, world_inputs, steps, gradient_decay, *inputs))
    return State(*_run_forward(program, world_inputs, steps, inputs))


def _run_forward(program, world_inputs: list[Tensor], steps: int, inputs: list[Tensor]):
    """The 4 trajectory tensors (steps + 1, B, ...) of `steps` program steps from the state
    ``inputs[:4]`` under the actions ``inputs[4]`` (steps, B|1, A), if any: blocks of
    `BLOCK_STEPS` while they serve, then single steps."""
    actions = inputs[4] if len(inputs) > _STATE_TENSORS else None
    state = inputs[:_STATE_TENSORS]
    chunks = [[t.unsqueeze(0)] for t in state]  # per state tensor, (n, B, ...) pieces
    blocked = 0
    while steps - blocked >= aot.BLOCK_STEPS:
        span = slice(blocked, blocked + aot.BLOCK_STEPS)
        block = program.block([*world_inputs, *state, *_at(actions, span)])
        if block is None:
            break
        for pieces, piece in zip(chunks, block, strict=True):
            pieces.append(piece)
        state = [piece[-1] for piece in block]
        blocked += aot.BLOCK_STEPS
    for t in range(blocked, steps):
        state = program.forward([*world_inputs, *state, *_at(actions, t)])
        for pieces, piece in zip(chunks, state, strict=True):
            pieces.append(piece.unsqueeze(0))
    return tuple(torch.cat(pieces) for pieces in chunks)


def _at(actions: Tensor | None, index) -> list[Tensor]:
    """The actions at a step or a span of steps, as a list of inputs (none without actions)."""
    return [] if actions is None else [actions[index]]


class _Rollout(torch.autograd.Function):
    """A whole rollout through a `Program` as one autograd node: inputs the initial state's
    4 tensors and the actions (steps, B|1, A) if any, outputs the trajectory's 4 tensors
    (steps + 1, B, ...). It saves the trajectory; the backward runs the program's VJPs from
    the last step back, the state's gradient scaled by ``decay`` at each step's input. One
    node, not one per step: autograd's per-node work and the per-step Python of `rollout`
    cost more than a small world's step computes."""

    @staticmethod
    def forward(ctx, program, world_inputs, steps: int, decay: float, *inputs: Tensor):
        trajectory = _run_forward(program, world_inputs, steps, list(inputs))
        ctx.program, ctx.world_inputs, ctx.steps, ctx.decay = program, world_inputs, steps, decay
        ctx.save_for_backward(*trajectory, *inputs[_STATE_TENSORS:])
        return trajectory

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads: Tensor):
        saved = ctx.saved_tensors
        trajectory, actions = saved[:_STATE_TENSORS], saved[_STATE_TENSORS:]
        grads = [g.contiguous() for g in grads]
        decay = torch.tensor(ctx.decay, dtype=trajectory[0].dtype, device=trajectory[0].device)
        # the VJP picks each step from the whole trajectory: no per-step views here
        head, tail = [*ctx.world_inputs, *trajectory, *actions], [*grads, decay]
        indices = aot.step_indices(ctx.steps, trajectory[0].device)
        g_state, g_actions = [g[-1] for g in grads], []
        for t in range(ctx.steps - 1, -1, -1):
            pulled = ctx.program.vjp([*head, *g_state, *tail, indices[t]])
            g_state = pulled[:_STATE_TENSORS]
            g_actions.extend(pulled[_STATE_TENSORS:])
        g_actions = [torch.stack(g_actions[::-1])] if actions else []
        return (None, None, None, None, *g_state, *g_actions)
