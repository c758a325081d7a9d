"""The "dense" backend (the code torch.compile fuses) equals the default eager path, values
and gradients, for planar-only scenes (hand-written backward) and mixed scenes (autograd)."""

from __future__ import annotations

import pytest
import torch

import diffcam

from ._common import FACING_FRONT, front_camera, smooth_texture

F64 = torch.float64


def _planar(tex, bg, sizes):
    cam = front_camera(width=12, height=10, fov=40.0)
    prims = [
        diffcam.Primitive("rectangle", sizes, texture=tex),
        diffcam.Primitive("plane", None, texture=tex, uv_scale=(2.0, 1.0)),
        diffcam.Primitive(
            "rectangle", [0.4, 0.4], color=torch.tensor([0.1, 0.2, 0.3], dtype=F64), wrap="clamp"
        ),
    ]
    R = torch.tensor(FACING_FRONT, dtype=F64).expand(3, 3, 3, 3).clone()
    R[:, 1] = torch.eye(3, dtype=F64)
    return cam, prims, R, bg


def _mixed(tex, bg, sizes):
    cam = front_camera(width=12, height=10, fov=40.0)
    prims = [
        diffcam.Primitive("rectangle", sizes, texture=tex),
        diffcam.Primitive("sphere", 0.3, texture=tex),
        diffcam.Primitive("box", [0.3, 0.3, 0.3], color=torch.tensor([0.1, 0.2, 0.3], dtype=F64)),
    ]
    R = torch.tensor(FACING_FRONT, dtype=F64).expand(3, 3, 3, 3).clone()
    R[:, 1:] = torch.eye(3, dtype=F64)
    return cam, prims, R, bg


@pytest.mark.parametrize("make", [_planar, _mixed])
@pytest.mark.parametrize("lit", [False, True])
def test_dense_equals_eager(make, lit):
    tex = smooth_texture(8).requires_grad_()
    bg = torch.tensor([0.9, 0.8, 0.7], dtype=F64, requires_grad=True)
    sizes = torch.tensor([1.0, 0.8], dtype=F64, requires_grad=True)
    g = torch.Generator().manual_seed(1)
    pos = torch.tensor([[0.1, 0, 0.05], [0.0, 0.0, -0.3], [0.2, -0.5, 0.1]], dtype=F64)
    pos = (pos + 0.05 * torch.randn(3, 3, 3, generator=g, dtype=F64)).requires_grad_()
    light = diffcam.Lighting() if lit else None
    outs = []
    for backend, chunk in (("eager", 1 << 23), ("dense", 1 << 23), ("dense", 300)):
        cam, prims, R, bgc = make(tex, bg, sizes)
        o = diffcam.render_buffers(
            cam,
            prims,
            R,
            pos,
            background=bgc,
            lighting=light,
            backend=backend,
            max_chunk_elements=chunk,
        )
        w = torch.linspace(0, 1, o.image.numel(), dtype=F64).view_as(o.image)
        grads = torch.autograd.grad((o.image * w).sum() + o.depth.sum(), (tex, bg, sizes, pos))
        outs.append((o, grads))
    (a, ga) = outs[0]
    for b, gb in outs[1:]:
        torch.testing.assert_close(a.image, b.image, rtol=0, atol=1e-12)
        torch.testing.assert_close(a.depth, b.depth, rtol=0, atol=1e-12)
        assert torch.equal(a.object_id, b.object_id)
        for x, y in zip(ga, gb, strict=True):
            torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-9)


def test_gradcheck_dense_planar():
    tex = smooth_texture(4).requires_grad_()
    bg = torch.tensor([0.9, 0.8, 0.7], dtype=F64, requires_grad=True)
    pos = torch.tensor([[[0.1, 0, 0.05], [0.0, 0.0, -0.3], [0.2, -0.5, 0.1]]], dtype=F64)
    pos = pos.expand(3, 3, 3).clone().requires_grad_()

    def f(tex, bg, pos):
        cam, prims, R, bgc = _planar(tex, bg, [1.0, 0.8])
        return diffcam.render(cam, prims, R, pos, background=bgc, backend="dense")

    assert torch.autograd.gradcheck(f, (tex, bg, pos))


def test_bad_backend():
    cam, prims, R, bg = _planar(smooth_texture(4), torch.zeros(3, dtype=F64), [1.0, 0.8])
    with pytest.raises(ValueError, match="backend"):
        diffcam.render(cam, prims, R, torch.zeros(3, 3, 3, dtype=F64), backend="fast")


@pytest.mark.parametrize("lit", [False, True])
def test_compiled_planar_equals_dense(lit):
    """backend="compile" (Inductor: the fused forward, the staged backward with its texel
    scatter on blocks of images in threads) gives the dense backend's image and gradients in float32."""
    f32 = torch.float32
    tex = smooth_texture(8).to(f32).requires_grad_()
    bg = torch.tensor([0.9, 0.8, 0.7], requires_grad=True)
    g = torch.Generator().manual_seed(2)
    pos = torch.tensor([[0.1, 0, 0.05], [0.0, 0.0, -0.3], [0.2, -0.5, 0.1]])
    pos = (pos + 0.05 * torch.randn(2, 3, 3, generator=g)).requires_grad_()
    R = torch.tensor(FACING_FRONT, dtype=f32).expand(2, 3, 3, 3).clone()
    R[:, 1] = torch.eye(3)
    light = diffcam.Lighting() if lit else None
    (a, ga), (b, gb) = (_render_f32(tex, bg, pos, R, light, backend) for backend in BOTH)
    assert torch.equal(a.object_id, b.object_id)
    torch.testing.assert_close(a.image, b.image, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(a.depth, b.depth, rtol=1e-5, atol=1e-5)
    for x, y in zip(ga, gb, strict=True):
        assert x.abs().sum() > 0
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4)


