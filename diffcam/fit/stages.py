"""A fit's stages, coarse to fine, and running them with progress, checkpoints and resume.

A stage is a `evaluate.Plan`: the frames in play (a horizon), the silhouettes' softness and a
pyramid level. The schedules of the three are stretched to the longest, so
``edge_softness=(2, 1, 0.5)`` with ``pyramid_levels=2`` is three stages at levels 1, 1, 0.
Each stage gets an equal share of the evaluations; the raw parameters, and Levenberg-Marquardt's
damping, carry over from one stage to the next.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import torch

from . import evaluate
from .evaluate import Plan
from .keys import FitKey
from .optimizers import Problem, Refused, adam, lbfgs, levenberg_marquardt
from .result import FitError

__all__ = ["plans", "Progress", "run_stages"]


def _schedule(values, name: str) -> list:
    if isinstance(values, (int, float)):
        return [values]
    values = list(values)
    if not values:
        raise FitError(f"{name}: give at least one value")
    return values


def plans(
    times: torch.Tensor, levels: int, softness, horizons, render: dict, frames_per_chunk: int
) -> list[Plan]:
    """One `Plan` per stage from the schedules (softness in px, horizons in s from the first
    frame, `levels` pyramid levels coarse to fine), stretched to the longest one."""
    count = times.shape[0]
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

    return [
        Plan(
            pick(spans, i),
            pick(pyramid, i),
            {**render, "edge_softness": pick(soft, i)},
            frames_per_chunk,
        )  # fmt: skip
        for i in range(n)
    ]


class _Checkpoint:
    """Atomic snapshots of a fit's progress (raw values, stages done, history) for a resume."""

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
        except Exception as error:  # noqa: BLE001 - any unreadable file: say so, do not guess
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


@dataclasses.dataclass
class Progress:
    """What the stages did: the loss and pyramid level per evaluation, each key's value per
    evaluation, one summary dict per stage, and the last stage's status."""

    history: list[float]
    levels: list[int]
    value_history: dict[str, list[torch.Tensor]]
    stages: list[dict]
    status: str


def run_stages(
    model, target, keys: Sequence[FitKey], trainable: Sequence[FitKey], stages: list[Plan],
    optimizer: str, iterations: int, lr: float | None, max_step: float, tolerance: float,
    progress: bool, checkpoint,
) -> Progress:  # fmt: skip
    """Run the optimiser stage after stage; resume from ``checkpoint`` when it holds one."""
    from tqdm.auto import tqdm

    signature = {
        "keys": [(k.key, tuple(k.raw.shape)) for k in keys], "frames": model.frame_count,
        "stages": [(p.horizon, p.level, p.render["edge_softness"]) for p in stages],
        "optimizer": optimizer, "iterations": int(iterations),
    }  # fmt: skip
    saver = _Checkpoint(checkpoint, signature)
    state = Progress(
        [], [], {k.key: [] for k in keys}, [], "budget" if trainable else "unidentifiable"
    )
    resumed = saver.load()
    if resumed is not None:
        with torch.no_grad():
            for k in keys:
                k.raw.copy_(resumed["raws"][k.key])
        state = Progress(resumed["history"], resumed["levels"], resumed["value_history"],
                         resumed["stages"], state.status)  # fmt: skip

    def snapshot(force: bool = False) -> None:
        saver.save({
            "raws": {k.key: k.raw.detach().clone() for k in keys}, "history": state.history,
            "levels": state.levels, "value_history": state.value_history, "stages": state.stages,
        }, force)  # fmt: skip

    per_stage = iterations // len(stages)
    budgets = [per_stage] * (len(stages) - 1) + [iterations - per_stage * (len(stages) - 1)]
    damping: dict = {}  # Levenberg-Marquardt's, carried from stage to stage
    bar = tqdm(total=iterations, disable=not progress, desc="fit_scene", leave=False)
    bar.update(min(len(state.history), iterations))
    try:
        for index, (plan, budget) in enumerate(zip(stages, budgets, strict=True)):
            if index < len(state.stages) or not trainable or budget < 1:
                continue
            before = len(state.history)

            def record(value: float, level=plan.level, stage=index) -> None:
                state.history.append(float(value))
                state.levels.append(level)
                for k in keys:
                    state.value_history[k.key].append(k.value().detach().clone())
                bar.update(1)
                bar.set_postfix(loss=f"{value:.3e}", stage=stage)
                snapshot()

            problem = _problem(model, target, keys, trainable, plan, record, max_step, tolerance)
            if optimizer == "adam":
                state.status = adam(problem, budget, 0.05 if lr is None else lr)
            elif optimizer == "lbfgs":
                state.status = lbfgs(problem, budget, 1.0 if lr is None else lr)
            else:
                state.status = levenberg_marquardt(problem, budget, damping)
            state.stages.append({
                "horizon_frames": plan.horizon, "edge_softness": plan.render["edge_softness"],
                "level": plan.level, "evaluations": len(state.history) - before,
                "loss": min(state.history[before:], default=math.nan), "status": state.status,
                "explained": evaluate.explained(model, target, keys, plan),
            })  # fmt: skip
            snapshot(force=True)
    finally:
        bar.close()
    return state


def _problem(model, target, keys, trainable, plan: Plan, record, max_step, tolerance) -> Problem:
    """The stage's `Problem`: its evaluations, with values the model refuses (a size out of
    range, a simulation gone non-finite) reported to the optimiser as `Refused`."""
    from physics import SimulationError

    from ..errors import SceneError

    def guarded(fn):
        def call():
            try:
                return fn()
            except (SceneError, SimulationError) as error:
                raise Refused(str(error)) from error

        return call

    return Problem(
        raws=[k.raw for k in trainable], lrs=[k.lr for k in trainable],
        loss_gradient=guarded(lambda: evaluate.loss_gradient(model, target, keys, plan)),
        loss_value=guarded(lambda: evaluate.loss_value(model, target, keys, plan)),
        normal_equations=guarded(
            lambda: evaluate.normal_equations(model, target, keys, trainable, plan)
        ),
        record=record, max_step=float(max_step), tolerance=tolerance,
    )  # fmt: skip
