"""read_video's clock: presentation-order times for every container (AVI stores decode-order
timestamps with B-frames), seeking in such files, fps= re-timing and clocks that cannot be
trusted; on tiny videos written in tmp_path."""

from __future__ import annotations

import re
from fractions import Fraction
from itertools import pairwise
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


def _raw_pts(path: Path) -> tuple[list[int], list[int]]:
    """(the packets' pts in file order, the decoded frames' own pts in output order)."""
    with av.open(str(path)) as c:
        packets = [int(p.pts) for p in c.demux(video=0) if p.size]
    with av.open(str(path)) as c:
        frames = [int(f.pts) for f in c.decode(video=0)]
    return packets, frames


def _increasing(values: list[int]) -> bool:
    return all(b > a for a, b in pairwise(values))


X264_B = {"bf": "3", "g": "12"}  # B-frames (pyramid), a keyframe every 12 frames
CONTAINERS = {
    "x264.avi": ("avi", "libx264", X264_B),
    "mpeg4.avi": ("avi", "mpeg4", {"bf": "2", "g": "12", "qscale": "2"}),
    "x264.mp4": ("mp4", "libx264", X264_B),
    "x264.mov": ("mov", "libx264", X264_B),
    "x264.mkv": ("matroska", "libx264", X264_B),
}


@pytest.fixture(scope="module", params=sorted(CONTAINERS))
def clip(request, tmp_path_factory) -> Path:
    fmt, codec, options = CONTAINERS[request.param]
    return _write(tmp_path_factory.mktemp("clock") / request.param, fmt, codec, options)


def _spy_plans(monkeypatch) -> list:
    """Record the seek plan of every decode pass."""
    plans = []
    real = video_mod.reading._decode

    def spy(*args, **kwargs):
        plans.append(kwargs["plan"])
        return real(*args, **kwargs)

    monkeypatch.setattr(video_mod.reading, "_decode", spy)
    return plans


# --------------------------------------------------------------------------- presentation order
def test_files_have_b_frames_as_pyav_gives_them(clip):
    """What PyAV gives: the decoder outputs frames in presentation order, but in AVI with
    H.264 the packets carry decode-order ticks (increasing in file order), so the frames'
    own pts go back and forth; MP4 / MOV / MKV store presentation pts (out of file order)."""
    packets, frames = _raw_pts(clip)
    assert len(packets) == len(frames) == COUNT
    assert sorted(packets) == sorted(frames)
    if clip.name == "x264.avi":
        assert _increasing(packets) and not _increasing(frames)  # the reported bug
    else:
        assert not _increasing(packets) and _increasing(frames)  # B-frames, reordered pts


def test_times_are_presentation_times_for_every_container(clip):
    v = read_video(clip)
    assert v.clock == "container" and v.fps == pytest.approx(FPS)
    assert _shown(v) == list(range(COUNT))  # frames in presentation order
    assert bool((v.times.diff() > 0).all())
    torch.testing.assert_close(
        v.times, torch.arange(COUNT, dtype=torch.float64) / FPS, atol=1e-6, rtol=0
    )
    assert torch.equal(v.frame_indices, torch.arange(COUNT))


def test_selections_in_the_middle_seek_and_land_right(clip, monkeypatch):
    full = read_video(clip)
    plans = _spy_plans(monkeypatch)
    v = read_video(clip, frames=(13, 31), stride=2)  # keyframes at 0, 12, 24, ...: it seeks
    assert v.frame_indices.tolist() == list(range(13, 31, 2))
    assert _shown(v) == list(range(13, 31, 2))
    assert torch.equal(v.frames, full.frames[13:31:2]) and torch.equal(v.times, full.times[13:31:2])
    torch.testing.assert_close(v.times, v.frame_indices.double() / FPS, atol=1e-6, rtol=0)
    w = read_video(clip, seconds=(0.6, 1.0))  # t = k / 25: frames 15 to 24
    assert w.frame_indices.tolist() == list(range(15, 25)) and _shown(w) == list(range(15, 25))
    torch.testing.assert_close(w.times, w.frame_indices.double() / FPS, atol=1e-6, rtol=0)
    assert len(plans) == 2 and all(p is not None for p in plans)  # both seeked, neither missed
    assert [p.start_index for p in plans] == [13, 15]


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


