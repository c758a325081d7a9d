"""Trained swing-up controllers, run without the training code: `load_controller`.

A controller file (the package's ``pendulum_swingup_*.pt``, or one a training run wrote)
holds the network's weights and the settings it was trained with: what it observes, how
often it acts and how its frames are drawn. `Controller` turns those into the network, the
observer and a rollout, with the library's own pieces (`diffcam.PixelPolicy`,
`diffcam.StatePolicy`, `diffcam.pixel_observer`, `diffcam.policy_rollout`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import torch
from torch import nn

from ..policy import PixelPolicy, PolicyRollout, StatePolicy, pixel_observer, policy_rollout
from .cost import STATE_FEATURES, state_features
from .structure import CartPole

__all__ = ["SHIPPED", "Controller", "controller_policy", "load_controller", "observed_scene"]

# name -> file in diffcam.scene.WEIGHTS_DIR
SHIPPED = {
    "pixels": "pendulum_swingup_pixels.pt",
    "pixels_randomized": "pendulum_swingup_pixels_randomized.pt",
    "state": "pendulum_swingup_state.pt",
}


def controller_policy(
    settings: Mapping, max_action: float, input_scale: list[float] | None = None
) -> nn.Module:
    """A fresh network for a controller's settings: a `PixelPolicy` for ``observation ==
    "pixels"`` (``frames``, ``width``, ``hidden``, its first layer for frames pooled by
    ``downsample`` x ``render_downscale``), else a `StatePolicy` on `STATE_FEATURES`
    (``hidden``, ``input_scale``: its features' scales, kept in its weights); actions in
    [-max_action, max_action] (N for the rail's motor)."""
    if settings["observation"] == "pixels":
        return PixelPolicy(
            1,
            frames=settings["frames"],
            max_action=max_action,
            width=settings["width"],
            hidden=settings["hidden"],
            downsample=settings.get("downsample", 1) * settings.get("render_downscale", 1),
        )
    return StatePolicy(
        len(STATE_FEATURES), 1, max_action=max_action, hidden=settings["hidden"],
        input_scale=input_scale,
    )  # fmt: skip


def observed_scene(scene, render_downscale: int):
    """``scene`` seen through its camera (or a `RandomizedScene`'s cameras) downscaled by
    ``render_downscale`` (`diffcam.PinholeCamera.downscaled`): what a pixel controller
    trained at that factor sees. The scene itself for 1."""
    if render_downscale == 1:
        return scene
    if hasattr(scene, "downscaled"):  # a RandomizedScene: its per-episode cameras
        return scene.downscaled(render_downscale)
    if hasattr(scene, "view"):
        return scene.view(camera=scene.camera.downscaled(render_downscale))
    raise ValueError(
        f"a controller's frames at 1/{render_downscale} of the resolution need a diffcam.Scene "
        f"or a RandomizedScene (got {type(scene).__name__})"
    )


@dataclasses.dataclass(frozen=True)
class Controller:
    """A trained pendulum-cart controller and how it sees the scene.

    policy: the network (eval mode): frame stacks (B, 3 * frames, H, W) -> actions (B, 1)
        for pixels, state features (B, 5) -> actions for state.
    settings: what it was trained with (the file's ``config``): ``observation``,
        ``control_every`` (physics steps per action), ``frames``, ``edge_softness``,
        ``downsample``, ``render_downscale``, ...
    info: the file's other entries (``training_episodes``, the recipe, ...).
    """

    policy: nn.Module
    settings: dict
    info: dict

    def observer(self, scene):
        """The `diffcam.policy.Observer` that feeds ``policy`` from ``scene`` (frames drawn
        as in training, or the state features)."""
        s = self.settings
        if s["observation"] == "pixels":
            view = observed_scene(scene, s.get("render_downscale", 1))
            return pixel_observer(view, s["frames"], s["edge_softness"], s.get("downsample", 1))
        cartpole = CartPole.from_scene(scene)
        return lambda state, memory: (state_features(state, cartpole), None, None)

    def rollout(self, scene, steps: int, state=None, memory=None) -> PolicyRollout:
        """The controller acting on ``scene`` (any batch) for ``steps`` physics steps (a
        multiple of ``control_every``) from ``state`` (default: the scene's), without
        gradients, the physics stepped eagerly; ``memory`` (the frame stack) carries on from
        an earlier rollout. `diffcam.policy_rollout`'s result (no records)."""
        with torch.no_grad():
            return policy_rollout(
                scene, self.policy, self.observer(scene), steps, state,
                control_every=self.settings["control_every"], keep_records=False,
                memory=memory,
            )  # fmt: skip


def load_controller(name_or_path: str | Path, scene) -> Controller:
    """A controller file as a `Controller` for ``scene`` (its rail motor's limit bounds the
    actions).

    Args:
        name_or_path: a shipped controller's name (`SHIPPED`: ``"pixels"``,
            ``"pixels_randomized"``, ``"state"``) or a file written by a training run.
        scene: the pendulum-cart `diffcam.Scene` it will act on.

    Raises FileNotFoundError naming the path, ValueError naming the missing key.
    """
    from ..scene import WEIGHTS_DIR

    path = (
        Path(WEIGHTS_DIR / SHIPPED[name_or_path]) if name_or_path in SHIPPED else Path(name_or_path)
    )
    if not path.is_file():
        raise FileNotFoundError(
            f"no controller file at {path}; give a file a training run wrote or one of "
            f"{sorted(SHIPPED)}"
        )
    payload = torch.load(path, map_location="cpu", weights_only=True)
    for key in ("policy", "config"):
        if not isinstance(payload, dict) or key not in payload:
            raise ValueError(f"{path}: not a controller file (no {key!r} entry)")
    settings = dict(payload["config"])
    max_action = float(scene.world.motor_max.detach().abs().max())
    policy = controller_policy(settings, max_action)
    policy.load_state_dict(payload["policy"])
    policy = policy.to(device=scene.device, dtype=scene.dtype).eval()
    info = {k: v for k, v in payload.items() if k not in ("policy", "config")}
    return Controller(policy, settings, info)