BOTH = ("dense", "compile")


def _render_f32(tex, bg, pos, R, light, backend, loss="both"):
    """Buffers and gradients (texture, background, positions) of a 3-primitive planar scene,
    for a loss on the image, the depth or both."""
    f32 = torch.float32
    prims = [
        diffcam.Primitive("rectangle", [1.0, 0.8], texture=tex),
        diffcam.Primitive("plane", None, texture=tex, uv_scale=(2.0, 1.0)),
        diffcam.Primitive("rectangle", [0.4, 0.4], color=torch.tensor([0.1, 0.2, 0.3])),
    ]
    cam = front_camera(width=12, height=10, fov=40.0, dtype=f32)
    o = diffcam.render_buffers(cam, prims, R, pos, background=bg, lighting=light, backend=backend)
    w = torch.linspace(0, 1, o.image.numel()).view_as(o.image)
    value = {"image": (o.image * w).sum(), "depth": o.depth.sum()}
    value["both"] = value["image"] + value["depth"]
    grads = torch.autograd.grad(value[loss], (tex, bg, pos), allow_unused=True)
    return o, tuple(
        torch.zeros_like(x) if g is None else g for x, g in zip((tex, bg, pos), grads, strict=True)
    )


def test_compiled_planar_nan_pose():
    """A NaN or infinite pose (a diverged simulation) renders as a miss with finite gradients,
    as in the dense backend; the compiled backend reads and scatters texels without bounds
    checks, so its texel indices must stay in range."""
    f32 = torch.float32
    tex = smooth_texture(8).to(f32).requires_grad_()
    bg = torch.tensor([0.9, 0.8, 0.7], requires_grad=True)
    pos = torch.tensor([[0.1, 0, 0.05], [0.0, 0.0, -0.3], [0.2, -0.5, 0.1]]).repeat(2, 1, 1)
    pos[0, 0] = float("nan")
    pos[1, 1, 2] = float("inf")
    pos.requires_grad_()
    R = torch.tensor(FACING_FRONT, dtype=f32).expand(2, 3, 3, 3).clone()
    R[:, 1] = torch.eye(3)
    (a, ga), (b, gb) = (_render_f32(tex, bg, pos, R, None, backend) for backend in BOTH)
    assert torch.equal(a.object_id, b.object_id)
    assert not (b.object_id[0] == 0).any() and not (b.object_id[1] == 1).any()
    assert (b.object_id >= 0).any()
    torch.testing.assert_close(a.image, b.image, rtol=1e-5, atol=1e-5)
    for x, y in zip(ga, gb, strict=True):
        assert torch.isfinite(y).all()
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4)


def test_scatter_in_threads_equals_one_scatter():
    """The texel scatter split over blocks of images (one per thread, uneven blocks) sums to
    the single scatter."""
    import importlib

    render_module = importlib.import_module("diffcam.render.scatter")
    g = torch.Generator().manual_seed(0)
    B, P, n_texels = 5, 40, 30
    idx = [torch.randint(0, n_texels, (B, P), generator=g, dtype=torch.int32) for _ in range(4)]
    ax, ay = torch.rand(B, P, generator=g), torch.rand(B, P, generator=g)
    gc = torch.randn(B, 3, P, generator=g)
    scatter = render_module._scatter_texels
    one = scatter(idx, ax, ay, gc, n_texels)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        split = render_module._scatter_in_threads(scatter, idx, ax, ay, gc, n_texels)
    finally:
        torch.set_num_threads(threads)
    assert one.abs().sum() > 0
    torch.testing.assert_close(split, one, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("loss", ["image", "depth"])
def test_compiled_planar_one_output(loss):
    """A loss on the image alone or the depth alone (the other output's gradient is None in
    the hand-written backward) gives the dense backend's gradients."""
    f32 = torch.float32
    tex = smooth_texture(8).to(f32).requires_grad_()
    bg = torch.tensor([0.9, 0.8, 0.7], requires_grad=True)
    pos = torch.tensor([[0.1, 0, 0.05], [0.0, 0.0, -0.3], [0.2, -0.5, 0.1]]).repeat(2, 1, 1)
    pos.requires_grad_()
    R = torch.tensor(FACING_FRONT, dtype=f32).expand(2, 3, 3, 3).clone()
    R[:, 1] = torch.eye(3)
    (_, ga), (_, gb) = (_render_f32(tex, bg, pos, R, None, b, loss) for b in BOTH)
    assert gb[2].abs().sum() > 0
    for x, y in zip(ga, gb, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-4)
