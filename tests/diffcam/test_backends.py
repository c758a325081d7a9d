"""The fast path (backend="compile": the compiled planar render with its hand-written
backward) against the reference path (backend="eager"): values and gradients agree on every
option the fast path supports; every other scene given "compile" renders through the
reference path, with the same results."""

from __future__ import annotations

import pytest
import torch

import diffcam
from diffcam.renderer import api as render_api

from ._common import FACING_FRONT, axis_angle, front_camera, smooth_texture

# the fast path is torch.compile'd (the fallback cases compile nothing but share its fixtures)
pytestmark = pytest.mark.compile

F64 = torch.float64
B, H, W = 3, 10, 12


def _planar(tex):
    """Textures with repeat and clamp wrap (the same texture twice; the clamped one's
    uv_scale > 1 so that clamping holds the coordinate on part of it) and a plain colour."""
    dtype = tex.dtype
    sizes = torch.tensor([1.0, 0.8], dtype=dtype, requires_grad=True)
    prims = [
        diffcam.Primitive("rectangle", sizes, texture=tex),
        diffcam.Primitive("plane", None, texture=tex, uv_scale=(2.0, 1.0)),
        diffcam.Primitive("rectangle", [0.5, 0.4], texture=tex, wrap="clamp", uv_scale=(1.5, 1.3)),
        diffcam.Primitive(
            "rectangle", [0.3, 0.3], color=torch.tensor([0.1, 0.2, 0.3], dtype=dtype)
        ),
    ]
    pos = torch.tensor([[0.1, 0, 0.05], [0, 0, -0.3], [0.2, -0.5, 0.1], [-0.4, -0.7, -0.2]])
    base = torch.tensor(FACING_FRONT).expand(len(prims), 3, 3).clone()
    base[1] = torch.eye(3)
    return prims, sizes, base.to(dtype), pos.to(dtype)


def _poses(base, pos0, seed=1):
    """Perturbed poses (B, K, ...) and their leaves (axis-angle w, positions)."""
    g = torch.Generator().manual_seed(seed)
    dtype = base.dtype
    w = (0.1 * torch.randn(B, len(base), 3, generator=g, dtype=dtype)).requires_grad_()
    pos = (pos0 + 0.05 * torch.randn(B, len(base), 3, generator=g, dtype=dtype)).requires_grad_()
    return base @ axis_angle(w), pos, w


