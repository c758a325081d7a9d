"""Where the bundled scenes, textures and controller weights are: ``diffcam/data/`` inside the
installed package (its package data, found with `importlib.resources`; meshes in ``meshes/``), and how a bundled
scene is named: `bundled_scenes`, `resolve_scene`.

A scene argument that names an existing file is that file. Otherwise a bare name (no folder,
no suffix) is looked up among the bundled scenes: ``"pendulum_cart"`` is
``SCENES_DIR / "pendulum_cart.toml"``. Anything else raises `SceneError` listing the bundled
names.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

from ..errors import SceneError, did_you_mean


def _data_dir() -> Path:
    data = files("diffcam") / "data"
    # setuptools installs the package as files (never zipped), so this is a real folder
    if not isinstance(data, os.PathLike):
        raise ImportError(f"diffcam's package data is not on the file system: {data!r}")
    return Path(os.fspath(data))


DATA_DIR = _data_dir()
SCENES_DIR = DATA_DIR / "scenes"
TEXTURES_DIR = DATA_DIR / "textures"
WEIGHTS_DIR = DATA_DIR / "weights"
MESHES_DIR = DATA_DIR / "meshes"


def bundled_scenes() -> list[str]:
    """The names of the bundled scenes (``SCENES_DIR/<name>.toml``), sorted."""
    return sorted(p.stem for p in SCENES_DIR.glob("*.toml"))


def resolve_scene(path: str | Path) -> Path:
    """The scene file ``path`` names: the file itself if it exists, else the bundled scene of
    that name (``"pendulum_cart"``).

    Raises:
        SceneError: neither a file nor a bundled scene's name (the message lists the bundled
            names, with a did-you-mean).
    """
    p = Path(path)
    if p.is_file():
        return p
    names = bundled_scenes()
    bare = p.name == str(path) and not p.suffix
    if bare and p.name in names:  # (a folder of that name here is not a scene file)
        return SCENES_DIR / f"{p.name}.toml"
    if p.exists():
        raise SceneError("not a file", file=str(path))
    if p.stem in names and not bare:
        hint = f"; the bundled scene of that name is loaded by its name, {p.stem!r}"
    else:
        hint = did_you_mean(p.stem, names)
    what = "no such scene file, nor a bundled scene of that name" if bare else "no such scene file"
    raise SceneError(
        f"{what}{hint}",
        file=str(path),
        accepted="a scene file (.toml, or an MJCF .xml), or a bundled scene: " + ", ".join(names),
    )
