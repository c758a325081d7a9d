"""Renderer: geometry against analytic references, gradients (float64), batching, soft edges."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import diffcam

from ._common import FACING_FRONT, axis_angle, front_camera, quadrant_texture, smooth_texture

F64 = torch.float64


def _t(x, dtype=F64):
    return torch.tensor(x, dtype=dtype)


def all_kinds_scene(dtype=F64, tex=None):
    tex = smooth_texture(8, dtype) if tex is None else tex
    prims = [
        diffcam.Primitive("box", [0.5, 0.4, 0.3], texture=tex),
        diffcam.Primitive("sphere", 0.3, texture=tex),
        diffcam.Primitive("capsule", [0.1, 0.5], texture=tex),
        diffcam.Primitive("cylinder", [0.2, 0.4], texture=tex),
        diffcam.Primitive("rectangle", [0.5, 0.5], texture=tex),
        diffcam.Primitive("plane", None, color=_t([0.2, 0.5, 0.3], dtype)),
    ]
    R = torch.eye(3, dtype=dtype).repeat(1, 6, 1, 1)
    R[0, 4] = _t(FACING_FRONT, dtype)
    p = _t([[-1, 0, 1], [-0.4, 0, 1], [0.2, 0, 1], [0.7, 0, 1], [1.2, 0.5, 1.2], [0, 0, 0]], dtype)
    cam = diffcam.PinholeCamera.look_at(
        _t([0.0, -3, 1], dtype),
        _t([0.0, 0, 1], dtype),
        _t([0.0, 0, 1], dtype),
        _t(40.0, dtype),
        32,
        24,
    )
    return cam, prims, R, p[None]


def test_smoke_all_kinds(dtype):
    cam, prims, R, p = all_kinds_scene(dtype)
    out = diffcam.render_buffers(cam, prims, R, p, lighting=diffcam.Lighting())
    assert out.image.shape == (1, 3, 24, 32) and out.image.dtype == dtype
    assert out.depth.shape == (1, 1, 24, 32) and out.object_id.shape == (1, 24, 32)
    assert set(out.object_id.unique().tolist()) == {-1, 0, 1, 2, 3, 4, 5}
    assert torch.isfinite(out.image).all() and out.image.min() >= 0 and out.image.max() <= 1
    assert (out.depth[0, 0][out.object_id[0] < 0] == 0).all()
    img = diffcam.render(cam, prims, R, p, edge_softness=0.7, supersample=2, mipmap=True)
    assert img.shape == (1, 3, 24, 32) and torch.isfinite(img).all()


def _analytic_sphere(cam, centre, r):
    """Per-pixel hit mask and camera-z depth of a sphere, computed in numpy from K and R."""
    K = cam.K[0].numpy()
    Rc = cam.rotation[0].numpy()
    tc = cam.translation[0].numpy()
    j, i = np.meshgrid(np.arange(cam.width) + 0.5, np.arange(cam.height) + 0.5)
    d_cam = np.linalg.solve(K, np.stack([j, i, np.ones_like(j)], -1).reshape(-1, 3).T).T
    d_hat = d_cam / np.linalg.norm(d_cam, axis=1, keepdims=True)
    oc = np.asarray(centre) - tc
    oc_cam = Rc.T @ oc
    b = d_hat @ oc_cam
    disc = b * b - (oc_cam @ oc_cam - r * r)
    hit = (disc >= 0) & (b > 0)
    t = b - np.sqrt(np.maximum(disc, 0))
    depth = t * d_hat[:, 2]
    # distance (pixels, approx.) of each pixel centre to the outline, for tie tolerance
    return hit.reshape(cam.height, cam.width), depth.reshape(cam.height, cam.width), disc


def test_sphere_outline_and_depth_analytic():
    """The rendered silhouette equals the analytic cone test at every pixel centre (well within
    one pixel) and depth equals the analytic ray-sphere distance (camera z)."""
    cam = diffcam.PinholeCamera.look_at(
        _t([0.3, -2.5, 1.2]), _t([0.1, 0.0, 0.9]), _t([0.0, 0, 1]), _t(45.0), 64, 48
    )
    centre, r = [0.25, 0.1, 0.8], 0.45
    prim = diffcam.Primitive("sphere", r, color=_t([1.0, 0, 0]))
    out = diffcam.render_buffers(
        cam, [prim], torch.eye(3, dtype=F64).view(1, 1, 3, 3), _t([[centre]]), edge_softness=0
    )
    hit, depth, disc = _analytic_sphere(cam, centre, r)
    got = out.object_id[0].numpy() == 0
    mismatch = got != hit
    assert mismatch.sum() == 0, mismatch.sum()
    np.testing.assert_allclose(out.depth[0, 0].numpy()[hit], depth[hit], atol=1e-10)
    assert 200 < hit.sum() < 64 * 48 - 200  # the outline crosses the image


def test_sphere_outline_supersampled_coverage():
    """With 4x4 supersampling the coverage of edge pixels is the fraction of samples inside."""
    cam = front_camera(width=24, height=20, fov=30.0)
    prim = diffcam.Primitive("sphere", 0.5, color=_t([1.0, 1.0, 1.0]))
    img = diffcam.render(
        cam,
        [prim],
        torch.eye(3, dtype=F64).view(1, 1, 3, 3),
        _t([[[0.05, 0.0, 0.02]]]),
        background=_t([0.0, 0.0, 0.0]),
        supersample=4,
        edge_softness=0,  # hard edges: each sample inside or out
    )
    hi = cam.scaled(4)
    hit, _, _ = _analytic_sphere(hi, [0.05, 0.0, 0.02], 0.5)
    cover = hit.reshape(20, 4, 24, 4).mean((1, 3))
    np.testing.assert_allclose(img[0, 0].numpy(), cover, atol=1e-12)


# ---------------------------------------------------------------------------- gradients
def _scene_small(kind, size, dtype=F64):
    cam = front_camera(width=6, height=5, fov=40.0, dtype=dtype)
    tex = smooth_texture(8, dtype)
    return cam, diffcam.Primitive(kind, size, texture=tex), tex


@pytest.mark.parametrize(
    "kind,size,base_rot",
    [
        ("rectangle", [1.6, 1.4], FACING_FRONT),
        ("box", [1.4, 0.5, 1.2], None),
        ("sphere", 0.9, None),
        ("cylinder", [0.8, 1.6], None),
        ("capsule", [0.7, 0.8], None),
        ("plane", None, FACING_FRONT),
    ],
)
def test_gradcheck_pose_textured(kind, size, base_rot):
    """Finite differences agree with the gradient of pixels w.r.t. position and rotation
    (axis-angle) of a textured primitive, hard edges, float64."""
    cam, prim, _ = _scene_small(kind, size)
    R0 = torch.eye(3, dtype=F64) if base_rot is None else _t(base_rot)

    def f(pos, w):
        R = (axis_angle(w) @ R0).view(1, 1, 3, 3)
        return diffcam.render(cam, [prim], R, pos.view(1, 1, 3), edge_softness=0)

    pos = _t([0.05, 0.1, -0.03]).requires_grad_()
    w = _t([0.1, -0.05, 0.15]).requires_grad_()
    assert torch.autograd.gradcheck(f, (pos, w), atol=1e-6)


@pytest.mark.parametrize(
    "kind,size,base_rot",
    [
        ("rectangle", [1.6, 1.4], FACING_FRONT),
        ("box", [1.4, 0.5, 1.2], None),
        ("sphere", 0.9, None),
        ("cylinder", [0.8, 1.6], None),
        ("capsule", [0.7, 0.8], None),
    ],
)
def test_gradcheck_soft_pose_textured_lit(kind, size, base_rot):
    """Soft edges (sigma = 1.5 px, the default path): finite differences agree with the
    gradient of pixels w.r.t. position and rotation (axis-angle) of a textured, lit primitive
    of every kind, float64."""
    cam, prim, _ = _scene_small(kind, size)
    R0 = torch.eye(3, dtype=F64) if base_rot is None else _t(base_rot)
    light = diffcam.Lighting(ambient=0.4, direction=_t([0.3, -1.0, 0.5]), intensity=0.6)

    def f(pos, w):
        R = (axis_angle(w) @ R0).view(1, 1, 3, 3)
        return diffcam.render(cam, [prim], R, pos.view(1, 1, 3), edge_softness=1.5, lighting=light)

    pos = _t([0.05, 0.1, -0.03]).requires_grad_()
    w = _t([0.1, -0.05, 0.15]).requires_grad_()
    R = (axis_angle(w) @ R0).view(1, 1, 3, 3).detach()
    cov = diffcam.render_buffers(cam, [prim], R, pos.detach().view(1, 1, 3), edge_softness=1.5)
    assert ((cov.coverage > 0.05) & (cov.coverage < 0.95)).any()  # the outline is in view
    assert torch.autograd.gradcheck(f, (pos, w), atol=1e-6)


@pytest.mark.parametrize("edges", [0, "antialias"])
def test_gradcheck_texture_and_colour_and_background(edges):
    cam, _, tex = _scene_small("rectangle", [1.0, 0.8])
    tex = smooth_texture(4, F64).requires_grad_()
    R = _t(FACING_FRONT).view(1, 1, 3, 3)
    pos = _t([[[0.1, 0.0, 0.05], [0.3, -0.5, 0.3]]])

    def f(tex, col, bg):
        prims = [
            diffcam.Primitive("rectangle", [1.0, 0.8], texture=tex),
            diffcam.Primitive("sphere", 0.15, color=col),
        ]
        return diffcam.render(
            cam, prims, R.expand(1, 2, 3, 3), pos, background=bg, edge_softness=edges
        )

    col = _t([0.2, 0.4, 0.6]).requires_grad_()
    bg = _t([0.9, 0.8, 0.7]).requires_grad_()
    assert torch.autograd.gradcheck(f, (tex, col, bg))


@pytest.mark.parametrize("edges", [0, "antialias"])
def test_gradcheck_intrinsics_and_camera_pose(edges):
    """Pixels w.r.t. fx, fy, cx, cy and the camera's eye position and look-at target."""
    tex = smooth_texture(8, F64)
    prims = [diffcam.Primitive("box", [1.2, 0.6, 1.0], texture=tex)]
    R = torch.eye(3, dtype=F64).view(1, 1, 3, 3)
    pos = _t([[[0.02, 0.0, 0.03]]])

    def f(fx, fy, cx, cy, eye, target):
        c = diffcam.PinholeCamera.look_at(eye, target, _t([0.0, 0, 1]), _t(40.0), 6, 5)
        c = diffcam.PinholeCamera(fx, fy, cx, cy, 6, 5, c.rotation, c.translation)
        return diffcam.render(c, prims, R, pos, edge_softness=edges)

    args = [_t(v).requires_grad_() for v in (7.1, 6.9, 3.05, 2.45)]
    args += [_t([0.05, -3.0, 0.1]).requires_grad_(), _t([0.0, 0.02, -0.01]).requires_grad_()]
    assert torch.autograd.gradcheck(f, args)


