"""Parsing `read_video`'s frames / seconds / stride / size / crop arguments."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import VideoError

# A frame is selected by time if t0 - TIME_EPS <= t < t1 - TIME_EPS: the tolerance absorbs
# the rounding of decimal seconds (0.1 is not exact in binary) and is far below any frame
# interval.
TIME_EPS = 1e-6


@dataclass
class Selection:
    """Which frames to keep: by index [start, stop) or by time [t0, t1), every stride-th."""

    by_time: bool
    start: int = 0
    stop: int | None = None
    t0: float = 0.0
    t1: float | None = None
    stride: int = 1
    label: str = ""  # the argument as the user gave it, for messages
    fps: float | None = None  # a time range turned into indices at this rate (read_video fps=)

    @property
    def from_first(self) -> bool:
        return (self.t0 <= TIME_EPS) if self.by_time else self.start == 0


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def parse_selection(frames: Any, seconds: Any, stride: Any, path: str) -> Selection:
    if not _is_int(stride) or stride < 1:
        raise VideoError(
            "must be an integer >= 1 (keep every stride-th frame)",
            path=path,
            argument=f"stride={stride!r}",
        )
    stride = int(stride)
    if frames is not None and seconds is not None:
        raise VideoError(
            f"frames={frames!r} and seconds={seconds!r} both given; give at most one",
            path=path,
            argument="frames/seconds",
        )
    if seconds is not None:
        arg = f"seconds={seconds!r}"
        if not (isinstance(seconds, (tuple, list)) and len(seconds) == 2):
            raise VideoError(
                "must be (t0, t1) in seconds (t1 may be None for the end)", path=path, argument=arg
            )
        t0, t1 = seconds
        t0 = 0.0 if t0 is None else t0
        ok = _is_number(t0) and math.isfinite(t0) and t0 >= 0
        ok = ok and (t1 is None or (_is_number(t1) and not math.isnan(t1) and t1 > t0))
        if not ok:
            raise VideoError(
                "must be (t0, t1) with 0 <= t0 < t1 in seconds from the first frame "
                "(t1 may be None for the end)",
                path=path,
                argument=arg,
            )
        t1 = None if t1 is None or math.isinf(t1) else float(t1)
        return Selection(by_time=True, t0=float(t0), t1=t1, stride=stride, label=arg)
    if frames is None:
        return Selection(by_time=False, stride=stride, label="frames=None")
    arg = f"frames={frames!r}"
    if isinstance(frames, slice):
        start, stop, step = frames.start, frames.stop, frames.step
        if step is not None:
            if not _is_int(step) or step < 1:
                raise VideoError("a slice step must be an integer >= 1", path=path, argument=arg)
            if stride != 1:
                raise VideoError(
                    f"the slice has a step and stride={stride} is also given; give one",
                    path=path,
                    argument=arg,
                )
            stride = int(step)
    elif isinstance(frames, (tuple, list)) and len(frames) == 2:
        start, stop = frames
    else:
        raise VideoError(
            "must be (start, stop) frame indices (stop exclusive, None for the end) or a slice",
            path=path,
            argument=arg,
        )
    start = 0 if start is None else start
    if not _is_int(start) or start < 0 or (stop is not None and (not _is_int(stop) or stop < 0)):
        raise VideoError(
            "indices must be integers >= 0 (negative indices are not supported: the frame "
            "count is only known after reading)",
            path=path,
            argument=arg,
        )
    if stop is not None and stop <= start:
        raise VideoError(
            f"is empty: stop must be greater than start ({start})", path=path, argument=arg
        )
    return Selection(
        by_time=False,
        start=int(start),
        stop=None if stop is None else int(stop),
        stride=stride,
        label=arg,
    )


def parse_fps(fps: Any, path: str) -> float | None:
    if fps is None:
        return None
    if _is_number(fps) and math.isfinite(fps) and fps > 0:
        return float(fps)
    raise VideoError(
        "must be the true capture rate in frames/s (a number > 0), or None to use the "
        "container's timestamps",
        path=path,
        argument=f"fps={fps!r}",
    )


def at_fps(sel: Selection, fps: float, path: str) -> Selection:
    """A time range as the frame indices whose time ``index / fps`` lies in it."""
    if not sel.by_time:
        return sel

    def first_at(t: float) -> int:  # the smallest k with k / fps >= t - TIME_EPS
        k = max(0, math.ceil((t - TIME_EPS) * fps))
        while k > 0 and (k - 1) / fps >= t - TIME_EPS:
            k -= 1
        while k / fps < t - TIME_EPS:
            k += 1
        return k

    start = first_at(sel.t0)
    stop = None if sel.t1 is None else first_at(sel.t1)
    if stop is not None and stop <= start:
        raise VideoError(
            f"selects no frames: at fps={fps:g} frames are {1 / fps:.6g} s apart and none "
            "lies in that range; widen the range",
            path=path,
            argument=sel.label,
        )
    return Selection(
        by_time=False, start=start, stop=stop, stride=sel.stride, label=sel.label, fps=fps
    )


def parse_size(size: Any, path: str) -> tuple[int | None, int | None] | None:
    """``size`` as (width or None, height or None), or None for the (cropped) source size."""
    arg = f"size={size!r}"
    fix = (
        "give (width, height) in pixels, a single int width (height keeps the aspect ratio), "
        "or None for the source size"
    )
    if size is None:
        return None
    if _is_int(size):
        if size < 1:
            raise VideoError(f"must be >= 1; {fix}", path=path, argument=arg)
        return int(size), None
    if isinstance(size, (tuple, list)) and len(size) == 2:
        w, h = size
        good = all(v is None or (_is_int(v) and v >= 1) for v in (w, h))
        if good and not (w is None and h is None):
            return (None if w is None else int(w)), (None if h is None else int(h))
    raise VideoError(f"is not a valid size; {fix}", path=path, argument=arg)


def check_crop_form(crop: Any, path: str) -> tuple[int, int, int, int] | None:
    if crop is None:
        return None
    if (
        isinstance(crop, (tuple, list))
        and len(crop) == 4
        and all(_is_int(v) for v in crop)
        and crop[0] >= 0
        and crop[1] >= 0
        and crop[2] >= 1
        and crop[3] >= 1
    ):
        return tuple(int(v) for v in crop)  # type: ignore[return-value]
    raise VideoError(
        "must be (x, y, width, height) in source pixels: integers with x, y >= 0 and "
        "width, height >= 1",
        path=path,
        argument=f"crop={crop!r}",
    )


def empty_selection(path: str, sel: Selection, total: int, last_time: float) -> VideoError:
    if total == 0:
        return VideoError("contains no decodable video frame", path=path)
    if sel.fps is not None:
        last = (total - 1) / sel.fps
        return VideoError(
            f"selects no frames: the video's {total} frames span 0 to {last:.6g} s at "
            f"fps={sel.fps:g}; give t0 <= {last:.6g}",
            path=path,
            argument=sel.label,
        )
    if sel.by_time:
        return VideoError(
            f"selects no frames: the video's {total} frames span 0 to {last_time:.6g} s "
            f"(from the first frame); give t0 <= {last_time:.6g}",
            path=path,
            argument=sel.label,
        )
    return VideoError(
        f"selects no frames: the video has {total} frames (indices 0 to {total - 1}); "
        f"give a start below {total}",
        path=path,
        argument=sel.label,
    )
