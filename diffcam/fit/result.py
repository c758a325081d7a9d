"""What a fit returns, and the uncertainty of its values."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from .evaluate import NormalEquations
from .keys import FitKey

__all__ = ["FitResult", "FitError", "covariance", "parameter_covariance", "gauss_newton_step"]


class FitError(ValueError):
    """A fit that cannot start: its message says what is wrong with the input and the fix."""


@dataclasses.dataclass
class FitResult:
    """What `fit_scene` found.

    Attributes:
        values: key -> fitted value (detached; the key's shape and units). With
            ``fit_initial_state``, also ``"initial_state.position_offset"`` (N, 3) m and
            ``"initial_state.velocity_offset"`` (N, 3) m/s (rows of static bodies stay zero).
        std: key -> one standard deviation of the value (its shape and units): the larger of
            the clustered and the Gauss-Newton estimates (`covariance`); inf for unidentifiable
            keys; empty without ``uncertainty``. Statistical only: a model that differs from
            the world (a sphere for an ellipsoid) adds an error it does not count.
        covariance: (P, P) covariance of the fitted scalars (value units, the order of
            ``covariance_keys``) at the solution, or None: the clustered estimate with its
            variances raised to the Gauss-Newton ones where larger (its diagonal is ``std``
            squared).
        covariance_keys: (key, flat index) of each of the P scalars.
        history: the loss at each evaluation (its stage's frames, pyramid level and softness).
        gradient_norms: key -> |d loss / d raw| at the initial values.
        sensitivity: key -> the norm of the residuals' derivative with respect to the raw
            parameter at the initial values (how much the pixels see the key), when computed.
        unidentifiable: keys the images do not see at the initial values; kept at ``init``.
        frames: (T, 3, H, W) the model's frames at the fitted values (detached).
        iterations: evaluations run; seconds: wall-clock time of the whole fit.
        levels: pyramid level of each evaluation; value_history: key -> value per evaluation.
        status: "converged", "budget" (the iterations ran out), "stalled" (no step lowered the
            loss), "poor" (over a clean plate, the model explains less than a quarter of the moving
            pixels: a wrong local minimum) or "unidentifiable" (nothing to fit); see
            ``message``.
        explained: over a clean plate, 1 - the squared residuals in the moving bodies' windows
            over those of the plate alone (near 1: the bodies are where the video's are).
        message: a sentence on the outcome (what was unidentifiable and why).
        out_of_view: body name -> indices of the frames whose time has the body's centre
            outside the image (or behind the camera) in the fitted model; only bodies that
            leave the view are listed.
        stages: per stage, its softness, pyramid level, frames, evaluations and final loss.
        normal_equations: the residuals' `NormalEquations` at the solution over the scalars
            of ``covariance_keys`` (raw units), or None (see `gauss_newton_step`).
    """

    values: dict[str, torch.Tensor]
    history: list[float]
    gradient_norms: dict[str, float]
    unidentifiable: list[str]
    frames: torch.Tensor
    iterations: int
    seconds: float
    levels: list[int] = dataclasses.field(default_factory=list)
    value_history: dict[str, list[torch.Tensor]] = dataclasses.field(default_factory=dict)
    std: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)
    covariance: torch.Tensor | None = None
    covariance_keys: list[tuple[str, int]] = dataclasses.field(default_factory=list)
    sensitivity: dict[str, float] = dataclasses.field(default_factory=dict)
    status: str = "budget"
    message: str = ""
    out_of_view: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    stages: list[dict] = dataclasses.field(default_factory=list)
    explained: float | None = None
    normal_equations: NormalEquations | None = None


_BLOCKS = 20  # the clustered covariance's groups of consecutive frames


def covariance(eq: NormalEquations, frames_used: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Covariances of the raw scalars at a least-squares solution, (P, P) float64 each:

    * Gauss-Newton, ``s^2 (J^T J)^-1`` with ``s^2 = sum(r^2) / (n - P)``: exact when the
      residuals are independent with equal variance;
    * clustered (the "sandwich" ``(J^T J)^-1 (sum_c g_c g_c^T) (J^T J)^-1 * C / (C - 1)`` with
      ``g_c = J_c^T r_c`` over C = 20 blocks of consecutive frames): it does not assume pixels,
      or neighbouring frames, independent, and real pixel errors are not (blur, compression,
      and above all an appearance the model lacks, which errs the same way frame after frame).

    Neither includes the error of a model that is wrong (a sphere for an ellipsoid...), which
    shows as the fitted values' distance from the truth on test clips. Directions the images
    do not see (a singular J^T J) get an infinite variance.
    """
    p = eq.jtj.shape[0]
    inverse, blind = _pseudo_inverse(eq.jtj)
    dof = max(eq.count - p, 1)
    gauss_newton = inverse * (eq.cost / dof)
    per_frame = eq.frame_jtr[:frames_used]
    blocks = torch.stack([b.sum(0) for b in per_frame.tensor_split(min(_BLOCKS, len(per_frame)))])
    c = blocks.shape[0]
    clustered = inverse @ (blocks.T @ blocks * (c / max(c - 1, 1))) @ inverse
    if bool(blind.any()):
        for m in (gauss_newton, clustered):
            m[blind, :] = math.inf
            m[:, blind] = math.inf
    return gauss_newton, clustered


def _pseudo_inverse(jtj: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """((J^T J)^+ (P, P), blind (P,) bool): the pseudo-inverse, scaled to unit diagonal first,
    without the directions the residuals do not see (eigenvalues below 1e-12 of the largest),
    and which scalars take part in those directions."""
    scale = jtj.diagonal().clamp_min(1e-300).sqrt()
    eigenvalues, vectors = torch.linalg.eigh(jtj / scale[:, None] / scale[None, :])
    keep = eigenvalues > 1e-12 * float(eigenvalues.max().clamp_min(1e-300))
    inverse_values = torch.where(
        keep, 1.0 / eigenvalues.clamp_min(1e-300), torch.zeros_like(eigenvalues)
    )
    inverse = (vectors * inverse_values) @ vectors.T / scale[:, None] / scale[None, :]
    return inverse, (vectors[:, ~keep].abs() > 1e-6).any(1)


def gauss_newton_step(eq: NormalEquations) -> torch.Tensor:
    """(P,) the Gauss-Newton step -(J^T J)^+ J^T r (raw units) from where ``eq`` was taken:
    about zero at a solution; from a solution, with the residuals of a changed problem (another
    time step, resolution or horizon), how far that change moves the solution (linearised)."""
    return -(_pseudo_inverse(eq.jtj.to(torch.float64))[0] @ eq.jtr.to(torch.float64))


def parameter_covariance(eq: NormalEquations, frames_used: int, keys: Sequence[FitKey]):
    """The covariance (P, P) float64 of the keys' scalars in value units at a least-squares
    solution: the clustered estimate (`covariance`), its variances raised to the
    Gauss-Newton ones where those are larger (the clustered one, from few blocks, can come out
    small), correlations kept."""
    gauss_newton, clustered = covariance(eq, frames_used)
    gn = value_covariance(gauss_newton, keys).diagonal()
    cov = value_covariance(clustered, keys)
    variance = cov.diagonal()
    raise_by = torch.where(
        torch.isfinite(gn) & (gn > variance) & (variance > 0),
        torch.sqrt(gn / variance.clamp_min(1e-300)),
        torch.ones_like(variance),
    )
    cov = cov * raise_by[:, None] * raise_by[None, :]
    fill = torch.isfinite(gn) & ~(variance > 0)  # a clustered variance of exactly 0
    cov[fill, fill] = gn[fill]
    return torch.where(torch.isinf(gn)[:, None] | torch.isinf(gn)[None, :],
                       torch.full_like(cov, math.inf), cov)  # fmt: skip


def value_covariance(raw_covariance: torch.Tensor, keys: Sequence[FitKey]) -> torch.Tensor:
    """The covariance in value units: D C D with D = d value / d raw (diagonal)."""
    d = torch.cat([k.derivative(k.raw.detach()).reshape(-1) for k in keys]).to(torch.float64)
    out = raw_covariance * d[:, None] * d[None, :]
    return torch.where(torch.isinf(raw_covariance), raw_covariance, out)