@pytest.mark.parametrize("edges", [0, "antialias"])
@pytest.mark.slow
def test_gradcheck_size(edges):
    """Pixels w.r.t. primitive sizes (per-batch sizes (B, k) too)."""
    cam = front_camera(width=6, height=5, fov=40.0)
    tex = smooth_texture(8, F64)
    R = torch.eye(3, dtype=F64).repeat(2, 2, 1, 1)
    pos = _t([[[0.0, 0.0, 0.0], [0.0, -1.0, 0.0]]]).expand(2, 2, 3)

    def f(box_size, radius):
        prims = [
            diffcam.Primitive("box", box_size, texture=tex),
            diffcam.Primitive("sphere", radius, texture=tex),
        ]
        return diffcam.render(cam, prims, R, pos, edge_softness=edges)

    box = _t([[1.5, 0.6, 1.3], [1.4, 0.7, 1.2]]).requires_grad_()
    rad = _t(0.3).requires_grad_()
    assert torch.autograd.gradcheck(f, (box, rad))


@pytest.mark.parametrize(
    "kind,size",
    [
        ("sphere", 0.5),
        ("box", [0.8, 0.6, 0.7]),
        ("capsule", [0.3, 0.6]),
        ("cylinder", [0.4, 0.6]),
        ("rectangle", [0.9, 0.8]),
    ],
)
def test_gradcheck_soft_edges_uniform_colour(kind, size):
    """A uniformly coloured object gets a position gradient from its outline when
    edge_softness > 0, and it matches finite differences."""
    cam = front_camera(width=6, height=5, fov=40.0)
    prim = diffcam.Primitive(kind, size, color=_t([0.9, 0.2, 0.1]))
    R0 = _t(FACING_FRONT) if kind == "rectangle" else torch.eye(3, dtype=F64)

    def f(pos):
        return diffcam.render(
            cam, [prim], R0.view(1, 1, 3, 3), pos.view(1, 1, 3), edge_softness=0.8
        )

    pos = _t([0.05, 0.0, 0.02]).requires_grad_()
    img = f(pos)
    (g,) = torch.autograd.grad(img.sum(), pos)
    assert g[0].abs() > 1e-3 or g[2].abs() > 1e-3  # an outline gradient exists
    assert torch.autograd.gradcheck(f, (pos,))
    # the hard render of a flat colour has no pose gradient
    hard = diffcam.render(cam, [prim], R0.view(1, 1, 3, 3), pos.view(1, 1, 3), edge_softness=0)
    (gh,) = torch.autograd.grad(hard.sum(), pos, allow_unused=True)
    assert gh is None or gh.abs().max() == 0


