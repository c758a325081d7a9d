"""`fit_scene`: fit a scene's parameters, its camera and the camera's image formation to a video.

::

    video = diffcam.read_video("pendulum.mp4", size=(160, 90))
    plate = diffcam.imaging.clean_plate(video.frames)
    result = diffcam.fit_scene(
        scene, video,
        keys={"joints.pivot.damping": {"init": 0.01, "positive": True},
              "joints.pivot.position": {"init": 0.4, "scale": 0.05}},
        image_model=diffcam.ImageModel(plate=plate),
        schedule=diffcam.fit.Schedule(iterations=100, optimizer="lm"),
    )
    result.values, result.std, result.status, result.out_of_view

The options come in three records (`diffcam.fit.settings`): a `Schedule` (how the optimiser
runs), an `Objective` (what the frames are compared by) and a `Runtime` (progress, checkpoints,
memory, compiling, uncertainties).

A fit runs in stages, coarse to fine: soft silhouettes from wide to narrow (``edge_softness``),
optionally a pyramid (frames average-pooled) and growing horizons (the first seconds first).
Each stage runs the optimiser on the robust loss of its frames (`objective`); the raw
parameters carry over. At the start the keys the pixels do not see are reported as
unidentifiable and left alone; at the end the covariance of the fitted values gives their
standard deviations.
"""

from __future__ import annotations

import dataclasses
import math
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

import torch

from ..formation import ImageModel
from . import evaluate
from .evaluate import Plan
from .keys import FitKey, make_key
from .model import POSITION_OFFSET, VELOCITY_OFFSET, VideoModel
from .objective import Target
from .result import FitError, FitResult, parameter_covariance
from .settings import Objective, Runtime, Schedule, Silhouettes
from .stages import plans, run_stages

__all__ = ["fit_scene"]

_LM_MAX_SCALARS = 64
# A fit over a clean plate whose bodies explain less of the moving pixels than this is "poor"
# (a good fit of the realistic test clip explains about half of them, a lost one next to none).
_EXPLAINED_AT_LEAST = 0.25


def _with_silhouettes(frames, plate, weights, silhouettes: Silhouettes | None):
    """(frames, plate, weights) with the silhouette channel appended (weight x mask; the plate
    shows no body: 0), or as given without silhouettes."""
    if silhouettes is None:
        return frames, plate, weights
    mask = torch.as_tensor(silhouettes.mask).to(device=frames.device, dtype=frames.dtype)
    if mask.dim() == 3:
        mask = mask[:, None]
    t, _, h, w = frames.shape
    if tuple(mask.shape) != (t, 1, h, w):
        raise FitError(
            f"silhouettes.mask must be (T, 1, H, W) = {(t, 1, h, w)} like the observed frames, "
            f"got {tuple(mask.shape)}"
        )
    if not (silhouettes.weight > 0 and math.isfinite(silhouettes.weight)):
        raise FitError(f"silhouettes.weight must be > 0, got {silhouettes.weight!r}")
    frames = torch.cat([frames, silhouettes.weight * mask], 1)
    if plate is not None:
        plate = torch.cat([plate, plate.new_zeros(1, h, w)], 0)
    if weights is not None:
        weights = torch.as_tensor(weights, device=frames.device).to(frames.dtype)
        weights = weights.reshape((1,) * (4 - weights.dim()) + tuple(weights.shape))
        colours = weights.expand(weights.shape[0], 3, h, w)
        weights = torch.cat([colours, colours.mean(1, keepdim=True)], 1)
    return frames, plate, weights


def _load(scene, dtype):
    from ..scene import Scene, load_scene

    if isinstance(scene, Scene):
        return scene if scene.batch_size == 1 else scene.with_overrides({}, batch_size=1)
    return load_scene(scene, batch_size=1, dtype=dtype)


