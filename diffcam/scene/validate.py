"""Validation: a parsed scene file (with overrides) checked into a `SceneConfig`.

Sections are checked in this order: world, light, textures, camera, bodies, joints; each
against its field table in `schema`, then the rules that span keys. The model's rules (mass or
density, joints between known bodies, limits, ...) are `physics.rules`, the same functions
`physics.build_world` checks a model with; their errors are given the file's key path here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from physics import rules
from physics.spec import ModelError

from ..errors import SceneError, did_you_mean
from .meshes import mesh_body
from .overrides import apply_overrides
from .schema import (
    BODY_FIELDS,
    CAMERA_FIELDS,
    JOINT_FIELDS,
    LIGHT_FIELDS,
    MESH_KEYS,
    MOTOR_FIELDS,
    NAME_RE,
    SIZE_ACCEPTED,
    SIZE_FIELDS,
    TOP_LEVEL,
    WORLD_FIELDS,
    NameField,
    ParseContext,
    TexturePathField,
    check_table,
    describe_value,
    item_key,
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


def scene_key(error: ModelError) -> str | None:
    """The scene file's key path of a broken model rule: an item by its name
    (``joints.rail.limits``), a duplicate name by its position (``bodies[2].name``)."""
    if error.section is None:
        return None
    if error.name is None or error.field == "name" or error.index is None:
        return error.key
    return f"{error.section}.{error.name}.{error.field}"


def _check_rule(ctx: ParseContext, rule, *args, **kwargs) -> None:
    """Run one of `physics.rules`; its `ModelError` becomes a `SceneError` naming the key."""
    try:
        rule(*args, **kwargs)
    except ModelError as error:
        raise ctx.error(scene_key(error), error.reason, error.accepted) from None


def validate_scene(
    data: dict,
    *,
    file: str = "<scene>",
    base_dir: str | Path = ".",
    batch_size: int = 1,
    overrides: Mapping[str, Any] | None = None,
) -> SceneConfig:
    """Check a parsed scene (and overrides) without building anything."""
    ctx = ParseContext(file=str(file), batch_size=batch_size, overridden=set())
    if not isinstance(data, dict):
        raise SceneError(
            f"expected a table at the top level, got {describe_value(data)}", file=str(file)
        )
    data = apply_overrides(data, overrides or {}, ctx)
    return _validate(data, ctx, Path(base_dir))


def _validate(data: dict, ctx: ParseContext, base_dir: Path) -> SceneConfig:
    check_table(data, "", dict.fromkeys(TOP_LEVEL), ctx, required=("camera", "bodies"))

    raw_world = check_table(data.get("world", {}), "world", WORLD_FIELDS, ctx)
    world = {k: WORLD_FIELDS[k].parse(v, f"world.{k}", ctx) for k, v in raw_world.items()}

    # light (optional; without it the scene is drawn unlit)
    light = None
    if "light" in data:
        raw_light = check_table(data["light"], "light", LIGHT_FIELDS, ctx)
        light = {k: LIGHT_FIELDS[k].parse(v, f"light.{k}", ctx) for k, v in raw_light.items()}

    textures = _validate_textures(data.get("textures", {}), ctx)
    camera = _validate_camera(data["camera"], textures, ctx)
    bodies = _validate_bodies(data["bodies"], textures, ctx, base_dir)
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


def _validate_textures(raw_tex: Any, ctx: ParseContext) -> dict:
    """``[textures]``: name -> PNG path (or a tensor override)."""
    if not isinstance(raw_tex, dict):
        raise ctx.error(
            "textures", f'expected a table name = "file.png", got {describe_value(raw_tex)}'
        )
    textures = {}
    for name, value in raw_tex.items():
        key = f"textures.{name}"
        if not NAME_RE.match(name):
            raise ctx.error(key, f"bad texture name {name!r}", NameField.accepted)
        textures[name] = TexturePathField().parse(value, key, ctx)
    return textures


def _texture_ref(value: str, key: str, textures: dict, ctx: ParseContext) -> str:
    """A texture name used by ``key``, which must be declared in ``[textures]``."""
    if value not in textures:
        known = ", ".join(textures) or "none declared in [textures]"
        raise ctx.error(
            key,
            f"unknown texture {value!r}{did_you_mean(value, textures)}",
            f"a name declared in [textures]: {known}",
        )
    return value


def _validate_camera(raw: Any, textures: dict, ctx: ParseContext) -> dict:
    """``[camera]``: the pose, the field of view (fov_y_deg or focal) and the background."""
    raw_cam = check_table(
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


def _check_camera_geometry(camera: dict, ctx: ParseContext) -> None:
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


def _validate_bodies(
    raw_bodies: Any, textures: dict, ctx: ParseContext, base_dir: Path = Path(".")
) -> list[dict]:
    """``[[bodies]]``: one or more bodies with unique names."""
    if not isinstance(raw_bodies, list) or not raw_bodies:
        raise ctx.error(
            "bodies",
            f"expected an array of tables ([[bodies]]), got {describe_value(raw_bodies)}",
            "one or more [[bodies]] tables",
        )
    bodies, names = [], []
    for i, rb in enumerate(raw_bodies):
        key = item_key("bodies", i, rb)
        mesh = isinstance(rb, dict) and rb.get("shape") == "mesh"
        required = ("name", "shape", "mesh") if mesh else ("name", "shape", "size")
        check_table(rb, key, BODY_FIELDS, ctx, required=required)
        name = BODY_FIELDS["name"].parse(rb["name"], f"{key}.name", ctx)
        _check_rule(ctx, rules.check_body_names, [*names, name])
        names.append(name)
        bodies.append(_validate_body(rb, i, name, textures, ctx, base_dir))
    return bodies


def _validate_body(
    rb: dict, index: int, name: str, textures: dict, ctx: ParseContext, base_dir: Path
) -> dict:
    """One body (``index`` in the file): its shape's size (a mesh: its file, read here),
    static or with a mass, a texture or a colour."""
    key = f"bodies.{name}"
    b = {"name": name}
    b["shape"] = BODY_FIELDS["shape"].parse(rb["shape"], f"{key}.shape", ctx)
    if b["shape"] == "mesh":
        if "size" in rb:
            raise ctx.error(f"{key}.size", "a mesh takes no size", "scale = 2.0 (or [x, y, z])")
    else:
        for k in MESH_KEYS:
            if k in rb:
                raise ctx.error(f"{key}.{k}", 'only a body of shape = "mesh" takes this key')
        sf = SIZE_FIELDS[b["shape"]]
        try:
            b["size"] = sf.parse(rb["size"], f"{key}.size", ctx)
        except SceneError as e:
            raise ctx.error(f"{key}.size", e.reason, SIZE_ACCEPTED[b["shape"]]) from None
    for k, v in rb.items():
        if k in ("name", "shape", "size"):
            continue
        b[k] = BODY_FIELDS[k].parse(v, f"{key}.{k}", ctx)
    # the engine's rules see a mesh as the box that stands in for it (`scene.meshes`)
    rule_shape = "box" if b["shape"] == "mesh" else b["shape"]
    _check_rule(
        ctx, rules.check_body, index, name, shape=rule_shape, static=b.get("static", False),
        mass=b.get("mass"), density=b.get("density"), velocity=b.get("velocity"),
        angular_velocity=b.get("angular_velocity"),
    )  # fmt: skip
    if "texture" in b:
        if "color" in b:
            raise ctx.error(f"{key}.color", "give texture or color, not both", None)
        b["texture"] = _texture_ref(b["texture"], f"{key}.texture", textures, ctx)
    if b["shape"] == "mesh":
        b["mesh_body"] = mesh_body(b, key, ctx.file, base_dir)
    return b


def _validate_joints(raw_joints: Any, bodies: list[dict], ctx: ParseContext) -> list[dict]:
    """``[[joints]]`` (optional): joints with unique names."""
    if not isinstance(raw_joints, list):
        raise ctx.error(
            "joints",
            f"expected an array of tables ([[joints]]), got {describe_value(raw_joints)}",
            None,
        )
    joints, jnames = [], []
    for i, rj in enumerate(raw_joints):
        key = item_key("joints", i, rj)
        check_table(rj, key, JOINT_FIELDS, ctx, required=("name", "type", "parent", "child"))
        name = JOINT_FIELDS["name"].parse(rj["name"], f"{key}.name", ctx)
        _check_rule(ctx, rules.check_joint_names, [*jnames, name])
        jnames.append(name)
        joints.append(_validate_joint(rj, i, name, bodies, ctx))
    return joints


def _validate_joint(rj: dict, index: int, name: str, bodies: list[dict], ctx: ParseContext):
    """One joint (``index`` in the file) between known bodies, with its optional motor."""
    key = f"joints.{name}"
    j = {"name": name}
    for k, v in rj.items():
        if k in ("name", "motor"):
            continue
        j[k] = JOINT_FIELDS[k].parse(v, f"{key}.{k}", ctx)
    _check_rule(
        ctx, rules.check_joint, index, name, type=j["type"], parent=j["parent"],
        child=j["child"], bodies=[b["name"] for b in bodies],
        static={b["name"] for b in bodies if b.get("static", False)},
    )  # fmt: skip
    _check_rule(
        ctx, rules.check_joint_options, index, name, type=j["type"], limits=j.get("limits"),
        damping=j.get("damping"), motor=rj.get("motor"), position=j.get("position"),
        velocity=j.get("velocity"),
    )  # fmt: skip
    if "limits" in j:
        _check_rule(ctx, rules.check_limits, index, name, j["limits"])
    if "motor" in rj:
        j["motor"] = _validate_motor(rj["motor"], f"{key}.motor", ctx)
    return j


def _validate_motor(raw: Any, mk: str, ctx: ParseContext) -> dict:
    """A joint's ``motor`` table: a force motor takes only ``max``, a servo every key."""
    rm = check_table(raw, mk, MOTOR_FIELDS, ctx, required=("type",))
    motor = {k: MOTOR_FIELDS[k].parse(v, f"{mk}.{k}", ctx) for k, v in rm.items()}
    allowed = {"force": ("type", "max"), "servo": tuple(MOTOR_FIELDS)}[motor["type"]]
    for k in motor:
        if k not in allowed:
            raise ctx.error(
                f"{mk}.{k}", f"not a key of a {motor['type']} motor", ", ".join(allowed)
            )
    return motor
