"""Make a synthetic but realistic phone video of a swinging pendulum, with its ground truth.

Independent of this repository's ``diffcam`` and ``physics`` packages on purpose: the physics is
a SciPy ODE and the picture is numpy ray casting, so a method fitted to this clip is not fitted
to its own renderer. The clip imitates a phone on a tripod filming a two-coloured bob on a string
in front of a cluttered wall: lens distortion, an off-centre principal point, roll, motion blur
(an exposure integrated in linear light), supersampled anti-aliasing, a soft moving shadow,
vignetting, exposure flicker, photon and read noise, an sRGB tone curve, 8-bit quantisation and
H.264 compression.

Conventions (also written into the truth JSON):

* World: right-handed, z up, SI units, gravity ``g`` along -z. Pivot at the origin; the bob
  centre is ``L * (-sin(theta), 0, -cos(theta))``; ``theta`` is right-handed about +y.
* Camera: OpenCV axes (x right, y down, z forward); pixel (row i, col j) covers x in [j, j+1],
  y in [i, i+1]; a ray goes through (j + 0.5, i + 0.5). OpenCV distortion (k1, k2, p1, p2, k3)
  on normalised coordinates: ``u = fx * x_distorted + cx``.
* Frame k starts at ``t_k = k / fps``; the sensor integrates ``[t_k, t_k + exposure]``.

Usage (from the repository root; the defaults make the bundled clip and its truth)::

    python tests/data/make_realistic_pendulum.py
    python tests/data/make_realistic_pendulum.py --width 1280 --height 720 --fps 60 \
        --seconds 25 --out /tmp/big.mp4 --truth /tmp/big.json
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

HERE = Path(__file__).resolve().parent

G = 9.81  # m/s^2, along -z
WALL_Y = 0.15  # m, wall plane (faces the camera, at -y)
FLOOR_Z = -1.25  # m, floor plane
ROD_RADIUS = 0.006  # m, bracket arm (a cylinder along y through the pivot)
ROD_Y = (-0.012, WALL_Y)  # m, its extent along y
STRING_RADIUS = 0.00075  # m (1.5 mm thick)
STRING_RGB = np.array([0.035, 0.035, 0.038])  # linear radiance
BOB_RED = np.array([0.55, 0.035, 0.025])  # linear albedo, body x > 0
BOB_YELLOW = np.array([0.62, 0.42, 0.03])  # linear albedo, body x < 0
LIGHT_DIR = np.array([-0.35, -0.55, 0.75]) / np.linalg.norm([-0.35, -0.55, 0.75])  # to light
LIGHT_TINT = np.array([1.0, 0.95, 0.86])  # warm indoor light
LIGHT_DIRECT = 0.85  # irradiance of the key light on a surface facing it
BOB_AMBIENT = 0.28
BOB_SPECULAR = (0.35, 50.0)  # Blinn-Phong weight and exponent
SHADOW_STRENGTH = 0.4  # fraction of the key light the bob removes in its umbra
SHADOW_SOFTNESS = 0.35  # penumbra half-width, in bob-normalised units
EXPOSURE_GAIN = 1.25  # scene radiance -> sensor linear value
VIGNETTE = 0.15  # corners this much darker
FLICKER = 0.01  # per-frame gain uniform in [1 - FLICKER, 1 + FLICKER]
FULL_WELL = 1200.0  # photon noise: variance = value / FULL_WELL (linear, 1.0 = white)
READ_NOISE = 0.0025  # linear standard deviation


# ----------------------------------------------------------------------------- physics
def simulate(
    length: float,
    mass: float,
    semi_axes: tuple[float, float, float],
    damping: float,
    theta0: float,
    theta_dot0: float,
    t_end: float,
):
    """Integrate ``I theta'' = -m g L sin(theta) - c theta'`` from t = 0 to ``t_end`` (s).

    Returns ``(I, sol)``: I (kg m^2) about the pivot and SciPy's dense solution; ``sol.sol(t)``
    gives ``[theta (rad), theta_dot (rad/s)]`` with shape (2,) or (2, T).
    """
    ax, _, az = semi_axes
    inertia = mass * length**2 + mass * (ax**2 + az**2) / 5.0

    def rhs(_t, s):
        return [s[1], (-mass * G * length * math.sin(s[0]) - damping * s[1]) / inertia]

    sol = solve_ivp(
        rhs,
        (0.0, t_end),
        [theta0, theta_dot0],
        method="DOP853",
        rtol=1e-11,
        atol=1e-12,
        dense_output=True,
    )
    if not sol.success:
        raise RuntimeError(sol.message)
    return inertia, sol


def first_period(sol, t_end: float) -> float:
    """Time (s) between the first two downward zero crossings of theta (same direction)."""
    t = np.arange(0.0, t_end, 1e-3)
    th = sol.sol(t)[0]
    k = np.nonzero((th[:-1] > 0) & (th[1:] <= 0))[0]
    if len(k) < 2:
        raise ValueError("fewer than two downward zero crossings; integrate longer")
    f = lambda s: sol.sol(s)[0]  # noqa: E731
    t1, t2 = (brentq(f, t[i], t[i + 1], xtol=1e-14) for i in k[:2])
    return float(t2 - t1)


def bob_pose(theta: float, length: float) -> tuple[np.ndarray, np.ndarray]:
    """World bob centre (3,) in m and world_from_body rotation (3, 3) for angle theta (rad).

    Body z points from the bob centre to the pivot; body y is world y (rotation about +y).
    """
    s, c = math.sin(theta), math.cos(theta)
    rot = np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])
    return length * np.array([-s, 0.0, -c]), rot


# ----------------------------------------------------------------------------- camera
def make_camera(
    width: int,
    height: int,
    *,
    fov_y_deg: float = 38.0,
    eye=(0.05, -2.4, -0.49),
    target=(-0.01, 0.0, -0.56),
    roll_deg: float = 1.2,
    principal_offset_px=(1.5, -1.0),
    distortion=(-0.04, 0.01, 0.0, 0.0, 0.0),
) -> dict:
    """The phone camera as a dict of numpy values (see the module docstring for conventions).

    ``principal_offset_px`` is given at 320x180 and scales with the resolution. ``up`` is the
    world up vector tilted by ``roll_deg`` about +y; the rotation is a look-at with that up.
    """
    eye = np.asarray(eye, float)
    target = np.asarray(target, float)
    roll = math.radians(roll_deg)
    up = np.array([math.sin(roll), 0.0, math.cos(roll)])
    fwd = (target - eye) / np.linalg.norm(target - eye)
    right = np.cross(fwd, up)
    right /= np.linalg.norm(right)
    down = np.cross(fwd, right)
    rot = np.stack([right, down, fwd], axis=1)  # columns: camera x, y, z in world
    fy = 0.5 * height / math.tan(math.radians(fov_y_deg) / 2.0)
    return {
        "width": int(width),
        "height": int(height),
        "fx": fy,
        "fy": fy,
        "cx": 0.5 * width + principal_offset_px[0] * width / 320.0,
        "cy": 0.5 * height + principal_offset_px[1] * height / 180.0,
        "dist": np.asarray(distortion, float),  # k1, k2, p1, p2, k3
        "position": eye,
        "rotation": rot,
        "look_at": target,
        "up": up,
        "fov_y_deg": fov_y_deg,
        "roll_deg": roll_deg,
    }


def _distort(cam: dict, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OpenCV distortion of normalised coordinates x/z, y/z (any equal shapes)."""
    k1, k2, p1, p2, k3 = cam["dist"]
    r2 = x * x + y * y
    rad = 1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))
    xd = x * rad + 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
    yd = y * rad + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
    return xd, yd


