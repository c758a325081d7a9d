"""Shrinking in YUV: area averages of a decoded frame's Y, U and V planes, turned into RGB at
the output size (what `read_video` does by default where it can; ``Video.conversion`` is then
``"yuv"``).

The reference conversion (``conversion="rgb"``: `frames.upright_rgb`, then `frames.store_frame`)
has FFmpeg (swscale) turn every full-size frame into 8-bit RGB, then turns it upright, crops
it and averages it down in torch. For an H.264 720p frame that costs about three times as much
as decoding it. But swscale's YUV to RGB conversion is, pixel by pixel, an affine map of the
pixel's (Y, U, V) (each chroma sample serving the 2 x 2 (4:2:0) or 2 x 1 (4:2:2) pixels it
covers), rounded to 8 bits and clipped to [0, 255]. An area average is linear, so where no
pixel of an output pixel's block clips, converting the block's average (Y, U, V) gives the
average of the converted pixels, up to their rounding. So this path sums each plane over the
blocks (8-bit integers, on the CPU, in the frame's own memory: no copy), converts the sums
with the same affine map, and recomputes pixel by pixel (converted, clipped, then averaged)
the few blocks whose pixels may clip, as bounds from the block's extreme Y, U and V say.

The affine map is measured, not assumed: `_conversion` converts a frame of known colours of
the same pixel format, colour matrix, range and size through the very call the reference path
makes and fits the map to the result, so the two paths agree whatever matrix PyAV and swscale
pick; where the result is not such a map with nearest chroma (swscale interpolates the chroma
of 4:2:0 frames of an odd height), the reference path is used.

What differs from the reference is rounding only: the reference rounds every pixel to 8 bits
(swscale's fixed-point arithmetic is off the exact affine map by up to about 1.5 levels, in a
way that depends on the colour), and this path does not. On the 720p benchmark clip the two
differ by 0.3 of an 8-bit level on average and by 1.3 levels at most
(``benchmarks/bench_read_video.py``); the tests allow 0.5 and 2.5. One exception, outside
the legal ranges: swscale's 4:4:4 conversion wraps around (to 0 blue) for Y over 237 with U
over 245, where this path clips (to full blue).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import torch

# 8-bit planar YUV formats: (horizontal, vertical) chroma subsampling. The "j" formats are
# full range.
_PLANAR_YUV = {
    "yuv420p": (2, 2),
    "yuvj420p": (2, 2),
    "yuv422p": (2, 1),
    "yuvj422p": (2, 1),
    "yuv444p": (1, 1),
    "yuvj444p": (1, 1),
}

# RGB (0-255) to limited-range YUV offsets from (16, 128, 128), BT.601: only to choose the
# colours `_conversion` measures with.
_BT601 = np.array(
    [[0.257, 0.504, 0.098], [-0.148, -0.291, 0.439], [0.439, -0.368, -0.071]], dtype=np.float64
)

# Stage-one work goes a band of block rows at a time, of about this many bytes of Y.
_BAND_BYTES = 1 << 18

# The fitted map must reproduce swscale's conversion of unclipped colours to within this many
# 8-bit levels, else the reference path is used (swscale's fixed point is off by up to ~1.5).
_MAX_FIT_ERROR = 2.5


@functools.lru_cache(maxsize=32)
def _conversion(
    fmt: str, colorspace: int, color_range: int, width: int, height: int
) -> np.ndarray | None:
    """(3, 4) float64 ``M``: RGB (8-bit levels, unclipped) = M @ (Y, U, V, 1) as the reference
    path's ``frame.to_ndarray(format="rgb24")`` converts frames of this pixel format, colour
    matrix, range and size; None if that conversion does not do so to within `_MAX_FIT_ERROR`
    at every unclipped pixel, each chroma sample serving the pixels it covers.

    The size matters: swscale picks its code by it (4:2:0 frames of an odd height are
    converted with the chroma interpolated between samples, which this path cannot follow)."""
    import av

    sx, sy = _PLANAR_YUV[fmt]
    frame = av.VideoFrame(width, height, fmt)
    try:
        frame.colorspace = colorspace
        frame.color_range = color_range
    except (AttributeError, TypeError, ValueError):
        return None  # an old PyAV: the conversion's colour matrix cannot be matched
    # one random colour per 2 x 2 pixel block (one chroma sample of 4:2:0): under nearest
    # chroma the four pixels convert alike, under interpolation they do not. The colours are
    # random RGB ones, in YUV by the usual matrix (BT.601), so that few of them clip
    blocks = ((height + 1) // 2, (width + 1) // 2)
    rng = np.random.default_rng(0)
    tile = 64  # a tile of 64 x 64 blocks repeated over the frame
    rgb_in = rng.uniform(8.0, 247.0, size=(3, tile * tile))
    colours = (_BT601 @ rgb_in + np.array([[16.0], [128.0], [128.0]])).round()
    colours = colours.clip(0, 255).astype(np.uint8).reshape(3, tile, tile)
    reps = (1, -(-blocks[0] // tile), -(-blocks[1] // tile))
    values = np.tile(colours, reps)[:, : blocks[0], : blocks[1]]
    for i, plane in enumerate(frame.planes[:3]):
        rows = np.frombuffer(plane, np.uint8).reshape(plane.height, plane.line_size)
        ry, rx = (1, 1) if i == 0 else (sy, sx)
        up = values[i].repeat(2 // ry, axis=0).repeat(2 // rx, axis=1)
        rows[: plane.height, : plane.width] = up[: plane.height, : plane.width]
    rgb = frame.to_ndarray(format="rgb24")
    # the pixels checked: a random sample, and the last two rows and columns
    pick = rng.integers(0, width * height, size=1 << 15)
    r, c = np.divmod(pick, width)
    last_r, last_c = np.arange(max(0, height - 2), height), np.arange(max(0, width - 2), width)
    r = np.concatenate([r, last_r.repeat(width), np.tile(np.arange(height), last_c.size)])
    c = np.concatenate([c, np.tile(np.arange(width), last_r.size), last_c.repeat(height)])
    got = rgb[r, c].astype(np.float64)  # (N, 3)
    yuv1 = np.concatenate([values[:, r // 2, c // 2], np.ones((1, r.size))]).T.astype(np.float64)
    inside = ((got > 0) & (got < 255)).all(axis=1)  # unclipped
    if inside.sum() < min(1000, r.size // 2):
        return None
    m, *_ = np.linalg.lstsq(yuv1[inside], got[inside], rcond=None)
    if np.abs(yuv1[inside] @ m - got[inside]).max() > _MAX_FIT_ERROR:
        return None
    return m.T.copy()


def _frame_key(frame) -> tuple[str, int, int, int, int] | None:
    """(pixel format, colour matrix, range, width, height): what a plan is made for."""
    try:
        return (
            frame.format.name,
            int(frame.colorspace),
            int(frame.color_range),
            int(frame.width),
            int(frame.height),
        )
    except (AttributeError, TypeError, ValueError):
        return None


def _stored_rect(
    quarter: int, stored: tuple[int, int], rect: tuple[int, int, int, int]
) -> tuple[int, int, int, int]:
    """The (row, col, rows, cols) of the stored (not yet upright) frame of ``stored``
    (width, height) that ``rect`` (x, y, width, height in upright pixels) comes from, when
    the frame is turned upright by ``torch.rot90(img, quarter, dims=(1, 2))``."""
    x, y, w, h = rect
    sw, sh = stored
    if quarter == 0:
        return y, x, h, w
    if quarter == 1:  # upright[r, c] = stored[c, sw - 1 - r]
        return x, sw - y - h, w, h
    if quarter == 2:  # upright[r, c] = stored[sh - 1 - r, sw - 1 - c]
        return sh - y - h, sw - x - w, h, w
    return sh - x - w, y, w, h  # upright[r, c] = stored[sh - 1 - c, r]


def _halve(x: np.ndarray, group: int, op) -> np.ndarray:
    """``op`` (np.add, np.minimum or np.maximum) over each run of ``group`` columns of ``x``
    (..., columns)."""
    while group > 1 and group % 2 == 0:  # pairwise: far faster than reducing a short axis
        x = op(x[..., 0::2], x[..., 1::2])
        group //= 2
    if group > 1:
        x = op.reduce(x.reshape(*x.shape[:-1], -1, group), axis=-1)
    return x


@dataclass
class YuvPlan:
    """How to average one kind of frame (``key``) into an output slot in YUV.

    The work is NumPy's, on the CPU: its small operations cost far less overhead than torch's,
    and each frame takes a few dozen of them."""

    key: tuple[str, int, int, int, int]
    quarter: int  # rot90 steps that turn the stored frame upright
    rect: tuple[int, int, int, int]  # (row, col, rows, cols) of the stored frame to average
    block: tuple[int, int]  # (rows, cols) of stored pixels per output pixel
    sub: tuple[int, int]  # (rows, cols) of pixels per chroma sample
    work: torch.dtype  # float32, or float64 for float64 output
    matrix: np.ndarray  # (3, 4): 8-bit RGB = matrix @ (Y, U, V, 1), unclipped
    pixel_matrix: np.ndarray  # matrix in the work dtype, as (3, 4, 1, 1, 1, 1, 1)
    scale: torch.Tensor  # (3, 3) work dtype: RGB in [0, 1] = scale @ block sums + offset
    offset: torch.Tensor  # (3, 1) work dtype
    excess: np.ndarray  # (6, 6): see `_excess`
    excess_offset: np.ndarray  # (6, 1)
    sums: type  # unsigned integer dtype that holds a block's sum

    def store(self, frame, quarter: int, slot: torch.Tensor) -> bool:
        """Write the frame's output pixels into ``slot`` (3, H, W); False (slot untouched) if
        the frame is not of the kind the plan was made for."""
        if quarter != self.quarter or _frame_key(frame) != self.key:
            return False
        r0, c0, rows, cols = self.rect
        by, bx = self.block
        sy, sx = self.sub
        oh, ow = rows // by, cols // bx
        planes = []  # the frame's own memory, cropped: no copy
        for i, plane in enumerate(frame.planes[:3]):
            ry, rx = (1, 1) if i == 0 else (sy, sx)
            full = np.frombuffer(plane, np.uint8, count=plane.height * plane.line_size)
            full = full.reshape(plane.height, plane.line_size)
            planes.append(full[r0 // ry : (r0 + rows) // ry, c0 // rx : (c0 + cols) // rx])
        # Each plane's sums and extremes over each block row's rows, a band of block rows at a
        # time so that the three passes over its pixels find them in the cache. Y is then
        # brought to the chroma's columns, so that the three planes go together.
        width = cols // sx
        rowsums = np.empty((3, oh, width), self.sums)
        ext = np.empty((6, oh, width), np.uint8)  # minima, then maxima
        ysum = np.empty((oh, cols), self.sums)
        ylow, yhigh = np.empty((oh, cols), np.uint8), np.empty((oh, cols), np.uint8)
        step = max(1, _BAND_BYTES // (by * cols))
        for j in range(0, oh, step):
            k = min(oh, j + step)
            y = planes[0][j * by : k * by].reshape(k - j, by, cols)
            np.add.reduce(y, axis=1, out=ysum[j:k])
            np.minimum.reduce(y, axis=1, out=ylow[j:k])
            np.maximum.reduce(y, axis=1, out=yhigh[j:k])
            for i in (1, 2):
                p = planes[i][j * by // sy : k * by // sy].reshape(k - j, by // sy, width)
                np.add.reduce(p, axis=1, out=rowsums[i, j:k])
                np.minimum.reduce(p, axis=1, out=ext[i, j:k])
                np.maximum.reduce(p, axis=1, out=ext[3 + i, j:k])
        rowsums[0] = _halve(ysum, sx, np.add)
        ext[0] = _halve(ylow, sx, np.minimum)
        ext[3] = _halve(yhigh, sx, np.maximum)
        # then over each block's columns
        flat = _halve(rowsums, bx // sx, np.add).reshape(3, oh * ow)
        dtype = np.float64 if self.work == torch.float64 else np.float32
        direct = slot.dtype == self.work and slot.device.type == "cpu" and self.quarter == 0
        rgb = slot.numpy().reshape(3, oh * ow) if direct else np.empty((3, oh * ow), dtype)
        # torch's matmul: it keeps to read_video's one thread, NumPy's BLAS may not
        torch.addmm(
            self.offset,
            self.scale,
            torch.from_numpy(flat.astype(dtype)),
            out=torch.from_numpy(rgb),
        )
        self._fix_clipped(planes, ext, rgb, oh, ow)
        np.clip(rgb, 0.0, 1.0, out=rgb)
        if not direct:
            img = torch.from_numpy(rgb).view(3, oh, ow)
            if self.quarter:
                img = torch.rot90(img, self.quarter, dims=(1, 2))
            slot.copy_(img)
        return True

    def _fix_clipped(
        self, planes: list[np.ndarray], ext: np.ndarray, rgb: np.ndarray, oh: int, ow: int
    ):
        """Recompute the blocks where some pixel may clip: convert, clip, then average.

        Which blocks: bounds on RGB from the extreme Y, U and V of each row of blocks first,
        then of each block in the rows that may clip. ``ext`` (6, oh, chroma columns) holds
        the minima and maxima of Y, U and V over each block row's rows (overwritten); as
        six maxima (255 - min Y, 255 - min U, 255 - min V, max Y, max U, max V), `_excess`
        maps them to how far each bound passes 0 or 255."""
        by, bx = self.block
        sy, sx = self.sub
        np.invert(ext[:3], out=ext[:3])  # 255 - min
        over = self.excess @ ext.max(axis=2).astype(np.float32) + self.excess_offset  # (6, oh)
        band = np.flatnonzero(over.max(axis=0) > 0)
        if band.size == 0:
            return  # no pixel of the frame clips
        ext = _halve(ext[:, band], bx // sx, np.maximum).reshape(6, -1)
        over = self.excess @ ext.astype(np.float32) + self.excess_offset  # (6, blocks)
        hit = np.flatnonzero(over.max(axis=0) > 0)
        if hit.size == 0:
            return
        r, c = band[hit // ow], hit % ow
        # the blocks' pixels, the blocks last: Y as (by/sy, sy, bx/sx, sx, N), U and V as
        # (by/sy, 1, bx/sx, 1, N), so that each chroma sample meets the pixels it serves
        y = planes[0].reshape(oh, by, ow, bx)[r, :, c, :].transpose(1, 2, 0)  # (by, bx, N)
        y = y.astype(rgb.dtype).reshape(by // sy, sy, bx // sx, sx, -1)
        u, v = (
            p.reshape(oh, by // sy, ow, bx // sx)[r, :, c, :]
            .transpose(1, 2, 0)
            .astype(rgb.dtype)[:, None, :, None, :]
            for p in planes[1:]
        )
        m = self.pixel_matrix  # (3, 4, 1, 1, 1, 1, 1)
        px = u * m[:, 1] + v * m[:, 2] + m[:, 3] + y * m[:, 0]  # (3, by/sy, sy, bx/sx, sx, N)
        np.clip(px, 0, 255, out=px)
        rgb[:, r * ow + c] = px.reshape(3, -1, r.size).mean(axis=1) / 255.0


def _excess(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(6, 6) ``W`` and (6, 1) ``b`` such that, for pixels whose (Y, U, V) lie between ``lo``
    and ``hi``, ``W @ (255 - lo, hi) + b`` is (how far the least R, G, B lies below 0, how far
    the greatest lies above 255): any positive entry means some pixel may clip."""
    a, base = m[:, :3], m[:, 3]
    pos, neg = np.clip(a, 0, None), np.clip(a, None, 0)
    # least = pos @ lo + neg @ hi + base, with lo = 255 - flipped
    # greatest = pos @ hi + neg @ lo + base
    w = np.zeros((6, 6))
    b = np.zeros(6)
    w[:3, :3], w[:3, 3:], b[:3] = pos, -neg, -(255 * pos.sum(1) + base)  # -least
    w[3:, :3], w[3:, 3:], b[3:] = -neg, pos, 255 * neg.sum(1) + base - 255  # greatest - 255
    return w, b[:, None]


