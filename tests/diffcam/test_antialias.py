"""The default render: antialiased edges (``edge_softness="antialias"``), whose gradient sees
silhouettes move (docs/decisions/antialiased-default.md).

A primitive covers a pixel ``clamp(0.5 + d, 0, 1)`` of the centre's signed silhouette distance
d (px): the box-filtered coverage of a straight edge parallel to a pixel side, exactly 1 half a
pixel inside and 0 half a pixel outside. ``edge_softness=0`` stays the exact hard render.
"""

from __future__ import annotations

import math

import pytest
import torch

import diffcam
from diffcam.scene import SCENES_DIR

from ._common import FACING_FRONT, front_camera, smooth_texture

COLOUR, BACK = (0.9, 0.2, 0.1), (0.1, 0.3, 0.8)


def _flat_rectangle(dtype, left_edge_px: float):
    """A flat-coloured rectangle facing a 16 x 12 camera, its left edge at column
    ``left_edge_px`` (continuous pixel x), over a flat background: (render args, kwargs)."""
    cam = front_camera(width=16, height=12, dtype=dtype)
    width = 1.0  # m
    # the rectangle's x at the edge, from the pixel coordinate: x = (u - cx) / fx * depth
    depth = 3.0
    x_edge = (left_edge_px - float(cam.cx[0])) / float(cam.fx[0]) * depth
    prim = diffcam.Primitive("rectangle", [width, 0.8], color=torch.tensor(COLOUR, dtype=dtype))
    rot = torch.tensor(FACING_FRONT, dtype=dtype).view(1, 1, 3, 3)
    pos = torch.tensor([[[x_edge + width / 2, 0.0, 0.0]]], dtype=dtype)
    bg = torch.tensor(BACK, dtype=dtype)
    return (cam, [prim], rot, pos), {"background": bg}


def test_convention_default_is_antialiased(dtype):
    """The default draws antialiased edges: a pixel the edge crosses shows the fraction of it
    that the primitive covers; pixels half a pixel or more inside (outside) are the hard
    render's; ``edge_softness=0`` is hard (two values only)."""
    assert diffcam.DEFAULT_EDGE_SOFTNESS == "antialias" == diffcam.ANTIALIAS
    args, kw = _flat_rectangle(dtype, left_edge_px=5.3)
    cam = args[0]
    centre_px = float(cam.project(args[3])[0, 0, 0])  # the edge is half a width to its left
    assert abs(centre_px - 5.3 - 0.5 * float(cam.fx[0]) / 3) < 1e-4
    default = diffcam.render_buffers(*args, **kw)
    hard = diffcam.render_buffers(*args, edge_softness=0, **kw)
    explicit = diffcam.render(*args, edge_softness="antialias", **kw)
    assert torch.equal(default.image, explicit)
    row = 6  # the rectangle spans the middle rows
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    # column 5 (centre 5.5) is covered from x = 5.3 on: 0.7 of it
    torch.testing.assert_close(default.coverage[0, 0, row, 5], torch.tensor(0.7, dtype=dtype))
    expected = 0.7 * torch.tensor(COLOUR, dtype=dtype) + 0.3 * torch.tensor(BACK, dtype=dtype)
    torch.testing.assert_close(default.image[0, :, row, 5], expected, rtol=0, atol=tol)
    # the hard render: the centre 5.5 is inside, so the whole pixel shows the rectangle
    torch.testing.assert_close(hard.image[0, :, row, 5], torch.tensor(COLOUR, dtype=dtype))
    assert set(hard.coverage.unique().tolist()) == {0.0, 1.0}
    # away from the edges the default is the hard render, pixel for pixel
    edge = (default.coverage > 0) & (default.coverage < 1)
    assert 0 < int(edge.sum()) < 0.3 * edge.numel()
    same = ~edge.expand_as(default.image)
    torch.testing.assert_close(default.image[same], hard.image[same], rtol=0, atol=tol)
    assert torch.equal(default.object_id, hard.object_id)


