"""Read and write videos.

Writing: `write_video` writes rendered frames to MP4 (H.264 through imageio-ffmpeg) or GIF
(Pillow). The file is written to a temporary name in the same folder and renamed when
complete, so a crash (or Ctrl-C) never leaves a half-written video behind under the requested
name.

Reading: `read_video` streams a video file through PyAV (FFmpeg), one frame at a time, into a
`Video`: frames as a (T, 3, H, W) tensor in [0, 1] at the requested size, and each frame's
presentation time from the container. The full-resolution clip is never held in memory.
"""

from __future__ import annotations

import bisect
import math
import os
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

__all__ = [
    "write_video",
    "frames_to_uint8",
    "read_video",
    "Video",
    "VideoError",
    "resize_frames",
]

_SUFFIXES = (".mp4", ".gif")


def frames_to_uint8(frames) -> np.ndarray:
    """(T, 3, H, W) floats in [0, 1] (tensor, array or a list of (3, H, W)) -> (T, H, W, 3) uint8.

    Values outside [0, 1] are clipped; NaN becomes 0.
    """
    if isinstance(frames, (list, tuple)):
        frames = [
            f.detach().cpu() if isinstance(f, torch.Tensor) else np.asarray(f) for f in frames
        ]
        frames = np.stack([np.asarray(f, dtype=np.float32) for f in frames]) if frames else None
    if frames is None:
        raise ValueError("write_video: no frames")
    if isinstance(frames, torch.Tensor):
        frames = frames.detach().to("cpu", torch.float32).numpy()
    arr = np.asarray(frames, dtype=np.float32)
    if arr.ndim != 4 or arr.shape[1] != 3:
        raise ValueError(
            f"write_video: frames must have shape (T, 3, H, W), got {tuple(arr.shape)}"
        )
    if arr.shape[0] < 1 or arr.shape[2] < 1 or arr.shape[3] < 1:
        raise ValueError(f"write_video: empty frames of shape {tuple(arr.shape)}")
    arr = np.nan_to_num(arr, nan=0.0, posinf=1.0, neginf=0.0)
    arr = np.clip(arr, 0.0, 1.0)
    out = (arr * 255.0 + 0.5).astype(np.uint8)
    return np.ascontiguousarray(out.transpose(0, 2, 3, 1))


