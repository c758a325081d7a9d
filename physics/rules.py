"""The model rules: what makes a set of bodies and joints a model the engine can simulate.

Both `physics.build_world` and the scene loader (`diffcam.scene`) check a model with these
functions, so that the two layers accept the same models. They look at plain values (numbers,
lists, tensors, names; None for a key that is not given) rather than at a `WorldSpec`, because
the scene loader checks a file item by item before anything is built. Each raises a
`ModelError` whose ``section``, ``index``, ``name`` and ``field`` say where the mistake is
(``joints[2].limits``, for the joint named in ``name``).

The rules:

- Body names are unique and not "world" (the name of the fixed world frame).
- A body's shape is one of `SHAPES`; a plane is static (it is infinite, so it cannot move).
- A static body never moves: it takes no mass or density, and no velocity other than zero.
  A dynamic body takes a mass or a density (not both).
- Joint names are unique; a joint's type is one of `JOINT_TYPES`.
- A joint's parent is a body or "world", its child a body other than its parent. Two joints
  may join the same bodies (a hinge and a slider on one axis make a cylindrical joint; the
  maximal-coordinates engine solves redundant rows too, the reduced one needs a tree).
- A joint's child is a dynamic body. A joint moves its child: the joint coordinate q, its
  initial ``position`` and ``velocity`` move the child and the bodies below it, and the
  reduced-coordinates engine integrates children. A static body is a fixed frame like the world:
  it can be a parent. (A static child on a dynamic parent is the same model with parent and
  child swapped, and the axis negated to keep the sign of q.)
- Limits, damping, a motor and an initial position or velocity belong to hinge and slider
  joints (ball and fixed joints have no single coordinate); damping 0 is accepted on any joint.
- Limits are [lower, upper] with lower < upper (equal limits would leave no room to move: use
  a fixed joint).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Sequence

import torch

from .spec import JOINT_TYPES, SHAPES, ModelError

_COORDINATE_JOINTS = ("hinge", "slider")


def _did_you_mean(word: object, choices: Sequence[str]) -> str:
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _values(value) -> torch.Tensor:
    """A number, list or tensor as a float64 tensor without graph, for a rule to look at."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", torch.float64)
    return torch.as_tensor(value, dtype=torch.float64)


def _nonzero(value) -> bool:
    try:
        return bool((_values(value) != 0).any())
    except (TypeError, ValueError):
        return True


def check_body_names(names: Sequence[str]) -> None:
    """Body names are unique and not "world"."""
    for index, name in enumerate(names):
        where = {"section": "bodies", "index": index, "name": name, "field": "name"}
        if name == "world":
            raise ModelError(
                'the name "world" is reserved for the fixed world frame',
                accepted="any other name",
                **where,
            )
        if name in names[:index]:
            raise ModelError(
                f"duplicate body name {name!r}: the name is used twice",
                accepted="unique body names",
                **where,
            )


def check_body(
    index: int,
    name: str,
    *,
    shape: str,
    static: bool,
    mass=None,
    density=None,
    velocity=None,
    angular_velocity=None,
    points=None,
) -> None:
    """One body: its shape, and static or with a mass (None: not given); a hull's points."""

    def error(field: str, reason: str, accepted: str | None = None) -> ModelError:
        return ModelError(
            reason, accepted=accepted, section="bodies", index=index, name=name, field=field
        )

    if shape not in SHAPES:
        raise error("shape", f"shape {shape!r} is unknown", ", ".join(SHAPES))
    if shape == "plane" and not static:
        raise error("static", "a plane must be static", "static = true")
    if shape == "hull":
        _check_hull_points(points, error)
        if density is not None:
            raise error(
                "density",
                "a hull's volume is not known to the engine, so its density cannot give a mass",
                "mass = (kg)",
            )
    elif points is not None:
        raise error("points", f"only a hull takes points, not a {shape}", 'shape = "hull"')
    if static:
        for field, value in (("mass", mass), ("density", density)):
            if value is not None:
                raise error(field, f"a static body takes no {field} (it never moves)")
        for field, value in (("velocity", velocity), ("angular_velocity", angular_velocity)):
            if value is not None and _nonzero(value):
                raise error(field, f"a static body never moves; its {field} must be zero")
        return
    if mass is not None and density is not None:
        raise error("density", "give mass or density, not both")
    if mass is None and density is None:
        raise error(
            "mass",
            "a moving body needs a mass",
            "mass = 1.0 (kg), density = 1000.0 (kg/m^3), or static = true",
        )


def _check_hull_points(points, error) -> None:
    if points is None:
        raise error("points", "a hull needs its points", "points = [[x, y, z], ...] (m), 4 or more")
    try:
        values = _values(points)
    except (TypeError, ValueError):
        values = None
    if values is None or values.ndim != 2 or values.shape[-1] != 3 or values.shape[0] < 4:
        shape = None if values is None else list(values.shape)
        raise error("points", f"a hull's points must be a K x 3 list with K >= 4, got {shape}")
    if not bool(torch.isfinite(values).all()):
        raise error("points", "a hull's points must be finite")
    spread = values.amax(0) - values.amin(0)
    if bool((spread <= 0).any()):
        raise error("points", "a hull's points span no volume (they lie in a plane or a line)")


