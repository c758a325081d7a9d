"""`SceneVectorEnv`: B worlds of a scene file as one Gymnasium vector environment.

All B worlds step in one batched `Scene.step` call per physics step (and are drawn in one
`Scene.render` call), so the env costs about what one world costs at small B on a CPU.
"""

from __future__ import annotations

import math
import os
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

import physics

from ..errors import SceneError
from ..renderer.api import DEFAULT_EDGE_SOFTNESS
from .tasks import SceneTask

__all__ = ["OBS_MODES", "SceneVectorEnv"]

OBS_MODES = ("pixels", "state", "both")
_AUTORESET = {
    "next_step": AutoresetMode.NEXT_STEP,
    "same_step": AutoresetMode.SAME_STEP,
    "disabled": AutoresetMode.DISABLED,
}


def _autoreset_mode(value) -> AutoresetMode:
    if isinstance(value, AutoresetMode):
        return value
    if isinstance(value, str) and value.lower() in _AUTORESET:
        return _AUTORESET[value.lower()]
    raise ValueError(
        f"autoreset_mode is {value!r}; use 'next_step' (gymnasium's default), 'same_step' or "
        "'disabled' (or a gymnasium.vector.AutoresetMode)"
    )


def _load(scene, num_envs, overrides, dtype, device):
    """A `Scene` of batch ``num_envs`` from a path or a loaded scene."""
    from ..scene import Scene, load_scene

    if num_envs is not None and (not isinstance(num_envs, int) or num_envs < 1):
        raise ValueError(f"num_envs is {num_envs!r}; use a whole number >= 1")
    if isinstance(scene, (str, os.PathLike)):
        return load_scene(
            scene, batch_size=num_envs or 1, device=device, dtype=dtype, overrides=overrides
        )
    if isinstance(scene, Scene):
        if overrides or (num_envs is not None and num_envs != scene.batch_size):
            return scene.with_overrides(overrides or {}, batch_size=num_envs)
        return scene
    raise TypeError(
        f"scene is a {type(scene).__name__}; pass a scene file path, a "
        "bundled scene's name (e.g. 'pendulum_cart') or a diffcam.Scene"
    )


def _motor_bounds(scene) -> tuple[np.ndarray, np.ndarray]:
    """Per-actuator action bounds (low, high) from the motors and the joints' limits."""
    world = scene.world
    low, high = [], []
    for a, kind in enumerate(world.actuator_type):
        j = world.actuator_joint[a]
        if kind == "force":
            bound = float(world.motor_max[:, a].detach().abs().max())
            low.append(-bound), high.append(bound)
        elif world.actuator_target[a] == "velocity":
            bound = float(world.motor_max_velocity[:, a].detach().abs().max())
            low.append(-bound), high.append(bound)
        elif world.joint_has_limits[j]:
            low.append(float(world.joint_lower[:, j].detach().min()))
            high.append(float(world.joint_upper[:, j].detach().max()))
        elif world.joint_types[j] == "hinge":
            low.append(-math.pi), high.append(math.pi)
        else:
            low.append(-math.inf), high.append(math.inf)
    return np.asarray(low, dtype=np.float32), np.asarray(high, dtype=np.float32)


def _where_rows(mask: torch.Tensor, new: physics.State, old: physics.State) -> physics.State:
    """Rows of ``new`` where ``mask`` (B,) is set, of ``old`` elsewhere."""
    parts = []
    for a, b in zip(new.tensors(), old.tensors(), strict=True):
        parts.append(torch.where(mask.view(-1, *([1] * (a.dim() - 1))), a, b))
    return physics.State(*parts)