def _observed(observed, scene, times, frame_every: int, steps):
    """(frames (T, 3, H, W), times (T,) float64) of the observation, checked."""
    from ..video import Video, read_video

    width, height = scene.camera.width, scene.camera.height
    if isinstance(observed, (str, Path)):
        observed = read_video(observed, size=(width, height), dtype=scene.dtype)
    if isinstance(observed, Video):
        frames, video_times = observed.frames, observed.times
    else:
        frames = torch.as_tensor(observed).detach()
        video_times = None
    frames = frames.to(device=scene.device, dtype=scene.dtype)
    if frames.dim() != 4 or frames.shape[1] != 3:
        raise FitError(f"observed frames must have shape (T, 3, H, W), got {tuple(frames.shape)}")
    if tuple(frames.shape[-2:]) != (height, width):
        raise FitError(
            f"observed frames are {tuple(frames.shape[-2:])} (H, W) but the scene camera renders "
            f"{(height, width)} (H, W) (camera.resolution = [{width}, {height}]); read the video "
            f"at that size: diffcam.read_video(path, size=({width}, {height}))"
        )
    count = frames.shape[0]
    if count < 2:
        raise FitError(f"need at least 2 observed frames, got {count}")
    if not bool(torch.isfinite(frames).all()):
        raise FitError("observed frames contain NaN or infinite values")
    if float(frames.amax() - frames.amin()) < 1e-3:
        raise FitError(
            f"the observed frames are uniform (every pixel of every frame is "
            f"{float(frames.mean()):.3g}: an all-black or blank video?): nothing to fit"
        )
    if frame_every < 1 or int(frame_every) != frame_every:
        raise FitError(f"frame_every must be an integer >= 1, got {frame_every!r}")
    times_given = times
    if times is None:
        if video_times is not None:  # the simulation starts at the first frame read
            times = video_times - video_times[0]
        else:
            if steps is not None and steps != (count - 1) * frame_every:
                raise FitError(
                    f"steps = {steps} but {count} observed frames, one every {frame_every} steps, "
                    f"need steps = (T - 1) * frame_every = {(count - 1) * frame_every}"
                )
            times = torch.arange(count, dtype=torch.float64) * (frame_every * scene.timestep)
    from_video = video_times is not None and times_given is None
    times = torch.as_tensor(times, dtype=torch.float64).reshape(-1)
    if times.shape[0] != count:
        raise FitError(f"times has {times.shape[0]} entries for {count} observed frames")
    _check_times(times, "the video's times" if from_video else "times")
    return frames, times.to(device=scene.device, dtype=scene.dtype)


def _check_times(times: torch.Tensor, name: str) -> None:
    """FitError naming the first wrong entry of ``times`` ((T,) float64 seconds), the likely
    cause and the fix, unless they are finite, increasing and >= 0."""
    fix = (
        "read the video with diffcam.read_video(path) (it gives presentation order; pass "
        "fps= there, or use video.retimed(fps), when its timestamps are broken or its frame "
        "rate is wrong), or give times= (s) yourself"
    )
    bad = (~torch.isfinite(times)).nonzero().flatten().tolist()
    if bad:
        i = bad[0]
        raise FitError(
            f"{name} must be finite (s), but {len(bad)} of {len(times)} are not finite: "
            f"times[{i}] = {float(times[i])}; {fix}"
        )
    wrong = (times[1:] <= times[:-1]).nonzero().flatten().tolist()
    if wrong:
        back = (times[1:] < times[:-1]).nonzero().flatten().tolist()
        i = (back or wrong)[0] + 1  # a step back says more than a repeat
        cause = (
            "timestamps out of order (a video read in decode order?)"
            if back
            else "timestamps repeat (a clock that repeats, or times rounded coarser than the "
            "frame interval?)"
        )
        raise FitError(
            f"{name} must be increasing (s), but {len(wrong)} of {len(times) - 1} steps are "
            f"not: times[{i}] = {float(times[i]):.6g} s <= times[{i - 1}] = "
            f"{float(times[i - 1]):.6g} s: {cause}; {fix}"
        )
    if float(times[0]) < 0:
        raise FitError(
            f"{name} must be >= 0 (s; the simulation starts at t = 0), but times[0] = "
            f"{float(times[0]):.6g} s; shift them (times - times[0]) or give times= from 0"
        )


