"""diffcam.randomize: seeded per-episode domain randomisation of a scene's rendering."""

from __future__ import annotations

import math

import pytest
import torch

import diffcam
from diffcam.randomize import (
    EpisodeParams,
    Randomization,
    RandomizedEpisodes,
    RandomizedScene,
    append_seeds,
    color_jitter,
    randomize,
    sensor_noise,
)
from diffcam.scene import SCENES_DIR

SCENE = SCENES_DIR / "pendulum_cart.toml"
SMALL = {"camera.resolution": [72, 24]}  # the pendulum-cart camera at a quarter size

EVERYTHING = Randomization.moderate(procedural_textures=0.3, procedural_background=0.5)


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def scene3():
    return diffcam.load_scene(SCENE, batch_size=3, overrides=SMALL)


def moved(scene, amount: float = 0.1):
    """The initial state with the cart moved right and the pole turned a little."""
    state = scene.initial_state()
    pos = state.position.clone()
    i = scene.body_names.index("cart")
    pos[:, i, 0] += amount
    return state.__class__(pos, state.rotation, state.linear_velocity, state.angular_velocity)


# --------------------------------------------------------------------------- sampling
def test_sample_is_reproducible_and_seed_dependent():
    names = ("a", "b")
    p1 = EVERYTHING.sample(gen(3), 5, names)
    p2 = EVERYTHING.sample(gen(3), 5, names)
    p3 = EVERYTHING.sample(gen(4), 5, names)
    assert p1.equal(p2)
    assert not p1.equal(p3)
    # seeded per episode: an episode depends on its seed alone
    q = EVERYTHING.sample_seeded([7, 8, 9], names)
    assert q[1].equal(EVERYTHING.sample_seeded([8], names))
    assert EpisodeParams.cat([q[0], q[1:]]).equal(q)


def test_samples_lie_within_their_ranges():
    r = Randomization(
        texture_brightness=(0.5, 1.5),
        texture_contrast=(0.7, 1.1),
        texture_saturation=(0.0, 2.0),
        texture_hue=(-0.1, 0.2),
        procedural_textures=0.5,
        bodies=("b",),
        ambient_scale=(0.5, 0.6),
        intensity_scale=(1.0, 2.0),
        light_direction_deg=15.0,
        camera_translation=0.05,
        camera_rotation_deg=2.0,
        focal_scale=(0.9, 1.1),
        principal_point_px=3.0,
        background_offset=0.2,
        procedural_background=0.25,
        brightness=(0.8, 1.2),
        contrast=(0.5, 0.9),
        saturation=(1.0, 1.5),
        hue=(-0.03, 0.0),
        noise_std=(0.01, 0.02),
        shot_noise=(0.0, 0.01),
    )
    p = r.sample(gen(0), 400, ("a", "b"))

    def within(x, lo, hi):
        assert float(x.min()) >= lo and float(x.max()) <= hi, (lo, hi, x.min(), x.max())
        assert float(x.max() - x.min()) > 0.8 * (hi - lo)  # and spread over them

    for name in ("brightness", "contrast", "saturation", "hue"):
        within(p.__dict__[f"texture_{name}"][:, 1], *getattr(r, f"texture_{name}"))
        # body "a" is not selected: identity
        assert bool((p.__dict__[f"texture_{name}"][:, 0] == (0.0 if name == "hue" else 1.0)).all())
        within(getattr(p, name), *getattr(r, name))
    for name in ("ambient_scale", "intensity_scale", "focal_scale", "noise_std", "shot_noise"):
        within(getattr(p, name), *getattr(r, name))
    within(p.camera_translation, -0.05, 0.05)
    within(p.camera_rotation, -math.radians(2.0), math.radians(2.0))
    within(p.principal_point, -3.0, 3.0)
    within(p.background_offset, -0.2, 0.2)
    angle = torch.linalg.vector_norm(p.light_rotation, dim=-1)
    within(angle, 0.0, math.radians(15.0))
    assert not bool(p.procedural[:, 0].any())
    assert 0.35 < float(p.procedural[:, 1].double().mean()) < 0.65
    assert 0.15 < float(p.procedural_background.double().mean()) < 0.35