class SceneVectorEnv(VectorEnv):
    """B worlds of any scene file as a Gymnasium (>= 1.0) `VectorEnv`.

    Args:
        scene: a scene file path or a loaded `diffcam.Scene` (its overrides, e.g. parameters
            that require grad, stay in force).
        num_envs: B, the number of worlds (default: 1, or a given scene's batch size).
        obs: ``"state"`` (the task's feature vector), ``"pixels"`` (the camera's image) or
            ``"both"`` (a Dict space with keys "pixels" and "state").
        task: a `SceneTask` (default: ``SceneTask()``: jittered starts, zero reward, episodes of
            1000 steps) or `SwingUpTask`.
        differentiable: False (default): ``step``/``reset`` take and return numpy arrays with
            no autograd graph (what PPO / SAC code expects). True: they behave like
            `step_tensors` / `reset_tensors`.
        downsample: pixel observations are averaged over d x d blocks of the camera's image.
        edge_softness: how the pixel observations (and `render`'s frames) draw silhouettes,
            as in `diffcam.render`: antialiased edges by default (the renderer's default), so
            that the tensor mode's gradients see silhouettes move and both modes observe
            the same images; 0 for hard edges (faster where no gradient is wanted, e.g. a
            numpy-mode RL run); sigma > 0 px for soft silhouettes.
        overrides: scene overrides (`diffcam.load_scene`).
        dtype, device: of the simulation (numpy observations are float32 or uint8 whatever
            the dtype).
        autoreset_mode: ``"next_step"`` (default; gymnasium's), ``"same_step"`` or
            ``"disabled"``; see below.
        render_mode: ``"rgb_array"`` (the only mode).

    Spaces (numpy mode): ``single_action_space`` is a float32 Box with one entry per motor, in
    ``scene.actuator_names`` order, in the motor's units: a force motor's force or torque
    within ±``max``; a servo's target position within its joint's limits (±pi for a hinge
    without limits), or its target velocity within ±``max_velocity``. The physics clips force
    motors to ±``max``. ``single_observation_space``: state, a float32 Box (D,) (unbounded);
    pixels, a uint8 Box (H, W, 3) (image rows top first, gymnasium's image layout); both, a
    Dict of the two. ``observation_space`` / ``action_space`` are the batched spaces (B, ...).

    Tensor mode (`step_tensors`, `reset_tensors`, or ``differentiable=True``): actions (B, A)
    in the scene's dtype, observations as torch tensors keeping the autograd graph: state
    (B, D), pixels (B, 3, H, W) float in [0, 1] (diffcam's image layout), both a dict; reward
    (B,) in the scene's dtype; terminated / truncated (B,) bool. Gradients reach the actions,
    the starting state and every scene parameter through each step (call `detach` to cut
    the graph, e.g. for truncated BPTT). Pixel gradients follow the renderer's rules: the
    default antialiased edges pass gradients through silhouettes (``edge_softness=0``, hard
    edges, does not).

    One env step holds the action for ``task.control_every`` physics steps; the reward is the
    task's for those steps. An episode is truncated after ``task.max_episode_steps`` env steps
    (``truncated`` set, ``terminated`` not) or ends when the task says it is terminal.

    Autoreset (gymnasium 1.0's semantics, ``metadata["autoreset_mode"]``):

    - next_step (default): when world i's episode ends at step t (terminated or truncated),
      step t + 1 ignores its action, starts it afresh from a random start and returns that
      start's observation with reward 0 and terminated = truncated = False.
    - same_step: step t returns world i's new start's observation already;
      ``info["final_obs"]`` holds the observations of the ended episodes' last states (the
      whole batch; valid where ``info["_final_obs"]``), and the reward, terminated and
      truncated are those of the ended episode.
    - disabled: nothing restarts by itself; ``reset(options={"reset_mask": mask})`` restarts
      the worlds in ``mask``.

    Randomness: the starts are drawn from a torch generator seeded from the env's
    ``np_random`` at each (auto)reset, so ``reset(seed=s)`` reproduces every later start.

    ``reset`` options: ``"state"``: a `physics.State` of batch B to start from instead of
    random starts; ``"reset_mask"``: (B,) bool, reset only those worlds (the others continue).

    ``info`` holds ``elapsed_steps`` (env steps in the current episode) and the task's values
    (e.g. ``upright_error``, ``is_success``), each (B,), with gymnasium's ``"_key"`` masks.
    """

    metadata: dict[str, Any] = {
        "render_modes": ["rgb_array"],
        "autoreset_mode": AutoresetMode.NEXT_STEP,
    }

    def __init__(
        self,
        scene,
        num_envs: int | None = None,
        *,
        obs: str = "state",
        task: SceneTask | None = None,
        differentiable: bool = False,
        downsample: int = 1,
        edge_softness: float | str = DEFAULT_EDGE_SOFTNESS,
        overrides: dict | None = None,
        dtype: torch.dtype = torch.float32,
        device=None,
        autoreset_mode="next_step",
        render_mode: str | None = "rgb_array",
    ) -> None:
        if not isinstance(obs, str) or obs not in OBS_MODES:
            raise ValueError(
                f"obs is {obs!r}; use 'state' (the task's feature vector), 'pixels' (camera "
                "images) or 'both' (a Dict space with 'pixels' and 'state')"
            )
        if not isinstance(downsample, int) or downsample < 1:
            raise ValueError(f"downsample is {downsample!r}; use a whole number >= 1")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode is {render_mode!r}; use 'rgb_array' (or None)")
        mode = _autoreset_mode(autoreset_mode)
        task = SceneTask() if task is None else task
        if not isinstance(task, SceneTask):
            raise TypeError(
                f"task is a {type(task).__name__}; pass a diffcam.envs.SceneTask (or subclass)"
            )
        self.scene = _load(scene, num_envs, overrides, dtype, device)
        if self.scene.n_actuators == 0:
            raise SceneError(
                "the scene has no motors, so an env would have no actions",
                file=self.scene.path,
                key="joints",
                accepted='a motor on a hinge or slider joint, e.g. motor = { type = "force", '
                "max = 10.0 } in its [[joints]] table",
            )
        task.bind(self.scene)
        self.task = task
        self.obs_mode = obs
        self.differentiable = bool(differentiable)
        self.downsample = downsample
        self.edge_softness = (
            edge_softness if isinstance(edge_softness, str) else float(edge_softness)
        )
        self.render_mode = render_mode
        self.num_envs = self.scene.batch_size
        self.metadata = {
            **type(self).metadata,
            "autoreset_mode": mode,
            "render_fps": 1.0 / (self.scene.timestep * task.control_every),
        }
        self.autoreset_mode = mode
        self.max_episode_steps = task.max_episode_steps

        low, high = _motor_bounds(self.scene)
        self.single_action_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self.feature_names = task.feature_names(self.scene)
        spaces = {}
        if obs in ("pixels", "both"):
            width, height = self.scene.camera.width, self.scene.camera.height
            shape = (height // downsample, width // downsample, 3)
            if min(shape[:2]) < 1:
                raise ValueError(
                    f"downsample {downsample} leaves no pixels of the {width} x {height} camera"
                )
            spaces["pixels"] = gym.spaces.Box(0, 255, shape, dtype=np.uint8)
        if obs in ("state", "both"):
            size = len(self.feature_names)
            spaces["state"] = gym.spaces.Box(-np.inf, np.inf, (size,), dtype=np.float32)
        self.single_observation_space = (
            gym.spaces.Dict(spaces) if obs == "both" else next(iter(spaces.values()))
        )
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)

        self._state: physics.State | None = None
        self._elapsed = torch.zeros(self.num_envs, dtype=torch.long)
        self._needs_reset = torch.zeros(self.num_envs, dtype=torch.bool)

    # ------------------------------------------------------------------ properties
    @property
    def state(self) -> physics.State:
        """The current `physics.State` of the B worlds (with its graph in tensor mode)."""
        if self._state is None:
            raise RuntimeError("the env has no state yet; call env.reset() first")
        return self._state

    def detach(self) -> None:
        """Cut the autograd graph of the current state (truncated BPTT): later gradients stop
        here."""
        self._state = physics.State(*(t.detach() for t in self.state.tensors()))

    # ------------------------------------------------------------------ reset / step
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start every world (or those in ``options["reset_mask"]``) afresh: (obs, info).

        numpy unless ``differentiable``; see the class docstring for ``options``."""
        if self.differentiable:
            return self.reset_tensors(seed=seed, options=options)
        with torch.no_grad():
            obs, info = self._reset(seed, options)
            self.detach()
        return self._to_numpy_obs(obs), self._to_numpy_info(info)

    def reset_tensors(self, *, seed: int | None = None, options: dict | None = None):
        """`reset` with torch outputs: observations keep the graph to the start state and
        the scene's parameters."""
        return self._reset(seed, options)

    def step(self, actions):
        """One env step of all B worlds: (obs, reward, terminated, truncated, info).

        ``actions``: (B, n_actuators) numpy array (or tensor); numpy outputs without a graph
        unless ``differentiable``."""
        if self.differentiable:
            return self.step_tensors(actions)
        with torch.no_grad():
            obs, reward, terminated, truncated, info = self._step(actions)
            self.detach()
        info = self._to_numpy_info(info)
        if "final_obs" in info:
            info["final_obs"] = self._to_numpy_obs(info["final_obs"])
        return (
            self._to_numpy_obs(obs),
            reward.detach().cpu().numpy().astype(np.float64),
            terminated.cpu().numpy(),
            truncated.cpu().numpy(),
            info,
        )

    def step_tensors(self, actions: torch.Tensor):
        """`step` on torch tensors, differentiable: actions (B, A) -> (obs, reward (B,),
        terminated (B,), truncated (B,), info), all tensors; gradients flow from obs and reward
        back to the actions, the earlier actions and starts, and the scene's parameters."""
        return self._step(actions)

    def render(self) -> np.ndarray | None:
        """(B, H, W, 3) uint8 frames of the current states at the camera's full resolution."""
        if self.render_mode is None:
            gym.logger.warn("render() called with render_mode=None; pass render_mode='rgb_array'")
            return None
        with torch.no_grad():
            frames = self.scene.render(self.state, edge_softness=self.edge_softness)
        return self._to_uint8(frames)

    def close_extras(self, **kwargs) -> None:
        self._state = None

    # ------------------------------------------------------------------ internals
    def _generator(self) -> torch.Generator:
        """A CPU torch generator seeded from ``np_random`` (one draw per (auto)reset)."""
        seed = int(self.np_random.integers(0, 2**63 - 1))
        return torch.Generator().manual_seed(seed)

    def _starts(self) -> physics.State:
        return self.task.initial_state(self.scene, self._generator())

    def _reset(self, seed, options):
        if seed is not None:
            if not isinstance(seed, (int, np.integer)):
                raise TypeError(
                    f"seed is {seed!r}; pass one int (it seeds the starts of all "
                    f"{self.num_envs} worlds) or None"
                )
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(int(seed))
        options = dict(options or {})
        state = options.pop("state", None)
        mask = options.pop("reset_mask", None)
        if options:
            raise ValueError(
                f"reset: unknown options {sorted(options)}; accepted: 'state' (a "
                "physics.State of the batch), 'reset_mask' ((B,) bool)"
            )
        if state is None:
            fresh = self._starts()
        elif isinstance(state, physics.State):
            fresh = state.to(dtype=self.scene.dtype, device=self.scene.device)
            if fresh.position.shape[:1] != (self.num_envs,) or fresh.position.dim() != 3:
                raise ValueError(
                    f"reset: options['state'] has position {tuple(fresh.position.shape)}; "
                    f"expected ({self.num_envs}, {self.scene.world.n_bodies}, 3), one row per "
                    "world"
                )
        else:
            raise TypeError(f"reset: options['state'] is a {type(state).__name__}; pass a State")
        if mask is None or self._state is None:
            mask = torch.ones(self.num_envs, dtype=torch.bool)
        else:
            mask = torch.as_tensor(np.asarray(mask), dtype=torch.bool).reshape(-1)
            if mask.shape != (self.num_envs,):
                raise ValueError(
                    f"reset: options['reset_mask'] has {mask.numel()} entries; expected "
                    f"{self.num_envs} (one bool per world)"
                )
        if self._state is None or bool(mask.all()):
            self._state = fresh
        else:
            self._state = _where_rows(mask.to(self.scene.device), fresh, self._state)
        self._elapsed[mask] = 0
        self._needs_reset[mask] = False
        return self._observe(self._state), self._info(self._state)

    def _check_actions(self, actions) -> torch.Tensor:
        if self._state is None:
            raise RuntimeError("call env.reset() before env.step()")
        want = (self.num_envs, self.scene.n_actuators)
        if not isinstance(actions, torch.Tensor):
            try:
                actions = torch.as_tensor(np.asarray(actions, dtype=np.float64))
            except (TypeError, ValueError) as e:
                raise TypeError(
                    f"actions must be numbers of shape {want}, got {type(actions).__name__}: {e}"
                ) from None
        if tuple(actions.shape) != want:
            raise ValueError(
                f"actions have shape {tuple(actions.shape)}; expected {want} = (num_envs, "
                f"motors), one column per motor in the order {self.scene.actuator_names}"
                + (
                    f" (for one motor, reshape with actions.reshape({want[0]}, 1))"
                    if want[1] == 1 and actions.numel() == want[0]
                    else ""
                )
            )
        if not torch.isfinite(actions.detach()).all():
            rows = (~torch.isfinite(actions.detach())).any(1).nonzero().flatten().tolist()
            raise ValueError(f"actions of worlds {rows} are not finite (NaN or inf)")
        return actions.to(dtype=self.scene.dtype, device=self.scene.device)

    def _step(self, actions):
        action = self._check_actions(actions)
        start = self.state
        states = [start]
        for _ in range(self.task.control_every):
            states.append(self.scene.step(states[-1], action))
        state = states[-1]
        reward = self.task.reward(physics.State.stack(states), action)
        terminated = self.task.terminated(state).to(reward.device)
        self._elapsed += 1
        truncated = torch.zeros_like(terminated)
        if self.max_episode_steps is not None:
            truncated = (self._elapsed >= self.max_episode_steps).to(terminated.device)
            truncated = truncated & ~terminated
        extra = {}
        mode = self.autoreset_mode
        if mode == AutoresetMode.NEXT_STEP and bool(self._needs_reset.any()):
            # Worlds whose episode ended at the previous step start afresh now.
            mask = self._needs_reset.to(reward.device)
            state = _where_rows(mask, self._starts(), state)
            reward = torch.where(mask, torch.zeros_like(reward), reward)
            terminated, truncated = terminated & ~mask, truncated & ~mask
            self._elapsed[self._needs_reset] = 0
        done = (terminated | truncated).cpu()
        if mode == AutoresetMode.SAME_STEP and bool(done.any()):
            extra["final_obs"] = self._observe(state)
            extra["final_info"] = self._info(state)
            state = _where_rows(done.to(reward.device), self._starts(), state)
            self._elapsed[done] = 0
        self._needs_reset = done if mode == AutoresetMode.NEXT_STEP else torch.zeros_like(done)
        self._state = state
        info = self._info(state)
        if extra:
            info["final_obs"], info["_final_obs"] = extra["final_obs"], done.clone()
            info["final_info"], info["_final_info"] = extra["final_info"], done.clone()
        return self._observe(state), reward, terminated, truncated, info

    def _observe(self, state: physics.State):
        out = {}
        if self.obs_mode in ("pixels", "both"):
            frame = self.scene.render(state, edge_softness=self.edge_softness)
            if self.downsample > 1:
                frame = torch.nn.functional.avg_pool2d(frame, self.downsample)
            out["pixels"] = frame
        if self.obs_mode in ("state", "both"):
            out["state"] = self.task.features(state)
        return out if self.obs_mode == "both" else next(iter(out.values()))

    def _info(self, state: physics.State) -> dict:
        values = {"elapsed_steps": self._elapsed.clone(), **self.task.info(state)}
        info = {}
        for key, value in values.items():
            info[key] = value
            info[f"_{key}"] = torch.ones(self.num_envs, dtype=torch.bool)
        return info

    @staticmethod
    def _to_uint8(frames: torch.Tensor) -> np.ndarray:
        """(B, 3, H, W) in [0, 1] -> (B, H, W, 3) uint8."""
        image = (frames.detach().clamp(0, 1) * 255).round().to(torch.uint8)
        return image.permute(0, 2, 3, 1).cpu().numpy()

    def _to_numpy_obs(self, obs):
        def one(key, value):
            if key == "pixels":
                return self._to_uint8(value)
            return value.detach().cpu().numpy().astype(np.float32)

        if isinstance(obs, dict):
            return {k: one(k, v) for k, v in obs.items()}
        return one(self.obs_mode, obs)

    def _to_numpy_info(self, info: dict) -> dict:
        out = {}
        for key, value in info.items():
            if key == "final_obs":
                out[key] = value  # converted by `step` (pixels need the image layout)
            elif isinstance(value, torch.Tensor):
                out[key] = value.detach().cpu().numpy()
            elif isinstance(value, dict):
                out[key] = self._to_numpy_info(value)
            else:
                out[key] = value
        return out

    def __repr__(self) -> str:
        return (
            f"SceneVectorEnv({str(self.scene.path)!r}, num_envs={self.num_envs}, "
            f"obs={self.obs_mode!r}, task={type(self.task).__name__}, "
            f"differentiable={self.differentiable})"
        )
