"""`fit_scene`: fit a scene's parameters, its camera and the camera's image formation to a video.

::

    video = diffcam.read_video("pendulum.mp4", size=(160, 90))
    plate = diffcam.imaging.clean_plate(video.frames)
    result = diffcam.fit_scene(
        scene, video,
        keys={"joints.pivot.damping": {"init": 0.01, "positive": True},
              "joints.pivot.position": {"init": 0.4, "scale": 0.05}},
        image_model=diffcam.ImageModel(plate=plate),
    )
    result.values, result.std, result.status, result.out_of_view

A fit runs in stages, coarse to fine: soft silhouettes from wide to narrow (``edge_softness``),
optionally a pyramid (frames average-pooled) and growing horizons (the first seconds first).
Each stage runs the optimiser on the robust loss of its frames (`objective`); the raw
parameters carry over. At the start the keys the pixels do not see are reported as
unidentifiable and left alone; at the end the covariance of the fitted values gives their
standard deviations.
"""

from __future__ import annotations

import math
import os
import tempfile
import time
import warnings
from collections.abc import Mapping
from pathlib import Path

import torch

from ..formation import ImageModel
from . import evaluate
from .evaluate import Plan
from .keys import make_key
from .model import POSITION_OFFSET, VELOCITY_OFFSET, VideoModel
from .objective import Target
from .optimizers import Problem, adam, lbfgs, levenberg_marquardt
from .result import FitError, FitResult, covariance, value_covariance

__all__ = ["fit_scene", "DEFAULT_SOFTNESS"]

DEFAULT_SOFTNESS = (2.0, 1.0, 0.5)  # px: wide silhouettes first, then narrow
_LM_MAX_SCALARS = 64
# A fit over a clean plate whose bodies explain less of the moving pixels than this is "poor"
# (a good fit of the realistic test clip explains about half of them, a lost one next to none).
_EXPLAINED_AT_LEAST = 0.25


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
    if times is None:
        if video_times is not None:
            times = video_times
        else:
            if steps is not None and steps != (count - 1) * frame_every:
                raise FitError(
                    f"steps = {steps} but {count} observed frames, one every {frame_every} steps, "
                    f"need steps = (T - 1) * frame_every = {(count - 1) * frame_every}"
                )
            times = torch.arange(count, dtype=torch.float64) * (frame_every * scene.timestep)
    times = torch.as_tensor(times, dtype=torch.float64).reshape(-1)
    if times.shape[0] != count:
        raise FitError(f"times has {times.shape[0]} entries for {count} observed frames")
    if bool((times[1:] <= times[:-1]).any()) or float(times[0]) < 0:
        raise FitError("times must be increasing and >= 0 (s)")
    return frames, times.to(device=scene.device, dtype=scene.dtype)


def _schedule(values, name: str) -> list:
    if isinstance(values, (int, float)):
        return [values]
    values = list(values)
    if not values:
        raise FitError(f"{name}: give at least one value")
    return values


