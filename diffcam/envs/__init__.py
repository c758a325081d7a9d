"""Gymnasium environments from scene files (opt-in: ``import diffcam.envs``; needs
``pip install diffcam[gym]``, i.e. gymnasium >= 1.0).

- `SceneVectorEnv`: B worlds of any scene file as a `gymnasium.vector.VectorEnv`, stepped in one
  batched call; observations ``"state"``, ``"pixels"`` or ``"both"``; actions from the motors.
  numpy in, numpy out by default (PPO / SAC); `SceneVectorEnv.step_tensors` (or
  ``differentiable=True``) keeps the autograd graph from observations and rewards back to the
  actions and the scene's parameters (BPTT).
- `SceneEnv`: one world as a `gymnasium.Env` (``check_env``, wrappers, single-env libraries).
- `SceneTask` (any scene: jittered starts, zero reward unless given) and `SwingUpTask` (the
  pendulum-cart swing-up of `diffcam.cartpole`, the paper's per-step cost as the reward).
- Ids, registered on import: ``diffcam/PendulumCartSwingUp-v0`` and ``diffcam/Scene-v0``
  (``gym.make("diffcam/Scene-v0", scene=PATH)``); ``gym.make_vec`` builds one batched env.

Example::

    import gymnasium as gym
    import diffcam.envs

    envs = gym.make_vec("diffcam/PendulumCartSwingUp-v0", num_envs=8, obs="state")
    obs, info = envs.reset(seed=0)
    obs, reward, terminated, truncated, info = envs.step(envs.action_space.sample())
"""

from __future__ import annotations

try:
    import gymnasium as _gymnasium
except ImportError as _error:  # pragma: no cover - exercised in a subprocess by the tests
    raise ImportError(
        "diffcam.envs needs gymnasium >= 1.0, which is not installed: "
        "pip install diffcam[gym]  (or: pip install 'gymnasium>=1.0')"
    ) from _error

if int(_gymnasium.__version__.split(".")[0]) < 1:  # pragma: no cover
    raise ImportError(
        f"diffcam.envs needs gymnasium >= 1.0 (its vector API), found {_gymnasium.__version__}: "
        "pip install -U diffcam[gym]  (or: pip install -U 'gymnasium>=1.0')"
    )

from .registration import (  # noqa: E402
    SCENE_ID,
    SWINGUP_ID,
    make_scene_env,
    make_scene_vector_env,
    make_swingup_env,
    make_swingup_vector_env,
    register_envs,
)
from .single import SceneEnv  # noqa: E402
from .tasks import SceneTask, SwingUpTask  # noqa: E402
from .vector import OBS_MODES, SceneVectorEnv  # noqa: E402

register_envs()

__all__ = [
    "OBS_MODES",
    "SCENE_ID",
    "SWINGUP_ID",
    "SceneEnv",
    "SceneTask",
    "SceneVectorEnv",
    "SwingUpTask",
    "make_scene_env",
    "make_scene_vector_env",
    "make_swingup_env",
    "make_swingup_vector_env",
    "register_envs",
]
