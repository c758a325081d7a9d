"""Texture sampling: conventions (v up, texel centres), wrap modes, gradients, determinism."""

from __future__ import annotations

import pytest
import torch

import diffcam
from diffcam.textures import build_atlas, composite

from ._common import BL, BR, TL, TR, quadrant_texture


def test_convention_texel_centres_and_v_up(dtype):
    """u = (k + 0.5) / Wt hits column k exactly; v = 1 - (r + 0.5) / Ht hits PNG row r."""
    tex = torch.rand(3, 5, 7, dtype=dtype)
    r, c = torch.meshgrid(torch.arange(5), torch.arange(7), indexing="ij")
    u = (c.to(dtype) + 0.5) / 7
    v = 1 - (r.to(dtype) + 0.5) / 5
    out = diffcam.sample_texture(tex, u, v)
    torch.testing.assert_close(out.permute(2, 0, 1), tex)


def test_convention_quadrants():
    tex = quadrant_texture()
    uv = torch.tensor([[0.25, 0.75], [0.75, 0.75], [0.25, 0.25], [0.75, 0.25]], dtype=torch.float64)
    out = diffcam.sample_texture(tex, uv[:, 0], uv[:, 1])
    torch.testing.assert_close(out, torch.tensor([TL, TR, BL, BR], dtype=torch.float64))


def test_wrap_modes():
    tex = torch.rand(3, 4, 4, dtype=torch.float64)
    u = torch.tensor([0.0, 1.0, 1.1, -0.2], dtype=torch.float64)
    v = torch.full_like(u, 0.375)
    rep = diffcam.sample_texture(tex, u, v, wrap="repeat")
    torch.testing.assert_close(rep[0], rep[1])  # u = 0 and u = 1 are the same point
    torch.testing.assert_close(rep[2], diffcam.sample_texture(tex, u[2:3] - 1, v[2:3])[0])
    cl = diffcam.sample_texture(tex, u, v, wrap="clamp")
    torch.testing.assert_close(cl[3], tex[:, 2, 0])  # left edge column, row for v = 0.375
    torch.testing.assert_close(cl[1], tex[:, 2, 3])


def test_gradcheck_sample_texture():
    tex = torch.rand(3, 4, 5, dtype=torch.float64, requires_grad=True)
    u = torch.tensor([0.13, 0.52, 0.91, 1.37], dtype=torch.float64, requires_grad=True)
    v = torch.tensor([0.21, 0.66, 0.05, -0.4], dtype=torch.float64, requires_grad=True)
    for wrap in ("repeat", "clamp"):

        def f(t, a, b, wrap=wrap):
            return diffcam.sample_texture(t, a, b, wrap)

        assert torch.autograd.gradcheck(f, (tex, u, v))


def _composite_args(dtype, mip=False, shade=True):
    g = torch.Generator().manual_seed(0)
    texs = [
        torch.rand(3, 4, 6, generator=g, dtype=dtype),
        torch.rand(3, 3, 3, generator=g, dtype=dtype),
    ]
    atlas = build_atlas(texs, [True, False], mipmap=mip)
    B, H, W = 2, 3, 4
    pix = torch.tensor([0, 2, 3, 5, 7, 12, 13, 20, 23])
    slot = torch.tensor([0, 1, 0, 1, 0, 0, 1, 1, 0])
    u = torch.rand(9, generator=g, dtype=dtype) * 1.4 - 0.2
    v = torch.rand(9, generator=g, dtype=dtype) * 1.4 - 0.2
    s = torch.rand(9, generator=g, dtype=dtype) if shade else None
    bg = torch.rand(1, H * W, 3, generator=g, dtype=dtype)
    return atlas, texs, (B, H, W), pix, slot, u, v, s, bg


def test_composite_matches_autograd_sampler():
    """The fused sampler (hand-written backward) equals the autograd-tracked one, values and
    gradients (to textures, u, v, shade, background)."""
    atlas, texs, shape, pix, slot, u, v, s, bg = _composite_args(torch.float64)
    B, H, W = shape
    for x in (*texs, u, v, s, bg):
        x.requires_grad_()
    atlas = build_atlas(texs, [True, False])
    meta = (atlas.offset[slot, 0], atlas.width[slot, 0], atlas.height[slot, 0], atlas.repeat[slot])
    img = composite(atlas.quad, u, v, s, None, bg, pix, meta, None, shape)
    ref = bg.expand(B, H * W, 3).reshape(-1, 3).clone()
    ref = ref.index_put((pix,), atlas.sample(slot, u, v) * s.unsqueeze(1))
    ref = ref.view(B, H, W, 3).permute(0, 3, 1, 2)
    torch.testing.assert_close(img, ref)
    w = torch.rand(img.shape, dtype=torch.float64)
    g1 = torch.autograd.grad((img * w).sum(), (*texs, u, v, s, bg))
    g2 = torch.autograd.grad((ref * w).sum(), (*texs, u, v, s, bg))
    for a, b in zip(g1, g2, strict=True):
        torch.testing.assert_close(a, b)


