"""Controllers that see only pixels, and the differentiable rollout that feeds them.

A `PixelPolicy` maps a stack of the last k camera frames to actions. `pixel_rollout` renders
every control step, feeds the frame stack to the policy, holds the action for ``control_every``
physics steps and returns the whole trajectory, so a loss on it backpropagates through the
physics, the renderer and the network (Degrave et al. 2019, section 3.4).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

import physics

__all__ = ["PixelPolicy", "PixelRollout", "pixel_rollout", "push_frame"]


class PixelPolicy(nn.Module):
    """A compact CNN: a stack of k RGB frames (B, 3k, H, W) -> actions (B, n_actions).

    Architecture, for the paper's 288 x 96 camera: a 5x5 convolution of stride 4 first
    (downsample early: most of the cost of a CNN is in its first layers, and a 4x coarser image
    still shows a 1 m pole clearly), then two 3x3 convolutions of stride 2, a global average
    over what is left of the rows, a hidden layer and a linear output squashed by tanh and
    scaled to ``max_action``. The output layer starts at zero, so the initial policy is the
    zero policy (paper, section 3.2): training starts from "do nothing", not from noise.

    Args:
        n_actions: number of action columns (the scene's actuators).
        frames: k, frames in the stack (the current one and k - 1 past ones).
        max_action: actions lie in [-max_action, max_action] (N or N m for force motors).
        width: channels of the convolutions.
        hidden: units of the hidden layer.
    """

    def __init__(
        self,
        n_actions: int,
        frames: int = 3,
        max_action: float = 1.0,
        width: int = 16,
        hidden: int = 64,
    ) -> None:
        super().__init__()
        self.frames = frames
        self.max_action = max_action
        self.features = nn.Sequential(
            nn.Conv2d(3 * frames, width, kernel_size=5, stride=4, padding=2),
            nn.ReLU(),
            nn.Conv2d(width, 2 * width, kernel_size=3, stride=2, padding=1),
            nn.ReLU(),
            nn.Conv2d(2 * width, 2 * width, kernel_size=3, stride=2, padding=1),
            nn.ReLU(),
        )
        # Keep the horizontal layout (where the cart is) but average over rows: the image is
        # wide and short, and the pole's lean shows in every row band.
        self.pool = nn.AdaptiveAvgPool2d((1, 8))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(2 * width * 8, hidden), nn.ReLU())
        self.output = nn.Linear(hidden, n_actions)
        nn.init.zeros_(self.output.weight)
        nn.init.zeros_(self.output.bias)

    def forward(self, stacked_frames: torch.Tensor) -> torch.Tensor:
        """Actions (B, n_actions) from frames (B, 3k, H, W) in [0, 1], newest last."""
        features = self.head(self.pool(self.features(stacked_frames * 2.0 - 1.0)))
        return self.max_action * torch.tanh(self.output(features))


def push_frame(stack: torch.Tensor | None, frame: torch.Tensor, frames: int) -> torch.Tensor:
    """A new frame stack (B, 3k, H, W) with ``frame`` (B, 3, H, W) last and the oldest dropped.

    With ``stack`` None (the first step) the stack is k copies of ``frame``.
    """
    if stack is None:
        return frame.repeat(1, frames, 1, 1)
    return torch.cat([stack[:, 3:], frame], 1)


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
    edge_softness: float = 0.0,
) -> PixelRollout:
    """Simulate ``steps`` physics steps with a controller that sees only rendered frames.

    Args:
        scene: a `diffcam.Scene` (any batch size B).
        policy: frame stack (B, 3k, H, W) -> actions (B, n_actions); e.g. a `PixelPolicy`.
        steps: physics steps; a multiple of ``control_every``.
        state: initial state (default: the scene's).
        control_every: physics steps per control step. The policy acts at a lower rate than the
            physics (the action is held in between), which saves renders and network calls.
        frames: k, frames in the stack the policy sees.
        gradient_decay: alpha per physics step: identity forward, gradient x alpha backward
            (paper, section 3.2).
        checkpoint_every: if set, recompute every segment of this many control steps in the
            backward pass (torch.utils.checkpoint) instead of storing it: memory for long
            rollouts, at the price of one more forward pass.
        edge_softness: passed to the renderer (pixels); > 0 gives silhouette gradients.

    Returns:
        `PixelRollout` with the trajectory, the actions and the frames seen.
    """
    if steps % control_every:
        raise ValueError(f"steps ({steps}) must be a multiple of control_every ({control_every})")
    state = scene.initial_state() if state is None else state
    control_steps = steps // control_every

    def control(current: physics.State, stack: torch.Tensor | None):
        frame = scene.render(current, edge_softness=edge_softness)
        stack = push_frame(stack, frame, frames)
        action = policy(stack)
        states = []
        for _ in range(control_every):
            current = scene.step(physics.decay_state_gradient(current, gradient_decay), action)
            states.append(current)
        return states, stack, action, frame

    states, actions, seen = [state], [], []
    stack = None
    segment = checkpoint_every or control_steps
    for start in range(0, control_steps, segment):
        count = min(segment, control_steps - start)

        def run(*tensors, _count=count, _has_stack=stack is not None):
            current = physics.State(*tensors[:4])
            current_stack = tensors[4] if _has_stack else None
            out_states, out_actions, out_frames = [], [], []
            for _ in range(_count):
                new_states, current_stack, action, frame = control(current, current_stack)
                current = new_states[-1]
                out_states += new_states
                out_actions.append(action)
                out_frames.append(frame)
            flat = [t for s in out_states for t in s.tensors()]
            return (*flat, current_stack, *out_actions, *out_frames)

        inputs = (*states[-1].tensors(), *([stack] if stack is not None else []))
        if checkpoint_every and torch.is_grad_enabled():
            out = checkpoint(run, *inputs, use_reentrant=False)
        else:
            out = run(*inputs)
        n_states = count * control_every
        states += [physics.State(*out[4 * i : 4 * i + 4]) for i in range(n_states)]
        stack = out[4 * n_states]
        actions += list(out[4 * n_states + 1 : 4 * n_states + 1 + count])
        seen += list(out[4 * n_states + 1 + count :])
    return PixelRollout(physics.State.stack(states), torch.stack(actions), torch.stack(seen))