def test_randomized_camera_and_light_within_ranges(scene3):
    r = Randomization(
        camera_translation=0.05,
        camera_rotation_deg=2.0,
        focal_scale=(0.9, 1.1),
        principal_point_px=3.0,
        light_direction_deg=15.0,
        ambient_scale=(0.5, 0.6),
    )
    rs = randomize(scene3, r, gen(1))
    cam, base = rs.camera, scene3.camera
    assert cam.batch_size == 3
    ratio = cam.fx / base.fx
    assert bool(((ratio >= 0.9) & (ratio <= 1.1)).all()) and bool((cam.fy / base.fy == ratio).all())
    assert bool(((cam.cx - base.cx).abs() <= 3.0).all())
    assert bool(((cam.translation - base.translation).abs() <= 0.05 + 1e-6).all())
    # rotation about the nominal by at most sqrt(3) * 2 degrees
    rel = base.rotation.transpose(-1, -2) @ cam.rotation
    cos = ((rel.diagonal(dim1=-2, dim2=-1).sum(-1) - 1) / 2).clamp(-1, 1)
    assert float(torch.rad2deg(torch.acos(cos)).max()) <= 2.0 * math.sqrt(3) + 1e-3
    nominal = torch.as_tensor(scene3.lighting.direction)
    light = rs.lighting
    assert light.direction.shape == (3, 3) and light.ambient.shape == (3,)
    for b in range(3):
        d = light.direction[b]
        cos = torch.dot(d, nominal) / (d.norm() * nominal.norm())
        assert float(torch.rad2deg(torch.acos(cos.clamp(-1, 1)))) <= 15.0 + 1e-3
        assert 0.5 <= float(light.ambient[b] / scene3.lighting.ambient) <= 0.6
        assert float(light.intensity[b]) == pytest.approx(float(scene3.lighting.intensity))


# --------------------------------------------------------------------------- rendering
def test_identity_is_the_plain_render_exactly(scene3):
    state = moved(scene3)
    rs = randomize(scene3, Randomization(), gen(0))
    assert torch.equal(rs.render(state), scene3.render(state))
    soft = dict(edge_softness=0.5)
    assert torch.equal(rs.render(state, **soft), scene3.render(state, **soft))
    # and the gradient to the state
    pos = state.position.clone().requires_grad_(True)
    grads = []
    for s in (rs, scene3):
        st = state.__class__(pos, state.rotation, state.linear_velocity, state.angular_velocity)
        (g,) = torch.autograd.grad(s.render(st, **soft).square().sum(), pos)
        grads.append(g)
    assert torch.equal(*grads)


def test_downscaled_is_the_same_episodes_through_the_downscaled_camera(scene3):
    # each episode through its camera at half the resolution (PinholeCamera.downscaled: the
    # principal-point offset halved with the rest): about the 2 x 2 block means of its own
    # full-resolution render, further from another episode's
    r = Randomization.moderate(noise_std=(0.0, 0.0), shot_noise=(0.0, 0.0))
    full = randomize(scene3, r, gen(4))
    small = full.downscaled(2)
    for name in ("fx", "fy", "cx", "cy"):
        torch.testing.assert_close(getattr(small.camera, name), getattr(full.camera, name) / 2)
    assert (small.camera.width, small.camera.height) == (36, 12)
    state = moved(scene3)
    image, pooled = small.render(state), torch.nn.functional.avg_pool2d(full.render(state), 2)
    assert image.shape == (3, 3, 12, 36)
    own = (image - pooled).abs().mean()
    assert own < 0.03 and own < 0.5 * (image - pooled.roll(1, 0)).abs().mean()
    assert full.downscaled(1) is full