def test_default_is_the_same_with_and_without_gradients(dtype):
    """The default's image does not depend on whether autograd records (no hard shortcut
    under no_grad): `Scene.render` of the pendulum-cart, bit for bit."""
    scene = diffcam.load_scene(SCENES_DIR / "pendulum_cart.toml", batch_size=2, dtype=dtype)
    state = scene.initial_state()
    with torch.no_grad():
        plain = scene.render(state)
    pos = state.position.detach().requires_grad_()
    tracked = scene.render(state.replace(position=pos))
    assert tracked.requires_grad
    assert torch.equal(plain, tracked.detach())
    assert not torch.equal(plain, scene.render(state, edge_softness=0))


def test_bad_edge_softness_and_mipmap_warning():
    args, kw = _flat_rectangle(torch.float64, 5.3)
    with pytest.raises(ValueError, match="'antialias'"):
        diffcam.render(*args, edge_softness="smooth", **kw)
    with pytest.warns(UserWarning, match="mipmap applies to hard edges"):
        diffcam.render(*args, mipmap=True, **kw)


def _cart_loss(dtype):
    """(loss(dx) of the cart moved by dx metres, metres per pixel at the cart): the pixel MSE
    of the tiny-resolution pendulum-cart against the same scene with the cart 2 px to the
    side, for a given edge_softness."""
    scene = diffcam.load_scene(
        SCENES_DIR / "pendulum_cart.toml",
        batch_size=1,
        dtype=dtype,
        overrides={"camera.resolution": [144, 48]},
    )
    state = scene.initial_state()
    cart = scene.body_names.index("cart")
    depth = float(state.position[0, cart, 1] - scene.camera.translation[0, 1])
    metres_per_px = depth / float(scene.camera.fx[0])

    def image(dx, softness):
        pos = state.position.clone()
        pos[0, cart, 0] = pos[0, cart, 0] + dx
        return scene.render(state.replace(position=pos), edge_softness=softness)

    def loss(dx, softness):
        with torch.no_grad():
            target = image(torch.tensor(2.0 * metres_per_px, dtype=dtype), softness)
        return ((image(dx, softness) - target) ** 2).mean()

    return loss, metres_per_px


def test_default_pose_gradient_agrees_with_finite_differences(dtype):
    """d loss / d (cart x) of a pixel loss whose silhouettes are 2 px apart: the default's
    autograd agrees with central differences at steps of 1/8 and 1/4 of a pixel's motion (the
    image is piecewise linear in the pose there); the hard render's autograd does not (it sees
    the cart's wood grain move, not its outline)."""
    loss, metres_per_px = _cart_loss(dtype)
    for softness, agrees in (("antialias", True), (0.0, False)):
        x = torch.zeros((), dtype=dtype, requires_grad=True)
        (grad,) = torch.autograd.grad(loss(x, softness), x)
        for step_px in (1 / 8, 1 / 4):
            h = step_px * metres_per_px
            with torch.no_grad():
                up = loss(torch.tensor(h, dtype=dtype), softness)
                down = loss(torch.tensor(-h, dtype=dtype), softness)
            fd = float((up - down) / (2 * h))
            assert fd < 0  # the loss falls as the cart moves towards the target
            error = abs(float(grad) - fd) / abs(fd)
            if agrees:
                assert error < 0.1, (softness, step_px, float(grad), fd)
            else:
                assert error > 0.5, (softness, step_px, float(grad), fd)


# ------------------------------------------------------------------------- the plain fit
TRUE = (0.2, 0.05)  # the pole's mass (kg) and the hinge's damping (N m s / rad)
START = (0.35, 0.1)  # x1.75, x2
STEPS, EVERY = 60, 4  # 0.6 s under a sine force, a frame every 4 steps (16 frames)