def test_soft_converges_to_hard():
    """edge_softness = 0 is exactly the hard render; a tiny sigma matches it away from edges."""
    cam, prims, R, p = all_kinds_scene()
    hard = diffcam.render_buffers(cam, prims, R, p, edge_softness=0.0)
    torch.testing.assert_close(
        diffcam.render(cam, prims, R, p, edge_softness=0), hard.image, rtol=0, atol=0
    )
    soft = diffcam.render(cam, prims, R, p, edge_softness=1e-3)
    diff = (soft - hard.image).abs().amax(1)[0]
    assert (diff > 1e-6).float().mean() < 0.02  # only a few edge pixels differ


# ---------------------------------------------------------------------------- robustness
def test_no_nan_grad_grazing_and_border():
    """Edge-on rectangle (camera in its plane), sphere tangent to a pixel ray, object exactly
    at the image border: all gradients finite, hard and soft."""
    cam = front_camera(width=8, height=6, fov=40.0)
    tex = smooth_texture(8, F64)
    prims = [
        diffcam.Primitive("rectangle", [0.5, 0.5], texture=tex),
        diffcam.Primitive("sphere", 0.3, texture=tex),
        diffcam.Primitive("capsule", [0.1, 0.4], texture=tex),
        diffcam.Primitive("box", [0.3, 0.3, 0.3], texture=tex),
        diffcam.Primitive("cylinder", [0.1, 0.3], texture=tex),
    ]
    o, d = cam.rays()
    # sphere tangent to the ray of pixel (1, 1): centre at distance r from it
    along = o[0, 1, 1] + 2.5 * d[0, 1, 1]
    perp = torch.linalg.cross(d[0, 1, 1], _t([0.0, 0, 1]))
    perp = perp / perp.norm()
    sph = along + 0.3 * perp
    # the box's left face exactly on the image's left border plane
    fx = cam.fx[0]
    left_x = -(cam.cx[0] / fx) * 3.0
    R = torch.eye(3, dtype=F64).repeat(1, 5, 1, 1)
    R[0, 0] = _t([[1.0, 0, 0], [0, 1, 0], [0, 0, 1]])  # rectangle normal +z: camera in its plane
    pos = torch.stack(
        [
            _t([0.0, 0.0, 0.0]) + _t([0, -1.0, 0.0]) * 0 + _t([0.0, 0.0, 0.0]),
            sph,
            _t([0.0, -0.5, 0.0]),  # capsule viewed side on
            _t([left_x + 0.15, 0.0, 0.3]),
            _t([0.5, -2.0, 0.0]),
        ]
    ).unsqueeze(0)
    pos[0, 0] = _t([0.0, 0.0, 0.0])  # rectangle in the z = 0 plane, camera at z = 0: edge-on
    pos = pos.clone().requires_grad_()
    w = torch.zeros(1, 5, 3, dtype=F64, requires_grad=True)
    for soft in (0.0, 0.5):
        img = diffcam.render(
            cam, prims, axis_angle(w) @ R, pos, edge_softness=soft, lighting=diffcam.Lighting()
        )
        gp, gw = torch.autograd.grad((img * torch.rand_like(img)).sum(), (pos, w))
        assert torch.isfinite(img).all() and torch.isfinite(gp).all() and torch.isfinite(gw).all()


