"""`Video`: frames read from a video file (or given as tensors), with their timestamps."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import torch


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