def _rollout_frames(log_mass, log_damping, softness=diffcam.DEFAULT_EDGE_SOFTNESS):
    overrides = {"bodies.pole.mass": log_mass.exp(), "joints.hinge.damping": log_damping.exp()}
    scene = diffcam.load_scene(SCENES_DIR / "pendulum_cart.toml", overrides=overrides)
    t = torch.arange(STEPS, dtype=scene.dtype) * scene.timestep
    actions = (25.0 * torch.sin(2 * math.pi * t / 0.5)).view(STEPS, 1, 1)
    trajectory = scene.rollout(STEPS, actions=actions, compile=False)
    shown = trajectory[torch.arange(0, STEPS + 1, EVERY)]
    return scene.render_states(shown, frames_per_call=32, edge_softness=softness).image[:, 0]


@pytest.mark.slow
def test_plain_adam_fit_of_mass_and_damping_converges_with_the_default_render(single_thread):
    """The user's loop: Adam (lr 0.05) on the log of the pole's mass and the hinge's damping,
    100 iterations of the pixel MSE of `Scene.render_states` (the default render) against
    frames made with the true values, from x1.75 and x2 off. With the hard render it ended
    (150 iterations) at x0.73 and x4.1 (loss rising); with the default it ends within 3 % of
    the truth (measured: within 2 % from iteration 60 on, 0.2 % at 100, 0.01 % at 150).
    About 40 s on one thread."""
    truth = [torch.tensor(math.log(v)) for v in TRUE]
    with torch.no_grad():
        target = _rollout_frames(*truth)
    params = torch.tensor([math.log(v) for v in START], requires_grad=True)
    opt = torch.optim.Adam([params], lr=0.05)
    for _ in range(100):
        opt.zero_grad()
        loss = ((_rollout_frames(params[0], params[1]) - target) ** 2).mean()
        loss.backward()
        opt.step()
    mass, damping = params.detach().exp().tolist()
    assert abs(mass / TRUE[0] - 1) < 0.03, (mass, damping)
    assert abs(damping / TRUE[1] - 1) < 0.03, (mass, damping)


def test_antialias_under_supersampling_is_one_sample_wide():
    """With supersampling the ramp is one sample wide: the average of the samples' own
    antialiased coverage (a render at the sampling resolution, box-filtered)."""
    cam = front_camera(width=12, height=10)
    prim = diffcam.Primitive("box", [0.8, 0.6, 0.7], texture=smooth_texture(8))
    rot = torch.eye(3, dtype=torch.float64).view(1, 1, 3, 3)
    pos = torch.tensor([[[0.13, 0.0, 0.07]]], dtype=torch.float64)
    img = diffcam.render(cam, [prim], rot, pos, supersample=2)
    fine = diffcam.render(cam.scaled(2), [prim], rot, pos)
    torch.testing.assert_close(img, torch.nn.functional.avg_pool2d(fine, 2))


def test_antialiased_box_edge_does_not_jump_when_a_pixel_centre_crosses_it(dtype):
    """A textured box slid across a pixel in steps of 1/80 px: every pixel changes in
    proportion to the step (its coverage and texture move smoothly; measured: at most 0.011
    a step of 1/200 px, 0.054 of 1/40). Its samples just outside the outline take their
    colour and depth from the face they pass, as the hits just inside do; with the closest
    approach to the centre (the sigmoid path's miss point) an edge pixel jumps by half the
    colour difference when its centre crosses the outline (about 0.2 here)."""
    cam = front_camera(width=16, height=12, dtype=dtype)
    prim = diffcam.Primitive("box", [0.9, 0.5, 0.7], texture=smooth_texture(8, dtype, seed=3))
    n = 81
    steps = torch.linspace(0.0, 1.0, n, dtype=dtype) * 3.0 / float(cam.fx[0])  # 1 px
    pos = torch.zeros(n, 1, 3, dtype=dtype)
    pos[:, 0, 0] = 0.05 + steps
    pos[:, 0, 2] = 0.03
    rot = torch.eye(3, dtype=dtype).expand(n, 1, 3, 3)
    images = diffcam.render(cam, [prim], rot, pos)
    assert float((images[1:] - images[:-1]).abs().amax()) < 0.05
    hard = diffcam.render(cam, [prim], rot, pos, edge_softness=0)
    assert float((hard[1:] - hard[:-1]).abs().amax()) > 0.3  # hard edges do jump