def check_joint_names(names: Sequence[str]) -> None:
    """Joint names are unique."""
    for index, name in enumerate(names):
        if name in names[:index]:
            raise ModelError(
                f"duplicate joint name {name!r}: the name is used twice",
                accepted="unique joint names",
                section="joints",
                index=index,
                name=name,
                field="name",
            )


def check_joint(
    index: int,
    name: str,
    *,
    type: str,
    parent: str,
    child: str,
    bodies: Sequence[str],
    static: Collection[str],
) -> None:
    """One joint's type and the bodies it joins; ``bodies``: every body's name, ``static``: the
    static bodies' names."""

    def error(field: str, reason: str, accepted: str | None = None) -> ModelError:
        return ModelError(
            reason, accepted=accepted, section="joints", index=index, name=name, field=field
        )

    if type not in JOINT_TYPES:
        raise error("type", f"type {type!r} is unknown", ", ".join(JOINT_TYPES))
    if child == "world":
        raise error(
            "child", 'the child cannot be "world"', 'a body; "world" can be the parent (swap them)'
        )
    for role, choices in (("parent", ["world", *bodies]), ("child", list(bodies))):
        other = parent if role == "parent" else child
        if other not in choices:
            raise error(
                role,
                f"{role} {other!r} is not a body{_did_you_mean(other, choices)}",
                ", ".join(choices),
            )
    if child == parent:
        raise error(
            "child", f"parent and child are the same body {child!r}", "two different bodies"
        )
    if child in static:
        raise error(
            "child",
            f"body {child!r} is static; a joint's child must be a dynamic body (the joint moves it)",
            "a dynamic child; a static body can be the parent (swap parent and child, and negate "
            "the axis to keep the sign of q)",
        )


def check_joint_options(
    index: int,
    name: str,
    *,
    type: str,
    limits=None,
    damping=None,
    motor=None,
    position=None,
    velocity=None,
) -> None:
    """Limits, damping, a motor, an initial position or velocity: hinge and slider joints only
    (None: not given; a damping of zero is accepted on any joint)."""
    if type in _COORDINATE_JOINTS:
        return
    given = {
        "limits": limits is not None,
        "damping": damping is not None and _nonzero(damping),
        "motor": motor is not None,
        "position": position is not None,
        "velocity": velocity is not None,
    }
    what = {
        "limits": "limits need",
        "damping": "damping needs",
        "motor": "a motor needs",
        "position": "an initial position needs",
        "velocity": "an initial velocity needs",
    }
    for field, present in given.items():
        if present:
            raise ModelError(
                f"{what[field]} a hinge or slider joint; not allowed on a {type} joint "
                "(it has no coordinate)",
                accepted="hinge or slider",
                section="joints",
                index=index,
                name=name,
                field=field,
            )


def check_limits(index: int, name: str, limits) -> None:
    """Limits [lower, upper] (numbers, or a tensor (2,) or (B, 2)) with lower < upper."""
    try:
        values = _values(limits)
    except (TypeError, ValueError):
        return  # not numbers: the field's type check says so
    if values.dim() == 0 or values.shape[-1] != 2:
        return  # the wrong shape: the field's type check says so
    if not bool((values[..., 0] < values[..., 1]).all()):
        shown = values.tolist()
        raise ModelError(
            f"limits must be [lower, upper] with lower < upper, got {shown}",
            accepted="[lower, upper] with lower < upper (a fixed joint for no motion)",
            section="joints",
            index=index,
            name=name,
            field="limits",
        )


def check_model(spec) -> None:
    """Every rule on a `WorldSpec`: its bodies, then its joints."""
    names = [body.name for body in spec.bodies]
    check_body_names(names)
    for index, body in enumerate(spec.bodies):
        check_body(
            index,
            body.name,
            shape=body.shape,
            static=bool(body.static),
            mass=body.mass,
            density=body.density,
            velocity=body.velocity,
            angular_velocity=body.angular_velocity,
            points=body.points,
        )
    static = {body.name for body in spec.bodies if body.static}
    check_joint_names([joint.name for joint in spec.joints])
    for index, joint in enumerate(spec.joints):
        check_joint(
            index,
            joint.name,
            type=joint.type,
            parent=joint.parent,
            child=joint.child,
            bodies=names,
            static=static,
        )
        check_joint_options(
            index,
            joint.name,
            type=joint.type,
            limits=joint.limits,
            damping=joint.damping,
            motor=joint.motor,
            position=joint.position,
            velocity=joint.velocity,
        )
        if joint.limits is not None:
            check_limits(index, joint.name, joint.limits)


__all__ = [
    "check_body",
    "check_body_names",
    "check_joint",
    "check_joint_names",
    "check_joint_options",
    "check_limits",
    "check_model",
]
