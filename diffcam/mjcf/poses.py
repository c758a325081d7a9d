"""An element's pose in its parent frame from ``pos`` and one orientation attribute."""

from __future__ import annotations

import numpy as np

from .context import ConversionContext
from .rotations import axis_angle_matrix, euler_matrix, quat_to_matrix, xyaxes_matrix, z_to_vector
from .supported import ORIENTATIONS
from .xmltree import Node


def element_pose(ctx: ConversionContext, node: Node, attrs: dict) -> tuple[np.ndarray, np.ndarray]:
    """(rotation, position) of an element in its parent frame."""
    pos = np.asarray(ctx.floats(node, attrs, "pos", (3,), [0.0, 0.0, 0.0]))
    given = [k for k in ORIENTATIONS if k in attrs]
    given_own = [k for k in ORIENTATIONS if k in node.attrib]
    if len(given_own) > 1:
        raise ctx.error(
            node, f"more than one orientation given ({', '.join(given_own)})", "one of them"
        )
    # The element's own orientation wins over one from its default class.
    key = given_own[0] if given_own else (given[0] if given else None)
    if key is None:
        return np.eye(3), pos
    return _orientation(ctx, node, attrs, key), pos


def _orientation(ctx: ConversionContext, node: Node, attrs: dict, key: str) -> np.ndarray:
    """The rotation matrix of orientation attribute ``key`` (one of `ORIENTATIONS`)."""
    if key == "quat":
        q = np.asarray(ctx.floats(node, attrs, "quat", (4,)))
        if np.linalg.norm(q) < 1e-12:
            raise ctx.error(node, "quat is zero")
        return quat_to_matrix(q / np.linalg.norm(q))
    if key == "axisangle":
        v = ctx.floats(node, attrs, "axisangle", (4,))
        if np.linalg.norm(v[:3]) < 1e-12:
            raise ctx.error(node, "axisangle has a zero axis")
        return axis_angle_matrix(v[:3], ctx.angle(v[3]))
    if key == "euler":
        v = ctx.floats(node, attrs, "euler", (3,))
        return euler_matrix([ctx.angle(x) for x in v], ctx.eulerseq)
    if key == "xyaxes":
        v = ctx.floats(node, attrs, "xyaxes", (6,))
        if np.linalg.norm(np.cross(v[:3], v[3:])) < 1e-12:
            raise ctx.error(node, "xyaxes: the axes are parallel or zero")
        return xyaxes_matrix(v)
    v = ctx.floats(node, attrs, "zaxis", (3,))
    if np.linalg.norm(v) < 1e-12:
        raise ctx.error(node, "zaxis is zero")
    return z_to_vector(v)
