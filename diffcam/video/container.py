"""PyAV (FFmpeg) plumbing: opening a file, its video stream, header facts and decoding."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .clock import PacketClock
from .errors import VideoError


def import_av():
    try:
        import av
    except ImportError as exc:  # pragma: no cover - av is a dependency
        raise ImportError(
            "read_video needs PyAV: pip install av (it is in diffcam's dependencies)"
        ) from exc
    return av


def open_container(path: str):
    """Open ``path`` with PyAV, turning FFmpeg's errors into VideoError."""
    av = import_av()
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


def video_stream(container, path: str):
    streams = list(container.streams.video)
    if not streams:
        kinds = sorted({s.type for s in container.streams}) or ["none"]
        raise VideoError(
            f"has no video stream (streams: {', '.join(kinds)}); pass a video file",
            path=path,
        )
    return streams[0]


def stream_fps(stream) -> float:
    for rate in (stream.average_rate, stream.guessed_rate, stream.base_rate):
        if rate:
            return float(rate)
    return float("nan")


def declared_frames(stream) -> int:
    """The frame count the container header declares (0 if unknown)."""
    try:
        return max(0, int(stream.frames))
    except (TypeError, ValueError):
        return 0


def declared_end(container, stream) -> float | None:
    """Seconds from the stream's start to its end as the container header declares them, or
    None. Matroska / WebM declare a length only for the whole file (all streams)."""
    if stream.duration and stream.time_base:
        return float(stream.duration * stream.time_base)
    fmt = getattr(container.format, "name", "") or ""
    if "matroska" in fmt and container.duration and len(container.streams) == 1:
        return container.duration / 1e6
    return None


def decoded_frames(container, stream, state: dict, clock: PacketClock) -> Iterator[Any]:
    """The stream's frames in presentation order. Stops at the first FFmpeg error, recording
    it in ``state["failure"]``, after draining the frames the decoder still holds (with
    frame threading it holds several); counts packets in ``state["packets"]``, records
    where the last one ends (pts + duration) in ``state["end_pts"]`` and feeds each packet's
    timestamp to ``clock`` before decoding it (packets flagged for discarding, e.g. cut by an
    MP4 edit list, give no frame and are left out)."""
    av = import_av()
    try:
        for packet in container.demux(stream):
            if not packet.size:
                continue  # the end-of-file packet; the decoder is drained below
            state["packets"] += 1
            if not getattr(packet, "is_discard", False):
                clock.packet(packet.pts)
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
