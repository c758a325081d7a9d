"""Statistics of video frames (no gradient): `clean_plate`, `noise_level`, `foreground_mask`,
`shadow_mask`, `mean_color`."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


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


def shadow_mask(
    frames,
    plate: torch.Tensor,
    darkest: float = 0.4,
    lightest: float = 0.95,
    tolerance: float = 0.05,
    block_elements: int = 1 << 24,
) -> torch.Tensor:
    """Pixels that look like the plate in shadow: darker by a common factor in every channel.

    A shadow dims the light a surface gets, not its colour: the frame there is about ``k`` times
    the plate with ``darkest <= k <= lightest`` in all three channels. A coloured body is not
    (its colour differs from the wall's); a body much darker than the wall is not either (k
    below ``darkest``). A grey body a little darker than a grey wall is indistinguishable from a
    shadow by colour alone and is marked as one.

    Args:
        frames: (T, 3, H, W) tensor or sequence of (3, H, W) frames, as in `clean_plate`.
        plate: (3, H, W) background (`clean_plate`).
        darkest, lightest: the range of the dimming factor k.
        tolerance: how far (relative to the plate's brightness) the frame may be from k x plate.
        block_elements: memory bound, in values, of one block of frames.

    Returns:
        (T, 1, H, W) bool.
    """
    c, h, w = plate.shape[-3:]
    plate = plate.reshape(1, c, h, w)
    t = len(frames)
    step = max(1, block_elements // (c * h * w))
    out = torch.empty((t, 1, h, w), dtype=torch.bool, device=plate.device)
    power = plate.square().sum(1, keepdim=True).clamp_min(1e-6)
    with torch.no_grad():
        for t0 in range(0, t, step):
            block = _frame_block(frames, range(t0, min(t, t0 + step))).to(plate)
            k = (block * plate).sum(1, keepdim=True) / power
            off = (block - k * plate).square().sum(1, keepdim=True) / power
            out[t0 : t0 + step] = (k >= darkest) & (k <= lightest) & (off <= tolerance**2)
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
