"""What a video shows, prepared for a fit: frames at the working size, their times on the
scene's clock, the clean plate, the pixel noise and the foreground masks.

A scene's time 0 is the video's time ``start``: a frame read at video time t is at scene time
``t - start``. Where a container lies about its frame rate (a phone's slow motion stored at
30 fps), ``fps`` gives the true one and the times become frame index / fps.
"""

from __future__ import annotations

import dataclasses
import math
import os

import torch

from .. import imaging
from ..video import Video, VideoError, read_video
from .errors import IdentifyError

__all__ = ["Observation", "observe"]


@dataclasses.dataclass(frozen=True)
class Observation:
    """A video prepared for a fit.

    Attributes:
        frames: (T, 3, H, W) floats in [0, 1] at the working size.
        times: (T,) float64 seconds on the scene's clock (0 = the video's time ``start``).
        plate: (3, H, W) the background without the moving bodies (`imaging.clean_plate`).
        noise: (3,) the pixel noise's standard deviation around the plate, per channel.
        mask: (T, 1, H, W) bool, the pixels where something moves: they differ from the plate
            and not as a shadow does (`moving_mask`).
        fps: the frame rate the times follow (frames/s).
        start: the video time (s) of the scene's time 0.
        path: the file read, or None.
        source_size: (width, height) of the video's frames before resizing.
    """

    frames: torch.Tensor
    times: torch.Tensor
    plate: torch.Tensor
    noise: torch.Tensor
    mask: torch.Tensor
    fps: float
    start: float
    path: str | None = None
    source_size: tuple[int, int] | None = None

    @property
    def size(self) -> tuple[int, int]:
        """(width, height) of the working frames."""
        return int(self.frames.shape[-1]), int(self.frames.shape[-2])

    def __len__(self) -> int:
        return int(self.frames.shape[0])


def _read(path, start: float, seconds: float | None, width: int, fps: float | None) -> Video:
    """The frames from video time ``start`` for ``seconds`` (to the end if None), ``width``
    pixels wide; with ``fps`` the frames are timed (and chosen) by index / fps."""
    window = (float(start), None if seconds is None else float(start) + float(seconds))
    return read_video(path, size=(int(width), None), seconds=window, fps=fps)


def moving_mask(frames: torch.Tensor, plate: torch.Tensor, shadow_share: float = 0.7):
    """(T, 1, H, W) bool: the pixels where something other than a shadow differs from the
    plate: `imaging.foreground_mask` without its connected regions that are mostly shadow-like
    (`imaging.shadow_mask`). Whole regions go or stay: a grey body on a beige wall has pixels
    that pass for shadow, but its region has others that do not (its colours, its ends)."""
    from .blobs import component_labels

    mask = imaging.foreground_mask(frames, plate)
    shade = imaging.shadow_mask(frames, plate)
    labels = component_labels(mask[:, 0])
    inside = labels >= 0
    unique, inverse = torch.unique(labels[inside], return_inverse=True)
    total = torch.bincount(inverse, minlength=len(unique)).double()
    dark = torch.bincount(inverse, shade[:, 0][inside].double(), len(unique))
    keep = torch.zeros_like(mask[:, 0])
    keep[inside] = (dark / total <= shadow_share)[inverse]
    return keep[:, None]


def observe(
    video,
    *,
    start: float = 0.0,
    seconds: float | None = None,
    width: int = 160,
    fps: float | None = None,
    dtype: torch.dtype = torch.float32,
) -> Observation:
    """Read a video (a path or a `diffcam.Video`) and prepare it for a fit.

    Args:
        video: a video file or a `Video` (then ``width`` and ``fps`` re-time/resize nothing:
            give the frames at the working size).
        start: video time (s) of the scene's time 0: the first frame used is the first at or
            after it.
        seconds: how much of the video to use (s) from ``start``; None = to the end.
        width: working width in pixels (the height keeps the aspect ratio).
        fps: the true frame rate (frames/s) when the container's timestamps are wrong (a
            slow-motion clip); None trusts the container.
        dtype: the frames' dtype.

    Raises:
        IdentifyError: an unreadable file, a window outside the video, too few frames, or a
            video in which nothing moves.
    """
    if not (start >= 0 and math.isfinite(start)):
        raise IdentifyError(f"start must be a time >= 0 (s) in the video, got {start!r}")
    if seconds is not None and not (seconds > 0 and math.isfinite(seconds)):
        raise IdentifyError(f"seconds must be a duration > 0 (s), got {seconds!r}")
    if fps is not None and not (fps > 0 and math.isfinite(fps)):
        raise IdentifyError(f"fps must be a frame rate > 0 (frames/s), got {fps!r}")
    if isinstance(video, Video):
        clip, path = video, video.path
        if fps is not None:
            clip = clip.retimed(fps)
        keep = clip.times >= start - 1e-6
        if seconds is not None:
            keep &= clip.times < start + seconds - 1e-6
        index = torch.nonzero(keep).flatten()
        clip = dataclasses.replace(
            clip, frames=clip.frames[index], times=clip.times[index],
            frame_indices=clip.frame_indices[index],
        )  # fmt: skip
    else:
        path = os.fspath(video)
        try:
            clip = _read(path, start, seconds, width, fps)
        except VideoError as error:
            raise IdentifyError(str(error)) from None
    if len(clip) < 8:
        raise IdentifyError(
            f"{path}: only {len(clip)} frames from {start:g} s"
            + ("" if seconds is None else f" for {seconds:g} s")
            + ": a fit needs at least 8; use a longer window (--seconds) or an earlier --start"
        )
    if seconds is not None:
        covered = float(clip.times[-1] - start) + 1.0 / max(clip.fps, 1e-9)
        if covered < 0.9 * seconds:
            raise IdentifyError(
                f"{path}: the video ends {covered:.3g} s after --start {start:g} s, but "
                f"--seconds asks for {seconds:g} s: shorten --seconds to at most {covered:.3g}"
            )
    frames = clip.frames.to(dtype)
    times = clip.times - float(start)
    plate = imaging.clean_plate(frames)
    noise = imaging.noise_level(frames, plate)
    mask = moving_mask(frames, plate)
    if not bool(mask.any()):
        raise IdentifyError(
            f"{path}: nothing moves in the video between {start:g} s and "
            f"{start + float(times[-1]):.3g} s (every frame matches the background): "
            "check --start and --seconds"
        )
    return Observation(
        frames=frames, times=times, plate=plate, noise=noise, mask=mask, fps=float(clip.fps),
        start=float(start), path=path, source_size=tuple(clip.source_size),
    )  # fmt: skip
