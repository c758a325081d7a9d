"""The scene's camera (the model's first ``<camera>``, else a default one looking at the model)
and its light."""

from __future__ import annotations

import math

import numpy as np

from .context import ConversionContext
from .defaults import class_attrs
from .poses import element_pose
from .scene_values import clean
from .xmltree import Node

DEFAULT_RESOLUTION = [320, 240]
_BACKGROUND = [0.85, 0.9, 0.95]


def record_camera(
    ctx: ConversionContext,
    node: Node,
    rot: np.ndarray,
    pos: np.ndarray,
    childclass: str | None,
    moving: bool,
) -> None:
    """Remember a ``<camera>`` with its world pose in the initial configuration (its parent
    frame is (``rot``, ``pos``); ``moving``: it is on a body that can move)."""
    a = class_attrs(ctx, node, childclass)
    ctx.check_attrs(node, a)
    r, p = element_pose(ctx, node, a)
    ctx.cameras.append((node, {"rot": rot @ r, "pos": rot @ p + pos, "attrs": a}, moving))


def camera_table(ctx: ConversionContext) -> dict:
    """The scene's ``[camera]``: the first MJCF camera, fixed at its initial pose."""
    if not ctx.cameras:
        return default_camera_table(ctx)
    node, cam, moving = ctx.cameras[0]
    a = cam["attrs"]
    if len(ctx.cameras) > 1:
        ctx.note(f"only the first camera ({node.path}) is used")
    if moving:
        ctx.note(f"{node.path}: diffcam cameras are fixed; its initial pose is used")
    if a.get("mode", "fixed") != "fixed":
        ctx.note(f'{node.path}: mode="{a["mode"]}" is not supported; the initial pose is used')
    rot, pos = cam["rot"], cam["pos"]
    fovy = ctx.number(node, a, "fovy", 45.0)  # always degrees in MJCF
    res = ctx.floats(node, a, "resolution", (2,), None)
    resolution = [int(v) for v in res] if res and min(res) > 1 else list(DEFAULT_RESOLUTION)
    # MuJoCo cameras look along their -z axis with +y up.
    return {
        "resolution": resolution,
        "position": clean(pos),
        "look_at": clean(pos - rot[:, 2]),
        "up": clean(rot[:, 1]),
        "fov_y_deg": fovy,
        "background": list(_BACKGROUND),
    }


def default_camera_table(ctx: ConversionContext) -> dict:
    """From the front (-y), a little above, the whole model (planes excepted) in view."""
    lo, hi = np.full(3, np.inf), np.full(3, -np.inf)
    for p in ctx.parts:
        b = p.body
        if b["shape"] == "plane":
            continue
        if b["shape"] == "mesh":
            reach = p.mesh_reach
        else:
            size = b["size"]
            reach = size if b["shape"] == "sphere" else (
                0.5 * float(np.linalg.norm(size)) if b["shape"] == "box"
                else size[0] + 0.5 * size[1]
            )  # fmt: skip
        centre = np.asarray(b["position"])
        lo, hi = np.minimum(lo, centre - reach), np.maximum(hi, centre + reach)
    if not np.isfinite(lo).all():
        lo, hi = np.array([-1.0, -1.0, 0.0]), np.array([1.0, 1.0, 1.0])
    centre = 0.5 * (lo + hi)
    radius = max(0.5 * float(np.linalg.norm(hi - lo)), 0.1)
    fov = 45.0
    distance = 1.1 * radius / math.sin(math.radians(fov / 2))
    elevation = math.radians(15.0)
    eye = centre + distance * np.array([0.0, -math.cos(elevation), math.sin(elevation)])
    ctx.note("the model has no <camera>: a default camera looks at it from -y")
    return {
        "resolution": list(DEFAULT_RESOLUTION),
        "position": clean(eye),
        "look_at": clean(centre),
        "up": [0.0, 0.0, 1.0],
        "fov_y_deg": fov,
        "background": list(_BACKGROUND),
    }


def light_table() -> dict:
    """The scene's ``[light]``, the same for every model: MJCF lights are not converted (they
    are noted as ignored)."""
    return {"ambient": 0.5, "direction": [0.4, -1.0, 1.5], "intensity": 0.5}