def _undistort(cam: dict, xd: np.ndarray, yd: np.ndarray, iters: int = 20):
    """Invert ``_distort`` by fixed-point iteration (as cv2.undistortPoints does)."""
    k1, k2, p1, p2, k3 = cam["dist"]
    x, y = xd.copy(), yd.copy()
    for _ in range(iters):
        r2 = x * x + y * y
        inv = 1.0 / (1.0 + r2 * (k1 + r2 * (k2 + r2 * k3)))
        dx = 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
        dy = p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
        x, y = (xd - dx) * inv, (yd - dy) * inv
    return x, y


def project(cam: dict, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """World points (..., 3) in m -> distorted pixel coordinates (..., 2) as (u=x, v=y) in
    continuous pixel units (pixel centres at +0.5), and camera depth (...) in m."""
    pc = (np.asarray(points, float) - cam["position"]) @ cam["rotation"]
    z = pc[..., 2]
    xd, yd = _distort(cam, pc[..., 0] / z, pc[..., 1] / z)
    return np.stack([cam["fx"] * xd + cam["cx"], cam["fy"] * yd + cam["cy"]], axis=-1), z


def sample_rays(cam: dict, ss: int) -> np.ndarray:
    """World ray directions (H*W, ss*ss, 3) through an ss x ss grid inside every output pixel.

    Directions are scaled so their camera-z component is 1: the ray parameter is the depth.
    """
    w, h = cam["width"], cam["height"]
    off = (np.arange(ss) + 0.5) / ss
    u = (np.arange(w)[:, None] + off[None, :]).reshape(-1)  # (W*ss,)
    v = (np.arange(h)[:, None] + off[None, :]).reshape(-1)  # (H*ss,)
    x, y = _undistort(
        cam, (u[None, :] - cam["cx"]) / cam["fx"], (v[:, None] - cam["cy"]) / cam["fy"]
    )
    d = np.stack([x, y, np.ones_like(x)], axis=-1) @ cam["rotation"].T  # (H*ss, W*ss, 3)
    d = d.reshape(h, ss, w, ss, 3).transpose(0, 2, 1, 3, 4)
    return np.ascontiguousarray(d.reshape(h * w, ss * ss, 3))


# ----------------------------------------------------------------------------- textures
class _Noise:
    """Smooth 2-D value noise in [0, 1] from a random lattice (periodic, 256 cells)."""

    def __init__(self, rng: np.random.Generator, size: int = 256):
        self.size = size
        self.table = rng.random((size, size))
        self.offsets = rng.random((16, 2)) * size

    def __call__(self, x: np.ndarray, y: np.ndarray, octave: int = 0) -> np.ndarray:
        x = x + self.offsets[octave, 0]
        y = y + self.offsets[octave, 1]
        xi, yi = np.floor(x), np.floor(y)
        fx, fy = x - xi, y - yi
        fx = fx * fx * (3 - 2 * fx)
        fy = fy * fy * (3 - 2 * fy)
        i0 = xi.astype(np.int64) % self.size
        j0 = yi.astype(np.int64) % self.size
        i1, j1 = (i0 + 1) % self.size, (j0 + 1) % self.size
        t = self.table
        a = t[j0, i0] + fx * (t[j0, i1] - t[j0, i0])
        b = t[j1, i0] + fx * (t[j1, i1] - t[j1, i0])
        return a + fy * (b - a)

    def fbm(self, x, y, scales_amps, first_octave: int = 0) -> np.ndarray:
        """Sum of octaves ``amp * (2 noise(x / scale) - 1)``; x, y and scales in m."""
        out = np.zeros_like(x)
        for k, (scale, amp) in enumerate(scales_amps):
            out += amp * (2.0 * self(x / scale, y / scale, first_octave + k) - 1.0)
        return out


def _rect(x, z, x0, x1, z0, z1):
    """Boolean (N,): wall points (x, z) inside [x0, x1) x [z0, z1), in m."""
    return (x >= x0) & (x < x1) & (z >= z0) & (z < z1)


def _soft_rect(x, z, x0, x1, z0, z1, soft):
    """Smooth indicator of a rectangle, edges blurred over ``soft`` metres."""
    sx = np.clip((x - x0) / soft + 0.5, 0, 1) * np.clip((x1 - x) / soft + 0.5, 0, 1)
    sz = np.clip((z - z0) / soft + 0.5, 0, 1) * np.clip((z1 - z) / soft + 0.5, 0, 1)
    return sx * sz


def _text_mask(u, w, rng, n_lines, pitch, ink, width, cell=0.0045):
    """Text-like stripes: True where 'ink' is, for u (m from left) and w (m from top)."""
    n_cells = int(width / cell)
    grid = np.zeros((n_lines, n_cells), bool)
    for li in range(n_lines):
        end = n_cells if li % 6 != 5 else int(rng.integers(n_cells // 4, n_cells))
        pos = 0
        while pos < end:
            wl = int(rng.integers(2, 10))
            grid[li, pos : min(pos + wl, end)] = True
            pos += wl + 1
    li = np.floor(w / pitch).astype(np.int64)
    ci = np.floor(u / cell).astype(np.int64)
    ok = (li >= 0) & (li < n_lines) & (ci >= 0) & (ci < n_cells) & (w - li * pitch < ink)
    ok &= (u % cell) < 0.8 * cell  # gaps between 'characters'
    return ok & grid[np.clip(li, 0, n_lines - 1), np.clip(ci, 0, n_cells - 1)]


def wall_albedo(x: np.ndarray, z: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Linear albedo (N, 3) of the wall and the things on it at wall points (x, z) in m."""
    noise = _Noise(rng)
    n = len(x)
    # plaster: warm off-white with low-frequency blotches and a fine grain
    plaster = noise.fbm(x, z, [(0.6, 0.035), (0.18, 0.025), (0.05, 0.015), (0.012, 0.012)])
    alb = np.array([0.60, 0.58, 0.53])[None, :] * (1.0 + plaster)[:, None]
    wood = noise.fbm(x * 0.2, z * 3.0, [(0.02, 0.25), (0.006, 0.15)], first_octave=4)

    # picture frame (dark wood), mat, and a painted landscape; soft drop shadow first
    fx0, fx1, fz0, fz1 = -1.28, -0.72, -0.42, 0.02
    alb *= (
        1.0
        - 0.35 * _soft_rect(x, z, fx0 + 0.012, fx1 + 0.012, fz0 - 0.02, fz1 - 0.02, 0.02)[:, None]
    )
    m = _rect(x, z, fx0, fx1, fz0, fz1)
    alb[m] = np.array([0.10, 0.05, 0.025]) * (1.0 + wood[m])[:, None]
    m = _rect(x, z, fx0 + 0.035, fx1 - 0.035, fz0 + 0.035, fz1 - 0.035)
    alb[m] = np.array([0.74, 0.72, 0.66])
    px0, px1, pz0, pz1 = fx0 + 0.085, fx1 - 0.085, fz0 + 0.085, fz1 - 0.085
    m = _rect(x, z, px0, px1, pz0, pz1)
    hz = (z[m] - pz0) / (pz1 - pz0)  # 0 bottom .. 1 top
    hx = (x[m] - px0) / (px1 - px0)
    sky = (
        np.array([0.55, 0.62, 0.70])[None, :] * (1 - hz[:, None])
        + np.array([0.15, 0.30, 0.62])[None, :] * hz[:, None]
    )
    ridge = 0.45 + 0.12 * np.sin(9.0 * hx + 1.0) + 0.06 * np.sin(23.0 * hx)
    field = 0.25 + 0.04 * np.sin(5.0 * hx)
    pic = sky.copy()
    pic[hz < ridge] = np.array([0.22, 0.24, 0.30])
    pic[hz < field] = np.array([0.10, 0.22, 0.05])
    pic *= (1.0 + noise.fbm(x[m], z[m], [(0.03, 0.2), (0.008, 0.1)], first_octave=6))[:, None]
    sun = (hx - 0.75) ** 2 + ((hz - 0.78) * 0.7) ** 2 < 0.004
    pic[sun] = np.array([0.95, 0.80, 0.45])
    alb[m] = pic

    # poster with a coloured header, a picture block and text-like stripes
    qx0, qx1, qz0, qz1 = 0.58, 1.02, -0.78, -0.16
    alb *= (
        1.0
        - 0.25 * _soft_rect(x, z, qx0 + 0.006, qx1 + 0.006, qz0 - 0.01, qz1 - 0.01, 0.012)[:, None]
    )
    m = _rect(x, z, qx0, qx1, qz0, qz1)
    alb[m] = np.array([0.80, 0.78, 0.72]) * (1.0 - 0.06 * (x[m] - qx0))[:, None]
    m = _rect(x, z, qx0 + 0.02, qx1 - 0.02, qz1 - 0.10, qz1 - 0.02)
    alb[m] = np.array([0.50, 0.08, 0.06])
    title = _text_mask(x - (qx0 + 0.04), (qz1 - 0.035) - z, rng, 2, 0.03, 0.018, 0.30, 0.012)
    alb[m & title] = np.array([0.85, 0.82, 0.70])
    m = _rect(x, z, qx0 + 0.03, qx0 + 0.20, qz1 - 0.26, qz1 - 0.13)
    alb[m] = np.array([0.08, 0.20, 0.40])
    m &= (x - (qx0 + 0.115)) ** 2 + (z - (qz1 - 0.195)) ** 2 < 0.04**2
    alb[m] = np.array([0.75, 0.55, 0.10])
    text = _text_mask(x - (qx0 + 0.03), (qz1 - 0.29) - z, rng, 16, 0.018, 0.009, 0.38)
    text |= _text_mask(x - (qx0 + 0.22), (qz1 - 0.14) - z, rng, 7, 0.018, 0.009, 0.18)
    alb[text] = np.array([0.05, 0.05, 0.06])
    for cx_, cz_ in ((qx0 + 0.012, qz1 - 0.012), (qx1 - 0.012, qz1 - 0.012)):  # pins
        alb[(x - cx_) ** 2 + (z - cz_) ** 2 < 0.005**2] = np.array([0.05, 0.25, 0.55])

    # light switch: plate, rocker, a faint edge shadow
    alb *= 1.0 - 0.2 * _soft_rect(x, z, -0.497, -0.417, -0.305, -0.185, 0.008)[:, None]
    m = _rect(x, z, -0.50, -0.42, -0.30, -0.18)
    alb[m] = np.array([0.78, 0.77, 0.74])
    m = _rect(x, z, -0.475, -0.445, -0.27, -0.21)
    alb[m] = np.where((z[m] < -0.24)[:, None], np.array([0.62, 0.61, 0.58]), np.array([0.8] * 3))

    # socket above the skirting board
    m = _rect(x, z, 0.28, 0.36, -1.13, -1.05)
    alb[m] = np.array([0.78, 0.77, 0.74])
    r2 = (x - 0.32) ** 2 + (z + 1.09) ** 2
    alb[m & (r2 < 0.025**2)] = np.array([0.62, 0.61, 0.58])
    for hx_ in (0.31, 0.33):
        alb[(x - hx_) ** 2 + (z + 1.09) ** 2 < 0.0045**2] = np.array([0.03, 0.03, 0.03])

    # shelf (front edge seen as a wooden strip) with books; its shadow on the wall below
    shade = np.exp(-np.clip(0.10 - z, 0, None) / 0.04) * (z < 0.10)
    alb *= (1.0 - 0.35 * shade * _soft_rect(x, z, -1.72, -0.56, -9, 9, 0.05))[:, None]
    m = _rect(x, z, -1.7, -0.58, 0.10, 0.125)
    alb[m] = np.array([0.42, 0.27, 0.14]) * (1.0 + wood[m])[:, None]
    edge = -1.52
    while edge < -0.82:
        wb = float(rng.uniform(0.02, 0.05))
        top = float(rng.uniform(0.30, 0.36))
        col = rng.uniform(0.04, 0.5, 3) * rng.uniform(0.4, 1.0)
        m = _rect(x, z, edge, edge + wb - 0.002, 0.125, top)
        stripe = np.abs(z[m] - (top - 0.03)) < 0.006
        alb[m] = np.where(stripe[:, None], 0.8 * col + 0.1, col)
        edge += wb

    # wall bracket plate (dark metal) and two screws
    m = _rect(x, z, -0.03, 0.03, -0.035, 0.045)
    alb[m] = (
        np.array([0.07, 0.07, 0.075]) * (1.0 + noise.fbm(x[m], z[m], [(0.004, 0.3)], 8))[:, None]
    )
    for sz_ in (0.03, -0.02):
        alb[x**2 + (z - sz_) ** 2 < 0.005**2] = np.array([0.30, 0.30, 0.30])

    # skirting board with a groove
    m = z < FLOOR_Z + 0.09
    alb[m] = np.array([0.74, 0.73, 0.70])
    alb[m & (z > FLOOR_Z + 0.078) & (z < FLOOR_Z + 0.084)] = np.array([0.35, 0.34, 0.32])
    assert alb.shape == (n, 3)
    return alb


def wall_light(x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ambient and key-light irradiance on the wall (N,) each: gradients, a hot spot, a dark
    corner near the floor."""
    ambient = 0.30 * (1.0 + 0.08 * z)
    direct = LIGHT_DIRECT * (-LIGHT_DIR[1]) * (1.0 - 0.16 * x) * (1.0 + 0.10 * z)
    direct = direct + 0.18 * np.exp(-((x + 1.0) ** 2 + (z - 0.3) ** 2) / (2 * 0.7**2))
    corner = 1.0 - 0.3 * np.exp(-np.clip(z - FLOOR_Z, 0, None) / 0.15)
    return ambient * corner, direct * corner


def floor_albedo(x: np.ndarray, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Linear albedo (N, 3) of a wooden plank floor at floor points (x, y) in m."""
    noise = _Noise(rng)
    plank = np.floor(y / 0.14)
    row_shift = (plank * 0.37) % 1.0 * 1.2
    along = np.floor((x + row_shift) / 1.2)
    tint = noise.table[(plank.astype(np.int64) * 7) % 256, (along.astype(np.int64) * 13) % 256]
    grain = noise.fbm(x * 0.15, y * 4.0, [(0.01, 0.2), (0.003, 0.1)])
    alb = np.array([0.30, 0.17, 0.08])[None, :] * ((0.8 + 0.4 * tint) * (1.0 + grain))[:, None]
    seam = ((y / 0.14) % 1.0 < 0.015) | (((x + row_shift) / 1.2) % 1.0 < 0.002)
    alb[seam] *= 0.35
    return alb


def render_background(cam: dict, rays: np.ndarray, rng: np.random.Generator):
    """Static scene per ray sample: wall (with clutter), floor and the bracket arm.

    Args:
        rays: (N, 3) world directions with camera-z component 1.

    Returns:
        radiance (N, 3) linear, depth (N,) in m (camera z), and the key light's share of the
        radiance (N,) where the wall is seen (0 elsewhere), for the bob's shadow.
    """
    o = cam["position"]
    n = len(rays)
    t_wall = (WALL_Y - o[1]) / rays[:, 1]
    depth = t_wall.copy()
    wx = o[0] + t_wall * rays[:, 0]
    wz = o[2] + t_wall * rays[:, 2]
    amb, dirl = wall_light(wx, wz)
    rad = wall_albedo(wx, wz, rng) * (amb + dirl)[:, None]
    key_share = dirl / (amb + dirl)

    # floor, in front of the wall
    with np.errstate(divide="ignore", invalid="ignore"):
        t_floor = np.where(rays[:, 2] < 0, (FLOOR_Z - o[2]) / rays[:, 2], np.inf)
    m = t_floor < depth
    fx, fy = o[0] + t_floor[m] * rays[m, 0], o[1] + t_floor[m] * rays[m, 1]
    f_amb = 0.30 * (1.0 - 0.35 * np.exp(-(WALL_Y - fy) / 0.06))
    f_dir = (
        LIGHT_DIRECT
        * LIGHT_DIR[2]
        * (1.0 - 0.16 * fx)
        * (1.0 - 0.5 * np.exp(-(WALL_Y - fy) / 0.06))
    )
    rad[m] = floor_albedo(fx, fy, rng) * (f_amb + f_dir)[:, None]
    depth[m] = t_floor[m]
    key_share[m] = 0.0

    # bracket arm: cylinder x^2 + z^2 = r^2 for y in ROD_Y, closed by a disc at ROD_Y[0]
    dx, dz = rays[:, 0], rays[:, 2]
    a = dx * dx + dz * dz
    b = 2 * (o[0] * dx + o[2] * dz)
    c = o[0] ** 2 + o[2] ** 2 - ROD_RADIUS**2
    disc = b * b - 4 * a * c
    t_cyl = np.full(n, np.inf)
    ok = disc > 0
    t_cyl[ok] = (-b[ok] - np.sqrt(disc[ok])) / (2 * a[ok])
    y_hit = o[1] + t_cyl * rays[:, 1]
    t_cyl[(y_hit < ROD_Y[0]) | (y_hit > ROD_Y[1])] = np.inf
    t_cap = (ROD_Y[0] - o[1]) / rays[:, 1]
    cap = (o[0] + t_cap * dx) ** 2 + (o[2] + t_cap * dz) ** 2 < ROD_RADIUS**2
    t_cap[~cap] = np.inf
    for t_hit, is_cap in ((t_cyl, False), (t_cap, True)):
        m = t_hit < depth
        if not m.any():
            continue
        p = o + t_hit[m, None] * rays[m]
        nrm = np.tile([0.0, -1.0, 0.0], (m.sum(), 1)) if is_cap else p * [1.0, 0.0, 1.0]
        nrm /= np.linalg.norm(nrm, axis=1, keepdims=True)
        view = -rays[m] / np.linalg.norm(rays[m], axis=1, keepdims=True)
        rad[m] = _shade(nrm, view, np.array([0.30, 0.30, 0.31]), 0.25, 30.0)
        depth[m] = t_hit[m]
        key_share[m] = 0.0
    return rad * LIGHT_TINT, depth, key_share


def _shade(nrm, view, albedo, ks, shininess):
    """Lambert + Blinn-Phong under the key light and an ambient term; (N, 3) linear."""
    ndl = np.clip(nrm @ LIGHT_DIR, 0.0, None)
    half = LIGHT_DIR + view
    half /= np.linalg.norm(half, axis=-1, keepdims=True)
    spec = ks * LIGHT_DIRECT * np.clip(np.sum(nrm * half, axis=-1), 0.0, None) ** shininess
    spec *= ndl > 0
    return albedo * (BOB_AMBIENT + LIGHT_DIRECT * ndl)[..., None] + spec[..., None]


# ----------------------------------------------------------------------------- moving parts
def _box(cam, p_px, r_px):
    """Flat indices (n,) of the pixels within ``r_px`` of ``p_px`` (u, v), clipped."""
    w, h = cam["width"], cam["height"]
    j0, j1 = max(int(math.floor(p_px[0] - r_px)), 0), min(int(math.ceil(p_px[0] + r_px)), w)
    i0, i1 = max(int(math.floor(p_px[1] - r_px)), 0), min(int(math.ceil(p_px[1] + r_px)), h)
    return (np.arange(i0, i1)[:, None] * w + np.arange(j0, j1)[None, :]).reshape(-1)


def _string_band(cam, centre):
    """Flat indices of a band of columns around the string's projection on each row."""
    w, h = cam["width"], cam["height"]
    pts, _ = project(cam, np.linspace(0.0, 1.0, 33)[:, None] * centre[None, :])
    order = np.argsort(pts[:, 1])
    u, v = pts[order, 0], pts[order, 1]
    rows = np.arange(max(int(v[0]) - 1, 0), min(int(v[-1]) + 2, h))
    slope = np.max(np.abs(np.diff(u) / np.maximum(np.diff(v), 1e-9)))
    half = 2 + int(math.ceil(min(slope, 50.0)))
    cols = np.floor(np.interp(rows + 0.5, v, u)).astype(np.int64)[:, None]
    cols = cols + np.arange(-half, half + 1)[None, :]
    keep = (cols >= 0) & (cols < w)
    return (np.broadcast_to(rows[:, None], cols.shape) * w + cols)[keep]


def prepare_static(cam: dict, ss: int, rng: np.random.Generator) -> dict:
    """Rays and the static scene, per sample and per pixel, for ``render_moving``.

    Returns a dict: ``rays`` (H*W, S, 3) with S = ss * ss, ``rad`` (H*W, S, 3) float32 linear,
    ``depth`` (H*W, S) float32 m, ``key`` (H*W, S) float32 key-light share; per-pixel means
    ``pix_rad`` (H*W, 3) float64, ``pix_ray`` (H*W, 3), ``pix_depth`` and ``pix_key`` (H*W,);
    and ``ss``.
    """
    rays = sample_rays(cam, ss)
    n, s2 = rays.shape[:2]
    rad, depth, key = render_background(cam, rays.reshape(-1, 3), rng)
    out = {
        "rays": rays,
        "rad": rad.reshape(n, s2, 3).astype(np.float32),
        "depth": depth.reshape(n, s2).astype(np.float32),
        "key": key.reshape(n, s2).astype(np.float32),
        "ss": ss,
    }
    out["pix_rad"] = out["rad"].mean(axis=1, dtype=np.float64)
    out["pix_ray"] = rays.mean(axis=1)
    out["pix_depth"] = depth.reshape(n, s2).mean(axis=1)
    out["pix_key"] = key.reshape(n, s2).mean(axis=1)
    return out


def _dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Dot product over the last axis (faster than np.sum for 3-vectors)."""
    return np.einsum("...i,...i->...", a, b)


def render_moving(cam: dict, static: dict, theta: float, length: float, semi_axes):
    """The bob's soft shadow, the string and the bob over the static scene at one instant.

    Each part is evaluated only on the pixels it can touch; the shadow (soft) once per pixel,
    the string and the bob once per sample.

    Args:
        static: from ``prepare_static``. theta: pendulum angle (rad); length (m);
        semi_axes (3,) m.

    Returns:
        Flat pixel indices (n,) and their supersample-mean linear radiance (n, 3).
    """
    w, h, ss = cam["width"], cam["height"], static["ss"]
    rays, bg_depth = static["rays"], static["depth"]
    centre, rot = bob_pose(theta, length)
    axes = np.asarray(semi_axes, float)
    o = cam["position"]
    to_unit = rot / axes[None, :]  # world offset @ to_unit -> bob unit-sphere coordinates
    c_px, c_z = project(cam, centre)
    i_bob = _box(cam, c_px, 1.2 * axes.max() * cam["fx"] / c_z + 2.0)
    s_wall = (WALL_Y - centre[1]) / -LIGHT_DIR[1]
    sh_px, sh_z = project(cam, centre - s_wall * LIGHT_DIR)
    sh_r = axes.max() * (1 + SHADOW_SOFTNESS) / -LIGHT_DIR[1] * cam["fx"] / sh_z + 2.0
    i_sh = _box(cam, sh_px, sh_r)
    i_str = _string_band(cam, centre)
    slot = np.full(w * h, -1, np.int64)  # pixel -> row in the output
    for i in (i_sh, i_str, i_bob):
        slot[i] = 0
    idx = np.flatnonzero(slot == 0)
    slot[idx] = np.arange(len(idx))
    rad = static["rad"][idx].astype(float)  # (n, S, 3)

    # soft shadow on the wall: the line from a wall point towards the light vs. the bob
    q = (o - centre) + static["pix_depth"][i_sh, None] * static["pix_ray"][i_sh]
    qs = q @ to_unit
    ls = LIGHT_DIR @ to_unit
    ql = qs @ ls
    dist = np.sqrt(np.clip(_dot(qs, qs) - ql**2 / (ls @ ls), 0.0, None))
    occl = np.clip((1.0 + SHADOW_SOFTNESS - dist) / (2 * SHADOW_SOFTNESS), 0.0, 1.0)
    occl = occl * occl * (3 - 2 * occl) * (ql < 0)  # smoothstep; the bob is towards the light
    rad[slot[i_sh]] *= (1.0 - SHADOW_STRENGTH * occl * static["pix_key"][i_sh])[:, None, None]

    # string from the pivot (origin) to the bob centre: the share of each sample's footprint
    # it covers (box filter across the string), where it is in front of the background
    d = rays[i_str]
    a = _dot(d, d)
    b = d @ centre
    dd = d @ o
    e = centre @ o
    s = np.clip((a * e - b * dd) / (a * (centre @ centre) - b * b), 0.0, 1.0)  # on the segment
    t = (s * b - dd) / a  # depth of the ray's point closest to it
    diff = o + t[..., None] * d - s[..., None] * centre
    gap = np.sqrt(_dot(diff, diff))
    half = 0.5 * t / (cam["fx"] * ss)  # half the sample's width at that depth (m)
    lo = np.maximum(gap - STRING_RADIUS, -half)
    hi = np.minimum(gap + STRING_RADIUS, half)
    cov = np.clip(hi - lo, 0.0, None) / (2 * half)
    cov = np.where((t > 0) & (t < bg_depth[i_str]), np.minimum(cov, 1.0), 0.0)[..., None]
    pos = slot[i_str]
    rad[pos] = rad[pos] * (1.0 - cov) + cov * (STRING_RGB * LIGHT_TINT)

    # bob: ray vs ellipsoid in its unit-sphere coordinates
    d = rays[i_bob]
    os_ = (o - centre) @ to_unit
    ds = d @ to_unit
    qa = _dot(ds, ds)
    qb = 2 * ds @ os_
    disc = qb * qb - 4 * qa * (os_ @ os_ - 1.0)
    hit = disc > 0
    tt = (-qb - np.sqrt(np.where(hit, disc, 0.0))) / (2 * qa)
    hit &= (tt > 0) & (tt < bg_depth[i_bob])
    if hit.any():
        ps = os_ + tt[hit, None] * ds[hit]  # unit-sphere point
        nrm = (ps / axes) @ rot.T  # ellipsoid normal in the world (unnormalised)
        nrm /= np.linalg.norm(nrm, axis=-1, keepdims=True)
        view = -d[hit] / np.linalg.norm(d[hit], axis=-1, keepdims=True)
        alb = np.where((ps[:, 0] > 0)[:, None], BOB_RED, BOB_YELLOW)
        pos = slot[i_bob]
        sub = rad[pos]
        sub[hit] = _shade(nrm, view, alb, *BOB_SPECULAR) * LIGHT_TINT
        rad[pos] = sub
    return idx, rad.mean(axis=1)


def render_exposure(cam: dict, static: dict, thetas, length: float, semi_axes) -> np.ndarray:
    """Linear radiance (H, W, 3) averaged over sub-frame renders at angles ``thetas`` (rad)."""
    lin = static["pix_rad"].copy()
    for th in thetas:
        idx, val = render_moving(cam, static, th, length, semi_axes)
        lin[idx] += (val - static["pix_rad"][idx]) / len(thetas)
    return lin.reshape(cam["height"], cam["width"], 3)


# ----------------------------------------------------------------------------- sensor
def srgb_encode(x: np.ndarray) -> np.ndarray:
    """sRGB transfer curve of linear values (clipped to [0, 1])."""
    x = np.clip(x, 0.0, 1.0)
    return np.where(x <= 0.0031308, 12.92 * x, 1.055 * np.power(x, 1 / 2.4) - 0.055)


_LUT_BITS = 16
_SRGB_LUT = np.round(srgb_encode(np.arange(2**_LUT_BITS + 1) / 2**_LUT_BITS) * 255).astype(
    np.uint8
)  # linear value quantised to 16 bits -> 8-bit sRGB


def vignette(cam: dict) -> np.ndarray:
    """(H, W) gain: 1 at the principal point, 1 - VIGNETTE at the farthest image corner."""
    w, h = cam["width"], cam["height"]
    u = np.arange(w) + 0.5 - cam["cx"]
    v = np.arange(h)[:, None] + 0.5 - cam["cy"]
    r2 = u[None, :] ** 2 + v**2
    return 1.0 - VIGNETTE * r2 / r2.max()


def sensor(lin: np.ndarray, gain_map: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Linear radiance (H, W, 3) -> 8-bit sRGB (H, W, 3): gain (vignetting, exposure), photon
    and read noise, the sRGB tone curve and rounding (through a 16-bit lookup table)."""
    x = (lin * gain_map[..., None]).astype(np.float32)
    sd = np.sqrt(np.maximum(x, 0.0) * np.float32(1 / FULL_WELL) + np.float32(READ_NOISE**2))
    x += sd * rng.standard_normal(x.shape, dtype=np.float32)
    code = np.rint(np.clip(x, 0.0, 1.0) * np.float32(2**_LUT_BITS)).astype(np.int32)
    return _SRGB_LUT[code]


# ----------------------------------------------------------------------------- the clip
def make_clip(
    path,
    *,
    width: int = 320,
    height: int = 180,
    fps: float = 30.0,
    seconds: float = 12.0,
    seed: int = 0,
    supersample: int | None = None,
    subframes: int = 8,
    exposure: float = 1.0 / 60.0,
    crf: int = 20,
    length: float = 0.85,
    mass: float = 0.2,
    semi_axes: tuple[float, float, float] = (0.032, 0.032, 0.042),
    damping: float = 0.0087,
    theta0: float = 0.45,
    theta_dot0: float = -0.6,
    truth_path=None,
    progress: bool = False,
) -> dict:
    """Render the clip to ``path`` (H.264 mp4) and return its ground truth as a dict.

    Args:
        path: output .mp4.
        width, height: resolution in pixels (even numbers, for yuv420p).
        fps: frame rate (Hz); frame k starts at k / fps. seconds: clip length (s).
        seed: seeds the textures, noise and flicker (numpy Generator); physics is not random.
        supersample: ss x ss samples per pixel per sub-frame; default 3 up to 360 rows, else 2.
        subframes: renders averaged (linear light) over the exposure, at its stratified midpoints.
        exposure: exposure time (s) from each frame's start.
        crf: libx264 constant rate factor.
        length (m), mass (kg), semi_axes (m, body x, y, z), damping c (N m s/rad),
        theta0 (rad), theta_dot0 (rad/s): the pendulum, at t = 0.
        truth_path: if given, the truth is also written there as JSON.
        progress: print a line every 100 frames.

    Returns:
        The truth (JSON-serialisable dict: physics, camera, video, per-frame arrays).
    """
    import imageio_ffmpeg

    if width % 2 or height % 2:
        raise ValueError("width and height must be even (yuv420p)")
    ss = supersample or (3 if height <= 360 else 2)
    n_frames = int(round(seconds * fps))
    t_start = np.arange(n_frames) / fps
    t_mid = t_start + exposure / 2
    t_sub = t_start[:, None] + (np.arange(subframes) + 0.5) / subframes * exposure

    t_end = max(float(t_sub[-1, -1]), 6.0) + 0.1
    inertia, sol = simulate(length, mass, semi_axes, damping, theta0, theta_dot0, t_end)
    period = first_period(sol, t_end)
    theta_sub = sol.sol(t_sub.reshape(-1))[0].reshape(t_sub.shape)

    rng = np.random.default_rng(seed)
    tex_rng, noise_rng = rng.spawn(2)
    cam = make_camera(width, height)
    static = prepare_static(cam, ss, tex_rng)
    gains = EXPOSURE_GAIN * vignette(cam)
    flicker = 1.0 + noise_rng.uniform(-FLICKER, FLICKER, n_frames)

    writer = imageio_ffmpeg.write_frames(
        str(path),
        (width, height),
        fps=fps,
        codec="libx264",
        pix_fmt_in="rgb24",
        pix_fmt_out="yuv420p",
        quality=None,
        macro_block_size=2,
        ffmpeg_log_level="error",
        output_params=["-crf", str(crf), "-preset", "medium", "-f", "mp4"],
    )
    writer.send(None)
    try:
        for k in range(n_frames):
            lin = render_exposure(cam, static, theta_sub[k], length, semi_axes)
            img = sensor(lin, gains * flicker[k], noise_rng)
            writer.send(np.ascontiguousarray(img))
            if progress and (k + 1) % 100 == 0:
                print(f"  frame {k + 1}/{n_frames}", flush=True)
    finally:
        writer.close()

    st_start = sol.sol(t_start)
    st_mid = sol.sol(t_mid)
    centres = np.stack([bob_pose(th, length)[0] for th in st_mid[0]])
    bob_px, _ = project(cam, centres)
    pivot_px, _ = project(cam, np.zeros(3))
    ax, ay, az = semi_axes
    truth = {
        "description": "Synthetic phone video of a damped pendulum; see tests/data/README.md.",
        "generator": "tests/data/make_realistic_pendulum.py",
        "seed": seed,
        "conventions": {
            "world": "right-handed, z up, SI units; gravity g along -z",
            "pendulum": "pivot at the origin; bob centre = L * (-sin(theta), 0, -cos(theta)); "
            "theta right-handed about +y; bob body z points from the bob centre to the pivot",
            "equation_of_motion": "I * theta'' = -m * g * L * sin(theta) - c * theta'",
            "inertia": "I = m * L**2 + m * (a_x**2 + a_z**2) / 5",
            "camera": "OpenCV axes (x right, y down, z forward); world_from_camera rotation "
            "columns are the camera axes in world coordinates; pixel (row i, col j) covers "
            "x in [j, j+1], y in [i, i+1], rays through (j + 0.5, i + 0.5)",
            "distortion": "OpenCV (k1, k2, p1, p2, k3) applied to normalised coordinates x/z, "
            "y/z; then u = fx * x_d + cx, v = fy * y_d + cy",
            "time": "frame k starts at t = k / fps; the exposure is [t, t + exposure_time]",
        },
        "physics": {
            "g": G,
            "gravity": [0.0, 0.0, -G],
            "pivot": [0.0, 0.0, 0.0],
            "L": length,
            "m": mass,
            "semi_axes": [ax, ay, az],
            "I": inertia,
            "c": damping,
            "gamma": damping / (2 * inertia),
            "theta0": theta0,
            "theta_dot0": theta_dot0,
            "small_amplitude_period": 2 * math.pi * math.sqrt(inertia / (mass * G * length)),
            "first_period": period,
            "first_period_definition": "time between the first two downward (theta decreasing) "
            "zero crossings of theta",
            "integrator": "scipy solve_ivp DOP853, rtol 1e-11, atol 1e-12",
        },
        "camera": {
            "resolution": [width, height],
            "fx": cam["fx"],
            "fy": cam["fy"],
            "cx": cam["cx"],
            "cy": cam["cy"],
            "distortion": dict(
                zip(["k1", "k2", "p1", "p2", "k3"], cam["dist"].tolist(), strict=True)
            ),
            "position": cam["position"].tolist(),
            "world_from_camera_rotation": cam["rotation"].tolist(),
            "look_at": cam["look_at"].tolist(),
            "up": cam["up"].tolist(),
            "fov_y_deg": cam["fov_y_deg"],
            "roll_deg": cam["roll_deg"],
            "optical_axis_to_swing_plane_normal_deg": math.degrees(
                math.acos(float(cam["rotation"][1, 2]))
            ),
        },
        "video": {
            "fps": fps,
            "n_frames": n_frames,
            "exposure_time": exposure,
            "subframes": subframes,
            "supersample": ss,
            "codec": "libx264 (imageio-ffmpeg), yuv420p, preset medium",
            "crf": crf,
        },
        "scene": {
            "wall_y": WALL_Y,
            "floor_z": FLOOR_Z,
            "string_diameter": 2 * STRING_RADIUS,
            "light_direction": LIGHT_DIR.tolist(),
            "bob_colours": "red for body x > 0, yellow for body x < 0 (linear albedo "
            f"{BOB_RED.tolist()} and {BOB_YELLOW.tolist()})",
        },
        "pivot_px": pivot_px.tolist(),
        "frames": {
            "t_start": t_start.tolist(),
            "t_mid": t_mid.tolist(),
            "theta_start": st_start[0].tolist(),
            "theta_dot_start": st_start[1].tolist(),
            "theta_mid": st_mid[0].tolist(),
            "theta_dot_mid": st_mid[1].tolist(),
            "bob_centre_px_mid": bob_px.tolist(),
        },
    }
    if truth_path is not None:
        Path(truth_path).write_text(json.dumps(truth, indent=1) + "\n")
    return truth


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default=str(HERE / "pendulum_realistic.mp4"))
    p.add_argument("--truth", default=str(HERE / "pendulum_realistic.json"))
    p.add_argument("--width", type=int, default=320)
    p.add_argument("--height", type=int, default=180)
    p.add_argument("--fps", type=float, default=30.0)
    p.add_argument("--seconds", type=float, default=12.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--supersample", type=int, default=None)
    p.add_argument("--subframes", type=int, default=8)
    p.add_argument("--crf", type=int, default=20)
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    truth = make_clip(
        a.out,
        width=a.width,
        height=a.height,
        fps=a.fps,
        seconds=a.seconds,
        seed=a.seed,
        supersample=a.supersample,
        subframes=a.subframes,
        crf=a.crf,
        truth_path=a.truth,
        progress=True,
    )
    size = Path(a.out).stat().st_size
    print(
        f"wrote {a.out} ({truth['video']['n_frames']} frames, {size / 1e6:.2f} MB) and "
        f"{a.truth} in {time.perf_counter() - t0:.1f} s"
    )


if __name__ == "__main__":
    main()
