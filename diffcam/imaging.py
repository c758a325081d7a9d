"""Image formation of a real camera around the ideal pinhole render: response, lens, background.

Pure, batched, differentiable tensor functions; they know nothing of scenes or physics.

Conventions (as in `diffcam.camera`): images are (B, C, H, W) floats in [0, 1], row 0 at the top;
pixel (row i, column j) covers x in [j, j+1], y in [i, i+1] and its centre is (j + 0.5, i + 0.5);
intrinsics fx, fy, cx, cy are in pixels in that convention (an OpenCV calibration's cx, cy plus
0.5). Scalar parameters are Python floats or tensors of shape () or (B,) (one per image) and may
require grad; dtype and device follow the image (or points) argument.

* Camera response: ``apply_response`` (linear radiance -> camera output) and ``invert_response``.
* Lens distortion, OpenCV's (k1, k2, p1, p2, k3) model: ``distort_normalized``,
  ``undistort_normalized`` (Newton solve, implicit-function gradient),
  ``distortion_map`` and ``distort_image`` (ideal pinhole image -> distorted image), on a
  gather-based ``sample_bilinear`` whose backward is an index-add (deterministic, unlike
  ``F.grid_sample``'s atomic CUDA backward).
* ``composite_over_plate``: rendered objects over an observed background in linear light.
* From video frames (no gradient): ``clean_plate``, ``noise_level``, ``foreground_mask``,
  ``mean_color``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ._safe import safe_div, tiny
from .textures import gather_rows

__all__ = [
    "apply_response",
    "invert_response",
    "distort_normalized",
    "undistort_normalized",
    "distortion_map",
    "sample_bilinear",
    "distort_image",
    "composite_over_plate",
    "clean_plate",
    "noise_level",
    "foreground_mask",
    "mean_color",
]

Param = float | torch.Tensor

# Undistortion iterates are clamped to this box (normalised units) so divergent points stay finite.
_UNDISTORT_BOUND = 1e3


# ---------------------------------------------------------------------------- parameters
def _tensor(p, like: torch.Tensor) -> torch.Tensor:
    """``p`` (tensor, float or array-like) as a tensor of ``like``'s dtype and device; a tensor
    is converted differentiably, anything else directly (no float32 round trip)."""
    if isinstance(p, torch.Tensor):
        return p.to(dtype=like.dtype, device=like.device)
    return torch.as_tensor(p, dtype=like.dtype, device=like.device)


def _is_plain(p: Param, value: float) -> bool:
    """True if ``p`` is a Python number equal to ``value`` (then the operation is skipped)."""
    return isinstance(p, int | float) and float(p) == value


def _param(p: Param, like: torch.Tensor) -> Param:
    """``p`` ready to broadcast against ``like`` (B, ...): floats stay floats, a (B,) tensor
    becomes (B, 1, ..., 1); tensors take ``like``'s dtype and device (differentiably)."""
    if not isinstance(p, torch.Tensor):
        return float(p)
    p = p.to(dtype=like.dtype, device=like.device)
    if p.dim() == 0:
        return p
    if p.dim() != 1:
        raise ValueError(f"per-image parameters must have shape () or (B,), got {tuple(p.shape)}")
    return p.view(-1, *([1] * (like.dim() - 1)))


def _safe_pow(x: torch.Tensor, p: Param) -> torch.Tensor:
    """``x ** p`` for x >= 0 with finite gradients (in x and p) everywhere.

    Below a tiny ``eps`` the power is replaced by its chord ``x * eps ** (p - 1)`` (continuous
    at eps, 0 at 0), so neither ``p x^(p-1)`` nor ``x^p log x`` is evaluated at 0.
    """
    eps = tiny(x)
    big = x > eps
    xs = torch.where(big, x, torch.ones_like(x))
    return torch.where(big, xs**p, x * eps ** (p - 1.0))


