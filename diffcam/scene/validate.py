"""Validation: a parsed scene file (with overrides) checked into a `SceneConfig`.

Sections are checked in this order: world, light, textures, camera, bodies, joints; each
against its field table in `schema`, then the rules that span keys (fov or focal, mass or
density, joints between known bodies, ...).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..errors import SceneError, did_you_mean
from .overrides import _apply_overrides
from .schema import (
    _NAME_RE,
    BODY_FIELDS,
    CAMERA_FIELDS,
    JOINT_FIELDS,
    LIGHT_FIELDS,
    MOTOR_FIELDS,
    SIZE_ACCEPTED,
    SIZE_FIELDS,
    TOP_LEVEL,
    WORLD_FIELDS,
    _check_table,
    _Ctx,
    _item_key,
    _Name,
    _show,
    _TexturePath,
)


@dataclass
class SceneConfig:
    """A validated scene: plain values and tensors, before anything is built."""

    file: str
    base_dir: Path
    world: dict
    camera: dict
    light: dict | None
    textures: dict  # name -> path str or tensor
    bodies: list[dict]
    joints: list[dict]


def validate_scene(
    data: dict,
    *,
    file: str = "<scene>",
    base_dir: str | Path = ".",
    batch_size: int = 1,
    overrides: Mapping[str, Any] | None = None,
) -> SceneConfig:
    """Check a parsed scene (and overrides) without building anything."""
    ctx = _Ctx(file=str(file), batch_size=batch_size, overridden=set())
    if not isinstance(data, dict):
        raise SceneError(f"expected a table at the top level, got {_show(data)}", file=str(file))
    data = _apply_overrides(data, overrides or {}, ctx)
    return _validate(data, ctx, Path(base_dir))


def _validate(data: dict, ctx: _Ctx, base_dir: Path) -> SceneConfig:
    _check_table(data, "", dict.fromkeys(TOP_LEVEL), ctx, required=("camera", "bodies"))

    raw_world = _check_table(data.get("world", {}), "world", WORLD_FIELDS, ctx)
    world = {k: WORLD_FIELDS[k].parse(v, f"world.{k}", ctx) for k, v in raw_world.items()}

    # light (optional; without it the scene is drawn unlit)
    light = None
    if "light" in data:
        raw_light = _check_table(data["light"], "light", LIGHT_FIELDS, ctx)
        light = {k: LIGHT_FIELDS[k].parse(v, f"light.{k}", ctx) for k, v in raw_light.items()}

    textures = _validate_textures(data.get("textures", {}), ctx)
    camera = _validate_camera(data["camera"], textures, ctx)
    bodies = _validate_bodies(data["bodies"], textures, ctx)
    joints = _validate_joints(data.get("joints", []), bodies, ctx)
    return SceneConfig(
        file=ctx.file,
        base_dir=base_dir,
        world=world,
        camera=camera,
        light=light,
        textures=textures,
        bodies=bodies,
        joints=joints,
    )


def _validate_textures(raw_tex: Any, ctx: _Ctx) -> dict:
    """``[textures]``: name -> PNG path (or a tensor override)."""
    if not isinstance(raw_tex, dict):
        raise ctx.error("textures", f'expected a table name = "file.png", got {_show(raw_tex)}')
    textures = {}
    for name, value in raw_tex.items():
        key = f"textures.{name}"
        if not _NAME_RE.match(name):
            raise ctx.error(key, f"bad texture name {name!r}", _Name.accepted)
        textures[name] = _TexturePath().parse(value, key, ctx)
    return textures


def _texture_ref(value: str, key: str, textures: dict, ctx: _Ctx) -> str:
    """A texture name used by ``key``, which must be declared in ``[textures]``."""
    if value not in textures:
        known = ", ".join(textures) or "none declared in [textures]"
        raise ctx.error(
            key,
            f"unknown texture {value!r}{did_you_mean(value, textures)}",
            f"a name declared in [textures]: {known}",
        )
    return value


def _validate_camera(raw: Any, textures: dict, ctx: _Ctx) -> dict:
    """``[camera]``: the pose, the field of view (fov_y_deg or focal) and the background."""
    raw_cam = _check_table(
        raw, "camera", CAMERA_FIELDS, ctx, required=("resolution", "position", "look_at")
    )
    camera = {k: CAMERA_FIELDS[k].parse(v, f"camera.{k}", ctx) for k, v in raw_cam.items()}
    if "fov_y_deg" in camera and "focal" in camera:
        raise ctx.error("camera.focal", "give fov_y_deg or focal, not both", None)
    if "fov_y_deg" not in camera and "focal" not in camera:
        raise ctx.error(
            "camera.fov_y_deg",
            "missing: the camera needs a field of view",
            "fov_y_deg = 40.0, or focal = [fx, fy] (pixels)",
        )
    if "principal_point" in camera and "focal" not in camera:
        raise ctx.error("camera.principal_point", "only allowed together with focal", None)
    if isinstance(camera.get("background"), str):
        camera["background"] = _texture_ref(
            camera["background"], "camera.background", textures, ctx
        )
    _check_camera_geometry(camera, ctx)
    return camera


def _check_camera_geometry(camera: dict, ctx: _Ctx) -> None:
    def arr(v):
        if isinstance(v, torch.Tensor):
            return v.detach().to("cpu", torch.float64).numpy().reshape(-1, 3)
        return np.asarray(v, dtype=float).reshape(-1, 3)

    eye, target = arr(camera["position"]), arr(camera["look_at"])
    up = arr(camera.get("up", [0.0, 0.0, 1.0]))
    fwd = target - eye
    n = np.linalg.norm(fwd, axis=-1)
    if (n < 1e-9).any():
        raise ctx.error("camera.look_at", "equals the camera position", "a point in front")
    fwd = fwd / n[:, None]
    upn = up / np.linalg.norm(up, axis=-1, keepdims=True)
    if (np.linalg.norm(np.cross(fwd, upn), axis=-1) < 1e-6).any():
        raise ctx.error(
            "camera.up", "parallel to the viewing direction", "a direction not along look_at"
        )


def _validate_bodies(raw_bodies: Any, textures: dict, ctx: _Ctx) -> list[dict]:
    """``[[bodies]]``: one or more bodies with unique names."""
    if not isinstance(raw_bodies, list) or not raw_bodies:
        raise ctx.error(
            "bodies",
            f"expected an array of tables ([[bodies]]), got {_show(raw_bodies)}",
            "one or more [[bodies]] tables",
        )
    bodies, names = [], []
    for i, rb in enumerate(raw_bodies):
        key = _item_key("bodies", i, rb)
        _check_table(rb, key, BODY_FIELDS, ctx, required=("name", "shape", "size"))
        name = BODY_FIELDS["name"].parse(rb["name"], f"{key}.name", ctx)
        if name in names:
            raise ctx.error(f"bodies[{i}].name", f"duplicate body name {name!r}", "unique names")
        names.append(name)
        bodies.append(_validate_body(rb, name, textures, ctx))
    return bodies


def _validate_body(rb: dict, name: str, textures: dict, ctx: _Ctx) -> dict:
    """One body: its shape's size, static or with a mass, a texture or a colour."""
    key = f"bodies.{name}"
    b = {"name": name}
    b["shape"] = BODY_FIELDS["shape"].parse(rb["shape"], f"{key}.shape", ctx)
    sf = SIZE_FIELDS[b["shape"]]
    try:
        b["size"] = sf.parse(rb["size"], f"{key}.size", ctx)
    except SceneError as e:
        raise ctx.error(f"{key}.size", e.reason, SIZE_ACCEPTED[b["shape"]]) from None
    for k, v in rb.items():
        if k in ("name", "shape", "size"):
            continue
        b[k] = BODY_FIELDS[k].parse(v, f"{key}.{k}", ctx)
    static = b.get("static", False)
    if b["shape"] == "plane" and not static:
        raise ctx.error(f"{key}.static", "a plane must be static", "static = true")
    if static:
        for k in ("mass", "density", "velocity", "angular_velocity"):
            if k in b:
                raise ctx.error(f"{key}.{k}", "not allowed on a static body", None)
    else:
        if "mass" in b and "density" in b:
            raise ctx.error(f"{key}.density", "give mass or density, not both", None)
        if "mass" not in b and "density" not in b:
            raise ctx.error(
                f"{key}.mass",
                "a moving body needs a mass",
                "mass = 1.0 (kg), density = 1000.0 (kg/m^3), or static = true",
            )
    if "texture" in b:
        if "color" in b:
            raise ctx.error(f"{key}.color", "give texture or color, not both", None)
        b["texture"] = _texture_ref(b["texture"], f"{key}.texture", textures, ctx)
    return b