def fit_scene(
    scene,
    observed,
    keys: Mapping[str, dict],
    actions=None,
    steps: int | None = None,
    *,
    times=None,
    frame_every: int = 1,
    image_model: ImageModel | None = None,
    to_overrides=None,
    fit_initial_state: bool = False,
    dtype: torch.dtype = torch.float32,
    schedule: Schedule | None = None,
    objective: Objective | None = None,
    runtime: Runtime | None = None,
) -> FitResult:
    """Fit scene parameters, camera and image formation so that the model's frames match a video.

    Args:
        scene: a `diffcam.Scene` (from `load_scene`; its batch size is ignored) or a scene file.
        observed: a `diffcam.Video` (`read_video`; its timestamps are used, the simulation
            starting at its first frame), a video file (read at the camera's resolution), or
            (T, 3, H, W) frames in [0, 1] with frame i at ``times[i]`` (default
            i * frame_every * dt). H, W must be the camera's. A frame shows the middle of its
            exposure (see `diffcam.ImageModel`).
        keys: key -> ``{"init": value, "positive": bool, "bounds": (lo, hi), "scale": s,
            "lr": lr}`` (see `diffcam.fit.keys`): scene override paths (``bodies.<name>.<key>``,
            ``joints.<name>.position`` and ``.velocity`` for a start in joint space,
            ``camera.<key>``...), ``image.<field>`` for the `ImageModel` (``image.gain``,
            ``image.offset``, ``image.gamma``, ``image.distortion``, ``image.exposure``,
            ``image.time_offset``), or any names ``to_overrides`` maps to those.
        actions: (steps, n_actuators) known actions per physics step, covering the video;
            None = none.
        steps: for frames given as a tensor: must be (T - 1) * frame_every (a check).
        times: (T,) frame times (s), instead of the video's or the default.
        frame_every: physics steps between frames given as a tensor without ``times``.
        image_model: the camera's `ImageModel` (a clean plate, response, distortion, exposure,
            time offset); default an ideal camera.
        to_overrides: optional function from the fitted values (key -> tensor) to the keys
            above, for parameters that are not one key (a pendulum's length setting both a
            body's position and a joint's anchor).
        fit_initial_state: also fit offsets (N, 3) to the dynamic bodies' initial positions
            (m) and velocities (m/s).
        dtype: the scene's dtype when ``scene`` is a file.
        schedule: how the optimiser runs (a `Schedule`: iterations, optimizer, lr,
            edge_softness, horizons, pyramid_levels, tolerance, max_step); default
            ``Schedule()``.
        objective: what the frames are compared by (an `Objective`: loss, loss_scale,
            weights, silhouettes, supersample); default ``Objective()``.
        runtime: progress, checkpoint, frames_per_chunk, compile_physics and uncertainty (a
            `Runtime`); default ``Runtime()``.

    Returns:
        A `FitResult`.

    Raises:
        diffcam.SceneError: a key path the scene does not have, or a bad value for it.
        FitError (a ValueError): observed frames that do not fit the camera or are blank,
            actions shorter than the video, bad keys, schedules or options.
    """
    start = time.perf_counter()
    schedule = _settings(schedule, Schedule, "schedule")
    objective = _settings(objective, Objective, "objective")
    runtime = _settings(runtime, Runtime, "runtime")
    if not isinstance(keys, Mapping):
        raise FitError(f"keys must be a dict of key -> spec, got {type(keys).__name__}")
    base = _load(scene, dtype)
    dtype, device = base.dtype, base.device
    fit_keys = [make_key(k, spec, dtype, device) for k, spec in keys.items()]
    frames, times = _observed(observed, base, times, frame_every, steps)
    if actions is not None:
        actions = torch.as_tensor(actions).detach().to(device=device, dtype=dtype)
    image_model = _with_plate(image_model, frames)
    plate = None if image_model is None else image_model.plate
    silhouettes = objective.silhouettes
    observed, plate, weights = _with_silhouettes(frames, plate, objective.weights, silhouettes)
    target = Target(observed, weights, objective.loss, objective.loss_scale, plate=plate)
    model = VideoModel(
        base, times, actions, image_model, to_overrides, runtime.compile_physics,
        silhouette_weight=0.0 if silhouettes is None else silhouettes.weight,
    )  # fmt: skip
    if fit_initial_state:
        for name in (POSITION_OFFSET, VELOCITY_OFFSET):
            zeros = torch.zeros(len(base.body_names), 3, dtype=dtype, device=device)
            fit_keys.append(make_key(name, {"init": zeros, "scale": 0.01}, dtype, device))
    render = {"supersample": objective.supersample}
    chunk = runtime.frames_per_chunk
    stages = plans(
        times, int(schedule.pyramid_levels), schedule.edge_softness, schedule.horizons, render,
        chunk,
    )  # fmt: skip

    # with no evaluations to spend, every key stays trainable (for the uncertainty at init)
    seen = _identify(model, target, fit_keys, stages[0], measure=schedule.iterations > 0)
    trainable = [k for k in fit_keys if k.key not in seen.unidentifiable]
    chosen = _choose(schedule.optimizer, sum(k.raw.numel() for k in trainable))
    done = run_stages(
        model, target, fit_keys, trainable, stages, chosen, schedule.iterations, schedule.lr,
        schedule.max_step, schedule.tolerance, runtime.progress, runtime.checkpoint,
    )  # fmt: skip
    final = Plan(len(times), 0, stages[-1].render, chunk)
    return _finish(
        model, target, fit_keys, trainable, seen, done, final, runtime.uncertainty, start
    )


