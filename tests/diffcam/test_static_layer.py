"""Pre-rendered layers (``background`` image + ``background_depth``) and the Scene's cached
static layer: same pixels, depth, ids and gradients as rendering everything at once."""

from __future__ import annotations

import pytest
import torch

import diffcam
from diffcam.scene import SCENES_DIR, TEXTURES_DIR, load_texture

from ._common import FACING_FRONT, front_camera, smooth_texture

F64 = torch.float64


# ---------------------------------------------------------------------------- renderer level
def _scenery(kind):
    """(static primitives, their poses (1, S, ...), moving primitives, their poses (2, M, ...)).

    A textured backdrop and a box in front of it are static; the moving primitives pass in
    front of the backdrop and behind the box. ``kind`` "planar" makes the moving ones
    rectangles and a plane (the compiled fast path, over a layer drawn by the reference path),
    "mixed" a sphere and a box (which "compile" renders through the reference path).
    """
    tex = smooth_texture(8)
    front = torch.tensor(FACING_FRONT, dtype=F64)
    static = [
        diffcam.Primitive("rectangle", [3.0, 2.5], texture=tex, uv_scale=(2.0, 1.0)),
        diffcam.Primitive("box", [0.25, 0.2, 1.0], color=torch.tensor([0.2, 0.3, 0.4], dtype=F64)),
    ]
    s_rot = torch.stack([front, torch.eye(3, dtype=F64)]).unsqueeze(0)
    s_pos = torch.tensor([[[0.0, 1.0, 0.0], [0.0, -0.6, 0.0]]], dtype=F64)
    if kind == "planar":
        moving = [
            diffcam.Primitive("rectangle", [0.7, 0.5], texture=tex.flip(2)),
            diffcam.Primitive("plane", [0.4, 0.4], texture=tex, wrap="clamp"),
        ]
        m_rot = front.expand(2, 2, 3, 3).clone()
    else:
        moving = [
            diffcam.Primitive("sphere", 0.3, texture=tex),
            diffcam.Primitive("box", [0.5, 0.3, 0.4], texture=tex.flip(1)),
        ]
        m_rot = torch.eye(3, dtype=F64).expand(2, 2, 3, 3).clone()
    # batch element 0: both moving primitives partly behind the static box; 1: clear of it
    m_pos = torch.tensor(
        [[[0.1, 0.2, 0.2], [-0.2, 0.4, -0.3]], [[0.7, 0.2, 0.1], [-0.8, -0.2, -0.2]]], dtype=F64
    )
    return static, s_rot, s_pos, moving, m_rot, m_pos


