"""`diffcam.fit_scene` on video: joint-space starts, robust loss and masks, bounded steps,
uncertainties, bodies leaving the view, bad input, checkpoints; and a fit of the bundled
realistic clip (tests/data: another renderer, blur, noise, gamma, H.264) from a start off."""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import pytest
import torch

import diffcam
from diffcam import FitError, fit_scene
from diffcam.fit import Objective, Runtime, Schedule
from diffcam.scene import SCENES_DIR

ROOT = Path(__file__).resolve().parents[2]
SCENE = SCENES_DIR / "bob_pendulum.toml"
CLIP = ROOT / "tests" / "data" / "pendulum_realistic.mp4"
TRUTH = ROOT / "tests" / "data" / "pendulum_realistic.json"

# a bob 0.85 m below the pivot, released at 0.4 rad with -0.3 rad/s, seen close up
START = {"joints.pivot.position": 0.4, "joints.pivot.velocity": -0.3}
SMALL = {
    "camera.resolution": (48, 32),
    "camera.position": [0.0, -2.0, -0.6],
    "camera.look_at": [0.0, 0.0, -0.6],
    "bodies.bob.size": 0.08,
}
STEPS = 24  # 0.24 s


def _observed(overrides=None, noise=0.0, seed=0):
    scene = diffcam.load_scene(SCENE, overrides={**SMALL, **START, **(overrides or {})})
    trajectory = scene.rollout(STEPS)
    with torch.no_grad():
        frames = scene.render_states(trajectory[::2], edge_softness=0.7).image[:, 0]
    if noise:
        g = torch.Generator().manual_seed(seed)
        frames = frames + noise * torch.randn(frames.shape, generator=g)
    return frames.clamp(0, 1), torch.arange(0, STEPS + 1, 2) * 0.01


def _scene(**overrides):
    """The scene of the observed frames (the fitted keys replace their values)."""
    return diffcam.load_scene(SCENE, overrides={**SMALL, **START, **overrides})


@pytest.mark.slow
def test_joint_space_start_is_fitted():
    """The hinge's initial angle and rate (`joints.pivot.position` / `.velocity`) from pixels."""
    frames, times = _observed()
    result = fit_scene(
        _scene(),
        frames,
        {
            "joints.pivot.position": {"init": 0.3, "scale": 0.02},
            "joints.pivot.velocity": {"init": 0.0, "scale": 0.05},
        },
        times=times,
        schedule=Schedule(iterations=12, edge_softness=0.7),
        runtime=Runtime(progress=False),
    )
    assert abs(float(result.values["joints.pivot.position"]) - 0.4) < 2e-3
    assert abs(float(result.values["joints.pivot.velocity"]) + 0.3) < 2e-2
    assert result.status in ("converged", "budget")
    assert set(result.std) == {"joints.pivot.position", "joints.pivot.velocity"}


@pytest.mark.slow
def test_robust_loss_and_mask_resist_an_occluder():
    """A grey block (someone walking by) over the bob's path in half the frames: the plain
    squared error is pulled off; the Charbonnier loss much less; a mask of the block not at all."""
    frames, times = _observed()
    occluded = frames.clone()
    occluded[::2, :, 10:26, 14:30] = 0.35
    mask = torch.ones(len(frames), 1, 32, 48)
    mask[::2, :, 10:26, 14:30] = 0
    errors = {}
    objectives = {
        "l2": Objective(loss="l2"),
        "charbonnier": Objective(),
        "mask": Objective(weights=mask),
    }
    for name, objective in objectives.items():
        result = fit_scene(
            _scene(),
            occluded,
            {"joints.pivot.position": {"init": 0.33, "scale": 0.02}},
            times=times,
            schedule=Schedule(iterations=10, edge_softness=0.7),
            objective=objective,
            runtime=Runtime(progress=False, uncertainty=False),
        )
        errors[name] = abs(float(result.values["joints.pivot.position"]) - 0.4)
    assert errors["mask"] < 2e-3
    assert errors["charbonnier"] < errors["l2"]


