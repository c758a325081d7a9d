"""The output frame buffer: sized from an estimate of the frame count, grown when short."""

from __future__ import annotations

import math

import torch

from .container import declared_end
from .errors import VideoError
from .selection import Selection

# Largest initial output allocation in frames; longer clips grow in chunks.
_MAX_PREALLOC = 65536


class Output:
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


def allocate(
    path: str, estimate: int, shape: tuple[int, int, int], dtype: torch.dtype, device
) -> Output:
    """The output buffer, or a VideoError saying how to read less when it does not fit."""
    try:
        return Output(max(1, estimate), shape, dtype, device)
    except RuntimeError as exc:  # includes torch.OutOfMemoryError
        gib = max(1, estimate) * math.prod(shape) * dtype.itemsize / 2**30
        raise VideoError(
            f"the output ({estimate} frames of {shape[2]}x{shape[1]} {dtype}, {gib:.1f} GiB) "
            f"cannot be allocated on {device} ({str(exc).splitlines()[0]}); read less: "
            "pass size=, stride=, frames= or seconds=",
            path=path,
        ) from None


def estimate_count(sel: Selection, declared: int, container, stream, fps: float) -> int:
    """Estimated number of output frames (for preallocation and the progress bar; 0 if
    unknown)."""
    total = declared
    if not total:
        end = declared_end(container, stream)
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
