"""Per-frame conversion while reading: rotation to upright, crop, scaling and resizing."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

from .errors import VideoError


def resize_frames(frames: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """Resize float frames, averaging when shrinking.

    Args:
        frames: (N, C, h, w) float tensor.
        size: output (width, height) in pixels.

    Returns:
        (N, C, height, width), same dtype and device. An integer shrink factor on both axes
        averages each factor x factor block exactly (``mode="area"``); any other shrink uses
        antialiased bilinear filtering (a triangle filter as wide as the scale); enlarging is
        bilinear. Unchanged size returns ``frames`` itself.
    """
    out_w, out_h = int(size[0]), int(size[1])
    h, w = int(frames.shape[-2]), int(frames.shape[-1])
    if (out_w, out_h) == (w, h):
        return frames
    if out_h <= h and out_w <= w and h % out_h == 0 and w % out_w == 0:
        return F.interpolate(frames, size=(out_h, out_w), mode="area")
    return F.interpolate(
        frames, size=(out_h, out_w), mode="bilinear", align_corners=False, antialias=True
    )


def _output_size(
    size: tuple[int | None, int | None] | None, in_w: int, in_h: int
) -> tuple[int, int]:
    """Output (width, height) for a (cropped) input of in_w x in_h pixels."""
    if size is None:
        return in_w, in_h
    w, h = size
    if h is None:
        return w, max(1, round(w * in_h / in_w))
    if w is None:
        return max(1, round(h * in_w / in_h)), h
    return w, h


def _rotation_degrees(frame, stream) -> float:
    """Counter-clockwise degrees by which ``frame`` must be turned to be shown upright."""
    rot = getattr(frame, "rotation", None)  # PyAV >= 13 reads the display matrix
    if rot is not None:
        return float(rot)
    for sd in getattr(frame, "side_data", ()):  # older PyAV: read the matrix ourselves
        if str(getattr(sd, "type", "")).upper().endswith("DISPLAYMATRIX"):
            m = np.frombuffer(bytes(sd), dtype=np.int32, count=9).astype(np.float64)
            sx, sy = math.hypot(m[0], m[3]), math.hypot(m[1], m[4])
            if sx > 0 and sy > 0:
                return -math.degrees(math.atan2(m[1] / sy, m[0] / sx))
    tag = stream.metadata.get("rotate")  # legacy tag, clockwise degrees
    try:
        return -float(tag) if tag else 0.0
    except ValueError:
        return 0.0


def upright_quarters(frame, stream) -> int:
    """Counter-clockwise quarter turns (0 to 3) that show ``frame`` upright."""
    return round(_rotation_degrees(frame, stream) / 90.0) % 4


def upright_rgb(frame, stream, quarter: int | None = None) -> torch.Tensor:
    """(3, h, w) uint8 RGB of a decoded frame, turned upright by its rotation metadata (or by
    ``quarter`` counter-clockwise quarter turns, when given)."""
    arr = frame.to_ndarray(format="rgb24")  # (h, w, 3) uint8 from any pixel format
    img = torch.from_numpy(arr).permute(2, 0, 1)
    if quarter is None:
        quarter = upright_quarters(frame, stream)
    if quarter:
        # torch.rot90 turns from the first towards the second dim: counter-clockwise on screen
        img = torch.rot90(img, quarter, dims=(1, 2))
    return img


def output_geometry(
    path: str,
    source_size: tuple[int, int],
    crop: tuple[int, int, int, int] | None,
    size: tuple[int | None, int | None] | None,
) -> tuple[int, int, tuple[int, int]]:
    """Output (width, height, (crop width, crop height)); checks the crop against the frame."""
    sw, sh = source_size
    if crop is not None:
        x, y, w, h = crop
        if x + w > sw or y + h > sh:
            raise VideoError(
                f"lies outside the {sw}x{sh} (width x height) upright frame; give x + width "
                f"<= {sw} and y + height <= {sh}",
                path=path,
                argument=f"crop={crop!r}",
            )
        in_w, in_h = w, h
    else:
        in_w, in_h = sw, sh
    out_w, out_h = _output_size(size, in_w, in_h)
    return out_w, out_h, (in_w, in_h)


def store_frame(
    img: torch.Tensor,
    crop: tuple[int, int, int, int] | None,
    geom: tuple[int, int, tuple[int, int]],
    work: torch.dtype,
    device: torch.device,
    slot: torch.Tensor,
) -> None:
    """Crop, scale to [0, 1], resize and write one (3, h, w) uint8 frame into ``slot``."""
    if crop is not None:
        x, y, w, h = crop
        img = img[:, y : y + h, x : x + w]
    # planar uint8 first: float conversion and pooling are several times slower on the
    # channel-interleaved (h, w, 3) layout that RGB frames arrive in
    img = img.contiguous().to(device, non_blocking=True)
    out_w, out_h, in_size = geom
    if (out_w, out_h) == in_size:
        slot.copy_(img).div_(255.0)
        return
    x = img.to(work).div_(255.0)
    slot.copy_(resize_frames(x[None], (out_w, out_h))[0])