@pytest.mark.parametrize("optimizer", ["adam", "lbfgs", "lm"])
def test_every_step_is_bounded(optimizer):
    """From 30 cm off, no step moves the camera more than max_step * scale."""
    frames, times = _observed()
    scale, max_step = 0.01, 2.0
    result = fit_scene(
        _scene(),
        frames,
        {"camera.position": {"init": [0.3, -2.0, -0.6], "scale": scale}},
        times=times,
        schedule=Schedule(
            iterations=8, optimizer=optimizer, max_step=max_step, lr=1.0, edge_softness=2.0
        ),
        runtime=Runtime(progress=False, uncertainty=False),
    )
    path = torch.stack(result.value_history["camera.position"])
    moves = (path[1:] - path[:-1]).abs().max(1).values
    assert float(moves.max()) <= max_step * scale + 1e-6  # (float32 rounding of the values)
    assert float(moves.max()) > 0  # it did move


@pytest.mark.slow
def test_uncertainty_grows_with_the_noise():
    """The standard deviation of a fitted start scales with the pixel noise."""
    std = []
    for noise in (0.01, 0.04):
        frames, times = _observed(noise=noise, seed=1)
        result = fit_scene(
            _scene(),
            frames,
            {"joints.pivot.position": {"init": 0.38, "scale": 0.02}},
            times=times,
            schedule=Schedule(iterations=6, edge_softness=0.7),
            objective=Objective(loss="l2"),
            runtime=Runtime(progress=False),
        )
        std.append(float(result.std["joints.pivot.position"]))
        assert abs(float(result.values["joints.pivot.position"]) - 0.4) < 5 * std[-1] + 1e-3
    assert 2.0 < std[1] / std[0] < 8.0, std


def test_a_body_leaving_the_view_is_reported():
    """A camera so close that the bob leaves the image at the ends of its swing: the fit runs
    and lists the frames it is out of view in."""
    over = {"camera.position": [0.0, -0.45, -0.85], "camera.look_at": [0.0, 0.0, -0.85]}
    frames, times = _observed(over)
    result = fit_scene(
        _scene(**over),
        frames,
        {"joints.pivot.velocity": {"init": -0.25, "scale": 0.05}},
        times=times,
        schedule=Schedule(iterations=4, edge_softness=0.7),
        runtime=Runtime(progress=False),
    )
    assert result.out_of_view.get("bob"), result.out_of_view
    assert "leaves the view" in result.message
    assert math.isfinite(result.history[-1])


def test_nothing_in_view_is_unidentifiable_not_a_crash():
    frames, times = _observed()
    away = {"camera.look_at": [0.0, -4.0, -0.6]}  # the camera looks the other way
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fit_scene(
            _scene(**away),
            frames,
            {"joints.pivot.position": {"init": 0.3}},
            times=times,
            schedule=Schedule(iterations=4),
            runtime=Runtime(progress=False),
        )
    assert result.status == "unidentifiable"
    assert result.unidentifiable == ["joints.pivot.position"]
    assert "no moving body is in view" in result.message
    assert math.isinf(float(result.std["joints.pivot.position"]))


def test_blank_video_is_a_clear_error():
    with pytest.raises(FitError, match="uniform.*all-black"):
        fit_scene(
            _scene(),
            torch.zeros(5, 3, 32, 48),
            {"joints.pivot.position": {"init": 0.3}},
            runtime=Runtime(progress=False),
        )


def test_actions_and_video_lengths(tmp_path):
    """Actions longer than the video: used up to its end, with a warning; shorter: an error
    that says how to fix it."""
    frames, times = _observed()
    scene = diffcam.load_scene(
        SCENES_DIR / "pendulum.toml", overrides={"camera.resolution": (48, 32)}
    )
    with torch.no_grad():
        frames = scene.render_states(scene.rollout(STEPS)[::2]).image[:, 0]
    keys = {"joints.pivot.damping": {"init": 0.03, "positive": True}}
    with pytest.warns(UserWarning, match="shorter than the action sequence"):
        fit_scene(
            scene,
            frames,
            keys,
            actions=torch.zeros(100, 1),
            times=times,
            schedule=Schedule(iterations=1),
            runtime=Runtime(progress=False, uncertainty=False),
        )
    with pytest.raises(ValueError, match="actions cover 10 steps .* video lasts"):
        fit_scene(
            scene,
            frames,
            keys,
            actions=torch.zeros(10, 1),
            times=times,
            schedule=Schedule(iterations=1),
            runtime=Runtime(progress=False),
        )