def yuv_plan(
    frame,
    quarter: int,
    crop: tuple[int, int, int, int] | None,
    geom: tuple[int, int, tuple[int, int]],
    work: torch.dtype,
) -> YuvPlan | None:
    """The plan to average ``frame``'s kind of frames in YUV, or None where the rule does not
    allow it (see `read_video`, "Conversion")."""
    key = _frame_key(frame)
    if key is None or key[0] not in _PLANAR_YUV:
        return None
    out_w, out_h, (in_w, in_h) = geom
    if (out_w, out_h) == (in_w, in_h) or in_w % out_w or in_h % out_h:
        return None  # no resize, enlarging, or not an integer factor: no block averages
    fx, fy = in_w // out_w, in_h // out_h  # upright block
    sx, sy = _PLANAR_YUV[key[0]]
    stored = (key[3], key[4])
    upright = (stored[1], stored[0]) if quarter % 2 else stored
    rect = _stored_rect(quarter, stored, crop or (0, 0, *upright))
    block = (fx, fy) if quarter % 2 else (fy, fx)  # (rows, cols) in the stored frame
    if rect[0] % sy or rect[1] % sx or block[0] % sy or block[1] % sx:
        return None  # blocks would split chroma samples
    m = _conversion(*key)
    if m is None:
        return None
    count = (block[0] * block[1], (block[0] // sy) * (block[1] // sx))
    per_sum = np.array([count[0], count[1], count[1]], dtype=np.float64)
    scale = m[:, :3] / (255.0 * per_sum[None, :])
    sums = np.uint16 if block[0] * block[1] * 255 <= np.iinfo(np.uint16).max else np.uint32
    excess, excess_offset = _excess(m)
    dtype = np.float64 if work == torch.float64 else np.float32
    return YuvPlan(
        key=key,
        quarter=quarter,
        rect=rect,
        block=block,
        sub=(sy, sx),
        work=work,
        matrix=m,
        pixel_matrix=m.astype(dtype).reshape(3, 4, 1, 1, 1, 1, 1),
        scale=torch.tensor(scale, dtype=work),
        offset=torch.tensor(m[:, 3:] / 255.0, dtype=work),
        excess=excess.astype(np.float32),
        excess_offset=excess_offset.astype(np.float32),
        sums=sums,
    )
