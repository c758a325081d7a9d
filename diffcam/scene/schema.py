"""The scene file's schema: how each key is checked, and the keys of each section.

A `_Field` parses one value (a number, a list, a name, ...) and raises a `SceneError` naming the
key and what it accepts; ``numeric`` fields may be overridden by tensors. The ``*_FIELDS``
tables list each section's keys; `check_table` rejects unknown and missing ones.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ..errors import SceneError, did_you_mean

_SHAPES = ("sphere", "box", "capsule", "cylinder", "plane", "mesh")
_JOINT_TYPES = ("hinge", "slider", "ball", "fixed")
_MOTOR_TYPES = ("force", "servo")
NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
DEFAULT_COLOR = (0.7, 0.7, 0.7)


# --------------------------------------------------------------------------- validation context
@dataclass
class ParseContext:
    file: str
    batch_size: int
    overridden: set

    def error(self, key: str | None, reason: str, accepted: str | None = None) -> SceneError:
        if key is not None and key in self.overridden:
            key = f"{key} (override)"
        return SceneError(reason, file=self.file, key=key, accepted=accepted)


def describe_value(value: Any) -> str:
    """A short description of a bad value for an error message."""
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    if isinstance(value, dict):
        return "a table"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


# --------------------------------------------------------------------------- field types
class _Field:
    """How one key is checked. ``numeric`` fields may be overridden by tensors."""

    numeric = False
    accepted = ""

    def parse(self, value: Any, key: str, ctx: ParseContext) -> Any:  # pragma: no cover - abstract
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
                if not is_number(value):
                    raise ctx.error(
                        key, f"expected a number, got {describe_value(value)}", self.accepted
                    )
                arr = np.asarray(float(value))
            else:
                n = self.shape[0]
                if not isinstance(value, (list, tuple)) or len(value) != n:
                    raise ctx.error(
                        key,
                        f"expected a list of {n} numbers, got {describe_value(value)}",
                        self.accepted,
                    )
                if not all(is_number(v) for v in value):
                    raise ctx.error(
                        key,
                        f"expected a list of {n} numbers, got {describe_value(value)}",
                        self.accepted,
                    )
                arr = np.asarray([float(v) for v in value])
                value = [float(v) for v in value]
        if np.isnan(arr).any() or (not self.allow_inf and np.isinf(arr).any()):
            raise ctx.error(key, f"not a finite value: {describe_value(value)}", self.accepted)
        if (np.abs(arr[np.isfinite(arr)]) > self.max_abs).any():
            raise ctx.error(
                key,
                f"too large: {describe_value(value)}",
                f"{self.accepted}, magnitude <= {self.max_abs:g}",
            )
        if self.lo is not None:
            bad = arr <= self.lo if self.lo_open else arr < self.lo
            if bad.any():
                raise ctx.error(key, f"out of range: {describe_value(value)}", self.accepted)
        if self.hi is not None and (arr > self.hi).any():
            raise ctx.error(key, f"out of range: {describe_value(value)}", self.accepted)
        if self.nonzero:
            flat = arr.reshape(-1, *self.shape) if self.shape else arr.reshape(-1, 1)
            if (np.abs(flat).sum(axis=-1) < 1e-12).any():
                raise ctx.error(key, f"must not be zero: {describe_value(value)}", self.accepted)
        if not isinstance(value, torch.Tensor) and self.shape == ():
            value = float(value)
        return value


class _Int(_Field):
    def __init__(self, lo: int = 1, hi: int | None = None):
        self.lo, self.hi = lo, hi
        self.accepted = f"an integer >= {lo}" + (f" and <= {hi}" if hi is not None else "")

    def parse(self, value, key, ctx):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ctx.error(key, f"expected an integer, got {describe_value(value)}", self.accepted)
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
            raise ctx.error(key, f"bad resolution {describe_value(value)}", self.accepted)
        return (int(value[0]), int(value[1]))


class _Bool(_Field):
    accepted = "true or false"

    def parse(self, value, key, ctx):
        if not isinstance(value, bool):
            raise ctx.error(
                key, f"expected true or false, got {describe_value(value)}", self.accepted
            )
        return value


class _Str(_Field):
    accepted = "a string"

    def parse(self, value, key, ctx):
        if not isinstance(value, str) or not value:
            raise ctx.error(
                key, f"expected a non-empty string, got {describe_value(value)}", self.accepted
            )
        return value


class _Choice(_Field):
    def __init__(self, choices: tuple[str, ...]):
        self.choices = choices
        self.accepted = " | ".join(choices)

    def parse(self, value, key, ctx):
        if not isinstance(value, str) or value not in self.choices:
            raise ctx.error(
                key,
                f"unknown value {describe_value(value)}{did_you_mean(value, self.choices)}",
                self.accepted,
            )
        return value


class NameField(_Field):
    accepted = "a name of letters, digits, '_' and '-' (not starting with a digit)"

    def parse(self, value, key, ctx):
        if not isinstance(value, str) or not NAME_RE.match(value):
            raise ctx.error(key, f"bad name {describe_value(value)}", self.accepted)
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


class TexturePathField(_Field):
    """``[textures]`` entries: a PNG path (or a (3, Ht, Wt) tensor as an override)."""

    numeric = True
    accepted = "a path to a PNG (relative to the scene file) or a bundled texture's file name"

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
            raise ctx.error(
                key, f"expected a file name, got {describe_value(value)}", self.accepted
            )
        return value


class _Scale(_Field):
    """A mesh's scale: one number, or one per axis."""

    accepted = "a number > 0, or a list of 3 numbers > 0 (per axis)"

    def parse(self, value, key, ctx):
        ok = is_number(value) and value > 0
        if isinstance(value, (list, tuple)) and len(value) == 3:
            ok = all(is_number(v) and v > 0 for v in value)
            value = [float(v) for v in value] if ok else value
        if not ok:
            raise ctx.error(key, f"expected a scale, got {describe_value(value)}", self.accepted)
        return float(value) if is_number(value) else value


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
    # "auto" (the default): reduced when the model is such a tree, else maximal.
    "coordinates": _Choice(("auto", "maximal", "reduced")),
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
    "name": NameField(),
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
    # false: the body takes part in the physics (contacts, joints) but is not drawn, e.g. a
    # floor or a wall that a video's own background (its clean plate) already shows
    "visible": _Bool(),
    # shape = "mesh" only: the mesh file, its scale, smooth shading, principal moments
    "mesh": _Str(),
    "scale": _Scale(),
    "smooth": _Bool(),
    "inertia": _Num((3,), lo=0.0, lo_open=True, batchable=False, grad=False, max_abs=1e6),
}
#: the keys only a mesh body takes
MESH_KEYS = ("mesh", "scale", "smooth", "inertia")

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
    "mesh": "mesh: no size: `mesh` names the file (its units are metres), `scale` scales it",
}

JOINT_FIELDS: dict[str, _Field] = {
    "name": NameField(),
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


def check_table(
    raw: Any, key: str, fields: Mapping[str, Any], ctx: ParseContext, required=()
) -> dict:
    """Check that ``raw`` is a table with only known keys and the required ones."""

    def join(k):
        return f"{key}.{k}" if key else str(k)

    if not isinstance(raw, dict):
        raise ctx.error(key or None, f"expected a table, got {describe_value(raw)}", None)
    for k in raw:
        if k not in fields:
            raise ctx.error(join(k), f"unknown key{did_you_mean(k, fields)}", ", ".join(fields))
    for k in required:
        if k not in raw:
            raise ctx.error(join(k), "missing required key", _describe(fields.get(k)))
    return raw


def item_key(section: str, i: int, raw: Any) -> str:
    """``bodies.<name>`` when the item has a usable name, else ``bodies[i]``."""
    name = raw.get("name") if isinstance(raw, dict) else None
    if isinstance(name, str) and NAME_RE.match(name) and name != "world":
        return f"{section}.{name}"
    return f"{section}[{i}]"


def _describe(field: _Field | None) -> str | None:
    return None if field is None else field.accepted
