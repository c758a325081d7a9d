"""Primitives: analytic intersections, (u, v) layouts seen from the front, no-NaN gradients."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import diffcam
from diffcam.primitives import KINDS, intersect, surface_normal

from ._common import BL, BR, FACING_FRONT, TL, TR, front_camera, quadrant_texture

F64 = torch.float64


def _t(x):
    return torch.tensor(x, dtype=F64)


@pytest.mark.parametrize(
    "kind,h,t_expect",
    [
        ("sphere", [0.5, 0, 0], 2.5),
        ("box", [0.4, 0.3, 0.2], 2.7),
        ("cylinder", [0.5, 0.3, 0], 2.5),
        ("capsule", [0.5, 0.3, 0], 2.5),
        ("rectangle", [0.5, 0.5, 0], 3.0),
    ],
)
def test_intersect_axis_ray(kind, h, t_expect):
    """A ray from (0, -3, 0) along +y hits the front surface at the analytic depth."""
    o = _t([0.0, -3.0, 0.0])
    d = _t([0.0, 1.0, 0.0])
    code = KINDS[kind]
    if kind == "rectangle":  # rectangle lies in z = 0: shoot along -z instead
        o, d = _t([0.1, 0.2, 3.0]), _t([0.0, 0.0, -1.0])
    if kind == "box":
        t_expect = 3.0 - h[1]
    t, hit = intersect(code, o, d, _t(h))
    assert bool(hit)
    assert abs(float(t) - t_expect) < 1e-12


def test_intersect_capsule_cap_and_cylinder_cap():
    """Along the axis from above: capsule hits its hemisphere, cylinder its flat cap."""
    o, d, h = _t([0.0, 0.0, 3.0]), _t([0.0, 0.0, -1.0]), _t([0.5, 0.3, 0.0])
    t_cap, hit = intersect(KINDS["capsule"], o, d, h)
    assert bool(hit) and abs(float(t_cap) - (3.0 - 0.3 - 0.5)) < 1e-12
    t_cyl, hit = intersect(KINDS["cylinder"], o, d, h)
    assert bool(hit) and abs(float(t_cyl) - (3.0 - 0.3)) < 1e-12
    n = surface_normal(KINDS["cylinder"], o + t_cyl * d, h)
    torch.testing.assert_close(n, _t([0.0, 0.0, 1.0]))


def _random_rays(n, seed):
    g = np.random.default_rng(seed)
    o = g.uniform(-3, 3, size=(n, 3))
    target = g.uniform(-0.6, 0.6, size=(n, 3))
    d = target - o
    return torch.from_numpy(o), torch.from_numpy(d)


def _sdf(kind, p, h):
    """Signed distance functions (numpy-free torch), an independent check of hit points."""
    if kind == "sphere":
        return torch.linalg.vector_norm(p, dim=-1) - h[0]
    if kind == "box":
        q = p.abs() - h
        return torch.linalg.vector_norm(q.clamp(min=0), dim=-1) + q.max(-1).values.clamp(max=0)
    if kind == "capsule":
        zc = p[..., 2].clamp(-h[1], h[1])
        q = p.clone()
        q[..., 2] = p[..., 2] - zc
        return torch.linalg.vector_norm(q, dim=-1) - h[0]
    if kind == "cylinder":
        dr = torch.linalg.vector_norm(p[..., :2], dim=-1) - h[0]
        dz = p[..., 2].abs() - h[1]
        outside = torch.stack([dr.clamp(min=0), dz.clamp(min=0)], -1)
        return torch.maximum(dr, dz).clamp(max=0) + torch.linalg.vector_norm(outside, dim=-1)
    raise ValueError(kind)


@pytest.mark.parametrize("kind", ["sphere", "box", "capsule", "cylinder"])
def test_intersect_against_sdf(kind):
    """Hit points lie on the surface (SDF = 0), and ray-marching the SDF agrees on hit/miss
    and on the first-hit depth."""
    h = _t([0.4, 0.3, 0.25]) if kind == "box" else _t([0.35, 0.3, 0.0])
    o, d = _random_rays(600, 1)
    outside = _sdf(kind, o, h) > 0.05  # a camera inside a body is not supported
    o, d = o[outside], d[outside]
    t, hit = intersect(KINDS[kind], o, d, h)
    p = o + t.unsqueeze(-1) * d
    assert hit.float().mean() > 0.3
    assert _sdf(kind, p[hit], h).abs().max() < 1e-9
    # sphere tracing from the origin of each ray
    dn = d / torch.linalg.vector_norm(d, dim=-1, keepdim=True)
    s = torch.zeros(o.shape[0], dtype=F64)
    for _ in range(300):
        s = s + _sdf(kind, o + s.unsqueeze(-1) * dn, h).clamp(min=0)
    marched_hit = _sdf(kind, o + s.unsqueeze(-1) * dn, h) < 1e-7
    agree = marched_hit == hit
    assert agree.float().mean() > 0.99  # grazing rays may differ
    both = marched_hit & hit
    dist = t * torch.linalg.vector_norm(d, dim=-1)
    assert (dist[both] - s[both]).abs().max() < 1e-5


# ---------------------------------------------------------------------------- uv conventions
def _quadrant_check(img, cx, cy, off):
    """Colours at (cx -+ off, cy -+ off) should be TL, TR, BL, BR (image row 0 at the top)."""
    got = [
        img[:, int(cy - off), int(cx - off)],
        img[:, int(cy - off), int(cx + off)],
        img[:, int(cy + off), int(cx - off)],
        img[:, int(cy + off), int(cx + off)],
    ]
    for g, e in zip(got, [TL, TR, BL, BR], strict=True):
        torch.testing.assert_close(g, torch.tensor(e, dtype=F64), atol=1e-6, rtol=0)


@pytest.mark.parametrize(
    "kind,size,rotation",
    [
        ("rectangle", [1.0, 1.0], FACING_FRONT),
        ("plane", [1.0, 1.0], FACING_FRONT),
        ("box", [1.0, 1.0, 1.0], None),
        ("sphere", 0.8, None),
        ("cylinder", [0.8, 1.5], None),
        ("capsule", [0.6, 1.0], None),
    ],
)
def test_convention_uv_front_view(kind, size, rotation):
    """The asymmetric texture appears upright and unmirrored seen from the front (-y)."""
    cam = front_camera(width=40, height=40, fov=50.0)
    tex = quadrant_texture(64)
    prim = diffcam.Primitive(kind, size, texture=tex)
    R = torch.eye(3, dtype=F64) if rotation is None else _t(rotation)
    img = diffcam.render(cam, [prim], R.view(1, 1, 3, 3), torch.zeros(1, 1, 3, dtype=F64))[0]
    _quadrant_check(img, 20, 20, 4)


def test_convention_uv_box_faces_and_plane_from_above():
    """Every box face (seen from outside, upright) and the infinite plane (from above)."""
    tex = quadrant_texture(8)
    up_z = [0.0, 0.0, 1.0]
    views = [  # eye, up
        ([0, -3, 0], up_z),
        ([3, 0, 0], up_z),
        ([0, 3, 0], up_z),
        ([-3, 0, 0], up_z),
        ([0, 0, 3], [0, 1, 0]),
        ([0, 0, -3], [0, 1, 0]),
    ]
    box = diffcam.Primitive("box", [1.0, 1.0, 1.0], texture=tex)
    R = torch.eye(3, dtype=F64).view(1, 1, 3, 3)
    for eye, up in views:
        cam = diffcam.PinholeCamera.look_at(_t(eye), _t([0, 0, 0]), _t(up), _t(50.0), 40, 40)
        img = diffcam.render(cam, [box], R, torch.zeros(1, 1, 3, dtype=F64))[0]
        _quadrant_check(img, 20, 20, 4)
    plane = diffcam.Primitive("plane", None, texture=tex)
    cam = diffcam.PinholeCamera.look_at(
        _t([0.5, 0.5, 2]), _t([0.5, 0.5, 0]), _t([0, 1, 0]), _t(30.0), 40, 40
    )
    img = diffcam.render(cam, [plane], R, torch.zeros(1, 1, 3, dtype=F64))[0]
    _quadrant_check(img, 20, 20, 4)


def test_convention_sphere_longitude():
    """Sphere u = 1/2 faces -y, u = 3/4 faces +x (right of the front), seam at +y."""
    from diffcam.primitives import SPHERE, surface_uv

    p = _t([[0, -1, 0], [1, 0, 0], [-1, 0, 0], [0, 0, 1]])
    u, v = surface_uv(SPHERE, p, _t([1.0, 0, 0]))
    torch.testing.assert_close(u[:3], _t([0.5, 0.75, 0.25]))
    torch.testing.assert_close(v, _t([0.5, 0.5, 0.5, 1.0]))


# ---------------------------------------------------------------------------- no NaN
@pytest.mark.parametrize("kind", ["sphere", "capsule", "cylinder", "box"])
def test_no_nan_grad_grazing(kind):
    """Rays exactly tangent to the surface, along the axis, through poles: finite gradients."""
    h = _t([0.5, 0.3, 0.2]).requires_grad_()
    o = _t([[0.5, -3, 0.0], [0.0, 0.0, 3.0], [0, -3, 0.3], [0.5, -3, 0.3], [0.0, 0, 0]])
    o = o.clone().requires_grad_()
    d = _t([[0, 1, 0], [0, 0, -1], [0, 1, 0], [0, 1, 0], [0, 0, 1.0]]).requires_grad_()
    from diffcam.primitives import surface_uv

    t, hit = intersect(KINDS[kind], o, d, h)
    p = o + t.unsqueeze(-1) * d
    u, v = surface_uv(KINDS[kind], p, h)
    n = surface_normal(KINDS[kind], p, h)
    (t.sum() + u.sum() + v.sum() + n.sum()).backward()
    for x in (h, o, d):
        assert torch.isfinite(x.grad).all()
