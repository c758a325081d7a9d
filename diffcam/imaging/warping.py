"""Images through the lens: `distortion_map` and `distort_image` (ideal pinhole image ->
distorted image) on a gather-based `sample_bilinear` whose backward is an index-add
(deterministic, unlike ``F.grid_sample``'s atomic CUDA backward)."""

from __future__ import annotations

import torch

from ..textures import gather_rows
from .distortion import undistort_with_mask
from .parameters import Param, as_tensor_like


def _first_tensor(*xs) -> torch.Tensor | None:
    for x in xs:
        if isinstance(x, torch.Tensor):
            return x
    return None


def _intrinsic(p: Param, like: torch.Tensor) -> torch.Tensor:
    """An intrinsic () or (B,) -> (B|1, 1, 1) tensor of ``like``'s dtype/device."""
    return as_tensor_like(p, like).reshape(-1, 1, 1)


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
    xy_u, ok = undistort_with_mask(torch.stack([xd, yd], dim=-1), coeffs, iterations)
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
    fx, fy, cx, cy, coeffs = (as_tensor_like(v, image) for v in (fx, fy, cx, cy, coeffs))
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
