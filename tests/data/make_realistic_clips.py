"""Make synthetic but realistic phone videos of four physics scenes, with their ground truth.

The scenes: ``bounce`` (a ball released by a hand, bouncing on a floor; filmed in slow motion),
``throw`` (a spinning half-clear ball thrown across a wall, its shadow beside it, a person walking
in), ``incline`` (a two-coloured block sliding down a plank under Coulomb friction) and
``double_pendulum`` (two capsule links on hinges, one of them partly clear acrylic).

Like ``make_realistic_pendulum.py`` (whose camera, distortion, textures, sensor and noise this
reuses), this imports nothing from ``diffcam`` or ``physics`` on purpose: the motion is analytic
or a SciPy ODE and the picture is numpy ray casting, so a method fitted to these clips is not
fitted to its own renderer. Every clip has what a fitting model will not: two colours and a
printed pattern on the bodies, specular highlights, clear parts (``throw``, ``double_pendulum``),
soft cast shadows and contact shadows, a cluttered background with illumination gradients, motion
blur (sub-frames averaged in linear light), lens distortion, an off-centre principal point, roll,
vignetting, flicker, photon and read noise, the sRGB curve, 8-bit rounding and lossy compression.

Conventions (also written into each truth JSON):

* World: right-handed, z up, SI units, gravity ``g`` along -z. Quaternions are ``[w, x, y, z]``
  of the world_from_body rotation.
* Camera: OpenCV axes (x right, y down, z forward); pixel (row i, col j) covers x in [j, j+1],
  y in [i, i+1]; a ray goes through (j + 0.5, i + 0.5). OpenCV distortion (k1, k2, p1, p2, k3)
  on normalised coordinates: ``u = fx * x_distorted + cx``.
* Time: real (capture) time in s. Frame k starts at ``k / capture_fps`` and the sensor
  integrates ``[start, start + exposure]``; its per-frame state is given at mid-exposure.

Usage (from the repository root; the defaults make the bundled clips and their truth)::

    python tests/data/make_realistic_clips.py                # all four
    python tests/data/make_realistic_clips.py bounce incline # some
    python tests/data/make_realistic_clips.py throw --out /tmp/t.avi --truth /tmp/t.json --seed 3
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from scipy.integrate import solve_ivp


def _load_pendulum_module():
    """``make_realistic_pendulum`` beside this file (tests/data is not a package)."""
    name = "make_realistic_pendulum"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).resolve().parent / f"{name}.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


mrp = _load_pendulum_module()

HERE = Path(__file__).resolve().parent
G = mrp.G  # 9.81 m/s^2 along -z
KINDS = ("bounce", "throw", "incline", "double_pendulum", "tumble")
OUTPUTS = {
    "bounce": "bounce_realistic.mp4",
    "throw": "throw_realistic.avi",
    "incline": "incline_realistic.mp4",
    "double_pendulum": "double_pendulum_realistic.mp4",
    "tumble": "tumble_realistic.mp4",
}


# ----------------------------------------------------------------------------- small maths
def rot_axis(axis, angle: float) -> np.ndarray:
    """Rotation matrix (3, 3) of ``angle`` rad about ``axis`` (right-handed, Rodrigues)."""
    a = np.asarray(axis, float)
    a = a / np.linalg.norm(a)
    k = np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])
    return np.eye(3) + math.sin(angle) * k + (1.0 - math.cos(angle)) * (k @ k)


def quat_from_matrix(r: np.ndarray) -> list[float]:
    """Unit quaternion [w, x, y, z] (w >= 0) of a rotation matrix."""
    m = np.asarray(r, float)
    tr = np.trace(m)
    if tr > 0:
        s = 2.0 * math.sqrt(tr + 1.0)
        q = [0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s]
    else:
        i = int(np.argmax(np.diag(m)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * math.sqrt(1.0 + m[i, i] - m[j, j] - m[k, k])
        q = [0.0] * 4
        q[0] = (m[k, j] - m[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (m[j, i] + m[i, j]) / s
        q[1 + k] = (m[k, i] + m[i, k]) / s
    q = np.asarray(q)
    q = q / np.linalg.norm(q)
    return (q if q[0] >= 0 else -q).tolist()


def frame_from_z(z_axis) -> np.ndarray:
    """A rotation (3, 3) whose third column is the unit ``z_axis``."""
    z = np.asarray(z_axis, float)
    z = z / np.linalg.norm(z)
    ref = np.array([0.0, 1.0, 0.0]) if abs(z[1]) < 0.9 else np.array([1.0, 0.0, 0.0])
    x = _cross(ref, z)
    x /= np.linalg.norm(x)
    return np.stack([x, _cross(z, x), z], axis=1)


def smoothstep(x):
    x = np.clip(x, 0.0, 1.0)
    return x * x * (3.0 - 2.0 * x)


def _dot(a, b):
    return np.einsum("...i,...i->...", a, b)


def _cross(a, b):
    """Cross product of two 3-vectors (np.cross is slow for single vectors)."""
    return np.array(
        [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    )


def _dist2(a, b):
    """Squared distances (m,) between points a (m, k) and one point b (k,)."""
    out = (a[:, 0] - b[0]) ** 2
    for i in range(1, len(b)):
        out += (a[:, i] - b[i]) ** 2
    return out


def _normalise(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


# ----------------------------------------------------------------------------- light, materials
@dataclass(frozen=True)
class Light:
    """One warm key light (a small lamp: soft shadows) and a sky-ish ambient term.

    direction: unit vector towards the light. penumbra: tan of the lamp's angular radius (the
    penumbra's half-width is ``penumbra * distance`` from the occluder). shadow: the share of the
    key light an umbra removes (the rest is bounce light).
    """

    direction: np.ndarray
    ambient: float = 0.30
    direct: float = 0.85
    tint: np.ndarray = field(default_factory=lambda: np.array([1.0, 0.95, 0.86]))
    penumbra: float = 0.06
    min_penumbra: float = 0.004  # m
    shadow: float = 0.8
    gradient_x: float = 0.14  # key light falls off this much per m to +x
    hotspot: tuple[float, float, float, float] = (-0.8, 1.5, 0.7, 0.18)  # x, z, sigma, amount


def make_light(direction, **kw) -> Light:
    d = np.asarray(direction, float)
    return Light(direction=d / np.linalg.norm(d), **kw)


@dataclass
class Material:
    """Surface appearance. ``albedo(p, n)`` gives linear albedo (m, 3) from body-frame points and
    normals (m, 3); ``alpha(p, n)`` (optional) the opacity (m,) of clear parts, which show what
    is behind them multiplied by ``transmit``; ``ks`` may be a number or a function like alpha."""

    albedo: Callable
    ks: float | Callable = 0.3
    shininess: float = 40.0
    wrap: float = 0.0  # wrap-around diffuse (skin, cloth)
    alpha: Callable | None = None
    transmit: tuple[float, float, float] = (1.0, 1.0, 1.0)


def shade(light: Light, nrm, view, albedo, ks, shininess, wrap=0.0):
    """Diffuse and specular linear radiance (m, 3) each: wrap-Lambert + Blinn-Phong, hemisphere
    ambient (surfaces facing up get more)."""
    ld = light.direction
    ndl = nrm @ ld
    diff = np.clip((ndl + wrap) / (1.0 + wrap), 0.0, None)
    amb = light.ambient * (0.8 + 0.2 * nrm[:, 2])
    half = _normalise(ld + view)
    ks = np.broadcast_to(np.asarray(ks, float), ndl.shape)
    spec = ks * light.direct * np.clip(_dot(nrm, half), 0.0, None) ** shininess * (ndl > 0)
    tint = light.tint
    return albedo * (amb + light.direct * diff)[:, None] * tint, spec[:, None] * tint


# ----------------------------------------------------------------------------- primitives
@dataclass
class Prim:
    """A ray-cast primitive: ``sphere`` (size (r,)), ``ellipsoid`` (semi-axes), ``capsule``
    ((r, half_length) along body z, hemispherical caps beyond) or ``box`` (half extents).

    ``rot`` is world_from_body. ``name`` marks a body whose visibility the truth records;
    ``group`` names what it belongs to (for the nuisances' frame ranges). ``ao`` is the strength
    of its contact shadow on static surfaces within ``ao_range`` m of it.
    """

    kind: str
    centre: np.ndarray
    rot: np.ndarray
    size: tuple
    material: Material
    group: str
    name: str | None = None
    shadow: bool = True
    ao: float = 0.0
    ao_range: float = 0.03

    @property
    def bound(self) -> float:
        s = self.size
        if self.kind == "sphere":
            return float(s[0])
        if self.kind == "ellipsoid":
            return float(max(s))
        if self.kind == "capsule":
            return float(s[0] + s[1])
        return float(np.linalg.norm(s))

    def _axes(self):
        return np.full(3, self.size[0]) if self.kind == "sphere" else np.asarray(self.size)

    def intersect(self, o: np.ndarray, d: np.ndarray):
        """Entry and exit ray parameters (m,) each (inf when missed; exit only for spheres and
        ellipsoids, else inf) of rays ``o + t d`` for directions d (m, 3)."""
        ob = (o - self.centre) @ self.rot
        db = d @ self.rot
        inf = np.full(len(d), np.inf)
        if self.kind in ("sphere", "ellipsoid"):
            ax = self._axes()
            os_, ds = ob / ax, db / ax
            qa = _dot(ds, ds)
            qb = 2.0 * ds @ os_
            disc = qb * qb - 4.0 * qa * (os_ @ os_ - 1.0)
            hit = disc > 0
            sq = np.sqrt(np.where(hit, disc, 0.0))
            return (
                np.where(hit, (-qb - sq) / (2 * qa), inf),
                np.where(hit, (-qb + sq) / (2 * qa), inf),
            )
        if self.kind == "capsule":
            r, h = self.size
            a = db[:, 0] ** 2 + db[:, 1] ** 2
            b = 2.0 * (ob[0] * db[:, 0] + ob[1] * db[:, 1])
            c = ob[0] ** 2 + ob[1] ** 2 - r * r
            disc = b * b - 4.0 * a * c
            ok = (disc > 0) & (a > 1e-18)
            with np.errstate(divide="ignore", invalid="ignore"):
                t = (-b - np.sqrt(np.where(ok, disc, 0.0))) / (2.0 * a)
            z = ob[2] + t * db[:, 2]
            best = np.where(ok & (np.abs(z) <= h), t, inf)
            qa = _dot(db, db)
            for zc in (-h, h):
                oc = ob - np.array([0.0, 0.0, zc])
                qb = 2.0 * db @ oc
                disc = qb * qb - 4.0 * qa * (oc @ oc - r * r)
                ok = disc > 0
                ts = (-qb - np.sqrt(np.where(ok, disc, 0.0))) / (2 * qa)
                best = np.minimum(best, np.where(ok, ts, inf))
            return best, inf
        if self.kind == "box":
            hx = np.asarray(self.size)
            with np.errstate(divide="ignore", invalid="ignore"):
                inv = 1.0 / db
                t1 = (-hx - ob) * inv
                t2 = (hx - ob) * inv
            t1 = np.nan_to_num(t1, nan=-np.inf)
            t2 = np.nan_to_num(t2, nan=np.inf)
            tmin = np.minimum(t1, t2).max(axis=1)
            tmax = np.maximum(t1, t2).min(axis=1)
            return np.where(tmax >= np.maximum(tmin, 0.0), tmin, inf), inf
        raise ValueError(self.kind)

    def normal_local(self, p: np.ndarray) -> np.ndarray:
        """Unit outward normals (m, 3) in the body frame at body-frame surface points."""
        if self.kind in ("sphere", "ellipsoid"):
            return _normalise(p / self._axes() ** 2)
        if self.kind == "capsule":
            q = p.copy()
            q[:, 2] -= np.clip(p[:, 2], -self.size[1], self.size[1])
            return _normalise(q)
        ratio = np.abs(p) / np.asarray(self.size)
        axis = np.argmax(ratio, axis=1)
        n = np.zeros_like(p)
        n[np.arange(len(p)), axis] = np.sign(p[np.arange(len(p)), axis])
        return n

    def sdf(self, pts: np.ndarray) -> np.ndarray:
        """Signed distance (m,) of world points to the surface (approximate for ellipsoids)."""
        q = (pts - self.centre) @ self.rot
        if self.kind == "sphere":
            return np.linalg.norm(q, axis=1) - self.size[0]
        if self.kind == "ellipsoid":
            ax = self._axes()
            return (np.linalg.norm(q / ax, axis=1) - 1.0) * ax.min()
        if self.kind == "capsule":
            r, h = self.size
            q[:, 2] -= np.clip(q[:, 2], -h, h)
            return np.linalg.norm(q, axis=1) - r
        e = np.abs(q) - np.asarray(self.size)
        return np.linalg.norm(np.maximum(e, 0.0), axis=1) + np.minimum(e.max(axis=1), 0.0)

    def shadow_sd(self, pts: np.ndarray, ld: np.ndarray):
        """For lines from world points (m, 3) towards the light ``ld``: the signed distance (m,)
        of each line from the solid (negative: the line passes through it) and the distance (m,)
        along the light from the point to the body's centre (positive: the body is lightwards)."""
        rel = self.centre - pts
        s = rel @ ld
        if self.kind == "sphere":
            perp = rel - s[:, None] * ld
            return np.linalg.norm(perp, axis=1) - self.size[0], s
        if self.kind == "ellipsoid":
            ax = self._axes()
            qs = ((pts - self.centre) @ self.rot) / ax
            ls = (ld @ self.rot) / ax
            ql = qs @ ls
            dist = np.sqrt(np.clip(_dot(qs, qs) - ql**2 / (ls @ ls), 0.0, None))
            return (dist - 1.0) * ax.mean(), s
        e1, e2 = _perp_basis(ld)
        basis = np.stack([e1, e2], axis=1)
        p2 = pts @ basis
        if self.kind == "capsule":
            r, h = self.size
            a = (self.centre + h * self.rot[:, 2]) @ basis
            b = (self.centre - h * self.rot[:, 2]) @ basis
            u = b - a
            w = p2 - a
            tau = np.clip((w @ u) / max(u @ u, 1e-18), 0.0, 1.0)
            return np.linalg.norm(w - tau[:, None] * u, axis=1) - r, s
        corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)])
        verts = (self.centre + (corners * np.asarray(self.size)) @ self.rot.T) @ basis
        return _polygon_sd(p2, _hull(verts)), s