def _layer_then_moving(cam, static, s_rot, s_pos, moving, m_rot, m_pos, **kw):
    """Render the static layer at the sampling resolution, then the moving primitives over it;
    returns (full-scene-numbered RenderBuffers, the layer's buffers)."""
    s = kw.get("supersample", 1)
    softness = kw.get("edge_softness", diffcam.DEFAULT_EDGE_SOFTNESS)
    softness = softness if isinstance(softness, str) else softness * s  # sigma in samples
    layer_kw = {**kw, "supersample": 1, "edge_softness": softness}
    cam_s = cam.scaled(s) if s > 1 else cam
    layer = diffcam.render_buffers(cam_s, static, s_rot, s_pos, **layer_kw)
    out = diffcam.render_buffers(
        cam, moving, m_rot, m_pos, background=layer.image, background_depth=layer.depth, **kw
    )
    layer_id = layer.object_id[:, s // 2 :: s, s // 2 :: s]
    oid = torch.where(out.object_id >= 0, out.object_id + len(static), layer_id)
    return out._replace(object_id=oid), layer


COMPILE = pytest.mark.compile  # the compiled fast path: torch.compile builds its graphs


def _full(cam, static, s_rot, s_pos, moving, m_rot, m_pos, **kw):
    rot = torch.cat([s_rot.expand(m_rot.shape[0], -1, -1, -1), m_rot], 1)
    pos = torch.cat([s_pos.expand(m_pos.shape[0], -1, -1), m_pos], 1)
    return diffcam.render_buffers(cam, static + moving, rot, pos, **kw)


@pytest.mark.parametrize("kind", ["planar", "mixed"])
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"lighting": diffcam.Lighting()},
        pytest.param({"lighting": diffcam.Lighting(), "backend": "compile"}, marks=COMPILE),
        {"supersample": 2},
        {"mipmap": True},
        {"max_chunk_elements": 500},
    ],
    ids=["eager", "lit", "lit-compile", "ss2", "mipmap", "chunked"],
)
def test_layer_equals_full_render(kind, kw):
    """Hard edges: the layer split is exact. The compiled fast path over a layer is checked
    lit only: unlit, it is the reference path's (test_backends.py's "layer" case), which the
    "eager" case checks here; each case with "compile" compiles graphs of its own (about 15 s
    on a cold cache)."""
    kw = {"edge_softness": 0, **kw}
    cam = front_camera(width=20, height=16)
    static, s_rot, s_pos, moving, m_rot, m_pos = _scenery(kind)
    tex = moving[0].texture.clone().requires_grad_()
    moving[0].texture = tex
    m_pos = m_pos.clone().requires_grad_()
    m_rot = m_rot.clone().requires_grad_()
    full = _full(cam, static, s_rot, s_pos, moving, m_rot, m_pos, **kw)
    out, _ = _layer_then_moving(cam, static, s_rot, s_pos, moving, m_rot, m_pos, **kw)
    # the scenery is set up so that every kind of pixel occurs
    assert (full.object_id == len(static)).any() and (full.object_id == 1).any()
    assert (full.object_id == -1).any() or kind == "mixed"
    torch.testing.assert_close(out.image, full.image, rtol=0, atol=1e-12)
    torch.testing.assert_close(out.depth, full.depth, rtol=0, atol=1e-12)
    assert torch.equal(out.object_id, full.object_id)

    def grads(o):
        w = torch.linspace(0, 1, o.image.numel(), dtype=F64).view_as(o.image)
        loss = (o.image * w).sum() + o.depth.sum()
        return torch.autograd.grad(loss, (m_pos, m_rot, tex))

    for a, b in zip(grads(out), grads(full), strict=True):
        assert a.abs().sum() > 0
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-12)


def test_soft_layer_is_the_opaque_back():
    """Soft edges: a primitive in front of the layer is composited over it exactly as over a
    static primitive behind it; one behind the layer's surface is hidden wherever the layer
    has a surface (its soft edge still shows over the layer's empty pixels)."""
    cam = front_camera(width=20, height=16)
    tex = smooth_texture(8)
    static = [diffcam.Primitive("rectangle", [2.0, 1.5], texture=tex)]
    s_rot = torch.tensor(FACING_FRONT, dtype=F64).view(1, 1, 3, 3)
    s_pos = torch.tensor([[[0.0, 1.0, 0.0]]], dtype=F64)
    moving = [diffcam.Primitive("sphere", 0.3, texture=tex.flip(2))]
    m_rot = torch.eye(3, dtype=F64).view(1, 1, 3, 3)
    m_pos = torch.tensor([[[0.2, 0.0, 0.1]], [[0.2, 1.5, 0.1]]], dtype=F64).requires_grad_()
    kw = {"edge_softness": 0.7}
    out, layer = _layer_then_moving(cam, static, s_rot, s_pos, moving, m_rot, m_pos, **kw)
    full = _full(cam, static, s_rot, s_pos, moving, m_rot.expand(2, 1, 3, 3), m_pos, **kw)
    torch.testing.assert_close(out.image[0], full.image[0], rtol=0, atol=1e-12)
    covered = layer.depth[0, 0] > 0  # the sphere behind: hidden wherever the layer is opaque
    torch.testing.assert_close(
        out.image[1][:, covered], layer.image[0][:, covered], rtol=0, atol=1e-12
    )
    g_out = torch.autograd.grad(out.image[0].sum(), m_pos)[0]
    g_full = torch.autograd.grad(full.image[0].sum(), m_pos)[0]
    assert g_out[0].abs().sum() > 0  # silhouette gradients to the pose of the sphere in front
    torch.testing.assert_close(g_out, g_full, rtol=1e-9, atol=1e-12)


