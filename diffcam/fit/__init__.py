"""Fitting a scene to a video: physical parameters, initial state, camera and image formation.

* `fit_scene` (in `run`): the fit, staged coarse to fine, with uncertainties.
* `settings`: its options, `Schedule`, `Objective` (with `Silhouettes`) and `Runtime`.
* `keys`: how each fitted key is parameterised for the optimisers.
* `model`: the model's frames for given values (`VideoModel`, `render_rollout`).
* `objective`: robust, weighted pixel residuals.
* `evaluate`: the loss, its gradient and the normal equations, streamed over frames.
* `optimizers`: Adam, L-BFGS and Levenberg-Marquardt with bounded steps.
* `result`: `FitResult`, `FitError` and the covariance.
"""

from .model import render_rollout
from .result import FitError, FitResult
from .run import fit_scene
from .settings import DEFAULT_SOFTNESS, Objective, Runtime, Schedule, Silhouettes

__all__ = [
    "fit_scene",
    "Schedule",
    "Objective",
    "Runtime",
    "Silhouettes",
    "FitResult",
    "FitError",
    "render_rollout",
    "DEFAULT_SOFTNESS",
]