def write_video(path: str | os.PathLike, frames, fps: float = 30, *, quality: int = 8) -> Path:
    """Write frames to ``path`` (.mp4 or .gif), atomically.

    Args:
        path: output file; its suffix picks the format: ``.mp4`` (H.264, yuv420p, through
            imageio-ffmpeg) or ``.gif`` (Pillow, looping).
        frames: (T, 3, H, W) tensor or array with values in [0, 1] (clipped), or a list of
            (3, H, W) frames.
        fps: frames per second (> 0).
        quality: MP4 quality 0-10 (imageio-ffmpeg's scale; 10 is best).

    MP4 with yuv420p needs even sizes: an odd width or height is padded by one pixel
    (repeating the last column / row), so the video is then one pixel larger than the frames.
    GIF stores delays in 1/100 s; frame delays are rounded so the total duration stays right.
    Consecutive identical frames are kept as separate frames in both formats.

    Returns:
        the path written.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in _SUFFIXES:
        raise ValueError(f"write_video: unsupported format {path.suffix!r} (use .mp4 or .gif)")
    if not (isinstance(fps, (int, float)) and np.isfinite(fps) and fps > 0):
        raise ValueError(f"write_video: fps must be a positive number, got {fps!r}")
    arr = frames_to_uint8(frames)
    folder = path.parent if str(path.parent) else Path(".")
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.stem}.", suffix=f".part{suffix}")
    os.close(fd)
    try:
        if suffix == ".mp4":
            _write_mp4(tmp, arr, fps, quality)
        else:
            _write_gif(tmp, arr, fps)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; use the usual mode
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def _write_mp4(tmp: str, arr: np.ndarray, fps: float, quality: int) -> None:
    import imageio_ffmpeg

    t, h, w, _ = arr.shape
    ph, pw = h % 2, w % 2
    if ph or pw:
        arr = np.pad(arr, ((0, 0), (0, ph), (0, pw), (0, 0)), mode="edge")
    writer = imageio_ffmpeg.write_frames(
        tmp,
        (w + pw, h + ph),
        fps=fps,
        codec="libx264",
        pix_fmt_in="rgb24",
        pix_fmt_out="yuv420p",
        quality=quality,
        macro_block_size=1,
        ffmpeg_log_level="error",
        output_params=["-f", "mp4"],
    )
    writer.send(None)  # start the generator
    try:
        for frame in arr:
            writer.send(np.ascontiguousarray(frame))
    finally:
        writer.close()


def _gif_delays(t: int, fps: float) -> list[int]:
    """Per-frame delays in ms, multiples of 10 ms, summing to the right total duration."""
    cs = [round((k + 1) * 100.0 / fps) - round(k * 100.0 / fps) for k in range(t)]
    return [max(1, c) * 10 for c in cs]


def _write_gif(tmp: str, arr: np.ndarray, fps: float) -> None:
    from PIL import Image

    t, h, w, _ = arr.shape
    dup = [k > 0 and np.array_equal(arr[k], arr[k - 1]) for k in range(t)]
    # One global palette from a mosaic of sample frames. If some frames repeat their
    # predecessor, use 128 colours twice (indices c and c + 128 look the same) and flip one
    # pixel to the twin index, so Pillow does not merge the repeated frames into one.
    ncol = 128 if any(dup) else 256
    picks = np.unique(np.linspace(0, t - 1, min(t, 16)).round().astype(int))
    mosaic = Image.fromarray(arr[picks].reshape(-1, w, 3))
    pal_img = mosaic.quantize(colors=ncol, method=Image.Quantize.MEDIANCUT)
    palette = (pal_img.getpalette() or [])[: 3 * ncol]
    palette += [0] * (3 * ncol - len(palette))
    holder = Image.new("P", (1, 1))
    holder.putpalette(palette)
    full = palette + palette if ncol == 128 else palette
    images = []
    toggled = False
    for k in range(t):
        q = Image.fromarray(arr[k]).quantize(palette=holder, dither=Image.Dither.NONE)
        idx = np.asarray(q, dtype=np.uint8).copy()
        toggled = (not toggled) if dup[k] else False
        if toggled:
            idx[0, 0] = (idx[0, 0] % 128) + 128
        im = Image.frombytes("P", (w, h), idx.tobytes())
        im.putpalette(full)
        images.append(im)
    images[0].save(
        tmp,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=_gif_delays(t, fps),
        loop=0,
        disposal=1,
        optimize=False,
    )


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


# --------------------------------------------------------------------------- reading
# A frame is selected by time if t0 - _TIME_EPS <= t < t1 - _TIME_EPS: the tolerance absorbs
# the rounding of decimal seconds (0.1 is not exact in binary) and is far below any frame
# interval.
_TIME_EPS = 1e-6
# Frames a decoder may reorder (H.264 and HEVC allow at most 16): the packet scan before a
# seek reads this many packets past the wanted frame so that its presentation rank is exact.
_REORDER_MARGIN = 64
# Largest initial output allocation in frames; longer clips grow in chunks.
_MAX_PREALLOC = 65536


class VideoError(ValueError):
    """A video that cannot be read as asked: the message names the file, the argument (if
    one is at fault), what is wrong and the fix, e.g.::

        read_video: clip.mp4: frames=(500, 600): selects no frames: the video has 300
        frames (indices 0 to 299); give a start below 300

    Attributes:
        reason: what is wrong (and how to fix it).
        path: the video file (str) or None.
        argument: the argument at fault (``"crop"``, ``"frames"``, ...) or None.
    """

    def __init__(self, reason: str, *, path: str | None = None, argument: str | None = None):
        self.reason = reason
        self.path = None if path is None else str(path)
        self.argument = argument
        parts = [p for p in ("read_video", self.path, argument) if p]
        super().__init__(": ".join([*parts, reason]))

    def __reduce__(self):  # keep pickling (multiprocessing, pytest-xdist) working
        return (_rebuild_video_error, (self.reason, self.path, self.argument))


def _rebuild_video_error(reason: str, path: str | None, argument: str | None) -> VideoError:
    return VideoError(reason, path=path, argument=argument)


@dataclass(frozen=True, eq=False, repr=False)
class Video:
    """Frames read from a video file (or given as tensors), with their timestamps.

    Attributes:
        frames: (T, 3, H, W) floats in [0, 1], row 0 at the top of the upright picture.
        times: (T,) float64 seconds, on the CPU: each frame's presentation time from the
            container, relative to the stream's first frame (so ``times[0] == 0`` when the
            clip starts at the first frame). Exact for variable-frame-rate video.
        fps: the stream's average frame rate (frames/s). For variable-frame-rate video use
            ``times``, not ``fps``.
        source_size: (width, height) in pixels of the decoded stream, upright (after the
            rotation metadata is applied).
        crop: (x, y, width, height) in upright source pixels that was cut out before resizing,
            or None for the whole frame.
        frame_indices: (T,) int64, on the CPU: each frame's index in the decoded stream
            (0 = the stream's first frame).
        path: the file read, or None.

    ``times`` and ``frame_indices`` stay on the CPU whatever the device of ``frames``
    (float64 is not available on every device).
    """

    frames: torch.Tensor
    times: torch.Tensor
    fps: float
    source_size: tuple[int, int]
    crop: tuple[int, int, int, int] | None = None
    frame_indices: torch.Tensor = field(default=None)  # type: ignore[assignment]
    path: str | None = None

    def __post_init__(self) -> None:
        f = self.frames
        if not isinstance(f, torch.Tensor) or f.dim() != 4 or f.shape[1] != 3:
            shape = tuple(f.shape) if isinstance(f, torch.Tensor) else type(f).__name__
            raise ValueError(f"Video: frames must be a (T, 3, H, W) tensor, got {shape}")
        t = f.shape[0]
        times = torch.as_tensor(self.times, dtype=torch.float64, device="cpu")
        if tuple(times.shape) != (t,):
            raise ValueError(f"Video: times must have shape ({t},), got {tuple(times.shape)}")
        if self.frame_indices is None:
            idx = torch.arange(t, dtype=torch.long)
        else:
            idx = torch.as_tensor(self.frame_indices, dtype=torch.long, device="cpu")
        if tuple(idx.shape) != (t,):
            raise ValueError(f"Video: frame_indices must have shape ({t},), got {tuple(idx.shape)}")
        object.__setattr__(self, "times", times)
        object.__setattr__(self, "frame_indices", idx)
        object.__setattr__(self, "fps", float(self.fps))
        object.__setattr__(self, "source_size", tuple(int(v) for v in self.source_size))
        if self.crop is not None:
            object.__setattr__(self, "crop", tuple(int(v) for v in self.crop))

    @classmethod
    def from_frames(
        cls,
        frames: torch.Tensor | np.ndarray,
        fps: float,
        *,
        times: torch.Tensor | Sequence[float] | None = None,
    ) -> Video:
        """A `Video` from in-memory frames.

        Args:
            frames: (T, 3, H, W) floats in [0, 1] (a tensor or array; kept as given).
            fps: frame rate (frames/s, > 0).
            times: (T,) seconds; default ``arange(T) / fps``.
        """
        frames = torch.as_tensor(frames)
        if not (math.isfinite(fps) and fps > 0):
            raise ValueError(f"Video.from_frames: fps must be a positive number, got {fps!r}")
        if times is None:
            times = torch.arange(frames.shape[0], dtype=torch.float64) / fps
        w, h = (int(frames.shape[-1]), int(frames.shape[-2])) if frames.dim() == 4 else (0, 0)
        return cls(frames=frames, times=torch.as_tensor(times), fps=fps, source_size=(w, h))

    def __len__(self) -> int:
        return int(self.frames.shape[0])

    def __repr__(self) -> str:
        w, h = self.size
        span = f", {self.times[0].item():.3f}-{self.times[-1].item():.3f} s" if len(self) else ""
        return (
            f"Video({len(self)} frames {w}x{h}{span}, fps={self.fps:.3f}, "
            f"dtype={self.frames.dtype}, device={self.frames.device}, path={self.path!r})"
        )

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of ``frames`` in pixels."""
        return int(self.frames.shape[-1]), int(self.frames.shape[-2])

    @property
    def duration(self) -> float:
        """Seconds from the first to the last frame (``times[-1] - times[0]``; 0 for one frame)."""
        if len(self) == 0:
            return 0.0
        return float(self.times[-1] - self.times[0])

    def to(
        self, device: torch.device | str | None = None, dtype: torch.dtype | None = None
    ) -> Video:
        """A new `Video` with ``frames`` moved / cast (``times`` and indices stay on the CPU)."""
        return replace(self, frames=self.frames.to(device=device, dtype=dtype))

    def subset(self, index: slice | int | Sequence[int] | torch.Tensor) -> Video:
        """A new `Video` with the frames picked by ``index`` (along T).

        Args:
            index: a slice (a view, no copy, for a positive step), an int (one frame, kept as
                T = 1), a sequence of ints, or a (T,) bool mask / (K,) int64 tensor.
        """
        if isinstance(index, slice) and (index.step is None or index.step > 0):
            return replace(
                self,
                frames=self.frames[index],
                times=self.times[index],
                frame_indices=self.frame_indices[index],
            )
        if isinstance(index, int):
            sel = torch.arange(len(self))[index : index + 1 if index != -1 else None]
            if sel.numel() == 0:
                raise IndexError(f"Video.subset: index {index} out of range for {len(self)}")
        elif isinstance(index, slice):
            sel = torch.tensor(list(range(len(self)))[index], dtype=torch.long)
        else:
            sel = torch.arange(len(self))[torch.as_tensor(index, device="cpu")]
        return replace(
            self,
            frames=self.frames.index_select(0, sel.to(self.frames.device)),
            times=self.times.index_select(0, sel),
            frame_indices=self.frame_indices.index_select(0, sel),
        )


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


@dataclass
class _Selection:
    """Which frames to keep: by index [start, stop) or by time [t0, t1), every stride-th."""

    by_time: bool
    start: int = 0
    stop: int | None = None
    t0: float = 0.0
    t1: float | None = None
    stride: int = 1
    label: str = ""  # the argument as the user gave it, for messages

    @property
    def from_first(self) -> bool:
        return (self.t0 <= _TIME_EPS) if self.by_time else self.start == 0


@dataclass
class _SeekPlan:
    """Seek to ``seek_ts`` (stream time base) and decode forward to the frame at ``target_pts``,
    which is frame ``start_index``; ``first_pts`` is the stream's first presentation time."""

    seek_ts: int
    target_pts: int
    start_index: int
    first_pts: int


class _SeekMissed(Exception):
    """The decoder did not land where the packet scan said: decode from the start instead."""


def _is_int(v: Any) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)


