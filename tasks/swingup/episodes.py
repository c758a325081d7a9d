"""One batch of episodes as an ``nn.Module`` (starts -> loss): the configuration, the policy
and the rollout."""

from __future__ import annotations

import dataclasses

import torch
from torch import nn

import physics
from diffcam.cartpole import (
    CartPole,
    episode_steps,
    state_features,
    states_from_starts,
    step_cost,
    upright_error,
)
from diffcam.cartpole.controller import controller_policy, observed_scene
from diffcam.cartpole.structure import as_floats
from diffcam.policy import PolicyRollout, pixel_observer, policy_rollout

from .cost import FEATURE_SCALE, balance_cost, swingup_loss, upright_stretches


@dataclasses.dataclass(frozen=True)
class SwingUpConfig:
    """Task, controller and BPTT settings of a swing-up run (stored with checkpoints/weights).

    observation: "pixels" (a `PixelPolicy` on rendered frames) or "state" (a `StatePolicy` on
        `state_features`).
    seconds: simulated time per training episode (the paper: 3 s).
    control_every: physics steps per control step (the action is held in between).
    frames: frames in the stack a pixel policy sees (the paper: the current one and two past).
    gradient_decay: alpha per physics step (paper, section 3.2).
    bptt_segment: control steps per checkpointed segment of the rollout (None: store the
        whole graph; a pixel episode at 288 x 96 needs checkpointing to fit in memory).
    edge_softness: renderer silhouette softness (pixels); > 0 adds gradients at the edges but
        makes a render several times slower. At 0 the frames still depend smoothly on the poses
        through bilinear texture sampling (the paper's renderer, section 3.4): the pole is
        striped and the cart wood-grained for that. Measured: enough to learn the swing-up at
        a short horizon (gradient decay 0.9), not to settle the balance at a long one (0.98),
        where the hard-edged closed loop's gradient exploded; 1 px did that. The default
        stays 0 (hard edges), unlike the renderer's (antialiased edges): it is the measured
        recipe's first phase (docs/tutorials/swingup.md), and weights files store their
        own value. ``"antialias"``: the renderer's antialiased
        edges (`diffcam.render`), each edge pixel covered in proportion.
    speed_weight: weight of the tip-speed penalty (s^2/m).
    target: the loss's target for the tip, "fixed" or "cart" (see `step_cost`).
    balance_share: the last round(balance_share * B) episodes of a batch of B are scored by
        the quadratic `balance_loss` (angle, angular velocity, cart position and velocity,
        the default `BalanceWeights`), the others by the paper's `swingup_loss` (0, the
        default: every episode). The recipe's balance phase draws those last rows near
        upright (`StartRanges.upright_share`, the same share): the balance loss settles the
        pole where the paper's loss left a limit cycle, and the paper's loss on the other
        starts keeps the swing-up and the catch, which a phase of the balance loss alone
        unlearned (docs/tutorials/swingup.md).
    upright_threshold: rad; within it of upright counts as upright in the metrics.
    width, hidden: `PixelPolicy` channels and hidden units (hidden: also the `StatePolicy`).
    render_downscale: the policy's frames are rendered through the camera at 1 / this of
        its resolution (`diffcam.PinholeCamera.downscaled`; the bundled camera's 288 x 96 at 2:
        144 x 48), about render_downscale^2 times fewer pixels to draw and differentiate than
        rendering at full resolution and pooling (``downsample``), which it replaces. Edge
        softness is in the smaller image's pixels. Videos and evaluation videos stay at full
        resolution. A `RandomizedScene` is seen through its own cameras downscaled
        (`RandomizedScene.downscaled`).
    downsample: each rendered frame is averaged over downsample x downsample pixel blocks
        before the policy sees it (`pixel_observer`). The network's first layer is built for
        the product render_downscale x downsample (`PixelPolicy`'s ``downsample``).
    compile_physics: step the physics through `physics.compiled_step` (torch.compile). The
        same step; compiled, it does not pay per-op overhead (at B = 16 the eager step is
        dominated by it, above all when the rail's limit rows are active and the 20 solver
        sweeps run). The first call compiles (minutes; seconds from a warm Inductor cache).
    observation_gradient: False stops the gradient from the observation (the renderer) back
        into the state (`policy_rollout`). Tried for settling the pixel policy at a long
        horizon: it did not help (soft silhouettes did).
    """

    observation: str = "pixels"
    seconds: float = 3.0
    control_every: int = 2
    frames: int = 3
    gradient_decay: float = 0.99
    bptt_segment: int | None = 25
    # hard edges on purpose: the recipe as measured (see above), not the renderer's default
    edge_softness: float | str = 0.0
    speed_weight: float = 0.01
    target: str = "fixed"
    balance_share: float = 0.0
    upright_threshold: float = 0.2
    width: int = 16
    hidden: int = 64
    downsample: int = 1
    render_downscale: int = 1
    compile_physics: bool = False
    observation_gradient: bool = True

    def __post_init__(self) -> None:
        if self.observation not in ("pixels", "state"):
            raise ValueError(
                f"SwingUpConfig.observation is {self.observation!r}; use 'pixels' or 'state'"
            )
        if self.control_every < 1 or self.frames < 1:
            raise ValueError("SwingUpConfig.control_every and .frames must be at least 1")
        if self.render_downscale < 1:
            raise ValueError("SwingUpConfig.render_downscale must be at least 1")
        if self.target not in ("fixed", "cart"):
            raise ValueError(f"SwingUpConfig.target is {self.target!r}; use 'fixed' or 'cart'")
        if not 0.0 <= self.balance_share <= 1.0:
            raise ValueError(f"SwingUpConfig.balance_share is {self.balance_share}; use 0 to 1")

    def steps(self, timestep: float, seconds: float | None = None) -> int:
        """Physics steps for ``seconds`` (default: an episode), rounded to whole control steps."""
        seconds = self.seconds if seconds is None else seconds
        return episode_steps(timestep, seconds, self.control_every)