def test_layer_depth_zero_or_inf_is_empty():
    cam = front_camera(width=12, height=10)
    prim = [diffcam.Primitive("sphere", 0.5, color=torch.tensor([1.0, 0.0, 0.0], dtype=F64))]
    rot = torch.eye(3, dtype=F64).view(1, 1, 3, 3)
    pos = torch.zeros(1, 1, 3, dtype=F64)
    image = torch.rand(1, 3, 10, 12, dtype=F64)
    plain = diffcam.render_buffers(cam, prim, rot, pos, background=image)
    for empty in (0.0, float("inf")):
        depth = torch.full((1, 1, 10, 12), empty, dtype=F64)
        out = diffcam.render_buffers(cam, prim, rot, pos, background=image, background_depth=depth)
        torch.testing.assert_close(out.image, plain.image, rtol=0, atol=0)
        assert torch.equal(out.object_id, plain.object_id)
        hit = plain.object_id.unsqueeze(1) >= 0
        torch.testing.assert_close(out.depth[hit], plain.depth[hit], rtol=0, atol=0)


def test_layer_input_errors():
    cam = front_camera(width=12, height=10)
    prim = [diffcam.Primitive("sphere", 0.5)]
    rot = torch.eye(3, dtype=F64).view(1, 1, 3, 3)
    pos = torch.zeros(1, 1, 3, dtype=F64)
    depth = torch.ones(1, 1, 10, 12, dtype=F64)
    with pytest.raises(ValueError, match="image background"):
        diffcam.render(cam, prim, rot, pos, background_depth=depth)
    with pytest.raises(ValueError, match=r"\(B\|1, 3, H, W\)"):
        diffcam.render(cam, prim, rot, pos, background=torch.zeros(1, 3, 5, 6, dtype=F64))
    image = torch.zeros(1, 3, 10, 12, dtype=F64)
    with pytest.raises(ValueError, match="background_depth must"):
        diffcam.render(cam, prim, rot, pos, background=image, background_depth=depth[0])
    with pytest.raises(ValueError, match="sampling resolution"):  # supersample: 2x the size
        diffcam.render(cam, prim, rot, pos, background=image, supersample=2)


# ---------------------------------------------------------------------------- scene level
def _pendulum_cart(dtype, overrides=None, batch_size=2, steps=20):
    scene = diffcam.load_scene(
        SCENES_DIR / "pendulum_cart.toml", batch_size=batch_size, dtype=dtype, overrides=overrides
    )
    action = torch.linspace(-25.0, 25.0, batch_size, dtype=dtype).view(batch_size, 1)
    state = scene.initial_state()
    for _ in range(steps):
        state = scene.step(state, action)
    return scene, state


def _assert_same_buffers(a, b, atol):
    torch.testing.assert_close(a.image, b.image, rtol=0, atol=atol)
    torch.testing.assert_close(a.depth, b.depth, rtol=0, atol=atol)
    assert torch.equal(a.object_id, b.object_id)


@pytest.mark.parametrize(
    "kw", [{}, {"supersample": 2}, pytest.param({"backend": "compile"}, marks=COMPILE)]
)
def test_scene_cache_equals_full_render_pendulum_cart(dtype, kw):
    kw = {"edge_softness": 0, **kw}  # hard edges: the layer split is exact
    scene, state = _pendulum_cart(dtype)
    atol = 1e-6 if dtype == torch.float32 else 1e-12
    full = scene.render_buffers(state, static_cache=False, **kw)
    assert scene._layer_cache is None
    for _ in range(2):  # drawing the layer, then reusing it
        cached = scene.render_buffers(state, **kw)
        assert scene._layer_cache is not None
        _assert_same_buffers(cached, full, atol)
    for i in scene.static_bodies:  # the static bodies are drawn and keep their ids
        assert (full.object_id == i).any()
    torch.testing.assert_close(scene.render(state, **kw), full.image, rtol=0, atol=atol)