def _parse_selection(frames: Any, seconds: Any, stride: Any, path: str) -> _Selection:
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
        return _Selection(by_time=True, t0=float(t0), t1=t1, stride=stride, label=arg)
    if frames is None:
        return _Selection(by_time=False, stride=stride, label="frames=None")
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
    return _Selection(
        by_time=False,
        start=int(start),
        stop=None if stop is None else int(stop),
        stride=stride,
        label=arg,
    )


def _parse_size(size: Any, path: str) -> tuple[int | None, int | None] | None:
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


def _check_crop_form(crop: Any, path: str) -> tuple[int, int, int, int] | None:
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


def _av():
    try:
        import av
    except ImportError as exc:  # pragma: no cover - av is a dependency
        raise ImportError(
            "read_video needs PyAV: pip install av (it is in diffcam's dependencies)"
        ) from exc
    return av


def _open(path: str):
    """Open ``path`` with PyAV, turning FFmpeg's errors into VideoError."""
    av = _av()
    try:
        return av.open(path, mode="r")
    except av.FFmpegError as exc:
        raise VideoError(
            f"cannot be read as a video ({_ffmpeg_reason(exc)}): it is not a video file "
            "FFmpeg knows, or it is corrupt or truncated (an MP4 cut short before its index, "
            "the 'moov' atom, was written cannot be opened at all); check the file plays, "
            "and re-copy or re-export it",
            path=path,
        ) from None


