"""Scene files: a TOML file declares bodies, joints, motors, the camera and textures.

`load_scene` reads and validates a file (DESIGN.md section 6), applies ``overrides`` (any number
in the file, or any optional numeric key, replaced by a value or a tensor that may require
grad), builds the `physics` world and the renderer's camera, primitives and textures, and
returns a `Scene`::

    scene = diffcam.load_scene("scenes/pendulum_cart.toml", batch_size=8,
                               overrides={"bodies.pole.mass": m, "camera.fov_y_deg": fov})
    state = scene.initial_state()
    state = scene.step(state, action)          # action (B, n_actuators) or None
    images = scene.render(state)               # (B, 3, H, W), differentiable

Override key paths: ``world.<key>``, ``camera.<key>``, ``bodies.<name>.<key>``,
``joints.<name>.<key>``, ``joints.<name>.motor.<key>`` and ``textures.<name>`` (a (3, Ht, Wt)
tensor in place of the PNG). A tensor override has the key's shape, optionally with a leading
batch axis of size ``batch_size`` (one value per batch element).

Textures named in ``[textures]`` are looked up relative to the scene file, then in
``$DIFFCAM_ASSETS``, then in ``<scene folder>/../assets/textures`` (a checkout's layout) and the
bundled ``assets/textures``. An optional ``[light]`` table (``ambient``, ``direction``,
``intensity``) turns on Lambert shading; without it bodies are drawn with their unlit colours.

Every user mistake (unknown key, wrong type, bad value, missing file, unknown body name, bad
override) raises `diffcam.errors.SceneError` naming the file, the key path and what would be
accepted.
"""

from __future__ import annotations

import copy
import functools
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from .errors import SceneError, did_you_mean

__all__ = [
    "Scene",
    "load_scene",
    "load_texture",
    "override_paths",
    "ASSETS_DIR",
    "SCENES_DIR",
]

ROOT = Path(__file__).resolve().parent.parent
ASSETS_DIR = ROOT / "assets" / "textures"
SCENES_DIR = ROOT / "scenes"

_SHAPES = ("sphere", "box", "capsule", "cylinder", "plane")
_JOINT_TYPES = ("hinge", "slider", "ball", "fixed")
_MOTOR_TYPES = ("force", "servo")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
_DEFAULT_COLOR = (0.7, 0.7, 0.7)


# --------------------------------------------------------------------------- validation context
@dataclass
class _Ctx:
    file: str
    batch_size: int
    overridden: set

    def error(self, key: str | None, reason: str, accepted: str | None = None) -> SceneError:
        if key is not None and key in self.overridden:
            key = f"{key} (override)"
        return SceneError(reason, file=self.file, key=key, accepted=accepted)


