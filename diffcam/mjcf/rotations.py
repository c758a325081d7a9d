"""MuJoCo's orientation specifiers as rotation matrices (numpy, float64).

MJCF allows one of ``quat`` [w x y z], ``axisangle``, ``euler`` (with ``<compiler eulerseq>``:
a lowercase letter rotates about the moving axes, an uppercase one about the fixed axes),
``xyaxes`` and ``zaxis``; ``fromto`` orients a capsule or cylinder along its segment. These
follow MuJoCo's own resolution rules (``mjs_resolveOrientation`` and ``mjuu_z2quat``).
"""

from __future__ import annotations

import math

import numpy as np


def quat_to_matrix(q) -> np.ndarray:
    """world_from_local rotation of a unit quaternion [w, x, y, z]."""
    w, x, y, z = (float(v) for v in q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def matrix_to_quat(r: np.ndarray) -> np.ndarray:
    """[w, x, y, z] with w >= 0 of a rotation matrix (Shepperd's method)."""
    r = np.asarray(r, dtype=float)
    trace = r[0, 0] + r[1, 1] + r[2, 2]
    if trace > 0:
        s = 2.0 * math.sqrt(trace + 1.0)
        q = [0.25 * s, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s]
    elif r[0, 0] > r[1, 1] and r[0, 0] > r[2, 2]:
        s = 2.0 * math.sqrt(1.0 + r[0, 0] - r[1, 1] - r[2, 2])
        q = [(r[2, 1] - r[1, 2]) / s, 0.25 * s, (r[0, 1] + r[1, 0]) / s, (r[0, 2] + r[2, 0]) / s]
    elif r[1, 1] > r[2, 2]:
        s = 2.0 * math.sqrt(1.0 + r[1, 1] - r[0, 0] - r[2, 2])
        q = [(r[0, 2] - r[2, 0]) / s, (r[0, 1] + r[1, 0]) / s, 0.25 * s, (r[1, 2] + r[2, 1]) / s]
    else:
        s = 2.0 * math.sqrt(1.0 + r[2, 2] - r[0, 0] - r[1, 1])
        q = [(r[1, 0] - r[0, 1]) / s, (r[0, 2] + r[2, 0]) / s, (r[1, 2] + r[2, 1]) / s, 0.25 * s]
    q = np.asarray(q)
    q /= np.linalg.norm(q)
    return -q if q[0] < 0 else q


def axis_angle_matrix(axis, angle: float) -> np.ndarray:
    """Rotation by ``angle`` (rad) about ``axis`` (normalised here)."""
    a = np.asarray(axis, dtype=float)
    a = a / np.linalg.norm(a)
    half = 0.5 * angle
    return quat_to_matrix([math.cos(half), *(math.sin(half) * a)])


def euler_matrix(angles, seq: str) -> np.ndarray:
    """MuJoCo's ``euler``: rotations about seq[0], seq[1], seq[2] in turn; a lowercase axis is
    a moving (intrinsic) axis (post-multiplied), an uppercase one a fixed (extrinsic) axis
    (pre-multiplied). ``angles`` in radians."""
    r = np.eye(3)
    for letter, angle in zip(seq, angles, strict=True):
        axis = {"x": (1, 0, 0), "y": (0, 1, 0), "z": (0, 0, 1)}[letter.lower()]
        step = axis_angle_matrix(axis, angle)
        r = r @ step if letter.islower() else step @ r
    return r


def xyaxes_matrix(values) -> np.ndarray:
    """``xyaxes``: the frame's x axis, and its y axis (made orthogonal to x); z = x × y."""
    x = np.asarray(values[:3], dtype=float)
    y = np.asarray(values[3:], dtype=float)
    x = x / np.linalg.norm(x)
    y = y - x * (x @ y)
    y = y / np.linalg.norm(y)
    return np.stack([x, y, np.cross(x, y)], axis=1)


def z_to_vector(vec) -> np.ndarray:
    """The smallest rotation taking +z to ``vec`` (MuJoCo's ``zaxis`` and ``fromto``)."""
    v = np.asarray(vec, dtype=float)
    v = v / np.linalg.norm(v)
    z = np.array([0.0, 0.0, 1.0])
    axis = np.cross(z, v)
    s = np.linalg.norm(axis)
    if s < 1e-10:
        return np.eye(3) if v[2] > 0 else axis_angle_matrix((1.0, 0.0, 0.0), math.pi)
    return axis_angle_matrix(axis / s, math.atan2(s, float(z @ v)))
