"""What a fit minimises: robust, weighted pixel residuals against the observed frames.

For a prediction error e = predicted - observed at a pixel with weight w, the residual is
``r = sqrt(w) * psi(e)`` with ``psi(e)**2 = 2 rho(e)`` for the robust loss rho, and the loss is
``sum(r**2) / sum(w)`` over the frames in play: the mean squared error for ``"l2"``. Writing the
robust loss as squared residuals keeps one least-squares machinery for every loss (Triggs et
al., "Bundle Adjustment: A Modern Synthesis", 2000): Levenberg-Marquardt and the Gauss-Newton
covariance see the residuals r and their Jacobian.

* ``"l2"``: rho(e) = e**2 / 2.
* ``"charbonnier"``: rho(e) = s**2 (sqrt(1 + (e/s)**2) - 1), quadratic below the scale s and
  growing like |e| above it: pixels the model cannot explain (a reflection, a bob of a
  different shape, a person walking by) pull with a bounded force.
* ``"huber"``: quadratic below s, linear above.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["LOSSES", "robust_residual", "Target"]

LOSSES = ("l2", "charbonnier", "huber")


def robust_residual(error: torch.Tensor, loss: str, scale: float) -> torch.Tensor:
    """psi(e): a residual whose square is twice the robust loss of ``error`` (any shape)."""
    if loss == "l2":
        return error
    u = error / scale
    if loss == "charbonnier":
        # e * sqrt(2 / (sqrt(1 + u^2) + 1)): the same value as sign(e) sqrt(2 rho), smooth at 0
        return error * torch.sqrt(2.0 / (torch.sqrt(1.0 + u * u) + 1.0))
    small = u.abs() <= 1.0
    far = torch.where(small, torch.ones_like(u), u.abs())
    return torch.where(small, error, error.sign() * scale * torch.sqrt(2.0 * far - 1.0))


class Target:
    """The observed frames and the weight of every pixel.

    Args:
        frames: (T, C, H, W) observed frames in [0, 1]: C = 3 colours, and a fourth channel
            for a silhouette term (the weighted foreground mask; see `fit_scene`).
        weights: None, or per-pixel weights >= 0 broadcastable to (T, C, H, W) as
            (T|1, 1|C, H, W) (a bool mask is weights of 0 and 1).
        loss: one of `LOSSES`; scale: its scale s in intensity units.
        plate: optional (C, H, W) background the model shows where no body is: then the
            residuals outside the bodies' windows are constants (`outside`).
    """

    def __init__(self, frames: torch.Tensor, weights, loss: str, scale: float, plate=None):
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {', '.join(LOSSES)}, got {loss!r}")
        if not (isinstance(scale, (int, float)) and scale > 0):
            raise ValueError(f"loss_scale must be a positive number, got {scale!r}")
        self.frames = frames
        self.loss, self.scale = loss, float(scale)
        self.weights = None if weights is None else _check_weights(weights, frames)
        self.plate = plate
        self._levels: dict[int, tuple] = {}

    def _level(self, level: int):
        """(frames, weights or None, plate error map or None) average-pooled by 2**level; the
        error map (T, H', W') is each pixel's squared residual when the model shows the plate."""
        if level not in self._levels:
            frames = _pool(self.frames, level)
            weights = None
            if self.weights is not None:
                weights = _pool(self.weights.expand(-1, frames.shape[1], -1, -1), level)
            error = None
            if self.plate is not None:  # in chunks of frames: a whole video's temporaries are GBs
                plate = _pool(self.plate[None].to(frames), level)
                error = frames.new_empty(frames.shape[0], *frames.shape[2:])
                for start in range(0, frames.shape[0], 64):
                    part = slice(start, start + 64)
                    r = robust_residual(plate - frames[part], self.loss, self.scale)
                    if weights is not None:
                        r = r * torch.sqrt(_frames_of(weights, frames, part).expand_as(r))
                    error[part] = r.square().sum(1)
            self._levels[level] = (frames, weights, error)
        return self._levels[level]

    def residuals(self, predicted: torch.Tensor, index, level: int = 0, windows=None):
        """(Tc, B, n) residuals r of predicted frames (Tc, B, 3, H, W) (or their `Windows`,
        (Tc, B, 3, h, w)) against the observed frames ``index``, at pyramid ``level`` (frames
        average-pooled by 2**level; windows aligned to it)."""
        from ..formation import crop

        count, batch = predicted.shape[:2]
        frames, weights, _ = self._level(level)
        pred = _pool(predicted.flatten(0, 1), level).unflatten(0, (count, batch))
        if windows is None:
            seen = frames[index][:, None]
            w = (
                None
                if weights is None
                else weights.expand(frames.shape[0], -1, -1, -1)[index][:, None]
            )
        else:
            small = _scaled(windows, level)
            seen = crop(frames[index], small)
            w = None if weights is None else crop(_frames_of(weights, frames, index), small)
        r = robust_residual(pred - seen, self.loss, self.scale)
        if w is not None:
            r = r * torch.sqrt(w)
        return r.flatten(2)

    def outside(self, index, windows, level: int = 0) -> torch.Tensor:
        """(B,) sum of squared residuals outside the windows of frames ``index``, where the
        model shows the plate (constants: no parameter changes them)."""
        from ..formation import crop

        _, _, error = self._level(level)
        inside = crop(error[index][:, None], _scaled(windows, level)).sum((0, 2, 3, 4))
        return error[index].sum() - inside

    def total_error(self, index, level: int = 0) -> float:
        """Sum of squared residuals of the plate alone over the frames ``index``."""
        return float(self._level(level)[2][index].sum())

    def residual_count(self, index, level: int = 0) -> int:
        """How many residuals the frames ``index`` have at ``level`` (3 per pixel)."""
        return int(self._level(level)[0][index].numel())

    def total_weight(self, index, level: int = 0) -> float:
        """sum(w) over the frames ``index`` at ``level``: the loss's normaliser."""
        frames, weights, _ = self._level(level)
        if weights is None:
            return float(frames[index].numel())
        return float(_frames_of(weights, frames, index).sum())


