"""The keys a user asks to fit, as the optimiser sees them.

A user names scene override paths (``bodies.ball.restitution``, ``camera.position``,
``joints.pivot.position``), or one component of a vector path (``bodies.ball.position[2]``).
Each becomes one or more *parameters* (`diffcam.fit` keys with an initial value, a
parameterisation and a scale), chosen by what the key is:

* bounded in the schema (a restitution): a logit inside the bounds;
* positive (a mass, a size, a damping, a friction, a field of view): a logarithm;
* positions, velocities and start angles: free, in steps of about two pixels of motion at the
  bodies' distance (or that angle);
* ``camera.look_at``: two angles (pan and tilt about the camera's position: moving the point
  along the line of sight changes nothing, so it is not a parameter); ``camera.up``: one angle
  (the roll about the line of sight);
* ``bodies.<body>.quat`` (a body's start orientation): a rotation vector (3,) in radians, the
  world-frame turn from the file's orientation (``q = exp(r) * q_file``): three free numbers
  for the three degrees of freedom (a quaternion's four are one too many, and its norm is
  not seen), in steps of about two pixels of motion at the body's edge. The key's value is the
  fitted quaternion ``[w, x, y, z]``; a single component (``quat[1]``) is refused.

Besides the user's keys, every drawn moving body gets a size factor (``size:<body>``) unless
its size is a key already (or it is a mesh: a mesh file gives the object's measured shape, and
its scale is not a differentiable key): a body drawn too big or too small is a model the video cannot
explain, and fitting its look around a wrong size walks the geometry away. The factor scales
a sphere's radius, a box's extents, and a capsule's or cylinder's radius (not its length,
which spans its joints).

`KeySet.overrides` maps parameter values to scene overrides; `KeySet.values` to the user's
keys (a number, or a vector for a vector key), differentiably, so that a parameter covariance
maps to the keys' (`KeySet.std`).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence

import torch

from .errors import IdentifyError

__all__ = ["Param", "KeySet", "make_keyset", "SIZE_PREFIX"]

SIZE_PREFIX = "size:"
# Priors: how far a rough scene file's values may plausibly be from the truth (one standard
# deviation). Log or logit units for positive and bounded keys; metres, radians, m/s.
_WEAK = 2.0  # a physical coefficient: a factor e**2 (log), or its logit
_LENS = 0.1  # a field of view or focal length from a phone's specification: 10 %
_SIZE = 0.25  # a size factor: 25 %
_PLACE = 0.05  # a body's or an anchor's start position, by tape: 5 cm
_CAMERA_PLACE = 0.1  # where the camera stood: 10 cm
_AIM = 0.05  # where it pointed (pan, tilt) and its roll: 3 degrees
_ANGLE = 0.3  # a joint's start angle read off the first frame: 0.3 rad
_SPEED = 1.0  # a start velocity: 1 m/s (a joint's: 1 m/s at its lever)
_COMPONENT = re.compile(r"^(?P<path>[^\[\]]+)\[(?P<index>\d+)\]$")
_BOUNDED = {"restitution": (0.0, 1.0)}
_POSITIVE = ("mass", "density", "size", "friction", "damping", "fov_y_deg", "focal", "max",
             "gain", "max_torque", "max_velocity", "ambient", "intensity")  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Param:
    """One fitted parameter: its name and its `diffcam.fit` key spec (``init``, and
    ``positive``, ``bounds`` or ``scale``)."""

    name: str
    spec: dict


@dataclasses.dataclass
class _Key:
    """A user's key: its override ``path`` (and ``index`` for one component), the scene's
    value there (``base``), how it is parameterised (``kind``) and its parameters' names."""

    name: str
    path: str
    index: int | None
    base: torch.Tensor
    kind: str  # "plain" | "look_at" | "up" | "rotation"
    params: list[str]