def _perp_basis(v):
    e1 = _cross(v, [0.0, 0.0, 1.0] if abs(v[2]) < 0.9 else [1.0, 0.0, 0.0])
    e1 /= np.linalg.norm(e1)
    return e1, _cross(v, e1)


def _hull(pts: np.ndarray) -> np.ndarray:
    """Convex hull (k, 2) of 2-D points, counter-clockwise (monotone chain)."""
    p = sorted(map(tuple, np.round(pts, 12)))

    def cross(o, a, b):
        return (a[0] - o[0]) * (b[1] - o[1]) - (a[1] - o[1]) * (b[0] - o[0])

    lower, upper = [], []
    for q in p:
        while len(lower) >= 2 and cross(lower[-2], lower[-1], q) <= 0:
            lower.pop()
        lower.append(q)
    for q in reversed(p):
        while len(upper) >= 2 and cross(upper[-2], upper[-1], q) <= 0:
            upper.pop()
        upper.append(q)
    return np.array(lower[:-1] + upper[:-1])


def _polygon_sd(p: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """Signed distance (m,) of 2-D points to a convex counter-clockwise polygon."""
    a = poly
    b = np.roll(poly, -1, axis=0)
    best = np.full(len(p), np.inf)
    inside = np.ones(len(p), bool)
    for k in range(len(a)):
        u = b[k] - a[k]
        w = p - a[k]
        tau = np.clip((w @ u) / (u @ u), 0.0, 1.0)
        best = np.minimum(best, np.linalg.norm(w - tau[:, None] * u, axis=1))
        inside &= (u[0] * w[:, 1] - u[1] * w[:, 0]) >= 0
    return np.where(inside, -best, best)


def capsule_between(a, b, radius, material, group, name=None, **kw) -> Prim:
    """A capsule whose cap centres are the points a and b (body z from a to b)."""
    a, b = np.asarray(a, float), np.asarray(b, float)
    half = 0.5 * float(np.linalg.norm(b - a))
    return Prim(
        "capsule", 0.5 * (a + b), frame_from_z(b - a), (radius, half), material, group, name, **kw
    )


# ----------------------------------------------------------------------------- static scene
@dataclass
class StaticScene:
    """The still part of a clip: a wall (plane y = wall_y, facing -y), a floor (z = floor_z)
    and static props (prims), with albedo functions of plane coordinates (x, z) / (x, y)."""

    light: Light
    wall_y: float
    wall_albedo: Callable
    floor_z: float = 0.0
    floor_albedo: Callable | None = None
    props: list = field(default_factory=list)


def _plane_light(scene: StaticScene, pts, on_wall: bool):
    """Ambient and key irradiance (m,) each on the wall or the floor: gradients, a hot spot, the
    darker corner where they meet."""
    lt = scene.light
    x, y, z = pts[:, 0], pts[:, 1], pts[:, 2]
    nrm = np.array([0.0, -1.0, 0.0]) if on_wall else np.array([0.0, 0.0, 1.0])
    ndl = max(float(nrm @ lt.direction), 0.0)
    gap = (z - scene.floor_z) if on_wall else (scene.wall_y - y)
    corner = 1.0 - 0.3 * np.exp(-np.clip(gap, 0.0, None) / 0.12)
    ambient = lt.ambient * (1.0 + 0.06 * (z - 1.0)) * corner
    direct = lt.direct * ndl * (1.0 - lt.gradient_x * x) * (1.0 + 0.08 * (z - 1.0))
    hx, hz, hs, ha = lt.hotspot
    if on_wall:
        direct = direct + ha * np.exp(-((x - hx) ** 2 + (z - hz) ** 2) / (2 * hs**2))
    return ambient, direct * corner


def render_static(cam: dict, rays: np.ndarray, scene: StaticScene):
    """Static scene per ray sample (rays (N, 3), camera-z component 1).

    Returns radiance (N, 3) linear, depth (N,) m, key-light share (N,), world point (N, 3) and
    surface id (N,) (0 wall, 1 floor, 2 + k prop k); with the props' cast and contact shadows.
    """
    o = cam["position"]
    n = len(rays)
    with np.errstate(divide="ignore", invalid="ignore"):
        t_wall = np.where(rays[:, 1] > 0, (scene.wall_y - o[1]) / rays[:, 1], np.inf)
        t_floor = np.where(rays[:, 2] < 0, (scene.floor_z - o[2]) / rays[:, 2], np.inf)
    if scene.floor_albedo is None:
        t_floor[:] = np.inf
    depth = np.minimum(t_wall, t_floor)
    sid = np.where(t_floor < t_wall, 1, 0)
    rad = np.zeros((n, 3))
    key = np.zeros(n)
    for s, fn in ((0, scene.wall_albedo), (1, scene.floor_albedo)):
        m = sid == s
        if not m.any():
            continue
        p = o + depth[m, None] * rays[m]
        amb, dirl = _plane_light(scene, p, on_wall=s == 0)
        alb = fn(p[:, 0], p[:, 2]) if s == 0 else fn(p[:, 0], p[:, 1])
        rad[m] = alb * (amb + dirl)[:, None] * scene.light.tint
        key[m] = dirl / (amb + dirl)
    for k, prop in enumerate(scene.props):
        t, _ = prop.intersect(o, rays)
        m = (t > 0) & (t < depth)
        if not m.any():
            continue
        depth[m] = t[m]
        sid[m] = 2 + k
        d = rays[m]
        pl = (o + t[m, None] * d - prop.centre) @ prop.rot
        nl = prop.normal_local(pl)
        nw = nl @ prop.rot.T
        mat = prop.material
        ks = mat.ks(pl, nl) if callable(mat.ks) else mat.ks
        diff, spec = shade(
            scene.light, nw, -_normalise(d), mat.albedo(pl, nl), ks, mat.shininess, mat.wrap
        )
        rad[m] = diff + spec
        ndl = np.clip(nw @ scene.light.direction, 0.0, None)
        key[m] = scene.light.direct * ndl / (scene.light.ambient + scene.light.direct * ndl)
    pts = o + depth[:, None] * rays
    lt = scene.light
    for k, prop in enumerate(scene.props):
        other = sid != 2 + k
        if prop.shadow:
            sd, s = prop.shadow_sd(pts[other], lt.direction)
            w = lt.min_penumbra + lt.penumbra * np.clip(s, 0.0, None)
            occl = lt.shadow * smoothstep((w - sd) / (2 * w)) * (s > 0)
            k_ = key[other]
            rad[other] *= (1.0 - occl * k_)[:, None]
            key[other] = k_ * (1.0 - occl) / (1.0 - occl * k_)  # the key light left
        if prop.ao > 0:
            ao = prop.ao * np.clip(1.0 - prop.sdf(pts[other]) / prop.ao_range, 0.0, 1.0) ** 2
            rad[other] *= (1.0 - ao)[:, None]
    return rad, depth, key, pts, sid


def prepare_static(cam: dict, ss: int, scene: StaticScene) -> dict:
    """Rays and the static scene per sample and per pixel, for ``render_moving``."""
    rays = mrp.sample_rays(cam, ss)
    npx, s2 = rays.shape[:2]
    rad, depth, key, pts, sid = render_static(cam, rays.reshape(-1, 3), scene)
    pix_point = pts.reshape(npx, s2, 3).mean(axis=1)
    ld = scene.light.direction
    e1, e2 = _perp_basis(ld)
    out = {
        "rays": rays,
        "rad": rad.reshape(npx, s2, 3).astype(np.float32),
        "depth": depth.reshape(npx, s2).astype(np.float32),
        "ss": ss,
        "pix_rad": rad.reshape(npx, s2, 3).mean(axis=1),
        "pix_key": key.reshape(npx, s2).mean(axis=1),
        "pix_point": pix_point,
        "pix_perp": pix_point @ np.stack([e1, e2], axis=1),
        "pix_par": pix_point @ ld,
        "light": scene.light,
        "width": cam["width"],
        "height": cam["height"],
    }
    ii, jj = np.meshgrid(np.arange(2, cam["height"], 4), np.arange(2, cam["width"], 4))
    out["coarse"] = (ii * cam["width"] + jj).reshape(-1)
    return out


# ----------------------------------------------------------------------------- moving parts
_EMPTY = np.zeros(0, np.int64)


_CORNERS = np.array([[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], float)


def _prim_pixels(cam: dict, prim: Prim) -> np.ndarray:
    """Flat indices of the pixels inside the projection of the prim's oriented bounding box
    (plus 2 pixels)."""
    s = prim.size
    if prim.kind == "capsule":
        half = np.array([s[0], s[0], s[0] + s[1]])
    elif prim.kind == "sphere":
        half = np.full(3, s[0])
    else:
        half = np.asarray(s, float)
    pts = prim.centre + (_CORNERS * half) @ prim.rot.T
    px, z = mrp.project(cam, pts)
    if (z < 0.05).any():
        return _EMPTY
    w, h = cam["width"], cam["height"]
    j0, j1 = max(int(math.floor(px[:, 0].min() - 2)), 0), min(int(math.ceil(px[:, 0].max() + 2)), w)
    i0, i1 = max(int(math.floor(px[:, 1].min() - 2)), 0), min(int(math.ceil(px[:, 1].max() + 2)), h)
    if j0 >= j1 or i0 >= i1:
        return _EMPTY
    return (np.arange(i0, i1)[:, None] * w + np.arange(j0, j1)[None, :]).reshape(-1)


def _candidates(static, c_perp, c_par, cg, rg, ao_range, lt: Light, step: int = 4):
    """Flat indices of the pixels a group (bounding sphere at cg, radius rg) may shadow or
    darken by contact: a test on every ``step``-th pixel finds a bounding box, then the exact
    test runs inside it."""
    w, h = static["width"], static["height"]

    def test(sel, margin):
        s = c_par - static["pix_par"][sel]
        reach = rg + margin + lt.min_penumbra + lt.penumbra * np.clip(s + rg, 0.0, None)
        m = (_dist2(static["pix_perp"][sel], c_perp) < reach**2) & (s > -rg - margin)
        if ao_range > 0:
            m |= _dist2(static["pix_point"][sel], cg) < (rg + ao_range + margin) ** 2
        return m

    coarse = static["coarse"]
    hit = coarse[test(coarse, 0.08)]
    if not len(hit):
        return _EMPTY
    i, j = hit // w, hit % w
    i0, i1 = max(i.min() - step, 0), min(i.max() + step + 1, h)
    j0, j1 = max(j.min() - step, 0), min(j.max() + step + 1, w)
    box = (np.arange(i0, i1)[:, None] * w + np.arange(j0, j1)[None, :]).reshape(-1)
    return box[test(box, 0.0)]


def render_moving(cam: dict, static: dict, prims: list[Prim], nuisances=()):
    """The prims, their soft cast shadows and contact shadows over the static scene.

    Returns flat pixel indices (n,), their supersample-mean linear radiance (n, 3), counts per
    named body ``{name: [samples in front of the background, samples seen, samples hidden by a
    prim of a group in nuisances]}`` and per group ``{group: samples seen}``.
    """
    w, h = cam["width"], cam["height"]
    o = cam["position"]
    lt: Light = static["light"]
    ld = lt.direction
    boxes = [_prim_pixels(cam, p) for p in prims]

    # the pixels each prim may shadow or darken by contact
    basis = np.stack(_perp_basis(ld), axis=1)
    cand = []
    for p in prims:
        if p.shadow or p.ao > 0:
            ao_range = p.ao_range if p.ao > 0 else 0.0
            c = _candidates(
                static, p.centre @ basis, p.centre @ ld, p.centre, p.bound, ao_range, lt
            )
            if len(c):
                cand.append((p, c))

    slot = np.full(w * h, -1, np.int64)
    for i in boxes:
        slot[i] = 0
    for _, i in cand:
        slot[i] = 0
    idx = np.flatnonzero(slot == 0)
    slot[idx] = np.arange(len(idx))
    rad = static["rad"][idx]  # (n, S, 3) float32
    bg_depth = static["depth"][idx].astype(np.float64)

    # soft shadows and contact shadows on the static surfaces (per pixel)
    if cand:
        keep_light = np.ones(len(idx))
        keep_all = np.ones(len(idx))
        for p, ci in cand:
            pts = static["pix_point"][ci]
            sl = slot[ci]
            if p.shadow:
                sd, s = p.shadow_sd(pts, ld)
                wpen = lt.min_penumbra + lt.penumbra * np.clip(s, 0.0, None)
                keep_light[sl] *= 1.0 - smoothstep((wpen - sd) / (2 * wpen)) * (s > 0)
            if p.ao > 0:
                keep_all[sl] *= 1.0 - p.ao * np.clip(1.0 - p.sdf(pts) / p.ao_range, 0.0, 1.0) ** 2
        factor = (1.0 - lt.shadow * (1.0 - keep_light) * static["pix_key"][idx]) * keep_all
        rad = rad * factor[:, None, None].astype(np.float32)

    # the prims: opaque ones by depth test, then clear ones over them (far to near)
    depth = bg_depth.copy()
    owner = np.full(depth.shape, -1, np.int64)
    counts = {p.name: [0, 0, 0] for p in prims if p.name}
    is_nuisance = np.array([p.group in nuisances for p in prims] + [False])  # owner -1 -> last
    clear = []
    fronts = {}
    hits = []
    for k, (p, box) in enumerate(zip(prims, boxes, strict=True)):
        if not len(box):
            continue
        if p.material.alpha is not None:
            clear.append(k)
            continue
        sl = slot[box]
        d = static["rays"][box]
        shp = d.shape[:2]
        tn, _ = p.intersect(o, d.reshape(-1, 3))
        tn = tn.reshape(shp)
        front = (tn > 0) & (tn < bg_depth[sl])
        if p.name:  # a body of several prims (the tumble's block) counts a ray once
            fronts.setdefault(p.name, np.zeros(depth.shape, bool))[sl] |= front
        ri, si = np.nonzero(front)
        rows = sl[ri]
        tv = tn[ri, si]
        nearer = tv < depth[rows, si]
        if not nearer.any():
            continue
        ri, si, rows, tv = ri[nearer], si[nearer], rows[nearer], tv[nearer]
        depth[rows, si] = tv
        owner[rows, si] = k
        hits.append((k, d[ri, si], rows, si, tv))
    for k, dk, rows, si, tv in hits:  # deferred: shade only what stayed in front
        won = owner[rows, si] == k
        if won.any():
            rad[rows[won], si[won]] = _shade_hits(prims[k], o, dk[won], tv[won], lt)
    for name, front in fronts.items():
        counts[name][0] += int(front.sum())
        counts[name][2] += int((front & is_nuisance[owner]).sum())
    seen = {}
    n_own = np.bincount(owner.reshape(-1) + 1, minlength=len(prims) + 1)[1:]
    for k, p in enumerate(prims):
        if p.name:
            counts[p.name][1] += int(n_own[k])
        seen[p.group] = seen.get(p.group, 0) + int(n_own[k])
    order = sorted(clear, key=lambda k: -float(np.linalg.norm(prims[k].centre - o)))
    for k in order:
        p, box = prims[k], boxes[k]
        sl = slot[box]
        d = static["rays"][box]
        shp = d.shape[:2]
        tn, tf = p.intersect(o, d.reshape(-1, 3))
        tn, tf = tn.reshape(shp), tf.reshape(shp)
        front = (tn > 0) & (tn < bg_depth[sl])
        valid = front & (tn < depth[sl])
        if p.name:
            counts[p.name][0] += int(front.sum())
            counts[p.name][1] += int(valid.sum())
            counts[p.name][2] += int((front & is_nuisance[owner[sl]]).sum())
        seen[p.group] = seen.get(p.group, 0) + int(valid.sum())
        if not valid.any():
            continue
        sub = rad[sl]
        sub[valid] = _shade_clear(p, o, d[valid], tn[valid], tf[valid], sub[valid], lt)
        rad[sl] = sub
    return idx, rad.mean(axis=1), counts, seen


def _shade_hits(p: Prim, o, d, t, lt: Light):
    """Opaque shading (m, 3) of prim hits along rays d (m, 3) at parameters t (m,)."""
    pl = (o + t[:, None] * d - p.centre) @ p.rot
    nl = p.normal_local(pl)
    nw = nl @ p.rot.T
    mat = p.material
    ks = mat.ks(pl, nl) if callable(mat.ks) else mat.ks
    diff, spec = shade(lt, nw, -_normalise(d), mat.albedo(pl, nl), ks, mat.shininess, mat.wrap)
    return diff + spec


def _shade_clear(p: Prim, o, d, tn, tf, behind, lt: Light):
    """Shading (m, 3) of a prim with clear parts over what is behind it (m, 3).

    A clear front surface shows ``alpha * diffuse + (1 - alpha) * transmit * inside + specular``
    (alpha raised towards 1 at grazing angles);
    for spheres the inside is the back surface seen from within (opaque parts dimly lit, clear
    parts showing the background again), for capsules the background.
    """
    mat = p.material
    view = -_normalise(d)
    pl = (o + tn[:, None] * d - p.centre) @ p.rot
    nl = p.normal_local(pl)
    nw = nl @ p.rot.T
    ks = mat.ks(pl, nl) if callable(mat.ks) else mat.ks
    alb = mat.albedo(pl, nl)
    diff, spec = shade(lt, nw, view, alb, ks, mat.shininess, mat.wrap)
    alpha = np.clip(mat.alpha(pl, nl), 0.0, 1.0)
    # clear plastic reflects more at grazing angles: its rims show (a Schlick-like term)
    alpha = (alpha + (1.0 - alpha) * 0.6 * (1.0 - np.clip(_dot(nw, view), 0.0, 1.0)) ** 3)[:, None]
    tr = np.asarray(mat.transmit)
    inside = behind
    if p.kind in ("sphere", "ellipsoid"):
        pb = (o + tf[:, None] * d - p.centre) @ p.rot
        nb = p.normal_local(pb)
        ab = np.clip(mat.alpha(pb, nb), 0.0, 1.0)[:, None]
        inner = mat.albedo(pb, nb) * (0.35 * lt.ambient + 0.25 * lt.direct) * lt.tint
        inside = ab * inner + (1.0 - ab) * tr * behind
    return alpha * diff + (1.0 - alpha) * tr * inside + spec


# ----------------------------------------------------------------------------- textures
def _noise3(noise, p, scale, octave=0):
    """Cheap 3-D-ish value noise in [0, 1] from a 2-D lattice (two skewed lookups)."""
    a = noise(p[:, 0] / scale + 0.57 * p[:, 2] / scale, p[:, 1] / scale, octave)
    b = noise(p[:, 1] / scale - 0.31 * p[:, 0] / scale, p[:, 2] / scale, octave + 1)
    return 0.5 * (a + b)


def _wall_fn(rng, shift=(0.0, 0.0), tint=(1.0, 1.0, 1.0)):
    """The pendulum clip's cluttered wall (picture, poster, switch, socket, shelf of books,
    bracket plate, skirting) as an albedo function of wall points (x, z): moved so that its
    floor line is at z = -shift[1] and its x origin at -shift[0] (m); the plaster tinted."""
    tint = np.asarray(tint)

    def fn(x, z):
        wx = x + shift[0]
        wz = z + mrp.FLOOR_Z + shift[1]
        alb = mrp.wall_albedo(wx, wz, rng)
        plaster = (wz > mrp.FLOOR_Z + 0.09) & (alb.sum(axis=1) > 1.5)
        alb[plaster] *= tint
        return alb

    return fn


def _floor_fn(rng, shift=(0.0, 0.0), tint=(1.0, 1.0, 1.0)):
    tint = np.asarray(tint)

    def fn(x, y):
        return mrp.floor_albedo(x + shift[0], y + shift[1], rng) * tint

    return fn


# ----------------------------------------------------------------------------- nuisances
def _skin(noise, tone=(0.56, 0.33, 0.24)):
    tone = np.asarray(tone)

    def albedo(p, n):
        v = _noise3(noise, p, 0.01, 2)
        return tone * (0.9 + 0.2 * v)[:, None]

    return Material(albedo, ks=0.07, shininess=14.0, wrap=0.35)


def _cloth(noise, colour, scale=0.004, contrast=0.35):
    colour = np.asarray(colour)

    def albedo(p, n):
        v = _noise3(noise, p, scale, 4)
        return colour * (1.0 - contrast / 2 + contrast * v)[:, None]

    return Material(albedo, ks=0.02, shininess=6.0, wrap=0.25)


@dataclass
class HandPose:
    """A right hand gripping a ball from above, its forearm going up and to the right."""

    ball_centre: np.ndarray  # the ball's centre while held (m)
    ball_radius: float
    opening: float  # 0 gripping .. 1 open
    offset: np.ndarray  # translation of the whole hand since the grip (m)


def hand_prims(pose: HandPose, skin: Material, sleeve: Material) -> list[Prim]:
    """Palm (ellipsoid), four fingers and a thumb (two capsules each), forearm and sleeve."""
    c = pose.ball_centre + pose.offset
    r = pose.ball_radius
    prims = []
    palm_c = c + np.array([0.012, 0.0, r + 0.017])
    palm_rot = rot_axis([0.0, 1.0, 0.0], -0.25)
    prims.append(Prim("ellipsoid", palm_c, palm_rot, (0.052, 0.044, 0.017), skin, "hand"))
    up = np.array([0.0, 0.0, 1.0])
    fingers = [  # azimuth (deg from +x about z), knuckle polar angle, radius, lengths
        (148.0, 30.0, 0.0085, 0.040, 0.034),
        (183.0, 28.0, 0.0092, 0.045, 0.037),
        (218.0, 30.0, 0.0090, 0.043, 0.036),
        (250.0, 34.0, 0.0082, 0.036, 0.030),
        (318.0, 48.0, 0.0100, 0.038, 0.032),  # thumb, on the front right
    ]
    rho = r + 0.0105
    for az, polar, fr, l1, l2 in fingers:
        a = math.radians(az)
        radial = np.array([math.cos(a), math.sin(a), 0.0])
        pol = math.radians(polar)
        knuckle = c + rho * (math.sin(pol) * radial + math.cos(pol) * up)
        # gripping: the finger follows the ball's surface down past its equator
        grip1 = math.radians(polar + 40.0)
        grip2 = math.radians(polar + 75.0)
        mid_g = c + rho * (math.sin(grip1) * radial + math.cos(grip1) * up)
        tip_g = c + rho * (math.sin(grip2) * radial + math.cos(grip2) * up)
        mid_g = knuckle + l1 * _normalise(mid_g - knuckle)
        tip_g = mid_g + l2 * _normalise(tip_g - mid_g)
        # open: the finger straightened outwards and a little down
        out = _normalise(radial * 1.0 - up * 0.35)
        mid_o = knuckle + l1 * out
        tip_o = mid_o + l2 * _normalise(out + 0.25 * up)
        f = pose.opening
        mid = knuckle + l1 * _normalise((1 - f) * (mid_g - knuckle) + f * (mid_o - knuckle))
        tip = mid + l2 * _normalise((1 - f) * (tip_g - mid_g) + f * (tip_o - mid_o))
        prims.append(capsule_between(knuckle, mid, fr, skin, "hand"))
        prims.append(capsule_between(mid, tip, fr * 0.9, skin, "hand"))
    wrist = palm_c + np.array([0.05, 0.006, 0.012])
    arm_dir = _normalise(np.array([0.62, 0.12, 0.78]))
    elbow = wrist + 0.30 * arm_dir
    prims.append(capsule_between(wrist, wrist + 0.17 * arm_dir, 0.027, skin, "hand"))
    prims.append(
        capsule_between(wrist + 0.15 * arm_dir, elbow + 0.2 * arm_dir, 0.042, sleeve, "hand")
    )
    return prims


def person_prims(t: float, x0: float, t0: float, speed: float, y: float, mats: dict) -> list:
    """A person walking towards -x (side view): legs, hips, torso, arms, neck and head.

    ``x0`` is the hip position (m) at time ``t0`` (s); ``speed`` m/s; ``y`` the walking line.
    """
    stride = 0.85  # Hz, full gait cycles
    ph = 2 * math.pi * stride * (t - t0)
    x = x0 - speed * (t - t0)
    hip_z = 0.93 + 0.018 * math.cos(2 * ph)
    sway = 0.015 * math.sin(ph)
    hip = np.array([x, y + sway, hip_z])
    fwd = np.array([-1.0, 0.0, 0.0])
    up = np.array([0.0, 0.0, 1.0])
    side = np.array([0.0, 1.0, 0.0])
    prims = []
    for sgn in (1.0, -1.0):  # right leg (+y, far side) and left leg (-y, near side)
        swing = sgn * math.radians(24.0) * math.sin(ph)
        knee_bend = math.radians(
            8.0 + 28.0 * max(0.0, math.sin(ph + (0 if sgn > 0 else math.pi) + 1.2))
        )
        thigh_dir = -math.cos(swing) * up + math.sin(swing) * fwd
        shin_dir = -math.cos(swing - knee_bend) * up + math.sin(swing - knee_bend) * fwd
        top = hip + sgn * 0.09 * side
        knee = top + 0.43 * thigh_dir
        ankle = knee + 0.42 * shin_dir
        prims.append(capsule_between(top, knee, 0.068, mats["jeans"], "person"))
        prims.append(capsule_between(knee, ankle, 0.055, mats["jeans"], "person"))
        prims.append(
            capsule_between(ankle, ankle + 0.16 * fwd - 0.02 * up, 0.04, mats["shoe"], "person")
        )
    lean = rot_axis(side, math.radians(-5.0))  # leaning forwards (towards -x)
    pelvis = hip + np.array([0.0, 0.0, 0.06])
    prims.append(Prim("ellipsoid", pelvis, lean, (0.105, 0.17, 0.13), mats["jeans"], "person"))
    chest = hip + lean @ np.array([0.0, 0.0, 0.36])
    prims.append(Prim("ellipsoid", chest, lean, (0.115, 0.19, 0.30), mats["top"], "person"))
    neck = hip + lean @ np.array([0.0, 0.0, 0.66])
    head = neck + np.array([-0.02, 0.0, 0.15])
    prims.append(capsule_between(neck - 0.04 * up, neck + 0.06 * up, 0.05, mats["skin"], "person"))
    prims.append(Prim("ellipsoid", head, np.eye(3), (0.10, 0.085, 0.115), mats["skin"], "person"))
    prims.append(
        Prim(
            "ellipsoid",
            head + np.array([0.02, 0.0, 0.035]),
            np.eye(3),
            (0.103, 0.09, 0.095),
            mats["hair"],
            "person",
        )
    )
    for sgn in (1.0, -1.0):
        swing = -sgn * math.radians(20.0) * math.sin(ph)
        shoulder = hip + lean @ np.array([0.0, sgn * 0.21, 0.56])
        upper = -math.cos(swing) * up + math.sin(swing) * fwd
        fore = -math.cos(swing + math.radians(18)) * up + math.sin(swing + math.radians(18)) * fwd
        elbow = shoulder + 0.29 * upper
        wrist = elbow + 0.26 * fore
        prims.append(capsule_between(shoulder, elbow, 0.048, mats["top"], "person"))
        prims.append(capsule_between(elbow, wrist, 0.04, mats["top"], "person"))
        prims.append(
            Prim("sphere", wrist + 0.05 * fore, np.eye(3), (0.043,), mats["skin"], "person")
        )
    return prims


# ----------------------------------------------------------------------------- clip set-ups
@dataclass
class Setup:
    """Everything ``make_clip`` needs for one kind of clip.

    ``prims_at(t)``: the moving prims at time t (s). ``states(t)``: per body name, arrays over the
    times t (T,): ``position`` (T, 3) m, ``velocity`` (T, 3) m/s, ``quat`` (T, 4) and optionally
    ``angular_velocity`` (T, 3) rad/s and more. ``flicker(t_mid, rng)``: per-frame gains.
    """

    kind: str
    capture_fps: float
    container_fps: float
    n_frames: int
    exposure: float
    subframes: int
    container: str
    camera: dict
    static: StaticScene
    prims_at: Callable
    states: Callable
    physics: dict
    scene: dict
    nuisances: tuple = ()
    flicker: Callable | None = None
    extra_frames: Callable | None = None  # t_mid -> dict of more per-frame arrays
    gain: float = 1.0


def _cardboard(noise):
    def albedo(p, n):
        v = _noise3(noise, p, 0.02, 6)
        alb = np.array([0.40, 0.27, 0.14]) * (0.9 + 0.2 * v)[:, None]
        tape = np.abs(p[:, 0]) < 0.025
        alb[tape] = np.array([0.52, 0.42, 0.25])
        mark = (np.abs(p[:, 0] - 0.09) < 0.035) & (np.abs(p[:, 2] - 0.02) < 0.03)
        mark &= (np.floor(p[:, 2] / 0.008) % 2 == 0) & (n[:, 1] < -0.5)
        alb[mark] = np.array([0.05, 0.05, 0.05])
        return alb

    return Material(albedo, ks=0.03, shininess=8.0)


def _flat(colour, ks=0.2, shininess=30.0, noise=None, scale=0.01, contrast=0.2):
    colour = np.asarray(colour, float)

    def albedo(p, n):
        if noise is None:
            return np.broadcast_to(colour, (len(p), 3)).copy()
        v = _noise3(noise, p, scale, 8)
        return colour * (1.0 - contrast / 2 + contrast * v)[:, None]

    return Material(albedo, ks=ks, shininess=shininess)


def _random_flicker(t_mid, rng):
    return 1.0 + rng.uniform(-mrp.FLICKER, mrp.FLICKER, len(t_mid))


# --- bounce -------------------------------------------------------------------
def bounce_schedule(z0: float, r: float, e: float, t_release: float, t_end: float):
    """Impacts ``[(t, v_in, v_out)]`` (s, m/s, m/s) of a ball of radius r released from rest
    with its centre at height z0 (floor z = 0) at t_release, until t_end (exact; no drag)."""
    v = math.sqrt(2.0 * G * (z0 - r))
    t = t_release + v / G
    out = []
    while t < t_end + 0.5 and v > 1e-3:  # (the impacts accumulate at a finite time)
        out.append((t, v, e * v))
        v = e * v
        t += 2.0 * v / G
    return out


def _bounce_ball_material(noise, r):
    def albedo(p, n):
        q = p / r
        alb = np.array([0.62, 0.13, 0.03]) * (0.93 + 0.14 * _noise3(noise, p, 0.004, 10))[:, None]
        seam = (np.abs(q[:, 0]) < 0.035) | (np.abs(q[:, 2]) < 0.035)
        seam |= np.abs(np.abs(q[:, 1]) - 0.72) < 0.03
        alb[seam] = np.array([0.025, 0.02, 0.02])
        logo = (q[:, 1] < -0.8) & (np.abs(q[:, 0] - 0.2) < 0.22) & (np.abs(q[:, 2] + 0.2) < 0.1)
        alb[logo] = np.array([0.75, 0.72, 0.66])
        ink = logo & (np.abs(q[:, 2] + 0.2) < 0.06) & (np.floor((q[:, 0] + 1) / 0.045) % 3 != 0)
        alb[ink] = np.array([0.04, 0.04, 0.05])
        return alb

    return Material(albedo, ks=0.32, shininess=45.0)


def setup_bounce(
    rng: np.random.Generator,
    width: int,
    height: int,
    *,
    restitution: float = 0.7,
    radius: float = 0.05,
    mass: float = 0.12,
    ball_x: float = -0.05,
    drop_height: float = 0.56,
    release: float = 0.42,
    seconds: float = 2.0,
    capture_fps: float = 120.0,
    container_fps: float = 30.0,
) -> Setup:
    noise = mrp._Noise(rng)
    light = make_light([-0.3, -0.5, 0.8], hotspot=(-0.7, 1.1, 0.6, 0.15), penumbra=0.07)
    wall_y = 0.55
    shoebox = Prim(
        "box",
        np.array([-0.72, 0.36, 0.06]),
        rot_axis([0, 0, 1], 0.12),
        (0.16, 0.09, 0.06),
        _cardboard(noise),
        "static",
        ao=0.6,
        ao_range=0.03,
    )
    wood = _flat([0.30, 0.18, 0.09], 0.25, 25.0, noise, 0.02, 0.3)
    stool = [
        Prim(
            "box",
            np.array([0.66, 0.27, 0.45]),
            rot_axis([0, 0, 1], -0.2),
            (0.15, 0.15, 0.018),
            wood,
            "static",
        )
    ]
    for cx_, cy_ in ((-1, -1), (-1, 1), (1, -1), (1, 1)):
        top_ = np.array([0.66, 0.27, 0.43]) + rot_axis([0, 0, 1], -0.2) @ np.array(
            [0.11 * cx_, 0.11 * cy_, 0.0]
        )
        foot = top_ + np.array([0.04 * cx_, 0.04 * cy_, -0.43])
        stool.append(capsule_between(foot, top_, 0.014, wood, "static", ao=0.5, ao_range=0.03))
    static = StaticScene(
        light,
        wall_y,
        _wall_fn(rng, (-0.2, 0.0), (0.98, 1.0, 1.03)),
        0.0,
        _floor_fn(rng, (0.4, 0.07)),
        [shoebox, *stool],
    )
    cam = mrp.make_camera(
        width,
        height,
        fov_y_deg=40.0,
        eye=(0.07, -1.5, 0.37),
        target=(-0.02, 0.0, 0.31),
        roll_deg=-1.0,
        principal_offset_px=(-2.0, 1.5),
        distortion=(-0.06, 0.015, 0.0004, -0.0003, 0.0),
    )
    n_frames = int(round(seconds * capture_fps))
    hold = np.array([ball_x, 0.0, drop_height])
    impacts = bounce_schedule(drop_height, radius, restitution, release, seconds)
    ball_rot = rot_axis([0, 0, 1], math.radians(25.0)) @ rot_axis([1, 0, 0], math.radians(-20.0))
    ball_mat = _bounce_ball_material(noise, radius)
    skin = _skin(noise)
    sleeve = _cloth(noise, [0.22, 0.035, 0.045], 0.003, 0.4)
    lift_dir = _normalise(np.array([0.55, 0.25, 1.0]))

    def tremor(t):
        t = np.asarray(t, float)
        f = np.clip(1.0 - t / release, 0.0, None) ** 2
        return (
            0.003
            * f[..., None]
            * np.stack(
                [
                    np.sin(2 * np.pi * 1.7 * t + 0.3),
                    0.0 * t,
                    0.6 * np.sin(2 * np.pi * 2.3 * t + 1.1),
                ],
                axis=-1,
            )
        )

    def ball_state(t):
        t = np.atleast_1d(np.asarray(t, float))
        pos = np.tile(hold, (len(t), 1)) + tremor(t)
        vel = np.zeros((len(t), 3))
        for i, ti in enumerate(t):
            if ti < release:
                dt = 1e-6
                vel[i] = (tremor(ti + dt) - tremor(ti - dt)) / (2 * dt)
                continue
            if ti < impacts[0][0]:
                tau = ti - release
                pos[i, 2] = drop_height - 0.5 * G * tau**2
                vel[i, 2] = -G * tau
                continue
            k = max(j for j, imp in enumerate(impacts) if imp[0] <= ti)
            tau = ti - impacts[k][0]
            u = impacts[k][2]
            pos[i, 2] = radius + u * tau - 0.5 * G * tau**2
            vel[i, 2] = u - G * tau
        return pos, vel

    def hand_pose(t):
        opening = float(smoothstep((t - (release - 0.05)) / 0.13))
        if t < release:
            offset = tremor(t)
        else:
            offset = lift_dir * 3.5 * (t - release) ** 2
        return HandPose(hold, radius, opening, offset)

    def prims_at(t):
        pos, _ = ball_state(t)
        ball = Prim(
            "sphere",
            pos[0],
            ball_rot,
            (radius,),
            ball_mat,
            "ball",
            "ball",
            ao=0.75,
            ao_range=radius,
        )
        prims = [ball]
        if t < release + 0.8:
            prims += hand_prims(hand_pose(t), skin, sleeve)
        return prims

    def states(t):
        pos, vel = ball_state(t)
        q = np.tile(quat_from_matrix(ball_rot), (len(pos), 1))
        held = np.asarray(t) < release
        return {
            "ball": {
                "position": pos,
                "velocity": vel,
                "quat": q,
                "angular_velocity": np.zeros_like(pos),
                "held_by_hand": held,
            }
        }

    def flicker(t_mid, rng_):
        # mains lighting at 50 Hz flickers at 100 Hz: visible at 120 fps with a short exposure
        phase = rng_.uniform(0.0, 2 * np.pi)
        return (1.0 + 0.03 * np.sin(2 * np.pi * 100.0 * t_mid + phase)) * (
            1.0 + rng_.uniform(-0.005, 0.005, len(t_mid))
        )

    inside = [imp for imp in impacts if imp[0] < seconds]
    physics = {
        "g": G,
        "gravity": [0.0, 0.0, -G],
        "restitution": restitution,
        "restitution_law": "Newton: v_n+ = -e v_n- at each impact, instantaneous; no drag, "
        "no spin, no horizontal motion after the release",
        "ball": {
            "shape": "sphere",
            "radius": radius,
            "mass": mass,
            "inertia": 0.4 * mass * radius**2,
            "release_position": hold.tolist(),
            "release_velocity": [0.0, 0.0, 0.0],
        },
        "floor": {"shape": "plane", "normal": [0.0, 0.0, 1.0], "z": 0.0},
        "wall": {"shape": "plane", "normal": [0.0, -1.0, 0.0], "y": wall_y},
        "release_time": release,
        "impacts": [{"t": a, "speed_in": b, "speed_out": c} for a, b, c in inside],
        "engine_settings": "ball restitution = e, floor restitution <= e (the engine uses the "
        "larger); every impact in the clip is faster than 0.5 m/s (> the engine's 0.2 m/s no-bounce "
        "threshold); the ball never slides, so friction does not matter",
    }
    scene = {
        "wall_y": wall_y,
        "floor_z": 0.0,
        "light_direction": light.direction.tolist(),
        "props": "a shoe box on the floor by the wall (left), a wooden stool (right)",
        "ball_appearance": "glossy orange rubber with black seams and a white printed label "
        "(body frame: seams at x = 0, z = 0 and |y| = 0.72 r)",
        "hand": "skin-coloured palm (ellipsoid), four fingers and a thumb (capsules), forearm "
        "and a dark red sleeve, gripping the ball from above; the fingers open from "
        f"{release - 0.05:.3f} s to {release + 0.08:.3f} s and the hand lifts up and to the right "
        f"from {release:.3f} s (3.5 m/s^2 along {np.round(lift_dir, 3).tolist()})",
    }
    return Setup(
        "bounce",
        capture_fps,
        container_fps,
        n_frames,
        1.0 / 240.0,
        6,
        "mp4",
        cam,
        static,
        prims_at,
        states,
        physics,
        scene,
        nuisances=("hand",),
        flicker=flicker,
    )


# --- throw --------------------------------------------------------------------
def _gacha_material(noise, r):
    def part(p):
        return p[:, 2] / r  # body z: > 0.06 red, |.| <= 0.06 white ring, < -0.06 clear

    def albedo(p, n):
        z = part(p)
        alb = np.tile(np.array([0.62, 0.05, 0.04]), (len(p), 1))
        alb[np.abs(z) <= 0.07] = np.array([0.80, 0.79, 0.75])
        alb[z < -0.07] = np.array([0.45, 0.62, 0.80])
        star = (z > 0.07) & (p[:, 0] / r > 0.82)
        alb[star] = np.array([0.85, 0.80, 0.55])
        return alb

    def alpha(p, n):
        return np.where(part(p) < -0.07, 0.22, 1.0)

    def ks(p, n):
        return np.where(part(p) < -0.07, 0.8, 0.45)

    return Material(albedo, ks=ks, shininess=90.0, alpha=alpha, transmit=(0.80, 0.88, 0.98))


def setup_throw(
    rng: np.random.Generator,
    width: int,
    height: int,
    *,
    radius: float = 0.04,
    mass: float = 0.03,
    launch_position=(-1.05, 0.0, 0.42),
    speed: float = 5.3,
    angle_deg: float = 62.0,
    spin=(0.6, -8.0, 0.0),
    seconds: float = 3.0,
    fps: float = 30.0,
    person_t0: float = 0.85,
    person_x0: float = 0.75,
    person_speed: float = 1.2,
) -> Setup:
    noise = mrp._Noise(rng)
    light = make_light([-0.45, -0.75, 0.55], hotspot=(0.9, 1.6, 0.8, 0.14), penumbra=0.05)
    wall_y = 0.22
    metal = _flat([0.12, 0.12, 0.13], 0.5, 40.0)
    fabric = _cloth(noise, [0.80, 0.74, 0.60], 0.01, 0.15)
    pole = Prim("capsule", np.array([-1.28, 0.10, 0.8]), np.eye(3), (0.011, 0.8), metal, "static")
    shade_ = Prim(
        "ellipsoid", np.array([-1.28, 0.10, 1.68]), np.eye(3), (0.17, 0.17, 0.12), fabric, "static"
    )
    static = StaticScene(
        light, wall_y, _wall_fn(rng, (0.2, 0.05), (0.93, 1.0, 0.92)), 0.0, None, [pole, shade_]
    )
    cam = mrp.make_camera(
        width,
        height,
        fov_y_deg=38.0,
        eye=(-0.05, -2.3, 0.98),
        target=(0.02, 0.0, 0.95),
        roll_deg=0.8,
        principal_offset_px=(1.0, -1.2),
        distortion=(-0.045, 0.01, 0.0, 0.0, 0.0),
    )
    n_frames = int(round(seconds * fps))
    p0 = np.asarray(launch_position, float)
    a = math.radians(angle_deg)
    v0 = speed * np.array([math.cos(a), 0.0, math.sin(a)])
    omega = np.asarray(spin, float)
    rot0 = rot_axis([1, 0, 0], math.radians(25.0)) @ rot_axis([0, 0, 1], math.radians(40.0))
    gvec = np.array([0.0, 0.0, -G])
    ball_mat = _gacha_material(noise, radius)
    mats = {
        "top": _cloth(noise, [0.022, 0.027, 0.045], 0.006, 0.5),
        "jeans": _cloth(noise, [0.03, 0.04, 0.07], 0.003, 0.4),
        "shoe": _flat([0.02, 0.02, 0.02], 0.2, 20.0),
        "skin": _skin(noise, (0.50, 0.30, 0.21)),
        "hair": _cloth(noise, [0.03, 0.02, 0.012], 0.002, 0.5),
    }
    person_y = -0.75

    def rot_at(t):
        return rot_axis(omega, float(np.linalg.norm(omega)) * t) @ rot0

    def prims_at(t):
        pos = p0 + v0 * t + 0.5 * gvec * t * t
        prims = [Prim("sphere", pos, rot_at(t), (radius,), ball_mat, "ball", "ball")]
        if abs(person_x0 - person_speed * (t - person_t0)) < 2.5:  # near enough to be seen
            prims += person_prims(t, person_x0, person_t0, person_speed, person_y, mats)
        return prims

    def states(t):
        t = np.asarray(t, float)
        pos = p0 + v0 * t[:, None] + 0.5 * gvec * t[:, None] ** 2
        vel = v0 + gvec * t[:, None]
        q = np.array([quat_from_matrix(rot_at(ti)) for ti in t])
        return {
            "ball": {
                "position": pos,
                "velocity": vel,
                "quat": q,
                "angular_velocity": np.tile(omega, (len(t), 1)),
            }
        }

    physics = {
        "g": G,
        "gravity": [0.0, 0.0, -G],
        "ball": {
            "shape": "sphere",
            "radius": radius,
            "mass": mass,
            "inertia": 2.0 / 3.0 * mass * radius**2,
            "inertia_note": "a thin shell (2/3 m r^2); a solid-sphere model (2/5 m r^2) "
            "gives the same flight: without drag the spin does not change the path",
        },
        "launch_time": 0.0,
        "launch_position": p0.tolist(),
        "launch_speed": speed,
        "launch_angle_deg": angle_deg,
        "launch_angle_definition": "degrees above the horizontal, in the x-z plane, towards +x",
        "launch_velocity": v0.tolist(),
        "angular_velocity": omega.tolist(),
        "apex_time": float(v0[2] / G),
        "apex_height": float(p0[2] + v0[2] ** 2 / (2 * G)),
        "wall": {"shape": "plane", "normal": [0.0, -1.0, 0.0], "y": wall_y},
        "motion": "ballistic: p(t) = p0 + v0 t + g t^2 / 2, no drag; orientation "
        "R(t) = exp(t [omega]x) R0 (a free sphere keeps its spin)",
    }
    scene = {
        "wall_y": wall_y,
        "light_direction": light.direction.tolist(),
        "ball_appearance": "a capsule-toy ball: body z > 0.07 r opaque glossy red with a pale "
        "printed disc around body +x, |z| <= 0.07 r an opaque white ring, z < -0.07 r clear blue "
        "plastic (22 % opaque) through which the wall and the inside of the red half show",
        "shadow": "the ball's soft shadow falls on the wall about 0.13 m right of and 0.16 m "
        "below the ball (a dark blob as large as the ball)",
        "props": "a floor lamp on the left (a thin pole and a fabric shade)",
        "person": f"a person in dark clothes walking towards -x at {person_speed} m/s along "
        f"y = {person_y} (in front of the ball's plane), hips at x = {person_x0} m at "
        f"t = {person_t0} s; torso, pelvis and head ellipsoids, limbs capsules, a walking sway",
    }
    return Setup(
        "throw",
        fps,
        fps,
        n_frames,
        1.0 / 120.0,
        6,
        "avi",
        cam,
        static,
        prims_at,
        states,
        physics,
        scene,
        nuisances=("person",),
        flicker=_random_flicker,
    )


# --- incline ------------------------------------------------------------------
def _block_material(noise, half):
    hx, hy, hz = half

    def albedo(p, n):
        alb = np.tile(np.array([0.04, 0.12, 0.42]), (len(p), 1))  # painted blue sides
        top = n[:, 2] > 0.5
        alb[top] = np.array([0.66, 0.46, 0.04])
        stripe = top & (np.abs(p[:, 0] - p[:, 1]) < 0.008)
        alb[stripe] = np.array([0.03, 0.03, 0.03])
        ends = np.abs(n[:, 0]) > 0.5
        grain = _noise3(noise, p * np.array([0.15, 1.0, 1.0]), 0.003, 12)
        alb[ends] = np.array([0.42, 0.27, 0.13]) * (0.8 + 0.4 * grain[ends])[:, None]
        label = (n[:, 1] < -0.5) & (np.abs(p[:, 0]) < 0.7 * hx) & (np.abs(p[:, 2]) < 0.6 * hz)
        alb[label] = np.array([0.80, 0.78, 0.70])
        lines = label & (np.abs(p[:, 2]) < 0.45 * hz) & (np.floor(p[:, 2] / 0.005) % 2 == 0)
        lines &= np.floor((p[:, 0] + hx) / 0.004) % 4 != 0
        alb[lines] = np.array([0.05, 0.05, 0.06])
        logo = label & (p[:, 0] > 0.35 * hx) & (p[:, 2] > 0.1 * hz)
        alb[logo] = np.array([0.60, 0.06, 0.04])
        return alb

    return Material(albedo, ks=0.3, shininess=35.0)


def setup_incline(
    rng: np.random.Generator,
    width: int,
    height: int,
    *,
    mu: float = 0.3,
    angle_deg: float = 30.0,
    block_size=(0.12, 0.08, 0.07),
    block_mass: float = 0.40,
    s0: float = 0.12,
    v0: float = 0.25,
    plank_length: float = 1.8,
    plank_width: float = 0.22,
    plank_thickness: float = 0.025,
    seconds: float = 3.0,
    fps: float = 60.0,
) -> Setup:
    noise = mrp._Noise(rng)
    light = make_light([-0.25, -0.6, 0.75], hotspot=(-0.5, 1.3, 0.7, 0.15), penumbra=0.06)
    wall_y = 0.40
    alpha = math.radians(angle_deg)
    d = np.array([math.cos(alpha), 0.0, -math.sin(alpha)])  # downhill
    nrm = np.array([math.sin(alpha), 0.0, math.cos(alpha)])  # out of the top surface
    yax = np.array([0.0, 1.0, 0.0])
    inc_rot = np.stack([d, yax, nrm], axis=1)  # body x downhill, z = surface normal
    # top end of the top surface's centre line; the plank's lowest corner touches the floor
    z_top = plank_length * math.sin(alpha) + plank_thickness * math.cos(alpha)
    top = np.array([-0.78, 0.0, z_top])
    plank_c = top + 0.5 * plank_length * d - 0.5 * plank_thickness * nrm
    plank_half = (0.5 * plank_length, 0.5 * plank_width, 0.5 * plank_thickness)

    def wood(p, n):
        g = _noise3(noise, p * np.array([0.08, 1.0, 1.0]), 0.004, 14)
        knots = _noise3(noise, p, 0.05, 3)
        return np.array([0.58, 0.42, 0.23]) * (0.78 + 0.35 * g + 0.15 * (knots > 0.7))[:, None]

    plank = Prim("box", plank_c, inc_rot, plank_half, Material(wood, 0.15, 20.0), "static")
    # a cardboard box under the plank, touching its underside at s = 0.25 m
    s_sup = 0.25
    under = top + s_sup * d - plank_thickness * nrm
    sup_half = (0.15, 0.17, 0.5 * under[2])
    support = Prim(
        "box",
        np.array([under[0] - sup_half[0], 0.0, sup_half[2]]),
        np.eye(3),
        sup_half,
        _cardboard(noise),
        "static",
        ao=0.5,
        ao_range=0.04,
    )
    stop_len, stop_h = 0.03, 0.045
    s_stopper = plank_length - 0.045  # its uphill face
    stopper_c = top + (s_stopper + 0.5 * stop_len) * d + 0.5 * stop_h * nrm
    stopper = Prim(
        "box",
        stopper_c,
        inc_rot,
        (0.5 * stop_len, 0.5 * plank_width, 0.5 * stop_h),
        _flat([0.03, 0.03, 0.032], 0.15, 15.0),
        "static",
        ao=0.5,
        ao_range=0.02,
    )
    static = StaticScene(
        light,
        wall_y,
        _wall_fn(rng, (0.1, 0.0), (0.95, 0.98, 1.05)),
        0.0,
        _floor_fn(rng, (-0.3, 0.02), (0.95, 0.95, 0.95)),
        [plank, support, stopper],
    )
    cam = mrp.make_camera(
        width,
        height,
        fov_y_deg=40.0,
        eye=(-0.12, -1.78, 0.64),
        target=(-0.14, 0.0, 0.49),
        roll_deg=1.5,
        principal_offset_px=(2.0, 1.0),
        distortion=(-0.05, 0.012, 0.0, 0.0, 0.0),
    )
    n_frames = int(round(seconds * fps))
    lx, ly, lz = block_size
    half = (0.5 * lx, 0.5 * ly, 0.5 * lz)
    acc = G * (math.sin(alpha) - mu * math.cos(alpha))
    s_stop = s_stopper - 0.5 * lx
    disc = v0 * v0 + 2.0 * acc * (s_stop - s0)
    t_hit = (-v0 + math.sqrt(disc)) / acc
    v_hit = v0 + acc * t_hit
    block_mat = _block_material(noise, half)

    def along(t):
        t = np.asarray(t, float)
        s = np.where(t < t_hit, s0 + v0 * t + 0.5 * acc * t * t, s_stop)
        v = np.where(t < t_hit, v0 + acc * t, 0.0)
        return s, v

    def centre(s):
        return top + np.asarray(s)[..., None] * d + 0.5 * lz * nrm

    def prims_at(t):
        s, _ = along(t)
        return [
            Prim(
                "box",
                centre(s),
                inc_rot,
                half,
                block_mat,
                "block",
                "block",
                ao=0.55,
                ao_range=0.015,
            )
        ]

    def states(t):
        s, v = along(t)
        q = np.tile(quat_from_matrix(inc_rot), (len(s), 1))
        return {
            "block": {
                "position": centre(s),
                "velocity": v[:, None] * d,
                "quat": q,
                "angular_velocity": np.zeros((len(s), 3)),
                "s": s,
                "s_dot": v,
            }
        }

    physics = {
        "g": G,
        "gravity": [0.0, 0.0, -G],
        "mu": mu,
        "incline_angle_deg": angle_deg,
        "acceleration": acc,
        "acceleration_formula": "a = g (sin(alpha) - mu cos(alpha)) along the downhill direction",
        "block": {
            "shape": "box",
            "size": list(block_size),
            "mass": block_mass,
            "inertia_diag": [
                block_mass / 12 * (ly**2 + lz**2),
                block_mass / 12 * (lx**2 + lz**2),
                block_mass / 12 * (lx**2 + ly**2),
            ],
            "quat": quat_from_matrix(inc_rot),
            "start_position": centre(s0).tolist(),
            "start_velocity": (v0 * d).tolist(),
            "start_s": s0,
            "start_speed": v0,
        },
        "incline": {
            "plane_point": top.tolist(),
            "plane_normal": nrm.tolist(),
            "downhill": d.tolist(),
            "plane_quat": quat_from_matrix(inc_rot),
            "s_definition": "s = distance (m) downhill from the plank's top end along its top "
            "surface's centre line: block centre = plane_point + s downhill + (h / 2) normal",
            "plank_box": {
                "centre": plank_c.tolist(),
                "size": [plank_length, plank_width, plank_thickness],
                "quat": quat_from_matrix(inc_rot),
            },
        },
        "stopper": {
            "shape": "box",
            "centre": stopper_c.tolist(),
            "size": [stop_len, plank_width, stop_h],
            "quat": quat_from_matrix(inc_rot),
            "uphill_face_s": s_stopper,
            "restitution": 0.0,
        },
        "support_box": {"centre": support.centre.tolist(), "size": [2 * v for v in sup_half]},
        "floor": {"shape": "plane", "normal": [0.0, 0.0, 1.0], "z": 0.0},
        "wall": {"shape": "plane", "normal": [0.0, -1.0, 0.0], "y": wall_y},
        "stop_time": t_hit,
        "stop_s": s_stop,
        "impact_speed": v_hit,
        "motion": "s(t) = s0 + v0 t + a t^2 / 2 until the block's front face reaches the "
        "stopper at stop_time; then at rest (a perfectly inelastic stop: restitution 0). The "
        "block never rotates (it slides flat; its body x is downhill, body z the incline normal)",
    }
    scene = {
        "wall_y": wall_y,
        "floor_z": 0.0,
        "light_direction": light.direction.tolist(),
        "block_appearance": "blue painted sides, yellow top with a black diagonal stripe, "
        "natural-wood ends, a printed off-white label with text lines and a red logo on the "
        "camera's side; varnish highlights",
        "props": "the pine plank (box), a cardboard box holding its top end, a black rubber "
        "stopper at its bottom end",
    }
    return Setup(
        "incline",
        fps,
        fps,
        n_frames,
        1.0 / 120.0,
        8,
        "mp4",
        cam,
        static,
        prims_at,
        states,
        physics,
        scene,
        flicker=_random_flicker,
    )


# --- double pendulum -----------------------------------------------------------
def capsule_mass_properties(mass: float, radius: float, length: float):
    """Moments of inertia (across, axial) (kg m^2) of a uniform capsule about its centre:
    radius r, cylinder length ``length`` along body z, hemispherical caps (as the engine)."""
    r2, l2 = radius**2, length**2
    v_cyl = math.pi * r2 * length
    v_caps = 4.0 / 3.0 * math.pi * radius**3
    m_cyl = mass * v_cyl / (v_cyl + v_caps)
    m_caps = mass - m_cyl
    across = m_cyl * (l2 / 12 + r2 / 4) + m_caps * (0.4 * r2 + l2 / 4 + 3 * length * radius / 8)
    axial = 0.5 * m_cyl * r2 + 0.4 * m_caps * r2
    return across, axial


def _link_materials(noise, l1, l2):
    def alu(p, n):
        a = (
            np.array([0.50, 0.51, 0.53])
            * (0.92 + 0.16 * _noise3(noise, p * [1, 1, 0.05], 0.001))[:, None]
        )
        for zc in (0.06, -0.07):
            a[np.abs(p[:, 2] - zc) < 0.012] = np.array([0.55, 0.04, 0.03])
        return a

    def alu_ks(p, n):
        return np.where(np.abs(np.abs(p[:, 2] + 0.005) - 0.065) < 0.013, 0.2, 0.55)

    link1 = Material(alu, ks=alu_ks, shininess=22.0)
    end = l2 / 2 - 0.035

    def acrylic(p, n):
        a = np.tile(np.array([0.55, 0.70, 0.75]), (len(p), 1))
        a[np.abs(p[:, 2]) > end] = np.array([0.03, 0.03, 0.035])
        a[np.abs(p[:, 2]) < 0.012] = np.array([0.70, 0.50, 0.03])
        return a

    def acrylic_alpha(p, n):
        clear = (np.abs(p[:, 2]) <= end) & (np.abs(p[:, 2]) >= 0.012)
        return np.where(clear, 0.25, 1.0)

    def acrylic_ks(p, n):
        return np.where(np.abs(p[:, 2]) <= end, 0.8, 0.4)

    link2 = Material(
        acrylic, ks=acrylic_ks, shininess=110.0, alpha=acrylic_alpha, transmit=(0.82, 0.90, 0.92)
    )
    return link1, link2


def simulate_double_pendulum(p: dict, t_end: float):
    """Integrate the two-link pendulum (absolute angles from the downward vertical, right-handed
    about +y) from t = 0; returns SciPy's dense solution of [th1, th2, th1', th2']."""
    m1, m2, l1, c1, c2 = p["m1"], p["m2"], p["l1"], p["c1"], p["c2"]
    i1, i2 = p["I1_com"], p["I2_com"]
    d1, d2 = p["damping1"], p["damping2"]
    a11 = i1 + m1 * c1**2 + m2 * l1**2
    a22 = i2 + m2 * c2**2
    b = m2 * l1 * c2

    def rhs(_t, s):
        th1, th2, w1, w2 = s
        cd, sd = math.cos(th1 - th2), math.sin(th1 - th2)
        q1 = -d1 * w1 + d2 * (w2 - w1)  # hinge torques -c q' on q1 = th1, q2 = th2 - th1
        q2 = -d2 * (w2 - w1)
        f1 = q1 - b * sd * w2 * w2 - (m1 * c1 + m2 * l1) * G * math.sin(th1)
        f2 = q2 + b * sd * w1 * w1 - m2 * c2 * G * math.sin(th2)
        m12 = b * cd
        det = a11 * a22 - m12 * m12
        return [w1, w2, (a22 * f1 - m12 * f2) / det, (a11 * f2 - m12 * f1) / det]

    sol = solve_ivp(
        rhs,
        (0.0, t_end),
        [p["theta1_0"], p["theta2_0"], p["theta1_dot_0"], p["theta2_dot_0"]],
        method="DOP853",
        rtol=1e-12,
        atol=1e-12,
        dense_output=True,
    )
    if not sol.success:
        raise RuntimeError(sol.message)
    return sol


def double_pendulum_energy(p: dict, s: np.ndarray) -> np.ndarray:
    """Total mechanical energy (J) of states s (4, T), zero potential at the pivot height."""
    th1, th2, w1, w2 = s
    m1, m2, l1, c1, c2 = p["m1"], p["m2"], p["l1"], p["c1"], p["c2"]
    kin = 0.5 * (p["I1_com"] + m1 * c1**2 + m2 * l1**2) * w1**2
    kin += 0.5 * (p["I2_com"] + m2 * c2**2) * w2**2 + m2 * l1 * c2 * np.cos(th1 - th2) * w1 * w2
    pot = -(m1 * c1 + m2 * l1) * G * np.cos(th1) - m2 * c2 * G * np.cos(th2)
    return kin + pot


def setup_double_pendulum(
    rng: np.random.Generator,
    width: int,
    height: int,
    *,
    pivot=(0.0, 0.0, 1.05),
    l1: float = 0.32,
    r1: float = 0.016,
    m1: float = 0.14,
    l2: float = 0.27,
    r2: float = 0.013,
    m2: float = 0.075,
    damping1: float = 0.0008,
    damping2: float = 0.0005,
    theta1_0: float = 1.35,
    theta2_0: float = 2.1,
    theta1_dot_0: float = -1.0,
    theta2_dot_0: float = 2.0,
    seconds: float = 5.0,
    fps: float = 30.0,
) -> Setup:
    noise = mrp._Noise(rng)
    light = make_light([-0.35, -0.6, 0.72], hotspot=(-0.6, 1.6, 0.6, 0.16), penumbra=0.05)
    wall_y = 0.09
    pivot = np.asarray(pivot, float)
    y1, y2 = -0.005, -0.045  # the links' planes (link 2 in front)
    plate = Prim(
        "box",
        np.array([pivot[0], wall_y - 0.006, pivot[2]]),
        np.eye(3),
        (0.035, 0.006, 0.05),
        _flat([0.08, 0.08, 0.085], 0.4, 30.0, noise, 0.003, 0.3),
        "static",
    )
    axle = capsule_between(
        [pivot[0], wall_y - 0.01, pivot[2]],
        [pivot[0], y1 - 0.024, pivot[2]],
        0.005,
        _flat([0.6, 0.6, 0.62], 0.7, 60.0),
        "static",
    )
    static = StaticScene(
        light, wall_y, _wall_fn(rng, (-0.35, -0.05), (1.03, 1.0, 0.95)), 0.0, None, [plate, axle]
    )
    cam = mrp.make_camera(
        width,
        height,
        fov_y_deg=40.0,
        eye=(-0.03, -1.16, 0.87),
        target=(0.01, 0.0, 0.80),
        roll_deg=-1.3,
        principal_offset_px=(-1.0, -2.0),
        distortion=(-0.05, 0.01, -0.0003, 0.0004, 0.0),
    )
    n_frames = int(round(seconds * fps))
    i1, a1 = capsule_mass_properties(m1, r1, l1)
    i2, a2 = capsule_mass_properties(m2, r2, l2)
    par = {
        "m1": m1,
        "m2": m2,
        "l1": l1,
        "l2": l2,
        "r1": r1,
        "r2": r2,
        "c1": l1 / 2,
        "c2": l2 / 2,
        "I1_com": i1,
        "I2_com": i2,
        "damping1": damping1,
        "damping2": damping2,
        "theta1_0": theta1_0,
        "theta2_0": theta2_0,
        "theta1_dot_0": theta1_dot_0,
        "theta2_dot_0": theta2_dot_0,
    }
    sol = simulate_double_pendulum(par, seconds + 0.1)
    mat1, mat2 = _link_materials(noise, l1, l2)
    pin_mat = _flat([0.6, 0.6, 0.62], 0.7, 60.0)

    def geometry(th1, th2):
        th1, th2 = np.asarray(th1), np.asarray(th2)
        u1 = np.stack([-np.sin(th1), 0 * th1, -np.cos(th1)], axis=-1)
        u2 = np.stack([-np.sin(th2), 0 * th2, -np.cos(th2)], axis=-1)
        hinge2 = pivot + l1 * u1
        com1 = pivot + 0.5 * l1 * u1 + np.array([0.0, y1, 0.0])
        com2 = hinge2 + 0.5 * l2 * u2 + np.array([0.0, y2, 0.0])
        return hinge2, com1, com2, hinge2 + l2 * u2

    def prims_at(t):
        th1, th2 = sol.sol(t)[:2]
        h2, c1_, c2_, _ = geometry(th1, th2)
        r_1 = rot_axis([0, 1, 0], th1)
        r_2 = rot_axis([0, 1, 0], th2)
        pin = capsule_between(
            h2 + [0, y1 + 0.01, 0], h2 + [0, y2 - 0.017, 0], 0.004, pin_mat, "link1"
        )
        return [
            Prim("capsule", c1_, r_1, (r1, l1 / 2), mat1, "link1", "link1"),
            pin,
            Prim("capsule", c2_, r_2, (r2, l2 / 2), mat2, "link2", "link2"),
        ]

    def states(t):
        s = sol.sol(np.asarray(t, float))
        th1, th2, w1, w2 = s
        h2, c1_, c2_, tip = geometry(th1, th2)
        perp1 = np.stack([-np.cos(th1), 0 * th1, np.sin(th1)], axis=-1)  # d u / d th
        perp2 = np.stack([-np.cos(th2), 0 * th2, np.sin(th2)], axis=-1)
        v1 = 0.5 * l1 * w1[:, None] * perp1
        v2 = l1 * w1[:, None] * perp1 + 0.5 * l2 * w2[:, None] * perp2
        q1 = np.stack([np.cos(th1 / 2), 0 * th1, np.sin(th1 / 2), 0 * th1], axis=-1)
        q2 = np.stack([np.cos(th2 / 2), 0 * th2, np.sin(th2 / 2), 0 * th2], axis=-1)
        zero = np.zeros_like(th1)
        return {
            "link1": {
                "position": c1_,
                "velocity": v1,
                "quat": q1,
                "angular_velocity": np.stack([zero, w1, zero], axis=-1),
                "theta": th1,
                "theta_dot": w1,
            },
            "link2": {
                "position": c2_,
                "velocity": v2,
                "quat": q2,
                "angular_velocity": np.stack([zero, w2, zero], axis=-1),
                "theta": th2,
                "theta_dot": w2,
                "hinge_position": h2,
                "tip_position": tip,
                "q_relative": th2 - th1,
                "q_relative_dot": w2 - w1,
            },
        }

    def extra(t):
        return {"energy": double_pendulum_energy(par, sol.sol(np.asarray(t, float)))}

    e0 = float(double_pendulum_energy(par, sol.sol(np.array([0.0])))[0])
    physics = {
        "g": G,
        "gravity": [0.0, 0.0, -G],
        "pivot": pivot.tolist(),
        "hinge_axis": [0.0, 1.0, 0.0],
        "link1": {
            "shape": "capsule",
            "radius": r1,
            "length": l1,
            "mass": m1,
            "com_from_pivot": l1 / 2,
            "inertia_com_across": i1,
            "inertia_com_axial": a1,
            "inertia_about_pivot": i1 + m1 * (l1 / 2) ** 2,
            "plane_y": y1,
        },
        "link2": {
            "shape": "capsule",
            "radius": r2,
            "length": l2,
            "mass": m2,
            "com_from_hinge": l2 / 2,
            "inertia_com_across": i2,
            "inertia_com_axial": a2,
            "inertia_about_hinge": i2 + m2 * (l2 / 2) ** 2,
            "plane_y": y2,
        },
        "hinge_distance": l1,
        "damping1": damping1,
        "damping2": damping2,
        "damping_definition": "hinge torques -c1 q1' (pivot, q1 = theta1) and -c2 q2' (elbow, "
        "q2 = theta2 - theta1), N m s/rad",
        "theta1_0": theta1_0,
        "theta2_0": theta2_0,
        "theta1_dot_0": theta1_dot_0,
        "theta2_dot_0": theta2_dot_0,
        "q2_0": theta2_0 - theta1_0,
        "q2_dot_0": theta2_dot_0 - theta1_dot_0,
        "energy_0": e0,
        "geometry": "capsule cylinder length = hinge-to-hinge distance: the hinges sit at the "
        "centres of the caps. Link i's centre = its proximal hinge + (l_i / 2) u_i with "
        "u_i = (-sin(theta_i), 0, -cos(theta_i)) (plus its plane's y offset); body z of each "
        "link points from its distal to its proximal hinge (quat = rotation by theta_i about +y "
        "of a link hanging straight down)",
        "equations": "M(theta) theta'' = f: M11 = I1 + m1 c1^2 + m2 l1^2, M12 = m2 l1 c2 "
        "cos(th1 - th2), M22 = I2 + m2 c2^2; f1 = -m2 l1 c2 sin(th1 - th2) th2'^2 - (m1 c1 + "
        "m2 l1) g sin(th1) - c1 th1' + c2 (th2' - th1'), f2 = m2 l1 c2 sin(th1 - th2) th1'^2 - "
        "m2 c2 g sin(th2) - c2 (th2' - th1') (I = inertia about the centre of mass across the "
        "link, c = l / 2)",
        "integrator": "scipy solve_ivp DOP853, rtol 1e-12, atol 1e-12",
    }
    scene = {
        "wall_y": wall_y,
        "light_direction": light.direction.tolist(),
        "link_appearance": "link 1 brushed aluminium with two red tape bands; link 2 clear "
        "acrylic (25 % opaque, the wall shows through) with black opaque ends and a yellow band "
        "at its middle; a steel pin at the elbow (drawn with link 1, massless); a dark plate and "
        "a steel axle at the pivot",
    }
    return Setup(
        "double_pendulum",
        fps,
        fps,
        n_frames,
        1.0 / 125.0,
        10,
        "mp4",
        cam,
        static,
        prims_at,
        states,
        physics,
        scene,
        flicker=_random_flicker,
        extra_frames=extra,
    )


# --- tumble --------------------------------------------------------------------
# An L-shaped toy block (two boxes of one wood, glued): a long bar and a shorter upright at one
# end. Body frame: the block's centre of mass at the origin, the L in the body x-z plane.
_BAR = (0.22, 0.08, 0.06)  # full extents (m) of the bar, centred in the bar frame
_POST = (0.06, 0.08, 0.13)  # the upright on the bar's -x end, from the bar's top up


def lblock_geometry(bar=_BAR, post=_POST, mass: float = 0.25):
    """The L block's pieces and mass properties, from the boxes (uniform density).

    Returns a dict: ``pieces`` [(centre (3,), half extents (3,))] in the body frame (centre of
    mass at the origin), ``com_in_bar_frame`` (where the centre of mass is from the bar's
    centre), ``mass``, ``inertia`` (3, 3) about the centre of mass in the body frame (kg m^2),
    ``outline`` (6, 2) the L's corners (x, z) counter-clockwise seen from body -y, ``depth``."""
    bar, post = np.asarray(bar, float), np.asarray(post, float)
    c_bar = np.zeros(3)
    c_post = np.array([-0.5 * bar[0] + 0.5 * post[0], 0.0, 0.5 * bar[2] + 0.5 * post[2]])
    vols = np.array([bar.prod(), post.prod()])
    masses = mass * vols / vols.sum()
    com = (masses[0] * c_bar + masses[1] * c_post) / mass
    inertia = np.zeros((3, 3))
    for m, c, s in ((masses[0], c_bar, bar), (masses[1], c_post, post)):
        d = c - com
        own = (
            m
            / 12.0
            * np.diag([s[1] ** 2 + s[2] ** 2, s[0] ** 2 + s[2] ** 2, s[0] ** 2 + s[1] ** 2])
        )
        inertia += own + m * ((d @ d) * np.eye(3) - np.outer(d, d))
    x0, x1, xp = -0.5 * bar[0], 0.5 * bar[0], -0.5 * bar[0] + post[0]
    z0, z1, zp = -0.5 * bar[2], 0.5 * bar[2], 0.5 * bar[2] + post[2]
    outline = np.array([[x0, z0], [x1, z0], [x1, z1], [xp, z1], [xp, zp], [x0, zp]]) - com[[0, 2]]
    return {
        "pieces": [(c_bar - com, 0.5 * bar), (c_post - com, 0.5 * post)],
        "com_in_bar_frame": com,
        "mass": mass,
        "inertia": inertia,
        "outline": outline,
        "depth": float(bar[1]),
    }


def write_lblock_obj(path, geometry: dict) -> None:
    """The block as a closed triangle mesh (OBJ, metres, body frame): the L prism's two caps
    (4 triangles each, fanned from the corner both arms share) and six side quads, each face
    with its own cell of a 4 x 2 texture atlas (per-corner ``vt``), what a user's scan or CAD
    export of the object would be. The truth's pose is this file's frame."""
    out2, hy = geometry["outline"], 0.5 * geometry["depth"]
    verts = [[x, -hy, z] for x, z in out2] + [[x, hy, z] for x, z in out2]  # 0-5 front, 6-11 back
    lo, hi = out2.min(0), out2.max(0)
    faces, uvs = [], []

    def cell(k, u, v):  # atlas cell k (4 across, 2 down), (u, v) in [0, 1] within it
        return [(k % 4 + 0.05 + 0.9 * u) / 4.0, 1.0 - (k // 4 + 0.95 - 0.9 * v) / 2.0]

    def cap(k, ids, flip):
        for a, b in ((1, 2), (2, 3), (3, 4), (4, 5)):
            tri = [ids[0], ids[a], ids[b]]
            if flip:
                tri = [tri[0], tri[2], tri[1]]
            faces.append(tri)
            uvs.append([cell(k, *((out2[i % 6] - lo) / (hi - lo))) for i in tri])

    cap(0, list(range(6)), False)  # front (body -y): counter-clockwise seen from -y
    cap(1, list(range(6, 12)), True)
    for k in range(6):  # side quad k: outline edge k -> k + 1
        a, b = k, (k + 1) % 6
        quad = [a, a + 6, b + 6, b]  # counter-clockwise seen from outside
        for tri, corner in (
            ([0, 1, 2], [(0, 0), (1, 0), (1, 1)]),
            ([0, 2, 3], [(0, 0), (1, 1), (0, 1)]),
        ):
            faces.append([quad[i] for i in tri])
            uvs.append([cell(2 + k, *c) for c in corner])
    lines = [
        "# An L-shaped toy block (closed, metres, centre of mass at the origin), 20 triangles,",
        "# a 4 x 2 texture atlas cell per face. Written by make_realistic_clips.py (tumble).",
    ]
    lines += [f"v {x:.9g} {y:.9g} {z:.9g}" for x, y, z in verts]
    flat = [uv for tri in uvs for uv in tri]
    lines += [f"vt {u:.9g} {v:.9g}" for u, v in flat]
    for f, tri in enumerate(faces):
        lines.append("f " + " ".join(f"{tri[c] + 1}/{3 * f + c + 1}" for c in range(3)))
    Path(path).write_text("\n".join(lines) + "\n")


def _lblock_materials(noise, pieces):
    """Glossy painted wood: the bar red with white dots and a printed label on one side, the
    upright yellow with black diagonal stripes; both lightly grained. Albedo functions of
    piece-frame points, moved to the body frame (so the pattern runs across the glue joint)."""

    def bar(p, n):
        q = p + pieces[0][0]
        grain = _noise3(noise, q * np.array([0.2, 1.0, 1.0]), 0.004, 10)
        alb = np.array([0.55, 0.05, 0.03]) * (0.85 + 0.3 * grain)[:, None]
        cell = 0.022
        u = np.where(np.abs(n[:, 2]) > 0.5, q[:, 1], q[:, 2])
        dots = (np.mod(q[:, 0], cell) - 0.5 * cell) ** 2 + (np.mod(u, cell) - 0.5 * cell) ** 2
        alb[dots < 0.0055**2] = np.array([0.85, 0.83, 0.78])
        label = (
            (n[:, 1] < -0.5)
            & (q[:, 0] > 0.0)
            & (q[:, 0] < 0.07)
            & (np.abs(q[:, 2] - pieces[0][0][2]) < 0.015)
        )
        alb[label] = np.array([0.82, 0.80, 0.72])
        alb[label & (np.floor(q[:, 2] / 0.004) % 2 == 0) & (np.floor(q[:, 0] / 0.006) % 3 != 0)] = (
            0.05
        )
        return alb

    def post(p, n):
        q = p + pieces[1][0]
        grain = _noise3(noise, q * np.array([1.0, 1.0, 0.2]), 0.004, 12)
        alb = np.array([0.70, 0.52, 0.05]) * (0.85 + 0.3 * grain)[:, None]
        stripe = np.floor((q[:, 0] + q[:, 1] + q[:, 2]) / 0.014) % 2 == 0
        alb[stripe & (np.abs(n[:, 2]) < 0.5)] = np.array([0.04, 0.04, 0.05])
        return alb

    return Material(bar, ks=0.45, shininess=50.0), Material(post, ks=0.45, shininess=50.0)


def _quat_mul(a, b):
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array(
        [
            w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2,
            w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
            w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2,
            w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2,
        ]
    )


def _matrix_from_quat(q):
    w, x, y, z = np.asarray(q, float) / np.linalg.norm(q)
    return np.array(
        [
            [1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
            [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
            [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)],
        ]
    )


def simulate_tumble(inertia: np.ndarray, q0, omega0_world, t_end: float):
    """Torque-free rigid rotation: Euler's equations in the body frame (the full inertia
    tensor, not principal axes) and the quaternion's kinematics ``q' = q (0, w_body) / 2``,
    ``solve_ivp`` DOP853 with rtol = atol = 1e-12. Returns a dense solution of
    [q (4), w_body (3)]."""
    inv = np.linalg.inv(inertia)
    w_body = _matrix_from_quat(q0).T @ np.asarray(omega0_world, float)

    def rhs(_, s):
        q, w = s[:4], s[4:]
        dq = 0.5 * _quat_mul(q, np.concatenate([[0.0], w]))
        dw = inv @ (-np.cross(w, inertia @ w))
        return np.concatenate([dq, dw])

    return solve_ivp(
        rhs,
        (0.0, t_end),
        np.concatenate([q0, w_body]),
        method="DOP853",
        rtol=1e-12,
        atol=1e-12,
        dense_output=True,
    ).sol


def setup_tumble(
    rng: np.random.Generator,
    width: int,
    height: int,
    *,
    mass: float = 0.25,
    launch_position=(-0.75, 0.0, 0.6),
    launch_velocity=(1.9, 0.0, 2.9),
    quat0=(0.8660254, 0.35355339, -0.35355339, 0.0),
    omega0=(2.5, -6.0, 3.5),
    seconds: float = 0.7,
    fps: float = 60.0,
) -> Setup:
    noise = mrp._Noise(rng)
    light = make_light([-0.5, -0.7, 0.65], hotspot=(0.7, 1.4, 0.8, 0.12), penumbra=0.05)
    wall_y = 0.35
    geometry = lblock_geometry(mass=mass)
    pieces = geometry["pieces"]
    mats = _lblock_materials(noise, pieces)
    lamp = _flat([0.12, 0.12, 0.13], 0.5, 40.0)
    fabric = _cloth(noise, [0.80, 0.74, 0.60], 0.01, 0.15)
    pole = Prim("capsule", np.array([0.92, 0.15, 0.75]), np.eye(3), (0.011, 0.75), lamp, "static")
    shade_ = Prim("ellipsoid", np.array([0.92, 0.15, 1.58]), np.eye(3), (0.16, 0.16, 0.11), fabric,
                  "static")  # fmt: skip
    box = Prim("box", np.array([-0.7, 0.12, 0.09]), rot_axis([0, 0, 1], 0.2), (0.16, 0.12, 0.09),
               _cardboard(noise), "static", ao=0.5, ao_range=0.04)  # fmt: skip
    static = StaticScene(
        light, wall_y, _wall_fn(rng, (0.35, 0.0), (1.0, 0.97, 0.93)), 0.0,
        _floor_fn(rng, (0.2, -0.1), (0.95, 0.95, 0.95)), [pole, shade_, box],
    )  # fmt: skip
    cam = mrp.make_camera(
        width, height, fov_y_deg=42.0, eye=(0.02, -1.45, 0.86), target=(-0.02, 0.0, 0.8),
        roll_deg=-1.1, principal_offset_px=(-1.5, 1.0), distortion=(-0.05, 0.012, 0.0005, 0.0, 0.0),
    )  # fmt: skip
    n_frames = int(round(seconds * fps))
    p0, v0 = np.asarray(launch_position, float), np.asarray(launch_velocity, float)
    q0 = np.asarray(quat0, float) / np.linalg.norm(quat0)
    gvec = np.array([0.0, 0.0, -G])
    spin = simulate_tumble(geometry["inertia"], q0, omega0, seconds + 0.1)

    def pose(t):
        s = spin(t)
        q = s[:4] / np.linalg.norm(s[:4])
        return p0 + v0 * t + 0.5 * gvec * t * t, _matrix_from_quat(q), q, s[4:]

    def prims_at(t):
        pos, rot, _, _ = pose(t)
        return [Prim("box", pos + rot @ c, rot, tuple(h), m, "block", "block")
                for (c, h), m in zip(pieces, mats, strict=True)]  # fmt: skip

    def states(t):
        t = np.asarray(t, float)
        out = {k: [] for k in ("position", "velocity", "quat", "angular_velocity")}
        for ti in t:
            pos, rot, q, w_body = pose(ti)
            out["position"].append(pos)
            out["velocity"].append(v0 + gvec * ti)
            out["quat"].append(q if q[0] >= 0 else -q)
            out["angular_velocity"].append(rot @ w_body)
        return {"block": {k: np.array(v) for k, v in out.items()}}

    omega0 = np.asarray(omega0, float)
    physics = {
        "g": G,
        "gravity": [0.0, 0.0, -G],
        "block": {
            "shape": "an L of two boxes (one wood): a bar and an upright on its -x end",
            "mesh_file": "scenes/lblock.obj",
            "bar_size": list(_BAR),
            "upright_size": list(_POST),
            "size": [_BAR[0], _BAR[1], _BAR[2] + _POST[2]],  # the bounding box's extents
            "mass": mass,
            "inertia_body": geometry["inertia"],
            "pieces_body": [{"centre": c, "half_extents": h} for c, h in pieces],
            "body_frame": "the mesh file's frame: origin at the centre of mass, the L in the "
            "x-z plane, the bar along x, the upright towards +z at the bar's -x end",
        },
        "start_time": 0.0,
        "start_position": p0,
        "start_velocity": v0,
        "start_quat": q0,
        "start_angular_velocity": omega0,
        "motion": "free flight: centre of mass p0 + v0 t + g t^2 / 2 (no drag); rotation "
        "torque-free (Euler's equations with the full body-frame inertia, quaternion "
        "kinematics, solve_ivp DOP853, rtol = atol = 1e-12): angular momentum conserved, "
        "the angular velocity precesses",
    }
    scene = {
        "wall_y": wall_y,
        "floor_z": 0.0,
        "light_direction": light.direction.tolist(),
        "block_appearance": "glossy painted wood: the bar red with white dots and a printed "
        "label (text lines) on its body -y side, the upright yellow with black diagonal "
        "stripes on its sides; grain; Blinn-Phong highlights",
        "props": "a floor lamp on the right, a cardboard box on the floor at the left",
    }
    return Setup("tumble", fps, fps, n_frames, 1.0 / 250.0, 8, "mp4", cam, static, prims_at,
                 states, physics, scene, flicker=_random_flicker)  # fmt: skip


SETUPS = {
    "bounce": setup_bounce,
    "throw": setup_throw,
    "incline": setup_incline,
    "double_pendulum": setup_double_pendulum,
    "tumble": setup_tumble,
}


# ----------------------------------------------------------------------------- encoding
class _Mp4Writer:
    """H.264 in MP4 through imageio-ffmpeg (libx264, yuv420p, preset medium), as the pendulum."""

    description = "libx264 (imageio-ffmpeg), yuv420p, preset medium, x264's default B-frames"

    def __init__(self, path, width, height, fps, crf):
        import imageio_ffmpeg

        self._gen = imageio_ffmpeg.write_frames(
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
        self._gen.send(None)

    def send(self, img):
        self._gen.send(np.ascontiguousarray(img))

    def close(self):
        self._gen.close()


class _AviWriter:
    """MPEG-4 Part 2 (FFmpeg's mpeg4, like Xvid/DivX) with B-frames in AVI, through PyAV."""

    B_FRAMES = 2
    GOP = 30

    def __init__(self, path, width, height, fps, bitrate):
        import av

        self.description = (
            f"mpeg4 (MPEG-4 Part 2, PyAV), yuv420p, {self.B_FRAMES} B-frames, GOP {self.GOP}, "
            f"{bitrate / 1000:.0f} kb/s, AVI"
        )
        self._av = av
        self._c = av.open(str(path), "w", format="avi")
        s = self._c.add_stream("mpeg4", rate=int(round(fps)))
        s.width, s.height, s.pix_fmt = width, height, "yuv420p"
        s.bit_rate = int(bitrate)
        s.codec_context.max_b_frames = self.B_FRAMES
        s.codec_context.gop_size = self.GOP
        s.thread_count = 1
        s.options = {"flags": "+bitexact"}
        self._s = s
        self._k = 0

    def send(self, img):
        frame = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(img), format="rgb24")
        frame = frame.reformat(format="yuv420p")
        frame.pts = self._k
        self._k += 1
        for packet in self._s.encode(frame):
            self._c.mux(packet)

    def close(self):
        for packet in self._s.encode():
            self._c.mux(packet)
        self._c.close()


# ----------------------------------------------------------------------------- the clip
def _jsonable(x):
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        return None if not math.isfinite(float(x)) else float(x)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.bool_):
        return bool(x)
    return x


def _runs(mask) -> list[list[int]]:
    """[first, last] frame index pairs of the runs of True in a boolean sequence."""
    out, start = [], None
    for k, v in enumerate(list(mask) + [False]):
        if v and start is None:
            start = k
        elif not v and start is not None:
            out.append([start, k - 1])
            start = None
    return out


def camera_truth(cam: dict) -> dict:
    return {
        "resolution": [cam["width"], cam["height"]],
        "fx": cam["fx"],
        "fy": cam["fy"],
        "cx": cam["cx"],
        "cy": cam["cy"],
        "distortion": dict(zip(["k1", "k2", "p1", "p2", "k3"], cam["dist"].tolist(), strict=True)),
        "position": cam["position"].tolist(),
        "world_from_camera_rotation": cam["rotation"].tolist(),
        "look_at": cam["look_at"].tolist(),
        "up": cam["up"].tolist(),
        "fov_y_deg": cam["fov_y_deg"],
        "roll_deg": cam["roll_deg"],
    }


CONVENTIONS = {
    "world": "right-handed, z up, SI units (m, s, kg, rad); gravity g along -z",
    "quaternion": "[w, x, y, z] of the world_from_body rotation",
    "camera": "OpenCV axes (x right, y down, z forward); world_from_camera rotation columns are "
    "the camera axes in world coordinates; pixel (row i, col j) covers x in [j, j+1], "
    "y in [i, i+1], rays through (j + 0.5, i + 0.5); intrinsics fx, fy, cx, cy in that "
    "convention (pixels)",
    "distortion": "OpenCV (k1, k2, p1, p2, k3) applied to normalised coordinates x/z, y/z; "
    "then u = fx * x_d + cx, v = fy * y_d + cy",
    "time": "real (capture) time in s from the first frame's start: frame k starts at "
    "k / capture_fps and the sensor integrates [start, start + exposure_time]; the per-frame "
    "states are at mid-exposure (t_mid). container_time = k / container_fps is what the file's "
    "frame rate says",
    "centre_px": "the body's centre (its centre of mass) projected with the distortion, (u, v) "
    "in pixels as above",
    "visibility": "visible_fraction: share of the body's ray samples (supersampled, over the "
    "exposure's sub-frames) that reach it, i.e. are not covered by another moving thing; "
    "occluded_fraction: the share covered by a nuisance (the hand or the person); occluded: "
    "occluded_fraction > 0.02",
}


def make_clip(
    kind: str,
    path=None,
    truth_path=None,
    seed: int = 0,
    *,
    width: int = 320,
    height: int = 180,
    supersample: int = 3,
    crf: int = 20,
    avi_bitrate: int = 700_000,
    progress: bool = False,
    **params,
) -> dict:
    """Render one clip and return its ground truth (a JSON-serialisable dict).

    Args:
        kind: "bounce" | "throw" | "incline" | "double_pendulum".
        path: the video (default: tests/data/<kind>_realistic.mp4, .avi for throw).
        truth_path: the truth JSON (default: the video's path with .json).
        seed: seeds the textures, noise and flicker (physics is not random).
        width, height: pixels (even). supersample: ss x ss rays per pixel and sub-frame.
        crf: libx264 constant rate factor (MP4). avi_bitrate: mpeg4 bit rate (AVI), bit/s.
        progress: print a line every 60 frames.
        **params: the scene's physical parameters (see ``setup_<kind>``), e.g. restitution,
            mu, speed, angle_deg, theta1_0, seconds.
    """
    if kind not in SETUPS:
        raise ValueError(f"unknown kind {kind!r}; choose from {KINDS}")
    if width % 2 or height % 2:
        raise ValueError("width and height must be even (yuv420p)")
    path = Path(path) if path is not None else HERE / OUTPUTS[kind]
    truth_path = Path(truth_path) if truth_path is not None else path.with_suffix(".json")
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    tex_rng, noise_rng = rng.spawn(2)
    su = SETUPS[kind](tex_rng, width, height, **params)
    if kind == "tumble":  # the object's mesh, as a user's scan or CAD export would give it
        write_lblock_obj(
            HERE / "scenes" / "lblock.obj", lblock_geometry(mass=su.physics["block"]["mass"])
        )
    cam = su.camera
    static = prepare_static(cam, supersample, su.static)
    gains = mrp.EXPOSURE_GAIN * su.gain * mrp.vignette(cam)
    n = su.n_frames
    t_start = np.arange(n) / su.capture_fps
    t_mid = t_start + 0.5 * su.exposure
    flicker = su.flicker(t_mid, noise_rng)
    names = [p.name for p in su.prims_at(0.0) if p.name]
    counts = {nm: np.zeros((n, 3), np.int64) for nm in names}
    seen = {g: np.zeros(n, np.int64) for g in su.nuisances}

    if su.container == "avi":
        writer = _AviWriter(path, width, height, su.container_fps, avi_bitrate)
    else:
        writer = _Mp4Writer(path, width, height, su.container_fps, crf)
    try:
        for k in range(n):
            lin = static["pix_rad"].copy()
            for j in range(su.subframes):
                t = t_start[k] + (j + 0.5) / su.subframes * su.exposure
                idx, val, cnt, sn = render_moving(cam, static, su.prims_at(t), su.nuisances)
                lin[idx] += (val - static["pix_rad"][idx]) / su.subframes
                for nm, c in cnt.items():
                    counts[nm][k] += c
                for g in su.nuisances:
                    seen[g][k] += sn.get(g, 0)
            img = mrp.sensor(lin.reshape(height, width, 3), gains * flicker[k], noise_rng)
            writer.send(img)
            if progress and (k + 1) % 60 == 0:
                print(f"  {kind}: frame {k + 1}/{n}", flush=True)
    finally:
        writer.close()

    states = su.states(t_mid)
    bodies = {}
    for nm in names:
        st = dict(states[nm])
        px, _ = mrp.project(cam, st["position"])
        front, vis, hid = counts[nm].T
        with np.errstate(invalid="ignore", divide="ignore"):
            visible = np.where(front > 0, vis / front, np.nan)
            occl = np.where(front > 0, hid / front, 0.0)
        in_frame = (px[:, 0] >= 0) & (px[:, 0] <= width) & (px[:, 1] >= 0) & (px[:, 1] <= height)
        st.update(
            centre_px=px,
            in_frame=in_frame,
            visible_fraction=visible,
            occluded_fraction=occl,
            occluded=occl > 0.02,
        )
        bodies[nm] = st
    nuisance_frames = {g: _runs(seen[g] > 0) for g in su.nuisances}
    occluded_frames = {nm: _runs(bodies[nm]["occluded"]) for nm in names}

    # the scene file's time 0: the first frame, or (bounce) the first frame at least 0.05 s
    # after the release from which on no nuisance covers the ball
    k0 = 0
    if kind == "bounce":
        release = su.physics["release_time"]
        bad = bodies["ball"]["occluded"] | (t_start < release + 0.05)
        k0 = int(np.flatnonzero(bad)[-1]) + 1 if bad.any() else 0
    start_state = su.states(np.array([t_start[k0]]))
    frames = {
        "t_start": t_start,
        "t_mid": t_mid,
        "container_time": np.arange(n) / su.container_fps,
        "exposure_gain": flicker,
        "bodies": bodies,
        "nuisance_samples": {g: seen[g] for g in su.nuisances},
    }
    if su.extra_frames is not None:
        frames.update(su.extra_frames(t_mid))
    video = {
        "file": path.name,
        "container": su.container,
        "codec": writer.description if hasattr(writer, "description") else "",
        "crf": crf if su.container == "mp4" else None,
        "bitrate": avi_bitrate if su.container == "avi" else None,
        "capture_fps": su.capture_fps,
        "container_fps": su.container_fps,
        "n_frames": n,
        "duration_real": n / su.capture_fps,
        "duration_container": n / su.container_fps,
        "exposure_time": su.exposure,
        "subframes": su.subframes,
        "subframe_times": "t_start + (j + 0.5) / subframes * exposure_time, j = 0..subframes-1",
        "supersample": supersample,
        "nuisance_frames": nuisance_frames,
        "occluded_frames": occluded_frames,
        "flicker": "per-frame gain in frames.exposure_gain (mains flicker at 100 Hz for bounce)",
    }
    if su.container == "avi":
        video["timestamps_note"] = (
            "AVI stores no presentation timestamps: packets are in decode order (B-frames "
            "after the P-frame they depend on); demuxers report decode-order or guessed "
            "timestamps (FFmpeg/PyAV gives the decoded frames pts 1, 2, ... not 0, 1, ...). "
            "Frame k (in display order) starts at k / capture_fps"
        )
    if su.capture_fps != su.container_fps:
        video["slow_motion_note"] = (
            f"captured at {su.capture_fps:g} fps, stored as {su.container_fps:g} fps: the "
            f"container's timestamps are {su.capture_fps / su.container_fps:g} x the real times"
        )
    truth = {
        "description": f"Synthetic phone video: {kind}; see tests/data/README.md.",
        "generator": "tests/data/make_realistic_clips.py",
        "kind": kind,
        "seed": seed,
        "conventions": CONVENTIONS,
        "physics": su.physics,
        "camera": camera_truth(cam),
        "video": video,
        "scene": su.scene,
        "scene_file": f"tests/data/scenes/{kind}.toml",
        "scene_start_frame": k0,
        "scene_start_time": float(t_start[k0]),
        "scene_start_container_time": float(k0 / su.container_fps),
        "scene_start_note": "the scene file's time 0 is this real time (a frame's start); its "
        "initial state is scene_start_state",
        "scene_start_state": {nm: {k: v[0] for k, v in s.items()} for nm, s in start_state.items()},
        "frames": frames,
    }
    truth = _jsonable(truth)
    truth_path.write_text(json.dumps(truth, indent=1) + "\n")
    return truth


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("kinds", nargs="*", default=list(KINDS), help=f"any of {KINDS} (all)")
    p.add_argument("--out", default=None, help="video path (one kind only)")
    p.add_argument("--truth", default=None, help="truth JSON path (one kind only)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--width", type=int, default=320)
    p.add_argument("--height", type=int, default=180)
    p.add_argument("--supersample", type=int, default=3)
    a = p.parse_args(argv)
    if (a.out or a.truth) and len(a.kinds) != 1:
        p.error("--out and --truth need exactly one kind")
    for kind in a.kinds:
        t0 = time.perf_counter()
        truth = make_clip(
            kind,
            a.out,
            a.truth,
            a.seed,
            width=a.width,
            height=a.height,
            supersample=a.supersample,
            progress=True,
        )
        out = Path(a.out) if a.out else HERE / OUTPUTS[kind]
        digest = hashlib.sha256(out.read_bytes()).hexdigest()[:16]
        v = truth["video"]
        print(
            f"wrote {out} ({v['n_frames']} frames, {out.stat().st_size / 1e3:.0f} kB, sha256 "
            f"{digest}) in {time.perf_counter() - t0:.1f} s"
        )


if __name__ == "__main__":
    main()