def test_gradcheck_composite_mip():
    atlas0, texs, shape, pix, slot, u, v, s, bg = _composite_args(torch.float64, mip=True)
    blend = torch.rand(9, dtype=torch.float64)
    l0 = torch.zeros(9, dtype=torch.long)
    l1 = torch.ones(9, dtype=torch.long)

    def f(t0, t1, u, v, s, bg):
        atlas = build_atlas([t0, t1], [True, False], mipmap=True)
        m0 = (
            atlas.offset[slot, l0],
            atlas.width[slot, l0],
            atlas.height[slot, l0],
            atlas.repeat[slot],
        )
        m1 = (
            atlas.offset[slot, l1],
            atlas.width[slot, l1],
            atlas.height[slot, l1],
            atlas.repeat[slot],
        )
        return composite(atlas.quad, u, v, s, blend, bg, pix, m0, m1, shape)

    args = [x.clone().requires_grad_() for x in (*texs, u, v, s, bg)]
    assert torch.autograd.gradcheck(f, args)


def test_deterministic_backward():
    atlas, texs, shape, pix, slot, u, v, s, bg = _composite_args(torch.float32)
    q = atlas.quad.clone().requires_grad_()
    meta = (atlas.offset[slot, 0], atlas.width[slot, 0], atlas.height[slot, 0], atlas.repeat[slot])
    grads = []
    for _ in range(2):
        img = composite(q, u, v, s, None, bg, pix, meta, None, shape)
        (g,) = torch.autograd.grad(img.square().sum(), q)
        grads.append(g)
    assert torch.equal(grads[0], grads[1])


def test_mip_levels_average():
    tex = torch.rand(3, 8, 4, dtype=torch.float64)
    levels = diffcam.textures.mip_levels(tex)
    assert [tuple(t.shape[1:]) for t in levels] == [(8, 4), (4, 2), (2, 1), (1, 1)]
    torch.testing.assert_close(levels[-1][:, 0, 0], tex.mean((1, 2)))


@pytest.mark.parametrize("wrap", ["repeat", "clamp"])
def test_sample_quad_matches_atlas_sample_and_its_gradients(wrap):
    """The soft path's quad-table sampler: the values of ``TextureAtlas.sample``, and its
    hand-written backward and forward-mode jvp against finite differences (float64)."""
    from torch.autograd import forward_ad

    from diffcam.renderer.sampling import sample_quad
    from diffcam.textures import build_atlas

    g = torch.Generator().manual_seed(0)
    tex = torch.rand(3, 5, 7, generator=g, dtype=torch.float64).requires_grad_()
    other = torch.rand(3, 4, 4, generator=g, dtype=torch.float64)
    u = (3.0 * torch.rand(40, generator=g, dtype=torch.float64) - 1.0).requires_grad_()
    v = (3.0 * torch.rand(40, generator=g, dtype=torch.float64) - 1.0).requires_grad_()

    def quad_sample(tex, u, v):
        atlas = build_atlas([other, tex], [True, wrap == "repeat"])
        meta = (atlas.offset[1, 0], atlas.width[1, 0], atlas.height[1, 0], atlas.repeat[1])
        return sample_quad(atlas.quad, u, v, *meta)

    atlas = build_atlas([other, tex], [True, wrap == "repeat"])
    slot = torch.ones(40, dtype=torch.long)
    torch.testing.assert_close(quad_sample(tex, u, v), atlas.sample(slot, u, v), rtol=0, atol=1e-15)
    assert torch.autograd.gradcheck(quad_sample, (tex, u, v))
    # forward mode: the jvp equals central differences along the same tangents
    t_tex, t_u, t_v = torch.rand_like(tex), torch.rand_like(u), torch.rand_like(v)
    with forward_ad.dual_level():
        duals = [forward_ad.make_dual(x.detach(), t) for x, t in ((tex, t_tex), (u, t_u), (v, t_v))]
        tangent = forward_ad.unpack_dual(quad_sample(*duals)).tangent
    eps = 1e-6
    with torch.no_grad():
        up = quad_sample(tex + eps * t_tex, u + eps * t_u, v + eps * t_v)
        down = quad_sample(tex - eps * t_tex, u - eps * t_u, v - eps * t_v)
    assert tangent.abs().max() > 0.1
    torch.testing.assert_close(tangent, (up - down) / (2 * eps), rtol=1e-6, atol=1e-6)