def _base_values(scene) -> dict[str, torch.Tensor]:
    """Every numeric override path of the scene -> its current value as a float64 tensor
    (absent optional keys at their defaults)."""
    import physics

    body_defaults = {f.name: f.default for f in dataclasses.fields(physics.Body)}
    joint_defaults = {f.name: f.default for f in dataclasses.fields(physics.Joint)}
    motor_defaults = {f.name: f.default for f in dataclasses.fields(physics.Motor)}
    config = scene.config
    out: dict[str, object] = {}
    for k, v in config.world.items():
        out[f"world.{k}"] = v
    out.setdefault("world.gravity", (0.0, 0.0, -9.81))
    for k, v in config.camera.items():
        out[f"camera.{k}"] = v
    out.setdefault("camera.up", (0.0, 0.0, 1.0))
    for b in config.bodies:
        for k, default in body_defaults.items():
            out[f"bodies.{b['name']}.{k}"] = b.get(k, default)
        for k in ("size", "color"):
            if k in b:
                out[f"bodies.{b['name']}.{k}"] = b[k]
    for j in config.joints:
        for k, default in joint_defaults.items():
            value = j.get(k, default)
            if k in ("position", "velocity") and value is None:
                value = 0.0  # the start in joint space: the file's drawn pose, at rest
            out[f"joints.{j['name']}.{k}"] = value
        for k, default in motor_defaults.items() if "motor" in j else ():
            out[f"joints.{j['name']}.motor.{k}"] = j["motor"].get(k, default)
    values = {}
    for k, v in out.items():  # numbers and vectors only (not names, flags or tables)
        if isinstance(v, torch.Tensor):
            values[k] = v.detach().to("cpu", torch.float64)
        elif isinstance(v, (int, float, list, tuple)) and not isinstance(v, bool):
            try:
                values[k] = torch.as_tensor(v, dtype=torch.float64)
            except (TypeError, ValueError):
                continue
    return values


def _pixel_metres(scene) -> float:
    """How many metres one pixel spans at the moving bodies' distance from the camera."""
    camera = scene.camera
    state = scene.initial_state()
    moving = [i for i, s in enumerate(scene.world.is_static) if not s] or list(
        range(len(scene.body_names))
    )
    with torch.no_grad():
        points = state.position[:1, moving]
        _, depth = camera.project_with_depth(points)
    depth = float(depth.clamp_min(1e-3).mean())
    return depth / float(camera.fy.detach().reshape(-1)[0])


def _joint_type(scene, name: str) -> str:
    return next(j["type"] for j in scene.config.joints if j["name"] == name)


def _spec_for(path: str, init: float, scene, pixel: float) -> dict:
    """The parameterisation of one scalar of ``path`` starting at ``init``, with its prior
    (see the module docstring: how far from the scene file's value the key may plausibly be)."""
    parts = path.split(".")
    field = parts[-1]
    if field in _BOUNDED:
        lo, hi = _BOUNDED[field]
        margin = 0.01 * (hi - lo)
        return {"init": min(max(init, lo + margin), hi - margin), "bounds": (lo, hi),
                "prior": _WEAK}  # fmt: skip
    if field in _POSITIVE:
        prior = _LENS if field in ("fov_y_deg", "focal") else _WEAK
        return {"init": max(init, 1e-4 if field in ("damping", "friction") else 1e-6),
                "positive": True, "prior": prior}  # fmt: skip
    if parts[0] == "joints" and field in ("position", "velocity"):
        slider = _joint_type(scene, parts[1]) == "slider"
        lever = 1.0 if slider else max(_lever(scene, parts[1]), 10 * pixel)
        step = 2.0 * pixel / lever
        if field == "velocity":
            step *= 5.0
        sigma = _PLACE if slider else _ANGLE
        sigma = sigma * (_SPEED / _PLACE if field == "velocity" else 1.0)
        return {"init": init, "scale": step, "prior": sigma / step}
    if field in ("position", "anchor"):
        step = 2.0 * pixel
        sigma = _CAMERA_PLACE if parts[0] == "camera" else _PLACE
        return {"init": init, "scale": step, "prior": sigma / step}
    if field == "principal_point":
        return {"init": init, "scale": 2.0, "prior": 2.5}
    if field == "velocity":
        return {"init": init, "scale": 10.0 * pixel, "prior": _SPEED / (10.0 * pixel)}
    if field == "angular_velocity":
        return {"init": init, "scale": 0.5, "prior": 10.0}
    if init > 0:
        return {"init": init, "positive": True, "prior": _WEAK}
    return {"init": init, "scale": max(0.1 * abs(init), 0.01)}