@pytest.mark.parametrize("edge_softness", [0.0, 1.0])
def test_scene_render_is_the_image_of_render_buffers(edge_softness):
    """`Scene.render` makes the image alone (no winners' ids and depth, no coverage): the same
    image as `render_buffers`, bit for bit, with and without the static layer, and the same
    gradients to the poses."""
    scene, state = _pendulum_cart(torch.float64)
    for static_cache in (False, True):
        images, grads = [], []
        for draw in (scene.render, lambda s, **kw: scene.render_buffers(s, **kw).image):
            pos = state.position.detach().requires_grad_()
            image = draw(state.replace(position=pos), edge_softness=edge_softness,
                         static_cache=static_cache)  # fmt: skip
            w = torch.linspace(0, 1, image.numel(), dtype=image.dtype).view_as(image)
            images.append(image.detach())
            grads.append(torch.autograd.grad((image * w).sum(), pos)[0])
        assert torch.equal(images[0], images[1])
        assert grads[0].abs().sum() > 0
        torch.testing.assert_close(grads[0], grads[1], rtol=1e-12, atol=1e-12)


def test_scene_cache_gradients_equal_full_render(dtype):
    """Gradients to the moving bodies' poses, to a texture only they wear and to physical
    overrides (through the simulation) are those of the full render (hard edges, where the
    layer split is exact)."""
    mass = torch.tensor(0.3, dtype=dtype, requires_grad=True)
    damping = torch.tensor(0.4, dtype=dtype, requires_grad=True)
    stripes = load_texture(TEXTURES_DIR / "stripes.png", dtype=dtype)
    stripes.requires_grad_()
    overrides = {"bodies.pole.mass": mass, "joints.rail.damping": damping}
    overrides["textures.stripes"] = stripes
    results = []
    for static_cache in (False, True):
        scene, state = _pendulum_cart(dtype, overrides, steps=8)
        rot = state.rotation.detach().requires_grad_()
        pos = state.position.detach().requires_grad_()
        posed = state.replace(rotation=rot, position=pos)
        img_sim = scene.render(state, static_cache=static_cache, edge_softness=0)
        img_posed = scene.render(posed, static_cache=static_cache, edge_softness=0)
        assert (scene._layer_cache is not None) == static_cache
        w = torch.linspace(0, 1, img_sim.numel(), dtype=dtype).view_as(img_sim)
        g_sim = torch.autograd.grad((img_sim * w).sum(), (mass, damping, stripes))
        g_pose = torch.autograd.grad((img_posed * w).sum(), (rot, pos))
        results.append((g_sim, tuple(g[:, scene.dynamic_bodies] for g in g_pose)))
    tol = {"rtol": 1e-4, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-9, "atol": 1e-12}
    for a, b in zip(results[0][0] + results[0][1], results[1][0] + results[1][1], strict=True):
        assert a.abs().sum() > 0
        torch.testing.assert_close(b, a, **tol)


def test_scene_camera_with_grad_skips_the_cache():
    fov = torch.tensor(37.0, requires_grad=True)
    scene, state = _pendulum_cart(torch.float32, {"camera.fov_y_deg": fov}, batch_size=2)
    img = scene.render(state)
    assert scene._layer_cache is None
    (g,) = torch.autograd.grad(img.mean(), fov, retain_graph=True)  # the camera's graph
    (g_full,) = torch.autograd.grad(scene.render(state, static_cache=False).mean(), fov)
    assert torch.isfinite(g) and g != 0
    torch.testing.assert_close(g, g_full)


def test_scene_static_texture_with_grad_skips_the_cache():
    metal = load_texture(TEXTURES_DIR / "metal.png").requires_grad_()
    scene, state = _pendulum_cart(torch.float32, {"textures.metal": metal}, batch_size=1)
    img = scene.render(state)
    assert scene._layer_cache is None
    (g,) = torch.autograd.grad(img.sum(), metal)
    assert g.abs().sum() > 0  # the rail bar's texture still learns


