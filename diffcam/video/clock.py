"""Each decoded frame's presentation timestamp, and the checks that a video's clock is usable.

A decoder outputs frames in presentation order, but the timestamp it attaches to a frame is
the one its packet carried. MP4, MOV, MKV and MPEG-TS store presentation timestamps, so that is
right. AVI stores no timestamps: FFmpeg numbers its packets in file (decode) order, so with
B-frames (H.264, HEVC, MPEG-4 part 2 unless its parser reorders them) a frame's own ``pts`` is
a decode-order tick and the frames' ``pts`` go back and forth. `PacketClock` gives each frame
the right presentation timestamp in both cases; `clock_problem` says what is wrong with
timestamps that no reordering explains (repeats, steps back, huge gaps, missing ones).
"""

from __future__ import annotations

import heapq
import statistics
from fractions import Fraction

# A frame-to-frame step this many times the median step is not a clock to trust: a real
# capture does not pause for 100 frame intervals (3.3 s at 30 fps) inside one clip.
_MAX_STEP_RATIO = 100


class PacketClock:
    """Presentation timestamps (stream time base) of a stream's decoded frames, from the
    timestamps of the packets fed to the decoder.

    Feed every packet's ``pts`` to `packet` before decoding it, and every decoded frame's own
    ``pts`` to `frame`, in the decoder's output order. While the packets' timestamps increase
    in file order they may be decode-order ticks (AVI), so the k-th frame out takes the
    smallest timestamp fed and not yet taken: frames come out in presentation order, so that
    is its presentation time whichever order the timestamps were stored in. Once a packet's
    timestamp is below its predecessor's, the container stores presentation timestamps (they
    are reordered in the file as the frames are), and a frame's own ``pts`` is used; the
    timestamps below it that no frame took belong to frames the decoder dropped (e.g. leading
    frames after a seek) and are discarded. The two rules agree on every frame of a well-formed
    file, so switching from one to the other part way is seamless.
    """

    def __init__(self) -> None:
        self.pending: list[int] = []  # a heap of packet timestamps no frame has taken yet
        self.last_packet: int | None = None
        self.presentation = False  # packet timestamps seen out of file order

    def packet(self, pts: int | None) -> None:
        """Record the timestamp of a packet about to be decoded (None: it has none)."""
        if pts is None:
            return
        pts = int(pts)
        if self.last_packet is not None and pts < self.last_packet:
            self.presentation = True
        self.last_packet = pts
        heapq.heappush(self.pending, pts)

    def frame(self, own_pts: int | None) -> int | None:
        """The presentation timestamp of the next decoded frame (None: unknown)."""
        if self.presentation and own_pts is not None:
            while self.pending and self.pending[0] <= own_pts:
                heapq.heappop(self.pending)
            return int(own_pts)
        if self.pending:
            return heapq.heappop(self.pending)
        return None if own_pts is None else int(own_pts)


def clock_problem(pts: list[int | None], indices: list[int], tb: Fraction) -> str | None:
    """What makes these presentation timestamps unusable as a clock, or None.

    Args:
        pts: (N,) the decoded frames' presentation timestamps (stream time base) in output
            order; None for a frame without one.
        indices: (N,) the frames' indices in the stream, for messages.
        tb: the stream's time base (s per timestamp unit).
    """
    n = len(pts)
    missing = sum(p is None for p in pts)
    if missing:
        first = indices[next(i for i, p in enumerate(pts) if p is None)]
        return f"{missing} of {n} frames have no timestamp (the first is frame {first})"

    def at(i: int) -> str:
        return f"frame {indices[i]} at {float((pts[i] - pts[0]) * tb):.6g} s"

    steps = [pts[i] - pts[i - 1] for i in range(1, n)]  # type: ignore[operator]
    back = [i + 1 for i, s in enumerate(steps) if s < 0]
    if back:
        i = back[0]
        return (
            f"{len(back)} of {n} timestamps go backwards, which the decoder's reordering does "
            f"not explain (the first: {at(i)} follows {at(i - 1)})"
        )
    repeats = [i + 1 for i, s in enumerate(steps) if s == 0]
    if repeats:
        i = repeats[0]
        return (
            f"{len(repeats)} of {n} timestamps repeat (the first: frame {indices[i]} has the "
            f"time of frame {indices[i - 1]}, {float((pts[i] - pts[0]) * tb):.6g} s)"
        )
    if len(steps) >= 2:
        median = statistics.median(steps)
        big = [i + 1 for i, s in enumerate(steps) if s > _MAX_STEP_RATIO * median]
        if big:
            i = max(big, key=lambda j: steps[j - 1])
            return (
                f"{len(big)} of {n - 1} frame-to-frame steps are over {_MAX_STEP_RATIO} times "
                f"the median step of {float(median * tb) * 1e3:.4g} ms (the largest: "
                f"{float(steps[i - 1] * tb):.6g} s from frame {indices[i - 1]} to "
                f"{indices[i]})"
            )
    return None
