"""Planning a seek: a packet scan that places the selection's first frame exactly."""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

from .container import import_av, open_container, video_stream
from .selection import TIME_EPS, Selection, empty_selection

# Frames a decoder may reorder (H.264 and HEVC allow at most 16): the packet scan before a
# seek reads this many packets past the wanted frame so that its presentation rank is exact.
_REORDER_MARGIN = 64


@dataclass
class SeekPlan:
    """Seek to ``seek_ts`` (stream time base) and decode forward to the frame at ``target_pts``,
    which is frame ``start_index``; ``first_pts`` is the stream's first presentation time."""

    seek_ts: int
    target_pts: int
    start_index: int
    first_pts: int


class SeekMissed(Exception):
    """The decoder did not land where the packet scan said: decode from the start instead."""


def scan_for_seek(path: str, sel: Selection) -> SeekPlan | None:
    """Demux (without decoding) from the start far enough to place the selection's first
    frame exactly: its presentation timestamp and its index among the stream's frames.

    Returns the plan, or None when decoding from the start is as good (the first wanted frame
    follows the first keyframe) or the only safe way (packets without timestamps, or with
    repeated ones). Raises VideoError for a selection that starts past the end.
    """
    av = import_av()
    pts_list: list[int] = []
    keys: list[tuple[int, int]] = []  # (pts, seek timestamp) of keyframes, decode order
    eof = True
    with open_container(path) as container:
        stream = video_stream(container, path)
        tb = stream.time_base
        first = None
        threshold = None  # in pts units: t0 after the first frame
        past = 0  # packets at or after the wanted frame
        try:
            for pkt in container.demux(stream):
                if pkt.size == 0 or getattr(pkt, "is_discard", False):
                    continue
                if pkt.pts is None:
                    return None  # frames cannot be placed by timestamp: decode from the start
                pts = int(pkt.pts)
                pts_list.append(pts)
                if pkt.is_keyframe:
                    dts = pts if pkt.dts is None else int(pkt.dts)
                    keys.append((pts, min(pts, dts)))
                if first is None or pts < first:
                    first = pts
                    if sel.by_time:
                        threshold = first + math.floor((sel.t0 - TIME_EPS) / tb)
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
    # Sorted, the packets' timestamps are the frames' presentation times in order, whether the
    # file stores them in presentation order (MP4, MKV) or as decode-order ticks (AVI).
    pts_list.sort()
    if not pts_list or len(set(pts_list)) < len(pts_list):
        return None  # none, or repeated timestamps: a frame's rank is ambiguous
    first = pts_list[0]
    if sel.by_time:
        times = [float((p - first) * tb) for p in pts_list]
        k = bisect.bisect_left(times, sel.t0 - TIME_EPS)
    else:
        k = sel.start
    if k >= len(pts_list):
        if eof:
            raise empty_selection(path, sel, len(pts_list), float((pts_list[-1] - first) * tb))
        return None  # cannot happen with the margin; decode from the start
    target = pts_list[k]
    before = [key for key in keys if key[0] <= target]
    if not before:
        return None
    best = max(before)  # the last keyframe at or before the target
    if best[0] == min(keys)[0]:
        return None  # it is the first keyframe: decoding from the start is as good
    return SeekPlan(seek_ts=best[1], target_pts=target, start_index=k, first_pts=first)
