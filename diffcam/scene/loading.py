"""Loading a scene file: `read_scene_file` parses the TOML, `load_scene` validates it (with
overrides) and builds the `Scene`."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from ..errors import SceneError
from .paths import resolve_scene
from .scene import Scene
from .validate import validate_scene


def read_scene_file(path: str | Path) -> dict:
    """Parse a TOML scene file, or a bundled scene by name (``"pendulum_cart"``), into a dict
    (raises `SceneError` for a missing/bad file or an unknown name)."""
    p = resolve_scene(path)
    if p != Path(path):
        path = p
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SceneError(f"cannot read the file ({e})", file=str(path)) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SceneError(f"invalid TOML: {e}", file=str(path)) from None


def load_scene(
    path: str | Path,
    batch_size: int = 1,
    device=None,
    dtype: torch.dtype = torch.float32,
    overrides: Mapping[str, Any] | None = None,
) -> Scene:
    """Load a TOML scene file (docs/reference/scene-file.md), or an MJCF model (``.xml``, converted by
    `diffcam.mjcf`), or a bundled scene by name (``"pendulum_cart"``, see
    `diffcam.scene.bundled_scenes`), into a `Scene`.

    Args:
        path: the scene file, or a bundled scene's name (an existing file of that name wins).
        batch_size: B, the number of worlds simulated and rendered together.
        device: where tensors live (default: CPU, or the device of tensor overrides).
        dtype: float32 (default) or float64.
        overrides: key path -> number, list or tensor (may require grad; shape of the key or
            (B, ...) with one value per batch element). See the `diffcam.scene` docstring.

    Raises:
        SceneError: anything wrong with the file, its textures or the overrides.
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise SceneError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
        raise SceneError(f"dtype must be a floating-point torch.dtype, got {dtype!r}")
    if device is None and overrides:
        for v in overrides.values():
            if isinstance(v, torch.Tensor):
                device = v.device
                break
    if Path(path).suffix.lower() == ".xml":  # an MJCF (MuJoCo) model: see diffcam.mjcf
        from ..mjcf import read_mjcf

        data = read_mjcf(path)
    else:
        resolved = resolve_scene(path)
        if resolved != Path(path):  # a bundled scene's name: messages name its file
            path = resolved
        data = read_scene_file(path)
    config = validate_scene(
        data,
        file=str(path),
        base_dir=Path(path).resolve().parent,
        batch_size=batch_size,
        overrides=overrides,
    )
    source = (data, Path(path).resolve().parent, dict(overrides or {}))
    return Scene(config, batch_size=batch_size, device=device, dtype=dtype, source=source)