def _ffmpeg_reason(exc: BaseException) -> str:
    msg = getattr(exc, "strerror", None) or str(exc)
    return str(msg).strip() or type(exc).__name__


def _video_stream(container, path: str):
    streams = list(container.streams.video)
    if not streams:
        kinds = sorted({s.type for s in container.streams}) or ["none"]
        raise VideoError(
            f"has no video stream (streams: {', '.join(kinds)}); pass a video file",
            path=path,
        )
    return streams[0]


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


def _fps(stream) -> float:
    for rate in (stream.average_rate, stream.guessed_rate, stream.base_rate):
        if rate:
            return float(rate)
    return float("nan")


def _declared_frames(stream) -> int:
    """The frame count the container header declares (0 if unknown)."""
    try:
        return max(0, int(stream.frames))
    except (TypeError, ValueError):
        return 0


def _declared_end(container, stream) -> float | None:
    """Seconds from the stream's start to its end as the container header declares them, or
    None. Matroska / WebM declare a length only for the whole file (all streams)."""
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    fmt = getattr(container.format, "name", "") or ""
    if "matroska" in fmt and container.duration and len(container.streams) == 1:
        return container.duration / 1e6
    return None


def _scan_for_seek(path: str, sel: _Selection) -> _SeekPlan | None:
    """Demux (without decoding) from the start far enough to place the selection's first
    frame exactly: its presentation timestamp and its index among the stream's frames.

    Returns the plan, or None when decoding from the start is as good (the first wanted frame
    follows the first keyframe). Raises VideoError for a selection that starts past the end.
    """
    av = _av()
    pts_list: list[int] = []
    keys: list[tuple[int, int]] = []  # (pts, seek timestamp) of keyframes, decode order
    eof = True
    with _open(path) as container:
        stream = _video_stream(container, path)
        tb = stream.time_base
        first = None
        threshold = None  # in pts units: t0 after the first frame
        past = 0  # packets at or after the wanted frame
        try:
            for pkt in container.demux(stream):
                if pkt.pts is None or pkt.size == 0 or getattr(pkt, "is_discard", False):
                    continue
                pts = int(pkt.pts)
                pts_list.append(pts)
                if pkt.is_keyframe:
                    dts = pts if pkt.dts is None else int(pkt.dts)
                    keys.append((pts, min(pts, dts)))
                if first is None or pts < first:
                    first = pts
                    if sel.by_time:
                        threshold = first + math.floor((sel.t0 - _TIME_EPS) / tb)
                if sel.by_time:
                    past += pts >= threshold  # type: ignore[operator]
                    done = past >= _REORDER_MARGIN
                else:
                    done = len(pts_list) >= sel.start + 1 + _REORDER_MARGIN
                if done:
                    eof = False
                    break
        except av.FFmpegError:
            pass  # a damaged file: the decode pass reports it
    pts_list.sort()
    if not pts_list:
        return None
    first = pts_list[0]
    if sel.by_time:
        times = [float((p - first) * tb) for p in pts_list]
        k = bisect.bisect_left(times, sel.t0 - _TIME_EPS)
    else:
        k = sel.start
    if k >= len(pts_list):
        if eof:
            raise _empty_selection(path, sel, len(pts_list), float((pts_list[-1] - first) * tb))
        return None  # cannot happen with the margin; decode from the start
    target = pts_list[k]
    before = [key for key in keys if key[0] <= target]
    if not before:
        return None
    best = max(before)  # the last keyframe at or before the target
    if best[0] == min(keys)[0]:
        return None  # it is the first keyframe: decoding from the start is as good
    return _SeekPlan(seek_ts=best[1], target_pts=target, start_index=k, first_pts=first)


