"""`fit_scene`'s settings, grouped in three frozen records: `Schedule` (how the optimiser runs,
stage by stage), `Objective` (what the model's frames are compared with, and how) and
`Runtime` (what the fit does beside fitting: progress, checkpoints, memory, compiling,
uncertainties). Each checks its values when made, and ``replace(**changes)`` gives a copy::

    schedule = diffcam.fit.Schedule(iterations=60, optimizer="lm", edge_softness=(1.0, 0.5))
    result = diffcam.fit_scene(scene, video, keys, schedule=schedule,
                               objective=diffcam.fit.Objective(loss="l2"),
                               runtime=diffcam.fit.Runtime(progress=False))
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
from collections.abc import Sequence

import torch

from .result import FitError

__all__ = ["Schedule", "Objective", "Runtime", "Silhouettes", "DEFAULT_SOFTNESS"]

DEFAULT_SOFTNESS = (2.0, 1.0, 0.5)  # px: wide silhouettes first, then narrow
OPTIMIZERS = ("auto", "lm", "adam", "lbfgs")


def _positive_integer(value, name: str, least: int = 1) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or int(value) != value:
        raise FitError(f"{name} must be an integer >= {least}, got {value!r}")
    if value < least:
        raise FitError(f"{name} must be an integer >= {least}, got {value!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Schedule:
    """How the optimiser runs: the budget, the method and the stages, coarse to fine.

    Attributes:
        iterations: loss evaluations in all, shared equally by the stages (an evaluation is an
            Adam step, an L-BFGS function evaluation, or a Levenberg-Marquardt Jacobian or
            trial).
        optimizer: "auto" (Levenberg-Marquardt for at most 64 fitted scalars, else Adam),
            "lm", "adam" or "lbfgs".
        lr: Adam's learning rate in raw units (default 0.05), decaying along a cosine to a
            tenth; L-BFGS's step length (default 1).
        edge_softness: the silhouettes' softness (px), a number or a schedule from wide to
            narrow, one stage each (default (2, 1, 0.5)); 0 = hard edges, which give pixels no
            gradient along a silhouette.
        horizons: optional growing horizons, durations (s) from the first frame, one stage
            each (the last should cover the video): a long horizon's loss wraps around the
            period of a swing, a short one's does not.
        pyramid_levels: L > 1 compares frames average-pooled by 2^(L-1) ... 1 (coarse first).
        tolerance: a stage ends when the loss's relative change stays below this.
        max_step: the largest change of a raw parameter per step (see `diffcam.fit.keys`).
    """

    iterations: int = 200
    optimizer: str = "auto"
    lr: float | None = None
    edge_softness: float | Sequence[float] = DEFAULT_SOFTNESS
    horizons: Sequence[float] | None = None
    pyramid_levels: int = 1
    tolerance: float = 1e-7
    max_step: float = 2.0

    def __post_init__(self) -> None:
        _positive_integer(self.iterations, "iterations", least=0)
        if self.optimizer not in OPTIMIZERS:
            raise FitError(
                f"optimizer must be 'auto', 'lm', 'adam' or 'lbfgs', got {self.optimizer!r}"
            )
        _positive_integer(self.pyramid_levels, "pyramid_levels")
        if not (self.max_step > 0):
            raise FitError(f"max_step must be positive (raw units), got {self.max_step!r}")
        if not (self.tolerance >= 0):
            raise FitError(f"tolerance must be >= 0, got {self.tolerance!r}")

    def replace(self, **changes) -> Schedule:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True)
class Silhouettes:
    """A silhouette term for `fit_scene` (`Objective.silhouettes`): the moving bodies' coverage
    against a foreground mask, so that the geometry does not hinge on colour alone (a body
    whose look the model lacks still covers the pixels that differ from the background).

    Attributes:
        mask: (T, 1, H, W) or (T, H, W) foreground of the observed frames, bool or in [0, 1]
            (e.g. `diffcam.imaging.foreground_mask` against the clean plate).
        weight: the coverage residual's weight against a colour channel's.
    """

    mask: torch.Tensor
    weight: float = 0.5


# eq=False: the weights are a tensor, which has no truth value to compare records by
@dataclasses.dataclass(frozen=True, kw_only=True, eq=False)
class Objective:
    """What the model's frames are compared with, and how (`diffcam.fit.objective`).

    Attributes:
        loss: "charbonnier" (default), "huber" or "l2".
        loss_scale: the loss's scale (intensity).
        weights: per-pixel weights (T|1, 1|3, H, W) or (H, W), >= 0, or a bool mask.
        silhouettes: optional `Silhouettes`: the bodies' coverage against a foreground mask,
            as a fourth residual channel beside the colours.
        supersample: s x s samples per pixel in the model's renders.
    """

    loss: str = "charbonnier"
    loss_scale: float = 0.1
    weights: torch.Tensor | None = None
    silhouettes: Silhouettes | None = None
    supersample: int = 1

    def __post_init__(self) -> None:
        from .objective import LOSSES

        if self.loss not in LOSSES:
            raise FitError(f"loss must be one of {', '.join(LOSSES)}, got {self.loss!r}")
        if not (self.loss_scale > 0 and math.isfinite(self.loss_scale)):
            raise FitError(f"loss_scale must be > 0 (intensity), got {self.loss_scale!r}")
        _positive_integer(self.supersample, "supersample")
        if self.silhouettes is not None and not isinstance(self.silhouettes, Silhouettes):
            raise FitError(
                f"silhouettes must be a diffcam.fit.Silhouettes, got "
                f"{type(self.silhouettes).__name__}"
            )

    def replace(self, **changes) -> Objective:
        return dataclasses.replace(self, **changes)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Runtime:
    """What a fit does beside fitting; none of these change the result (``uncertainty`` only
    adds to it).

    Attributes:
        progress: a tqdm bar.
        checkpoint: a file to save progress in (atomically, every 10 s and after each stage);
            a fit started again with the same file resumes where it stopped.
        frames_per_chunk: frames rendered per chunk (memory only).
        compile_physics: True steps the physics compiled, False eagerly; None (the default)
            compiled once eager rollouts have cost about what a build costs, or from the
            start when the libraries are on disk (`fit.model.PhysicsTier`).
        uncertainty: compute the covariance and ``std`` at the end (at most 64 scalars).
    """

    progress: bool = True
    checkpoint: str | os.PathLike | None = None
    frames_per_chunk: int = 16
    compile_physics: bool | None = None
    uncertainty: bool = True

    def __post_init__(self) -> None:
        _positive_integer(self.frames_per_chunk, "frames_per_chunk")

    def replace(self, **changes) -> Runtime:
        return dataclasses.replace(self, **changes)
