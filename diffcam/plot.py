"""Line plots as PNG files, drawn with Pillow (no plotting library needed).

Enough for learning and convergence curves: several named series against their index (or given
x values), linear or logarithmic y axis, axis ticks and a legend.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

__all__ = ["save_line_plot"]

_COLOURS = [
    (31, 119, 180), (214, 39, 40), (44, 160, 44), (255, 127, 14),
    (148, 103, 189), (140, 86, 75), (227, 119, 194), (23, 190, 207),
]  # fmt: skip


def _ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About n round tick values covering [lo, hi]."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    step = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * step >= raw:
            step *= m
            break
    first = math.ceil(lo / step) * step
    return [first + i * step for i in range(int((hi - first) / step + 1e-9) + 1)]


def save_line_plot(
    path: str | Path,
    series: Mapping[str, Sequence[float]],
    *,
    x: Sequence[float] | None = None,
    title: str = "",
    xlabel: str = "",
    ylabel: str = "",
    log_y: bool = False,
    size: tuple[int, int] = (720, 440),
) -> Path:
    """Plot named series (each a sequence of floats, one per x) to a PNG, written atomically.

    Args:
        path: the PNG file to write (parent directories are created).
        series: name -> y values. Non-finite values (and values <= 0 with ``log_y``) are
            skipped, breaking the line.
        x: x values shared by all series (default 0, 1, 2, ...).
        log_y: logarithmic y axis (base 10).
        size: (width, height) in pixels.

    Returns:
        The path written.
    """
    path = Path(path)
    width, height = size
    left, right, top, bottom = 70, 20, 30, 45
    font = ImageFont.load_default()

    def ok(v: float) -> bool:
        return math.isfinite(v) and (v > 0 or not log_y)

    def fy(v: float) -> float:
        return math.log10(v) if log_y else v

    n = max((len(v) for v in series.values()), default=0)
    xs = list(x) if x is not None else list(range(n))
    ys = [fy(float(v)) for vals in series.values() for v in vals if ok(float(v))]
    y_lo, y_hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    if y_hi - y_lo < 1e-12:
        y_lo, y_hi = y_lo - 0.5, y_hi + 0.5
    pad = 0.05 * (y_hi - y_lo)
    y_lo, y_hi = y_lo - pad, y_hi + pad
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    if x_hi - x_lo < 1e-12:
        x_hi = x_lo + 1.0

    def px(xv: float, yv: float) -> tuple[float, float]:
        u = left + (xv - x_lo) / (x_hi - x_lo) * (width - left - right)
        w = top + (y_hi - yv) / (y_hi - y_lo) * (height - top - bottom)
        return u, w

    image = Image.new("RGB", size, (255, 255, 255))
    draw = ImageDraw.Draw(image)
    draw.rectangle([left, top, width - right, height - bottom], outline=(0, 0, 0))
    for t in _ticks(y_lo, y_hi):
        _, w = px(x_lo, t)
        draw.line([left - 4, w, left, w], fill=(0, 0, 0))
        draw.line([left + 1, w, width - right - 1, w], fill=(230, 230, 230))
        label = f"1e{t:g}" if log_y else f"{t:.3g}"
        draw.text((4, w - 6), label, fill=(0, 0, 0), font=font)
    for t in _ticks(x_lo, x_hi):
        u, _ = px(t, y_lo)
        draw.line([u, height - bottom, u, height - bottom + 4], fill=(0, 0, 0))
        draw.text((u - 10, height - bottom + 6), f"{t:g}", fill=(0, 0, 0), font=font)
    draw.text((left, 8), title, fill=(0, 0, 0), font=font)
    draw.text((width // 2 - 3 * len(xlabel), height - 16), xlabel, fill=(0, 0, 0), font=font)
    draw.text((4, top - 16), ylabel, fill=(0, 0, 0), font=font)
    for k, (name, vals) in enumerate(series.items()):
        colour = _COLOURS[k % len(_COLOURS)]
        line: list[tuple[float, float]] = []
        for xv, v in zip(xs, vals, strict=False):
            if ok(float(v)):
                line.append(px(xv, fy(float(v))))
            else:
                if len(line) > 1:
                    draw.line(line, fill=colour, width=2)
                line = []
        if len(line) > 1:
            draw.line(line, fill=colour, width=2)
        elif len(line) == 1:
            draw.ellipse([line[0][0] - 2, line[0][1] - 2, line[0][0] + 2, line[0][1] + 2], colour)
        ly = top + 6 + 14 * k
        draw.line([width - right - 150, ly + 6, width - right - 130, ly + 6], fill=colour, width=2)
        draw.text((width - right - 125, ly), name, fill=(0, 0, 0), font=font)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp.png")
    os.close(fd)
    try:
        image.save(tmp, format="PNG")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
