"""MJCF import: MuJoCo XML models made of primitives and meshes as diffcam scenes.

::

    scene = diffcam.load_scene("inverted_pendulum.xml", batch_size=8)   # .xml -> this importer
    imported = diffcam.mjcf.import_mjcf("inverted_pendulum.xml")         # the scene dict + notes
    print(diffcam.mjcf.to_toml(imported))                                # a scene file to edit
    # or from the shell:  diffcam import-mjcf model.xml -o scene.toml

What is converted and how (half-sizes to full sizes, ``fromto``, defaults classes, joints,
motors, the camera) is in `diffcam.mjcf.convert`'s docstring. Actions: a MuJoCo ``<motor>``
becomes a force motor whose action is the force ``gear * ctrl`` (``MJCFImport.actuators`` lists
the gears, in MuJoCo's actuator order, which is also the scene's).

``<asset><mesh file=...>`` geoms (OBJ, or STL through the ``mesh`` extra) become mesh bodies
(`diffcam.mjcf.meshes`). Anything diffcam cannot represent (tendons, equality constraints,
explicit inertias, several joints in one body, armature, inline mesh data, ...) raises `MJCFError` (a `diffcam.SceneError`) naming
the element's XML path and line; malformed XML too. What is merely ignored (sites, lights,
sensors, solver tuning) is listed in ``MJCFImport.notes``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .convert import MJCFImport, convert_mjcf
from .xmltree import MJCFError, parse_mjcf_text, read_mjcf_file

__all__ = [
    "MJCFError",
    "MJCFImport",
    "import_mjcf",
    "import_mjcf_string",
    "read_mjcf",
    "to_toml",
    "write_scene_file",
]


def import_mjcf(path: str | Path) -> MJCFImport:
    """Convert an MJCF file into a scene description (`MJCFImport`: ``config``, ``notes``,
    ``actuators``, ``bodies``, ``joints``). Raises `MJCFError`."""
    return convert_mjcf(read_mjcf_file(path), str(path), Path(path).resolve().parent)


def import_mjcf_string(
    text: str, file: str = "<string>", base_dir: str | Path | None = None
) -> MJCFImport:
    """`import_mjcf` of MJCF text (``file`` names it in error messages); mesh files are found
    relative to ``base_dir`` (default: the current directory), as if the model were there."""
    model_dir = Path(base_dir if base_dir is not None else Path.cwd()).resolve()
    return convert_mjcf(parse_mjcf_text(text, file=file), file, model_dir)


def read_mjcf(path: str | Path) -> dict:
    """The scene dict of an MJCF file: what `diffcam.load_scene` validates for ``.xml``."""
    return import_mjcf(path).config


# ---------------------------------------------------------------------------- TOML output
def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{k} = {_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def to_toml(imported: MJCFImport) -> str:
    """The scene as TOML text (docs/reference/scene-file.md), with the notes and the actuator mapping
    as comments at the top."""
    lines = [f"# Imported from {Path(imported.file).name} by diffcam.mjcf (diffcam import-mjcf)."]
    for a in imported.actuators:
        lines.append(
            f"# MuJoCo actuator {a['name']!r} -> motor of joint {a['joint']!r}: "
            f"action (N or N m) = {a['gear']:g} * ctrl"
        )
    for n in imported.notes:
        lines.append(f"# note: {n}")
    config = imported.config
    for section in ("world", "camera", "light"):
        if section in config:
            lines += ["", f"[{section}]"]
            lines += [f"{k} = {_value(v)}" for k, v in config[section].items()]
    for section in ("bodies", "joints"):
        for item in config.get(section, []):
            lines += ["", f"[[{section}]]"]
            lines += [f"{k} = {_value(v)}" for k, v in item.items()]
    return "\n".join(lines) + "\n"


def write_scene_file(imported: MJCFImport, path: str | Path) -> Path:
    """Write `to_toml` of ``imported`` to ``path`` (atomically); returns the path."""
    p = Path(path)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(to_toml(imported), encoding="utf-8")
    tmp.replace(p)
    return p
