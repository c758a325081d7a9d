"""`diffcam.fit_scene`: recover a pendulum's hinge damping from rendered frames."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import diffcam
from diffcam import FitError, FitResult, fit_scene
from diffcam.fit import Objective, Runtime, Schedule

STEPS = 15
SOFT = 0.5  # px: flat-coloured pole, silhouette gradients needed
TRUE_DAMPING = 0.3

# A box pole hinged to the world at (0, 0, 1.5), released 45 degrees from vertical; a "ghost"
# sphere 50 m behind the camera that collides with nothing and is never in view.
SCENE = """
[world]
gravity = [0.0, 0.0, -9.81]
timestep = 0.02
solver_iterations = 4

[camera]
resolution = [48, 32]
position = [0.0, -3.0, 1.1]
look_at = [0.0, 0.0, 1.1]
fov_y_deg = 40.0
background = [1.0, 1.0, 1.0]

[[bodies]]
name = "pole"
shape = "box"
size = [0.08, 0.08, 0.8]
mass = 0.5
position = [-0.28284, 0.0, 1.21716]
quat = [0.9238795, 0.0, 0.3826834, 0.0]
color = [0.1, 0.2, 0.7]
collide = false

[[bodies]]
name = "ghost"
shape = "sphere"
size = 0.1
mass = 2.0
position = [0.0, -50.0, 1.0]
color = [1.0, 0.0, 0.0]
collide = false