def _behind_scene(scene_tools, tmp_path, dtype):
    """A moving box that passes behind a static pillar, a moving ball in front of it."""
    data = scene_tools.tiny()
    data["camera"]["resolution"] = [48, 32]
    data["textures"]["metal"] = "metal.png"
    data["joints"] = []
    data["bodies"] = [
        data["bodies"][0],
        {
            "name": "pillar", "shape": "box", "size": [0.25, 0.2, 1.2], "static": True,
            "position": [0.0, -0.6, 1.0], "texture": "metal", "collide": False,
        },
        {
            "name": "slab", "shape": "box", "size": [0.5, 0.2, 0.4], "mass": 1.0,
            "position": [0.0, 0.4, 1.0], "texture": "wood", "collide": False,
        },
        {
            "name": "ball", "shape": "sphere", "size": 0.15, "mass": 1.0,
            "position": [0.4, -1.2, 1.2], "texture": "wood", "collide": False,
        },
    ]  # fmt: skip
    scene = diffcam.load_scene(scene_tools.write_scene(data, tmp_path), batch_size=3, dtype=dtype)
    state = scene.initial_state()
    pos = state.position.clone()
    pos[:, scene.body_names.index("slab"), 0] = torch.tensor([-0.6, -0.15, 0.2], dtype=dtype)
    return scene, state.replace(position=pos)


def test_scene_cache_moving_body_behind_a_static_one(scene_tools, tmp_path, dtype):
    scene, state = _behind_scene(scene_tools, tmp_path, dtype)
    atol = 1e-6 if dtype == torch.float32 else 1e-12
    full = scene.render_buffers(state, static_cache=False, edge_softness=0)  # hard: exact
    slab, pillar = scene.body_names.index("slab"), scene.body_names.index("pillar")
    assert (full.object_id[1] == slab).any() and (full.object_id[1] == pillar).any()
    _assert_same_buffers(scene.render_buffers(state, edge_softness=0), full, atol)
    assert scene._layer_cache.image.shape[0] == 1  # one layer shared by the batch


def test_scene_cache_follows_static_poses_and_in_place_edits(scene_tools, tmp_path):
    scene, state = _behind_scene(scene_tools, tmp_path, F64)
    scene.render(state, edge_softness=0)
    first = scene._layer_cache
    # a state whose static pillar stands elsewhere in one batch element: a per-batch layer
    pillar = scene.body_names.index("pillar")
    pos = state.position.clone()
    pos[1, pillar, 0] = 0.3
    moved = state.replace(position=pos)
    _assert_same_buffers(  # hard edges: the layer split is exact
        scene.render_buffers(moved, edge_softness=0),
        scene.render_buffers(moved, static_cache=False, edge_softness=0),
        1e-12,
    )
    assert scene._layer_cache is not first and scene._layer_cache.image.shape[0] == 3
    # an in-place edit of something the layer depends on redraws it
    with torch.no_grad():
        scene.background.mul_(0.5)
    torch.testing.assert_close(
        scene.render(moved, edge_softness=0),
        scene.render(moved, static_cache=False, edge_softness=0),
        rtol=0,
        atol=1e-12,
    )


def test_scene_output_never_aliases_the_cached_layer():
    """Nothing moving in view at batch size 1: the image is the layer's pixels, but a copy."""
    scene, state = _pendulum_cart(torch.float64, batch_size=1, steps=0)
    pos = state.position.clone()
    pos[:, scene.dynamic_bodies, 2] += 100.0  # far above the camera's view
    away = state.replace(position=pos)
    first = scene.render(away)
    assert (scene.render_buffers(away).object_id >= 0).all()  # static bodies fill the view
    first.mul_(0.0)
    torch.testing.assert_close(scene.render(away), scene.render(away, static_cache=False))