def test_each_episode_is_the_scene_drawn_with_its_render_arguments(scene3):
    """The per-episode path = the plain scene at batch 1 given that episode's light,
    background and camera through its own render arguments and overrides."""
    r = Randomization(ambient_scale=(0.6, 1.4), light_direction_deg=30.0, camera_translation=0.05)
    rs = randomize(scene3, r, gen(2))
    state = moved(scene3)
    images = rs.render(state)
    light = rs.lighting
    for b in range(3):
        cam = rs.camera
        shift = cam.translation[b] - scene3.camera.translation[0]
        target = torch.tensor([0.0, 0.0, 1.2]) + shift  # the file's look_at, moved alike
        overrides = {"camera.position": cam.translation[b].tolist(), "camera.look_at": target}
        one = diffcam.load_scene(SCENE, batch_size=1, overrides={**SMALL, **overrides})
        assert torch.allclose(one.camera.translation, cam.translation[b : b + 1], atol=1e-6)
        assert torch.allclose(one.camera.rotation, cam.rotation[b : b + 1], atol=1e-6)
        lighting = diffcam.Lighting(light.ambient[b], light.direction[b], light.intensity[b])
        ref = one.render(state[b : b + 1], lighting=lighting)
        assert torch.allclose(images[b : b + 1], ref, atol=1e-5)


@pytest.mark.parametrize(
    "fields",
    [
        {"ambient_scale": (0.6, 1.4)},
        {"light_direction_deg": 30.0, "intensity_scale": (0.7, 1.3)},
        {"background_offset": 0.2},
        {"texture_brightness": (0.7, 1.3), "texture_hue": (-0.1, 0.1)},
    ],
    ids=["ambient", "light", "background", "textures"],
)
def test_per_image_appearance_with_the_camera_fixed(scene3, fields):
    """With the camera and the static poses the same in every episode, the static layer must
    still be drawn per image when the light, background or colour maps differ per image."""
    rs = randomize(scene3, Randomization(**fields), gen(3))
    state = moved(scene3)
    state = state.__class__(*(x[:1].expand_as(x).clone() for x in state.tensors()))
    images = rs.render(state)
    one = diffcam.load_scene(SCENE, batch_size=1, overrides=SMALL)
    for b in range(3):
        ref = one.render(state[b : b + 1], **rs._episode_arguments(slice(b, b + 1), 1))
        assert torch.allclose(images[b : b + 1], ref, atol=1e-6), b
    if "background_offset" not in fields:  # (the backdrop body hides the background)
        assert float((images[0] - images[1]).abs().max()) > 1e-3


def test_batch_elements_differ(scene3):
    state = moved(scene3)
    state = state.__class__(*(x[:1].expand_as(x) for x in state.tensors()))  # same state
    images = randomize(scene3, EVERYTHING, gen(5)).render(state)
    assert images.shape == (3, 3, 24, 72)
    assert bool(((images >= 0) & (images <= 1)).all())
    for a in range(3):
        for b in range(a):
            assert float((images[a] - images[b]).abs().mean()) > 1e-3


def test_rendering_is_reproducible(scene3):
    state = moved(scene3)
    a = randomize(scene3, EVERYTHING, gen(9))
    b = randomize(scene3, EVERYTHING, gen(9))
    first = a.render(state)
    assert torch.equal(first, b.render(state))
    second = a.render(state)  # new noise each frame
    assert not torch.equal(first, second)
    a.reset_noise()
    assert torch.equal(a.render(state), first)
    # a state of batch 1 is episode 0
    assert torch.equal(b.render(state[:1]), second[:1])


def test_each_randomisation_changes_the_image(scene3):
    state = moved(scene3)
    plain = scene3.render(state)
    single = {
        "texture_brightness": (0.5, 0.6),
        "ambient_scale": (0.5, 0.6),
        "light_direction_deg": 40.0,
        "camera_translation": 0.1,
        "camera_rotation_deg": 3.0,
        "focal_scale": (1.1, 1.2),
        "principal_point_px": 4.0,
        "brightness": (0.5, 0.6),
        "contrast": (0.5, 0.6),
        "saturation": (0.2, 0.3),
        "hue": (0.2, 0.3),
        "noise_std": (0.05, 0.06),
        "shot_noise": (0.01, 0.02),
    }
    for name, value in single.items():
        image = randomize(scene3, Randomization(**{name: value}), gen(0)).render(state)
        assert float((image - plain).abs().mean()) > 1e-3, name
    # background: invisible in this scene (the backdrop hides it), but drawn per episode
    rs = randomize(scene3, Randomization(procedural_background=1.0), gen(0))
    background = rs._episode_arguments(slice(None), 1)["background"]
    assert background.shape == (3, 3, 24, 72)
    assert float((background[0] - background[1]).abs().mean()) > 1e-2