@pytest.mark.parametrize("soft", [0.0, 0.6])
def test_batch_consistency(soft):
    """A batch of B renders equals B single renders (per-batch cameras, poses and sizes)."""
    g = torch.Generator().manual_seed(0)
    B = 3
    tex = smooth_texture(8, F64)
    eye = _t([0.0, -3.0, 1.0]) + 0.1 * torch.randn(B, 3, generator=g, dtype=F64)
    cam = diffcam.PinholeCamera.look_at(
        eye, _t([0.0, 0, 1]).expand(B, 3), _t([0.0, 0, 1]), _t(40.0), 16, 12
    )
    sizes = _t([[0.1, 0.5], [0.12, 0.6], [0.08, 0.4]])
    prims = [
        diffcam.Primitive("capsule", sizes, texture=tex),
        diffcam.Primitive("box", [0.4, 0.3, 0.2], color=_t([0.3, 0.3, 0.9])),
        diffcam.Primitive("plane", None, texture=tex),
    ]
    R = axis_angle(0.3 * torch.randn(B, 3, 3, generator=g, dtype=F64))
    p = _t([[0.0, 0, 1], [0.5, 0.2, 1.0], [0, 0, 0]]) + 0.1 * torch.randn(
        B, 3, 3, generator=g, dtype=F64
    )
    R[:, 2] = torch.eye(3, dtype=F64)
    out = diffcam.render_buffers(cam, prims, R, p, edge_softness=soft)
    for b in range(B):
        cb = diffcam.PinholeCamera(
            cam.fx, cam.fy, cam.cx, cam.cy, 16, 12, cam.rotation[b], cam.translation[b]
        )
        pb = [diffcam.Primitive("capsule", sizes[b], texture=tex), prims[1], prims[2]]
        ob = diffcam.render_buffers(cb, pb, R[b : b + 1], p[b : b + 1], edge_softness=soft)
        torch.testing.assert_close(ob.image[0], out.image[b])
        torch.testing.assert_close(ob.depth[0], out.depth[b])
        assert torch.equal(ob.object_id[0], out.object_id[b])


