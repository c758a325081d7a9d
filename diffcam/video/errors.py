"""The error `read_video` raises for a video it cannot read as asked."""

from __future__ import annotations


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