def _settings(value, kind: type, name: str):
    """``value``, or ``kind()`` for None; a FitError for anything else."""
    if value is None:
        return kind()
    if not isinstance(value, kind):
        raise FitError(
            f"{name} must be a diffcam.fit.{kind.__name__} (or None for the defaults), got "
            f"{type(value).__name__}"
        )
    return value


def _with_plate(image_model: ImageModel | None, frames: torch.Tensor) -> ImageModel | None:
    """The image model with its plate on the frames' device and dtype, checked."""
    if image_model is None or image_model.plate is None:
        return image_model
    plate = torch.as_tensor(image_model.plate).to(device=frames.device, dtype=frames.dtype)
    if tuple(plate.shape) != tuple(frames.shape[1:]):
        raise FitError(
            f"image_model.plate must be (3, H, W) = {tuple(frames.shape[1:])} like the observed "
            f"frames, got {tuple(plate.shape)}"
        )
    return image_model.replace(plate=plate)


def _choose(optimizer: str, scalars: int) -> str:
    if optimizer == "auto":
        return "lm" if scalars <= _LM_MAX_SCALARS else "adam"
    if optimizer == "lm" and scalars > _LM_MAX_SCALARS:
        raise FitError(
            f"optimizer='lm' builds a Jacobian column per fitted scalar; these keys have "
            f"{scalars} (at most {_LM_MAX_SCALARS}): use optimizer='adam' for textures "
            "and other large parameters"
        )
    return optimizer


@dataclasses.dataclass
class _Seen:
    """What the frames see at the initial values."""

    unidentifiable: list[str]
    gradient_norms: dict[str, float]
    sensitivity: dict[str, float]
    messages: list[str]
    in_view: bool


def _identify(
    model: VideoModel, target: Target, keys: list[FitKey], first: Plan, measure: bool = True
) -> _Seen:
    """Keys the pixels do not depend on at the initial values (they stay at ``init``, and
    their ``raw`` stops requiring grad; not ``measure``d: none), and whether any moving body
    is in view at all."""
    with torch.no_grad():
        built = model.build({k.key: k.value().detach() for k in keys})  # SceneError early
    visible = model.visible(built)[:, 0]
    dynamic = [i for i, s in enumerate(model.scene.world.is_static) if not s]
    seen = _Seen([], {}, {}, [], bool(visible[:, dynamic].any()) if dynamic else True)
    if not seen.in_view:
        seen.unidentifiable = [k.key for k in keys]
        seen.messages.append(
            "no moving body is in view in any frame at the initial values: the camera or the "
            "initial state is off (or the bodies leave the view); nothing can be fitted"
        )
    elif keys and measure:
        if sum(k.raw.numel() for k in keys) <= _LM_MAX_SCALARS:
            eq = evaluate.normal_equations(model, target, keys, keys, first, priors=False)
            column, index = eq.jtj.diagonal().sqrt(), 0
            for k in keys:
                part = slice(index, index + k.raw.numel())
                seen.sensitivity[k.key] = float(column[part].norm())
                # d loss / d raw = 2 J^T r / sum(w), and loss = sum(r^2) / sum(w)
                seen.gradient_norms[k.key] = (
                    float(eq.jtr[part].norm()) * 2 * eq.loss / max(eq.cost, 1e-300)
                )
                index += k.raw.numel()
            measure = seen.sensitivity
        else:
            evaluate.loss_gradient(model, target, keys, first)
            for k in keys:
                seen.gradient_norms[k.key] = 0.0 if k.raw.grad is None else float(k.raw.grad.norm())
            measure = seen.gradient_norms
        top = max([v for v in measure.values() if math.isfinite(v)] or [0.0])
        seen.unidentifiable = [
            k.key for k in keys
            if not (math.isfinite(measure[k.key]) and measure[k.key] > 1e-8 * max(top, 1e-300))
        ]  # fmt: skip
        if seen.unidentifiable:
            seen.messages.append(
                "the pixels do not depend on " + ", ".join(repr(k) for k in seen.unidentifiable)
                + " at the initial values; left at their initial values"
            )  # fmt: skip
            warnings.warn("fit_scene: " + seen.messages[-1], stacklevel=3)
    for k in keys:
        k.raw.grad = None
        if k.key in seen.unidentifiable:
            k.raw.requires_grad_(False)
    return seen