def _validate_joints(raw_joints: Any, bodies: list[dict], ctx: _Ctx) -> list[dict]:
    """``[[joints]]`` (optional): joints with unique names, at most one per pair of bodies."""
    if not isinstance(raw_joints, list):
        raise ctx.error(
            "joints", f"expected an array of tables ([[joints]]), got {_show(raw_joints)}", None
        )
    joints, jnames = [], []
    for i, rj in enumerate(raw_joints):
        key = _item_key("joints", i, rj)
        _check_table(rj, key, JOINT_FIELDS, ctx, required=("name", "type", "parent", "child"))
        name = JOINT_FIELDS["name"].parse(rj["name"], f"{key}.name", ctx)
        if name in jnames:
            raise ctx.error(f"joints[{i}].name", f"duplicate joint name {name!r}", "unique names")
        jnames.append(name)
        joints.append(_validate_joint(rj, name, bodies, joints, ctx))
    return joints


def _validate_joint(rj: dict, name: str, bodies: list[dict], earlier: list[dict], ctx: _Ctx):
    """One joint between known bodies (the child not static), with its optional motor;
    ``earlier``: the joints validated before it."""
    names = [b["name"] for b in bodies]
    static_names = {b["name"] for b in bodies if b.get("static", False)}
    key = f"joints.{name}"
    j = {"name": name}
    for k, v in rj.items():
        if k in ("name", "motor"):
            continue
        j[k] = JOINT_FIELDS[k].parse(v, f"{key}.{k}", ctx)
    for role, choices in (("parent", ["world", *names]), ("child", names)):
        if j[role] not in choices:
            raise ctx.error(
                f"{key}.{role}",
                f"unknown body {j[role]!r}{did_you_mean(j[role], choices)}",
                ", ".join(choices),
            )
    if j["child"] == j["parent"]:
        raise ctx.error(f"{key}.child", "a joint's child must differ from its parent", None)
    pair = frozenset((j["parent"], j["child"]))
    for other in earlier:
        if frozenset((other["parent"], other["child"])) == pair:
            raise ctx.error(
                f"{key}.child",
                f"joint {other['name']!r} already joins {j['parent']!r} and {j['child']!r}",
                "one joint per pair of bodies (use a ball or fixed joint for more freedom or less)",
            )
    if j["child"] in static_names:
        raise ctx.error(
            f"{key}.child", f"body {j['child']!r} is static and cannot be jointed", None
        )
    if "limits" in j and not isinstance(j["limits"], torch.Tensor):
        if j["limits"][0] > j["limits"][1]:
            raise ctx.error(f"{key}.limits", "lower limit above upper", "[lower, upper]")
    if j["type"] in ("ball", "fixed"):
        for k in ("limits", "damping", "motor", "position", "velocity"):
            if k in rj:
                raise ctx.error(
                    f"{key}.{k}", f"not allowed on a {j['type']} joint", "hinge or slider"
                )
    if "motor" in rj:
        j["motor"] = _validate_motor(rj["motor"], f"{key}.motor", ctx)
    return j


def _validate_motor(raw: Any, mk: str, ctx: _Ctx) -> dict:
    """A joint's ``motor`` table: a force motor takes only ``max``, a servo every key."""
    rm = _check_table(raw, mk, MOTOR_FIELDS, ctx, required=("type",))
    motor = {k: MOTOR_FIELDS[k].parse(v, f"{mk}.{k}", ctx) for k, v in rm.items()}
    allowed = {"force": ("type", "max"), "servo": tuple(MOTOR_FIELDS)}[motor["type"]]
    for k in motor:
        if k not in allowed:
            raise ctx.error(
                f"{mk}.{k}", f"not a key of a {motor['type']} motor", ", ".join(allowed)
            )
    return motor
