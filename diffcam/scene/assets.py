"""Textures: reading image files, and finding a scene's texture files.

Textures named in ``[textures]`` are looked up relative to the scene file, then in
``$DIFFCAM_ASSETS``, then among the bundled textures (``diffcam/data/textures``, the package's
`TEXTURES_DIR`).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from ..errors import SceneError, did_you_mean
from .paths import TEXTURES_DIR

if TYPE_CHECKING:
    from .validate import SceneConfig


@functools.lru_cache(maxsize=64)
def _read_png(path: str, mtime: float) -> np.ndarray:
    from PIL import Image

    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"), dtype=np.uint8).copy()


def load_texture(path: str | Path, *, device=None, dtype=torch.float32) -> torch.Tensor:
    """Read an image file as a (3, Ht, Wt) tensor in [0, 1] (row 0 = the image's top row)."""
    p = Path(path)
    arr = _read_png(str(p.resolve()), p.stat().st_mtime)
    t = torch.from_numpy(arr).to(device=device, dtype=dtype) / 255.0
    return t.permute(2, 0, 1).contiguous()


def resolve_texture(name: str, rel: str, cfg: SceneConfig) -> Path:
    candidates = [cfg.base_dir / rel]
    if os.environ.get("DIFFCAM_ASSETS"):
        candidates.append(Path(os.environ["DIFFCAM_ASSETS"]) / rel)
    candidates.append(TEXTURES_DIR / rel)  # the bundled textures (package data)
    for c in candidates:
        if c.is_file():
            return c
    bundled = sorted(p.name for p in TEXTURES_DIR.glob("*.png"))
    raise SceneError(
        f"texture file {rel!r} not found (looked in "
        + ", ".join(str(c.parent) for c in candidates)
        + ")"
        + did_you_mean(rel, bundled),
        file=cfg.file,
        key=f"textures.{name}",
        accepted="a PNG path relative to the scene file, or a bundled texture: "
        + ", ".join(bundled),
    )