def _finish(model, target, keys, trainable, seen: _Seen, done, final: Plan, uncertainty, start):
    """The `FitResult`: values, frames, what left the view, standard deviations, status."""
    values = {k.key: k.value().detach().clone() for k in keys}
    with torch.no_grad():
        built = model.build(values)
        shown = target.frames.new_empty(target.frames.shape)  # filled in place, chunk by chunk
        for index in final.chunks():
            shown[index] = model.frames(built, index, **final.render)[:, 0]
        shown = shown[:, :3]  # the colours (without a silhouette channel)
        visible = model.visible(built)[:, 0]
    names = model.scene.body_names
    dynamic = [i for i, s in enumerate(model.scene.world.is_static) if not s]
    out_of_view = {
        names[i]: [int(t) for t in torch.nonzero(~visible[:, i]).flatten()]
        for i in dynamic
        if not bool(visible[:, i].all())
    }
    messages = list(seen.messages)
    if out_of_view:
        left = "; ".join(f"{n!r} leaves the view in {len(f)} of {len(visible)} frames"
                         for n, f in out_of_view.items())  # fmt: skip
        messages.append(f"in the fitted model {left} (those frames see it only as absent)")
    std, cov, cov_keys, eq = _uncertainty(model, target, keys, trainable, final, messages) if (
        uncertainty and trainable and sum(k.raw.numel() for k in trainable) <= _LM_MAX_SCALARS
    ) else ({}, None, [], None)  # fmt: skip
    for key in seen.unidentifiable:
        std[key] = torch.full_like(values[key], math.inf)
    share = evaluate.explained(model, target, keys, final) if seen.in_view else None
    status = done.status
    if status in ("converged", "budget", "stalled") and trainable:
        loss_now = done.stages[-1]["loss"] if done.stages else math.nan
        messages.insert(0, f"{status} after {len(done.history)} evaluations, loss {loss_now:.4g}")
        if share is not None and share < _EXPLAINED_AT_LEAST:
            status = "poor"
            messages.insert(1, (
                f"but the model explains only {share:.0%} of the moving pixels (residuals in the "
                "bodies' windows against the plate alone): its bodies are not where the video's "
                "are, a wrong local minimum; start closer (e.g. from tracked positions), or "
                "add a coarser first stage (wider edge_softness, shorter horizons)"
            ))  # fmt: skip
    return FitResult(
        values=values, history=done.history, gradient_norms=seen.gradient_norms,
        unidentifiable=seen.unidentifiable, frames=shown, iterations=len(done.history),
        seconds=time.perf_counter() - start, levels=done.levels, value_history=done.value_history,
        std=std, covariance=cov, covariance_keys=cov_keys, sensitivity=seen.sensitivity,
        status=status, message="; ".join(messages), out_of_view=out_of_view, stages=done.stages,
        explained=share, normal_equations=eq,
    )  # fmt: skip


def _uncertainty(model, target, keys, trainable, final: Plan, messages: list[str]):
    """(std per key, covariance (P, P) in value units, its keys, the normal equations) at the
    solution."""
    from physics import SimulationError

    from ..errors import SceneError

    try:
        eq = evaluate.normal_equations(model, target, keys, trainable, final)
    except (SceneError, SimulationError) as error:  # the Jacobian's steps leave the valid range
        messages.append(f"no uncertainty: the Jacobian at the solution failed ({error})")
        return {}, None, [], None
    cov = parameter_covariance(eq, final.horizon, trainable)
    variances = cov.diagonal().clamp_min(0)
    std, index = {}, 0
    for k in trainable:
        n = k.raw.numel()
        std[k.key] = variances[index : index + n].sqrt().view_as(k.raw).to(k.raw.dtype)
        index += n
    return std, cov, [(k.key, i) for k in trainable for i in range(k.raw.numel())], eq
