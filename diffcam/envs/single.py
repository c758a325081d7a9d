"""`SceneEnv`: one world of a scene file as a `gymnasium.Env` (what ``check_env``, wrappers and
single-env libraries expect). It runs a `SceneVectorEnv` of one world without autoreset."""

from __future__ import annotations

import gymnasium as gym
import numpy as np

from .vector import SceneVectorEnv

__all__ = ["SceneEnv"]


class SceneEnv(gym.Env):
    """One world of a scene as a Gymnasium ``Env``.

    Arguments as `SceneVectorEnv` (``scene``, ``obs``, ``task``, ``differentiable``,
    ``downsample``, ``edge_softness``, ``overrides``, ``dtype``, ``device``), without
    ``num_envs``; ``render_mode`` is None (default) or ``"rgb_array"`` (``render()`` returns
    (H, W, 3) uint8).

    The spaces are the vector env's single spaces. ``step`` returns the observation without
    the batch axis, the reward as a float, terminated / truncated as bools and ``info`` with
    one value per key (no masks). After an episode ends, call ``reset()`` (stepping on keeps
    simulating the same world, still truncated). With ``differentiable=True`` the outputs are
    torch tensors with a batch axis of 1, as `SceneVectorEnv.step_tensors` returns them.

    ``env.vector`` is the underlying one-world `SceneVectorEnv` (``env.vector.state``,
    ``env.vector.scene``, ``env.vector.detach()``).
    """

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, scene, *, render_mode: str | None = None, **kwargs) -> None:
        if "num_envs" in kwargs:
            raise TypeError("SceneEnv is one world; use SceneVectorEnv(num_envs=...) for more")
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode is {render_mode!r}; use 'rgb_array' or None")
        self.vector = SceneVectorEnv(
            scene, num_envs=1, autoreset_mode="disabled", render_mode="rgb_array", **kwargs
        )
        self.render_mode = render_mode
        self.observation_space = self.vector.single_observation_space
        self.action_space = self.vector.single_action_space
        self.metadata = {**type(self).metadata, "render_fps": self.vector.metadata["render_fps"]}
        self.max_episode_steps = self.vector.max_episode_steps

    @property
    def scene(self):
        return self.vector.scene

    @property
    def task(self):
        return self.vector.task

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        # The vector env draws its starts from this env's generator.
        self.vector._np_random = self.np_random
        obs, info = self.vector.reset(options=options)
        if self.vector.differentiable:
            return obs, info
        return self._one(obs), self._one_info(info)

    def step(self, action):
        if self.vector.differentiable:
            return self.vector.step_tensors(self._batched(action))
        obs, reward, terminated, truncated, info = self.vector.step(self._batched(action))
        return (
            self._one(obs),
            float(reward[0]),
            bool(terminated[0]),
            bool(truncated[0]),
            self._one_info(info),
        )

    def render(self):
        if self.render_mode is None:
            gym.logger.warn(
                "render() called with render_mode=None; make the env with render_mode='rgb_array'"
            )
            return None
        return self.vector.render()[0]

    def close(self) -> None:
        self.vector.close()

    def _batched(self, action):
        import torch

        want = self.action_space.shape
        if isinstance(action, torch.Tensor):
            if tuple(action.shape) == want:
                return action[None]
        else:
            array = np.asarray(action)
            if array.shape == want:
                return array[None]
        shape = tuple(getattr(action, "shape", np.shape(action)))
        raise ValueError(
            f"action has shape {shape}; expected {want}, one entry per motor in the order "
            f"{self.scene.actuator_names}"
        )

    @staticmethod
    def _one(obs):
        if isinstance(obs, dict):
            return {k: v[0] for k, v in obs.items()}
        return obs[0]

    @staticmethod
    def _one_info(info: dict) -> dict:
        return {k: v[0] for k, v in info.items() if not k.startswith("_")}