def test_float32_matches_float64():
    cam64, prims64, R64, p64 = all_kinds_scene(F64)
    tex32 = smooth_texture(8, F64).float()  # same texels (rand differs between dtypes)
    cam32, prims32, R32, p32 = all_kinds_scene(torch.float32, tex=tex32)
    o64 = diffcam.render_buffers(cam64, prims64, R64, p64)
    o32 = diffcam.render_buffers(cam32, prims32, R32, p32)
    same = o64.object_id == o32.object_id
    assert same.float().mean() > 0.99
    diff = (o64.image - o32.image.double()).abs().amax(1)
    assert diff[same].max() < 1e-3


def test_chunking_invariance():
    cam, prims, R, p = all_kinds_scene()
    a = diffcam.render_buffers(cam, prims, R, p, edge_softness=0)
    b = diffcam.render_buffers(cam, prims, R, p, max_chunk_elements=200, edge_softness=0)
    torch.testing.assert_close(a.image, b.image, rtol=0, atol=1e-12)
    assert torch.equal(a.object_id, b.object_id)
    s1 = diffcam.render(cam, prims, R, p, edge_softness=0.5)
    s2 = diffcam.render(cam, prims, R, p, edge_softness=0.5, max_chunk_elements=2000)
    torch.testing.assert_close(s1, s2)


