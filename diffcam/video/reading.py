"""`read_video`: stream a video file through PyAV into a `Video`, one frame at a time."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction
from typing import Any

import torch

from .buffer import Output, allocate, estimate_count
from .clock import PacketClock, clock_problem
from .container import (
    declared_end,
    declared_frames,
    decoded_frames,
    open_container,
    stream_fps,
    video_stream,
)
from .errors import VideoError
from .frames import output_geometry, store_frame, upright_quarters, upright_rgb
from .record import Video
from .seek import SeekMissed, SeekPlan, scan_for_seek
from .selection import (
    TIME_EPS,
    Selection,
    at_fps,
    check_crop_form,
    empty_selection,
    parse_fps,
    parse_selection,
    parse_size,
)
from .yuv import YuvPlan, yuv_plan


def read_video(
    path: str | os.PathLike,
    *,
    size: int | tuple[int | None, int | None] | None = None,
    crop: tuple[int, int, int, int] | None = None,
    frames: tuple[int, int | None] | slice | None = None,
    seconds: tuple[float, float | None] | None = None,
    stride: int = 1,
    fps: float | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
    progress: bool = False,
    allow_truncated: bool = False,
    conversion: str = "auto",
) -> Video:
    """Read a video file into a `Video`, streaming: one full-resolution frame at a time.

    Each decoded frame is converted to RGB (grey sources are replicated, an alpha channel
    is dropped), turned upright, cropped, converted to ``dtype`` in [0, 1] and resized, and
    only the result is stored (when shrinking by whole factors, the averaging comes before
    the conversion to RGB where it can: see "Conversion" below). Peak memory is the output
    plus a few full-resolution frames (and briefly twice the output when the container does
    not tell the frame count, so the output grows in chunks that are joined at the end). On the CPU this per-frame work runs
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
        seconds: (t0, t1): the frames whose time t (from the first frame) satisfies
            t0 <= t < t1 (to within 1 microsecond); t1 None reads to the end. t is the
            presentation time, or ``index / fps`` when ``fps`` is given (so the range is in
            true seconds then). Give at most one of ``frames`` and ``seconds``.
        stride: keep every stride-th frame of the selected range, starting with its first.
        fps: the true capture rate (frames/s, > 0), for a container that misstates it (a
            phone's 240 fps slow-motion clip stored as 30 fps) or whose timestamps cannot be
            trusted: ``times`` become ``frame index / fps``, the index counted from the
            file's first frame, whatever the container says; ``seconds=`` then selects in
            these seconds (``seconds=(1.0, 2.0)`` at ``fps=240`` is frames 240 to 479), and
            ``Video.fps`` is ``fps``. None (default) uses the container's timestamps.
        dtype: floating dtype of ``frames`` (the arithmetic is float32, or float64 for
            float64).
        device: device of ``frames``; frames are converted and resized there.
        progress: show a tqdm bar.
        allow_truncated: for a file that ends early or is damaged part way (see below),
            warn and return the frames read up to the damage instead of raising.
        conversion: ``"auto"`` (default) averages in YUV where the rule below allows it,
            ``"rgb"`` always converts each full-size frame to RGB first (the reference).

    Returns:
        a `Video`: ``frames`` (T, 3, H, W), ``times`` (T,) float64 seconds from the stream's
        first frame, taken from the container's presentation timestamps (exact for variable
        frame rate) or ``index / fps``, ``frame_indices`` (T,) int64, ``fps``,
        ``source_size``, ``crop``, ``path``, ``clock`` (where ``times`` came from:
        ``"container"``, ``"fps"`` or ``"index/fps fallback"``) and ``conversion`` (how the
        pixels were made: ``"yuv"``, ``"rgb"``, or ``"mixed"`` when some frames went each
        way; see below).

    Conversion: FFmpeg's conversion of a full-size frame to RGB costs more than decoding it,
    so when shrinking (``conversion="auto"``) each output pixel's block of source pixels is
    averaged in the decoded Y, U and V planes and only the averages are converted to RGB
    (``Video.conversion == "yuv"``). That is the same area average of the same RGB pixels,
    up to the reference's rounding of each pixel to 8 bits (a fraction of an 8-bit level on
    average, a couple of levels at most); blocks where some pixel's RGB leaves [0, 1] are
    converted, clipped and averaged pixel by pixel, as the reference does. The rule: it is
    used when the frames are 8-bit planar YUV (``yuv420p``, ``yuv422p``, ``yuv444p`` or
    their full-range ``yuvj`` forms: what H.264, HEVC, VP9 and AV1 decoders give for
    ordinary video), the output shrinks the (cropped) upright frame by a whole factor on
    each axis (the case `resize_frames` averages exactly), the blocks do not split chroma
    samples (with 4:2:0 chroma: an even factor and an even crop offset on each axis), and
    FFmpeg's own conversion of a test frame of that format, colour matrix, range and size
    is the affine map with nearest chroma that the averaging assumes (it is measured once
    per kind of frame; FFmpeg interpolates the chroma of 4:2:0 frames of an odd height, for
    one, and those go the ``"rgb"`` way). Otherwise, or with ``conversion="rgb"``, each frame is converted to RGB at full size and
    then cropped and resized in torch (``"rgb"``). A frame whose pixel format, colour matrix,
    size or rotation differs from the first kept frame's goes the ``"rgb"`` way. The YUV
    averaging runs on the CPU, in the frame's own memory, whatever ``device`` is; only the
    result is copied there.

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

    Timestamps: ``times`` are the container's presentation timestamps, in presentation
    order for every container: frames come out of the decoder in presentation order, and
    each takes the smallest timestamp among the packets decoded so far that no earlier frame
    took, which is right also where the file stores timestamps in decode order (AVI with
    B-frames, where a frame's own ``pts`` goes back and forth). A stream without any (e.g. a
    raw .h264 file) gets ``frame index / fps`` (``clock="index/fps fallback"``), with a
    warning. Timestamps that cannot be trusted raise `VideoError` (pass ``fps=`` to time
    the frames by index instead): some frames without one, repeated ones, ones going
    backwards, or a frame-to-frame step over 100 times the median step. Only the frames
    decoded are checked (from the seek point to the end of the selection).

    Truncated or damaged files raise `VideoError` (unless ``allow_truncated``) naming how
    many frames were readable: FFmpeg failing part way (reading stops at the first error),
    or the stream ending clearly before the frame count or length its header declares. Only
    a selection that reaches the damage is affected. An MP4 cut before its index (the
    'moov' atom) was written cannot be opened at all and always raises.

    Raises:
        VideoError: missing or unreadable file, no video stream, an invalid argument, a
            selection with no frames (the message gives the frame count or time span), a
            truncated file, or timestamps that cannot be trusted (see above).
    """
    p = os.fspath(path)
    sel = parse_selection(frames, seconds, stride, p)
    rate = parse_fps(fps, p)
    if rate is not None:
        sel = at_fps(sel, rate, p)
    out_size = parse_size(size, p)
    crop = check_crop_form(crop, p)
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
    if conversion not in ("auto", "rgb"):
        raise VideoError(
            "must be 'auto' (average in YUV where possible) or 'rgb' (convert every "
            "full-size frame to RGB first)",
            path=p,
            argument=f"conversion={conversion!r}",
        )
    if not os.path.exists(p):
        raise VideoError("no such file; check the path", path=p)
    if os.path.isdir(p):
        raise VideoError("is a directory, not a video file", path=p)

    plan = None if sel.from_first else scan_for_seek(p, sel)
    args = (p, sel, out_size, crop, dtype, device, progress, allow_truncated, rate, conversion)
    with _one_torch_thread(device):
        try:
            return _decode(*args, plan=plan)
        except SeekMissed:
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


def _decode(
    path: str,
    sel: Selection,
    size: tuple[int | None, int | None] | None,
    crop: tuple[int, int, int, int] | None,
    dtype: torch.dtype,
    device: torch.device,
    progress: bool,
    allow_truncated: bool,
    rate: float | None,
    conversion: str,
    *,
    plan: SeekPlan | None,
) -> Video:
    """One decode pass (from the start, or from ``plan``'s keyframe); ``rate`` is read_video's
    ``fps`` (times are index / rate) or None (times are the presentation timestamps)."""
    from tqdm.auto import tqdm

    work = torch.float64 if dtype == torch.float64 else torch.float32
    with open_container(path) as container:
        stream = video_stream(container, path)
        stream.thread_type = "AUTO"  # frame + slice threads
        tb: Fraction = stream.time_base
        fps = stream_fps(stream) if rate is None else rate
        declared = declared_frames(stream)
        estimate = estimate_count(sel, declared, container, stream, fps)
        if plan is not None:
            container.seek(plan.seek_ts, stream=stream, backward=True, any_frame=False)
        first_pts = None if plan is None else plan.first_pts
        index = -1 if plan is None else plan.start_index - 1  # index of the last frame seen
        in_range = 0  # frames seen inside the selected range
        last_pts = None
        kept_times: list[float] = []
        kept_index: list[int] = []
        seen_pts: list[int | None] = []  # every decoded frame's timestamp, for the clock check
        seen_index: list[int] = []
        clock = PacketClock()
        source_size = None
        out: Output | None = None
        geom: tuple[int, int, tuple[int, int]] | None = None
        yuv: YuvPlan | None = None
        used: set[str] = set()  # the conversions the kept frames went through
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
        frames = decoded_frames(container, stream, state, clock)
        try:
            for frame in frames:
                pts = clock.frame(frame.pts)  # not frame.pts: it is in decode order in AVI
                if plan is not None and index < plan.start_index:
                    # after the seek: skip to the first wanted frame, checking the landing
                    if pts is None or pts > plan.target_pts:
                        raise SeekMissed
                    if pts < plan.target_pts:
                        continue
                index += 1
                seen_pts.append(pts)
                seen_index.append(index)
                if pts is not None:
                    if first_pts is None:
                        first_pts = pts
                    last_pts = pts
                if rate is not None:
                    pts_time = index / rate
                elif pts is None:  # no timestamps (e.g. a raw H.264 stream): assume a constant rate
                    if not math.isfinite(fps):
                        raise VideoError(
                            "the stream has neither timestamps nor a frame rate; pass fps= "
                            "(the capture rate) to time the frames by frame index / fps",
                            path=path,
                        )
                    pts_time = index / fps
                    if not untimed:
                        untimed = True
                        warnings.warn(
                            f"read_video: {path}: the stream has no timestamps; times are "
                            f"frame index / {fps:g} fps (pass fps= to give the true rate)",
                            stacklevel=3,
                        )
                else:
                    pts_time = (pts - first_pts) * tb.numerator / tb.denominator
                if sel.by_time:
                    if pts_time < sel.t0 - TIME_EPS:
                        continue
                    if sel.t1 is not None and pts_time >= sel.t1 - TIME_EPS:
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
                quarter = upright_quarters(frame, stream)
                upright = (int(frame.width), int(frame.height))
                if quarter % 2:
                    upright = upright[::-1]
                if source_size is None:
                    source_size = upright
                    geom = output_geometry(path, source_size, crop, size)
                    out = allocate(path, estimate, (3, geom[1], geom[0]), dtype, device)
                    if conversion == "auto":
                        yuv = yuv_plan(frame, quarter, crop, geom, work)
                elif upright != source_size:
                    raise VideoError(
                        f"the frame size changes from {source_size[0]}x{source_size[1]} to "
                        f"{upright[0]}x{upright[1]} at frame {index}; read the parts "
                        "separately with frames=",
                        path=path,
                    )
                slot = out.slot()  # type: ignore[union-attr]
                if yuv is not None and yuv.store(frame, quarter, slot):
                    used.add("yuv")
                else:
                    img = upright_rgb(frame, stream, quarter)
                    store_frame(img, crop, geom, work, device, slot)  # type: ignore[arg-type]
                    used.add("rgb")
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
    if rate is not None:
        clock_name = "fps"
    elif untimed and all(p is None for p in seen_pts):
        clock_name = "index/fps fallback"
    else:
        clock_name = "container"
        problem = clock_problem(seen_pts, seen_index, tb)
        if problem is not None:
            raise VideoError(
                f"its timestamps cannot be trusted as a clock: {problem}. Pass fps= (the "
                "true capture rate) to time the frames by frame index / fps instead",
                path=path,
            )
    if not kept_times:
        if not reached_end:  # a time range that falls between two frames
            gap = f"{1 / fps:.6g} s" if math.isfinite(fps) and fps > 0 else "unknown"
            raise VideoError(
                "selects no frames: no frame's presentation time lies in that range (frames "
                f"are about {gap} apart); widen the range",
                path=path,
                argument=sel.label,
            )
        raise empty_selection(path, sel, index + 1, _last_time(last_pts, first_pts, tb))
    return Video(
        frames=out.finish(),  # type: ignore[union-attr]
        times=torch.tensor(kept_times, dtype=torch.float64),
        fps=fps,
        source_size=source_size,  # type: ignore[arg-type]
        crop=crop,
        frame_indices=torch.tensor(kept_index, dtype=torch.long),
        path=path,
        clock=clock_name,
        conversion=used.pop() if len(used) == 1 else "mixed",
    )


def _last_time(last_pts: int | None, first_pts: int | None, tb: Fraction) -> float:
    if last_pts is None or first_pts is None:
        return 0.0
    return float((last_pts - first_pts) * tb)


def _shortfall(
    container,
    stream,
    plan: SeekPlan | None,
    packets: int,
    declared: int,
    end_pts: int | None,
    first_pts: int | None,
) -> str | None:
    """Why the stream, read to its end (``end_pts``: where its last frame ends), looks cut
    short, or None."""
    if plan is None and declared and packets < declared:
        return f"it holds {packets} of the {declared} frames its header declares"
    end = declared_end(container, stream)
    if end is None or end_pts is None or first_pts is None:
        return None
    got = float((end_pts - first_pts) * stream.time_base)
    fps = stream_fps(stream)
    slack = max(0.5, 3.0 / fps) if math.isfinite(fps) and fps > 0 else 0.5
    if got + slack < end:
        return f"its frames end at {got:.3f} s but its header declares {end:.3f} s"
    return None
