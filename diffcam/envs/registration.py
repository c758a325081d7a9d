"""Gymnasium ids: ``diffcam/PendulumCartSwingUp-v0`` and ``diffcam/Scene-v0`` (any scene file).

    import gymnasium as gym
    import diffcam.envs  # registers the ids

    env = gym.make("diffcam/PendulumCartSwingUp-v0", obs="state")
    envs = gym.make_vec("diffcam/PendulumCartSwingUp-v0", num_envs=8, obs="pixels")
    env = gym.make("diffcam/Scene-v0", scene="pendulum", obs="both")  # or a file's path

``gym.make("diffcam.envs:diffcam/PendulumCartSwingUp-v0")`` imports this package itself.
``make_vec`` builds one batched `SceneVectorEnv` (the ids' ``vector_entry_point``).
"""

from __future__ import annotations

import gymnasium as gym

from ..scene.paths import SCENES_DIR
from .single import SceneEnv
from .tasks import SceneTask, SwingUpTask
from .vector import SceneVectorEnv

__all__ = [
    "SCENE_ID",
    "SWINGUP_ID",
    "make_scene_env",
    "make_scene_vector_env",
    "make_swingup_env",
    "make_swingup_vector_env",
    "register_envs",
]

SWINGUP_ID = "diffcam/PendulumCartSwingUp-v0"
SCENE_ID = "diffcam/Scene-v0"
SWINGUP_SCENE = SCENES_DIR / "pendulum_cart.toml"


# what a ``config`` (e.g. the training code's ``tasks.swingup.SwingUpConfig``) sets of the task
_CONFIG_SETTINGS = ("seconds", "control_every", "speed_weight", "target", "upright_threshold")


def _swingup_task(config=None, ranges=None, seconds=None) -> SwingUpTask:
    """`SwingUpTask` with the settings of ``config`` (an object with those attributes; None:
    the task's defaults), ``ranges`` and ``seconds`` (None: the config's)."""
    settings = {} if config is None else {k: getattr(config, k) for k in _CONFIG_SETTINGS}
    if seconds is not None:
        settings["seconds"] = seconds
    return SwingUpTask(ranges=ranges, **settings)


def make_swingup_env(
    obs: str = "state",
    render_mode: str | None = None,
    scene=None,
    config=None,
    ranges=None,
    seconds: float | None = None,
    **kwargs,
) -> SceneEnv:
    """The pendulum-cart swing-up (`SwingUpTask`) as one `SceneEnv`.

    ``scene``: default the bundled ``pendulum_cart`` (or a path / Scene with the same layout);
    ``config``: an object whose ``seconds``, ``control_every``, ``speed_weight``, ``target`` and
    ``upright_threshold`` set those of `SwingUpTask` (e.g. the training code's
    ``tasks.swingup.SwingUpConfig``; None: the task's defaults); ``ranges``
    (`diffcam.cartpole.StartRanges`) and ``seconds`` (overrides the config's): as in
    `SwingUpTask`; other keyword arguments go to `SceneEnv`."""
    task = _swingup_task(config, ranges, seconds)
    scene = SWINGUP_SCENE if scene is None else scene
    return SceneEnv(scene, obs=obs, task=task, render_mode=render_mode, **kwargs)


def make_swingup_vector_env(
    num_envs: int = 1,
    obs: str = "state",
    scene=None,
    config=None,
    ranges=None,
    seconds: float | None = None,
    **kwargs,
) -> SceneVectorEnv:
    """The swing-up as one batched `SceneVectorEnv` of ``num_envs`` worlds (see
    `make_swingup_env`)."""
    task = _swingup_task(config, ranges, seconds)
    scene = SWINGUP_SCENE if scene is None else scene
    return SceneVectorEnv(scene, num_envs=num_envs, obs=obs, task=task, **kwargs)


def make_scene_env(scene=None, obs: str = "state", task=None, **kwargs) -> SceneEnv:
    """Any scene file as one `SceneEnv` (default task: `SceneTask()`)."""
    if scene is None:
        raise TypeError(f'{SCENE_ID} needs a scene file: gym.make("{SCENE_ID}", scene="...")')
    return SceneEnv(scene, obs=obs, task=SceneTask() if task is None else task, **kwargs)


def make_scene_vector_env(
    num_envs: int = 1, scene=None, obs: str = "state", task=None, **kwargs
) -> SceneVectorEnv:
    """Any scene file as one batched `SceneVectorEnv`."""
    if scene is None:
        raise TypeError(
            f'{SCENE_ID} needs a scene file: gym.make_vec("{SCENE_ID}", num_envs, scene="...")'
        )
    task = SceneTask() if task is None else task
    return SceneVectorEnv(scene, num_envs=num_envs, obs=obs, task=task, **kwargs)


def register_envs() -> None:
    """Register the ids with gymnasium (done by ``import diffcam.envs``; idempotent)."""
    here = __name__
    if SWINGUP_ID not in gym.registry:
        gym.register(
            id=SWINGUP_ID,
            entry_point=f"{here}:make_swingup_env",
            vector_entry_point=f"{here}:make_swingup_vector_env",
        )
    if SCENE_ID not in gym.registry:
        gym.register(
            id=SCENE_ID,
            entry_point=f"{here}:make_scene_env",
            vector_entry_point=f"{here}:make_scene_vector_env",
        )
