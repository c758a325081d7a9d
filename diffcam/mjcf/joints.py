"""A hinge, slide or ball ``<joint>`` to a scene joint: anchor and axis in world coordinates,
limits and damping; joint features diffcam does not have are refused."""

from __future__ import annotations

import numpy as np

from .context import ConversionContext
from .scene_values import clean, unique_name
from .xmltree import Node

_SCENE_JOINT_TYPES = {"hinge": "hinge", "slide": "slider", "ball": "ball"}


def read_joint(
    ctx: ConversionContext,
    node: Node,
    a: dict,
    jtype: str,
    rot: np.ndarray,
    pos: np.ndarray,
    parent_part: str,
    child: str,
    parent_static: bool,
) -> None:
    """Add the scene joint of ``node`` (attributes ``a``, MJCF type ``jtype``) joining body
    ``child`` to ``parent_part``; (``rot``, ``pos``) is the MJCF body's frame in the world."""
    name = a.get("name")
    _check_joint_features(ctx, node, a)
    anchor = rot @ np.asarray(ctx.floats(node, a, "pos", (3,), [0.0, 0.0, 0.0])) + pos
    axis = np.asarray(ctx.floats(node, a, "axis", (3,), [0.0, 0.0, 1.0]))
    if np.linalg.norm(axis) < 1e-12:
        raise ctx.error(node, "axis is zero")
    axis = rot @ (axis / np.linalg.norm(axis))
    kind = _SCENE_JOINT_TYPES[jtype]
    joint = {
        "name": unique_name(name or f"{child}_joint", ctx.used_joint_names, "joint"),
        "type": kind,
        "parent": "world" if parent_static else parent_part,
        "child": child,
        "anchor": clean(anchor),
    }
    if kind != "ball":
        joint["axis"] = clean(axis)
    _read_limits(ctx, node, a, kind, joint)
    damping = ctx.number(node, a, "damping", 0.0)
    if damping < 0:
        raise ctx.error(node, f"damping={damping} is negative", ">= 0")
    if damping > 0 and not ctx.damping_disabled:
        if kind == "ball":
            raise ctx.error(node, "damping on a ball joint is not supported", 'damping="0"')
        joint["damping"] = damping
    if "limits" in joint:
        ctx.note("joint limits are hard (inelastic) stops in diffcam, soft in MuJoCo")
    ctx.add_joint(joint, name)
    ctx.joint_nodes[name or joint["name"]] = (node, kind, joint)


def _check_joint_features(ctx: ConversionContext, node: Node, a: dict) -> None:
    """Refuse springs, armature, dry friction, a reference position and actuator force
    limits on the joint."""
    for key, what in (
        ("armature", "armature (rotor inertia)"),
        ("stiffness", "joint springs (stiffness)"),
        ("frictionloss", "dry joint friction (frictionloss)"),
    ):
        if ctx.number(node, a, key, 0.0) != 0.0:
            raise ctx.error(
                node, f"{key}={a[key]} is not supported: diffcam has no {what}", f'{key}="0"'
            )
    if ctx.number(node, a, "ref", 0.0) != 0.0:
        raise ctx.error(node, "ref (a non-zero reference position) is not supported", 'ref="0"')
    if any(ctx.floats(node, a, "springdamper", (2,), [0.0, 0.0])):
        raise ctx.error(node, "springdamper is not supported", '"0 0"')
    if a.get("actuatorfrclimited") == "true":
        raise ctx.error(node, "actuatorfrclimited is not supported", "forcerange on the motor")


def _read_limits(ctx: ConversionContext, node: Node, a: dict, kind: str, joint: dict) -> None:
    """Set ``joint["limits"]`` from ``range`` when the joint is limited (``limited``, or
    ``autolimits`` and a range); hinge ranges are converted to radians."""
    limited = ctx.boolean(node, a, "limited", ("true", "false", "auto")) or "auto"
    if limited == "auto":
        limited = "true" if ("range" in a and ctx.autolimits) else "false"
    if limited != "true":
        return
    rng = ctx.floats(node, a, "range", (2,), None)
    if rng is None:
        raise ctx.error(node, 'limited="true" needs a range', 'range="lower upper"')
    if kind == "ball":
        raise ctx.error(node, "limits on a ball joint are not supported")
    if kind == "hinge":
        rng = [ctx.angle(v) for v in rng]
    if not rng[0] < rng[1]:
        raise ctx.error(node, f'range="{a["range"]}": lower must be below upper')
    if ctx.limits_disabled:
        ctx.note('joint limits are disabled by <option><flag limit="disable">')
    else:
        joint["limits"] = clean(rng)