def test_times_out_of_order_name_the_entries_the_cause_and_the_fix():
    keys = {"joints.pivot.position": {"init": 0.3}}
    frames = torch.rand(6, 3, 32, 48, generator=torch.Generator().manual_seed(0))
    times = torch.tensor([0.0, 0.1, 0.3, 0.2, 0.4, 0.5], dtype=torch.float64)
    with pytest.raises(FitError) as info:
        fit_scene(_scene(), frames, keys, times=times, runtime=Runtime(progress=False))
    msg = str(info.value)
    assert "times[3] = 0.2 s <= times[2] = 0.3 s" in msg and "1 of 5 steps" in msg
    assert "decode order" in msg and "diffcam.read_video(path)" in msg and "fps=" in msg
    with pytest.raises(FitError, match=r"times\[1\] = 0.1 s <= times\[0\] = 0.1 s.*repeat"):
        fit_scene(
            _scene(),
            frames,
            keys,
            times=[0.1, 0.1, 0.2, 0.3, 0.4, 0.5],
            runtime=Runtime(progress=False),
        )
    # a step back is named before an earlier repeat: it says more about the cause
    mixed = [0.0, 0.1, 0.1, 0.3, 0.2, 0.5]
    with pytest.raises(FitError, match=r"2 of 5 steps .*times\[4\] = 0.2 s <= times\[3\]"):
        fit_scene(_scene(), frames, keys, times=mixed, runtime=Runtime(progress=False))
    bad = times.clone()
    bad[4] = float("nan")
    with pytest.raises(FitError, match=r"1 of 6 are not finite: times\[4\] = nan"):
        fit_scene(_scene(), frames, keys, times=bad, runtime=Runtime(progress=False))
    with pytest.raises(FitError, match=r">= 0.*times\[0\] = -0.5 s"):
        fit_scene(
            _scene(),
            frames,
            keys,
            times=torch.arange(6) * 0.1 - 0.5,
            runtime=Runtime(progress=False),
        )
    # a Video in decode order (as read_video used to give an AVI with B-frames)
    video = diffcam.Video.from_frames(frames, 10, times=times)
    with pytest.raises(FitError, match=r"the video's times must be increasing.*times\[3\]"):
        fit_scene(_scene(), video, keys, runtime=Runtime(progress=False))


@pytest.mark.slow
def test_actions_that_exactly_cover_the_video_are_enough(dtype):
    """(T - 1) * frame_every actions cover frames every frame_every steps, whatever rounding
    the frame times in the scene's dtype have (in float32 the frame at 20 * 0.02 s is at
    0.40000000596 s: step 40, not a 41st)."""
    from diffcam.fit.model import VideoModel

    small = {"camera.resolution": (48, 32)}
    scene = diffcam.load_scene(SCENES_DIR / "pendulum.toml", dtype=dtype, overrides=small)
    for every in (1, 2, 3):
        for count in range(2, 62):
            steps = (count - 1) * every
            times = (torch.arange(count, dtype=torch.float64) * (every * 0.01)).to(dtype)
            model = VideoModel(scene, times, torch.zeros(steps, 1, dtype=dtype), None)
            assert (model.steps, model.actions.shape[0]) == (steps, steps), (every, count)
    # the call of examples/texture_identification.py --quick: 21 frames, one every 2 steps
    frames = torch.rand(21, 3, scene.camera.height, scene.camera.width, dtype=dtype)
    result = fit_scene(
        scene,
        frames,
        {"joints.pivot.damping": {"init": 0.03, "positive": True}},
        actions=torch.zeros(40, 1),
        frame_every=2,
        schedule=Schedule(iterations=1),
        runtime=Runtime(progress=False, uncertainty=False),
    )
    assert result.iterations >= 1


