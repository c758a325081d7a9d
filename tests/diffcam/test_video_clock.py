"""read_video's clock: fps= re-timing (a container that misstates its frame rate), the
index / fps fallback and Video.clock; on tiny videos written in tmp_path."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np
import pytest
import torch

from diffcam import Video, VideoError, read_video
from diffcam import video as video_mod

FPS = 25  # 40 ms frames: exact in every container's time base (Matroska's is 1 ms)
COUNT = 40
BITS = 6  # frame index k is written as 6 black / white blocks along the bottom


def _image(k: int) -> np.ndarray:
    """(24, 32, 3) uint8: a moving smooth pattern (so the encoder makes B-frames) above six
    5 x 8 blocks, black or white, that spell k in binary."""
    y, x = np.mgrid[0:24, 0:32]
    bg = 128 + 60 * np.sin((x + 2 * k) / 5.0) * np.cos(y / 4.0)
    img = np.repeat(bg.astype(np.uint8)[..., None], 3, axis=2)
    for b in range(BITS):
        img[16:24, 5 * b : 5 * b + 5] = 255 if (k >> b) & 1 else 0
    return img


def _shown(v: Video) -> list[int]:
    """The index spelled by each frame's blocks: which written frame it shows."""
    centres = torch.tensor([5 * b + 2 for b in range(BITS)])
    bits = (v.frames[:, :, 20][:, :, centres].mean(1) > 0.5).long()  # (T, BITS)
    return (bits * 2 ** torch.arange(BITS)).sum(1).tolist()


def _write(path: Path, fmt: str, codec: str, options: dict[str, str]) -> Path:
    """COUNT frames at FPS, frame k at pts k (time base 1 / FPS), through PyAV."""
    with av.open(str(path), "w", format=fmt) as out:
        stream = out.add_stream(codec, rate=FPS, options=options)
        stream.width, stream.height, stream.pix_fmt = 32, 24, "yuv420p"
        for k in range(COUNT):
            frame = av.VideoFrame.from_ndarray(_image(k), format="rgb24")
            frame.pts, frame.time_base = k, Fraction(1, FPS)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


X264_B = {"bf": "3", "g": "12"}  # B-frames (pyramid), a keyframe every 12 frames


def _spy_plans(monkeypatch) -> list:
    """Record the seek plan of every decode pass."""
    plans = []
    real = video_mod.reading._decode

    def spy(*args, **kwargs):
        plans.append(kwargs["plan"])
        return real(*args, **kwargs)

    monkeypatch.setattr(video_mod.reading, "_decode", spy)
    return plans


# --------------------------------------------------------------------------- fps=
def test_fps_retimes_and_selects_in_true_seconds(monkeypatch, tmp_path):
    path = _write(tmp_path / "slowmo.mp4", "mp4", "libx264", X264_B)  # "25 fps", truly 200
    v = read_video(path, fps=200)
    assert v.clock == "fps" and v.fps == 200.0 and _shown(v) == list(range(COUNT))
    torch.testing.assert_close(v.times, torch.arange(COUNT, dtype=torch.float64) / 200)
    plans = _spy_plans(monkeypatch)
    part = read_video(path, fps=200, seconds=(0.07, 0.12))  # true seconds: frames 14 to 23
    want = list(range(14, 24))
    assert part.frame_indices.tolist() == want and _shown(part) == want
    torch.testing.assert_close(part.times, part.frame_indices.double() / 200)
    assert len(plans) == 1 and plans[0] is not None and plans[0].start_index == 14
    tail = read_video(path, fps=200, seconds=(0.18, None), stride=3)
    assert tail.frame_indices.tolist() == [36, 39]
    # the same frames re-timed after reading
    plain = read_video(path)
    assert plain.clock == "container" and plain.fps == pytest.approx(FPS)
    torch.testing.assert_close(plain.times, torch.arange(COUNT, dtype=torch.float64) / FPS)
    again = plain.retimed(200)
    assert again.clock == "fps" and again.fps == 200.0
    assert torch.equal(again.times, v.times) and torch.equal(again.frames, v.frames)
    sub = read_video(path, frames=(14, 24)).retimed(200)
    assert torch.equal(sub.times, part.times)


def test_fps_errors(tmp_path):
    path = _write(tmp_path / "a.mkv", "matroska", "libx264", X264_B)
    for bad in (0, -30, float("nan"), "240", True):
        with pytest.raises(VideoError, match=r"fps=.*true capture rate"):
            read_video(path, fps=bad)
    with pytest.raises(VideoError, match=r"seconds=\(0.101, 0.104\).*0.005 s apart"):
        read_video(path, fps=200, seconds=(0.101, 0.104))  # between frames 20 and 21
    with pytest.raises(VideoError, match=r"40 frames span 0 to 0.195 s at fps=200"):
        read_video(path, fps=200, seconds=(0.5, None))
    with pytest.raises(ValueError, match="positive"):
        read_video(path, frames=(0, 2)).retimed(0)


def test_stream_without_timestamps_falls_back_to_index_over_fps(tmp_path):
    path = _write(tmp_path / "raw.h264", "h264", "libx264", X264_B)
    with pytest.warns(UserWarning, match="no timestamps.*fps="):
        v = read_video(path)
    assert v.clock == "index/fps fallback" and _shown(v) == list(range(COUNT))
    torch.testing.assert_close(v.times, v.frame_indices.double() / v.fps)
    assert read_video(path, fps=FPS, frames=(20, 22)).frame_indices.tolist() == [20, 21]


# --------------------------------------------------------------------------- the record
def test_video_clock_field():
    frames = torch.rand(3, 3, 4, 5)
    assert Video.from_frames(frames, 10).clock == "fps"
    assert Video.from_frames(frames, 10, times=[0.0, 0.2, 0.3]).clock == "given"
    with pytest.raises(ValueError, match="clock must be one of"):
        Video(frames=frames, times=torch.zeros(3), fps=10, source_size=(5, 4), clock="wall")
    v = Video.from_frames(frames, 10).subset([0, 2]).retimed(100)
    assert v.clock == "fps" and v.times.tolist() == [0.0, 0.02]
    assert "clock='fps'" in repr(v)
