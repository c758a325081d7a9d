"""Lens distortion, OpenCV's (k1, k2, p1, p2, k3) model, on normalised image coordinates:
`distort_normalized`, and `undistort_normalized` (Newton solve, implicit-function gradient)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .._safe import safe_div
from .parameters import as_tensor_like

# Undistortion iterates are clamped to this box (normalised units) so divergent points stay finite.
_UNDISTORT_BOUND = 1e3


def _coefficients(coeffs, like: torch.Tensor) -> list[torch.Tensor]:
    """(k1, k2, p1, p2, k3), each shaped to broadcast with ``like`` (B, ...).

    ``coeffs`` (any array-like; OpenCV order, a missing k3 is 0): (4|5,) shared; (B, 4|5) one
    per image, aligned with ``like``'s leading axis; (..., 4|5) with 3 or more axes broadcasts
    its leading axes against ``like``'s shape as usual (trailing axes aligned).
    """
    c = as_tensor_like(coeffs, like)
    if c.dim() == 0 or c.shape[-1] not in (4, 5):
        raise ValueError(f"distortion coeffs must be (..., 4|5), got {tuple(c.shape)}")
    if c.shape[-1] == 4:
        c = F.pad(c, (0, 1))
    ks = c.unbind(-1)
    if c.dim() == 2:
        ks = [k.view(-1, *([1] * (like.dim() - 1))) for k in ks]
    return list(ks)


def _distort(x: torch.Tensor, y: torch.Tensor, k: Sequence) -> tuple[torch.Tensor, torch.Tensor]:
    """OpenCV's forward distortion of normalised coordinates x, y (same shape)."""
    k1, k2, p1, p2, k3 = k
    x2, y2, xy = x * x, y * y, x * y
    r2 = x2 + y2
    radial = 1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))
    xd = x * radial + 2.0 * p1 * xy + p2 * (r2 + 2.0 * x2)
    yd = y * radial + p1 * (r2 + 2.0 * y2) + 2.0 * p2 * xy
    return xd, yd


def _distort_jacobian(x: torch.Tensor, y: torch.Tensor, k: Sequence) -> tuple[torch.Tensor, ...]:
    """Jacobian of `_distort` in (x, y): (d xd/dx, d xd/dy = d yd/dx, d yd/dy) and radial."""
    k1, k2, p1, p2, k3 = k
    x2, y2, xy = x * x, y * y, x * y
    r2 = x2 + y2
    radial = 1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))
    dradial = k1 + r2 * (2.0 * k2 + 3.0 * k3 * r2)  # d radial / d r2
    jxx = radial + 2.0 * x2 * dradial + 2.0 * p1 * y + 6.0 * p2 * x
    jxy = 2.0 * xy * dradial + 2.0 * p1 * x + 2.0 * p2 * y
    jyy = radial + 2.0 * y2 * dradial + 6.0 * p1 * y + 2.0 * p2 * x
    return jxx, jxy, jyy, radial


def distort_normalized(xy: torch.Tensor, coeffs) -> torch.Tensor:
    """OpenCV lens distortion of normalised image coordinates.

    Args:
        xy: (..., 2) ideal normalised coordinates ((u - cx) / fx, (v - cy) / fy), dimensionless.
            With per-image coefficients the leading axis is the batch: (B|1, ..., 2).
        coeffs: (5,) shared or (B, 5) per image (k1, k2, p1, p2, k3) in OpenCV's order; 4
            values mean k3 = 0. With 3 or more axes, (..., 5) broadcasts against xy[..., 0].

    Returns:
        (..., 2) distorted normalised coordinates (leading axes broadcast with coeffs').
    """
    x, y = xy[..., 0], xy[..., 1]
    xd, yd = _distort(x, y, _coefficients(coeffs, x))
    return torch.stack([xd, yd], dim=-1)


def _newton_step(x, y, x0, y0, k, k_jacobian) -> tuple[torch.Tensor, torch.Tensor]:
    """One Newton step on ``_distort(x, y; k) = (x0, y0)`` with the Jacobian at ``k_jacobian``."""
    jxx, jxy, jyy, _ = _distort_jacobian(x, y, k_jacobian)
    det = jxx * jyy - jxy * jxy
    xd, yd = _distort(x, y, k)
    rx, ry = xd - x0, yd - y0
    return x - safe_div(jyy * rx - jxy * ry, det), y - safe_div(jxx * ry - jxy * rx, det)