def test_soft_recomputed_in_backward_gives_the_same_gradient(monkeypatch):
    """Soft edges past the memory bound recompute their samples in the backward (activation
    checkpointing): the same image and pose gradients as keeping them."""
    from diffcam.renderer import silhouettes

    cam, prims, R, p = all_kinds_scene()
    calls = []
    monkeypatch.setattr(silhouettes, "checkpoint", lambda *a, **k: calls.append(1) or
                        torch.utils.checkpoint.checkpoint(*a, **k))  # fmt: skip

    def image_and_grads(chunk):
        pos = p.clone().requires_grad_()
        img = diffcam.render(cam, prims, R, pos, edge_softness=0.7, max_chunk_elements=chunk)
        weights = torch.linspace(0, 1, img.numel(), dtype=img.dtype).view_as(img)
        (grad,) = torch.autograd.grad((img * weights).sum(), pos)
        return img, grad

    kept = image_and_grads(1 << 23)
    assert not calls
    recomputed = image_and_grads(64)
    assert calls  # the small bound did checkpoint
    for a, b in zip(kept, recomputed, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_supersample_is_box_filter():
    cam, prims, R, p = all_kinds_scene()
    img = diffcam.render(cam, prims, R, p, supersample=2)
    hi = diffcam.render(cam.scaled(2), prims, R, p)
    torch.testing.assert_close(img, torch.nn.functional.avg_pool2d(hi, 2))


def test_lighting_lambert():
    """A rectangle facing the camera lit from the camera direction: ambient + intensity; lit
    at 60 degrees: ambient + intensity / 2."""
    cam = front_camera(width=8, height=6, fov=30.0)
    prim = diffcam.Primitive("rectangle", [2.0, 2.0], color=_t([1.0, 0.5, 0.25]))
    R = _t(FACING_FRONT).view(1, 1, 3, 3)
    for direction, lam in [
        ([0.0, -1.0, 0.0], 1.0),
        ([0.0, -0.5, 0.75**0.5], 0.5),
        ([0, 1.0, 0], 0.0),
    ]:
        light = diffcam.Lighting(ambient=0.2, direction=direction, intensity=0.6)
        img = diffcam.render(cam, [prim], R, torch.zeros(1, 1, 3, dtype=F64), lighting=light)
        expect = _t([1.0, 0.5, 0.25]) * (0.2 + 0.6 * lam)
        torch.testing.assert_close(img[0, :, 3, 4], expect)


def test_background_texture_v_up():
    cam = front_camera(width=8, height=6)
    prim = diffcam.Primitive("sphere", 0.01, color=_t([0.0, 0.0, 0.0]))
    img = diffcam.render(
        cam,
        [prim],
        torch.eye(3, dtype=F64).view(1, 1, 3, 3),
        _t([[[0.0, 10.0, 0.0]]]),
        background=quadrant_texture(8),
    )[0]
    torch.testing.assert_close(img[:, 0, 0], _t([1.0, 0, 0]))  # top-left red
    torch.testing.assert_close(img[:, 5, 7], _t([1.0, 1.0, 0]))  # bottom-right yellow


def test_mipmap_reduces_aliasing():
    """A distant fine checkerboard averages to grey with mip-mapping; without, it aliases."""
    n = 256
    r, c = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    checker = ((r + c) % 2).to(F64).expand(3, n, n).contiguous()
    cam = front_camera(width=24, height=20, fov=30.0)
    prim = diffcam.Primitive("rectangle", [1.0, 1.0], texture=checker)
    R = _t(FACING_FRONT).view(1, 1, 3, 3)
    args = (cam, [prim], R, _t([[[0.0, 0.0, 0.0]]]))
    plain = diffcam.render_buffers(*args, edge_softness=0)
    mip = diffcam.render(*args, mipmap=True, edge_softness=0)
    inside = plain.object_id[0] == 0
    assert inside.sum() > 50
    assert (mip[0, 0][inside] - 0.5).abs().max() < 0.05
    assert (plain.image[0, 0][inside] - 0.5).abs().max() > 0.2


def test_input_errors():
    cam, prims, R, p = all_kinds_scene()
    with pytest.raises(ValueError, match="primitives"):
        diffcam.render(cam, prims[:2], R, p)
    with pytest.raises(ValueError, match="unknown kind"):
        diffcam.Primitive("cone", [1.0])
    with pytest.raises(ValueError, match="needs a size"):
        diffcam.Primitive("box", None)
    with pytest.raises(ValueError, match="texture must have shape"):
        diffcam.Primitive("box", [1.0, 1, 1], texture=torch.rand(4, 4))


@pytest.mark.parametrize("soft", [0.0, 0.8, "antialias"])
@pytest.mark.parametrize("supersample", [1, 2])
def test_coverage_is_what_the_background_shows_through(soft, supersample):
    """image(background b) = image(black) + (1 - coverage) * b for every kind: the coverage is
    the primitives' opacity, and over black the image is premultiplied colour."""
    cam, prims, R, p = all_kinds_scene()
    prims = prims[:5]  # the infinite plane would cover everything
    R, p = R[:, :5], p[:, :5]
    kw = {"edge_softness": soft, "supersample": supersample, "lighting": diffcam.Lighting()}
    black = diffcam.render_buffers(cam, prims, R, p, background=_t([0.0, 0.0, 0.0]), **kw)
    white = diffcam.render(cam, prims, R, p, background=_t([1.0, 1.0, 1.0]), **kw)
    torch.testing.assert_close(white, black.image + (1.0 - black.coverage).expand_as(white))
    assert float(black.coverage.min()) >= 0.0 and float(black.coverage.max()) <= 1.0 + 1e-12
    if soft == 0.0 and supersample == 1:
        torch.testing.assert_close(black.coverage[:, 0], (black.object_id >= 0).to(F64))


def test_gradcheck_soft_coverage_to_pose():
    """The soft coverage carries the silhouette's gradient to the pose (float64)."""
    cam, prim, _ = _scene_small("sphere", 0.3)
    rot = torch.eye(3, dtype=F64).view(1, 1, 3, 3)

    def coverage(pos):
        return diffcam.render_buffers(cam, [prim], rot, pos, edge_softness=1.0).coverage

    pos = _t([[[0.05, 0.0, 1.02]]]).requires_grad_(True)
    (grad,) = torch.autograd.grad(coverage(pos)[..., :3].sum(), pos)
    assert float(grad.abs().sum()) > 1e-3  # the left edge moves with x
    assert torch.autograd.gradcheck(coverage, (pos,), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("soft", ["antialias", 0.5, 2.0])
def test_soft_ids_and_depth_are_the_hard_winners(soft):
    """With soft edges, object_id and depth come from the soft samples: the same winners as
    the hard test (the nearest surface each ray meets), the same depths, and depth gradients."""
    cam, prims, R, p = all_kinds_scene()
    pos = p.clone().requires_grad_()
    hard = diffcam.render_buffers(cam, prims, R, pos, edge_softness=0)
    out = diffcam.render_buffers(cam, prims, R, pos, edge_softness=soft)
    assert torch.equal(out.object_id, hard.object_id)
    assert (hard.object_id >= 0).any() and (hard.object_id < 0).any()
    torch.testing.assert_close(out.depth, hard.depth, rtol=1e-12, atol=1e-12)
    weights = torch.rand_like(out.depth)
    (g_soft,) = torch.autograd.grad((out.depth * weights).sum(), pos)
    (g_hard,) = torch.autograd.grad((hard.depth * weights).sum(), pos)
    torch.testing.assert_close(g_soft, g_hard, rtol=1e-10, atol=1e-10)