def make_policy(config: SwingUpConfig, max_action: float) -> nn.Module:
    """A fresh zero-output policy for ``config``: `PixelPolicy` or `StatePolicy`
    (`diffcam.cartpole.controller_policy`, as a shipped controller is loaded)."""
    return controller_policy(dataclasses.asdict(config), max_action, input_scale=FEATURE_SCALE)


def motor_limit(scene) -> float:
    """The rail motor's maximal force (N): the policies' action range."""
    joint = next(j for j in scene.config.joints if j["name"] == "rail")
    return float(as_floats(joint["motor"]["max"])[0])


class SwingUpEpisodes(nn.Module):
    """One batch of swing-up episodes as a module: starts (B, 4) -> (loss, metrics).

    Everything the policy does in an episode happens inside one ``forward`` (it is called at
    every control step), so one forward and one backward per iteration: what
    ``DistributedDataParallel`` expects. The scene is not a module (it holds no parameters).

    Args:
        scene: the pendulum-cart `diffcam.Scene`, batch size B.
        policy: observation -> actions (B, 1); see `make_policy`.
        config: `SwingUpConfig`.
    """

    def __init__(self, scene, policy: nn.Module, config: SwingUpConfig) -> None:
        super().__init__()
        self.scene = scene
        self.policy = policy
        self.config = config
        self.cartpole = CartPole.from_scene(scene)
        self._views: dict[int, tuple] = {}  # id(scene) -> (scene, its downscaled view)

    def observed_scene(self, scene=None):
        """The scene the policy's frames are rendered from: ``scene`` (default this one) seen
        through its camera `downscaled` by ``config.render_downscale`` (made once per scene
        and kept, with its own static-layer cache)."""
        scene = self.scene if scene is None else scene
        factor = self.config.render_downscale
        if factor == 1:
            return scene
        kept = self._views.get(id(scene))
        if kept is None or kept[0] is not scene:
            kept = (scene, observed_scene(scene, factor))
            self._views[id(scene)] = kept
        return kept[1]

    def observer(self, scene=None):
        """The `Observer` of ``config.observation`` (on ``scene``, default this one)."""
        scene = self.scene if scene is None else scene
        if self.config.observation == "pixels":
            c = self.config
            return pixel_observer(
                self.observed_scene(scene), c.frames, c.edge_softness, c.downsample
            )
        return lambda state, memory: (state_features(state, self.cartpole), None, None)

    def rollout(
        self,
        state: physics.State,
        steps: int,
        memory: torch.Tensor | None = None,
        scene=None,
    ) -> PolicyRollout:
        """`policy_rollout` from ``state`` for ``steps`` physics steps with this config (no
        records kept); ``scene`` replaces this one (e.g. a timed proxy)."""
        scene = self.scene if scene is None else scene
        c = self.config
        return policy_rollout(
            scene,
            self.policy,
            self.observer(scene),
            steps,
            state,
            control_every=c.control_every,
            gradient_decay=c.gradient_decay,
            checkpoint_every=c.bptt_segment,
            keep_records=False,
            memory=memory,
            compile_physics=c.compile_physics,
            observation_gradient=c.observation_gradient,
        )

    def forward(self, starts: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Run one episode per start and return the loss.

        Args:
            starts: (B, 4) (x, theta, x_dot, theta_dot) in m, rad, m/s, rad/s.

        Returns:
            loss: scalar, the per-step cost averaged over every step and episode: `step_cost`
                (the paper's) for the first episodes, `balance_cost` for the last
                round(balance_share * B).
            metrics: detached scalars ``success_rate`` (fraction upright at the end) and
                ``upright_fraction`` (fraction of states upright), from the true state.
        """
        state = states_from_starts(self.scene, starts, self.cartpole)
        result = self.rollout(state, self.config.steps(self.cartpole.timestep))
        c = self.config
        balance = round(c.balance_share * starts.shape[0])
        if balance == 0:
            loss = swingup_loss(result.trajectory, self.cartpole, c.speed_weight, c.target)
        else:
            # (T, B) per-step costs, each episode by its own loss, then one mean (the episodes
            # weigh alike, as in either loss alone)
            later = result.trajectory[1:]
            paper = step_cost(later[:, :-balance], self.cartpole, c.speed_weight, c.target)
            settle = balance_cost(later[:, -balance:], self.cartpole)
            loss = torch.cat([paper, settle], 1).mean()
        with torch.no_grad():
            error = upright_error(result.trajectory, self.cartpole)
            stats = upright_stretches(error, self.cartpole.timestep, self.config.upright_threshold)
        metrics = {
            "success_rate": stats["success"].to(loss.dtype).mean(),
            "upright_fraction": stats["upright_fraction"].mean(),
        }
        return loss, metrics
