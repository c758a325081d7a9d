"""Soft edges evaluate each primitive only inside a pixel window where its coverage can exceed
sigmoid(-_SOFT_TAIL): images and gradients must equal the full evaluation (every primitive at
every pixel, obtained here with an infinite tail) to within that bound."""

from __future__ import annotations

import importlib
import math

import pytest
import torch

import diffcam
from diffcam.scene import SCENES_DIR

from ._common import axis_angle, smooth_texture

render_mod = importlib.import_module("diffcam.render.silhouettes")

# per-pixel bound: K primitives, each coverage changed by < sigmoid(-tail), colours in [0, 1]
ATOL = {torch.float32: 2e-6, torch.float64: 1e-14}


def _spy_windows(monkeypatch):
    sizes = []
    orig = render_mod._soft_windows

    def spy(*args, **kwargs):
        out = orig(*args, **kwargs)
        sizes.append({k: (hk, wk) for k, (_, _, hk, wk) in out.items()})
        return out

    monkeypatch.setattr(render_mod, "_soft_windows", spy)
    return sizes


def _check(run, leaves, monkeypatch, dtype, weights):
    img = run()
    grads = torch.autograd.grad((img * weights).sum(), leaves)
    with monkeypatch.context() as m:  # every primitive at every pixel
        m.setitem(render_mod._SOFT_TAIL, dtype, math.inf)
        ref = run()
        ref_grads = torch.autograd.grad((ref * weights).sum(), leaves)
    torch.testing.assert_close(img, ref, rtol=0, atol=ATOL[dtype])
    for g, r in zip(grads, ref_grads, strict=True):
        scale = float(r.abs().max())
        torch.testing.assert_close(g, r, rtol=0, atol=ATOL[dtype] * 100 * max(1.0, scale))
    return img, ref


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_pendulum_cart_windows_match_full_soft_render(dtype, monkeypatch):
    scene = diffcam.load_scene(SCENES_DIR / "pendulum_cart.toml", dtype=dtype)
    steps = 120
    force = 20.0 * torch.sin(0.05 * torch.arange(steps, dtype=dtype)).view(steps, 1, 1)
    with torch.no_grad():
        traj = scene.rollout(steps, actions=force)
    state = traj[torch.tensor([0, 40, 80, 120])]  # B = 4 frames
    state = state.replace(rotation=state.rotation[:, 0], position=state.position[:, 0])
    rot = state.rotation.clone().requires_grad_()
    pos = state.position.clone().requires_grad_()
    posed = state.replace(rotation=rot, position=pos)
    H, W = scene.camera.height, scene.camera.width
    weights = torch.rand(4, 3, H, W, generator=torch.Generator().manual_seed(0), dtype=dtype)
    sizes = _spy_windows(monkeypatch)

    def run():
        return scene.render(posed, edge_softness=1.0, static_cache=True)

    img, _ = _check(run, [rot, pos], monkeypatch, dtype, weights)
    # the windows of the two moving bodies are a small part of the image (the point of it)
    # (the first call renders the cached static layer: 5 bodies; then the 2 moving ones)
    moving = [w for w in sizes if len(w) == 2][0]
    assert sum(hk * wk for hk, wk in moving.values()) < 0.4 * 2 * H * W
    # and the moving bodies are drawn: the image differs from the cached static layer
    still = scene.render(posed.replace(position=pos.detach() + 100.0), edge_softness=1.0)
    assert (img.detach() - still).abs().amax() > 0.1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_border_crossing_and_sharp_corners_match_full_soft_render(dtype, monkeypatch):
    g = torch.Generator().manual_seed(1)
    H, W, B = 30, 90, 3
    cam = diffcam.PinholeCamera.look_at(
        torch.tensor([0.0, -3.0, 0.0], dtype=dtype),
        torch.zeros(3, dtype=dtype),
        torch.tensor([0.0, 0.0, 1.0], dtype=dtype),
        torch.tensor(30.0, dtype=dtype),
        W,
        H,
    )
    tex = smooth_texture(16, dtype=dtype).requires_grad_()
    prims = [
        diffcam.Primitive("sphere", 0.3, texture=tex),
        diffcam.Primitive("box", [0.4, 0.2, 0.3], texture=tex),
        diffcam.Primitive("capsule", [0.08, 0.6], texture=tex),
        diffcam.Primitive("cylinder", [0.1, 0.3], texture=tex),
        # a square seen nearly edge-on and turned 45 deg: a thin rhombus with sharp corners,
        # where the soft coverage reaches further out than the corner's bounding box + margin
        diffcam.Primitive("rectangle", [0.5, 0.5], texture=tex),
    ]
    K = len(prims)
    w = 0.4 * torch.randn(B, K, 3, generator=g, dtype=dtype)
    w[:, 4] = torch.tensor([math.pi / 2 - 0.03, 0.0, 0.0], dtype=dtype)
    spin = axis_angle(torch.tensor([0.0, math.pi / 4, 0.0], dtype=dtype))
    # images 0 and 1: the sphere, box and capsule cross the left / right / top border
    base = torch.tensor(
        [[-2.45, 0, 0.0], [2.45, 0, 0.1], [0.3, 0, 0.75], [-0.8, 0, -0.1], [0.4, 0, 0.0]],
        dtype=dtype,
    )
    pos = (base + 0.05 * torch.randn(B, K, 3, generator=g, dtype=dtype)).requires_grad_()
    rot0 = axis_angle(w)
    rot0[:, 4] = rot0[:, 4] @ spin
    rot = rot0.detach().requires_grad_()
    bg = torch.rand(1, 3, H, W, generator=g, dtype=dtype).requires_grad_()
    bg_depth = torch.full((1, 1, H, W), 3.2, dtype=dtype)
    bg_depth[..., : W // 3] = 0.0  # an empty part of the layer (nothing behind)
    light = diffcam.Lighting()
    weights = torch.rand(B, 3, H, W, generator=g, dtype=dtype)
    sizes = _spy_windows(monkeypatch)

    def run():
        return diffcam.render(
            cam,
            prims,
            rot,
            pos,
            background=bg,
            background_depth=bg_depth,
            edge_softness=1.0,
            lighting=light,
        )

    img, _ = _check(run, [rot, pos, tex, bg], monkeypatch, dtype, weights)
    assert all(hk < H or wk < W for hk, wk in sizes[0].values())  # windows in use
    # the primitives reach the borders: some coverage at the first and last column and row
    diff = (img.detach() - bg.detach()).abs().amax(1)
    assert diff[..., 0].amax() > 0.1 and diff[..., -1].amax() > 0.1 and diff[:, 0].amax() > 0.1


def test_chunked_windows_match(monkeypatch):
    """Activation checkpointing and batch chunks of the windows give the same result."""
    dtype = torch.float64
    cam = diffcam.PinholeCamera.look_at(
        torch.tensor([0.0, -3.0, 0.0], dtype=dtype),
        torch.zeros(3, dtype=dtype),
        torch.tensor([0.0, 0.0, 1.0], dtype=dtype),
        torch.tensor(40.0, dtype=dtype),
        60,
        40,
    )
    prims = [diffcam.Primitive("box", [0.3, 0.2, 0.2]), diffcam.Primitive("sphere", 0.2)]
    rot = axis_angle(0.5 * torch.randn(4, 2, 3, dtype=dtype)).requires_grad_()
    pos = (0.3 * torch.randn(4, 2, 3, dtype=dtype)).requires_grad_()
    outs = []
    for chunk in (1 << 23, 2000):
        img = diffcam.render(cam, prims, rot, pos, edge_softness=0.7, max_chunk_elements=chunk)
        outs.append((img, *torch.autograd.grad(img.square().sum(), [rot, pos])))
    for a, b in zip(*outs, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("kind", ["box", "rectangle"])
def test_coarse_distance_pass_marks_every_near_row_and_column(kind):
    """Boxes and rectangles find their windows from a sample grid (their distance is
    1-Lipschitz in pixels): the rows and columns it marks include every one the per-pixel test
    marks, for random poses (thin, oblique, partly off-screen)."""
    from diffcam.primitives import silhouette_distance

    dtype, B, H, W = torch.float64, 64, 37, 53  # sizes not multiples of the stride
    g = torch.Generator().manual_seed(2)
    size = [0.6, 0.05, 0.3] if kind == "box" else [0.6, 0.05]
    prims = [diffcam.Primitive(kind, size)]
    rot = axis_angle(2.0 * torch.randn(B, 1, 3, generator=g, dtype=dtype))
    pos = torch.randn(B, 1, 3, generator=g, dtype=dtype) * torch.tensor([1.0, 0.5, 0.6])
    seen = {}
    orig = render_mod._coarse_near

    def spy(A, o, h, dxp, dyp, fx1, fy1, f_mean, code, ks, margin):
        seen["coarse"] = orig(A, o, h, dxp, dyp, fx1, fy1, f_mean, code, ks, margin)
        d = render_mod._local_dirs(A[:, ks], dxp, dyp).reshape(B, 1, -1, 3)
        sd, _, _ = silhouette_distance(code, o[:, ks], d, h[:, ks], A[:, ks], fx1, fy1, f_mean)
        near = (sd > -margin).view(B, 1, H, W)
        seen["exact"] = (near.any(3), near.any(2))
        return seen["coarse"]

    cam = diffcam.PinholeCamera.look_at(
        torch.tensor([0.0, -3.0, 0.0], dtype=dtype),
        torch.zeros(3, dtype=dtype),
        torch.tensor([0.0, 0.0, 1.0], dtype=dtype),
        torch.tensor(40.0, dtype=dtype),
        W,
        H,
    )
    mp = pytest.MonkeyPatch()
    mp.setattr(render_mod, "_coarse_near", spy)
    mp.setitem(render_mod._SOFT_TAIL, dtype, 3.0)  # a small margin: the windows are tight
    try:
        diffcam.render(cam, prims, rot, pos, edge_softness=1.0)
    finally:
        mp.undo()
    for coarse, exact in zip(seen["coarse"], seen["exact"], strict=True):
        assert not (exact & ~coarse).any()  # a superset
        assert exact.any() and (~coarse).any()  # and a test of something