def _radially_monotone(r2: torch.Tensor, k: Sequence) -> torch.Tensor:
    """True where r * radial(r) increases on [0, r]: the point lies before the first fold.

    d(r radial)/dr = g(t) = 1 + 3 k1 t + 5 k2 t^2 + 7 k3 t^3 with t = r^2; g(0) = 1, so g > 0 on
    [0, r2] iff it is positive at r2 and at its stationary points inside (roots of g', clamped
    to the interval). Tangential terms are ignored (they are small).
    """
    k1, k2, _, _, k3 = k
    a, b, c = 21.0 * k3, 10.0 * k2, 3.0 * k1  # g'(t) = a t^2 + b t + c
    sq = torch.sqrt((b * b - 4.0 * a * c).clamp(min=0.0))
    q = -0.5 * (b + torch.where(b < 0, -sq, sq))  # roots q / a and c / q without cancellation
    ok = torch.ones_like(r2, dtype=torch.bool)
    for t in (r2, safe_div(q, a), safe_div(c, q)):
        t = torch.minimum(t.clamp(min=0.0), r2)
        ok &= 1.0 + t * (3.0 * k1 + t * (5.0 * k2 + t * 7.0 * k3)) > 0
    return ok


def undistort_with_mask(
    xy_distorted: torch.Tensor, coeffs, iterations: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """`undistort_normalized` plus a (...,) bool: converged, before the distortion's first fold."""
    if iterations < 1:
        raise ValueError(f"undistortion needs at least one iteration, got {iterations}")
    x0, y0 = xy_distorted[..., 0], xy_distorted[..., 1]
    k = _coefficients(coeffs, x0)
    x0, y0 = torch.broadcast_tensors(x0, y0, *k)[:2]
    k_det = [kk.detach() for kk in k]
    with torch.no_grad():
        xs, ys = x0.detach(), y0.detach()  # start at the distorted point, as OpenCV does
        for _ in range(iterations - 1):
            xs, ys = _newton_step(xs, ys, x0.detach(), y0.detach(), k_det, k_det)
            xs = xs.clamp(-_UNDISTORT_BOUND, _UNDISTORT_BOUND)
            ys = ys.clamp(-_UNDISTORT_BOUND, _UNDISTORT_BOUND)
    # The last Newton step is evaluated on the graph, from the detached iterate and with the
    # detached Jacobian: its value is one more Newton step, and its derivative is exactly the
    # implicit-function one, -J^-1 (d distort / d theta - d xy_distorted / d theta).
    x, y = _newton_step(xs, ys, x0, y0, k, k_det)
    with torch.no_grad():
        # Converged: the last Newton step (about the remaining error) is tiny.
        step = torch.maximum((x - xs).abs(), (y - ys).abs())
        tol = 1e-10 if x.dtype == torch.float64 else 2e-6
        ok = (step <= tol * (1.0 + x0.abs() + y0.abs())) & _radially_monotone(x * x + y * y, k_det)
    return torch.stack([x, y], dim=-1), ok


def undistort_normalized(xy_distorted: torch.Tensor, coeffs, iterations: int = 10) -> torch.Tensor:
    """Inverse of `distort_normalized`: ideal normalised coordinates of distorted ones.

    Newton's method on the 2-D distortion map, started, like OpenCV's fixed-point iteration,
    at the distorted point (Newton instead of OpenCV's iteration, which stalls near the fold of
    a barrel distortion). The first ``iterations - 1`` steps run without gradient; the last
    runs on the graph with the Jacobian detached, which makes the gradient (in ``xy_distorted``
    and ``coeffs``) that of the exact inverse (implicit-function theorem), not of an unrolled
    iteration. First derivatives only.

    Args:
        xy_distorted: (..., 2) distorted normalised coordinates; (B|1, ..., 2) with (B, 5) coeffs.
        coeffs: (5,) or (B, 5) (k1, k2, p1, p2, k3), as in `distort_normalized`.
        iterations: Newton steps (>= 1).

    Returns:
        (..., 2) undistorted normalised coordinates. Points beyond the distortion's fold have no
        inverse and get a finite but meaningless value (`distortion_map` marks them invalid).
    """
    return undistort_with_mask(xy_distorted, coeffs, iterations)[0]