def test_pose_gradient_matches_finite_differences_float64():
    """Through a randomised render (every kind, soft edges, noise with fixed draws) the
    gradient to a body's pose is the finite difference of the same randomised render."""
    scene = diffcam.load_scene(SCENE, batch_size=2, overrides=SMALL, dtype=torch.float64)
    rs = randomize(scene, EVERYTHING, gen(11))
    state = moved(scene, 0.05)
    weights = torch.rand((2, 3, 24, 72), generator=gen(0), dtype=torch.float64)
    cart, pole = scene.body_names.index("cart"), scene.body_names.index("pole")
    direction = torch.zeros_like(state.position)
    direction[:, cart, 0], direction[:, pole, 0], direction[:, pole, 2] = 1.0, 1.0, 0.3

    def loss(s):
        pos = state.position + s * direction
        st = state.__class__(pos, state.rotation, state.linear_velocity, state.angular_velocity)
        rs.reset_noise()
        return (rs.render(st, edge_softness=1.0) * weights).sum()

    s = torch.zeros((), dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(loss(s), s)
    h = 1e-6
    with torch.no_grad():
        fd = (
            loss(torch.tensor(h, dtype=torch.float64)) - loss(torch.tensor(-h, dtype=torch.float64))
        ) / (2 * h)
    assert abs(float(grad)) > 1e-2
    assert abs(float(grad) - float(fd)) <= 1e-5 * max(1.0, abs(float(fd))), (float(grad), float(fd))


def test_training_wrapper_runs_episodes_on_the_randomised_scene(scene3):
    seen = []

    class Episodes(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.scene = scene3
            self.w = torch.nn.Parameter(torch.ones(()))

        def forward(self, starts):
            seen.append(self.scene)
            image = self.scene.render(moved(scene3))
            return (image.mean() * self.w, {})

    model = RandomizedEpisodes(Episodes(), EVERYTHING)
    batch = append_seeds(torch.zeros(3, 4), gen(0))
    assert batch.shape == (3, 5) and bool((batch[:, -1] == batch[:, -1].round()).all())
    loss, _ = model(batch)
    loss.backward()
    assert isinstance(seen[0], RandomizedScene) and model.episodes.scene is scene3
    assert seen[0].params.equal(EVERYTHING.sample_seeded(batch[:, -1], scene3.body_names))


# --------------------------------------------------------------------------- image ops
def test_color_jitter_formulas():
    x = torch.rand((2, 3, 5, 7), generator=gen(0), dtype=torch.float64)
    assert color_jitter(x) is x
    assert torch.allclose(color_jitter(x, brightness=0.5), x * 0.5)
    grey = (x * torch.tensor([0.2989, 0.587, 0.114], dtype=x.dtype).view(3, 1, 1)).sum(1, True)
    assert torch.allclose(color_jitter(x, saturation=0.0), grey.expand_as(x))
    mean = grey.mean(dim=(1, 2, 3), keepdim=True)
    assert torch.allclose(color_jitter(x, contrast=0.0), mean.expand_as(x))
    # hue: a full turn changes nothing, a shift keeps the luma (before clamping)
    assert torch.allclose(color_jitter(x, hue=torch.tensor([1.0, -1.0], dtype=x.dtype)), x)
    y = color_jitter(x * 0.5 + 0.25, hue=0.1)
    grey_y = (y * torch.tensor([0.299, 0.587, 0.114], dtype=x.dtype).view(3, 1, 1)).sum(1)
    grey_x = (
        (x * 0.5 + 0.25) * torch.tensor([0.299, 0.587, 0.114], dtype=x.dtype).view(3, 1, 1)
    ).sum(1)
    assert torch.allclose(grey_y, grey_x, atol=1e-4)
    # per-image values
    out = color_jitter(x, brightness=torch.tensor([1.0, 0.5], dtype=x.dtype))
    assert torch.equal(out[0], x[0]) and torch.allclose(out[1], 0.5 * x[1])


def test_sensor_noise_statistics():
    x = torch.full((1, 3, 200, 200), 0.4, dtype=torch.float64)
    y = sensor_noise(x, 0.01, 0.001, generator=gen(0))
    expected = math.sqrt(0.01**2 + 0.001 * 0.4)
    assert abs(float((y - x).mean())) < 3 * expected / 200
    assert abs(float((y - x).std()) / expected - 1) < 0.02
    # reparameterised: the gradient to the signal is 1 + d(sigma)/dx * eps
    xg = x.clone().requires_grad_(True)
    eps = torch.randn(x.shape, generator=gen(1), dtype=x.dtype)
    sensor_noise(xg, 0.01, 0.001, eps=eps).sum().backward()
    assert torch.allclose(xg.grad, 1 + 0.5 * 0.001 / expected * eps)
    assert not torch.isnan(
        torch.autograd.grad(sensor_noise(xg * 0, 0.0, 0.0, eps=eps).sum(), xg)[0]
    ).any()


# --------------------------------------------------------------------------- errors
@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"contrast": (1.2, 0.8)}, ["Randomization.contrast", "lo > hi", "contrast=(0.8, 1.2)"]),
        ({"hue": (-0.7, 0.1)}, ["Randomization.hue", "within [-0.5, 0.5]", "hue=(-0.05, 0.05)"]),
        ({"brightness": 1.1}, ["Randomization.brightness", "range (lo, hi)", "brightness=("]),
        ({"noise_std": (-0.1, 0.1)}, ["Randomization.noise_std", "within [0.0"]),
        ({"camera_translation": -0.05}, ["Randomization.camera_translation", "[-m, m]"]),
        ({"procedural_textures": 1.5}, ["Randomization.procedural_textures", "probability"]),
        ({"focal_scale": (0.0, 1.1)}, ["Randomization.focal_scale", "within"]),
        ({"bodies": "cart"}, ["Randomization.bodies", "tuple of body names"]),
        ({"ambient_scale": (float("nan"), 1.0)}, ["Randomization.ambient_scale", "finite"]),
    ],
)
def test_bad_ranges_name_the_field_and_the_fix(kwargs, words):
    with pytest.raises(ValueError) as info:
        Randomization(**kwargs)
    for word in words:
        assert word in str(info.value), (word, str(info.value))