# ---------------------------------------------------------------------------- response
def apply_response(
    x: torch.Tensor, gain: Param = 1.0, offset: Param = 0.0, gamma: Param = 1.0
) -> torch.Tensor:
    """Camera response: linear radiance -> camera output, ``offset + gain * x ** (1 / gamma)``.

    Args:
        x: (B, ...) linear radiance, >= 0 (e.g. (B, C, H, W)).
        gain: () or (B,) scale of the output (> 0).
        offset: () or (B,) black level, in output units.
        gamma: () or (B,) encoding exponent (> 0); 2.2 for an sRGB-like curve.

    Returns:
        (B, ...) camera output (nominally in [0, 1]). Parameters left at their plain Python
        defaults cost nothing; with all of them, ``x`` itself is returned.
    """
    y = x
    if not _is_plain(gamma, 1.0):
        y = _safe_pow(y, 1.0 / _param(gamma, x))
    if not _is_plain(gain, 1.0):
        y = y * _param(gain, x)
    if not _is_plain(offset, 0.0):
        y = y + _param(offset, x)
    return y


def invert_response(
    y: torch.Tensor, gain: Param = 1.0, offset: Param = 0.0, gamma: Param = 1.0
) -> torch.Tensor:
    """Inverse camera response: output -> linear radiance, ``clamp((y - offset) / gain, 0) ** gamma``.

    Args:
        y: (B, ...) camera output.
        gain, offset, gamma: () or (B,), as in `apply_response`.

    Returns:
        (B, ...) linear radiance >= 0 (outputs below the black level map to 0). With all
        parameters at their plain defaults ``y`` itself is returned (no clamp).
    """
    if _is_plain(gain, 1.0) and _is_plain(offset, 0.0) and _is_plain(gamma, 1.0):
        return y
    x = y
    if not _is_plain(offset, 0.0):
        x = x - _param(offset, y)
    if not _is_plain(gain, 1.0):
        x = x / _param(gain, y)
    x = x.clamp(min=0.0)
    if not _is_plain(gamma, 1.0):
        x = _safe_pow(x, _param(gamma, y))
    return x


# ---------------------------------------------------------------------------- distortion model
def _coefficients(coeffs, like: torch.Tensor) -> list[torch.Tensor]:
    """(k1, k2, p1, p2, k3), each shaped to broadcast with ``like`` (B, ...).

    ``coeffs`` (any array-like; OpenCV order, a missing k3 is 0): (4|5,) shared; (B, 4|5) one
    per image, aligned with ``like``'s leading axis; (..., 4|5) with 3 or more axes broadcasts
    its leading axes against ``like``'s shape as usual (trailing axes aligned).
    """
    c = _tensor(coeffs, like)
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