def _layer(dtype):
    """A pre-rendered layer (image, depth) with an empty part, both differentiable."""
    g = torch.Generator().manual_seed(3)
    image = torch.rand(1, 3, H, W, generator=g, dtype=dtype)
    depth = 2.5 + torch.rand(1, 1, H, W, generator=g, dtype=dtype)
    depth[..., :, : W // 3] = 0.0  # nothing there
    return image.requires_grad_(), depth.requires_grad_()


def _run(backend, opts, dtype=F64, loss="both", seed=1):
    """Buffers and gradients (texture, background, size, rotation, position, camera fov and
    eye, layer depth) of the planar scene with options ``opts``."""
    tex = smooth_texture(8, dtype=dtype).requires_grad_()
    prims, sizes, base, pos0 = _planar(tex)
    rot, pos, w = _poses(base, pos0, seed)
    fov = torch.tensor(40.0, dtype=dtype, requires_grad=True)
    eye = torch.tensor([0.0, -3.0, 0.0], dtype=dtype, requires_grad=True)
    cam = diffcam.PinholeCamera.look_at(
        eye, torch.zeros(3, dtype=dtype), torch.tensor([0.0, 0.0, 1.0], dtype=dtype), fov, W, H
    )
    # hard edges unless ``opts`` says otherwise: the fast path's (not the default)
    kw = {"edge_softness": 0, **{k: v for k, v in opts.items() if k != "layer"}}
    bg = torch.tensor([0.9, 0.8, 0.7], dtype=dtype, requires_grad=True)
    depth = torch.zeros((), dtype=dtype, requires_grad=True)  # no layer: no gradient
    if opts.get("layer"):
        bg, depth = _layer(dtype)
        kw["background_depth"] = depth
    o = diffcam.render_buffers(cam, prims, rot, pos, background=bg, backend=backend, **kw)
    weights = torch.linspace(0, 1, o.image.numel(), dtype=dtype).view_as(o.image)
    value = {"image": (o.image * weights).sum(), "depth": o.depth.sum()}
    value["both"] = value["image"] + value["depth"]
    leaves = (tex, bg, sizes, w, pos, fov, eye, depth)
    grads = torch.autograd.grad(value[loss], leaves, allow_unused=True)
    return o, tuple(
        torch.zeros_like(x) if g is None else g for x, g in zip(leaves, grads, strict=True)
    )


@pytest.fixture
def fast_calls(monkeypatch):
    """How many renders took the fast path."""
    calls = []
    fast = render_api._render_fast

    def spy(*args):
        calls.append(1)
        return fast(*args)

    monkeypatch.setattr(render_api, "_render_fast", spy)
    return calls


OPTIONS = {
    "unlit": {},
    "lit": {"lighting": diffcam.Lighting()},
    "layer": {"layer": True},
    "lit-layer-chunked": {"lighting": diffcam.Lighting(), "layer": True, "max_chunk_elements": 300},
}


@pytest.mark.parametrize("opts", OPTIONS.values(), ids=OPTIONS.keys())
def test_fast_path_agrees_with_reference(opts, fast_calls):
    """Values (image, depth, ids, coverage) and gradients to the texture (repeat and clamp),
    the background (colour or layer image), a rectangle's size, the poses, the camera's
    field of view and position and the layer's depth, for B = 3 images."""
    ref, g_ref = _run("eager", opts)
    assert not fast_calls
    fast, g_fast = _run("compile", opts)
    assert len(fast_calls) == 1
    assert torch.equal(ref.object_id, fast.object_id)
    for k in range(4):  # every primitive shows, and (with a layer) the layer too
        assert (ref.object_id == k).any()
    shows = ref.object_id == -1
    assert shows.any() and ((ref.depth[:, 0] > 0) & shows).any() == ("layer" in opts)
    for a, b in zip(ref, fast, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-12)
    names = ("texture", "background", "size", "rotation", "position", "fov", "eye", "depth")
    for name, a, b in zip(names, g_ref, g_fast, strict=True):
        if name != "depth" or "layer" in opts:
            assert a.abs().sum() > 0, name
        torch.testing.assert_close(b, a, rtol=1e-9, atol=1e-9, msg=name)


@pytest.mark.parametrize("loss", ["image", "depth"])
def test_fast_path_one_output(loss):
    """A loss on the image alone or the depth alone (the other output's gradient is None in
    the hand-written backward) gives the reference path's gradients."""
    (_, ga), (_, gb) = (_run(b, {}, loss=loss) for b in ("eager", "compile"))
    assert gb[4].abs().sum() > 0
    for x, y in zip(ga, gb, strict=True):
        torch.testing.assert_close(y, x, rtol=1e-9, atol=1e-9)


def test_fast_path_float32():
    """float32 (what the benchmarks run): the reference path's values and gradients to
    float32 precision."""
    (a, ga), (b, gb) = (_run(bk, {}, dtype=torch.float32) for bk in ("eager", "compile"))
    mismatch = (a.object_id != b.object_id).float().mean()
    assert mismatch < 0.01  # an edge pixel may flip between two float32 evaluations
    same = (a.object_id == b.object_id).unsqueeze(1).expand_as(a.image)
    torch.testing.assert_close(b.image[same], a.image[same], rtol=1e-5, atol=1e-5)
    if mismatch == 0:
        for x, y in zip(ga, gb, strict=True):
            torch.testing.assert_close(y, x, rtol=1e-3, atol=1e-3)


def test_fast_path_nan_pose():
    """A NaN or infinite pose (a diverged simulation) renders as a miss with finite
    gradients, as in the reference path; the compiled path reads and scatters texels without
    bounds checks, so its texel indices must stay in range."""
    tex = smooth_texture(8).requires_grad_()
    bg = torch.tensor([0.9, 0.8, 0.7], dtype=F64, requires_grad=True)
    prims, _, base, pos0 = _planar(tex)
    rot = base.expand(B, -1, -1, -1)
    pos = pos0.repeat(B, 1, 1)
    pos[0, 0] = float("nan")
    pos[1, 1, 2] = float("inf")
    pos.requires_grad_()
    cam = front_camera(W, H)
    outs = []
    for backend in ("eager", "compile"):
        o = diffcam.render_buffers(
            cam, prims, rot, pos, background=bg, backend=backend, edge_softness=0
        )
        grads = torch.autograd.grad(o.image.sum() + o.depth.sum(), (tex, bg, pos))
        outs.append((o, grads))
    (a, ga), (b, gb) = outs
    assert torch.equal(a.object_id, b.object_id)
    assert not (b.object_id[0] == 0).any() and not (b.object_id[1] == 1).any()
    assert (b.object_id >= 0).any()
    torch.testing.assert_close(b.image, a.image, rtol=0, atol=1e-12)
    for x, y in zip(ga, gb, strict=True):
        assert torch.isfinite(y).all()
        torch.testing.assert_close(y, x, rtol=1e-9, atol=1e-9, equal_nan=True)


KINDS = {
    "sphere": 0.3,
    "box": [0.3, 0.3, 0.3],
    "capsule": [0.15, 0.5],
    "cylinder": [0.2, 0.4],
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("lit", [False, True])
def test_compile_falls_back_for_other_kinds(kind, lit, fast_calls):
    """A scene with a primitive of any non-planar kind, given backend="compile", renders
    through the reference path: exactly the eager values and gradients."""
    tex = smooth_texture(8).requires_grad_()
    bg = torch.tensor([0.9, 0.8, 0.7], dtype=F64, requires_grad=True)
    size = torch.tensor(KINDS[kind], dtype=F64, requires_grad=True)
    prims = [
        diffcam.Primitive("rectangle", [1.0, 0.8], texture=tex),
        diffcam.Primitive(kind, size, texture=tex, wrap="clamp"),
        diffcam.Primitive("plane", None, texture=tex, uv_scale=(2.0, 1.0)),
    ]
    base = torch.tensor(FACING_FRONT, dtype=F64).expand(3, 3, 3).clone()
    base[1:] = torch.eye(3, dtype=F64)
    pos0 = torch.tensor([[0.3, 0.2, 0.2], [-0.2, -0.3, 0.1], [0.0, 0.0, -0.3]], dtype=F64)
    light = diffcam.Lighting() if lit else None
    outs = []
    for backend in ("eager", "compile"):
        rot, pos, w = _poses(base, pos0)
        o = diffcam.render_buffers(
            front_camera(W, H), prims, rot, pos, background=bg, lighting=light, backend=backend,
            edge_softness=0,
        )  # fmt: skip
        weights = torch.linspace(0, 1, o.image.numel(), dtype=F64).view_as(o.image)
        loss = (o.image * weights).sum() + o.depth.sum()
        outs.append((o, torch.autograd.grad(loss, (tex, bg, size, w, pos))))
    assert not fast_calls
    (a, ga), (b, gb) = outs
    assert (a.object_id == 1).any()
    for x, y in zip(a + ga, b + gb, strict=True):
        torch.testing.assert_close(y, x, rtol=0, atol=0)


@pytest.mark.parametrize(
    "kw",
    [{"mipmap": True}, {"edge_softness": 0.7}, {"edge_softness": "antialias"}],
    ids=["mip", "soft", "antialias"],
)
def test_compile_falls_back_for_other_options(kw, fast_calls):
    """Options the fast path does not support (mip-mapping, soft edges, antialiased edges:
    the default) take the reference path on planar scenes too."""
    outs = [_run(backend, kw) for backend in ("eager", "compile")]
    assert not fast_calls
    (a, ga), (b, gb) = outs
    for x, y in zip(a + ga, b + gb, strict=True):
        torch.testing.assert_close(y, x, rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["dense", "fast", "Eager"])
def test_bad_backend(backend):
    prims, _, base, pos = _planar(smooth_texture(4))
    with pytest.raises(ValueError, match="'eager' or 'compile'"):
        diffcam.render(
            front_camera(W, H), prims, base.unsqueeze(0), pos.unsqueeze(0), backend=backend
        )


def test_scatter_in_threads_equals_one_scatter():
    """The texel scatter split over blocks of images (one per thread, uneven blocks) sums to
    the single scatter."""
    from diffcam.renderer import scatter as render_module

    g = torch.Generator().manual_seed(0)
    B, P, n_texels = 5, 40, 30
    idx = [torch.randint(0, n_texels, (B, P), generator=g, dtype=torch.int32) for _ in range(4)]
    ax, ay = torch.rand(B, P, generator=g), torch.rand(B, P, generator=g)
    gc = torch.randn(B, 3, P, generator=g)
    scatter = render_module.scatter_texels
    one = scatter(idx, ax, ay, gc, n_texels)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        split = render_module.scatter_in_threads(scatter, idx, ax, ay, gc, n_texels)
    finally:
        torch.set_num_threads(threads)
    assert one.abs().sum() > 0
    torch.testing.assert_close(split, one, rtol=1e-5, atol=1e-5)
