"""NVIDIA Warp's ray cast (`diffcam.mesh.warp_rays`), the default for float32 mesh renders
where warp-lang is installed (the `warp` extra, installed by the test command): the same
nearest hits as the torch BVH, the same renders and gradients, and which caster a render takes."""

from __future__ import annotations

import math

import pytest
import torch

import diffcam
from diffcam.mesh import build_bvh, cast_rays, ray_caster, warp_rays
from diffcam.mesh.shapes import torus

pytest.importorskip("warp")


def _rays(count: int, seed: int = 0):
    """Rays from points around a torus towards points near it: (R, 3) origins, directions."""
    g = torch.Generator().manual_seed(seed)
    angle = torch.rand(count, generator=g) * 2 * math.pi
    origins = torch.stack(
        [3 * angle.cos(), 3 * angle.sin(), torch.rand(count, generator=g) - 0.5], 1
    )
    targets = (torch.rand(count, 3, generator=g) - 0.5) * torch.tensor([2.4, 2.4, 0.8])
    return origins, targets - origins


def test_warp_finds_the_nearest_hits_of_the_torch_bvh():
    mesh = torus(0.8, 0.3, 40, 20)
    corners = mesh.vertices[mesh.faces]
    origins, directions = _rays(20_000)
    want = cast_rays(build_bvh(corners), corners, origins, directions)
    got = warp_rays.WarpMesh(corners).cast(origins, directions)
    hit = torch.isfinite(want.t)
    assert 0.2 < float(hit.float().mean()) < 0.9  # both kinds of rays are tested
    assert torch.equal(torch.isfinite(got.t), hit)
    assert torch.equal(got.face[~hit], torch.full_like(got.face[~hit], -1))
    same = got.face[hit] == want.face[hit]
    assert float(same.float().mean()) > 0.999  # a ray through a shared edge may take either
    torch.testing.assert_close(got.t[hit], want.t[hit], rtol=1e-5, atol=1e-6)
    # one shared origin for every ray, as the renderer casts a camera's rays
    one = warp_rays.WarpMesh(corners).cast(origins[0], directions)
    alone = cast_rays(build_bvh(corners), corners, origins[0], directions)
    assert torch.equal(torch.isfinite(one.t), torch.isfinite(alone.t))


def test_convention_auto_takes_warp_for_float32_and_the_bvh_for_float64():
    assert ray_caster("auto", torch.float32) == "warp"
    assert ray_caster("auto", torch.float64) == "bvh"
    for caster in ("bvh", "warp", "brute_force"):
        assert ray_caster(caster, torch.float64) == caster
    with pytest.raises(ValueError, match="ray_casting must be one of"):
        ray_caster("octree")


def test_warp_asked_for_without_warp_lang_names_the_extra(monkeypatch):
    monkeypatch.setattr(warp_rays, "_warp", lambda: None)
    assert ray_caster("auto", torch.float32) == "bvh"
    with pytest.raises(ImportError, match=r"pip install 'diffcam\[warp\]'"):
        _ = diffcam.Primitive("mesh", mesh=torus(0.8, 0.3, 8, 4), ray_casting="warp").mesh_shape


def test_a_float32_render_through_warp_matches_the_bvh_render_and_its_gradients():
    mesh = torus(0.8, 0.3, 24, 12)
    texture = torch.rand(3, 6, 10, generator=torch.Generator().manual_seed(0))
    cam = diffcam.PinholeCamera.look_at(
        torch.tensor([0.4, -3.0, 1.6]), torch.zeros(3), torch.tensor([0.0, 0.0, 1.0]), 40.0, 48, 32
    )
    rotation = torch.eye(3).expand(2, 1, 3, 3)
    position = torch.tensor([[[0.1, 0.0, 0.05]], [[-0.2, 0.1, 0.0]]])
    out = []
    for caster in ("auto", "bvh"):
        tex = texture.clone().requires_grad_(True)
        pos = position.clone().requires_grad_(True)
        vertices = mesh.vertices.clone().requires_grad_(True)
        prim = diffcam.Primitive(
            "mesh", mesh=diffcam.mesh.Mesh(vertices, mesh.faces, mesh.uvs), texture=tex,
            ray_casting=caster,
        )  # fmt: skip
        image = diffcam.render(cam, [prim], rotation, pos, lighting=diffcam.Lighting())
        image.square().sum().backward()
        out.append((image.detach(), tex.grad, pos.grad, vertices.grad))
    (image, *grads), (want, *want_grads) = out
    assert float((want - want[..., :1, :1]).abs().sum(1).gt(1e-6).float().mean()) > 0.1
    torch.testing.assert_close(image, want, rtol=1e-5, atol=1e-5)
    for got, expected in zip(grads, want_grads, strict=True):
        assert expected.abs().max() > 0
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-5)


def test_warp_finds_the_nearest_silhouette_edge_of_the_torch_search():
    from diffcam.renderer import mesh as mesh_renderer

    g = torch.Generator().manual_seed(3)
    x, y = torch.rand(5000, generator=g) * 640, torch.rand(5000, generator=g) * 480
    xa, ya, xb, yb = (torch.rand(300, generator=g) * 640 for _ in range(4))
    xb[:5], yb[:5] = xa[:5], ya[:5]  # segments of no length (points) too
    got = warp_rays.nearest_segments(x, y, xa, ya, xb, yb)
    _, torch_distance = mesh_renderer._segment_point(x[:, None], y[:, None], xa, ya, xb, yb)
    want = torch_distance.argmin(1)
    best = torch_distance.gather(1, want[:, None])[:, 0]
    reached = torch_distance.gather(1, got[:, None])[:, 0]
    torch.testing.assert_close(reached, best, rtol=1e-5, atol=1e-4)  # a tie may pick either
    assert float((got == want).float().mean()) > 0.999
