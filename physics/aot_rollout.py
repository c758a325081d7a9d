"""A rollout under a fixed action sequence as one autograd node, stepped in joint coordinates
through libraries built ahead of time (`physics.ahead_of_time`): `aot_reduced_rollout`.

Between steps the rollout carries joint coordinates and velocities (q, q'), not the bodies'
state: reading a state back into joint coordinates, and writing one, would be most of a small
tree's step and most of the values a library call returns. The first step reads the initial
state as `reduced_step` does (its joint coordinates, the joint velocity closest to its body
velocities, its pose as given); the others run `BLOCK_STEPS` per library call, each from the
configuration the previous one ended at, with hinge angles read back into (-pi, pi] as a state
would give them; one more call makes the trajectory's states from (q, q'). Bodies without
degrees of freedom (static ones) keep their initial state, as every step keeps it.

The backward runs from the last step back, one library call per step (it recomputes that step
from the saved (q, q')). Its gradient at step t is the loss's gradient on state t pulled back
to (q, q') plus the gradient decay times the next step's pulled through the step: what chaining
state-to-state steps gives, because reading a state back after writing it is the identity on
(q, q'). The initial state's gradient comes through the first step's own derivative, and its
static bodies' as the sum of the decayed gradients of their copies.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch.autograd.function import once_differentiable

from . import ahead_of_time as aot
from .articulated.step import (
    WORLD_FIELDS,
    Lanes,
    body_components,
    joint_step,
    joints_at,
    joints_of,
    lanes_at,
    model_of,
    stack_state,
    state_components,
    wrapped,
)
from .state import State
from .world import World

Tensor = torch.Tensor
_STATE_TENSORS = 4
#: Steps per block call: a call's fixed cost, shared between them.
BLOCK_STEPS = 4


def aot_reduced_rollout(
    world: World, state: State, steps: int, actions: Tensor | None, gradient_decay: float = 1.0
) -> State | None:
    """`steps` reduced steps from ``state`` under a fixed action sequence ``actions``
    (steps, B|1, A) (None for a world without actuators) through the world structure's
    `Program`, as one autograd node (`_Rollout`): the trajectory (steps + 1, B, ...), index 0
    the initial state, or None where `aot.aot_reduced_step` would not serve or a forward
    library could not be built. ``gradient_decay`` scales the gradient reaching each step's
    input state, as `rollout.decay_state_gradient` applied before every step does. A single
    world rolls out as a pair of identical ones (`aot.paired`)."""
    batch = state.position.shape[0]
    if batch < 1 or steps < 1 or not aot.plain_reverse_mode():
        return None
    if batch == 1:
        pair_world, pair_state = aot.paired(world, state)
        if actions is not None:
            actions = aot.per_world(actions, 2, dim=3)
        trajectory = aot_reduced_rollout(pair_world, pair_state, steps, actions, gradient_decay)
        return None if trajectory is None else State(*(t[:, :1] for t in trajectory.tensors()))
    if not world.actuator_names:
        actions = None
    elif actions is None:
        return None  # the step's own error (no action for a world with actuators)
    else:
        actions = aot.per_world(actions, batch, dim=3).contiguous()
    program, world_inputs, world_grad = aot.lookup_program(
        world, state, None if actions is None else actions[0]
    )
    if program is None or (world_grad and torch.is_grad_enabled()):
        return None
    chain = _Chain(program, world, actions is not None, threaded=batch >= aot.THREADED_BATCH)
    if not chain.serves():
        return None
    inputs = [t.contiguous() for t in state.tensors()]
    if actions is not None:
        inputs.append(actions)
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        return State(*_Rollout.apply(chain, world_inputs, steps, gradient_decay, *inputs))
    trajectory, _ = chain.forward(world_inputs, steps, inputs)
    return State(*trajectory)


class _Traces(NamedTuple):
    """The chain's functions on flat tensor lists, each starting with the world's tensor
    fields (`WORLD_FIELDS`); A below is present only for worlds with actuators.

    first: the state (4 tensors (B, N, ...)), the action (B, A) -> q, q' (B, C) after one step.
    first_vjp: the state, the action, the gradients of q, q' after it (B, C), the decay (()) ->
        the state's 4 gradients (times the decay) and the action's.
    block: q, q' (B, C), actions (BLOCK_STEPS, B, A) -> q, q' after each step (K, B, C).
    vjp: q, q' (S, B, C) after each step, actions (S, B, A), the gradients of the (q, q') after
        step i + 2 (B, C), those reaching states 1 .. S directly (4 tensors (S, B, N, ...)), the
        decay, i and the index of step i + 2's action (() int64) -> the gradients of q, q' after
        step i + 1 and of that step's action.
    states: q, q' (S, B, C), the initial state -> the states at them (4 tensors (S, B, N, ...)).
    """

    first: Callable
    first_vjp: Callable
    block: Callable
    vjp: Callable
    states: Callable


def _traces(world: World, with_action: bool, batched: list[bool]) -> _Traces:
    """The chain's functions for ``world``'s structure; ``batched``: which of the world's
    fields (`WORLD_FIELDS`) have a batch axis."""
    n_world = len(WORLD_FIELDS)

    def model(flat):
        return model_of(dataclasses.replace(world, **dict(zip(WORLD_FIELDS, flat, strict=True))))

    def split(flat, count):
        """The model, the next ``count`` tensors, the action(s) (None without actuators), the rest."""
        rest = flat[n_world + count + int(with_action) :]
        action = flat[n_world + count] if with_action else None
        return model(flat[:n_world]), flat[n_world : n_world + count], action, rest

    def stepped(m, joints, action):
        """(q, q') after a step from ``joints``, q read back as a state gives it."""
        joints = joint_step(m, joints, action)
        return dataclasses.replace(joints, q=wrapped(m, joints.q))

    def first_from(m, components, action):
        joints = stepped(m, joints_of(m, Lanes.of_flat(list(components))), action)
        return (*joints.q, *joints.q_dot)

    def first(*flat):
        m, state, action, _ = split(flat, _STATE_TENSORS)
        out = first_from(m, state_components(State(*state)), action)
        return _columns(out)

    def first_vjp(*flat):
        m, state, action, (grad_q, grad_q_dot, decay) = split(flat, _STATE_TENSORS)
        components = state_components(State(*state))

        def step(*free):
            return first_from(m, free[: len(components)], free[-1] if with_action else None)

        _, pull = torch.func.vjp(step, *components, *([] if action is None else [action]))
        pulled = pull((*grad_q.unbind(1), *grad_q_dot.unbind(1)))
        grads = stack_state(list(pulled[: len(components)]), state[0].shape[0]).tensors()
        return (*(decay * g for g in grads), *pulled[len(components) :])

    def block(*flat):
        m, (q, q_dot), actions, _ = split(flat, 2)
        joints = joints_at(m, list(q.unbind(1)), list(q_dot.unbind(1)))
        after = []
        for k in range(BLOCK_STEPS):
            joints = stepped(m, joints, None if actions is None else actions[k])
            after.append(_columns((*joints.q, *joints.q_dot)))
        return tuple(torch.stack(side) for side in zip(*after, strict=True))

    def vjp(*flat):
        m, (q_all, q_dot_all), actions, rest = split(flat, 2)
        grad_q, grad_q_dot, *direct, decay, i, j = rest
        q, q_dot = _at(q_all, i).unbind(1), _at(q_dot_all, i).unbind(1)
        action = None if actions is None else _at(actions, j)
        columns = len(q)

        def step(*free):
            joints = joints_at(m, list(free[:columns]), list(free[columns : 2 * columns]))
            joints = stepped(m, joints, free[-1] if with_action else None)
            return (*joints.q, *joints.q_dot)

        def bodies(*free):
            return tuple(
                body_components(m, joints_at(m, list(free[:columns]), list(free[columns:])))
            )

        _, pull = torch.func.vjp(step, *q, *q_dot, *([] if action is None else [action]))
        pulled = pull((*grad_q.unbind(1), *grad_q_dot.unbind(1)))
        _, pull_bodies = torch.func.vjp(bodies, *q, *q_dot)
        from_state = pull_bodies(_body_gradients(world, [_at(d, i) for d in direct]))
        out = [d + decay * p for d, p in zip(from_state, pulled[: 2 * columns], strict=True)]
        return (*_columns(out), *pulled[2 * columns :])

    def states(*flat):
        # every (step, world) pair one world of a batch of S * B: the arithmetic is then the
        # step's, elementwise over one axis, which Inductor fuses into one loop
        q, q_dot, start = flat[n_world], flat[n_world + 1], flat[n_world + 2 :]
        steps, batch = q.shape[0], q.shape[1]

        def over_steps(t):
            return t.unsqueeze(0).expand(steps, *t.shape).flatten(0, 1)

        m = model([over_steps(w) if b else w for w, b in zip(flat[:n_world], batched, strict=True)])
        joints = joints_at(m, list(q.flatten(0, 1).unbind(1)), list(q_dot.flatten(0, 1).unbind(1)))
        lanes = lanes_at(m, joints, Lanes.of(State(*map(over_steps, start))))
        out = lanes.stack(steps * batch).tensors()
        return tuple(t.view(steps, batch, *t.shape[1:]) for t in out)

    return _Traces(first, first_vjp, block, vjp, states)


def _columns(values) -> tuple[Tensor, Tensor]:
    """q and q' (2C values, each (B,)) as two (B, C) tensors."""
    half = len(values) // 2
    return torch.stack(values[:half], -1), torch.stack(values[half:], -1)


def _at(x: Tensor, index: Tensor) -> Tensor:
    return x.index_select(0, index.reshape(1)).squeeze(0)


def _body_gradients(world: World, grads: list[Tensor]) -> tuple[Tensor, ...]:
    """The moving bodies' entries of a state's 4 gradients (B, N, ...), in `body_components`'
    order."""
    out = []
    for b, static in enumerate(world.is_static):
        if not static:
            position, rotation, linear, angular = (g[:, b].flatten(1).unbind(1) for g in grads)
            out += [*position, *rotation, *linear, *angular]
    return tuple(out)


#: Per program (its key: a world structure, dtype, device and the action's presence), the
#: chain's functions.
_TRACES: dict[str, _Traces] = {}


class _Chain:
    """A world structure's chain libraries (`_traces`) for one kind of batch (threaded: at
    least `aot.THREADED_BATCH`), built by its `aot.Program` on first use."""

    def __init__(self, program: aot.Program, world: World, with_action: bool, threaded: bool):
        traces = _TRACES.get(program.key)
        if traces is None:
            traces = _TRACES[program.key] = _traces(
                world, with_action, program.batched[: len(WORLD_FIELDS)]
            )
        self.program, self.traces, self.world = program, traces, world
        self.with_action, self.threaded = with_action, threaded
        self.columns = len(world.structure.tree.coordinate_joints)

    def library(self, name: str, forward: bool):
        """The library ``name`` (a field of `_Traces`): None if a forward one failed to
        build; a failed VJP runs its trace eagerly."""
        return self.program.library(
            name, getattr(self.traces, name), self._example(name), self.threaded,
            through_make_fx=not forward, eager_fallback=not forward,
        )  # fmt: skip

    def serves(self) -> bool:
        return all(self.library(name, forward=True) for name in aot.ROLLOUT_LIBRARIES)

    def _example(self, name: str):
        """A function of the step's example inputs (`aot._example`) -> the library's example
        inputs and their dynamic axes."""
        n, columns = len(WORLD_FIELDS), self.columns

        def make(step_example: list[Tensor], batched: list[bool]):
            world, state = step_example[:n], step_example[n : n + _STATE_TENSORS]
            action = step_example[n + _STATE_TENSORS :]
            batch = state[0].shape[0]
            sizes = {d for t in step_example for d in t.shape}
            steps, action_steps = [d for d in (41, 43, 47, 53, 59, 61, 67) if d not in sizes][:2]
            like = state[0]
            q = torch.linspace(-0.3, 0.4, batch * columns, dtype=like.dtype).view(batch, columns)
            world_axes = aot.batch_axes(batched[:n])
            batch_axis, trajectory = {0: aot.BATCH}, {0: aot.LENGTH, 1: aot.BATCH}
            state_axes = [batch_axis] * _STATE_TENSORS
            q_dot = q.flip(0).contiguous()
            one = torch.ones((), dtype=like.dtype)
            if name == "first":
                return [*world, *state, *action], [
                    *world_axes,
                    *state_axes,
                    *[batch_axis] * len(action),
                ]
            if name == "first_vjp":
                inputs = [*world, *state, *action, q, q_dot, one]
                return inputs, [*world_axes, *state_axes, *[batch_axis] * len(action),
                                batch_axis, batch_axis, None]  # fmt: skip
            if name == "block":
                acts = [a.expand(BLOCK_STEPS, *a.shape).contiguous() for a in action]
                return [*world, q, q_dot, *acts], [*world_axes, batch_axis, batch_axis,
                                               *[{1: aot.BATCH}] * len(acts)]  # fmt: skip
            path, path_dot = (v.expand(steps, *v.shape).contiguous() for v in (q, q_dot))
            if name == "states":
                return [*world, path, path_dot, *state], [*world_axes, trajectory, trajectory,
                                                      *state_axes]  # fmt: skip
            acts = [a.expand(action_steps, *a.shape).contiguous() for a in action]
            direct = [torch.randn(steps, *t.shape, dtype=t.dtype) for t in state]
            # distinct tensors: export would take one tensor passed twice for one input
            inputs = [*world, path, path_dot, *acts, q, q_dot, *direct, one, torch.tensor(1),
                      torch.tensor(2)]  # fmt: skip
            axes = [*world_axes, trajectory, trajectory,
                    *[{0: aot.STEPS, 1: aot.BATCH}] * len(acts), batch_axis, batch_axis,
                    *[trajectory] * _STATE_TENSORS, None, None, None]  # fmt: skip
            return inputs, axes

        return make

    def forward(self, world_inputs: list[Tensor], steps: int, inputs: list[Tensor]):
        """The trajectory's 4 tensors (steps + 1, B, ...) from the state ``inputs[:4]`` under
        the actions ``inputs[4]`` (steps, B, A), if any, and (q, q') after each step (steps,
        B, C)."""
        state, actions = inputs[:_STATE_TENSORS], inputs[_STATE_TENSORS:]
        q, q_dot = self.library("first", True)([*world_inputs, *state, *[a[0] for a in actions]])
        paths = [[q.unsqueeze(0)], [q_dot.unsqueeze(0)]]
        if steps > 1:
            block = self.library("block", True)
            padded = [_padded(a, 1 + -(-(steps - 1) // BLOCK_STEPS) * BLOCK_STEPS) for a in actions]
            for start in range(1, steps, BLOCK_STEPS):
                span = [a[start : start + BLOCK_STEPS] for a in padded]
                q_after, q_dot_after = block([*world_inputs, q, q_dot, *span])
                paths[0].append(q_after)
                paths[1].append(q_dot_after)
                q, q_dot = q_after[-1], q_dot_after[-1]
        q_path, q_dot_path = (torch.cat(p)[:steps] for p in paths)
        later = self.library("states", True)([*world_inputs, q_path, q_dot_path, *state])
        trajectory = tuple(
            torch.cat([s.unsqueeze(0), t]) for s, t in zip(state, later, strict=True)
        )
        return trajectory, (q_path, q_dot_path)

    def backward(self, world_inputs, saved, steps: int, decay: float, grads: list[Tensor]):
        """The gradients of the initial state's 4 tensors and of the actions (steps, B, A), if
        any, from ``grads``, those of the trajectory's 4 tensors."""
        state, q_path, q_dot_path = saved[:_STATE_TENSORS], *saved[-2:]
        actions = list(saved[_STATE_TENSORS:-2])
        like = q_path[0]
        factor = torch.tensor(decay, dtype=like.dtype, device=like.device)
        direct = [g[1:] for g in grads]
        indices = aot.step_indices(steps, like.device)
        vjp = self.library("vjp", False)
        head = [*world_inputs, q_path, q_dot_path, *actions]
        grad_q, grad_q_dot = torch.zeros_like(like), torch.zeros_like(like)
        action_grads = []
        for i in range(steps - 1, -1, -1):
            j = indices[min(i + 1, steps - 1)]
            pulled = vjp([*head, grad_q, grad_q_dot, *direct, factor, indices[i], j])
            grad_q, grad_q_dot = pulled[0], pulled[1]
            if i < steps - 1:
                action_grads.extend(pulled[2:])
        first_vjp = self.library("first_vjp", False)
        pulled = first_vjp([*world_inputs, *state, *[a[0] for a in actions], grad_q,
                            grad_q_dot, factor])  # fmt: skip
        action_grads.extend(pulled[_STATE_TENSORS:])
        state_grads = [g[0] + p for g, p in zip(grads, pulled[:_STATE_TENSORS], strict=True)]
        state_grads = _static_gradients(self.world, state_grads, direct, decay)
        if actions:
            return state_grads, [torch.stack(action_grads[::-1])]
        return state_grads, []


def _padded(actions: Tensor, steps: int) -> Tensor:
    """``actions`` (S, B, A) with zeros after the last step up to ``steps``."""
    if actions.shape[0] >= steps:
        return actions
    return torch.cat([actions, actions.new_zeros(steps - actions.shape[0], *actions.shape[1:])])


def _static_gradients(world: World, grads: list[Tensor], direct: list[Tensor], decay: float):
    """The initial state's gradients with its static bodies' copies' added: the gradient of
    state t's entries, times decay^t (``direct``: those of states 1 .. S)."""
    static = [b for b, s in enumerate(world.is_static) if s]
    if not static:
        return grads
    index = torch.tensor(static, device=grads[0].device)
    steps = direct[0].shape[0]
    weights = decay ** torch.arange(1, steps + 1, dtype=grads[0].dtype, device=grads[0].device)
    out = []
    for g, d in zip(grads, direct, strict=True):
        picked = d.index_select(2, index)
        summed = (weights.view(-1, *[1] * (picked.dim() - 1)) * picked).sum(0)
        out.append(g.index_add(1, index, summed))
    return out


class _Rollout(torch.autograd.Function):
    """A whole rollout through a `_Chain` as one autograd node: inputs the initial state's 4
    tensors and the actions (steps, B, A) if any, outputs the trajectory's 4 tensors (steps +
    1, B, ...). It saves the initial state, the actions and (q, q') after each step. One node,
    not one per step: autograd's per-node work and the per-step Python of `rollout` cost more
    than a small world's step computes."""

    @staticmethod
    def forward(ctx, chain: _Chain, world_inputs, steps: int, decay: float, *inputs: Tensor):
        trajectory, paths = chain.forward(world_inputs, steps, list(inputs))
        ctx.chain, ctx.world_inputs, ctx.steps, ctx.decay = chain, world_inputs, steps, decay
        ctx.save_for_backward(*inputs, *paths)
        return trajectory

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads: Tensor):
        grads = [g.contiguous() for g in grads]
        state_grads, action_grads = ctx.chain.backward(
            ctx.world_inputs, ctx.saved_tensors, ctx.steps, ctx.decay, grads
        )
        return (None, None, None, None, *state_grads, *action_grads)