def test_bad_use_is_explained(scene3):
    with pytest.raises(ValueError, match=r"Randomization.bodies names \['wheel'\]"):
        Randomization(bodies=("wheel",)).sample(gen(0), 3, scene3.body_names)
    with pytest.raises(ValueError, match="sample batch=3"):
        RandomizedScene(scene3, Randomization().sample(gen(0), 2, scene3.body_names))
    with pytest.raises(TypeError, match="torch.Generator"):
        Randomization().sample(0, 3)
    rs = randomize(scene3, EVERYTHING, gen(0))
    with pytest.raises(ValueError, match="a state of batch 2"):
        rs.render(scene3.initial_state()[:2])
    with pytest.raises(NotImplementedError, match="render_states"):
        rs.render_states(None)


@pytest.mark.slow
def test_swingup_training_and_evaluation_with_randomization(tiny_pendulum_cart):
    """The opt-in path of the swing-up task: episodes through `RandomizedEpisodes` give a
    finite loss and policy gradient; `evaluate(randomization=...)` runs and is seeded."""
    from tasks import swingup

    path = tiny_pendulum_cart(36, 12)
    scene = diffcam.load_scene(path, batch_size=2)
    config = swingup.SwingUpConfig(observation="pixels", seconds=0.08, frames=2, width=2, hidden=4)
    policy = swingup.make_policy(config, swingup.motor_limit(scene))
    torch.nn.init.normal_(policy.output.weight, std=0.5, generator=gen(1))
    model = RandomizedEpisodes(swingup.SwingUpEpisodes(scene, policy, config), EVERYTHING)
    batch = append_seeds(swingup.random_starts(2, gen(0)), gen(0))
    loss, metrics = model(batch)
    grads = torch.autograd.grad(loss, list(policy.parameters()))
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)
    assert sum(float(g.abs().sum()) for g in grads) > 0

    def run(seed):
        return swingup.evaluate(
            path, policy, config, starts=1, seconds=0.2, progress=False,
            randomization=EVERYTHING, randomization_seed=seed,
        )  # fmt: skip

    first = run(3)
    assert first == run(3) and first["starts"] == 2