def _show(value: Any) -> str:
    """A short description of a bad value for an error message."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, dict):
        return "a table"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# --------------------------------------------------------------------------- field types
class _Field:
    """How one key is checked. ``numeric`` fields may be overridden by tensors."""

    numeric = False
    accepted = ""

    def parse(self, value: Any, key: str, ctx: _Ctx) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError


class _Num(_Field):
    """A number or a fixed-length list of numbers; tensors allowed (overrides)."""

    numeric = True

    def __init__(
        self,
        shape: tuple[int, ...] = (),
        *,
        lo: float | None = None,
        hi: float | None = None,
        lo_open: bool = False,
        allow_inf: bool = False,
        nonzero: bool = False,
        batchable: bool = True,
        grad: bool = True,
        max_abs: float = 1e4,
    ):
        self.shape = shape
        self.lo, self.hi, self.lo_open = lo, hi, lo_open
        self.allow_inf = allow_inf
        self.nonzero = nonzero
        self.batchable = batchable
        self.grad = grad
        self.max_abs = max_abs
        what = "a number" if shape == () else f"a list of {shape[0]} numbers"
        rng = []
        if lo is not None:
            rng.append(f"> {lo:g}" if lo_open else f">= {lo:g}")
        if hi is not None:
            rng.append(f"<= {hi:g}")
        if rng:
            what += (" " if shape == () else ", each ") + " and ".join(rng)
        if nonzero:
            what += ", not all zero"
        self.accepted = what

    def parse(self, value, key, ctx):
        if isinstance(value, torch.Tensor) and not self.grad:
            if value.requires_grad or value.dim() != len(self.shape):
                raise ctx.error(
                    key,
                    "this key is structural: it takes a plain number, not a tensor with a "
                    "gradient or a batch axis",
                    self.accepted,
                )
            value = value.tolist()
        if isinstance(value, torch.Tensor):
            shapes = [self.shape]
            if self.batchable:
                shapes.append((ctx.batch_size, *self.shape))
            if tuple(value.shape) not in shapes:
                raise ctx.error(
                    key,
                    f"tensor of shape {tuple(value.shape)} does not fit",
                    f"{self.accepted}: a tensor of shape " + " or ".join(str(s) for s in shapes),
                )
            if not (value.is_floating_point() or value.dtype in (torch.int32, torch.int64)):
                raise ctx.error(key, f"tensor of dtype {value.dtype}", "a floating-point tensor")
            arr = value.detach().to("cpu", torch.float64).numpy()
        else:
            if self.shape == ():
                if not _is_number(value):
                    raise ctx.error(key, f"expected a number, got {_show(value)}", self.accepted)
                arr = np.asarray(float(value))
            else:
                n = self.shape[0]
                if not isinstance(value, (list, tuple)) or len(value) != n:
                    raise ctx.error(
                        key, f"expected a list of {n} numbers, got {_show(value)}", self.accepted
                    )
                if not all(_is_number(v) for v in value):
                    raise ctx.error(
                        key, f"expected a list of {n} numbers, got {_show(value)}", self.accepted
                    )
                arr = np.asarray([float(v) for v in value])
                value = [float(v) for v in value]
        if np.isnan(arr).any() or (not self.allow_inf and np.isinf(arr).any()):
            raise ctx.error(key, f"not a finite value: {_show(value)}", self.accepted)
        if (np.abs(arr[np.isfinite(arr)]) > self.max_abs).any():
            raise ctx.error(
                key, f"too large: {_show(value)}", f"{self.accepted}, magnitude <= {self.max_abs:g}"
            )
        if self.lo is not None:
            bad = arr <= self.lo if self.lo_open else arr < self.lo
            if bad.any():
                raise ctx.error(key, f"out of range: {_show(value)}", self.accepted)
        if self.hi is not None and (arr > self.hi).any():
            raise ctx.error(key, f"out of range: {_show(value)}", self.accepted)
        if self.nonzero:
            flat = arr.reshape(-1, *self.shape) if self.shape else arr.reshape(-1, 1)
            if (np.abs(flat).sum(axis=-1) < 1e-12).any():
                raise ctx.error(key, f"must not be zero: {_show(value)}", self.accepted)
        if not isinstance(value, torch.Tensor) and self.shape == ():
            value = float(value)
        return value


class _Int(_Field):
    def __init__(self, lo: int = 1, hi: int | None = None):
        self.lo, self.hi = lo, hi
        self.accepted = f"an integer >= {lo}" + (f" and <= {hi}" if hi is not None else "")

    def parse(self, value, key, ctx):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ctx.error(key, f"expected an integer, got {_show(value)}", self.accepted)
        if value < self.lo or (self.hi is not None and value > self.hi):
            raise ctx.error(key, f"out of range: {value}", self.accepted)
        return value


class _Resolution(_Field):
    accepted = "[width, height]: two integers between 1 and 8192"

    def parse(self, value, key, ctx):
        ok = (
            isinstance(value, (list, tuple))
            and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            and all(1 <= v <= 8192 for v in value)
        )
        if not ok:
            raise ctx.error(key, f"bad resolution {_show(value)}", self.accepted)
        return (int(value[0]), int(value[1]))


class _Bool(_Field):
    accepted = "true or false"

    def parse(self, value, key, ctx):
        if not isinstance(value, bool):
            raise ctx.error(key, f"expected true or false, got {_show(value)}", self.accepted)
        return value


class _Str(_Field):
    accepted = "a string"

    def parse(self, value, key, ctx):
        if not isinstance(value, str) or not value:
            raise ctx.error(key, f"expected a non-empty string, got {_show(value)}", self.accepted)
        return value


class _Choice(_Field):
    def __init__(self, choices: tuple[str, ...]):
        self.choices = choices
        self.accepted = " | ".join(choices)

    def parse(self, value, key, ctx):
        if not isinstance(value, str) or value not in self.choices:
            raise ctx.error(
                key,
                f"unknown value {_show(value)}{did_you_mean(value, self.choices)}",
                self.accepted,
            )
        return value


class _Name(_Field):
    accepted = "a name of letters, digits, '_' and '-' (not starting with a digit)"

    def parse(self, value, key, ctx):
        if not isinstance(value, str) or not _NAME_RE.match(value):
            raise ctx.error(key, f"bad name {_show(value)}", self.accepted)
        if value == "world":
            raise ctx.error(
                key, "'world' is reserved (a joint's parent = \"world\")", self.accepted
            )
        return value


class _ColorOrName(_Field):
    """``background``: a colour [r, g, b] in [0, 1] or the name of a texture."""

    numeric = True
    accepted = "a colour [r, g, b] in [0, 1] or the name of a texture"

    def parse(self, value, key, ctx):
        if isinstance(value, str):
            return value
        return _COLOR.parse(value, key, ctx)


class _TexturePath(_Field):
    """``[textures]`` entries: a PNG path (or a (3, Ht, Wt) tensor as an override)."""

    numeric = True
    accepted = "a path to a PNG (relative to the scene file or assets/textures/)"

    def parse(self, value, key, ctx):
        if isinstance(value, torch.Tensor):
            if value.dim() != 3 or value.shape[0] != 3 or value.shape[1] < 1 or value.shape[2] < 1:
                raise ctx.error(
                    key,
                    f"texture tensor of shape {tuple(value.shape)}",
                    "a tensor of shape (3, Ht, Wt) with values in [0, 1]",
                )
            if not value.is_floating_point() or not torch.isfinite(value.detach()).all():
                raise ctx.error(key, "texture tensor must be finite floating point", None)
            return value
        if not isinstance(value, str) or not value:
            raise ctx.error(key, f"expected a file name, got {_show(value)}", self.accepted)
        return value


_VEC3 = _Num((3,))
_COLOR = _Num((3,), lo=0.0, hi=1.0)
_POS = _Num((), lo=0.0, lo_open=True, max_abs=1e6)
_NONNEG = _Num((), lo=0.0, max_abs=1e6)

WORLD_FIELDS: dict[str, _Field] = {
    "gravity": _VEC3,
    "timestep": _Num((), lo=0.0, lo_open=True, hi=1.0, batchable=False, grad=False),
    "solver_iterations": _Int(1, 10000),
    # "reduced": joint coordinates (physics.articulated), for trees of hinge, slider and fixed
    # joints (motors and limits allowed) with nothing that collides; faster, exact joints.
    "coordinates": _Choice(("maximal", "reduced")),
}

CAMERA_FIELDS: dict[str, _Field] = {
    "resolution": _Resolution(),
    "position": _VEC3,
    "look_at": _VEC3,
    "up": _Num((3,), nonzero=True),
    "fov_y_deg": _Num((), lo=0.0, lo_open=True, hi=179.0),
    "focal": _Num((2,), lo=0.0, lo_open=True),
    "principal_point": _Num((2,)),
    "background": _ColorOrName(),
}

BODY_FIELDS: dict[str, _Field] = {
    "name": _Name(),
    "shape": _Choice(_SHAPES),
    "size": _Num(),  # replaced by the shape's own size field below
    "mass": _Num((), lo=1e-6, max_abs=1e6),
    "density": _Num((), lo=1e-3, max_abs=1e6),
    "static": _Bool(),
    "position": _VEC3,
    "quat": _Num((4,), nonzero=True),
    "velocity": _VEC3,
    "angular_velocity": _VEC3,
    "texture": _Str(),
    "color": _COLOR,
    "uv_scale": _Num((2,), lo=0.0, lo_open=True, batchable=False, grad=False),
    "friction": _NONNEG,
    "restitution": _Num((), lo=0.0, hi=1.0),
    "collide": _Bool(),
}

_MIN_SIZE = 1e-4  # m: smaller bodies have masses and inertias float32 cannot invert
SIZE_FIELDS: dict[str, _Num] = {
    "sphere": _Num((), lo=_MIN_SIZE),
    "box": _Num((3,), lo=_MIN_SIZE),
    "capsule": _Num((2,), lo=_MIN_SIZE),
    "cylinder": _Num((2,), lo=_MIN_SIZE),
    "plane": _Num((2,), lo=_MIN_SIZE),
}
SIZE_ACCEPTED = {
    "sphere": "sphere: its radius, a number >= 0.0001 (size = 0.1)",
    "box": "box: full extents [x, y, z], each >= 0.0001",
    "capsule": "capsule: [radius, length] along body z, each >= 0.0001",
    "cylinder": "cylinder: [radius, length] along body z, each >= 0.0001",
    "plane": "plane: drawn extent [x, y], each >= 0.0001",
}

JOINT_FIELDS: dict[str, _Field] = {
    "name": _Name(),
    "type": _Choice(_JOINT_TYPES),
    "parent": _Str(),
    "child": _Str(),
    "anchor": _VEC3,
    "axis": _Num((3,), nonzero=True),
    "limits": _Num((2,)),
    "damping": _NONNEG,
    "motor": None,  # a table, checked with MOTOR_FIELDS
    # the start in joint space (hinges and sliders): q (rad or m) and q' from the drawn pose
    "position": _Num((), max_abs=1e6),
    "velocity": _Num((), max_abs=1e6),
}

MOTOR_FIELDS: dict[str, _Field] = {
    "type": _Choice(_MOTOR_TYPES),
    "max": _Num((), lo=0.0, lo_open=True, allow_inf=True, max_abs=1e9),
    "gain": _POS,
    "max_torque": _POS,
    "max_velocity": _POS,
    "target": _Choice(("position", "velocity")),
}

LIGHT_FIELDS: dict[str, _Field] = {
    "ambient": _NONNEG,
    "direction": _Num((3,), nonzero=True),
    "intensity": _NONNEG,
}

TOP_LEVEL = ("world", "camera", "light", "textures", "bodies", "joints")


def _check_table(raw: Any, key: str, fields: Mapping[str, Any], ctx: _Ctx, required=()) -> dict:
    """Check that ``raw`` is a table with only known keys and the required ones."""

    def join(k):
        return f"{key}.{k}" if key else str(k)

    if not isinstance(raw, dict):
        raise ctx.error(key or None, f"expected a table, got {_show(raw)}", None)
    for k in raw:
        if k not in fields:
            raise ctx.error(join(k), f"unknown key{did_you_mean(k, fields)}", ", ".join(fields))
    for k in required:
        if k not in raw:
            raise ctx.error(join(k), "missing required key", _describe(fields.get(k)))
    return raw


def _item_key(section: str, i: int, raw: Any) -> str:
    """``bodies.<name>`` when the item has a usable name, else ``bodies[i]``."""
    name = raw.get("name") if isinstance(raw, dict) else None
    if isinstance(name, str) and _NAME_RE.match(name) and name != "world":
        return f"{section}.{name}"
    return f"{section}[{i}]"


def _describe(field: _Field | None) -> str | None:
    return None if field is None else field.accepted


# --------------------------------------------------------------------------- validated config
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


def _validate(data: dict, ctx: _Ctx, base_dir: Path) -> SceneConfig:
    _check_table(data, "", dict.fromkeys(TOP_LEVEL), ctx, required=("camera", "bodies"))

    # world
    raw_world = _check_table(data.get("world", {}), "world", WORLD_FIELDS, ctx)
    world = {k: WORLD_FIELDS[k].parse(v, f"world.{k}", ctx) for k, v in raw_world.items()}

    # light (optional; without it the scene is drawn unlit)
    light = None
    if "light" in data:
        raw_light = _check_table(data["light"], "light", LIGHT_FIELDS, ctx)
        light = {k: LIGHT_FIELDS[k].parse(v, f"light.{k}", ctx) for k, v in raw_light.items()}

    # textures
    raw_tex = data.get("textures", {})
    if not isinstance(raw_tex, dict):
        raise ctx.error("textures", f'expected a table name = "file.png", got {_show(raw_tex)}')
    textures = {}
    for name, value in raw_tex.items():
        key = f"textures.{name}"
        if not _NAME_RE.match(name):
            raise ctx.error(key, f"bad texture name {name!r}", _Name.accepted)
        textures[name] = _TexturePath().parse(value, key, ctx)

    def texture_ref(value, key):
        if value not in textures:
            known = ", ".join(textures) or "none declared in [textures]"
            raise ctx.error(
                key,
                f"unknown texture {value!r}{did_you_mean(value, textures)}",
                f"a name declared in [textures]: {known}",
            )
        return value

    # camera
    raw_cam = _check_table(
        data["camera"], "camera", CAMERA_FIELDS, ctx, required=("resolution", "position", "look_at")
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
        camera["background"] = texture_ref(camera["background"], "camera.background")
    _check_camera_geometry(camera, ctx)

    # bodies
    raw_bodies = data["bodies"]
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
            b["texture"] = texture_ref(b["texture"], f"{key}.texture")
        bodies.append(b)

    # joints
    raw_joints = data.get("joints", [])
    if not isinstance(raw_joints, list):
        raise ctx.error(
            "joints", f"expected an array of tables ([[joints]]), got {_show(raw_joints)}", None
        )
    joints, jnames = [], []
    static_names = {b["name"] for b in bodies if b.get("static", False)}
    for i, rj in enumerate(raw_joints):
        key = _item_key("joints", i, rj)
        _check_table(rj, key, JOINT_FIELDS, ctx, required=("name", "type", "parent", "child"))
        name = JOINT_FIELDS["name"].parse(rj["name"], f"{key}.name", ctx)
        if name in jnames:
            raise ctx.error(f"joints[{i}].name", f"duplicate joint name {name!r}", "unique names")
        jnames.append(name)
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
        for other in joints:
            if frozenset((other["parent"], other["child"])) == pair:
                raise ctx.error(
                    f"{key}.child",
                    f"joint {other['name']!r} already joins {j['parent']!r} and {j['child']!r}",
                    "one joint per pair of bodies (use a ball or fixed joint for more freedom "
                    "or less)",
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
            mk = f"{key}.motor"
            rm = _check_table(rj["motor"], mk, MOTOR_FIELDS, ctx, required=("type",))
            motor = {k: MOTOR_FIELDS[k].parse(v, f"{mk}.{k}", ctx) for k, v in rm.items()}
            allowed = {"force": ("type", "max"), "servo": tuple(MOTOR_FIELDS)}[motor["type"]]
            for k in motor:
                if k not in allowed:
                    raise ctx.error(
                        f"{mk}.{k}", f"not a key of a {motor['type']} motor", ", ".join(allowed)
                    )
            j["motor"] = motor
        joints.append(j)

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


# --------------------------------------------------------------------------- overrides
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
            motor = item.get("motor") if section == "joints" else None
            if isinstance(motor, dict):
                keys = ("max",) if motor.get("type") == "force" else MOTOR_FIELDS
                paths += [f"joints.{name}.motor.{k}" for k in keys if MOTOR_FIELDS[k].numeric]
    return paths


def _apply_overrides(data: dict, overrides: Mapping[str, Any], ctx: _Ctx) -> dict:
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
            else:
                item[parts[2]] = value
        ctx.overridden.add(path)
    return data


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


# --------------------------------------------------------------------------- textures
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


def _resolve_texture(name: str, rel: str, cfg: SceneConfig) -> Path:
    candidates = [cfg.base_dir / rel]
    if os.environ.get("DIFFCAM_ASSETS"):
        candidates.append(Path(os.environ["DIFFCAM_ASSETS"]) / rel)
    # a checkout's layout (scenes/ next to assets/textures/), then the package's own checkout
    candidates += [cfg.base_dir.parent / "assets" / "textures" / rel, ASSETS_DIR / rel]
    for c in candidates:
        if c.is_file():
            return c
    bundled = sorted(p.name for p in ASSETS_DIR.glob("*.png")) if ASSETS_DIR.is_dir() else []
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


# --------------------------------------------------------------------------- the scene
@dataclass
class _StaticLayer:
    """The static bodies drawn once, at the sampling resolution (s = supersample).

    key: what the layer depends on besides the static poses (see `Scene._static_layer`);
    sources: the objects named in ``key``; rotation (B'|1, S, 3, 3) and position (B'|1, S, 3):
    the static poses it was drawn at; image (B'|1, 3, sH, sW); depth (B'|1, 1, sH, sW) (m, 0 =
    nothing); object_id (B'|1, H, W) body index at the output pixels, -1 = background.
    """

    key: tuple
    sources: list
    rotation: torch.Tensor
    position: torch.Tensor
    image: torch.Tensor
    depth: torch.Tensor
    object_id: torch.Tensor
    coverage: torch.Tensor  # (B'|1, 1, H, W) the static bodies' coverage at the output pixels


class Scene:
    """A loaded scene: the physics world, the camera, textures and what each body looks like.

    Attributes:
        path: the scene file.
        config: the validated `SceneConfig`.
        world: the `physics.World`.
        camera: the `diffcam.PinholeCamera` (its parameters may require grad).
        textures: dict name -> (3, Ht, Wt) tensor.
        primitives: list of `diffcam.Primitive`, one per body in state order.
        background: (3,) colour or (3, Ht, Wt) texture.
        body_names, actuator_names: lists of str (state order, action-column order).
        batch_size, dtype, device, timestep.

    Rendering keeps the static bodies' pre-rendered layer in a one-entry cache (see `render`).
    """

    def __init__(self, config: SceneConfig, batch_size: int, device, dtype):
        import physics

        from .camera import PinholeCamera
        from .primitives import Primitive

        self.config = config
        self.path = config.file
        self.batch_size = batch_size
        self.dtype = dtype
        self.device = torch.device(device) if device is not None else torch.device("cpu")

        def tensor(v):
            if isinstance(v, torch.Tensor):
                return v.to(device=self.device, dtype=dtype)
            return torch.as_tensor(v, device=self.device, dtype=dtype)

        # textures
        self.textures: dict[str, torch.Tensor] = {}
        for name, value in config.textures.items():
            if isinstance(value, torch.Tensor):
                self.textures[name] = tensor(value)
            else:
                file = _resolve_texture(name, value, config)
                try:
                    self.textures[name] = load_texture(file, device=self.device, dtype=dtype)
                except (OSError, ValueError) as e:
                    raise SceneError(
                        f"cannot read {str(file)!r} as an image ({e})",
                        file=config.file,
                        key=f"textures.{name}",
                        accepted="a PNG (or any image Pillow reads)",
                    ) from None

        # physics
        bodies = []
        for b in config.bodies:
            kw = {k: b[k] for k in b if k not in ("texture", "color", "uv_scale")}
            kw = {k: (tensor(v) if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
            bodies.append(physics.Body(**kw))
        joints = []
        for j in config.joints:
            kw = {k: (tensor(v) if isinstance(v, torch.Tensor) else v) for k, v in j.items()}
            if "motor" in kw:
                m = {
                    k: (tensor(v) if isinstance(v, torch.Tensor) else v)
                    for k, v in kw["motor"].items()
                }
                kw["motor"] = physics.Motor(**m)
            joints.append(physics.Joint(**kw))
        wkw = {
            k: (tensor(v) if isinstance(v, torch.Tensor) else v) for k, v in config.world.items()
        }
        spec = physics.WorldSpec(bodies=bodies, joints=joints, **wkw)
        try:
            self.world = physics.build_world(
                spec, batch_size=batch_size, device=self.device, dtype=dtype
            )
        except physics.ReducedCoordinatesError as e:
            raise SceneError(
                f"this model cannot use reduced coordinates: {e}",
                file=config.file,
                key="world.coordinates",
                accepted='"maximal" (the default), or change the model as the reason says',
            ) from None
        except physics.ModelError as e:
            raise SceneError(f"invalid model: {e}", file=config.file) from None
        self.spec = spec
        self.body_names = list(self.world.body_names)
        self.actuator_names = list(self.world.actuator_names)
        self.timestep = float(config.world.get("timestep", spec.timestep))

        # camera
        cam = config.camera
        width, height = cam["resolution"]
        up = cam.get("up", [0.0, 0.0, 1.0])
        if "fov_y_deg" in cam:
            self.camera = PinholeCamera.look_at(
                tensor(cam["position"]), tensor(cam["look_at"]), tensor(up),
                tensor(cam["fov_y_deg"]), width, height,
            )  # fmt: skip
        else:
            posed = PinholeCamera.look_at(
                tensor(cam["position"]), tensor(cam["look_at"]), tensor(up),
                tensor(40.0), width, height,
            )  # fmt: skip
            focal = tensor(cam["focal"])
            pp = tensor(cam.get("principal_point", [0.5 * width, 0.5 * height]))
            self.camera = PinholeCamera(
                focal[..., 0], focal[..., 1], pp[..., 0], pp[..., 1], width, height,
                posed.rotation, posed.translation,
            )  # fmt: skip
        self.lighting = None
        if config.light is not None:
            from .render import Lighting

            self.lighting = Lighting(
                **{
                    k: (tensor(v) if isinstance(v, torch.Tensor) else v)
                    for k, v in config.light.items()
                }
            )
        bg = cam.get("background", [0.9, 0.9, 0.9])
        self.background = self.textures[bg] if isinstance(bg, str) else tensor(bg)

        # what each body looks like
        self.primitives = []
        for b in config.bodies:
            tex = self.textures[b["texture"]] if "texture" in b else None
            color = None if tex is not None else tensor(b.get("color", _DEFAULT_COLOR))
            size = b["size"]
            size = tensor(size) if isinstance(size, torch.Tensor) else size
            self.primitives.append(
                Primitive(
                    b["shape"],
                    size,
                    texture=tex,
                    color=color,
                    uv_scale=tuple(b.get("uv_scale", (1.0, 1.0))),
                )
            )
        self._static = [i for i, st in enumerate(self.world.is_static) if st]
        self._dynamic = [i for i, st in enumerate(self.world.is_static) if not st]
        self._layer_cache: _StaticLayer | None = None
        # (raw file data, base folder, overrides): set by `load_scene`, for `with_overrides`
        self._source: tuple | None = None

    # ----------------------------------------------------------------- simulation
    @property
    def n_actuators(self) -> int:
        return len(self.actuator_names)

    def initial_state(self):
        """The state of the file (with overrides): a `physics.State` of batch ``batch_size``."""
        import physics

        return physics.initial_state(self.world)

    def step(self, state, action=None, compile: bool = False):
        """One physics step; ``action`` (B, n_actuators) in `actuator_names` order, or None.

        ``compile``: step through `physics.compiled_step` (torch.compile; the first call per
        dtype and grad mode compiles, then a small world's step is several times faster)."""
        import physics

        if compile:
            return physics.compiled_step(self.world.dtype)(self.world, state, action)
        return physics.step(self.world, state, action)

    def rollout(self, steps: int, policy: Callable | None = None, state=None, **kwargs):
        """``steps`` steps from ``state`` (default: the initial state).

        Returns a `physics.State` with a leading time axis (steps + 1, B, ...); ``policy(state, t)``
        returns the action. Keyword arguments go to `physics.rollout` (``checkpoint_every``...).
        """
        import physics

        if state is None:
            state = self.initial_state()
        return physics.rollout(self.world, state, steps, policy=policy, **kwargs)

    # ----------------------------------------------------------------- rendering
    def _poses(self, state):
        rot, pos = state.rotation, state.position
        if rot.dim() != 4 or pos.dim() != 3:
            raise ValueError(
                "Scene.render expects one state with rotation (B, N, 3, 3) and position "
                f"(B, N, 3); got {tuple(rot.shape)} and {tuple(pos.shape)} (for a trajectory, "
                "index its time axis first)"
            )
        return rot, pos

    def render(
        self,
        state,
        edge_softness: float = 0.0,
        supersample: int = 1,
        static_cache: bool = True,
        **kwargs,
    ):
        """Draw every body at the state's pose: (B, 3, H, W) in [0, 1], differentiable.

        Keyword arguments go to `diffcam.render` (e.g. ``mipmap``, ``backend``; ``lighting``
        replaces the file's ``[light]``, ``background`` the camera's background).

        Static bodies are drawn once into a cached layer (image and depth) that only the
        moving bodies are rendered over, when that is safe: the camera, the light, the
        background and the static bodies' sizes, textures, colours and file poses do not
        require grad (the layer is re-drawn when any of them, the static poses in ``state``,
        the resolution, ``supersample``, ``edge_softness``, ``mipmap``, dtype or device
        change). With hard edges the result equals the full render, gradients included,
        except that the state's *static* rows get no gradient (static bodies do not move;
        to differentiate with respect to their poses, pass ``static_cache=False``). With
        ``edge_softness > 0`` the static layer is soft-edged on its own and then is the
        opaque back of the moving bodies, so where a static silhouette's soft band meets a
        moving body the result differs slightly from the full soft render.
        """
        return self._render(
            state, static_cache, False, edge_softness=edge_softness, supersample=supersample,
            **kwargs,
        ).image  # fmt: skip

    def render_trajectory(self, trajectory, every: int = 1, **kwargs) -> torch.Tensor:
        """Render a rollout (a State with a time axis, (T, B, ...)) every ``every`` steps.

        Returns (T', B, 3, H, W) with T' = ceil(T / every); keyword arguments as in `render`.
        """
        import physics

        if trajectory.position.dim() != 4:
            raise ValueError(
                "render_trajectory expects a trajectory with position (T, B, N, 3), got "
                f"{tuple(trajectory.position.shape)}"
            )
        frames = []
        for t in range(0, trajectory.position.shape[0], every):
            state = physics.State(*(x[t] for x in trajectory.tensors()))
            frames.append(self.render(state, **kwargs))
        return torch.stack(frames)

    def render_buffers(self, state, static_cache: bool = True, **kwargs):
        """Image, depth (B, 1, H, W) and object id (B, H, W; -1 = background, else body index).

        Keyword arguments and the static layer cache as in `render`.
        """
        return self._render(state, static_cache, True, **kwargs)

    def _render(self, state, static_cache: bool, want_ids: bool, **kwargs):
        """`diffcam.render_buffers` of the whole scene, over the cached static layer if it
        applies; the object ids are those of the scene's bodies only when ``want_ids``."""
        from .render import render_buffers

        kwargs.setdefault("lighting", self.lighting)
        kwargs.setdefault("background", self.background)
        rot, pos = self._poses(state)
        layer = self._static_layer(rot, pos, kwargs) if static_cache else None
        if layer is None:
            return render_buffers(self.camera, self.primitives, rot, pos, **kwargs)
        kwargs.pop("background")
        dyn = self._dynamic
        out = render_buffers(
            self.camera, [self.primitives[i] for i in dyn], rot[:, dyn], pos[:, dyn],
            background=layer.image, background_depth=layer.depth, **kwargs,
        )  # fmt: skip
        # what the static bodies cover shows behind what the moving ones leave uncovered
        out = out._replace(coverage=out.coverage + (1.0 - out.coverage) * layer.coverage)
        if not want_ids:
            return out
        moving = out.object_id
        ids = torch.tensor(dyn, device=moving.device)[moving.clamp(min=0)]
        return out._replace(object_id=torch.where(moving >= 0, ids, layer.object_id))

    def _static_layer(self, rot, pos, kwargs) -> _StaticLayer | None:
        """The static bodies' layer for this render call, drawn or taken from the cache; None
        when there is nothing to split or something it depends on requires grad."""
        from .render import render_buffers

        static = self._static
        if not static or not self._dynamic:
            return None
        sources = self._layer_sources(kwargs["lighting"], kwargs["background"])
        if any(isinstance(x, torch.Tensor) and x.requires_grad for x in sources):
            return None
        s = int(kwargs.get("supersample", 1))
        softness = float(kwargs.get("edge_softness", 0.0))
        key = (
            tuple((id(x), x._version) if isinstance(x, torch.Tensor) else x for x in sources),
            s, softness, bool(kwargs.get("mipmap", False)), rot.dtype, rot.device,
        )  # fmt: skip
        srot, spos = rot[:, static].detach(), pos[:, static].detach()
        if srot.shape[0] > 1 and bool((srot == srot[:1]).all()) and bool((spos == spos[:1]).all()):
            srot, spos = srot[:1], spos[:1]  # one layer for the whole batch
        layer = self._layer_cache
        if (
            layer is not None
            and layer.key == key
            and torch.equal(layer.rotation, srot)
            and torch.equal(layer.position, spos)
        ):
            return layer
        with torch.no_grad():
            out = render_buffers(
                self.camera.scaled(s) if s > 1 else self.camera,
                [self.primitives[i] for i in static], srot, spos,
                **{**kwargs, "supersample": 1, "edge_softness": softness * s},
            )  # fmt: skip
        # body ids at the samples `render_buffers` reports ids of: (s // 2, s // 2) per pixel
        oid = out.object_id[:, s // 2 :: s, s // 2 :: s]
        oid = torch.tensor(static, device=oid.device)[oid.clamp(min=0)].masked_fill_(oid < 0, -1)
        # `sources` is kept so that the ids in `key` cannot be reused by new tensors
        coverage = F.avg_pool2d(out.coverage, s) if s > 1 else out.coverage
        self._layer_cache = _StaticLayer(
            key, sources, srot, spos, out.image, out.depth, oid, coverage
        )
        return self._layer_cache

    def _layer_sources(self, lighting, background) -> list:
        """Everything besides the static poses that the static layer's pixels depend on:
        tensors (compared by identity and version) and plain values."""
        cam = self.camera
        items = [cam.fx, cam.fy, cam.cx, cam.cy, cam.rotation, cam.translation]
        items += [cam.width, cam.height, cam.batch_size, background]
        if lighting is not None:
            items += [lighting.ambient, lighting.direction, lighting.intensity]
        for i in self._static:
            p = self.primitives[i]
            size = tuple(p.size) if isinstance(p.size, (list, tuple)) else p.size
            items += [p.kind, size, p.texture, p.color, tuple(p.uv_scale), p.wrap]
            body = self.config.bodies[i]
            items += [body.get("position"), body.get("quat")]  # only for requires_grad
        return [tuple(x) if isinstance(x, list) else x for x in items]

    def render_states(self, states, frames_per_call: int = 16, window=None, **kwargs):
        """Render a stack of states, e.g. the frames of a video: `RenderBuffers` whose tensors
        have two leading axes (M, B, ...).

        Args:
            states: a `physics.State` of (M, B, N, ...) tensors (M frames of the B worlds).
            frames_per_call: frames drawn per renderer call (memory and speed only).
            window: optional (origins (M, B, 2) long, (h, w)): draw only the h x w pixels from
                row, column ``origins`` of each image (any origin, even outside the image).
            kwargs: as in `render` (``edge_softness``, ``background``, ...).

        One world (B = 1) draws its frames as one batch over the static layer cache; several
        worlds, or windows, draw their frames together with the camera and the bodies' sizes
        repeated per frame (a world's parameters may differ from the others', e.g. a
        forward-mode Jacobian's columns), without the static layer.
        """
        import physics

        from .render import RenderBuffers, render_buffers

        frames, batch = states.position.shape[:2]
        kwargs.setdefault("lighting", self.lighting)
        kwargs.setdefault("background", self.background)
        parts = []
        for start in range(0, frames, frames_per_call):
            chunk = [x[start : start + frames_per_call].flatten(0, 1) for x in states.tensors()]
            m = chunk[0].shape[0] // batch
            if batch == 1 and window is None:
                out = self._render(physics.State(*chunk), True, False, **kwargs)
            else:
                crop = None
                if window is not None:
                    origins, size = window
                    crop = (origins[start : start + frames_per_call].flatten(0, 1), size)
                camera, primitives = self._tiled(m, crop)
                out = render_buffers(camera, primitives, chunk[1], chunk[0], **kwargs)
            parts.append(out)
        return RenderBuffers(
            *(
                torch.cat(fields, 0).unflatten(0, (frames, batch))
                for fields in zip(*parts, strict=True)
            )
        )

    def _tiled(self, m: int, crop=None):
        """The camera and primitives of this batch of B worlds repeated for m frames (m * B
        images, frame-major), each primitive sized by its world's (B, ...) size; ``crop``
        (origins (m * B, 2) rows and columns, (h, w)) makes each image a window of the view."""
        from .camera import PinholeCamera
        from .primitives import Primitive

        cam, batch = self.camera, self.batch_size

        def tile(x):
            return x.expand(batch, *x.shape[1:]).repeat(m, *([1] * (x.dim() - 1)))

        cx, cy, width, height = tile(cam.cx), tile(cam.cy), cam.width, cam.height
        if crop is not None:
            origins, (height, width) = crop
            cx = cx - origins[:, 1].to(cx.dtype)
            cy = cy - origins[:, 0].to(cy.dtype)
        camera = PinholeCamera(
            tile(cam.fx), tile(cam.fy), cx, cy, width, height,
            tile(cam.rotation), tile(cam.translation),
        )  # fmt: skip
        used = {"sphere": 1, "box": 3, "capsule": 2, "cylinder": 2, "plane": 2}
        primitives = []
        for i, p in enumerate(self.primitives):
            size = p.size
            if isinstance(size, torch.Tensor) and size.dim() >= 1 and p.kind != "plane":
                size = tile(self.world.size[:, i, : used[self.world.shapes[i]]])
            primitives.append(Primitive(p.kind, size, p.texture, p.color, p.uv_scale, p.wrap))
        return camera, primitives

    def with_overrides(self, overrides: Mapping[str, Any], batch_size: int | None = None):
        """The same scene file with (more) overrides, without reading the file again: a new
        `Scene` (the overrides given at load time stay unless replaced)."""
        if self._source is None:
            raise SceneError(
                "with_overrides needs a scene made by load_scene (it keeps the file's data)",
                file=self.path,
            )
        data, base_dir, base = self._source
        merged = {**base, **overrides}
        batch = self.batch_size if batch_size is None else batch_size
        config = validate_scene(
            data, file=self.path, base_dir=base_dir, batch_size=batch, overrides=merged
        )
        scene = Scene(config, batch_size=batch, device=self.device, dtype=self.dtype)
        scene._source = (data, base_dir, merged)
        return scene

    def project_bodies(self, state) -> torch.Tensor:
        """(B, N, 2) continuous pixel coordinates (x, y) of every body's centre."""
        return self.camera.project(state.position)

    # ----------------------------------------------------------------- description
    def summary(self) -> str:
        """A human-readable description (what ``diffcam check`` prints)."""
        cfg = self.config
        lines = [f"scene {cfg.file}"]
        w = cfg.world
        lines.append(
            f"  world: gravity {_fmt(w.get('gravity', self.spec.gravity))}, "
            f"timestep {self.timestep:g} s, solver_iterations "
            f"{w.get('solver_iterations', self.spec.solver_iterations)}, "
            f"{self.world.coordinates} coordinates"
        )
        lines.append(f"  bodies ({len(cfg.bodies)}):")
        for b in cfg.bodies:
            kind = "static" if b.get("static") else (
                f"mass {_fmt(b['mass'])} kg" if "mass" in b else f"density {_fmt(b['density'])}"
            )  # fmt: skip
            look = (
                f"texture {b['texture']}" if "texture" in b
                else f"color {_fmt(b.get('color', _DEFAULT_COLOR))}"
            )  # fmt: skip
            lines.append(
                f"    {b['name']}: {b['shape']} size {_fmt(b['size'])}, {kind}, "
                f"at {_fmt(b.get('position', [0, 0, 0]))}, {look}"
            )
        lines.append(f"  joints ({len(cfg.joints)}):")
        for j in cfg.joints:
            extra = ""
            if "limits" in j:
                extra += f", limits {_fmt(j['limits'])}"
            if "motor" in j:
                m = j["motor"]
                extra += f", {m['type']} motor" + (f" max {_fmt(m['max'])}" if "max" in m else "")
            lines.append(
                f"    {j['name']}: {j['type']} {j['parent']} -> {j['child']}"
                + (f" axis {_fmt(j['axis'])}" if "axis" in j else "")
                + extra
            )
        lines.append(f"  actuators ({len(self.actuator_names)}): {', '.join(self.actuator_names)}")
        c = cfg.camera
        fov = (
            f"fov_y {_fmt(c['fov_y_deg'])} deg" if "fov_y_deg" in c else f"focal {_fmt(c['focal'])}"
        )
        lines.append(
            f"  camera: {c['resolution'][0]}x{c['resolution'][1]} at {_fmt(c['position'])} "
            f"looking at {_fmt(c['look_at'])}, {fov}"
        )
        lines.append(f"  textures ({len(self.textures)}):")
        for name, t in self.textures.items():
            src = cfg.textures[name]
            src = "override" if isinstance(src, torch.Tensor) else src
            lines.append(f"    {name}: {src} ({t.shape[2]}x{t.shape[1]})")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (
            f"Scene({self.path!r}, batch_size={self.batch_size}, bodies={self.body_names}, "
            f"actuators={self.actuator_names})"
        )


def _fmt(v) -> str:
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu()
        return (
            f"tensor{tuple(v.shape)}"
            if v.numel() > 4
            else str([round(x, 4) for x in v.reshape(-1).tolist()])
        )
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(f"{x:g}" if _is_number(x) else str(x) for x in v) + "]"
    if _is_number(v):
        return f"{v:g}"
    return str(v)


# --------------------------------------------------------------------------- loading
def read_scene_file(path: str | Path) -> dict:
    """Parse a TOML scene file into a dict (raises `SceneError` for a missing/bad file)."""
    p = Path(path)
    if not p.exists():
        hint = ""
        if not p.is_absolute() and (SCENES_DIR / p.name).is_file():
            hint = f" (a bundled scene of that name is {SCENES_DIR / p.name})"
        raise SceneError(f"no such scene file{hint}", file=str(path))
    if not p.is_file():
        raise SceneError("not a file", file=str(path))
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise SceneError(f"cannot read the file ({e})", file=str(path)) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise SceneError(f"invalid TOML: {e}", file=str(path)) from None


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


def load_scene(
    path: str | Path,
    batch_size: int = 1,
    device=None,
    dtype: torch.dtype = torch.float32,
    overrides: Mapping[str, Any] | None = None,
) -> Scene:
    """Load a TOML scene file (DESIGN.md section 6) into a `Scene`.

    Args:
        path: the scene file.
        batch_size: B, the number of worlds simulated and rendered together.
        device: where tensors live (default: CPU, or the device of tensor overrides).
        dtype: float32 (default) or float64.
        overrides: key path -> number, list or tensor (may require grad; shape of the key or
            (B, ...) with one value per batch element). See the module docstring.

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
    data = read_scene_file(path)
    config = validate_scene(
        data,
        file=str(path),
        base_dir=Path(path).resolve().parent,
        batch_size=batch_size,
        overrides=overrides,
    )
    scene = Scene(config, batch_size=batch_size, device=device, dtype=dtype)
    scene._source = (data, Path(path).resolve().parent, dict(overrides or {}))
    return scene