def test_corrupt_video_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "phone.mp4"
    bad.write_bytes(bytes(range(256)) * 64)
    with pytest.raises(diffcam.VideoError, match="phone.mp4"):
        fit_scene(
            _scene(), bad, {"joints.pivot.position": {"init": 0.3}}, runtime=Runtime(progress=False)
        )


def test_checkpoint_resumes_where_it_stopped(tmp_path):
    frames, times = _observed()
    keys = {"joints.pivot.position": {"init": 0.35, "scale": 0.02}}
    path = tmp_path / "fit.pt"
    kw = dict(
        times=times,
        schedule=Schedule(iterations=6, edge_softness=(1.0, 0.7)),
        runtime=Runtime(progress=False, uncertainty=False, checkpoint=path),
    )
    first = fit_scene(_scene(), frames, keys, **kw)
    assert path.exists() and len(first.stages) == 2
    again = fit_scene(_scene(), frames, keys, **kw)  # every stage done: nothing to run
    assert again.history == first.history
    torch.testing.assert_close(
        again.values["joints.pivot.position"], first.values["joints.pivot.position"]
    )
    with pytest.raises(FitError, match="belongs to another fit"):
        fit_scene(_scene(), frames, {"joints.pivot.velocity": {"init": 0.0}}, **kw)


@pytest.mark.slow
def test_realistic_clip_from_ten_percent_off():
    """The bundled clip (not our renderer: an ellipsoidal two-coloured bob, string, shadow,
    clutter, blur, noise, gamma, H.264), its first 4 s at 160 x 90 every other frame: from a
    length 10 % off and a start off, length and the start come back."""
    data = json.loads(TRUTH.read_text())
    truth, mid = data["physics"], data["frames"]["theta_mid"][0]  # frame 0's mid-exposure
    video = diffcam.read_video(CLIP, size=(160, 90), seconds=(0.0, 4.0), stride=2)
    plate = diffcam.imaging.clean_plate(diffcam.read_video(CLIP, size=(160, 90), stride=6).frames)
    camera = {"camera.position": [-0.0175, -2.408, -0.567], "camera.look_at": [-0.0175, 0.0, -0.567],
              "camera.up": [0.027, 0.0, 1.0], "camera.fov_y_deg": 38.0, "bodies.bob.size": 0.03,
              "bodies.bob.color": [0.72, 0.41, 0.13]}  # fmt: skip
    scene = diffcam.load_scene(SCENE, overrides={"camera.resolution": (160, 90), **camera})

    def to_overrides(v):
        length = v["length"]
        return {"bodies.bob.position": torch.stack([0 * length, 0 * length, -length]),
                "joints.pivot.position": v["theta0"], "joints.pivot.velocity": v["theta_dot0"]}  # fmt: skip

    keys = {"length": {"init": 0.85 * 1.1, "positive": True},
            "theta0": {"init": 0.42, "scale": 0.02}, "theta_dot0": {"init": -0.5, "scale": 0.05}}  # fmt: skip
    result = fit_scene(
        scene,
        video,
        keys,
        to_overrides=to_overrides,
        image_model=diffcam.ImageModel(plate=plate, exposure=1 / 60, exposure_samples=2),
        schedule=Schedule(iterations=16, horizons=(1.5, 4.5), edge_softness=(1.5, 0.7)),
        runtime=Runtime(progress=False),
    )
    length = float(result.values["length"])
    assert abs(length / truth["L"] - 1) < 0.01, (length, result.message)
    # the camera is held at a guess here (fitted in examples/real_pendulum.py): the start takes
    # up some of its error
    assert abs(float(result.values["theta0"]) - mid) < 0.02
    assert 0 < float(result.std["length"]) < 0.02
    assert result.status in ("converged", "budget") and result.explained > 0.3
