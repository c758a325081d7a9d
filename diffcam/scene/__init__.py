"""Scene files: a TOML file declares bodies, joints, motors, the camera and textures.

`load_scene` reads and validates a file (docs/reference/scene-file.md), applies ``overrides`` (any number
in the file, or any optional numeric key, replaced by a value or a tensor that may require
grad), builds the `physics` world and the renderer's camera, primitives and textures, and
returns a `Scene`::

    scene = diffcam.load_scene("pendulum_cart", batch_size=8,
                               overrides={"bodies.pole.mass": m, "camera.fov_y_deg": fov})
    state = scene.initial_state()
    state = scene.step(state, action)          # action (B, n_actuators) or None
    images = scene.render(state)               # (B, 3, H, W), differentiable

Override key paths: ``world.<key>``, ``camera.<key>``, ``bodies.<name>.<key>``,
``joints.<name>.<key>``, ``joints.<name>.motor.<key>`` and ``textures.<name>`` (a (3, Ht, Wt)
tensor in place of the PNG). A tensor override has the key's shape, optionally with a leading
batch axis of size ``batch_size`` (one value per batch element).

A bundled scene is loaded by its name (``"pendulum_cart"``; `bundled_scenes` lists them, the
files are in `SCENES_DIR`); any other argument is a path. Textures named in ``[textures]`` are
looked up relative to the scene file, then in ``$DIFFCAM_ASSETS``, then among the bundled
textures (`TEXTURES_DIR`). An optional ``[light]`` table (``ambient``, ``direction``,
``intensity``) turns on Lambert shading; without it bodies are drawn with their unlit colours.

Every user mistake (unknown key, wrong type, bad value, missing file, unknown body name, bad
override) raises `diffcam.errors.SceneError` naming the file, the key path and what would be
accepted.

Modules: ``schema`` (each key's type and range), ``overrides`` (the key paths an override may
name), ``validate`` (a parsed file checked into a `SceneConfig`), ``assets`` (texture files),
``build`` (the physics world, camera, light and primitives of a config), ``scene`` (`Scene`:
step, rollout, render), ``rendering`` (the static layer cache and `Scene.render_states`),
``describe`` (`Scene.summary`), ``loading`` (`read_scene_file`, `load_scene`), ``paths`` (the
package data: bundled scenes, textures and controller weights under ``diffcam/data``).
"""

from .assets import load_texture
from .loading import load_scene, read_scene_file
from .overrides import override_paths
from .paths import (
    DATA_DIR,
    SCENES_DIR,
    TEXTURES_DIR,
    WEIGHTS_DIR,
    bundled_scenes,
    resolve_scene,
)
from .scene import Scene
from .validate import SceneConfig, validate_scene

__all__ = [
    "Scene",
    "load_scene",
    "load_texture",
    "override_paths",
    "bundled_scenes",
    "resolve_scene",
    "DATA_DIR",
    "SCENES_DIR",
    "TEXTURES_DIR",
    "WEIGHTS_DIR",
    "SceneConfig",
    "read_scene_file",
    "validate_scene",
]
