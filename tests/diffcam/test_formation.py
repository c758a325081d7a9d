"""`diffcam.ImageModel` / `render_video`: a real camera's frames from a simulated scene.

Gradients of the fit's loss on real-style frames (the bundled realistic clip: another
renderer, motion blur, noise, gamma, H.264) against float64 central differences, for every
image-formation parameter: gain, offset, gamma, the distortion coefficients, the exposure
(motion blur) and the time offset.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import diffcam
import physics
from diffcam.fit import evaluate, keys, model, objective
from diffcam.scene import SCENES_DIR

ROOT = Path(__file__).resolve().parents[2]
CLIP = ROOT / "tests" / "data" / "pendulum_realistic.mp4"
SCENE = SCENES_DIR / "bob_pendulum.toml"
F64 = torch.float64

# the bundled clip's pendulum and camera, close to the truth (tests/data/pendulum_realistic.json)
NEAR_TRUTH = {
    "bodies.bob.position": [0.0, 0.0, -0.85],
    "bodies.bob.size": 0.032,
    "bodies.bob.color": [0.72, 0.41, 0.13],
    "joints.pivot.position": 0.45,
    "joints.pivot.velocity": -0.6,
    "camera.position": [-0.018, -2.4, -0.567],
    "camera.look_at": [-0.018, 0.0, -0.567],
    "camera.up": [0.027, 0.0, 1.0],
    "camera.fov_y_deg": 38.0,
}


@pytest.fixture(scope="module")
def clip():
    """Frames 0-5 of the realistic clip at 80 x 45 (float64) and its clean plate."""
    video = diffcam.read_video(CLIP, size=(80, 45), frames=(0, 6), dtype=F64)
    plate = diffcam.imaging.clean_plate(
        diffcam.read_video(CLIP, size=(80, 45), stride=6, dtype=F64).frames
    )
    return video, plate


def _scene(width=80, height=45, dtype=F64):
    over = {"camera.resolution": (width, height), **NEAR_TRUTH}
    return diffcam.load_scene(SCENE, dtype=dtype, overrides=over)


def test_smoke_ideal_camera_is_the_plain_render():
    scene = _scene()
    trajectory = scene.rollout(20)
    times = torch.tensor([0.0, 0.05, 0.1], dtype=F64)
    frames = diffcam.render_video(scene, trajectory, times, edge_softness=0.5)
    plain = scene.render_states(trajectory[[0, 5, 10]], edge_softness=0.5).image
    torch.testing.assert_close(frames, plain)


def test_convention_plate_shows_where_no_body_covers(clip):
    """Over a plate, uncovered pixels are the plate exactly, whatever the response."""
    video, plate = clip
    scene = _scene()
    trajectory = scene.rollout(10)
    image_model = diffcam.ImageModel(plate=plate, gain=1.3, offset=0.02, gamma=1.8)
    frames, coverage = diffcam.render_video(
        scene, trajectory, video.times[:2], image_model, with_coverage=True, edge_softness=0.5
    )
    empty = (coverage < 1e-12).expand_as(frames)  # (the soft tails reach far, but faintly)
    assert float(empty.float().mean()) > 0.5
    torch.testing.assert_close(frames[empty], plate.expand_as(frames)[empty], atol=1e-10, rtol=0)


def test_convention_exposure_is_centred_on_the_frame_time():
    """Exposure samples sit at t + ((j + 1/2) / S - 1/2) * exposure (+ the time offset): the
    exposure is centred on the frame's time."""
    image_model = diffcam.ImageModel(exposure=0.02, exposure_samples=4, time_offset=0.1)
    times = torch.tensor([0.0, 1.0], dtype=F64)
    got = diffcam.formation.sample_times(times, image_model, 1)[..., 0]
    expected = torch.tensor([[0.0925, 0.0975, 0.1025, 0.1075], [1.0925, 1.0975, 1.1025, 1.1075]],
                            dtype=F64)  # fmt: skip
    torch.testing.assert_close(got, expected)


def test_motion_blur_is_the_average_of_the_instants():
    scene = _scene()
    trajectory = scene.rollout(20)
    times = torch.tensor([0.05], dtype=F64)
    blurred = diffcam.render_video(
        scene, trajectory, times,
        diffcam.ImageModel(exposure=0.04, exposure_samples=4), edge_softness=0.5,
    )  # fmt: skip
    instants = physics.states_at(
        trajectory, torch.tensor([0.035, 0.045, 0.055, 0.065], dtype=F64), 0.01
    )
    average = scene.render_states(instants, edge_softness=0.5).image.mean(0, keepdim=True)
    torch.testing.assert_close(blurred, average)


def test_batch_of_worlds_equals_single_worlds(clip):
    """Per-world image parameters (B,) give each world its own frames."""
    video, plate = clip
    gains = torch.tensor([0.9, 1.2], dtype=F64)
    offsets = torch.tensor([0.01, -0.02], dtype=F64)
    scene2 = _scene().with_overrides(
        {"joints.pivot.position": torch.tensor([0.3, 0.5], dtype=F64)}, 2
    )
    both = diffcam.render_video(
        scene2, scene2.rollout(10), video.times[:2],
        diffcam.ImageModel(plate=plate, gain=gains, time_offset=offsets), edge_softness=0.5,
    )  # fmt: skip
    for b in range(2):
        one = _scene().with_overrides({"joints.pivot.position": [0.3, 0.5][b]})
        single = diffcam.render_video(
            one, one.rollout(10), video.times[:2],
            diffcam.ImageModel(plate=plate, gain=float(gains[b]), time_offset=float(offsets[b])),
            edge_softness=0.5,
        )  # fmt: skip
        torch.testing.assert_close(both[:, b], single[:, 0])