def _stages(count: int, levels: int, softness, horizons, times) -> list[tuple[int, float, int]]:
    """(horizon in frames, softness in px, pyramid level) per stage: the schedules are
    stretched to the longest one."""
    soft = [float(s) for s in _schedule(softness, "edge_softness")]
    if any(s < 0 or not math.isfinite(s) for s in soft):
        raise FitError(f"edge_softness must be >= 0 (pixels), got {softness!r}")
    pyramid = list(range(levels - 1, -1, -1))
    spans = [count]
    if horizons is not None:
        spans = []
        for h in _schedule(horizons, "horizons"):
            if not (isinstance(h, (int, float)) and h > 0):
                raise FitError(f"horizons are durations in seconds (> 0), got {h!r}")
            spans.append(max(2, int((times <= float(times[0]) + h + 1e-9).sum())))
    n = max(len(soft), len(pyramid), len(spans))

    def pick(values, i):
        return values[min(len(values) - 1, i * len(values) // n)]

    return [(pick(spans, i), pick(soft, i), pick(pyramid, i)) for i in range(n)]


class _Checkpoint:
    """Atomic snapshots of a fit's progress (raw values, stage, history) for a resume."""

    def __init__(self, path, signature: dict, every_seconds: float = 10.0):
        self.path = None if path is None else Path(path)
        self.signature = signature
        self.every = every_seconds
        self.last = time.perf_counter()

    def load(self) -> dict | None:
        if self.path is None or not self.path.exists():
            return None
        try:
            state = torch.load(self.path, weights_only=False)
        except Exception as error:  # noqa: BLE001 - any unreadable file: report and start afresh
            raise FitError(
                f"checkpoint {self.path}: cannot read it ({error}); delete it to start afresh"
            ) from None
        if state.get("signature") != self.signature:
            raise FitError(
                f"checkpoint {self.path} belongs to another fit (other keys, frames or stages); "
                "delete it or pass another checkpoint path"
            )
        return state

    def save(self, state: dict, force: bool = False) -> None:
        if self.path is None or (not force and time.perf_counter() - self.last < self.every):
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.")
        os.close(fd)
        try:
            torch.save({**state, "signature": self.signature}, tmp)
            os.replace(tmp, self.path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        self.last = time.perf_counter()


def fit_scene(
    scene,
    observed,
    keys: Mapping[str, dict],
    actions=None,
    steps: int | None = None,
    *,
    times=None,
    image_model: ImageModel | None = None,
    weights=None,
    loss: str = "charbonnier",
    loss_scale: float = 0.1,
    iterations: int = 200,
    lr: float | None = None,
    optimizer: str = "auto",
    pyramid_levels: int = 1,
    edge_softness=DEFAULT_SOFTNESS,
    horizons=None,
    max_step: float = 2.0,
    supersample: int = 1,
    dtype: torch.dtype = torch.float32,
    progress: bool = True,
    tolerance: float = 1e-7,
    fit_initial_state: bool = False,
    to_overrides=None,
    frame_every: int = 1,
    compile_physics: bool = False,
    uncertainty: bool = True,
    checkpoint: str | os.PathLike | None = None,
    frames_per_chunk: int = 16,
) -> FitResult:
    """Fit scene parameters, camera and image formation so that the model's frames match a video.

    Args:
        scene: a `diffcam.Scene` (from `load_scene`; its batch size is ignored) or a scene file.
        observed: a `diffcam.Video` (`read_video`; its timestamps are used), a video file
            (read at the camera's resolution), or (T, 3, H, W) frames in [0, 1] with frame i
            at ``times[i]`` (default i * frame_every * dt). H, W must be the camera's.
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
        image_model: the camera's `ImageModel` (a clean plate, response, distortion, exposure,
            time offset); default an ideal camera.
        weights: per-pixel weights (T|1, 1|3, H, W) or (H, W), >= 0, or a bool mask.
        loss: "charbonnier" (default), "huber" or "l2"; loss_scale: its scale (intensity).
        iterations: loss evaluations in all, shared equally by the stages (an evaluation is an
            Adam step, an L-BFGS function evaluation, or a Levenberg-Marquardt Jacobian or
            trial).
        lr: Adam's learning rate in raw units (default 0.05), decaying along a cosine to a
            tenth; L-BFGS's step length (default 1).
        optimizer: "auto" (Levenberg-Marquardt for at most 64 fitted scalars, else Adam),
            "lm", "adam" or "lbfgs".
        pyramid_levels: L > 1 compares frames average-pooled by 2^(L-1) ... 1 (coarse first).
        edge_softness: the silhouettes' softness (px), a number or a schedule from wide to
            narrow, one stage each (default (2, 1, 0.5)); 0 = hard edges, which give pixels no
            gradient along a silhouette.
        horizons: optional growing horizons, durations (s) from the first frame, one stage each
            (the last should cover the video): a long horizon's loss wraps around the period
            of a swing, a short one's does not.
        max_step: the largest change of a raw parameter per step (see `diffcam.fit.keys`).
        supersample: s x s samples per pixel in the model's renders.
        dtype: the scene's dtype when ``scene`` is a file.
        progress: a tqdm bar.
        tolerance: a stage ends when the loss's relative change stays below this.
        fit_initial_state: also fit offsets (N, 3) to the dynamic bodies' initial positions
            (m) and velocities (m/s).
        to_overrides: optional function from the fitted values (key -> tensor) to the keys
            above, for parameters that are not one key (a pendulum's length setting both a
            body's position and a joint's anchor).
        frame_every: physics steps between frames given as a tensor without ``times``.
        compile_physics: `physics.compiled_step` for the reverse-mode evaluations.
        uncertainty: compute the covariance and ``std`` at the end (at most 64 scalars).
        checkpoint: a file to save progress in (atomically, every 10 s and after each stage);
            a fit started again with the same file resumes where it stopped.
        frames_per_chunk: frames rendered per chunk (memory only).

    Returns:
        A `FitResult`.

    Raises:
        diffcam.SceneError: a key path the scene does not have, or a bad value for it.
        FitError (a ValueError): observed frames that do not fit the camera or are blank,
            actions shorter than the video, bad keys, schedules or options.
    """
    from tqdm.auto import tqdm

    from physics import SimulationError

    from ..errors import SceneError

    start = time.perf_counter()
    if not isinstance(keys, Mapping):
        raise FitError(f"keys must be a dict of key -> spec, got {type(keys).__name__}")
    if optimizer not in ("auto", "lm", "adam", "lbfgs"):
        raise FitError(f"optimizer must be 'auto', 'lm', 'adam' or 'lbfgs', got {optimizer!r}")
    if pyramid_levels < 1 or int(pyramid_levels) != pyramid_levels:
        raise FitError(f"pyramid_levels must be an integer >= 1, got {pyramid_levels!r}")
    if not (max_step > 0):
        raise FitError(f"max_step must be positive (raw units), got {max_step!r}")
    base = _load(scene, dtype)
    dtype, device = base.dtype, base.device
    fit_keys = [make_key(k, spec, dtype, device) for k, spec in keys.items()]
    frames, times = _observed(observed, base, times, frame_every, steps)
    if actions is not None:
        actions = torch.as_tensor(actions).detach().to(device=device, dtype=dtype)
    plate = None if image_model is None else image_model.plate
    if plate is not None:
        plate = torch.as_tensor(plate).to(device=device, dtype=dtype)
        if tuple(plate.shape) != tuple(frames.shape[1:]):
            raise FitError(
                f"image_model.plate must be (3, H, W) = {tuple(frames.shape[1:])} like the "
                f"observed frames, got {tuple(plate.shape)}"
            )
        image_model = image_model.replace(plate=plate)
    target = Target(frames, weights, loss, loss_scale, plate=plate)
    model = VideoModel(base, times, actions, image_model, to_overrides, compile_physics)
    if fit_initial_state:
        for name in (POSITION_OFFSET, VELOCITY_OFFSET):
            zeros = torch.zeros(len(base.body_names), 3, dtype=dtype, device=device)
            fit_keys.append(make_key(name, {"init": zeros, "scale": 0.01}, dtype, device))
    built = model.build({k.key: k.value().detach() for k in fit_keys})  # SceneError early
    stages = _stages(len(times), int(pyramid_levels), edge_softness, horizons, times)
    render = {"supersample": supersample}

    def plan_of(stage) -> Plan:
        horizon, soft, level = stage
        return Plan(horizon, level, {**render, "edge_softness": soft}, frames_per_chunk)

    # ---- what the images see at the initial values
    messages: list[str] = []
    unidentifiable: list[str] = []
    gradient_norms: dict[str, float] = {}
    sensitivity: dict[str, float] = {}
    visible = model.visible(built)[:, 0]
    dynamic = [i for i, s in enumerate(base.world.is_static) if not s]
    in_view = bool(visible[:, dynamic].any()) if dynamic else True
    scalars = sum(k.raw.numel() for k in fit_keys)
    first = plan_of(stages[0])
    if not in_view:
        unidentifiable = [k.key for k in fit_keys]
        messages.append(
            "no moving body is in view in any frame at the initial values: the camera or the "
            "initial state is off (or the bodies leave the view); nothing can be fitted"
        )
    elif fit_keys:
        if scalars <= _LM_MAX_SCALARS:
            eq = evaluate.normal_equations(model, target, fit_keys, fit_keys, first)
            column = eq.jtj.diagonal().sqrt()
            start_index = 0
            for k in fit_keys:
                n = k.raw.numel()
                sensitivity[k.key] = float(column[start_index : start_index + n].norm())
                gradient_norms[k.key] = float(eq.jtr[start_index : start_index + n].norm())
                start_index += n
                # d loss / d raw = 2 J^T r / sum(w)
                gradient_norms[k.key] *= 2.0 * eq.loss / max(eq.cost, 1e-300)
            measure = sensitivity
        else:
            for k in fit_keys:
                k.raw.grad = None
            evaluate.loss_gradient(model, target, fit_keys, first)
            for k in fit_keys:
                g = k.raw.grad
                gradient_norms[k.key] = 0.0 if g is None else float(g.norm())
            measure = gradient_norms
        top = max([v for v in measure.values() if math.isfinite(v)] or [0.0])
        for k in fit_keys:
            v = measure[k.key]
            if v == 0.0 or not math.isfinite(v) or v < 1e-8 * max(top, 1e-300):
                unidentifiable.append(k.key)
        if unidentifiable:
            messages.append(
                "the pixels do not depend on "
                + ", ".join(repr(k) for k in unidentifiable)
                + " at the initial values; left at their initial values"
            )
            warnings.warn("fit_scene: " + messages[-1], stacklevel=2)
    for k in fit_keys:
        k.raw.grad = None
        if k.key in unidentifiable:
            k.raw.requires_grad_(False)
    trainable = [k for k in fit_keys if k.key not in unidentifiable]
    n_trainable = sum(k.raw.numel() for k in trainable)
    chosen = optimizer
    if chosen == "auto":
        chosen = "lm" if n_trainable <= _LM_MAX_SCALARS else "adam"
    if chosen == "lm" and n_trainable > _LM_MAX_SCALARS:
        raise FitError(
            f"optimizer='lm' builds a Jacobian column per fitted scalar; these keys have "
            f"{n_trainable} (at most {_LM_MAX_SCALARS}): use optimizer='adam' for textures "
            "and other large parameters"
        )

    # ---- the stages
    history: list[float] = []
    levels_run: list[int] = []
    value_history: dict[str, list[torch.Tensor]] = {k.key: [] for k in fit_keys}
    stage_log: list[dict] = []
    signature = {
        "keys": [(k.key, tuple(k.raw.shape)) for k in fit_keys], "frames": len(times),
        "stages": stages, "optimizer": chosen, "iterations": int(iterations),
    }  # fmt: skip
    saver = _Checkpoint(checkpoint, signature)
    resumed = saver.load()
    done_stages = 0
    if resumed is not None:
        with torch.no_grad():
            for k in fit_keys:
                k.raw.copy_(resumed["raws"][k.key])
        history, levels_run = resumed["history"], resumed["levels"]
        value_history = resumed["value_history"]
        stage_log, done_stages = resumed["stages"], len(resumed["stages"])

    def snapshot(force: bool = False) -> None:
        saver.save({
            "raws": {k.key: k.raw.detach().clone() for k in fit_keys}, "history": history,
            "levels": levels_run, "value_history": value_history, "stages": stage_log,
        }, force)  # fmt: skip

    status = "unidentifiable" if not trainable else "budget"
    lm_state: dict = {}  # Levenberg-Marquardt's damping, carried from stage to stage
    per_stage = iterations // len(stages)
    budgets = [per_stage] * (len(stages) - 1) + [iterations - per_stage * (len(stages) - 1)]
    bar = tqdm(total=iterations, disable=not progress, desc="fit_scene", leave=False)
    bar.update(min(len(history), iterations))
    try:
        for index, (stage, budget) in enumerate(zip(stages, budgets, strict=True)):
            if index < done_stages or not trainable or budget < 1:
                continue
            plan = plan_of(stage)
            count_before = len(history)

            def record(value: float, level=plan.level, stage=index) -> None:
                history.append(float(value))
                levels_run.append(level)
                for k in fit_keys:
                    value_history[k.key].append(k.value().detach().clone())
                bar.update(1)
                bar.set_postfix(loss=f"{value:.3e}", stage=stage)
                snapshot()

            def trial_loss(plan=plan) -> float:
                try:
                    return evaluate.loss_value(model, target, fit_keys, plan)
                except (SceneError, SimulationError):  # a value the model refuses: reject it
                    return math.inf

            problem = Problem(
                raws=[k.raw for k in trainable], lrs=[k.lr for k in trainable],
                loss_gradient=lambda plan=plan: evaluate.loss_gradient(model, target, fit_keys, plan),
                loss_value=trial_loss,
                normal_equations=lambda plan=plan: evaluate.normal_equations(
                    model, target, fit_keys, trainable, plan),
                record=record, max_step=float(max_step), tolerance=tolerance,
            )  # fmt: skip
            if chosen == "adam":
                status = adam(problem, budget, 0.05 if lr is None else lr)
            elif chosen == "lbfgs":
                status = lbfgs(problem, budget, 1.0 if lr is None else lr)
            else:
                status = levenberg_marquardt(problem, budget, lm_state)
            stage_log.append({
                "horizon_frames": plan.horizon, "edge_softness": plan.render["edge_softness"],
                "level": plan.level, "evaluations": len(history) - count_before,
                "loss": min(history[count_before:], default=math.nan), "status": status,
                "explained": evaluate.explained(model, target, fit_keys, plan),
            })  # fmt: skip
            snapshot(force=True)
    finally:
        bar.close()

    # ---- the solution, its frames, its uncertainty, what left the view
    final = plan_of((len(times), stages[-1][1], 0))
    values = {k.key: k.value().detach().clone() for k in fit_keys}
    with torch.no_grad():
        built = model.build(values)
        shown = frames.new_empty(frames.shape)  # filled chunk by chunk: no list, no copy
        for index in final.chunks():
            shown[index] = model.frames(built, index, **final.render)[:, 0]
        visible = model.visible(built)[:, 0]
    out_of_view = {
        base.body_names[i]: [int(t) for t in torch.nonzero(~visible[:, i]).flatten()]
        for i in dynamic
        if not bool(visible[:, i].all())
    }
    if out_of_view:
        messages.append(
            "in the fitted model "
            + "; ".join(
                f"{name!r} leaves the view in {len(f)} of {len(times)} frames"
                for name, f in out_of_view.items()
            )  # fmt: skip
            + " (those frames constrain it only by showing it absent)"
        )
    std: dict[str, torch.Tensor] = {}
    cov, cov_keys = None, []
    if uncertainty and trainable and n_trainable <= _LM_MAX_SCALARS:
        eq = evaluate.normal_equations(model, target, fit_keys, trainable, final)
        gauss_newton, clustered = covariance(eq, final.horizon)
        cov = value_covariance(clustered, trainable)
        cov_keys = [(k.key, i) for k in trainable for i in range(k.raw.numel())]
        # the larger of the two estimates: the clustered one from few blocks can come out small
        variances = torch.maximum(
            cov.diagonal(), value_covariance(gauss_newton, trainable).diagonal()
        ).clamp_min(0)
        start_index = 0
        for k in trainable:
            n = k.raw.numel()
            std[k.key] = variances[start_index : start_index + n].sqrt().view_as(k.raw).to(dtype)
            start_index += n
    for key in unidentifiable:
        std[key] = torch.full_like(values[key], math.inf)
    share = evaluate.explained(model, target, fit_keys, final) if in_view else None
    if status in ("converged", "budget", "stalled") and trainable:
        loss_now = stage_log[-1]["loss"] if stage_log else math.nan
        messages.insert(0, f"{status} after {len(history)} evaluations, loss {loss_now:.4g}")
        if share is not None and share < _EXPLAINED_AT_LEAST:
            status = "poor"
            messages.insert(
                1,
                f"but the model explains only {share:.0%} of the moving pixels (residuals in the "
                "bodies' windows against the plate alone): its bodies are not where the video's "
                "are, a wrong local minimum; start closer (e.g. from tracked positions), or "
                "add a coarser first stage (wider edge_softness, shorter horizons)",
            )
    return FitResult(
        values=values, history=history, gradient_norms=gradient_norms,
        unidentifiable=unidentifiable, frames=shown.detach(), iterations=len(history),
        seconds=time.perf_counter() - start, levels=levels_run, value_history=value_history,
        std=std, covariance=cov, covariance_keys=cov_keys, sensitivity=sensitivity,
        status=status, message="; ".join(messages), out_of_view=out_of_view, stages=stage_log,
        explained=share,
    )  # fmt: skip
