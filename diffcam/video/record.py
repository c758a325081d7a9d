"""`Video`: frames read from a video file (or given as tensors), with their timestamps."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch

# Where a Video's times came from (Video.clock).
CLOCKS = ("container", "fps", "index/fps fallback", "given")


@dataclass(frozen=True, eq=False, repr=False)
class Video:
    """Frames read from a video file (or given as tensors), with their timestamps.

    Attributes:
        frames: (T, 3, H, W) floats in [0, 1], row 0 at the top of the upright picture.
        times: (T,) float64 seconds, on the CPU: each frame's time relative to the stream's
            first frame (so ``times[0] == 0`` when the clip starts at the first frame), as
            ``clock`` says: its presentation time from the container (exact for
            variable-frame-rate video), or ``frame_indices / fps``.
        fps: the stream's average frame rate (frames/s), or the rate given to
            ``read_video(fps=)`` / `retimed`. For variable-frame-rate video use ``times``,
            not ``fps``.
        source_size: (width, height) in pixels of the decoded stream, upright (after the
            rotation metadata is applied).
        crop: (x, y, width, height) in upright source pixels that was cut out before resizing,
            or None for the whole frame.
        frame_indices: (T,) int64, on the CPU: each frame's index in the decoded stream
            (0 = the stream's first frame).
        path: the file read, or None.
        clock: where ``times`` came from: ``"container"`` (the presentation timestamps),
            ``"fps"`` (``frame_indices / fps`` with the rate given to ``read_video(fps=)``,
            `retimed` or `from_frames`), ``"index/fps fallback"`` (``frame_indices / fps``
            with the container's rate: the stream has no timestamps) or ``"given"`` (times
            passed in by the caller).
        conversion: how `read_video` made the pixels: ``"yuv"`` (each output pixel's block
            averaged in the decoded Y, U and V planes, then converted to RGB), ``"rgb"``
            (each full-size frame converted to RGB, then cropped and resized), ``"mixed"``
            (some frames each way), or None for frames not read from a file.

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
    clock: str = "given"
    conversion: str | None = None

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
        if self.clock not in CLOCKS:
            raise ValueError(f"Video: clock must be one of {CLOCKS}, got {self.clock!r}")
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
            times: (T,) seconds; default ``arange(T) / fps`` (``clock`` is then ``"fps"``,
                else ``"given"``).
        """
        frames = torch.as_tensor(frames)
        if not (math.isfinite(fps) and fps > 0):
            raise ValueError(f"Video.from_frames: fps must be a positive number, got {fps!r}")
        clock = "given"
        if times is None:
            times = torch.arange(frames.shape[0], dtype=torch.float64) / fps
            clock = "fps"
        w, h = (int(frames.shape[-1]), int(frames.shape[-2])) if frames.dim() == 4 else (0, 0)
        return cls(
            frames=frames, times=torch.as_tensor(times), fps=fps, source_size=(w, h), clock=clock
        )

    def __len__(self) -> int:
        return int(self.frames.shape[0])

    def __repr__(self) -> str:
        w, h = self.size
        span = f", {self.times[0].item():.3f}-{self.times[-1].item():.3f} s" if len(self) else ""
        return (
            f"Video({len(self)} frames {w}x{h}{span}, fps={self.fps:.3f}, clock={self.clock!r}, "
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

    def retimed(self, fps: float) -> Video:
        """A new `Video` (the same frames, no copy) timed at the true capture rate ``fps``.

        For a container that misstates its rate (a phone's 240 fps slow-motion clip stored as
        30 fps) or whose timestamps cannot be trusted: ``times`` become
        ``frame_indices / fps`` (seconds from the file's first frame, as
        ``read_video(path, fps=fps)`` gives them), ``fps`` is ``fps`` and ``clock`` is
        ``"fps"``. To select by true seconds, read with ``read_video(path, fps=...,
        seconds=...)`` instead: a selection made before re-timing was made in the old seconds.

        Args:
            fps: frames per second (> 0).
        """
        if isinstance(fps, bool) or not (
            isinstance(fps, (int, float, np.integer, np.floating))
            and math.isfinite(fps)
            and fps > 0
        ):
            raise ValueError(f"Video.retimed: fps must be a positive number, got {fps!r}")
        times = self.frame_indices.to(torch.float64) / float(fps)
        return replace(self, times=times, fps=float(fps), clock="fps")

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
