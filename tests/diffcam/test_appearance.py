"""Per-image appearance in one render call: lighting per image, a colour map per (image,
primitive) (``color_transform``) and background colours per image, each against the
independent reference of rendering every image on its own with that image's values baked
into the textures, the light and the background."""

from __future__ import annotations

import pytest
import torch

import diffcam

from .test_render import _t, all_kinds_scene

F64 = torch.float64
B = 2


def _mild_transforms(K: int, seed: int = 0, dtype=F64) -> torch.Tensor:
    """(B, K, 3, 4) colour maps near the identity that keep colours in [0.2, 0.8] inside
    [0, 1] (no clamping): a ±10 % mixing matrix and a ±0.05 offset."""
    g = torch.Generator().manual_seed(seed)
    lin = torch.eye(3, dtype=dtype) + 0.1 * (
        2 * torch.rand(B, K, 3, 3, generator=g, dtype=dtype) - 1
    )
    off = 0.05 * (2 * torch.rand(B, K, 3, 1, generator=g, dtype=dtype) - 1)
    return torch.cat([lin, off], -1)


def _mapped(colours: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Colours (3, ...) under one map m (3, 4), clamped to [0, 1]."""
    flat = colours.reshape(3, -1)
    return (m[:, :3] @ flat + m[:, 3:]).clamp(0, 1).reshape(colours.shape)


def _baked(prims, transform_b):
    """The primitives with image b's colour maps applied to their textures and colours."""
    out = []
    for k, p in enumerate(prims):
        m = transform_b[k]
        texture = None if p.texture is None else _mapped(p.texture, m)
        color = None if p.color is None else _mapped(torch.as_tensor(p.color, dtype=F64), m)
        out.append(diffcam.Primitive(p.kind, p.size, texture, color, p.uv_scale, p.wrap))
    return out


def _scene():
    cam, prims, R, p = all_kinds_scene(F64, tex=0.2 + 0.6 * all_kinds_scene()[1][0].texture)
    # two images, the second a little moved
    R, p = R.expand(B, -1, -1, -1).clone(), p.expand(B, -1, -1).clone()
    p[1] += torch.tensor([0.05, 0.0, -0.03], dtype=F64)
    return cam, prims, R, p


@pytest.mark.parametrize(("softness", "mipmap"), [(0.0, False), (0.0, True), (0.7, False)])
def test_consistency_color_transform_equals_textures_mapped_per_image(softness, mipmap):
    """Every primitive kind, hard and soft edges, lit: image b of one call with colour maps =
    a call for image b alone with the maps applied to the texels (bilinear sampling commutes
    with an affine map when nothing clamps)."""
    cam, prims, R, p = _scene()
    transform = _mild_transforms(len(prims))
    light = diffcam.Lighting()
    opts = dict(edge_softness=softness, mipmap=mipmap, lighting=light)
    out = diffcam.render_buffers(cam, prims, R, p, color_transform=transform, **opts)
    plain = diffcam.render(cam, prims, R, p, **opts)
    assert float((out.image - plain).abs().max()) > 1e-2  # the maps change the colours
    for b in range(B):
        ref = diffcam.render_buffers(
            cam, _baked(prims, transform[b]), R[b : b + 1], p[b : b + 1], **opts
        )
        torch.testing.assert_close(out.image[b : b + 1], ref.image, atol=1e-10, rtol=0)
        assert torch.equal(out.object_id[b : b + 1], ref.object_id)


@pytest.mark.parametrize("softness", [0.0, 0.7])
def test_convention_identity_map_is_the_plain_render(softness):
    cam, prims, R, p = _scene()
    identity = torch.eye(3, 4, dtype=F64).expand(1, len(prims), 3, 4)
    opts = dict(edge_softness=softness, lighting=diffcam.Lighting())
    torch.testing.assert_close(
        diffcam.render(cam, prims, R, p, color_transform=identity, **opts),
        diffcam.render(cam, prims, R, p, **opts),
        atol=1e-12,
        rtol=0,
    )


@pytest.mark.parametrize("softness", [0.0, 0.7])
def test_convention_mapped_colours_are_clamped(softness):
    """A map that quadruples every colour (all >= 0.2) and adds 0.5 saturates to white: over
    a black background, unlit, the image is the coverage in every channel."""
    cam, prims, R, p = _scene()
    bright = torch.cat([4 * torch.eye(3, dtype=F64), torch.full((3, 1), 0.5, dtype=F64)], -1)
    transform = bright.expand(1, len(prims), 3, 4)
    out = diffcam.render_buffers(
        cam, prims, R, p, color_transform=transform, background=_t([0.0, 0.0, 0.0]),
        edge_softness=softness,
    )  # fmt: skip
    assert float(out.coverage.max()) > 0.99
    torch.testing.assert_close(out.image, out.coverage.expand_as(out.image), atol=1e-12, rtol=0)


@pytest.mark.parametrize("softness", [0.0, 0.7])
def test_consistency_lighting_per_image_equals_one_light_per_call(softness):
    cam, prims, R, p = _scene()
    light = diffcam.Lighting(
        ambient=_t([0.2, 0.5]),
        direction=_t([[0.3, -0.5, 1.0], [-0.6, -0.4, 0.5]]),
        intensity=_t([0.8, 0.4]),
    )
    out = diffcam.render(cam, prims, R, p, lighting=light, edge_softness=softness)
    assert float((out[0] - out[1]).abs().max()) > 1e-2
    for b in range(B):
        one = diffcam.Lighting(light.ambient[b], light.direction[b], light.intensity[b])
        ref = diffcam.render(
            cam, prims, R[b : b + 1], p[b : b + 1], lighting=one, edge_softness=softness
        )
        torch.testing.assert_close(out[b : b + 1], ref, atol=1e-12, rtol=0)


def test_consistency_background_colour_per_image():
    cam, prims, R, p = _scene()
    colours = _t([[0.1, 0.2, 0.3], [0.9, 0.8, 0.7]])
    for softness in (0.0, 0.7):
        out = diffcam.render(cam, prims, R, p, background=colours, edge_softness=softness)
        for b in range(B):
            ref = diffcam.render(
                cam,
                prims,
                R[b : b + 1],
                p[b : b + 1],
                background=colours[b],
                edge_softness=softness,
            )
            torch.testing.assert_close(out[b : b + 1], ref, atol=1e-12, rtol=0)


def test_batch_of_one_light_and_map_is_broadcast_to_the_poses():
    """Per-image values of batch B with a camera and poses of batch 1: B images."""
    cam, prims, R, p = _scene()
    light = diffcam.Lighting(ambient=_t([0.2, 0.5]))
    out = diffcam.render(cam, prims, R[:1], p[:1], lighting=light)
    assert out.shape[0] == B and not torch.equal(out[0], out[1])
    transform = _mild_transforms(len(prims))
    assert diffcam.render(cam, prims, R[:1], p[:1], color_transform=transform).shape[0] == B


def _small():
    cam, prims, R, p = _scene()
    cam = diffcam.PinholeCamera(
        cam.fx / 4, cam.fy / 4, cam.cx / 4, cam.cy / 4, 8, 6, cam.rotation, cam.translation
    )
    return cam, prims[:2], R[:, :2], p[:, :2]


@pytest.mark.parametrize("softness", [0.0, 0.7])
@pytest.mark.slow
def test_gradcheck_color_transform_and_lighting_per_image(softness):
    cam, prims, R, p = _small()
    transform = _mild_transforms(2).requires_grad_()
    ambient = _t([0.3, 0.4]).requires_grad_()
    direction = _t([[0.3, -0.5, 1.0], [-0.6, -0.4, 0.5]]).requires_grad_()
    intensity = _t([0.6, 0.5]).requires_grad_()

    def f(transform, ambient, direction, intensity):
        light = diffcam.Lighting(ambient, direction, intensity)
        return diffcam.render(
            cam, prims, R, p, lighting=light, color_transform=transform, edge_softness=softness
        )

    assert torch.autograd.gradcheck(f, (transform, ambient, direction, intensity), atol=1e-7)


def test_no_nan_gradients_when_colours_clamp(dtype):
    cam, prims, R, p = all_kinds_scene(dtype)
    transform = torch.cat([3 * torch.eye(3, dtype=dtype), -torch.ones(3, 1, dtype=dtype)], -1)
    transform = transform.expand(1, len(prims), 3, 4).clone().requires_grad_()
    pos = p.clone().requires_grad_()
    img = diffcam.render(cam, prims, R, pos, color_transform=transform, edge_softness=0.5)
    gt, gp = torch.autograd.grad(img.square().sum(), (transform, pos))
    assert torch.isfinite(gt).all() and torch.isfinite(gp).all() and gt.abs().sum() > 0


def test_bad_shapes_are_explained():
    cam, prims, R, p = _scene()
    with pytest.raises(ValueError, match=r"color_transform must have shape \(B\|1, K, 3, 4\)"):
        diffcam.render(
            cam, prims, R, p, color_transform=torch.zeros(B, len(prims), 3, 3, dtype=F64)
        )
    with pytest.raises(ValueError, match="color_transform must be a"):
        diffcam.render(cam, prims, R, p, color_transform=[[1.0]])
    with pytest.raises(ValueError, match=r"Lighting.direction must be \(3,\) or \(B, 3\)"):
        diffcam.render(cam, prims, R, p, lighting=diffcam.Lighting(direction=torch.zeros(2, 2)))
    with pytest.raises(ValueError, match="disagree on the batch"):
        diffcam.render(
            cam, prims, R, p,
            lighting=diffcam.Lighting(ambient=torch.ones(2), intensity=torch.ones(3)),
        )  # fmt: skip
    with pytest.raises(ValueError, match=r"one colour per image must have shape \(B\|1, 3\)"):
        diffcam.render(cam, prims, R, p, background=torch.zeros(3, 3, dtype=F64))


def test_scene_draws_per_image_values_over_its_static_layer_and_in_stacks():
    """``Scene.render`` splits a colour map between the static layer and the moving bodies,
    and ``Scene.render_states`` repeats per-image values for every frame of a stack: both
    equal the full render of each frame with the same values."""
    scene = diffcam.load_scene(
        "pendulum_cart",
        batch_size=B,
        overrides={"camera.resolution": [72, 24]},
        dtype=F64,
    )
    state = scene.initial_state()
    transform = _mild_transforms(len(scene.primitives), seed=3)
    light = diffcam.Lighting(
        _t([0.4, 0.6]), _t([[0.4, -1.0, 1.5], [-0.4, -1.0, 1.0]]), _t([0.5, 0.3])
    )
    kw = dict(lighting=light, color_transform=transform)
    full = scene.render(state, static_cache=False, **kw)
    torch.testing.assert_close(scene.render(state, **kw), full, atol=1e-12, rtol=0)
    assert float((full - scene.render(state)).abs().max()) > 1e-2
    states = state.__class__(*(torch.stack([x, x]) for x in state.tensors()))  # 2 frames
    stack = scene.render_states(states, **kw).image
    assert stack.shape == (2, B, 3, 24, 72)
    torch.testing.assert_close(stack[1], full, atol=1e-12, rtol=0)
