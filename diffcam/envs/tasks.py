"""What an environment needs beyond its scene: random starts, reward, termination, the state
observation and the episode length.

`SceneTask` fits any scene file: its starts jitter every hinge and slider (and the velocity of
every free body) around the file's state, its state observation is every moving body's pose and
velocity, and its reward is zero unless a ``reward`` function is given. `SwingUpTask` is the
pendulum-cart swing-up: its starts, its features and the paper's per-step cost as a reward,
from `diffcam.cartpole` (the problem's definition, shared with the training code of the
repository's ``tasks.swingup``, not re-derived).

A task works on whole batches of torch tensors (B worlds at once) and stays differentiable:
the env's differentiable step backpropagates through `reward` and `initial_state`.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

import physics
from physics.posing import JointMotion, pose_joints

from .. import cartpole

__all__ = ["SceneTask", "SwingUpTask"]


def _subtrees(world) -> dict[int, list[int]]:
    """Body index -> the bodies below it through joints (itself included)."""
    n = world.n_bodies
    below: dict[int, list[int]] = {b: [] for b in range(n)}
    for parent, child in zip(world.joint_parent, world.joint_child, strict=True):
        if parent < n:
            below[parent].append(child)

    def collect(body: int, seen: list[int]) -> list[int]:
        if body not in seen:
            seen.append(body)
            for child in below[body]:
                collect(child, seen)
        return seen

    return {b: collect(b, []) for b in range(n)}


class SceneTask:
    """The task of any scene file: jittered starts, a state observation, an optional reward.

    Args:
        noise: half-width of the uniform jitter of the starts: every hinge's angle (rad) and
            rate (rad/s) and every slider's offset (m) and speed (m/s) around the file's state
            (offsets kept within the joint's limits), and each free body's linear (m/s) and
            angular (rad/s) velocity (it carries whatever hangs from it through joints). 0: the
            file's state exactly.
        reward: ``reward(trajectory, action) -> (B,)``, trajectory a `physics.State` (K + 1, B,
            ...) from the state before the step through the K physics steps of one control
            step, action (B, n_actuators). Default: zero.
        terminated: ``terminated(state) -> (B,) bool``; default: never.
        max_episode_steps: env steps before an episode is truncated (None: never).
        control_every: physics steps per env step (the action is held in between).

    Subclass it for a task of your own: override `initial_state`, `reward`, `terminated`,
    `features` (with `feature_names`) and `info`.
    """

    def __init__(
        self,
        noise: float = 0.05,
        reward: Callable | None = None,
        terminated: Callable | None = None,
        max_episode_steps: int | None = 1000,
        control_every: int = 1,
    ) -> None:
        if not (noise >= 0 and math.isfinite(noise)):
            raise ValueError(f"SceneTask: noise is {noise!r}; use a finite number >= 0")
        if control_every < 1:
            raise ValueError(f"SceneTask: control_every is {control_every!r}; use 1 or more")
        if max_episode_steps is not None and max_episode_steps < 1:
            raise ValueError(
                f"SceneTask: max_episode_steps is {max_episode_steps!r}; use 1 or more, or None"
            )
        self.noise = float(noise)
        self._reward = reward
        self._terminated = terminated
        self.max_episode_steps = max_episode_steps
        self.control_every = int(control_every)

    # ------------------------------------------------------------------ binding
    def bind(self, scene) -> None:
        """Called once by the env with its scene (batch B): check it and read its layout."""
        world = scene.world
        self._moving = [i for i, s in enumerate(world.is_static) if not s]
        if not self._moving:
            raise ValueError(f"{scene.path}: every body is static; an env needs a moving body")
        children = set(world.joint_child)
        subtree = _subtrees(world)
        # Free roots: moving bodies that are no joint's child. Jittering their velocity as a
        # rigid motion of their whole subtree keeps every joint below them satisfied.
        self._roots = [(b, subtree[b]) for b in self._moving if b not in children]
        self._joints = [
            j for j, kind in enumerate(world.joint_types) if kind in ("hinge", "slider")
        ]
        config_joints = {j["name"]: j for j in scene.config.joints}
        self._file_q = [
            float(config_joints.get(world.joint_names[j], {}).get("position", 0.0))
            for j in range(world.n_joints)
        ]

    # ------------------------------------------------------------------ the task
    def initial_state(self, scene, generator: torch.Generator) -> physics.State:
        """B random starts (a `physics.State` of the scene's batch), drawn on the CPU from
        ``generator`` (a fixed number of draws per call)."""
        base = scene.initial_state()
        if self.noise == 0:
            return base
        world = scene.world
        batch, like = base.position.shape[0], base.position
        joints, roots = self._joints, self._roots
        draws = torch.rand(batch, 2 * len(joints) + 6 * len(roots), generator=generator)
        unit = (2 * draws - 1).to(like)
        motions = []
        for k, j in enumerate(joints):
            q = self.noise * unit[:, 2 * k]
            if world.joint_has_limits[j]:
                lower = world.joint_lower[:, j] - self._file_q[j]
                upper = world.joint_upper[:, j] - self._file_q[j]
                q = torch.minimum(torch.maximum(q, lower.detach()), upper.detach())
            motions.append(
                JointMotion(
                    name=world.joint_names[j],
                    kind=world.joint_types[j],
                    parent=world.joint_parent[j],
                    child=world.joint_child[j],
                    anchor_parent=world.anchor_parent[:, j],
                    axis_parent=world.axis_parent[:, j],
                    position=q,
                    velocity=self.noise * unit[:, 2 * k + 1],
                )
            )
        position, rotation, velocity, spin = base.tensors()
        if motions:
            position, rotation, velocity, spin = pose_joints(
                position, rotation, velocity, spin, motions, world.joint_parent, world.joint_child
            )
        offset = 2 * len(joints)
        for k, (root, below) in enumerate(roots):
            dv = self.noise * unit[:, offset + 6 * k : offset + 6 * k + 3]
            dw = self.noise * unit[:, offset + 6 * k + 3 : offset + 6 * k + 6]
            arm = position[:, below] - position[:, root, None]
            moved = torch.zeros(world.n_bodies, dtype=torch.bool, device=like.device)
            moved[below] = True
            add_v = torch.zeros_like(velocity)
            add_v[:, below] = dv[:, None] + torch.linalg.cross(dw[:, None].expand_as(arm), arm)
            add_w = torch.where(moved[None, :, None], dw[:, None], torch.zeros_like(spin))
            velocity, spin = velocity + add_v, spin + add_w
        return physics.State(position, rotation, velocity, spin)

    def reward(self, trajectory: physics.State, action: torch.Tensor) -> torch.Tensor:
        """(B,) the reward of one control step (see the class docstring)."""
        if self._reward is None:
            return trajectory.position.new_zeros(trajectory.position.shape[1])
        return self._reward(trajectory, action)

    def terminated(self, state: physics.State) -> torch.Tensor:
        """(B,) bool: the episode ended in ``state`` (a terminal state of the task)."""
        if self._terminated is None:
            return torch.zeros(
                state.position.shape[0], dtype=torch.bool, device=state.position.device
            )
        return self._terminated(state).to(torch.bool)

    def feature_names(self, scene) -> list[str]:
        """The names of `features`' columns."""
        names = []
        for b in self._moving:
            body = scene.body_names[b]
            names += [f"{body}.position.{a}" for a in "xyz"]
            names += [f"{body}.rotation.{r}{c}" for c in "01" for r in "012"]
            names += [f"{body}.velocity.{a}" for a in "xyz"]
            names += [f"{body}.angular_velocity.{a}" for a in "xyz"]
        return names

    def features(self, state: physics.State) -> torch.Tensor:
        """(B, 15 M) the state observation: for each of the M moving bodies, its position
        (m), the first two columns of its rotation (continuous, unlike angles), its velocity
        (m/s) and angular velocity (rad/s), world frame."""
        m = self._moving
        batch = state.position.shape[0]
        rotation = state.rotation[:, m, :, :2].transpose(-1, -2).reshape(batch, len(m), 6)
        parts = [state.position[:, m], rotation, state.linear_velocity[:, m]]
        parts.append(state.angular_velocity[:, m])
        return torch.cat(parts, -1).reshape(batch, -1)

    def info(self, state: physics.State) -> dict[str, torch.Tensor]:
        """Extra (B,) per-world values reported in the env's ``info`` after each step."""
        return {}


class SwingUpTask(SceneTask):
    """The pendulum-cart swing-up (`diffcam.cartpole`) as an env task.

    - Starts: `cartpole.random_starts` (uniform in ``ranges``: by default x within 0.5 m, every
      pole angle, x_dot within 0.5 m/s, theta_dot within 1 rad/s) made into states by
      `cartpole.states_from_starts`.
    - Reward: minus the paper's per-step cost (`cartpole.step_cost`: the tip's distance from the
      upright target plus ``speed_weight`` times its squared speed), averaged over the
      ``control_every`` physics steps of the env step. An episode's mean reward per env step is
      then exactly minus the training loss of its trajectory (``tasks.swingup.swingup_loss``,
      the mean of the same cost over its physics steps).
    - State observation: `cartpole.state_features` (x, x_dot, sin theta, cos theta,
      theta_dot).
    - Episode: ``seconds`` of simulated time (the paper's 3 s training episode by default), in
      env steps of ``control_every`` physics steps (`cartpole.episode_steps`); never
      terminated early (the rail's limits keep the cart on it). ``info["upright_error"]`` is
      `cartpole.upright_error` (rad), ``info["is_success"]`` is it below
      ``upright_threshold`` (the task's success at an episode's last step).

    Args:
        seconds: simulated time per episode (s); e.g. the evaluation's 90.
        control_every: physics steps per env step (the action is held in between).
        speed_weight: weight of the tip-speed penalty (s^2/m).
        target: the cost's target for the tip, ``"fixed"`` or ``"cart"`` (see
            `cartpole.step_cost`).
        upright_threshold: rad; within it of upright counts as a success.
        ranges: a `cartpole.StartRanges` (default: `StartRanges()`).

    The defaults are those of the training code's ``tasks.swingup.SwingUpConfig``.
    """

    def __init__(
        self,
        *,
        seconds: float = 3.0,
        control_every: int = 2,
        speed_weight: float = 0.01,
        target: str = "fixed",
        upright_threshold: float = 0.2,
        ranges: cartpole.StartRanges | None = None,
    ) -> None:
        if target not in ("fixed", "cart"):
            raise ValueError(f"SwingUpTask: target is {target!r}; use 'fixed' or 'cart'")
        super().__init__(noise=0.0, control_every=control_every)
        self.seconds = float(seconds)
        self.speed_weight = speed_weight
        self.target = target
        self.upright_threshold = upright_threshold
        self.ranges = cartpole.StartRanges() if ranges is None else ranges
        self.max_episode_steps = None  # set by bind (needs the scene's timestep)

    def bind(self, scene) -> None:
        super().bind(scene)
        self.cartpole = cartpole.CartPole.from_scene(scene)
        physics_steps = cartpole.episode_steps(
            self.cartpole.timestep, self.seconds, self.control_every
        )
        self.max_episode_steps = physics_steps // self.control_every

    def initial_state(self, scene, generator: torch.Generator) -> physics.State:
        starts = cartpole.random_starts(scene.batch_size, generator, self.ranges, dtype=scene.dtype)
        return cartpole.states_from_starts(scene, starts.to(scene.device), cartpole=self.cartpole)

    def reward(self, trajectory: physics.State, action: torch.Tensor) -> torch.Tensor:
        cost = cartpole.step_cost(trajectory[1:], self.cartpole, self.speed_weight, self.target)
        return -cost.mean(0)

    def feature_names(self, scene) -> list[str]:
        return list(cartpole.STATE_FEATURES)

    def features(self, state: physics.State) -> torch.Tensor:
        return cartpole.state_features(state, self.cartpole)

    def info(self, state: physics.State) -> dict[str, torch.Tensor]:
        error = cartpole.upright_error(state, self.cartpole)
        return {"upright_error": error, "is_success": error < self.upright_threshold}