def test_texture_jitter_is_color_jitter_of_each_body_texture(scene3):
    """Episode b's body colours = the scene drawn alone with every body's texture (or flat
    colour) put through `color_jitter` with that episode's values (mild values: nothing
    clamps, so one clamp at the end is the same as one after each operation)."""
    r = Randomization(
        texture_brightness=(0.8, 0.95),
        texture_contrast=(0.85, 1.0),
        texture_saturation=(0.8, 1.0),
        texture_hue=(-0.02, 0.02),
    )
    scene = diffcam.load_scene(SCENE, batch_size=3, overrides=SMALL, dtype=torch.float64)
    rs = randomize(scene, r, gen(4))
    state = moved(scene)
    images = rs.render(state, edge_softness=0.5)
    assert float((images - scene.render(state, edge_softness=0.5)).abs().max()) > 1e-2
    p = rs.params
    for b in range(3):
        one = diffcam.load_scene(SCENE, batch_size=1, overrides=SMALL, dtype=torch.float64)
        for k, prim in enumerate(one.primitives):
            values = [float(getattr(p, f"texture_{n}")[b, k]) for n in r_names()]
            if prim.texture is not None:
                prim.texture = color_jitter(prim.texture[None], *values)[0]
            else:
                colour = torch.as_tensor(prim.color, dtype=torch.float64).view(1, 3, 1, 1)
                prim.color = color_jitter(colour, *values).view(3)
        ref = one.render(state[b : b + 1], edge_softness=0.5)
        torch.testing.assert_close(images[b : b + 1], ref, atol=1e-9, rtol=0)


def r_names():
    return ("brightness", "contrast", "saturation", "hue")


def test_fused_color_jitter_is_color_jitter_where_nothing_clamps():
    """One affine map per image = the four operations in turn (mild values, colours inside
    [0.2, 0.8]: no intermediate clamp), values and gradients to the image; with strong
    values it still stays in [0, 1]."""
    from diffcam.randomize import color_jitter_fused

    x = (
        0.2 + 0.6 * torch.rand((3, 3, 5, 7), generator=gen(1), dtype=torch.float64)
    ).requires_grad_()
    values = [
        torch.tensor(v, dtype=torch.float64)
        for v in ([0.9, 1.05, 1.1], [0.9, 1.1, 1.0], [0.8, 1.2, 1.0], [0.03, -0.05, 0.0])
    ]
    fused, ref = color_jitter_fused(x, *values), color_jitter(x, *values)
    torch.testing.assert_close(fused, ref, atol=1e-12, rtol=0)
    w = torch.rand(x.shape, generator=gen(2), dtype=torch.float64)
    (g_fused,) = torch.autograd.grad((fused * w).sum(), x)
    (g_ref,) = torch.autograd.grad((ref * w).sum(), x)
    torch.testing.assert_close(g_fused, g_ref, atol=1e-12, rtol=0)
    strong = color_jitter_fused(x.detach(), 3.0, 2.0, 3.0, 0.4)
    assert float(strong.min()) >= 0 and float(strong.max()) <= 1
    assert float((strong - x.detach()).abs().max()) > 0.1
