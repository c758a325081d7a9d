"""Shared helpers for the scene-layer tests: a tiny valid scene and a minimal TOML writer.

Exposed as the ``scene_tools`` fixture (a namespace with ``TINY_SCENE``, ``to_toml`` and
``write_scene(data, folder, name)``), so the test modules import nothing from each other.
(``single_thread`` and ``tiny_pendulum_cart``, which the task tests use too, are in
tests/conftest.py.)
"""

from __future__ import annotations

import copy
import json
import math
import re
import types
from pathlib import Path

import pytest

TINY_SCENE = {
    "world": {"gravity": [0.0, 0.0, -9.81], "timestep": 0.01, "solver_iterations": 4},
    "camera": {
        "resolution": [24, 12],
        "position": [0.0, -3.0, 1.0],
        "look_at": [0.0, 0.0, 1.0],
        "fov_y_deg": 50.0,
        "background": [0.9, 0.9, 0.9],
    },
    "light": {"ambient": 0.5, "direction": [0.3, -1.0, 1.0], "intensity": 0.5},
    "textures": {"wood": "wood.png"},
    "bodies": [
        {
            "name": "floor",
            "shape": "plane",
            "size": [4.0, 4.0],
            "static": True,
            "color": [0.5, 0.5, 0.5],
        },
        {
            "name": "cart",
            "shape": "box",
            "size": [0.3, 0.2, 0.1],
            "mass": 1.0,
            "position": [0.0, 0.0, 1.0],
            "texture": "wood",
            "collide": False,
        },
        {
            "name": "pole",
            "shape": "capsule",
            "size": [0.05, 0.8],
            "mass": 0.2,
            "position": [0.0, -0.1, 0.55],
            "quat": [1.0, 0.0, 0.0, 0.0],
            "texture": "wood",
            "collide": False,
        },
        {
            "name": "ball",
            "shape": "sphere",
            "size": 0.2,
            "density": 100.0,
            "position": [1.0, 0.0, 0.5],
            "velocity": [0.0, 0.0, 0.0],
            "friction": 0.8,
            "restitution": 0.5,
        },
    ],
    "joints": [
        {
            "name": "rail",
            "type": "slider",
            "parent": "world",
            "child": "cart",
            "anchor": [0.0, 0.0, 1.0],
            "axis": [1.0, 0.0, 0.0],
            "limits": [-1.0, 1.0],
            "damping": 0.1,
            "motor": {"type": "force", "max": 20.0},
        },
        {
            "name": "hinge",
            "type": "hinge",
            "parent": "cart",
            "child": "pole",
            "anchor": [0.0, -0.1, 1.0],
            "axis": [0.0, 1.0, 0.0],
            "damping": 0.01,
        },
    ],
}

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE.match(k) else json.dumps(k)


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=True)
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v)} to TOML")


def to_toml(data: dict) -> str:
    """Serialise nested dicts / lists / scalars to TOML (enough for scene files)."""
    head, tail = [], []
    for k, v in data.items():
        if isinstance(v, dict):
            tail.append(f"\n[{_key(k)}]")
            tail += [f"{_key(kk)} = {_value(vv)}" for kk, vv in v.items()]
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            for item in v:
                tail.append(f"\n[[{_key(k)}]]")
                tail += [f"{_key(kk)} = {_value(vv)}" for kk, vv in item.items()]
        else:
            head.append(f"{_key(k)} = {_value(v)}")
    return "\n".join(head + tail) + "\n"


def write_scene(data: dict, folder, name: str = "scene.toml") -> Path:
    path = Path(folder) / name
    path.write_text(to_toml(data), encoding="utf-8")
    return path


@pytest.fixture
def scene_tools():
    return types.SimpleNamespace(
        TINY_SCENE=copy.deepcopy(TINY_SCENE),
        to_toml=to_toml,
        write_scene=write_scene,
        tiny=lambda: copy.deepcopy(TINY_SCENE),
    )
