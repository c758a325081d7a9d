"""Overrides: replacing numbers of a parsed scene file (or optional keys) by values or tensors.

`override_paths` lists the key paths a file accepts; `apply_overrides` writes the values into
a copy of the raw data, before validation, and records which keys came from an override.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from ..errors import SceneError, did_you_mean
from .schema import (
    BODY_FIELDS,
    CAMERA_FIELDS,
    JOINT_FIELDS,
    LIGHT_FIELDS,
    MOTOR_FIELDS,
    WORLD_FIELDS,
    ParseContext,
)


def override_paths(data: dict) -> list[str]:
    """Every key path of a (raw) scene that an override may name."""
    paths = [f"world.{k}" for k in WORLD_FIELDS if WORLD_FIELDS[k].numeric]
    paths += [f"camera.{k}" for k in CAMERA_FIELDS if CAMERA_FIELDS[k].numeric]
    paths.append("camera.resolution")  # e.g. to render at a video's size
    paths += [f"light.{k}" for k in LIGHT_FIELDS]
    tex = data.get("textures") if isinstance(data, dict) else None
    if isinstance(tex, dict):
        paths += [f"textures.{k}" for k in tex]
    for section, fields in (("bodies", BODY_FIELDS), ("joints", JOINT_FIELDS)):
        items = data.get(section) if isinstance(data, dict) else None
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                continue
            name = item["name"]
            skip = ("mass", "density", "velocity", "angular_velocity")
            static = item.get("static") is True
            paths += [
                f"{section}.{name}.{k}"
                for k, f in fields.items()
                if f is not None and (f.numeric or k == "size") and not (static and k in skip)
            ]
            if section == "bodies":  # a texture's name, or a (3, Ht, Wt) tensor to wear
                paths.append(f"bodies.{name}.texture")
            motor = item.get("motor") if section == "joints" else None
            if isinstance(motor, dict):
                keys = ("max",) if motor.get("type") == "force" else MOTOR_FIELDS
                paths += [f"joints.{name}.motor.{k}" for k in keys if MOTOR_FIELDS[k].numeric]
    return paths


def apply_overrides(data: dict, overrides: Mapping[str, Any], ctx: ParseContext) -> dict:
    data = copy.deepcopy(data)  # raw TOML data: plain python, cheap to copy
    if not overrides:
        return data
    if not isinstance(overrides, Mapping):
        raise SceneError(
            f"overrides must be a dict of key path -> value, got {type(overrides).__name__}",
            file=ctx.file,
        )
    valid = override_paths(data)
    for path, value in overrides.items():
        if not isinstance(path, str) or path not in valid:
            near = _near_paths(path, valid)
            raise SceneError(
                f"override {path!r} names nothing in this scene{did_you_mean(path, valid)}",
                file=ctx.file,
                key=f"overrides[{path!r}]",
                accepted="key paths such as " + ", ".join(near),
            )
        parts = path.split(".")
        if parts[0] in ("world", "camera", "light", "textures"):
            table = data.setdefault(parts[0], {})
            table[parts[1]] = value
        else:
            item = next(
                it for it in data[parts[0]] if isinstance(it, dict) and it.get("name") == parts[1]
            )
            if len(parts) == 4:  # joints.<name>.motor.<key>
                item["motor"][parts[3]] = value
            elif parts[0] == "bodies" and parts[2] == "texture":
                _wear_texture(data, item, value)
            else:
                item[parts[2]] = value
        ctx.overridden.add(path)
    return data


def _wear_texture(data: dict, body: dict, value: Any) -> None:
    """A body's ``texture`` override: a declared texture's name, or a (3, Ht, Wt) tensor that
    becomes a texture of its own (``_<body>_texture``); the body's colour, if any, goes."""
    import torch

    if isinstance(value, torch.Tensor):
        name = f"_{body['name']}_texture"
        textures = data.get("textures")
        data["textures"] = {**(textures if isinstance(textures, dict) else {}), name: value}
        value = name
    body["texture"] = value
    body.pop("color", None)


def _near_paths(path: Any, valid: list[str], n: int = 8) -> list[str]:
    if not isinstance(path, str):
        return valid[:n]
    head = path.rsplit(".", 1)[0]
    same_head = [p for p in valid if p.startswith(head + ".")]
    if same_head:
        return same_head[:n]
    import difflib

    close = difflib.get_close_matches(path, valid, n=n, cutoff=0.3)
    return close or valid[:n]