def _lever(scene, joint: str) -> float:
    """Distance (m) from a joint's anchor to its child body's centre, at the file's pose."""
    j = next(j for j in scene.config.joints if j["name"] == joint)
    child = scene.body_names.index(j["child"])
    anchor = torch.as_tensor(j.get("anchor", (0.0, 0.0, 0.0)), dtype=torch.float64)
    centre = scene.initial_state().position[0, child].detach().double()
    return float((centre - anchor.reshape(-1)[:3]).norm())


@dataclasses.dataclass
class KeySet:
    """The user's keys and the fitted parameters behind them.

    Attributes:
        keys: the user's keys in order.
        params: every parameter (the keys' and the size factors), in order.
        sizes: body name -> its size factor's parameter name (``size:<body>``).
        base: override path -> the scene's value (float64).
        fixed: overrides set besides the parameters (e.g. the bodies' estimated textures).
    """

    keys: list[_Key]
    params: list[Param]
    sizes: dict[str, str]
    base: dict[str, torch.Tensor]
    fixed: dict = dataclasses.field(default_factory=dict)

    @property
    def specs(self) -> dict[str, dict]:
        """Parameter name -> `diffcam.fit` key spec (for `fit_scene`'s ``keys``)."""
        return {p.name: dict(p.spec) for p in self.params}

    def initial(self) -> dict[str, torch.Tensor]:
        """Parameter name -> its initial value (float64)."""
        return {p.name: torch.as_tensor(p.spec["init"], dtype=torch.float64) for p in self.params}

    def with_initial(self, values: Mapping[str, torch.Tensor]) -> KeySet:
        """The same keys starting from ``values`` (parameter name -> value)."""
        params = []
        for p in self.params:
            spec = dict(p.spec)
            if p.name in values:
                value = torch.as_tensor(values[p.name]).detach().to("cpu", torch.float64)
                if "bounds" in spec:
                    lo, hi = spec["bounds"]
                    margin = 1e-3 * (hi - lo)
                    value = value.clamp(lo + margin, hi - margin)
                elif spec.get("positive"):
                    value = value.clamp_min(1e-12)
                spec["init"] = value.tolist()
            params.append(Param(p.name, spec))
        return dataclasses.replace(self, params=params)

    def overrides(self, values: Mapping[str, torch.Tensor]) -> dict:
        """Scene overrides for one world's parameter ``values`` (name -> tensor of the
        parameter's shape)."""
        out: dict = dict(self.fixed)
        like = next(iter(values.values())) if values else torch.zeros(())

        def base(path):
            if path in out:
                return out[path]
            return self.base[path].to(dtype=like.dtype, device=like.device)

        for key in self.keys:
            if key.kind == "plain" and key.index is None:
                out[key.path] = values[key.params[0]]
            elif key.kind == "plain":
                current = base(key.path)
                index = torch.zeros(current.shape[-1], dtype=torch.bool, device=current.device)
                index[key.index] = True
                out[key.path] = torch.where(index, values[key.params[0]], current)
        for key in self.keys:
            if key.kind == "rotation":
                out[key.path] = turned(base(key.path), values[key.params[0]])
        camera = [k for k in self.keys if k.kind in ("look_at", "up")]
        if camera:
            position = base("camera.position")
            look_at, up = _camera_direction(self, values, position, base)
            if any(k.kind == "look_at" for k in camera):
                out["camera.look_at"] = look_at
            if any(k.kind == "up" for k in camera):
                out["camera.up"] = up
        for body, name in self.sizes.items():
            path = f"bodies.{body}.size"
            size = base(path)
            if size.dim() and size.shape[0] == 2:  # a capsule or cylinder: its thickness (its
                # length spans its joints or its stops)
                size = torch.cat([size[:1] * values[name], size[1:]])
            else:
                size = size * values[name]
            out[path] = size
        return out

    def values(self, values: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The user's keys (name -> () or (n,) tensor) for parameter ``values`` (one world)."""
        routed = self.overrides(values)
        out = {}
        for key in self.keys:
            value = routed[key.path]
            out[key.name] = value[key.index] if key.index is not None else value
        return out

    def nuisance(self, values: Mapping[str, torch.Tensor]) -> dict[str, float]:
        """The size factors (body -> factor)."""
        return {body: float(values[name]) for body, name in self.sizes.items()}

    def std(self, values: Mapping[str, torch.Tensor], covariance: torch.Tensor,
            scalars: Sequence[tuple[str, int]]) -> dict[str, torch.Tensor]:  # fmt: skip
        """One standard deviation of each user key, linearised through `values`, from a
        covariance (P, P) in value units of the parameter scalars ``scalars`` ((name, flat
        index) each; the other parameters held fixed). A key that depends on a scalar of
        infinite variance gets inf."""
        base = {n: torch.as_tensor(v, dtype=torch.float64) for n, v in values.items()}
        point = torch.stack([base[n].reshape(-1)[j] for n, j in scalars])

        def keys_of(x):
            full = dict(base)
            for name in {n for n, _ in scalars}:
                flat = base[name].reshape(-1).clone()
                where = [(i, j) for i, (n, j) in enumerate(scalars) if n == name]
                flat = flat.index_put((torch.tensor([j for _, j in where]),),
                                      x[[i for i, _ in where]])  # fmt: skip
                full[name] = flat.reshape(base[name].shape)
            return torch.cat([v.reshape(-1) for v in self.values(full).values()])

        jac = torch.autograd.functional.jacobian(keys_of, point)  # (K, P)
        cov = covariance.to(torch.float64)
        finite = torch.isfinite(cov).all(1)
        var = torch.einsum("kp,pq,kq->k", jac[:, finite], cov[finite][:, finite], jac[:, finite])
        blind = (jac[:, ~finite].abs() > 1e-12).any(1)
        var = torch.where(blind, torch.full_like(var, math.inf), var.clamp_min(0))
        out, start = {}, 0
        for key, value in self.values(base).items():
            n = max(1, value.numel())
            out[key] = var[start : start + n].sqrt().reshape(value.shape)
            start += n
        return out


def _rotate(vector: torch.Tensor, axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """Rodrigues: ``vector`` (..., 3) turned by ``angle`` (...) about the unit ``axis`` (..., 3)."""
    c, s = torch.cos(angle)[..., None], torch.sin(angle)[..., None]
    cross = torch.linalg.cross(axis, vector, dim=-1)
    dot = (axis * vector).sum(-1, keepdim=True)
    return vector * c + cross * s + axis * dot * (1 - c)


def turned(quat: torch.Tensor, rotation: torch.Tensor) -> torch.Tensor:
    """The quaternion (4,) [w, x, y, z] ``quat`` (normalised here) turned by the world-frame
    rotation vector ``rotation`` (3,) (rad): ``exp(rotation) * quat``; smooth at zero."""
    q = quat / quat.norm()
    half = 0.5 * rotation.to(q)
    angle = (half.square().sum() + 1e-24).sqrt()  # no 0/0 in its derivatives at zero
    w, v = torch.cos(angle), half * (torch.sin(angle) / angle)
    return torch.cat([
        (w * q[0] - (v * q[1:]).sum())[None],
        w * q[1:] + q[0] * v + torch.linalg.cross(v, q[1:], dim=-1),
    ])  # fmt: skip


def _body_radius(scene, body: str) -> float:
    """The radius (m) of the sphere about a body's centre that holds it."""
    from ..formation import bounding_radius

    radius = bounding_radius(scene.world, scene.primitives)
    return float(radius[0, scene.body_names.index(body)])


def _unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def _camera_direction(keys: KeySet, values, position, base):
    """(look_at, up) of the camera at ``position`` turned by the pan, tilt and roll
    parameters (rad) from the scene's line of sight and up vector."""
    look0, up0 = base("camera.look_at"), base("camera.up")
    pos0 = keys.base["camera.position"].to(look0)
    reach = look0 - pos0
    distance = reach.norm(dim=-1, keepdim=True)
    forward = _unit(reach)
    world_up = _unit(up0)
    pan = values.get("camera.look_at:pan")
    tilt = values.get("camera.look_at:tilt")
    roll = values.get("camera.up:roll")
    if pan is not None:
        right = _unit(torch.linalg.cross(forward, world_up, dim=-1))
        forward = _rotate(forward, right, tilt)
        forward = _rotate(forward, world_up, -pan)
    look_at = position + distance * forward
    upright = _unit(up0 - (up0 * forward).sum(-1, keepdim=True) * forward)
    if roll is not None:
        upright = _rotate(upright, forward, roll)
    return look_at, upright


def _parse(name: str, valid: Sequence[str]) -> tuple[str, int | None]:
    match = _COMPONENT.match(name)
    path, index = (match["path"], int(match["index"])) if match else (name, None)
    if path not in valid:
        from ..errors import did_you_mean

        raise IdentifyError(
            f"key {name!r} names nothing this scene can fit{did_you_mean(path, valid)}; "
            "keys are the scene's override paths (e.g. bodies.<body>.restitution, "
            "joints.<joint>.damping, camera.position), or one component: "
            "bodies.<body>.position[2]"
        )
    return path, index


def make_keyset(scene, names: Sequence[str], fit_sizes: bool = True) -> KeySet:
    """The `KeySet` of the user's keys ``names`` for ``scene`` (a loaded `diffcam.Scene`),
    starting from the scene's values.

    Raises:
        IdentifyError: a key the scene does not have, a component out of range, a key twice,
            or a key that is not a number or a vector of numbers.
    """
    if not names:
        raise IdentifyError(
            "give at least one key to fit (e.g. --keys bodies.ball.restitution); the scene's "
            "override paths are the keys"
        )
    base = _base_values(scene)
    valid = [p for p in scene.override_paths() if p in base]
    pixel = _pixel_metres(scene)
    keys, params, seen = [], [], set()
    for name in names:
        if name in seen:
            raise IdentifyError(f"key {name!r} is given twice")
        seen.add(name)
        path, index = _parse(name, valid)
        value = base[path]
        rotation = path.startswith("bodies.") and path.endswith(".quat")
        if rotation and index is not None:
            raise IdentifyError(
                f"key {name!r}: an orientation is fitted whole: give {path} (fitted as a turn "
                "from the file's orientation, three angles; the value is the quaternion)"
            )
        if index is not None and (value.dim() != 1 or index >= value.shape[0]):
            raise IdentifyError(
                f"key {name!r}: {path} has {value.numel()} component(s); index 0 to "
                f"{value.numel() - 1}"
                if value.dim() == 1
                else f"key {name!r}: {path} is a number"
            )
        if path == "camera.look_at" and index is None:
            kind, own = "look_at", ["camera.look_at:pan", "camera.look_at:tilt"]
            step = 2.0 / float(scene.camera.fy.detach().reshape(-1)[0])
            params += [Param(n, {"init": 0.0, "scale": step, "prior": _AIM / step}) for n in own]
        elif path == "camera.up" and index is None:
            kind, own = "up", ["camera.up:roll"]
            step = 4.0 / scene.camera.width
            params.append(Param(own[0], {"init": 0.0, "scale": step, "prior": _AIM / step}))
        elif rotation:
            kind, own = "rotation", [name]
            step = 2.0 * pixel / max(_body_radius(scene, path.split(".")[1]), 10 * pixel)
            params.append(Param(name, {"init": [0.0, 0.0, 0.0], "scale": [step] * 3}))
        elif value.dim() == 0 or index is not None:
            kind, own = "plain", [name]
            init = float(value if index is None else value[index])
            params.append(Param(name, _spec_for(path, init, scene, pixel)))
        else:
            kind, own = "plain", [name]
            specs = [_spec_for(path, float(v), scene, pixel) for v in value]
            spec = {"init": [s["init"] for s in specs]}
            if "bounds" in specs[0]:
                spec["bounds"] = specs[0]["bounds"]
            elif specs[0].get("positive"):
                spec["positive"] = True
            else:
                spec["scale"] = [s["scale"] for s in specs]
            if all("prior" in s for s in specs):
                spec["prior"] = [s["prior"] for s in specs]
            params.append(Param(name, spec))
        keys.append(_Key(name, path, index, value, kind, own))
    sizes = {}
    if fit_sizes:
        sized = {k.path for k in keys}
        shapes = {b["name"]: b["shape"] for b in scene.config.bodies}
        for i in scene.dynamic_bodies:
            body = scene.body_names[i]
            if f"bodies.{body}.size" not in sized and shapes[body] != "mesh":
                sizes[body] = SIZE_PREFIX + body
                params.append(
                    Param(SIZE_PREFIX + body, {"init": 1.0, "positive": True, "prior": _SIZE})
                )
    return KeySet(keys, params, sizes, base)