def _undistort(
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
    return _undistort(xy_distorted, coeffs, iterations)[0]


# ---------------------------------------------------------------------------- warping
def _first_tensor(*xs) -> torch.Tensor | None:
    for x in xs:
        if isinstance(x, torch.Tensor):
            return x
    return None


def _intrinsic(p: Param, like: torch.Tensor) -> torch.Tensor:
    """An intrinsic () or (B,) -> (B|1, 1, 1) tensor of ``like``'s dtype/device."""
    return _tensor(p, like).reshape(-1, 1, 1)


def _margins(margin: int | tuple[int, int]) -> tuple[int, int]:
    """``margin`` -> (rows, columns)."""
    if isinstance(margin, int):
        return margin, margin
    return int(margin[0]), int(margin[1])


def distortion_map(
    height: int,
    width: int,
    fx: Param,
    fy: Param,
    cx: Param,
    cy: Param,
    coeffs,
    *,
    margin: int | tuple[int, int] = 0,
    iterations: int = 10,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Where each pixel of the distorted image looks in the ideal pinhole image.

    Output pixel centre p = (j + 0.5, i + 0.5) is undistorted and re-projected with the same
    intrinsics. The position is formed as ``p + f * (undistorted - distorted)`` so that zero
    distortion gives exactly ``p``.

    Args:
        height, width: size of the distorted (output) image in pixels.
        fx, fy, cx, cy: () or (B,) intrinsics of the real camera, pixels (half-pixel convention).
        coeffs: (5,) or (B, 5) OpenCV distortion (k1, k2, p1, p2, k3).
        margin: the ideal image extends this many pixels beyond the output frame on each side,
            int or (rows, columns): it is (H + 2 rows, W + 2 columns) with principal point
            (cx + columns, cy + rows).
        iterations: Newton steps of the undistortion, see `undistort_normalized`.

    Returns:
        positions: (B|1, H, W, 2) continuous (x, y) pixel coordinates in the ideal image.
        valid: (B|1, 1, H, W) bool: the undistortion converged, before the distortion's first
            fold (where r * radial(r) stops increasing), and the position lies within the ideal
            image's pixel centres (so bilinear sampling needs no padding).
    """
    ref = _first_tensor(fx, fy, cx, cy, coeffs)
    if ref is None or not ref.is_floating_point():
        ref = torch.zeros(
            (), dtype=torch.get_default_dtype(), device=None if ref is None else ref.device
        )
    fx, fy, cx, cy = (_intrinsic(v, ref) for v in (fx, fy, cx, cy))
    my, mx = _margins(margin)
    px = torch.arange(width, dtype=ref.dtype, device=ref.device).view(1, 1, -1) + 0.5
    py = torch.arange(height, dtype=ref.dtype, device=ref.device).view(1, -1, 1) + 0.5
    xd = (px - cx) / fx
    yd = (py - cy) / fy
    xd, yd = torch.broadcast_tensors(xd, yd)
    xy_u, ok = _undistort(torch.stack([xd, yd], dim=-1), coeffs, iterations)
    u = px + fx * (xy_u[..., 0] - xd) + mx
    v = py + fy * (xy_u[..., 1] - yd) + my
    with torch.no_grad():
        inside = (
            (u >= 0.5) & (u <= width + 2 * mx - 0.5) & (v >= 0.5) & (v <= height + 2 * my - 0.5)
        )
    return torch.stack([u, v], dim=-1), (ok & inside).unsqueeze(1)


def sample_bilinear(
    image: torch.Tensor, positions: torch.Tensor, padding: str = "zeros"
) -> torch.Tensor:
    """Bilinear sampling at continuous pixel positions, by gathers (deterministic backward).

    Args:
        image: (B|1, C, H, W).
        positions: (B|1, Ho, Wo, 2) continuous (x, y) pixel coordinates; (j + 0.5, i + 0.5) is
            the centre of pixel (i, j) and returns it exactly.
        padding: "zeros" (taps outside the image are 0) or "border" (clamped to the edge).

    Returns:
        (B, C, Ho, Wo), differentiable in ``image`` and ``positions``.
    """
    if padding not in ("zeros", "border"):
        raise ValueError(f"padding must be 'zeros' or 'border', got {padding!r}")
    bi, c, h, w = image.shape
    bp, ho, wo, _ = positions.shape
    if bi != bp and 1 not in (bi, bp):
        raise ValueError(f"sample_bilinear: batch sizes {bi} and {bp} do not broadcast")
    b = max(bi, bp)
    x = positions[..., 0] - 0.5  # array-index coordinates
    y = positions[..., 1] - 0.5
    # Floor of finite, bounded values (any position this far out has every tap outside).
    x0f = torch.floor(torch.nan_to_num(x.detach(), nan=-2.0).clamp(-2.0, w + 1.0))
    y0f = torch.floor(torch.nan_to_num(y.detach(), nan=-2.0).clamp(-2.0, h + 1.0))
    ax = (x - x0f).expand(b, ho, wo).reshape(-1, 1)  # gradients to positions flow through these
    ay = (y - y0f).expand(b, ho, wo).reshape(-1, 1)
    x0 = x0f.long().expand(b, ho, wo).reshape(-1)
    y0 = y0f.long().expand(b, ho, wo).reshape(-1)
    base = torch.arange(b, device=image.device).repeat_interleave(ho * wo) * (h * w)
    if bi == 1:
        base = torch.zeros_like(base)
    flat = image.permute(0, 2, 3, 1).reshape(bi * h * w, c)
    idx, keep = [], []
    for dy in (0, 1):
        yi = y0 + dy
        for dx in (0, 1):
            xi = x0 + dx
            idx.append(base + yi.clamp(0, h - 1) * w + xi.clamp(0, w - 1))
            keep.append((xi >= 0) & (xi < w) & (yi >= 0) & (yi < h))
    taps = gather_rows(flat, torch.cat(idx)).view(4, -1, c)
    if padding == "zeros":
        taps = taps * torch.stack(keep).unsqueeze(-1).to(taps.dtype)
    top = taps[0] + (taps[1] - taps[0]) * ax
    bottom = taps[2] + (taps[3] - taps[2]) * ax
    out = top + (bottom - top) * ay
    return out.view(b, ho, wo, c).permute(0, 3, 1, 2).contiguous()


def distort_image(
    image: torch.Tensor,
    fx: Param,
    fy: Param,
    cx: Param,
    cy: Param,
    coeffs,
    *,
    margin: int | tuple[int, int] = 0,
    padding: str = "zeros",
    iterations: int = 10,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The image a distorting lens forms, from the ideal pinhole image with the same intrinsics.

    Each output pixel centre samples the ideal image (bilinear) at the ideal position of its
    undistorted direction (`distortion_map`). Zero distortion returns the input exactly.

    Args:
        image: (B|1, C, H + 2 * rows, W + 2 * columns) ideal pinhole image (see ``margin``).
        fx, fy, cx, cy: () or (B,) intrinsics of the output camera, pixels (half-pixel centres).
        coeffs: (5,) or (B, 5) OpenCV distortion (k1, k2, p1, p2, k3).
        margin: int or (rows, columns) of extra ideal-image pixels around the output frame
            (render them to fill the corners a barrel distortion pulls in).
        padding: "zeros" or "border", for samples outside the ideal image.
        iterations: Newton steps of the undistortion, see `undistort_normalized`.

    Returns:
        distorted: (B, C, H, W), differentiable in ``image``, ``coeffs`` and fx, fy, cx, cy.
        valid: (B|1, 1, H, W) bool, `distortion_map`'s: the pixel has an undistorted direction
            and its sample lies inside the ideal image.
    """
    my, mx = _margins(margin)
    h, w = image.shape[-2] - 2 * my, image.shape[-1] - 2 * mx
    if h <= 0 or w <= 0:
        raise ValueError(f"distort_image: margin {margin} leaves no output pixels")
    fx, fy, cx, cy, coeffs = (_tensor(v, image) for v in (fx, fy, cx, cy, coeffs))
    positions, valid = distortion_map(
        h,
        w,
        fx,
        fy,
        cx,
        cy,
        coeffs,
        margin=(my, mx),
        iterations=iterations,
    )
    return sample_bilinear(image, positions, padding), valid


# ---------------------------------------------------------------------------- compositing
def composite_over_plate(
    color: torch.Tensor,
    coverage: torch.Tensor,
    plate: torch.Tensor,
    gain: Param = 1.0,
    offset: Param = 0.0,
    gamma: Param = 1.0,
) -> torch.Tensor:
    """Rendered objects over an observed background, blended in linear light.

    ``apply_response(color + (1 - coverage) * invert_response(plate))``, plus
    ``(1 - coverage) * residual`` where ``residual = plate - apply_response(invert_response(plate))``
    is the part of the plate the response cannot produce (values below the black level, and
    rounding): uncovered pixels reproduce the plate whatever the response parameters.

    Args:
        color: (B, 3, H, W) premultiplied linear radiance of the objects (the render over black;
            0 where coverage is 0).
        coverage: (B, 1, H, W) in [0, 1], 1 where objects fully cover the pixel.
        plate: (B|1, 3, H, W) observed background, camera-output units.
        gain, offset, gamma: () or (B,) response, as in `apply_response`.

    Returns:
        (B, 3, H, W) camera output.
    """
    uncovered = 1.0 - coverage
    if _is_plain(gain, 1.0) and _is_plain(offset, 0.0) and _is_plain(gamma, 1.0):
        return color + uncovered * plate
    radiance = invert_response(plate, gain, offset, gamma)
    residual = plate - apply_response(radiance, gain, offset, gamma)
    out = apply_response(color + uncovered * radiance, gain, offset, gamma)
    return out + uncovered * residual


# ---------------------------------------------------------------------------- video statistics
def _frame_block(frames, index: Sequence[int], rows: slice = slice(None)) -> torch.Tensor:
    """Frames ``index`` of a (T, C, H, W) tensor or indexable, rows ``rows`` -> (n, C, h, W) float
    (uint8 scaled to [0, 1])."""
    if isinstance(frames, torch.Tensor):
        block = frames[:, :, rows][torch.as_tensor(list(index), device=frames.device)]
    else:
        block = torch.stack([torch.as_tensor(frames[i])[:, rows] for i in index])
    if block.dtype == torch.uint8:
        return block.to(torch.float32) / 255.0
    return block if block.is_floating_point() else block.to(torch.get_default_dtype())


def _spread(count: int, at_most: int) -> list[int]:
    """Up to ``at_most`` indices spread evenly over range(count), first and last included."""
    n = max(1, min(count, at_most))
    return sorted({round(i * (count - 1) / max(n - 1, 1)) for i in range(n)})


def _median(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """Median along ``dim``, the mean of the two middle values for an even count."""
    n = x.shape[dim]
    s = x.sort(dim=dim).values
    hi = s.narrow(dim, n // 2, 1)
    if n % 2:
        return hi.squeeze(dim)
    return (0.5 * (s.narrow(dim, n // 2 - 1, 1) + hi)).squeeze(dim)


def clean_plate(frames, max_frames: int = 64, block_elements: int = 1 << 24) -> torch.Tensor:
    """Static background of a video: the per-pixel temporal median.

    A moving object covers each pixel for less than half the frames, so the median is the
    background there. Computed in row blocks of about ``block_elements`` values.

    Args:
        frames: (T, 3, H, W) tensor (float in [0, 1] or uint8), or any sequence of (3, H, W)
            frames (tensors or arrays; each is indexed once per row block).
        max_frames: at most this many frames, spread evenly over T, enter the median.
        block_elements: memory bound, in values, of one block of frames.

    Returns:
        (3, H, W) background, float (no gradient).
    """
    index = _spread(len(frames), max_frames)
    first = _frame_block(frames, index[:1])
    c, h, w = first.shape[1:]
    rows = max(1, block_elements // max(1, len(index) * c * w))
    plate = torch.empty((c, h, w), dtype=first.dtype, device=first.device)
    with torch.no_grad():
        for r0 in range(0, h, rows):
            block = _frame_block(frames, index, slice(r0, r0 + rows))
            plate[:, r0 : r0 + rows] = _median(block, 0)
    return plate


def _residuals(frames, plate: torch.Tensor, max_frames: int, max_samples: int) -> torch.Tensor:
    """(3, N) frame minus plate over up to ``max_frames`` frames and about ``max_samples``
    pixel-times per channel (strided in space)."""
    index = _spread(len(frames), max_frames)
    c, h, w = plate.shape[-3:]
    stride = max(1, int((len(index) * h * w / max_samples) ** 0.5))
    res = []
    for i in index:
        f = _frame_block(frames, [i])[0].to(plate)
        res.append((f - plate.reshape(c, h, w))[:, ::stride, ::stride].reshape(c, -1))
    return torch.cat(res, dim=1)


def noise_level(
    frames, plate: torch.Tensor, max_frames: int = 16, max_samples: int = 1 << 22
) -> torch.Tensor:
    """Robust per-channel standard deviation of the pixel noise around the plate.

    ``1.4826 * MAD`` (the Gaussian-consistent median absolute deviation) of frame - plate, over
    background-like pixel-times: a first MAD over all of them sets a 5-sigma cut that drops the
    foreground, and the MAD of the rest is returned.

    Args:
        frames: (T, 3, H, W) tensor or sequence of (3, H, W) frames, as in `clean_plate`.
        plate: (3, H, W) background in the same units (`clean_plate`).
        max_frames, max_samples: frames used and pixel-times sampled per channel.

    Returns:
        (3,) noise standard deviation per channel, in image units (0 for noiseless frames).
    """
    with torch.no_grad():
        r = _residuals(frames, plate, max_frames, max_samples)
        centre = r.median(dim=1, keepdim=True).values
        dev = (r - centre).abs()
        sigma0 = 1.4826 * dev.median(dim=1, keepdim=True).values
        background = (dev <= 5.0 * sigma0).all(dim=0)
        if not background.any():
            return sigma0.squeeze(1)
        dev = dev[:, background]
        return 1.4826 * dev.median(dim=1).values


def _erode(mask: torch.Tensor, size: int) -> torch.Tensor:
    """Float (N, 1, H, W) mask -> 1 where the ``size`` x ``size`` window starting there (down and
    right) is all 1 inside the image."""
    padded = F.pad(1.0 - mask, (0, size - 1, 0, size - 1), value=1.0)
    return 1.0 - F.max_pool2d(padded, size, stride=1)


def _dilate_back(mask: torch.Tensor, size: int) -> torch.Tensor:
    """Adjoint of `_erode`'s window: 1 where some window ending there (up and left) is 1."""
    padded = F.pad(mask, (size - 1, 0, size - 1, 0), value=0.0)
    return F.max_pool2d(padded, size, stride=1)


def _open(mask: torch.Tensor, size: int) -> torch.Tensor:
    """Morphological opening by a ``size`` x ``size`` square: the union of the squares that fit."""
    if size <= 1:
        return mask
    return _dilate_back(_erode(mask, size), size)


def foreground_mask(
    frames,
    plate: torch.Tensor,
    threshold: float | torch.Tensor | None = None,
    *,
    opening: int = 2,
    dilation: int = 0,
    sigmas: float = 4.0,
    min_threshold: float = 0.04,
    block_elements: int = 1 << 24,
) -> torch.Tensor:
    """Pixels where a frame differs from the background plate.

    A pixel is foreground if any channel differs from the plate by more than the threshold;
    then a morphological opening removes specks smaller than ``opening`` x ``opening`` pixels
    (noise), and an optional dilation grows the mask.

    Args:
        frames: (T, 3, H, W) tensor or sequence of (3, H, W) frames, as in `clean_plate`.
        plate: (3, H, W) background (`clean_plate`).
        threshold: absolute difference, a float or (3,) per channel. Default:
            ``max(sigmas * noise_level(frames, plate), min_threshold)`` per channel.
        opening: side of the opening's square, pixels (1 = none). Structures thinner than this
            are removed too.
        dilation: radius of a final square dilation, pixels (0 = none).
        block_elements: memory bound, in values, of one block of frames.

    Returns:
        (T, 1, H, W) bool.
    """
    c, h, w = plate.shape[-3:]
    plate = plate.reshape(1, c, h, w)
    if threshold is None:
        threshold = (sigmas * noise_level(frames, plate[0])).clamp(min=min_threshold)
    thr = torch.as_tensor(threshold, dtype=plate.dtype, device=plate.device).reshape(-1, 1, 1)
    t = len(frames)
    step = max(1, block_elements // (c * h * w))
    out = torch.empty((t, 1, h, w), dtype=torch.bool, device=plate.device)
    with torch.no_grad():
        for t0 in range(0, t, step):
            block = _frame_block(frames, range(t0, min(t, t0 + step))).to(plate)
            m = ((block - plate).abs() > thr).any(dim=1, keepdim=True).to(plate.dtype)
            m = _open(m, opening)
            if dilation > 0:
                m = F.max_pool2d(m, 2 * dilation + 1, stride=1, padding=dilation)
            out[t0 : t0 + step] = m > 0.5
    return out


def mean_color(frames, mask: torch.Tensor, max_samples: int = 1 << 22) -> torch.Tensor:
    """Typical colour of the masked pixels: the per-channel median (robust to edges, shadows).

    Args:
        frames: (T, 3, H, W) tensor or sequence of (3, H, W) frames, as in `clean_plate`.
        mask: (T, 1, H, W) or (T, H, W) bool, e.g. `foreground_mask`.
        max_samples: the pixels are strided down to about this many.

    Returns:
        (3,) colour in image units.
    """
    mask = mask.reshape(mask.shape[0], *mask.shape[-2:])
    total = int(mask.sum())
    if total == 0:
        raise ValueError("mean_color: the mask selects no pixel")
    stride = max(1, total // max_samples)
    picked = []
    with torch.no_grad():
        for i in range(len(frames)):
            if mask[i].any():
                f = _frame_block(frames, [i])[0]
                picked.append(f[:, mask[i].to(f.device)])
        values = torch.cat(picked, dim=1)[:, ::stride]
        return _median(values, dim=1)
