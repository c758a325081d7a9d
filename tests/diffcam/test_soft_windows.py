"""Soft edges evaluate each primitive only inside a pixel window where its coverage can exceed
sigmoid(-SOFT_TAIL): images and gradients must equal the full evaluation (every primitive at
every pixel, obtained here with an infinite tail) to within that bound."""

from __future__ import annotations

import math

import pytest
import torch

import diffcam
from diffcam.renderer import reach as reach_mod
from diffcam.renderer import silhouettes as render_mod
from diffcam.renderer.frame import local_dirs
from diffcam.scene import SCENES_DIR

from ._common import axis_angle, smooth_texture

# per-pixel bound: K primitives, each coverage changed by < sigmoid(-tail), colours in [0, 1]
# (float32: a cut at 1e-4, with at most 3 primitives near a pixel here; float64: exact)
ATOL = {torch.float32: 3e-4, torch.float64: 1e-14}


def _spy_reach(monkeypatch):
    """Per call of `reach.kept_pixels`: (render call, k, pixels kept, candidates), over the
    batch; render calls counted by `reach.candidates`."""
    calls, kept = [], []
    orig_candidates, orig_kept = reach_mod.candidates, reach_mod.kept_pixels

    def spy_candidates(*args, **kwargs):
        calls.append(1)
        return orig_candidates(*args, **kwargs)

    def spy_kept(f, k, cand, *args, **kwargs):
        out = orig_kept(f, k, cand, *args, **kwargs)
        n_kept = 0 if out is None else int(out.valid.sum())
        kept.append((len(calls) - 1, k, n_kept, int(cand.valid.sum())))
        return out

    monkeypatch.setattr(render_mod, "candidates", spy_candidates)
    monkeypatch.setattr(render_mod, "kept_pixels", spy_kept)
    return kept


def _check(run, leaves, monkeypatch, dtype, weights):
    img = run()
    grads = torch.autograd.grad((img * weights).sum(), leaves)
    with monkeypatch.context() as m:  # every primitive at every pixel
        m.setitem(render_mod.SOFT_TAIL, dtype, math.inf)
        ref = run()
        ref_grads = torch.autograd.grad((ref * weights).sum(), leaves)
    torch.testing.assert_close(img, ref, rtol=0, atol=ATOL[dtype])
    for g, r in zip(grads, ref_grads, strict=True):
        scale = float(r.abs().max())
        torch.testing.assert_close(g, r, rtol=0, atol=ATOL[dtype] * 100 * max(1.0, scale))
    return img, ref


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
    kept = _spy_reach(monkeypatch)

    def run():
        return scene.render(posed, edge_softness=1.0, static_cache=True)

    img, _ = _check(run, [rot, pos], monkeypatch, dtype, weights)
    # the pixels the two moving bodies' soft edges reach are a small part of the image (the
    # point of it; float64's cut is 4x as far out)
    # (the first call renders the cached static layer: 5 bodies; then the 2 moving ones)
    call = [i for i, k, _, _ in kept if k == 4][0] + 1
    n_kept = sum(n for i, _, n, _ in kept if i == call)
    n_cand = sum(n for i, _, _, n in kept if i == call)
    assert n_kept < (0.15 if dtype == torch.float32 else 0.8) * 4 * H * W
    # and the candidates are few more (the curved bound is looser at float64's cut)
    assert n_kept <= n_cand < (1.5 if dtype == torch.float32 else 2.5) * n_kept
    # and the moving bodies are drawn: the image differs from the cached static layer
    still = scene.render(posed.replace(position=pos.detach() + 100.0), edge_softness=1.0)
    assert (img.detach() - still).abs().amax() > 0.1


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
    kept = _spy_reach(monkeypatch)

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
    if dtype == torch.float32:  # candidates in use (float64's cut, 37 px, spans this image)
        assert all(n_cand < B * H * W for i, _, _, n_cand in kept if i == 0)
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


def _marked(pixels, B: int, P: int):
    """(B, P) bool: the real entries of a `reach.PixelList`."""
    flat = pixels.pix + P * torch.arange(B).unsqueeze(1)
    marked = torch.zeros(B * P, dtype=torch.bool)
    marked[flat[pixels.valid]] = True
    return marked.view(B, P)


@pytest.mark.parametrize("kind", ["sphere", "capsule", "cylinder", "box", "rectangle"])
@pytest.mark.parametrize("margin", [0.5, 9.21, 37.0])
def test_candidates_hold_every_near_pixel(kind, margin):
    """The candidate pixels of a primitive's soft edge (spheres, capsules and cylinders: the
    per-row sections of a bounding box grown by what the margin can reach; boxes and
    rectangles: the per-row spans their edge lines allow) hold every pixel the per-pixel test
    marks, for random poses (near, far, oblique, thin, partly off-screen, behind the camera)
    and margins up to float64's cut, and far fewer than the whole image; boxes' and
    rectangles' are those pixels."""
    from diffcam.primitive_silhouettes import silhouette_distance
    from diffcam.renderer.frame import make_frame

    dtype, B, H, W = torch.float64, 64, 120, 160  # f = 165 px: the 37-px margin bounds
    g = torch.Generator().manual_seed(3)
    size = {
        "sphere": 0.3,
        "capsule": [0.1, 0.8],
        "cylinder": [0.2, 0.5],
        "box": [0.6, 0.05, 0.3],
        "rectangle": [0.6, 0.05],
    }[kind]
    prims = [diffcam.Primitive(kind, size)]
    rot = axis_angle(2.0 * torch.randn(B, 1, 3, generator=g, dtype=dtype))
    pos = torch.randn(B, 1, 3, generator=g, dtype=dtype) * torch.tensor([1.0, 2.0, 0.6])
    cam = diffcam.PinholeCamera.look_at(
        torch.tensor([0.0, -3.0, 0.0], dtype=dtype),
        torch.zeros(3, dtype=dtype),
        torch.tensor([0.0, 0.0, 1.0], dtype=dtype),
        torch.tensor(40.0, dtype=dtype),
        W,
        H,
    )
    f = make_frame(cam, prims, rot, pos, None)
    cand = reach_mod.candidates(f, margin)[0]
    marked = _marked(cand, B, H * W)
    assert cand.valid.sum(1).equal(marked.sum(1))  # no pixel listed twice
    d = local_dirs(f.A, f.dxp, f.dyp).reshape(B, 1, -1, 3)
    fx1, fy1 = f.fx.unsqueeze(1), f.fy.unsqueeze(1)
    sd, _, _ = silhouette_distance(f.codes[0], f.o, d, f.h, f.A, fx1, fy1, 0.5 * (fx1 + fy1))
    near = (sd > -margin).view(B, H * W)
    assert near.any() and not (near & ~marked).any()  # a superset
    if kind in ("box", "rectangle"):  # exact, but for pixels within rounding of the cut
        assert int((marked & ~near).sum()) <= 1e-4 * B * H * W
    # and a test of something (loose at float64's cut: t may be as deep as T)
    assert int(marked.sum()) < (0.5 if margin < 10 else 0.9) * B * H * W
    kept = reach_mod.kept_pixels(f, 0, cand, margin, 1 << 23)
    if kind not in ("box", "rectangle"):  # the exact test on the candidates: the per-pixel one
        assert _marked(kept, B, H * W).equal(near)
