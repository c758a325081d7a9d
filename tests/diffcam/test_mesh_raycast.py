"""Ray casting against meshes: the watertight ray-triangle test, the BVH traversal against the
brute-force reference and against trimesh's intersector, and the refit to moved vertices."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from diffcam.mesh.bvh import build_bvh, refit
from diffcam.mesh.raycast import cast_rays, cast_rays_brute_force
from diffcam.mesh.triangles import ray_shear, ray_triangle
from tests.diffcam.test_mesh_mass import box_mesh, uv_sphere


def random_rays(n, seed=0, dtype=torch.float64, spread=3.0, aim=0.8):
    """Rays from points around the origin (spread, m) towards points near it (aim, m)."""
    g = torch.Generator().manual_seed(seed)
    o = torch.randn(n, 3, generator=g, dtype=torch.float64) * spread
    target = torch.randn(n, 3, generator=g, dtype=torch.float64) * aim
    return o.to(dtype), (target - o).to(dtype)


def test_ray_triangle_hit_point_and_barycentrics(dtype):
    a, b, c = (torch.tensor(x, dtype=dtype) for x in ([0.0, 0, 1], [1.0, 0, 1], [0.0, 1, 1]))
    o = torch.tensor(
        [[0.2, 0.3, 0.0], [0.2, 0.3, 2.0], [0.8, 0.8, 0.0], [0.2, 0.3, 3.0]], dtype=dtype
    )
    d = torch.tensor([[0.0, 0, 2], [0.0, 0, -1], [0.0, 0, 1], [0.0, 0, 1]], dtype=dtype)
    h = ray_triangle(o, ray_shear(d), a, b, c)
    assert h.hit.tolist() == [True, True, False, False]  # both sides; outside; behind
    torch.testing.assert_close(h.t[:2], torch.tensor([0.5, 1.0], dtype=dtype))
    p = h.bary[:2, :1] * a + h.bary[:2, 1:2] * b + h.bary[:2, 2:] * c
    torch.testing.assert_close(p, o[:2] + h.t[:2, None] * d[:2])
    torch.testing.assert_close(h.bary[0], torch.tensor([0.5, 0.2, 0.3], dtype=dtype))


def test_watertight_rays_through_shared_edges_and_vertices(dtype):
    # rays from the centre of a closed sphere mesh through its vertices and edge midpoints:
    # exactly on shared edges, where a non-watertight test can let a ray through
    mesh = uv_sphere(1.0, 12, 24, dtype=dtype)
    c = mesh.corners()
    targets = torch.cat([mesh.vertices, 0.5 * (c[:, 0] + c[:, 1]), 0.5 * (c[:, 1] + c[:, 2])])
    o = torch.zeros_like(targets)
    hits = cast_rays_brute_force(c, o, targets)
    assert bool((hits.face >= 0).all())
    bvh_hits = cast_rays(build_bvh(c), c, o, targets)
    assert bool((bvh_hits.face >= 0).all())


@pytest.mark.parametrize("leaf_size", [1, 4, 8, 16])
@pytest.mark.slow
def test_bvh_equals_brute_force_on_random_rays(dtype, leaf_size):
    trimesh = pytest.importorskip("trimesh")
    tm = trimesh.creation.torus(
        major_radius=1.0, minor_radius=0.35, major_sections=40, minor_sections=20
    )
    c = torch.tensor(tm.vertices[tm.faces], dtype=dtype)
    o, d = random_rays(3000, dtype=dtype)
    bvh = build_bvh(c, leaf_size=leaf_size)
    ref = cast_rays_brute_force(c, o, d)
    got = cast_rays(bvh, c, o, d, max_pairs=4096)  # small chunks: several passes
    assert 0.2 < float((ref.face >= 0).double().mean()) < 0.9
    assert torch.equal(got.face, ref.face)
    assert torch.equal(got.t, ref.t)


def moller_trumbore(o, d, corners):
    """An independent reference: the nearest hit by the Moller-Trumbore test in numpy,
    float64, every ray against every triangle -> (t (R,) inf where none, face (R,) -1)."""
    o, d, c = (x.detach().double().numpy() for x in (o, d, corners))
    a = c[None, :, 0]
    e1, e2 = c[None, :, 1] - a, c[None, :, 2] - a
    p = np.cross(d[:, None], e2)
    det = (e1 * p).sum(-1)
    inv = 1.0 / np.where(det == 0, 1.0, det)
    s = o[:, None] - a
    u = (s * p).sum(-1) * inv
    q = np.cross(s, e1)
    v = (d[:, None] * q).sum(-1) * inv
    t = (e2 * q).sum(-1) * inv
    ok = (det != 0) & (u >= 0) & (v >= 0) & (u + v <= 1) & (t > 1e-9)
    t = np.where(ok, t, np.inf)
    face = t.argmin(1)
    best = t.min(1)
    return torch.from_numpy(best), torch.from_numpy(np.where(np.isfinite(best), face, -1))


def test_cast_rays_agrees_with_moller_trumbore(dtype):
    trimesh = pytest.importorskip("trimesh")
    tm = trimesh.creation.icosphere(subdivisions=2, radius=0.9)
    c = torch.tensor(tm.vertices[tm.faces]) * torch.tensor([1.5, 1.0, 0.7], dtype=torch.float64)
    o, d = random_rays(400, seed=1)
    got = cast_rays(build_bvh(c.to(dtype)), c.to(dtype), o.to(dtype), d.to(dtype))
    t, face = moller_trumbore(o, d, c)
    assert torch.equal(got.face, face)
    hit = face >= 0
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    torch.testing.assert_close(got.t[hit].double(), t[hit], rtol=tol, atol=tol)


def test_refit_follows_moved_vertices():
    mesh = box_mesh((1.0, 1.0, 1.0))
    bvh = build_bvh(mesh.corners(), leaf_size=2)
    moved = mesh.corners() * torch.tensor([2.0, 1.0, 1.0], dtype=torch.float64) + 0.3
    fitted = refit(bvh, moved)
    torch.testing.assert_close(fitted.lo[0], moved.reshape(-1, 3).amin(0))
    torch.testing.assert_close(fitted.hi[0], moved.reshape(-1, 3).amax(0))
    o, d = random_rays(500, seed=2)
    assert torch.equal(cast_rays(fitted, moved, o, d).face, cast_rays_brute_force(moved, o, d).face)


def test_no_rays_and_no_hits():
    c = box_mesh((1.0, 1.0, 1.0)).corners()
    empty = torch.zeros(0, 3, dtype=torch.float64)
    assert cast_rays(build_bvh(c), c, empty, empty).face.numel() == 0
    assert cast_rays_brute_force(c, empty, empty).face.numel() == 0
    o = torch.tensor([[5.0, 0, 0]], dtype=torch.float64)
    d = torch.tensor([[1.0, 0, 0]], dtype=torch.float64)
    got = cast_rays(build_bvh(c), c, o, d)
    assert got.face.tolist() == [-1] and got.t.isinf().all()