def _pool(x: torch.Tensor, level: int) -> torch.Tensor:
    k = min(2**level, x.shape[-1], x.shape[-2])
    return F.avg_pool2d(x, k) if k > 1 else x


def _scaled(windows, level: int):
    from ..formation import Windows

    k = 2**level
    return Windows(windows.origins // k, (windows.size[0] // k, windows.size[1] // k))


def _frames_of(weights: torch.Tensor, frames: torch.Tensor, index) -> torch.Tensor:
    return weights.expand(frames.shape[0], *weights.shape[1:])[index]


def _check_weights(weights, frames: torch.Tensor) -> torch.Tensor:
    w = torch.as_tensor(weights, device=frames.device)
    if w.dtype == torch.bool:
        w = w.to(frames.dtype)
    w = w.to(frames.dtype)
    if w.dim() == 2:
        w = w[None, None]
    if w.dim() == 3:
        w = w[:, None]
    t, c, h, wd = frames.shape
    if (
        w.dim() != 4
        or w.shape[0] not in (1, t)
        or w.shape[1] not in (1, c)
        or w.shape[2:] != (h, wd)
    ):
        raise ValueError(
            f"weights must broadcast to the observed frames (T, {c}, H, W) = {(t, c, h, wd)} "
            f"as (T|1, 1|{c}, H, W) (or (H, W)), got {tuple(w.shape)}"
        )
    if not bool(torch.isfinite(w).all()) or bool((w < 0).any()):
        raise ValueError("weights must be finite and >= 0")
    if not bool((w > 0).any()):
        raise ValueError("weights are all zero: no pixel would count")
    return w