# --------------------------------------------------------------------------- broken clocks
def _remux_mkv(path: Path, pts_ms: list[int]) -> Path:
    """Matroska with I / P frames only (no reordering) whose packets carry ``pts_ms``."""
    tb = Fraction(1, 1000)
    with av.open(str(path), "w", format="matroska") as out:
        stream = out.add_stream("libx264", rate=FPS, options={"bf": "0", "g": "8"})
        stream.width, stream.height, stream.pix_fmt = 32, 24, "yuv420p"
        packets = []
        for k in range(len(pts_ms)):
            frame = av.VideoFrame.from_ndarray(_image(k), format="rgb24")
            frame.pts, frame.time_base = k, Fraction(1, FPS)
            packets += stream.encode(frame)
        packets += stream.encode()
        for k, (packet, ms) in enumerate(zip(packets, pts_ms, strict=True)):
            # the muxer wants dts <= pts and never decreasing
            packet.time_base, packet.pts, packet.dts = tb, ms, min(pts_ms[k:])
            out.mux(packet)
    return path


def _steps(*pairs: tuple[int, int]) -> list[int]:
    """pts in ms: 40 ms apart, with (index, pts) overrides."""
    pts = [40 * k for k in range(30)]
    for i, p in pairs:
        pts[i] = p
    return pts


@pytest.mark.parametrize(
    ("name", "pts_ms", "what"),
    [
        # 3 frames share their predecessor's time
        ("repeats.mkv", _steps((4, 120), (9, 320), (20, 760)), "3 of 30 timestamps repeat"),
        # two pairs swapped, in an I/P stream that the decoder does not reorder
        ("backwards.mkv", _steps((6, 280), (7, 240), (15, 640), (16, 600)), "2 of 30 .*backwards"),
        # a 60 s jump part way
        ("gap.mkv", [40 * k + (60000 if k >= 12 else 0) for k in range(30)], "over 100 times"),
    ],
)
def test_untrustworthy_timestamps_are_a_clear_error(tmp_path, name, pts_ms, what):
    path = _remux_mkv(tmp_path / name, pts_ms)
    with av.open(str(path)) as c:  # the file holds the timestamps as written
        assert [int(p.pts * 1000 * p.time_base) for p in c.demux(video=0) if p.size] == pts_ms
    with pytest.raises(VideoError) as info:
        read_video(path)
    msg = str(info.value)
    assert str(path) in msg and "cannot be trusted" in msg and "fps=" in msg
    assert re.search(what, msg), msg
    with pytest.raises(VideoError, match="cannot be trusted"):
        read_video(path, frames=(10, 20))  # a seek does not hide it (nor is it tried)
    v = read_video(path, fps=FPS)  # the fix the message gives
    assert v.clock == "fps" and _shown(v) == list(range(30))
    torch.testing.assert_close(v.times, torch.arange(30, dtype=torch.float64) / FPS)
    w = read_video(path, fps=FPS, frames=(10, 20))
    assert w.frame_indices.tolist() == list(range(10, 20)) and _shown(w) == list(range(10, 20))


def test_clock_problem_names_missing_timestamps():
    problem = video_mod.clock.clock_problem(
        [0, 40, None, 120, None], [0, 1, 2, 3, 4], Fraction(1, 1000)
    )
    assert problem == "2 of 5 frames have no timestamp (the first is frame 2)"
    ok = [0, 33, 50, 120, 121, 300, 333, 500, 700, 701]  # variable frame rate is fine
    assert video_mod.clock.clock_problem(ok, list(range(10)), Fraction(1, 1000)) is None


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