PARAMETERS = [
    ("image.gain", 1.1, {}),
    ("image.offset", 0.02, {}),
    ("image.gamma", 1.3, {}),
    ("image.distortion", [-0.04, 0.01, 0.002, -0.001, 0.003], {}),
    ("image.exposure", 0.016, {"exposure_samples": 3}),
    ("image.time_offset", 0.004, {}),
]


@pytest.mark.parametrize("key,value,extra", PARAMETERS, ids=[p[0] for p in PARAMETERS])
def test_gradient_on_real_frames_matches_finite_differences(clip, key, value, extra):
    """d loss / d parameter on the realistic clip (robust loss over a clean plate, soft
    silhouettes) against float64 central differences, each scalar of each parameter."""
    video, plate = clip
    image_model = diffcam.ImageModel(plate=plate, **extra)
    video_model = model.VideoModel(_scene(), video.times, None, image_model)
    target = objective.Target(video.frames, None, "charbonnier", 0.1)
    plan = evaluate.Plan(len(video), 0, {"edge_softness": 0.7})
    fit_key = keys.make_key(key, {"init": value, "scale": 1.0}, F64)
    evaluate.loss_gradient(video_model, target, [fit_key], plan)
    analytic = fit_key.raw.grad.clone().reshape(-1)
    assert float(analytic.abs().max()) > 0, "the loss must depend on the parameter"
    eps = 1e-6
    for i in range(analytic.numel()):
        values = []
        for sign in (1, -1):
            with torch.no_grad():
                fit_key.raw.view(-1)[i] = sign * eps
            values.append(evaluate.loss_value(video_model, target, [fit_key], plan))
        with torch.no_grad():
            fit_key.raw.zero_()
        numeric = (values[0] - values[1]) / (2 * eps)
        assert math.isclose(float(analytic[i]), numeric, rel_tol=2e-3, abs_tol=1e-9), (
            key, i, float(analytic[i]), numeric,
        )  # fmt: skip


def test_no_nan_gradient_at_zero_exposure_and_distortion(clip):
    video, plate = clip
    image_model = diffcam.ImageModel(plate=plate, exposure_samples=2)
    video_model = model.VideoModel(_scene(), video.times[:2], None, image_model)
    target = objective.Target(video.frames[:2], None, "charbonnier", 0.1)
    plan = evaluate.Plan(2, 0, {"edge_softness": 0.7})
    ks = [
        keys.make_key("image.exposure", {"init": 0.0, "scale": 0.01}, F64),
        keys.make_key("image.distortion", {"init": [0.0] * 5, "scale": 0.01}, F64),
        keys.make_key("image.gamma", {"init": 1.0, "positive": True}, F64),
    ]
    evaluate.loss_gradient(video_model, target, ks, plan)
    for k in ks:
        assert torch.isfinite(k.raw.grad).all(), k.key


def test_estimate_color_recovers_a_known_colour(clip, dtype):
    """The colour that made noisy frames (a gamma, a gain, motion blur, over the clip's plate)
    comes back from a model drawn in another colour, within the noise."""
    _, plate = clip
    truth = torch.tensor([0.2, 0.6, 0.9], dtype=dtype)
    scene = diffcam.load_scene(
        SCENE,
        dtype=dtype,
        overrides={"camera.resolution": (80, 45), **NEAR_TRUTH, "bodies.bob.color": truth},
    )
    trajectory = scene.rollout(30)
    times = torch.arange(0, 0.3, 1 / 30, dtype=dtype)
    image_model = diffcam.ImageModel(
        plate=plate.to(dtype), gain=0.9, gamma=2.2, exposure=1 / 60, exposure_samples=3
    )
    frames = diffcam.render_video(scene, trajectory, times, image_model, edge_softness=0.5)[:, 0]
    generator = torch.Generator().manual_seed(0)
    noisy = (frames + 0.02 * torch.randn(frames.shape, generator=generator, dtype=dtype)).clamp(
        0, 1
    )
    other = scene.with_overrides({"bodies.bob.color": [0.5, 0.5, 0.5]})
    color = diffcam.estimate_color(
        other, "bob", trajectory, times, noisy, image_model, frames_per_call=4, edge_softness=0.5
    )
    assert color.shape == (1, 3)
    torch.testing.assert_close(color[0], truth, atol=0.02, rtol=0)
    exact = diffcam.estimate_color(
        other, "bob", trajectory, times, frames, image_model, edge_softness=0.5
    )
    torch.testing.assert_close(exact[0], truth, atol=1e-4 if dtype == F64 else 1e-3, rtol=0)


def test_estimate_color_of_an_unseen_body_is_grey(clip):
    """A body no frame shows has no colour to estimate: mid grey, not a division by zero."""
    _, plate = clip
    scene = diffcam.load_scene(
        SCENE,
        dtype=F64,
        overrides={
            "camera.resolution": (80, 45),
            **NEAR_TRUTH,
            "camera.look_at": [5.0, -2.4, -0.567],  # along the swing plane, beside it
        },
    )
    trajectory = scene.rollout(5)
    times = torch.tensor([0.0, 0.03], dtype=F64)
    frames = plate.expand(2, 3, 45, 80)
    color = diffcam.estimate_color(
        scene, "bob", trajectory, times, frames, diffcam.ImageModel(plate=plate)
    )
    torch.testing.assert_close(color, torch.full((1, 3), 0.5, dtype=F64))
