"""Read and write videos.

Writing: `write_video` writes rendered frames to MP4 (H.264 through imageio-ffmpeg) or GIF
(Pillow). The file is written to a temporary name in the same folder and renamed when
complete, so a crash (or Ctrl-C) never leaves a half-written video behind under the requested
name.

Reading: `read_video` streams a video file through PyAV (FFmpeg), one frame at a time, into a
`Video`: frames as a (T, 3, H, W) tensor in [0, 1] at the requested size, and each frame's
presentation time from the container (or frame index / fps with ``fps=``). The
full-resolution clip is never held in memory.

Modules: `writing` (write_video), `reading` (read_video and the decoding loop), `record`
(the Video dataclass), `errors` (VideoError), `selection` (argument parsing), `frames`
(per-frame rotation, crop and resize), `yuv` (shrinking by averaging the decoded Y, U and V
planes, converted to RGB at the output size), `seek` (seek planning), `clock` (each frame's
presentation timestamp, and the checks that a clock is usable), `container` (PyAV plumbing)
and `buffer` (the output buffer).
"""

from __future__ import annotations

from .errors import VideoError
from .frames import resize_frames
from .reading import read_video
from .record import Video
from .writing import frames_to_uint8, write_video

__all__ = [
    "write_video",
    "frames_to_uint8",
    "read_video",
    "Video",
    "VideoError",
    "resize_frames",
]