def _empty_selection(path: str, sel: _Selection, total: int, last_time: float) -> VideoError:
    if total == 0:
        return VideoError("contains no decodable video frame", path=path)
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


class _Output:
    """Growable (T, 3, H, W) output: one preallocated block of the estimated length, then
    extra chunks if the estimate was short."""

    def __init__(self, estimate: int, shape: tuple[int, int, int], dtype, device):
        self.shape, self.dtype, self.device = shape, dtype, device
        self.blocks = [torch.empty((max(1, estimate), *shape), dtype=dtype, device=device)]
        self.n_last = 0  # frames filled in the last block
        self.chunk = max(16, estimate // 8)

    def slot(self) -> torch.Tensor:
        """The (3, H, W) view the next frame is written to."""
        if self.n_last == self.blocks[-1].shape[0]:
            self.blocks.append(
                torch.empty((self.chunk, *self.shape), dtype=self.dtype, device=self.device)
            )
            self.n_last = 0
        view = self.blocks[-1][self.n_last]
        self.n_last += 1
        return view

    def finish(self) -> torch.Tensor:
        last = self.blocks[-1][: self.n_last]
        blocks = [*self.blocks[:-1], last]
        if len(blocks) == 1:
            # drop an over-estimated tail (a copy only when the estimate was too long)
            return last if self.n_last == self.blocks[-1].shape[0] else last.clone()
        return torch.cat(blocks)


def _allocate(
    path: str, estimate: int, shape: tuple[int, int, int], dtype: torch.dtype, device
) -> _Output:
    """The output buffer, or a VideoError saying how to read less when it does not fit."""
    try:
        return _Output(max(1, estimate), shape, dtype, device)
    except RuntimeError as exc:  # includes torch.OutOfMemoryError
        gib = max(1, estimate) * math.prod(shape) * dtype.itemsize / 2**30
        raise VideoError(
            f"the output ({estimate} frames of {shape[2]}x{shape[1]} {dtype}, {gib:.1f} GiB) "
            f"cannot be allocated on {device} ({str(exc).splitlines()[0]}); read less: "
            "pass size=, stride=, frames= or seconds=",
            path=path,
        ) from None


def read_video(
    path: str | os.PathLike,
    *,
    size: int | tuple[int | None, int | None] | None = None,
    crop: tuple[int, int, int, int] | None = None,
    frames: tuple[int, int | None] | slice | None = None,
    seconds: tuple[float, float | None] | None = None,
    stride: int = 1,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    progress: bool = False,
    allow_truncated: bool = False,
) -> Video:
    """Read a video file into a `Video`, streaming: one full-resolution frame at a time.

    Each decoded frame is converted to RGB (grey sources are replicated, an alpha channel
    is dropped), turned upright, cropped, converted to ``dtype`` in [0, 1] and resized, and
    only the result is stored. Peak memory is the output plus a few full-resolution frames
    (and briefly twice the output when the container does not tell the frame count, so the
    output grows in chunks that are joined at the end). On the CPU this per-frame work runs
    on one torch thread, beside FFmpeg's decoding threads; the previous
    ``torch.get_num_threads()`` is restored on return.

    Args:
        path: the video file (anything FFmpeg reads: MP4/MOV, MKV/WebM, AVI, GIF, ...).
        size: output (width, height) in pixels; a single int is the output width, the
            height following the (cropped) aspect ratio, rounded; ``(width, None)`` or
            ``(None, height)`` likewise; None keeps the (cropped) source size. Shrinking
            averages pixels (see `resize_frames`); it never just picks pixels.
        crop: (x, y, width, height) in upright source pixels, cut out before resizing; it
            must lie inside the frame.
        frames: (start, stop) frame indices, stop exclusive and None for the end, or a
            ``slice`` (its step, if any, is the stride). A stop past the end reads to the
            end, as Python slicing does.
        seconds: (t0, t1): the frames whose presentation time t (from the first frame)
            satisfies t0 <= t < t1 (to within 1 microsecond); t1 None reads to the end.
            Give at most one of ``frames`` and ``seconds``.
        stride: keep every stride-th frame of the selected range, starting with its first.
        dtype: floating dtype of ``frames`` (the arithmetic is float32, or float64 for
            float64).
        device: device of ``frames``; frames are converted and resized there.
        progress: show a tqdm bar.
        allow_truncated: for a file that ends early or is damaged part way (see below),
            warn and return the frames read up to the damage instead of raising.

    Returns:
        a `Video`: ``frames`` (T, 3, H, W), ``times`` (T,) float64 seconds from the stream's
        first frame, taken from the container's presentation timestamps (exact for variable
        frame rate), ``frame_indices`` (T,) int64, ``fps``, ``source_size``, ``crop``, ``path``.

    Rotation: phones store portrait video as landscape frames plus a display matrix
    (rotation metadata). It is applied (in multiples of 90 degrees, the nearest one), so
    frames are upright as a player shows them; ``source_size`` and ``crop`` are in upright
    pixels. Mirroring in the matrix is not applied.

    Seeking: a selection that does not start at the first frame first reads the packets
    (without decoding them, which is cheap) from the start up to the first wanted frame, to
    find its presentation time and index exactly, then seeks to the keyframe at or before it
    and decodes forward from there, dropping the frames before it. If the decoder does not
    land where the packets said, the clip is decoded from the start instead. Decoding stops
    after the last wanted frame.

    Timestamps: ``times`` are the container's presentation timestamps. A stream without
    any (e.g. a raw .h264 file) gets ``frame index / fps``, with a warning.

    Truncated or damaged files raise `VideoError` (unless ``allow_truncated``) naming how
    many frames were readable: FFmpeg failing part way (reading stops at the first error),
    or the stream ending clearly before the frame count or length its header declares. Only
    a selection that reaches the damage is affected. An MP4 cut before its index (the
    'moov' atom) was written cannot be opened at all and always raises.

    Raises:
        VideoError: missing or unreadable file, no video stream, an invalid argument, a
            selection with no frames (the message gives the frame count or time span), or
            a truncated file.
    """
    p = os.fspath(path)
    sel = _parse_selection(frames, seconds, stride, p)
    out_size = _parse_size(size, p)
    crop = _check_crop_form(crop, p)
    if not (isinstance(dtype, torch.dtype) and dtype.is_floating_point):
        raise VideoError(
            "must be a floating torch dtype (frames are in [0, 1])",
            path=p,
            argument=f"dtype={dtype!r}",
        )
    try:
        device = torch.device("cpu") if device is None else torch.device(device)
    except (RuntimeError, TypeError):
        raise VideoError(
            "is not a torch device; give e.g. 'cpu' or 'cuda'",
            path=p,
            argument=f"device={device!r}",
        ) from None
    if not os.path.exists(p):
        raise VideoError("no such file; check the path", path=p)
    if os.path.isdir(p):
        raise VideoError("is a directory, not a video file", path=p)

    plan = None if sel.from_first else _scan_for_seek(p, sel)
    args = (p, sel, out_size, crop, dtype, device, progress, allow_truncated)
    with _one_torch_thread(device):
        try:
            return _decode(*args, plan=plan)
        except _SeekMissed:
            return _decode(*args, plan=None)


@contextmanager
def _one_torch_thread(device: torch.device) -> Iterator[None]:
    """Per-frame work on the CPU runs on one torch thread: the operations are small and run
    beside FFmpeg's decoding threads, and more threads oversubscribe the cores and thrash."""
    if device.type != "cpu":
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def _decoded_frames(container, stream, state: dict) -> Iterator[Any]:
    """The stream's frames in presentation order. Stops at the first FFmpeg error, recording
    it in ``state["failure"]``, after draining the frames the decoder still holds (with
    frame threading it holds several); counts packets in ``state["packets"]`` and records
    where the last one ends (pts + duration) in ``state["end_pts"]``."""
    av = _av()
    try:
        for packet in container.demux(stream):
            if not packet.size:
                continue  # the end-of-file packet; the decoder is drained below
            state["packets"] += 1
            if packet.pts is not None and packet.duration:
                state["end_pts"] = max(state["end_pts"] or 0, packet.pts + packet.duration)
            try:
                frames = packet.decode()
            except av.FFmpegError as exc:
                state["failure"] = f"FFmpeg failed while decoding ({_ffmpeg_reason(exc)})"
                break
            yield from frames
    except av.FFmpegError as exc:
        state["failure"] = f"FFmpeg failed while reading ({_ffmpeg_reason(exc)})"
    try:
        yield from stream.decode(None)
    except av.FFmpegError as exc:
        state["failure"] = state["failure"] or (
            f"FFmpeg failed while decoding ({_ffmpeg_reason(exc)})"
        )


def _decode(
    path: str,
    sel: _Selection,
    size: tuple[int | None, int | None] | None,
    crop: tuple[int, int, int, int] | None,
    dtype: torch.dtype,
    device: torch.device,
    progress: bool,
    allow_truncated: bool,
    *,
    plan: _SeekPlan | None,
) -> Video:
    """One decode pass (from the start, or from ``plan``'s keyframe)."""
    from tqdm.auto import tqdm

    work = torch.float64 if dtype == torch.float64 else torch.float32
    with _open(path) as container:
        stream = _video_stream(container, path)
        stream.thread_type = "AUTO"  # frame + slice threads
        tb: Fraction = stream.time_base
        fps = _fps(stream)
        declared = _declared_frames(stream)
        estimate = _estimate_count(sel, declared, container, stream, fps)
        if plan is not None:
            container.seek(plan.seek_ts, stream=stream, backward=True, any_frame=False)
        first_pts = None if plan is None else plan.first_pts
        index = -1 if plan is None else plan.start_index - 1  # index of the last frame seen
        in_range = 0  # frames seen inside the selected range
        last_pts = None
        kept_times: list[float] = []
        kept_index: list[int] = []
        source_size = None
        out: _Output | None = None
        geom: tuple[int, int, tuple[int, int]] | None = None
        state: dict[str, Any] = {"packets": 0, "failure": None, "end_pts": None}
        reached_end = True
        untimed = False
        bar = tqdm(
            total=estimate or None,
            disable=not progress,
            desc=os.path.basename(path),
            unit="frame",
            leave=False,
        )
        frames = _decoded_frames(container, stream, state)
        try:
            for frame in frames:
                pts = frame.pts
                if plan is not None and index < plan.start_index:
                    # after the seek: skip to the first wanted frame, checking the landing
                    if pts is None or pts > plan.target_pts:
                        raise _SeekMissed
                    if pts < plan.target_pts:
                        continue
                index += 1
                if pts is None:  # no timestamps (e.g. a raw H.264 stream): assume a constant rate
                    pts_time = index / fps
                    if not untimed:
                        untimed = True
                        warnings.warn(
                            f"read_video: {path}: the stream has no timestamps; times are "
                            f"frame index / {fps:g} fps",
                            stacklevel=3,
                        )
                else:
                    if first_pts is None:
                        first_pts = pts
                    pts_time = (pts - first_pts) * tb.numerator / tb.denominator
                    last_pts = pts
                if sel.by_time:
                    if pts_time < sel.t0 - _TIME_EPS:
                        continue
                    if sel.t1 is not None and pts_time >= sel.t1 - _TIME_EPS:
                        reached_end = False
                        break
                else:
                    if index < sel.start:
                        continue
                    if sel.stop is not None and index >= sel.stop:
                        reached_end = False
                        break
                in_range += 1
                if (in_range - 1) % sel.stride:
                    continue
                img = _upright_rgb(frame, stream)
                if source_size is None:
                    source_size = (int(img.shape[2]), int(img.shape[1]))
                    geom = _geometry(path, source_size, crop, size)
                    out = _allocate(path, estimate, (3, geom[1], geom[0]), dtype, device)
                elif (int(img.shape[2]), int(img.shape[1])) != source_size:
                    raise VideoError(
                        f"the frame size changes from {source_size[0]}x{source_size[1]} to "
                        f"{img.shape[2]}x{img.shape[1]} at frame {index}; read the parts "
                        "separately with frames=",
                        path=path,
                    )
                _store(img, crop, geom, work, device, out.slot())  # type: ignore[union-attr,arg-type]
                kept_times.append(pts_time)
                kept_index.append(index)
                bar.update(1)
        finally:
            frames.close()
            bar.close()
        failure = state["failure"]
        if failure is None and reached_end:
            end_pts = state["end_pts"] if state["end_pts"] is not None else last_pts
            failure = _shortfall(
                container, stream, plan, state["packets"], declared, end_pts, first_pts
            )
    if failure is not None:
        if kept_times:
            got = (
                f"{len(kept_times)} selected frames (stream frames {kept_index[0]} to "
                f"{kept_index[-1]}, up to {kept_times[-1]:.3f} s) were readable"
            )
        else:
            got = f"no selected frame was readable ({index + 1} frames were decoded)"
        reason = f"the video is truncated or damaged: {failure}; {got}"
        if not allow_truncated or not kept_times:
            raise VideoError(
                f"{reason}. Re-copy or re-export the file, or pass allow_truncated=True to "
                "keep the readable frames",
                path=path,
            )
        warnings.warn(f"read_video: {path}: {reason}", stacklevel=3)
    if not kept_times:
        if not reached_end:  # a time range that falls between two frames
            gap = f"{1 / fps:.6g} s" if math.isfinite(fps) and fps > 0 else "unknown"
            raise VideoError(
                "selects no frames: no frame's presentation time lies in that range (frames "
                f"are about {gap} apart); widen the range",
                path=path,
                argument=sel.label,
            )
        raise _empty_selection(path, sel, index + 1, _last_time(last_pts, first_pts, tb))
    return Video(
        frames=out.finish(),  # type: ignore[union-attr]
        times=torch.tensor(kept_times, dtype=torch.float64),
        fps=fps,
        source_size=source_size,  # type: ignore[arg-type]
        crop=crop,
        frame_indices=torch.tensor(kept_index, dtype=torch.long),
        path=path,
    )


def _last_time(last_pts: int | None, first_pts: int | None, tb: Fraction) -> float:
    if last_pts is None or first_pts is None:
        return 0.0
    return float((last_pts - first_pts) * tb)


def _estimate_count(sel: _Selection, declared: int, container, stream, fps: float) -> int:
    """Estimated number of output frames (for preallocation and the progress bar; 0 if
    unknown)."""
    total = declared
    if not total:
        end = _declared_end(container, stream)
        if end is None and container.duration:
            end = container.duration / 1e6
        if end is not None and math.isfinite(fps):
            total = round(end * fps)
    if sel.by_time:
        if not math.isfinite(fps):
            return 0
        end_t = total / fps if total else None
        if sel.t1 is not None:
            end_t = sel.t1 if end_t is None else min(sel.t1, end_t)
        if end_t is None:
            return 0
        n = max(0, math.ceil((end_t - sel.t0) * fps))
    else:
        stop = sel.stop if sel.stop is not None else total
        if total:
            stop = min(stop, total) if stop else total
        if not stop:
            return 0
        n = max(0, stop - sel.start)
    return min(_MAX_PREALLOC, math.ceil(n / sel.stride))


def _shortfall(
    container,
    stream,
    plan: _SeekPlan | None,
    packets: int,
    declared: int,
    end_pts: int | None,
    first_pts: int | None,
) -> str | None:
    """Why the stream, read to its end (``end_pts``: where its last frame ends), looks cut
    short, or None."""
    if plan is None and declared and packets < declared:
        return f"it holds {packets} of the {declared} frames its header declares"
    end = _declared_end(container, stream)
    if end is None or end_pts is None or first_pts is None:
        return None
    got = float((end_pts - first_pts) * stream.time_base)
    fps = _fps(stream)
    slack = max(0.5, 3.0 / fps) if math.isfinite(fps) and fps > 0 else 0.5
    if got + slack < end:
        return f"its frames end at {got:.3f} s but its header declares {end:.3f} s"
    return None


def _upright_rgb(frame, stream) -> torch.Tensor:
    """(3, h, w) uint8 RGB of a decoded frame, turned upright by its rotation metadata."""
    arr = frame.to_ndarray(format="rgb24")  # (h, w, 3) uint8 from any pixel format
    img = torch.from_numpy(arr).permute(2, 0, 1)
    quarter = round(_rotation_degrees(frame, stream) / 90.0) % 4
    if quarter:
        # torch.rot90 turns from the first towards the second dim: counter-clockwise on screen
        img = torch.rot90(img, quarter, dims=(1, 2))
    return img


def _geometry(
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


def _store(
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
