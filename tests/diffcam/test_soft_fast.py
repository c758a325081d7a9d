"""Soft edges' hand-written backward passes agree with the autograd-recorded references:
front-to-back compositing (`renderer.composite`), the one-node texture sampler
(`renderer.sampling.sample_quad_blocks`), and a whole soft render under forward-mode AD (which
takes the references) against reverse mode (which takes the fast paths), float64."""

from __future__ import annotations

import pytest
import torch

import diffcam
from diffcam.renderer import composite as composite_mod
from diffcam.renderer import sampling
from diffcam.textures import build_atlas

from .test_render import all_kinds_scene

F64 = torch.float64


def _samples(B=2, P=12, K=3, seed=0):
    """Random soft samples in per-primitive blocks of unique ascending pixels (some pixels
    shared by up to K samples, ties in depth), with coverage exactly 0 and 1 among them."""
    g = torch.Generator().manual_seed(seed)
    pids, prims = [], []
    for k in range(K):
        pix = torch.randperm(B * P, generator=g)[: B * P // 2].sort().values
        pids.append(pix)
        prims.append(torch.full_like(pix, k))
    pid, prim = torch.cat(pids), torch.cat(prims)
    S = pid.numel()
    depth = torch.randint(1, 4, (S,), generator=g).to(F64)  # ties between primitives
    hit = torch.rand(S, generator=g) < 0.6
    alpha = torch.rand(S, generator=g, dtype=F64)
    alpha[::7], alpha[3::11] = 1.0, 0.0
    colour = torch.rand(S, 3, generator=g, dtype=F64)
    return pid, prim, depth, hit, alpha, colour


def _background(bg_batch, P, layout):
    """A (bg_batch, P, 3) background: rows of 3 colours, or (as a pre-rendered layer
    arrives) a channels-first image seen through a transpose."""
    g = torch.Generator().manual_seed(1)
    if layout == "rows":
        return torch.rand(bg_batch, P, 3, dtype=F64, generator=g)
    return torch.rand(bg_batch, 3, P, dtype=F64, generator=g).transpose(1, 2)


@pytest.mark.parametrize("layout", ["rows", "channels_first"])
@pytest.mark.parametrize("bg_batch", [1, 2])
def test_composite_matches_reference_values_and_gradients(bg_batch, layout):
    B, P, K = 2, 12, 3
    pid, prim, depth, hit, alpha, colour = _samples(B, P, K)
    plan = composite_mod.make_plan(pid, prim, depth, hit, B, P, K)
    assert plan.L == K and plan.many.numel() > 0 and plan.one.numel() > 0
    bg = _background(bg_batch, P, layout)
    leaves = [x.clone().requires_grad_() for x in (alpha, colour, bg)]
    fast = composite_mod._Composite.apply(*leaves, plan)
    ref = composite_mod.composite_reference(*leaves, plan)
    weights = [torch.randn(x.shape, dtype=F64) for x in ref]
    g_fast = torch.autograd.grad(
        sum((w * x).sum() for w, x in zip(weights, fast, strict=True)), leaves
    )
    g_ref = torch.autograd.grad(
        sum((w * x).sum() for w, x in zip(weights, ref, strict=True)), leaves
    )
    for a, b in zip(fast, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    for a, b in zip(g_fast, g_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("fast", [True, False])
def test_composite_image_alone_is_the_image_of_the_full_composite(fast):
    """``with_coverage=False`` returns None for the coverage and the same image and
    gradients as the full composite whose coverage no loss uses."""
    B, P, K = 2, 12, 3
    pid, prim, depth, hit, alpha, colour = _samples(B, P, K, seed=5)
    plan = composite_mod.make_plan(pid, prim, depth, hit, B, P, K, winners=False)
    leaves = [x.clone().requires_grad_() for x in (alpha, colour, _background(1, P, "rows"))]
    fn = composite_mod._Composite.apply if fast else composite_mod.composite_reference
    image, coverage = fn(*leaves, plan, False)
    full, full_coverage = fn(*leaves, plan, True)
    assert coverage is None and full_coverage is not None
    weight = torch.randn(image.shape, dtype=F64)
    grads = torch.autograd.grad((weight * image).sum(), leaves)
    full_grads = torch.autograd.grad((weight * full).sum(), leaves)
    torch.testing.assert_close(image, full, rtol=0, atol=0)
    for a, b in zip(grads, full_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    # a loss of the coverage alone (no image gradient reaches the node)
    weight = torch.randn(full_coverage.shape, dtype=F64)
    ref_coverage = composite_mod.composite_reference(*leaves, plan, True)[1]
    grads = torch.autograd.grad((weight * fn(*leaves, plan, True)[1]).sum(), leaves[:1])
    ref_grads = torch.autograd.grad((weight * ref_coverage).sum(), leaves[:1])
    for a, b in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_composite_gradcheck_and_winners():
    B, P, K = 1, 8, 3
    pid, prim, depth, hit, alpha, colour = _samples(B, P, K, seed=3)
    alpha = alpha.clamp(0.05, 0.95)  # finite differences away from the clamps
    plan = composite_mod.make_plan(pid, prim, depth, hit, B, P, K)
    bg = torch.rand(1, P, 3, dtype=F64)
    leaves = [x.clone().requires_grad_() for x in (alpha, colour, bg)]
    assert torch.autograd.gradcheck(lambda *x: composite_mod._Composite.apply(*x, plan), leaves)
    # winners: per pixel the nearest hit (lower primitive on a depth tie)
    expected = set()
    for p in pid.unique().tolist():
        at = ((pid == p) & hit).nonzero().squeeze(1).tolist()
        if at:
            expected.add(min(at, key=lambda i: (float(depth[i]), int(prim[i]))))
    assert set(plan.winners.tolist()) == expected


@pytest.mark.parametrize("shaded", [False, True])
@pytest.mark.slow
def test_sample_quad_blocks_matches_per_block_sampler(shaded):
    g = torch.Generator().manual_seed(0)
    textures = [
        torch.rand(3, 7, 5, generator=g, dtype=F64),
        torch.rand(3, 4, 6, generator=g, dtype=F64),
    ]
    atlas = build_atlas(textures, [True, False])
    quad = atlas.quad.detach().requires_grad_()
    u = (torch.rand(50, generator=g, dtype=F64) * 1.4 - 0.2).requires_grad_()
    v = (torch.rand(50, generator=g, dtype=F64) * 1.4 - 0.2).requires_grad_()
    shade = (torch.rand(50, generator=g, dtype=F64) + 0.5).requires_grad_()
    leaves = (quad, u, v, shade) if shaded else (quad, u, v)
    meta = [
        (atlas.offset[k, 0], atlas.width[k, 0], atlas.height[k, 0], atlas.repeat[k]) for k in (0, 1)
    ]
    blocks = [(0, 20, *meta[0]), (20, 50, *meta[1])]
    ref = torch.cat([sampling.sample_quad(quad, u[a:b], v[a:b], *m) for a, b, *m in blocks])
    if shaded:
        ref = ref * shade.unsqueeze(1)

    def fast_fn(q, uu, vv, ss=None):
        return sampling.sample_quad_blocks(q, uu, vv, blocks, ss)

    fast = fast_fn(*leaves)
    torch.testing.assert_close(fast, ref, rtol=1e-15, atol=1e-15)
    w = torch.randn(ref.shape, dtype=F64, generator=g)
    g_ref = torch.autograd.grad((w * ref).sum(), leaves)
    g_fast = torch.autograd.grad((w * fast).sum(), leaves)
    for a, b in zip(g_fast, g_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(fast_fn, leaves)
    # the texture alone requires grad (the forward keeps no per-sample derivatives then)
    fixed = [x.detach() for x in leaves[1:]]
    g_tex = torch.autograd.grad((w * fast_fn(quad, *fixed)).sum(), quad)[0]
    torch.testing.assert_close(g_tex, g_ref[0], rtol=1e-12, atol=1e-12)
    # the textures' layout as Python numbers (TextureAtlas.level0): the same
    assert [m[1:] for m in atlas.level0] == [(5, 7, True), (6, 4, False)]
    unshaded = torch.cat([sampling.sample_quad(quad, u[a:b], v[a:b], *m) for a, b, *m in blocks])
    blocks = [(0, 20, *atlas.level0[0]), (20, 50, *atlas.level0[1])]
    plain = fast_fn(*leaves)
    torch.testing.assert_close(plain, ref, rtol=1e-15, atol=1e-15)
    g_plain = torch.autograd.grad((w * plain).sum(), leaves)
    for a, b in zip(g_plain, g_ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)
    per_block = torch.cat([sampling.sample_quad(quad, u[a:b], v[a:b], *m) for a, b, *m in blocks])
    torch.testing.assert_close(per_block, unshaded, rtol=1e-15, atol=1e-15)


def test_soft_render_forward_mode_matches_reverse_mode():
    """Forward-mode AD takes the autograd-recorded references, reverse mode the hand-written
    backward passes: the directional derivative of a weighted soft render agrees."""
    from torch.autograd import forward_ad

    cam, prims, R, p = all_kinds_scene()
    p = p.clone()
    p[0, 1, 0] = -0.7  # the sphere overlaps the box: pixels with several samples
    tangent = torch.randn(p.shape, dtype=F64, generator=torch.Generator().manual_seed(0))
    light = diffcam.Lighting()
    weights = torch.randn(1, 3, 24, 32, dtype=F64, generator=torch.Generator().manual_seed(1))

    def loss(pos):
        out = diffcam.render_buffers(cam, prims, R, pos, edge_softness=1.0, lighting=light)
        return (out.image * weights).sum() + out.coverage.sum()

    pos = p.clone().requires_grad_()
    (grad,) = torch.autograd.grad(loss(pos), pos)
    with torch.no_grad(), forward_ad.dual_level():
        dual = forward_ad.make_dual(p, tangent)
        jvp = forward_ad.unpack_dual(loss(dual)).tangent
    assert float(jvp) == pytest.approx(float((grad * tangent).sum()), rel=1e-9, abs=1e-9)