[[joints]]
name = "hinge"
type = "hinge"
parent = "world"
child = "pole"
anchor = [0.0, 0.0, 1.5]
axis = [0.0, 1.0, 0.0]
damping = 0.3
"""


@pytest.fixture
def scene_and_frames(tmp_path):
    path = tmp_path / "pendulum.toml"
    path.write_text(SCENE, encoding="utf-8")
    scene = diffcam.load_scene(path)
    traj = scene.rollout(STEPS)
    frames = torch.cat([scene.render(traj[t], edge_softness=SOFT) for t in range(STEPS + 1)])
    # the pole must actually swing: first and last frames differ clearly
    assert (frames[0] - frames[-1]).abs().max() > 0.3
    return path, frames.detach()


@pytest.mark.slow
def test_fit_recovers_hinge_damping(scene_and_frames):
    path, observed = scene_and_frames
    result = fit_scene(
        path,
        observed,
        {"joints.hinge.damping": {"init": 0.16, "positive": True}},
        schedule=Schedule(iterations=25, lr=0.1, edge_softness=SOFT),
        runtime=Runtime(progress=False),
    )
    assert isinstance(result, FitResult)
    fitted = float(result.values["joints.hinge.damping"])
    assert abs(fitted - TRUE_DAMPING) / TRUE_DAMPING < 0.05, fitted
    assert result.unidentifiable == []
    assert result.gradient_norms["joints.hinge.damping"] > 0
    assert result.iterations == len(result.history) <= 25
    assert result.history[-1] < 0.1 * result.history[0]
    assert result.frames.shape == observed.shape
    assert not result.frames.requires_grad
    assert float(((result.frames - observed) ** 2).mean()) < 0.1 * result.history[0]


@pytest.mark.slow
def test_invisible_mass_is_reported_unidentifiable(scene_and_frames):
    path, observed = scene_and_frames
    with pytest.warns(UserWarning, match="bodies.ghost.mass"):
        result = fit_scene(
            path,
            observed,
            {
                "joints.hinge.damping": {"init": 0.45, "bounds": (0.01, 1.0)},
                "bodies.ghost.mass": {"init": 1.0, "positive": True},
            },
            schedule=Schedule(iterations=25, lr=0.1, edge_softness=SOFT),
            runtime=Runtime(progress=False),
        )
    assert result.unidentifiable == ["bodies.ghost.mass"]
    assert float(result.values["bodies.ghost.mass"]) == pytest.approx(1.0, abs=1e-6)
    assert result.gradient_norms["bodies.ghost.mass"] == 0.0
    fitted = float(result.values["joints.hinge.damping"])
    assert abs(fitted - TRUE_DAMPING) / TRUE_DAMPING < 0.05, fitted


def test_mismatched_frame_size_raises(scene_and_frames):
    path, observed = scene_and_frames
    small = observed[:, :, :16, :24]
    with pytest.raises(ValueError, match=r"\(16, 24\).*\(32, 48\)"):
        fit_scene(
            path, small, {"joints.hinge.damping": {"init": 0.2}}, runtime=Runtime(progress=False)
        )


def test_unknown_key_path_is_a_scene_error(scene_and_frames):
    path, observed = scene_and_frames
    with pytest.raises(diffcam.SceneError, match="joints.hing.damping"):
        fit_scene(
            path, observed, {"joints.hing.damping": {"init": 0.2}}, runtime=Runtime(progress=False)
        )


@pytest.mark.slow
def test_pyramid_initial_state_and_video_file(scene_and_frames, tmp_path):
    path, observed = scene_and_frames
    video = tmp_path / "observed.gif"
    diffcam.write_video(video, observed, fps=10)
    result = fit_scene(
        path,
        video,
        {"joints.hinge.damping": {"init": 0.2, "positive": True}},
        fit_initial_state=True,
        schedule=Schedule(
            iterations=4,
            lr=0.01,  # also metres for the offsets: a jointed pole tolerates small ones only
            pyramid_levels=2,
            edge_softness=SOFT,
        ),
        runtime=Runtime(progress=False),
    )
    assert result.levels == [1, 1, 0, 0]  # coarse (pooled by 2) first, finest last
    offset = result.values["initial_state.position_offset"]
    assert offset.shape == (2, 3)
    assert float(offset.abs().sum()) > 0  # the pole's offset was fitted
    velocity = result.values["initial_state.velocity_offset"]
    assert velocity.shape == (2, 3)
    assert result.history[-1] < result.history[0] * 4  # finest level is not pooled; still sane
    assert result.frames.shape == observed.shape


@pytest.mark.slow
def test_to_overrides_maps_named_values_and_history_is_recorded(scene_and_frames):
    """A fitted value that is not a scene number (damping as a multiple of 0.1) is mapped."""
    path, observed = scene_and_frames
    seen = []

    def to_overrides(values):
        seen.append(sorted(values))
        return {"joints.hinge.damping": 0.1 * values["damping_tenths"]}

    result = fit_scene(
        path,
        observed,
        {"damping_tenths": {"init": 1.6, "positive": True}},
        to_overrides=to_overrides,
        schedule=Schedule(iterations=20, lr=0.1, edge_softness=SOFT),
        runtime=Runtime(progress=False),
    )
    assert seen and all(keys == ["damping_tenths"] for keys in seen)
    fitted = 0.1 * float(result.values["damping_tenths"])
    assert abs(fitted - TRUE_DAMPING) / TRUE_DAMPING < 0.05, fitted
    history = result.value_history["damping_tenths"]
    assert len(history) == result.iterations
    assert float(history[0]) == pytest.approx(1.6, rel=1e-6)  # before the first update
    assert abs(float(history[-1]) - 3.0) < abs(float(history[0]) - 3.0)


def test_render_rollout_matches_the_scene(scene_and_frames):
    path, observed = scene_and_frames
    frames = diffcam.render_rollout(path, None, None, STEPS, edge_softness=SOFT)
    assert frames.shape == observed.shape
    torch.testing.assert_close(frames, observed)


@pytest.mark.slow
def test_frame_every_compares_every_kth_state(scene_and_frames):
    path, observed = scene_and_frames
    every = 5
    sparse = observed[::every]
    frames = diffcam.render_rollout(path, None, None, STEPS, edge_softness=SOFT, frame_every=every)
    torch.testing.assert_close(frames, sparse)
    result = fit_scene(
        path,
        sparse,
        {"joints.hinge.damping": {"init": 0.16, "positive": True}},
        frame_every=every,
        schedule=Schedule(iterations=20, lr=0.1, edge_softness=SOFT),
        runtime=Runtime(progress=False),
    )
    fitted = float(result.values["joints.hinge.damping"])
    assert abs(fitted - TRUE_DAMPING) / TRUE_DAMPING < 0.05, fitted
    assert result.frames.shape == sparse.shape
    with pytest.raises(ValueError, match="frame_every"):
        fit_scene(
            path,
            sparse,
            {"joints.hinge.damping": {"init": 0.2}},
            steps=STEPS + 1,
            frame_every=every,
            runtime=Runtime(progress=False),
        )


@pytest.mark.slow
def test_levenberg_marquardt_fits_two_parameters_tightly(scene_and_frames):
    """Levenberg-Marquardt recovers damping and gravity within 0.5 % in a few evaluations;
    the unseen mass stays unidentifiable."""
    path, observed = scene_and_frames

    def to_overrides(values):
        gravity = torch.stack([0 * values["g"], 0 * values["g"], -values["g"]])
        return {"joints.hinge.damping": values["damping"], "world.gravity": gravity,
                "bodies.ghost.mass": values["ghost"]}  # fmt: skip

    with pytest.warns(UserWarning, match="ghost"):
        result = fit_scene(
            path,
            observed,
            {
                "damping": {"init": 0.2, "positive": True},
                "g": {"init": 8.0, "positive": True},
                "ghost": {"init": 1.0, "positive": True},
            },
            to_overrides=to_overrides,
            schedule=Schedule(iterations=12, optimizer="lm", edge_softness=SOFT),
            runtime=Runtime(progress=False),
        )
    damping, g = float(result.values["damping"]), float(result.values["g"])
    assert abs(damping - TRUE_DAMPING) / TRUE_DAMPING < 5e-3, damping
    assert abs(g - 9.81) / 9.81 < 5e-3, g
    assert result.unidentifiable == ["ghost"]
    assert float(result.values["ghost"]) == pytest.approx(1.0, abs=1e-6)
    assert result.iterations == len(result.history) <= 12
    assert result.history[-1] < 1e-3 * result.history[0]


def test_lm_jacobian_matches_reverse_mode(scene_and_frames):
    """The forward-mode Jacobian columns that Levenberg-Marquardt uses equal reverse-mode
    directional derivatives of the rendered rollout (float64)."""
    from torch.autograd import forward_ad

    path, _ = scene_and_frames
    damping = torch.tensor(0.25, dtype=torch.float64)

    def frames_of(value):
        overrides = {"joints.hinge.damping": value}
        return diffcam.render_rollout(
            path, overrides, None, STEPS, edge_softness=SOFT, dtype=torch.float64
        )

    leaf = damping.clone().requires_grad_(True)
    frames = frames_of(leaf)
    weights = torch.randn(
        frames.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    (reverse,) = torch.autograd.grad(frames, leaf, weights)
    with torch.no_grad(), forward_ad.dual_level():
        dual = forward_ad.make_dual(damping, torch.ones_like(damping))
        tangent = forward_ad.unpack_dual(frames_of(dual)).tangent
    assert abs(float(reverse)) > 1e-6
    assert float((tangent * weights).sum()) == pytest.approx(float(reverse), rel=1e-8)


def test_unknown_optimizer_is_refused(scene_and_frames):
    path, observed = scene_and_frames
    with pytest.raises(ValueError, match="optimizer must be 'auto', 'lm', 'adam' or 'lbfgs'"):
        fit_scene(
            path,
            observed,
            {"joints.hinge.damping": {"init": 0.2}},
            schedule=Schedule(optimizer="sgd"),
        )


def test_settings_records_check_their_values_and_old_keywords_are_refused(scene_and_frames):
    """The options come in `Schedule`, `Objective` and `Runtime`, each checked when made; the
    keywords they replaced are not `fit_scene`'s any more."""
    path, observed = scene_and_frames
    keys = {"joints.hinge.damping": {"init": 0.2}}
    with pytest.raises(FitError, match="pyramid_levels must be an integer >= 1"):
        Schedule(pyramid_levels=0)
    with pytest.raises(FitError, match="max_step must be positive"):
        Schedule(max_step=0.0)
    with pytest.raises(FitError, match="loss must be one of"):
        Objective(loss="l1")
    with pytest.raises(FitError, match="frames_per_chunk must be an integer >= 1"):
        Runtime(frames_per_chunk=0)
    with pytest.raises(FitError, match=r"schedule must be a diffcam\.fit\.Schedule"):
        fit_scene(path, observed, keys, schedule={"iterations": 3})
    with pytest.raises(TypeError, match="iterations"):
        fit_scene(path, observed, keys, iterations=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        Schedule().iterations = 3
    schedule = Schedule(iterations=3, optimizer="lm")
    assert schedule.replace(iterations=5) == Schedule(iterations=5, optimizer="lm")
