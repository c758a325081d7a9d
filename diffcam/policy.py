"""Controllers and the differentiable closed-loop rollout that feeds them.

`policy_rollout` is the one rollout loop: every control step an `Observer` turns the state
into what the controller sees (rendered frames for `pixel_observer`, a feature vector for a
state-based baseline), the policy maps it to an action, held for ``control_every`` physics
steps. The whole trajectory stays differentiable, so a loss on it backpropagates through the
physics, the observation (the renderer) and the network (Degrave et al. 2019, section 3.4).
`PixelPolicy` is a CNN on a stack of the last k frames, `StatePolicy` an MLP on state features;
`pixel_rollout` is `policy_rollout` with a `pixel_observer`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import physics

from .renderer.api import DEFAULT_EDGE_SOFTNESS

__all__ = [
    "Observer",
    "PixelPolicy",
    "PixelRollout",
    "PolicyRollout",
    "StatePolicy",
    "pixel_observer",
    "pixel_rollout",
    "policy_rollout",
    "push_frame",
]


class PixelPolicy(nn.Module):
    """A compact CNN: a stack of k RGB frames (B, 3k, H, W) -> actions (B, n_actions).

    Architecture, for the paper's 288 x 96 camera: a first convolution that brings the image
    down 4x (downsample early: most of the cost of a CNN is in its first layers, and a 4x
    coarser image still shows a 1 m pole clearly), then two 3x3 convolutions of stride 2, an
    average over a 2 x 8 grid of what is left (two row bands: above and below the image's
    middle, where the camera looks at the hinge, so an upright pole and a hanging one land in
    different bands; eight column bands: where the cart is), a hidden layer, and a linear output
    that sees both the hidden layer and the pooled features (a skip connection, as in
    `StatePolicy`), squashed by tanh and scaled to ``max_action``. The output layer starts at
    zero, so the initial policy is the zero policy (paper, section 3.2): training starts from
    "do nothing", not from noise.

    The first convolution is 5x5 of stride 4 on full-resolution frames. When the frames were
    already averaged over ``downsample`` x ``downsample`` blocks as they arrived
    (`pixel_observer`'s ``downsample``: each frame is pooled once, not once per stack it sits
    in), it is 4x4 of stride 2 (``downsample`` 2) or 3x3 of stride 1 (4), so that the
    feature maps after it are the same size. On one CPU thread the first convolution's
    backward pass (its input gradient, which the renderer needs) was the largest cost of the
    network; on 2x-pooled frames it is about half.

    Args:
        n_actions: number of action columns (the scene's actuators).
        frames: k, frames in the stack (the current one and k - 1 past ones).
        max_action: actions lie in [-max_action, max_action] (N or N m for force motors).
        width: channels of the convolutions.
        hidden: units of the hidden layer.
        downsample: 1, 2 or 4: how much the frames were pooled before they reach the network.
    """

    def __init__(
        self,
        n_actions: int,
        frames: int = 3,
        max_action: float = 1.0,
        width: int = 16,
        hidden: int = 64,
        downsample: int = 1,
    ) -> None:
        super().__init__()
        first = {1: (5, 4, 2), 2: (4, 2, 1), 4: (3, 1, 1)}
        if downsample not in first:
            raise ValueError(f"PixelPolicy: downsample must be 1, 2 or 4, got {downsample}")
        kernel, stride, padding = first[downsample]
        self.frames = frames
        self.max_action = max_action
        self.downsample = downsample
        self.features = nn.Sequential(
            nn.Conv2d(3 * frames, width, kernel_size=kernel, stride=stride, padding=padding),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, kernel_size=3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(2 * width, 2 * width, kernel_size=3, stride=2, padding=1),
            nn.ReLU(),
        )
        self.pool = nn.Sequential(nn.AdaptiveAvgPool2d((2, 8)), nn.Flatten())
        pooled = 2 * width * 2 * 8
        self.head = nn.Sequential(nn.Linear(pooled, hidden), nn.ReLU())
        self.output = nn.Linear(hidden + pooled, n_actions)
        nn.init.zeros_(self.output.weight)
        nn.init.zeros_(self.output.bias)
        # The convolutions run channels-last (NHWC): on one CPU thread, forward and backward of
        # the network on 144 x 48 frames take about 0.6 of their time in the default layout
        # (benchmarks/results/swingup.jsonl). The same values up to rounding.
        self.features.to(memory_format=torch.channels_last)

    def forward(self, stacked_frames: torch.Tensor) -> torch.Tensor:
        """Actions (B, n_actions) from frames (B, 3k, H, W) in [0, 1], newest last."""
        frames = stacked_frames.contiguous(memory_format=torch.channels_last)
        pooled = self.pool(self.features(frames * 2.0 - 1.0))
        top = torch.cat([self.head(pooled), pooled], -1)
        return self.max_action * torch.tanh(self.output(top))


def push_frame(stack: torch.Tensor | None, frame: torch.Tensor, frames: int) -> torch.Tensor:
    """A new frame stack (B, 3k, H, W) with ``frame`` (B, 3, H, W) last and the oldest dropped.

    With ``stack`` None (the first step) the stack is k copies of ``frame``.
    """
    if stack is None:
        return frame.repeat(1, frames, 1, 1)
    return torch.cat([stack[:, 3:], frame], 1)


Observer = Callable[[physics.State, torch.Tensor | None], tuple]
"""``observe(state, memory) -> (observation, memory, record)``.

What a controller sees of a state: ``observation`` goes to the policy; ``memory`` (a tensor or
None) is handed back at the next control step (a frame stack, say); ``record`` (a tensor or
None) is what the rollout keeps of each step when asked to (the newest frame, say).
"""


class StatePolicy(nn.Module):
    """A small MLP on a feature vector of the true state: (B, n_inputs) -> (B, n_actions).

    The baseline that skips vision: same rollout, same loss, but the policy reads the state.
    Two tanh hidden layers; the output layer sees the last hidden layer and, through a skip
    connection, the (scaled) input itself, as the paper's quadruped controller (Degrave et al.
    2019, section 3.3): a linear state feedback -- what balancing needs -- is then one layer
    away. Without the skip, BPTT from near-upright starts did not learn to balance in 40
    iterations, where a linear policy on the same features did in about 20. The output layer
    starts at zero, so the initial policy is the zero policy, as for `PixelPolicy`.

    Args:
        n_inputs: features per batch element.
        n_actions: action columns.
        max_action: actions lie in [-max_action, max_action].
        hidden: units per hidden layer.
        input_scale: (n_inputs,) factors applied to the features first, to bring them to order
            one (features in SI units span very different ranges); None means 1.
    """

    def __init__(
        self,
        n_inputs: int,
        n_actions: int,
        max_action: float = 1.0,
        hidden: int = 64,
        input_scale: list[float] | None = None,
    ) -> None:
        super().__init__()
        self.max_action = max_action
        scale = torch.ones(n_inputs) if input_scale is None else torch.tensor(input_scale)
        if scale.shape != (n_inputs,):
            raise ValueError(f"input_scale has {scale.numel()} values, expected {n_inputs}")
        self.register_buffer("input_scale", scale)
        self.body = nn.Sequential(
            nn.Linear(n_inputs, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh()
        )
        self.output = nn.Linear(hidden + n_inputs, n_actions)
        nn.init.zeros_(self.output.weight)
        nn.init.zeros_(self.output.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        """Actions (B, n_actions) from features (B, n_inputs)."""
        scaled = features * self.input_scale
        top = torch.cat([self.body(scaled), scaled], -1)
        return self.max_action * torch.tanh(self.output(top))


@dataclasses.dataclass
class PolicyRollout:
    """What `policy_rollout` returns.

    trajectory: physics.State with a leading time axis (steps + 1, B, N, ...).
    actions: (control_steps, B, n_actions) the actions the policy chose.
    records: (control_steps, B, ...) what the observer recorded, or None if not kept.
    memory: the observer's memory after the last control step (to continue the rollout).
    """

    trajectory: physics.State
    actions: torch.Tensor
    records: torch.Tensor | None
    memory: torch.Tensor | None


def policy_rollout(
    scene,
    policy: Callable[[torch.Tensor], torch.Tensor],
    observe: Observer,
    steps: int,
    state: physics.State | None = None,
    control_every: int = 1,
    gradient_decay: float = 1.0,
    checkpoint_every: int | None = None,
    keep_records: bool = True,
    memory: torch.Tensor | None = None,
    compile_physics: bool = False,
    observation_gradient: bool = True,
) -> PolicyRollout:
    """Simulate ``steps`` physics steps with a closed-loop controller; the one rollout loop.

    Every control step: ``observe`` the state, ask the policy for an action and hold it for
    ``control_every`` physics steps. Everything stays differentiable, so a loss on the
    trajectory backpropagates through the physics, the observation (e.g. the renderer) and the
    policy (Degrave et al. 2019, section 3.4).

    Args:
        scene: a `diffcam.Scene` (any batch size B), or anything with ``initial_state()`` and
            ``step(state, action)``.
        policy: observation -> actions (B, n_actions).
        observe: an `Observer`, e.g. `pixel_observer`.
        steps: physics steps; a multiple of ``control_every``.
        state: initial state (default: the scene's).
        control_every: physics steps per control step. The policy acts at a lower rate than the
            physics (the action is held in between), which saves observations and network calls.
        gradient_decay: alpha per physics step: identity forward, gradient x alpha backward
            (paper, section 3.2), on every path: through the physics and through the
            observation (renderer) and the policy's action alike (damping the physics path
            only would leave the closed loop through the observation undamped).
        checkpoint_every: if set, recompute every segment of this many control steps in the
            backward pass (torch.utils.checkpoint) instead of storing it: memory for long
            rollouts, at the price of one more forward pass.
        keep_records: stack the observer's records into the result; False drops them as soon
            as the graph allows (a long pixel rollout's frames would fill the memory).
        memory: the observer's memory to start from (None: a fresh start).
        compile_physics: call ``scene.step(state, action, compile=True)`` (a `diffcam.Scene`
            then steps through `physics.compiled_step`); False steps a `diffcam.Scene` eagerly
            (``compile=False``, not its default path's switch to compiled after many steps).
            `physics.dispatch` decides the path from that request:
            ``scene.explain("step", action=..., compile=compile_physics)`` says which.
        observation_gradient: False observes a detached state: the loss still reaches the
            policy's parameters through every action and the physics, but not the state
            through the observation (the renderer), so the closed loop carries no gradient.
            A biased gradient, for long horizons where the closed loop's gradient explodes
            (measured on the swing-up from hard-edged pixels at alpha = 0.98, it did not help:
            soft silhouettes did, see docs/tutorials/swingup.md).

    Returns:
        `PolicyRollout` with the trajectory, the actions, the records and the final memory.
    """
    if steps % control_every:
        raise ValueError(f"steps ({steps}) must be a multiple of control_every ({control_every})")
    state = scene.initial_state() if state is None else state
    control_steps = steps // control_every
    from .scene import Scene

    # The request, stated to the scene (whose `step` asks `physics.dispatch` for the path):
    # compile_physics=False is eager, not the scene's default path, which turns compiled
    # after a number of steps, so that a run (and its resume) steps the same way throughout.
    # Anything else with a ``step(state, action)`` is asked only for compiled steps.
    explicit = compile_physics or isinstance(scene, Scene)
    step_options = {"compile": bool(compile_physics)} if explicit else {}

    # A Scene asked for compiled physics steps each held action as one rollout call under
    # that action sequence (`diffcam.Scene.rollout`: for a reduced world, the libraries built
    # ahead of time, one autograd node per control step): the same values and gradients as
    # stepping it control_every times, without per-step Python and autograd nodes.
    # (anything else with such a ``rollout``, e.g. a timed proxy of a Scene, too)
    chained = bool(compile_physics) and control_every > 1 and hasattr(scene, "rollout")
    # the held action's gradient from its j-th physics step is scaled by alpha^j
    hold_scale = gradient_decay ** torch.arange(control_every, dtype=torch.float64)

    def hold(action: torch.Tensor) -> torch.Tensor:
        """(control_every, B, A): ``action`` repeated, its gradient at step j times alpha^j."""
        repeated = action.expand(control_every, *action.shape)
        if gradient_decay == 1.0:
            return repeated
        scale = hold_scale.to(action).view(-1, *[1] * action.dim())
        detached = repeated.detach()
        return detached + scale * (repeated - detached)

    def run(*tensors, count: int, has_memory: bool):
        current = physics.State(*tensors[:4])
        current_memory = tensors[4] if has_memory else None
        out_chunks, out_actions, out_records = [], [], []
        for _ in range(count):
            # alpha on every path that crosses a physics step, the policy's included: the
            # state is decayed once before it is observed and stepped, and the held action's
            # gradient from its j-th step is scaled by alpha^j, so a gradient from k steps later
            # arrives scaled by alpha^k whichever way it went (physics, or renderer -> policy).
            decayed = physics.decay_state_gradient(current, gradient_decay)
            if current_memory is not None:  # e.g. past frames: one control step older
                current_memory = physics.decay_gradient(
                    current_memory, gradient_decay**control_every
                )
            seen = (
                decayed
                if observation_gradient
                else physics.State(*(t.detach() for t in decayed.tensors()))
            )
            observation, current_memory, record = observe(seen, current_memory)
            action = policy(observation)
            if chained:
                # the rollout decays the gradient reaching each step's input state itself
                # (its first step's included), so it starts from the undecayed state
                chunk = scene.rollout(
                    control_every, state=current, actions=hold(action), compile=True,
                    gradient_decay=gradient_decay, check_finite=False,
                )[1:]  # fmt: skip
                current = chunk[-1]
            else:
                steps_out, current = [], decayed
                for j in range(control_every):
                    if j:
                        current = physics.decay_state_gradient(current, gradient_decay)
                    held = physics.decay_gradient(action, gradient_decay**j)
                    current = scene.step(current, held, **step_options)
                    steps_out.append(current)
                chunk = physics.State.stack(steps_out)
            out_chunks.append(chunk)
            out_actions.append(action)
            if keep_records:
                out_records.append(record)
        # the segment's states as (count * control_every, B, ...) tensors
        flat = [torch.cat(parts) for parts in zip(*(c.tensors() for c in out_chunks), strict=True)]
        return (*flat, current_memory, *out_actions, *out_records)

    initial = state
    pieces, actions, records = [], [], []
    segment = checkpoint_every or control_steps
    for start in range(0, control_steps, segment):
        count = min(segment, control_steps - start)
        last = initial if not pieces else pieces[-1][-1]
        inputs = (*last.tensors(), *([memory] if memory is not None else []))
        options = {"count": count, "has_memory": memory is not None}
        if checkpoint_every and torch.is_grad_enabled():
            out = checkpoint(run, *inputs, use_reentrant=False, **options)
        else:
            out = run(*inputs, **options)
        pieces.append(physics.State(*out[:4]))
        memory = out[4]
        actions += list(out[5 : 5 + count])
        records += list(out[5 + count :])
    trajectory = physics.State(
        *(
            torch.cat([first[None], *parts])
            for first, *parts in zip(initial.tensors(), *(p.tensors() for p in pieces), strict=True)
        )
    )
    return PolicyRollout(
        trajectory,
        torch.stack(actions),
        torch.stack(records) if keep_records and records[0] is not None else None,
        memory,
    )


def pixel_observer(
    scene, frames: int = 3, edge_softness: float | str = DEFAULT_EDGE_SOFTNESS, downsample: int = 1
) -> Observer:
    """An `Observer` that renders the scene: observation and memory are the frame stack
    (B, 3k, H / d, W / d), the record is the new frame (B, 3, H / d, W / d).

    Args:
        scene: a `diffcam.Scene`.
        frames: k, frames in the stack the policy sees.
        edge_softness: passed to the renderer: by default antialiased edges (the renderer's
            default, `diffcam.DEFAULT_EDGE_SOFTNESS`), whose gradient sees silhouettes
            move, as the policy's BPTT gradient through the frames should; sigma > 0 px for
            soft silhouettes; 0 for hard edges (faster; the frames then pass gradients
            through textures and shading only).
        downsample: d; each frame is rendered at the camera's resolution, then averaged over
            d x d pixel blocks (differentiable) before it joins the stack, once per frame.
    """

    def observe(state: physics.State, stack: torch.Tensor | None):
        frame = scene.render(state, edge_softness=edge_softness)
        if downsample > 1:
            frame = torch.nn.functional.avg_pool2d(frame, downsample)
        stack = push_frame(stack, frame, frames)
        return stack, stack, frame

    return observe


@dataclasses.dataclass
class PixelRollout:
    """What `pixel_rollout` returns.

    trajectory: physics.State with a leading time axis (steps + 1, B, N, ...).
    actions: (control_steps, B, n_actions) the actions the policy chose.
    frames: (control_steps, B, 3, H, W) the frames the policy saw (the newest of each stack).
    """

    trajectory: physics.State
    actions: torch.Tensor
    frames: torch.Tensor


def pixel_rollout(
    scene,
    policy: Callable[[torch.Tensor], torch.Tensor],
    steps: int,
    state: physics.State | None = None,
    control_every: int = 1,
    frames: int = 3,
    gradient_decay: float = 1.0,
    checkpoint_every: int | None = None,
    edge_softness: float | str = DEFAULT_EDGE_SOFTNESS,
) -> PixelRollout:
    """Simulate ``steps`` physics steps with a controller that sees only rendered frames.

    `policy_rollout` with a `pixel_observer`; see there for the arguments. ``policy`` maps a
    frame stack (B, 3k, H, W) to actions (B, n_actions), e.g. a `PixelPolicy`.

    Returns:
        `PixelRollout` with the trajectory, the actions and the frames seen.
    """
    result = policy_rollout(
        scene, policy, pixel_observer(scene, frames, edge_softness), steps, state,
        control_every=control_every, gradient_decay=gradient_decay,
        checkpoint_every=checkpoint_every,
    )  # fmt: skip
    return PixelRollout(result.trajectory, result.actions, result.records)
