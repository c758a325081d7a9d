"""read_video: frames, timestamps (constant and variable rate), selection, resizing, rotation,
errors and memory, on small videos written in tmp_path."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap
import warnings
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import av
import imageio_ffmpeg
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import diffcam
from diffcam import Video, VideoError, read_video
from diffcam import video as video_mod

# H.264 (yuv420p) round trips smooth frames to within a few levels; this bounds the mean
# absolute error in [0, 1] units.
CODEC_TOL = 0.03

# read_video's YUV averaging (conversion="yuv") against the reference (conversion="rgb"):
# they differ by the reference's rounding of every pixel to 8 bits (swscale's fixed point is
# off the exact colour matrix by up to ~1.5 levels); bounds on the largest and the mean
# absolute difference, in [0, 1] units.
YUV_MAX_TOL = 2.5 / 255
YUV_MEAN_TOL = 0.5 / 255


def _assert_yuv_close(fast: Video, ref: Video) -> None:
    """``fast`` (averaged in YUV) is ``ref`` (the reference conversion) to rounding: the
    same shape, dtype, times and frame indices, and values within the YUV tolerances."""
    assert fast.conversion == "yuv" and ref.conversion == "rgb"
    assert fast.frames.shape == ref.frames.shape and fast.frames.dtype == ref.frames.dtype
    assert torch.equal(fast.times, ref.times)
    assert torch.equal(fast.frame_indices, ref.frame_indices)
    assert fast.source_size == ref.source_size and fast.crop == ref.crop
    d = (fast.frames.double() - ref.frames.double()).abs()
    assert d.max() <= YUV_MAX_TOL, f"max {d.max() * 255:.2f} levels"
    assert d.mean() <= YUV_MEAN_TOL, f"mean {d.mean() * 255:.3f} levels"
    assert 0.0 <= fast.frames.min() and fast.frames.max() <= 1.0


def _smooth(t: int, h: int, w: int) -> torch.Tensor:
    """(t, 3, h, w) smooth colour ramps that change from frame to frame (codecs blur noise)."""
    y = torch.linspace(0, 1, h).view(1, h, 1)
    x = torch.linspace(0, 1, w).view(1, 1, w)
    k = torch.arange(t, dtype=torch.float32).view(t, 1, 1) / max(t - 1, 1)
    r = (x + 0.5 * k) % 1.0
    g = y.expand(t, h, w)
    b = (0.2 + 0.6 * k).expand(t, h, w)
    return torch.stack([r.expand(t, h, w), g, b], dim=1).clamp(0, 1)


def _encode(
    path: Path,
    images: list[np.ndarray],
    *,
    fps: int = 24,
    pts_ms: list[int] | None = None,
    codec: str = "libx264",
    pix_fmt: str = "yuv420p",
    in_format: str = "rgb24",
    gop: int | None = None,
    container_options: dict[str, str] | None = None,
) -> Path:
    """Encode (h, w, c) uint8 images with PyAV; ``pts_ms`` gives explicit timestamps in ms."""
    options = {} if gop is None else {"g": str(gop), "keyint_min": str(gop)}
    tb = Fraction(1, 1000) if pts_ms is not None else Fraction(1, fps)
    with av.open(str(path), "w", options=container_options or {}) as out:
        stream = out.add_stream(codec, rate=fps, options=options)
        stream.height, stream.width = images[0].shape[:2]
        stream.pix_fmt = pix_fmt
        stream.time_base = tb
        stream.codec_context.time_base = tb
        for k, img in enumerate(images):
            frame = av.VideoFrame.from_ndarray(img, format=in_format)
            frame.pts = k if pts_ms is None else pts_ms[k]
            frame.time_base = tb
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def _uint8(frames: torch.Tensor) -> list[np.ndarray]:
    return list(video_mod.frames_to_uint8(frames))


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> tuple[Path, torch.Tensor]:
    """48 frames of 64 x 48 at 24 fps, with a keyframe every 8 frames (so a selection
    that starts later seeks), written through PyAV's H.264 encoder (with B-frames)."""
    frames = _smooth(48, 48, 64)
    path = tmp_path_factory.mktemp("clip") / "clip.mp4"
    return _encode(path, _uint8(frames), fps=24, gop=8), frames


# --------------------------------------------------------------------------- round trip
def test_round_trip_write_video(tmp_path):
    frames = _smooth(12, 32, 48)
    path = diffcam.write_video(tmp_path / "a.mp4", frames, fps=24)
    v = read_video(path)
    assert isinstance(v, Video)
    assert v.frames.shape == (12, 3, 32, 48) and v.frames.dtype == torch.float32
    assert len(v) == 12 and v.size == (48, 32) and v.source_size == (48, 32)
    assert v.crop is None and v.path == str(path)
    assert (v.frames - frames).abs().mean() < CODEC_TOL
    assert 0.0 <= v.frames.min() and v.frames.max() <= 1.0
    assert v.fps == pytest.approx(24)
    assert torch.equal(v.frame_indices, torch.arange(12))
    assert v.times.dtype == torch.float64
    torch.testing.assert_close(
        v.times, torch.arange(12, dtype=torch.float64) / 24, atol=1e-9, rtol=0
    )
    assert v.duration == pytest.approx(11 / 24)


def test_constant_fps_times_and_values(clip):
    path, frames = clip
    v = read_video(path)
    assert v.frames.shape == (48, 3, 48, 64)
    assert (v.frames - frames).abs().mean() < CODEC_TOL
    torch.testing.assert_close(
        v.times, torch.arange(48, dtype=torch.float64) / 24, atol=1e-9, rtol=0
    )


def test_gif_round_trip(tmp_path):
    frames = _smooth(5, 20, 30)
    v = read_video(diffcam.write_video(tmp_path / "a.gif", frames, fps=20))
    assert v.frames.shape == (5, 3, 20, 30)
    torch.testing.assert_close(
        v.times, torch.arange(5, dtype=torch.float64) / 20, atol=1e-9, rtol=0
    )
    assert (v.frames - frames).abs().mean() < 0.05  # a 256-colour palette


def test_long_last_frame_is_not_taken_for_truncation(tmp_path):
    from PIL import Image

    images = [Image.fromarray(np.full((20, 30, 3), 60 * k, np.uint8)) for k in range(3)]
    path = tmp_path / "long.gif"
    images[0].save(path, save_all=True, append_images=images[1:], duration=[100, 100, 3000])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        v = read_video(path)
    torch.testing.assert_close(v.times, torch.tensor([0.0, 0.1, 0.2], dtype=torch.float64))


def test_variable_frame_rate_times(tmp_path):
    pts_ms = [0, 33, 50, 120, 121, 300, 333, 500, 700, 701]
    frames = _smooth(len(pts_ms), 32, 48)
    path = _encode(tmp_path / "vfr.mp4", _uint8(frames), pts_ms=pts_ms)
    v = read_video(path)
    expected = torch.tensor(pts_ms, dtype=torch.float64) / 1000
    torch.testing.assert_close(v.times, expected, atol=1e-9, rtol=0)
    assert (v.frames - frames).abs().mean() < CODEC_TOL
    # selecting by time uses the real timestamps, not index / fps
    part = read_video(path, seconds=(0.1, 0.5))
    assert part.frame_indices.tolist() == [3, 4, 5, 6]
    torch.testing.assert_close(part.times, expected[3:7], atol=1e-9, rtol=0)


# --------------------------------------------------------------------------- selection
def _spy_plans(monkeypatch) -> list:
    """Record the seek plan of every decode pass."""
    plans = []
    real = video_mod.reading._decode

    def spy(*args, **kwargs):
        plans.append(kwargs["plan"])
        return real(*args, **kwargs)

    monkeypatch.setattr(video_mod.reading, "_decode", spy)
    return plans


def test_frames_and_stride_seek_matches_full_read(clip, monkeypatch):
    path, _ = clip
    full = read_video(path)
    plans = _spy_plans(monkeypatch)
    v = read_video(path, frames=(10, 40), stride=3)
    assert v.frame_indices.tolist() == list(range(10, 40, 3))
    assert len(plans) == 1 and plans[0] is not None  # it seeked, and landed right
    assert plans[0].start_index == 10
    ref = full.subset(slice(10, 40, 3))
    assert torch.equal(v.frames, ref.frames)
    assert torch.equal(v.times, ref.times)
    assert v.times[0].item() == pytest.approx(10 / 24)  # times stay relative to frame 0
    # a slice is the same selection; its step is the stride
    w = read_video(path, frames=slice(10, 40, 3))
    assert torch.equal(w.frames, v.frames) and torch.equal(w.frame_indices, v.frame_indices)


@pytest.mark.parametrize(
    ("frames", "indices"),
    [
        ((0, 5), [0, 1, 2, 3, 4]),
        ((45, None), [45, 46, 47]),
        ((44, 1000), [44, 45, 46, 47]),  # a stop past the end reads to the end
        (slice(None, 3), [0, 1, 2]),
        ((47, 48), [47]),
    ],
)
def test_frames_ranges(clip, frames, indices):
    path, _ = clip
    v = read_video(path, frames=frames)
    assert v.frame_indices.tolist() == indices
    torch.testing.assert_close(v.times, torch.tensor(indices, dtype=torch.float64) / 24)


def test_seconds_selection(clip, monkeypatch):
    path, _ = clip
    full = read_video(path)
    plans = _spy_plans(monkeypatch)
    v = read_video(path, seconds=(0.5, 1.0))  # frames 12..23 (t = k / 24)
    assert v.frame_indices.tolist() == list(range(12, 24))
    assert torch.equal(v.frames, full.frames[12:24])
    tail = read_video(path, seconds=(1.75, None), stride=2)
    assert tail.frame_indices.tolist() == [42, 44, 46]
    assert torch.equal(tail.frames, full.frames[42::2])
    assert len(plans) == 2 and all(p is not None for p in plans)  # both seeked
    head = read_video(path, seconds=(0, 0.1))
    assert head.frame_indices.tolist() == [0, 1, 2]


def test_seek_that_misses_falls_back_to_decoding_from_the_start(clip, monkeypatch):
    path, _ = clip
    ref = read_video(path, frames=(20, 30))
    plans = _spy_plans(monkeypatch)
    real_scan = video_mod.reading.scan_for_seek

    def wrong_plan(p, sel):
        plan = real_scan(p, sel)
        plan.target_pts += 1  # a timestamp no frame has: the landing check fails
        return plan

    monkeypatch.setattr(video_mod.reading, "scan_for_seek", wrong_plan)
    v = read_video(path, frames=(20, 30))
    assert len(plans) == 2 and plans[0] is not None and plans[1] is None
    assert torch.equal(v.frames, ref.frames) and torch.equal(v.frame_indices, ref.frame_indices)


# --------------------------------------------------------------------------- size and crop
def test_size_and_crop(clip):
    path, _ = clip
    full = read_video(path, frames=(0, 4))
    half = read_video(path, frames=(0, 4), size=(32, 24), conversion="rgb")
    assert half.frames.shape == (4, 3, 24, 32) and half.source_size == (64, 48)
    assert full.conversion == "rgb" and half.conversion == "rgb"
    torch.testing.assert_close(half.frames, F.avg_pool2d(full.frames, 2))  # area average
    fast = read_video(path, frames=(0, 4), size=(32, 24))  # averaged in YUV: the same to rounding
    assert fast.conversion == "yuv"
    _assert_yuv_close(fast, half)
    assert read_video(path, frames=(0, 1), size=40).size == (40, 30)  # aspect kept, rounded
    assert read_video(path, frames=(0, 1), size=(None, 12)).size == (16, 12)
    assert read_video(path, frames=(0, 1), size=(70, 50)).size == (70, 50)  # enlarging

    crop = (8, 4, 40, 30)
    c = read_video(path, frames=(0, 4), crop=crop)
    assert c.crop == crop and c.size == (40, 30) and c.source_size == (64, 48)
    assert torch.equal(c.frames, full.frames[:, :, 4:34, 8:48])
    cs = read_video(path, frames=(0, 4), crop=crop, size=20, conversion="rgb")
    assert cs.size == (20, 15)  # crop first, then resize
    torch.testing.assert_close(cs.frames, F.avg_pool2d(c.frames, 2))
    _assert_yuv_close(read_video(path, frames=(0, 4), crop=crop, size=20), cs)


def test_resize_frames_averages():
    board = (torch.arange(8).view(8, 1) + torch.arange(8).view(1, 8)) % 2  # 1-pixel checkers
    x = board.to(torch.float32).expand(1, 3, 8, 8)
    torch.testing.assert_close(video_mod.resize_frames(x, (4, 4)), torch.full((1, 3, 4, 4), 0.5))
    odd = video_mod.resize_frames(x, (3, 3))  # not an integer factor: antialiased bilinear
    assert (odd - 0.5).abs().max() < 0.15  # picking pixels would give 0 or 1
    assert video_mod.resize_frames(x, (8, 8)) is x


def test_checkerboard_video_downscales_to_grey(tmp_path):
    cells = (torch.arange(16).view(16, 1) + torch.arange(32).view(1, 32)) % 2
    board = cells.repeat_interleave(4, 0).repeat_interleave(4, 1).float()  # 4x4-pixel squares
    path = diffcam.write_video(tmp_path / "board.mp4", board.expand(3, 3, 64, 128), fps=10)
    v = read_video(path, size=(16, 8))  # 8x8 blocks: two squares each way
    assert (v.frames - 0.5).abs().max() < 0.05


# --------------------------------------------------------------------------- YUV averaging
def _yuv_clip(
    path: Path, pix_fmt: str, *, w: int = 64, h: int = 48, t: int = 4, codec: str = "libx264"
) -> Path:
    """``t`` frames written losslessly (x264 at qp 0, or FFV1) from Y, U and V planes chosen
    directly: the left half noise (Y over 0-255, U and V over their legal 16-240: far
    outside the RGB gamut, many pixels clip), the right half smooth mid-range colours (none
    clip).

    (Not U or V over 240: swscale's 4:4:4 conversion, the reference, wraps around for Y over
    237 with U over 245, where the YUV averaging clips.)"""
    rng = np.random.default_rng(7)
    with av.open(str(path), "w") as out:
        options = {"qp": "0", "preset": "ultrafast"} if codec == "libx264" else {}
        stream = out.add_stream(codec, rate=10, options=options)
        stream.width, stream.height, stream.pix_fmt = w, h, pix_fmt
        for k in range(t):
            frame = av.VideoFrame(w, h, pix_fmt)
            for i, plane in enumerate(frame.planes):
                rows = np.frombuffer(plane, np.uint8).reshape(plane.height, plane.line_size)
                ph, pw = plane.height, plane.width
                values = (
                    rng.integers(0, 256, (ph, pw)) if i == 0 else rng.integers(16, 241, (ph, pw))
                )
                ramp = np.linspace(70 + 10 * i, 180 - 10 * i, pw)[None, :] + 5 * k
                values[:, pw // 2 :] = np.broadcast_to(ramp, (ph, pw))[:, pw // 2 :]
                rows[:ph, :pw] = values
            frame.pts = k
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


@pytest.mark.parametrize("pix_fmt", ["yuv420p", "yuvj420p", "yuv422p", "yuv444p"])
def test_yuv_averaging_matches_the_rgb_conversion(tmp_path, pix_fmt, monkeypatch):
    """conversion="auto" averages in YUV; it gives the reference's area averages of the RGB
    pixels to rounding, clipped pixels included, for each 8-bit planar YUV layout, shrink
    factor, crop and dtype."""
    path = _yuv_clip(tmp_path / f"{pix_fmt}.mp4", pix_fmt)
    with av.open(str(path)) as container:
        assert next(container.decode(video=0)).format.name == pix_fmt
    for kwargs in (
        {"size": (32, 24)},
        {"size": (16, 12)},
        {"size": (8, None), "frames": (1, 3)},
        {"crop": (8, 4, 48, 32), "size": 12},
        {"crop": (2, 2, 32, 40), "size": (16, None), "dtype": torch.float64},
        {"size": (32, 24), "dtype": torch.float16, "stride": 2},
    ):
        fast, ref = read_video(path, **kwargs), read_video(path, conversion="rgb", **kwargs)
        _assert_yuv_close(fast, ref)

    # the noise clips: averaging its blocks' YUV and converting (no pixel-by-pixel fix) is
    # far from the reference, so the test above does check the fix
    monkeypatch.setattr(video_mod.yuv.YuvPlan, "_fix_clipped", lambda *args: None)
    bare = read_video(path, size=(16, 12))
    ref = read_video(path, size=(16, 12), conversion="rgb")
    assert bare.conversion == "yuv"
    assert (bare.frames - ref.frames).abs().max() > 4 * YUV_MAX_TOL


@pytest.mark.parametrize("degrees", [90, 180, -90])
def test_yuv_averaging_of_rotated_video(tmp_path, degrees):
    """The blocks are averaged in the stored frame and the small result turned upright: the
    same as turning the full frame first, crop (in upright pixels) included."""
    plain = _yuv_clip(tmp_path / "plain.mp4", "yuv420p", w=64, h=32, t=2)
    rotated = tmp_path / "rotated.mp4"
    subprocess.run(
        [imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-loglevel", "error", "-display_rotation",
         str(degrees), "-i", str(plain), "-c", "copy", str(rotated)],
        check=True,
    )  # fmt: skip
    for kwargs in ({"size": 8}, {"crop": (4, 6, 24, 20), "size": (12, None)}):
        fast = read_video(rotated, **kwargs)
        ref = read_video(rotated, conversion="rgb", **kwargs)
        _assert_yuv_close(fast, ref)
    assert read_video(rotated, size=8).source_size == ((32, 64) if degrees % 180 else (64, 32))


def test_conversion_rule(tmp_path, clip):
    """conversion="auto" averages in YUV only where the rule in read_video's docstring allows
    it, and Video.conversion says which way the frames went."""
    path, _ = clip  # 64 x 48 yuv420p

    def way(p, **kwargs) -> str:
        return read_video(p, frames=(0, 2), **kwargs).conversion

    assert way(path, size=(32, 24)) == "yuv"
    assert way(path, size=(32, 24), conversion="rgb") == "rgb"  # asked for
    assert way(path) == "rgb"  # no resize
    assert way(path, crop=(0, 0, 32, 24)) == "rgb"  # cropped, not resized
    assert way(path, size=(128, 96)) == "rgb"  # enlarging
    assert way(path, size=(40, 30)) == "rgb"  # not a whole factor
    assert way(path, size=(64, 24)) == "rgb"  # a factor of 1 across splits 4:2:0 chroma
    assert way(path, crop=(1, 0, 32, 24), size=(16, 12)) == "rgb"  # odd crop offset
    assert way(path, crop=(2, 0, 48, 24), size=(16, 8)) == "rgb"  # odd factor (3) for 4:2:0
    # swscale converts 4:2:0 of an odd height with the chroma interpolated: measured, refused
    odd = _yuv_clip(tmp_path / "odd.mkv", "yuv420p", w=64, h=47, t=2, codec="ffv1")
    assert way(odd, crop=(0, 0, 64, 44), size=(32, 22)) == "rgb"
    odd_width = _yuv_clip(tmp_path / "oddw.mkv", "yuv420p", w=63, h=48, t=2, codec="ffv1")
    assert way(odd_width, crop=(0, 0, 62, 48), size=(31, 24)) == "yuv"
    kwargs = {"crop": (0, 0, 62, 48), "size": (31, 24)}
    _assert_yuv_close(
        read_video(odd_width, **kwargs), read_video(odd_width, conversion="rgb", **kwargs)
    )
    full444 = _yuv_clip(tmp_path / "c444.mp4", "yuv444p", w=48, h=48, t=2)
    assert way(full444, size=(16, 16)) == "yuv"  # 4:4:4: any whole factor
    assert way(full444, crop=(1, 1, 45, 45), size=(15, 15)) == "yuv"
    grey = _encode(
        tmp_path / "grey.mov", [np.full((16, 24), 90, np.uint8)] * 2, codec="png",
        pix_fmt="gray", in_format="gray",
    )  # fmt: skip
    assert way(grey, size=(12, 8)) == "rgb"  # not YUV
    assert Video.from_frames(torch.zeros(1, 3, 2, 2), fps=1).conversion is None
    v = read_video(path, frames=(0, 4), size=(32, 24))
    assert v.subset([0, 2]).conversion == "yuv" and v.to(dtype=torch.float64).conversion == "yuv"
    message = _error(path, conversion="RGB")
    assert "conversion='RGB'" in message and "'auto'" in message and "'rgb'" in message


def test_yuv_plan_refuses_other_frames(clip):
    """A frame unlike the first (another pixel format, size or turn) goes the reference way:
    the plan leaves its slot alone and says so."""
    path, _ = clip
    with av.open(str(path)) as container:
        frame = next(container.decode(video=0))
    geom = video_mod.frames.output_geometry(str(path), (64, 48), None, (32, 24))
    plan = video_mod.yuv.yuv_plan(frame, 0, None, geom, torch.float32)
    assert plan is not None
    slot = torch.full((3, 24, 32), -1.0)
    assert not plan.store(frame.reformat(format="yuv444p"), 0, slot)
    assert not plan.store(frame.reformat(width=32, height=24), 0, slot)
    assert not plan.store(frame, 2, slot)
    assert (slot == -1).all()
    assert plan.store(frame, 0, slot) and 0 <= slot.min() and slot.max() <= 1


def test_colour_matrix_is_measured():
    """The YUV to RGB map is fitted to what the reference conversion does: for a stream that
    says nothing of its colours, swscale's default, BT.601 limited range; full range for
    yuvj420p."""
    m = video_mod.yuv._conversion("yuv420p", 2, 0, 64, 48)  # unspecified matrix and range
    assert m is not None
    assert np.allclose(m[:, 0], 255 / 219, atol=0.01)  # Y: 16-235 to 0-255
    assert m[0, 2] == pytest.approx(1.596, abs=0.01) and m[2, 1] == pytest.approx(2.018, abs=0.01)
    full = video_mod.yuv._conversion("yuvj420p", 2, 2, 64, 48)
    assert full is not None and np.allclose(full[:, 0], 1.0, atol=0.01)


# --------------------------------------------------------------------------- dtype, device, Video
def test_float64_device_and_video_helpers(clip):
    path, _ = clip
    v32 = read_video(path, frames=(0, 6), size=(32, 24))
    threads = torch.get_num_threads()
    v64 = read_video(path, frames=(0, 6), size=(32, 24), dtype=torch.float64, device="cpu")
    assert torch.get_num_threads() == threads  # restored
    assert v64.frames.dtype == torch.float64 and v64.frames.device.type == "cpu"
    torch.testing.assert_close(v64.frames, v32.frames.double(), atol=1e-6, rtol=0)
    assert read_video(path, frames=(0, 2), dtype=torch.float16).frames.dtype == torch.float16

    h = v64.to(dtype=torch.float32)
    assert h.frames.dtype == torch.float32 and h.times.dtype == torch.float64
    assert h.path == v64.path and h.source_size == v64.source_size
    sub = v64.subset([1, 3])
    assert sub.frame_indices.tolist() == [1, 3] and sub.frames.shape[0] == 2
    assert torch.equal(sub.frames[1], v64.frames[3])
    assert v64.subset(-1).frame_indices.tolist() == [5]
    assert v64.subset(slice(None, None, -2)).frame_indices.tolist() == [5, 3, 1]
    assert "6 frames 32x24" in repr(v64)

    m = Video.from_frames(torch.zeros(4, 3, 5, 6), fps=10)
    assert m.size == (6, 5) and m.duration == pytest.approx(0.3)
    assert m.frame_indices.tolist() == [0, 1, 2, 3] and m.path is None
    with pytest.raises(ValueError, match="times"):
        Video(frames=torch.zeros(2, 3, 4, 4), times=torch.zeros(3), fps=1, source_size=(4, 4))


def test_progress_bar(clip, capsys):
    path, _ = clip
    v = read_video(path, frames=(0, 3), progress=True)
    assert len(v) == 3
    assert "clip.mp4" in capsys.readouterr().err


# --------------------------------------------------------------------------- rotation
@pytest.mark.parametrize("degrees", [90, -90, 180])
def test_rotation_metadata_is_applied(tmp_path, degrees):
    """ffmpeg's -display_rotation writes the display matrix phones write; frames come out
    as ffmpeg itself shows them (its autorotate)."""
    ffmpeg = imageio_ffmpeg.get_ffmpeg_exe()
    frames = _smooth(3, 32, 48)
    frames[:, :, :8, :8] = 1.0  # a white corner marks the orientation
    plain = diffcam.write_video(tmp_path / "plain.mp4", frames, fps=10)
    rotated = tmp_path / "rotated.mp4"
    subprocess.run(
        [
            ffmpeg,
            "-y",
            "-loglevel",
            "error",
            "-display_rotation",
            str(degrees),
            "-i",
            str(plain),
            "-c",
            "copy",
            str(rotated),
        ],
        check=True,
    )
    a, b = read_video(plain), read_video(rotated)
    quarter = degrees // 90 % 4
    assert torch.equal(b.frames, torch.rot90(a.frames, quarter, dims=(2, 3)))
    expected_size = (32, 48) if quarter % 2 else (48, 32)
    assert b.source_size == expected_size and b.size == expected_size

    # the same picture as ffmpeg's own (auto-rotating) decoder
    raw = subprocess.run(
        [
            ffmpeg,
            "-loglevel",
            "error",
            "-i",
            str(rotated),
            "-frames:v",
            "1",
            "-f",
            "rawvideo",
            "-pix_fmt",
            "rgb24",
            "-",
        ],
        check=True,
        capture_output=True,
    ).stdout
    w, h = expected_size
    ref = torch.from_numpy(np.frombuffer(raw, np.uint8).reshape(h, w, 3).copy())
    ref = ref.permute(2, 0, 1).float() / 255
    assert (b.frames[0] - ref).abs().mean() < 0.01

    # crop is in upright pixels
    c = read_video(rotated, crop=(0, 0, 8, 8))
    assert torch.equal(c.frames, b.frames[:, :, :8, :8])

    # the fallbacks for a PyAV without VideoFrame.rotation: the display matrix side data,
    # then the legacy (clockwise) "rotate" stream tag
    with av.open(str(rotated)) as container:
        frame = next(container.decode(video=0))
        matrices = [
            SimpleNamespace(type=sd.type, data=bytes(sd))
            for sd in frame.side_data
            if "DISPLAYMATRIX" in str(sd.type)
        ]
    assert len(matrices) == 1
    old_frame = SimpleNamespace(side_data=[_Bytes(matrices[0])])
    no_tag = SimpleNamespace(metadata={})
    got = video_mod.frames._rotation_degrees(old_frame, no_tag)
    assert round(got / 90) % 4 == quarter
    tagged = SimpleNamespace(metadata={"rotate": str(-degrees % 360)})
    got = video_mod.frames._rotation_degrees(SimpleNamespace(side_data=[]), tagged)
    assert round(got / 90) % 4 == quarter


class _Bytes:
    """Side data as old PyAV gives it: a ``type`` and the buffer protocol."""

    def __init__(self, sd: SimpleNamespace):
        self.type, self._data = sd.type, sd.data

    def __bytes__(self) -> bytes:
        return self._data


# --------------------------------------------------------------------------- grey and RGBA
@pytest.mark.parametrize(("pix_fmt", "channels"), [("gray", 1), ("rgba", 4)])
def test_grey_and_rgba_sources_become_rgb(tmp_path, pix_fmt, channels):
    values = [np.full((16, 24, channels), 0, np.uint8) for _ in range(3)]
    for k, img in enumerate(values):
        img[..., 0] = 40 * k + 10
        if channels == 4:
            img[..., 1:] = (90, 200, 7)  # alpha 7: dropped
    path = _encode(
        tmp_path / f"{pix_fmt}.mov",
        [v.squeeze(-1) if channels == 1 else v for v in values],
        codec="png",
        pix_fmt=pix_fmt,
        in_format=pix_fmt,
    )
    v = read_video(path)
    assert v.frames.shape == (3, 3, 16, 24)
    got = (v.frames[:, :, 0, 0] * 255).round()
    for k in range(3):
        want = [40 * k + 10] * 3 if channels == 1 else [40 * k + 10, 90, 200]
        assert got[k].tolist() == want


# --------------------------------------------------------------------------- errors
def _error(path, **kwargs) -> str:
    with pytest.raises(VideoError) as info:
        read_video(path, **kwargs)
    return str(info.value)


def test_missing_file_directory_junk_and_no_video_stream(tmp_path):
    missing = tmp_path / "nope.mp4"
    msg = _error(missing)
    assert str(missing) in msg and "no such file" in msg
    assert "directory" in _error(tmp_path)

    junk = tmp_path / "junk.mp4"
    junk.write_bytes(np.random.default_rng(0).integers(0, 256, 4000, dtype=np.uint8).tobytes())
    msg = _error(junk)
    assert str(junk) in msg and "cannot be read as a video" in msg

    audio = tmp_path / "sound.wav"
    with av.open(str(audio), "w") as out:
        stream = out.add_stream("pcm_s16le", rate=8000)
        frame = av.AudioFrame.from_ndarray(
            np.zeros((1, 800), np.int16), format="s16", layout="mono"
        )
        frame.sample_rate, frame.pts = 8000, 0
        for packet in [*stream.encode(frame), *stream.encode()]:
            out.mux(packet)
    msg = _error(audio)
    assert str(audio) in msg and "no video stream" in msg and "audio" in msg


def test_truncated_files(tmp_path):
    frames = _smooth(40, 48, 64)
    # noise makes packets big enough to cut into
    frames += 0.2 * torch.rand(frames.shape, generator=torch.Generator().manual_seed(0))
    images = _uint8(frames.clamp(0, 1))

    # MP4 with its index at the end (as write_video writes it): unreadable when cut
    plain = diffcam.write_video(tmp_path / "plain.mp4", frames.clamp(0, 1), fps=24)
    cut = tmp_path / "cut_plain.mp4"
    cut.write_bytes(plain.read_bytes()[: plain.stat().st_size // 2])
    msg = _error(cut)
    assert str(cut) in msg and "truncated" in msg and "moov" in msg

    # MP4 with its index first, and Matroska: the frames before the cut are readable
    fast = _encode(tmp_path / "fast.mp4", images, container_options={"movflags": "faststart"})
    mkv = _encode(tmp_path / "full.mkv", images)
    for source in (fast, mkv):
        cut = tmp_path / f"cut_{source.name}"
        cut.write_bytes(source.read_bytes()[: int(source.stat().st_size * 0.6)])
        msg = _error(cut)
        assert str(cut) in msg and "truncated" in msg and "allow_truncated=True" in msg
        with pytest.warns(UserWarning, match="truncated"):
            v = read_video(cut, allow_truncated=True)
        assert 5 < len(v) < 40
        assert torch.equal(v.frame_indices, torch.arange(len(v)))
        assert (v.frames - frames.clamp(0, 1)[: len(v)]).abs().mean() < 0.06
        # a selection that ends before the cut reads without complaint
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert len(read_video(cut, frames=(0, 3))) == 3


def test_selection_past_the_end(clip):
    path, _ = clip
    msg = _error(path, frames=(100, 120))
    assert str(path) in msg and "frames=(100, 120)" in msg and "48 frames" in msg
    msg = _error(path, seconds=(5.0, 6.0))
    assert str(path) in msg and "seconds=(5.0, 6.0)" in msg and "1.95833 s" in msg
    msg = _error(path, seconds=(0.01, 0.02))  # between two frames
    assert "seconds=(0.01, 0.02)" in msg and "no frame" in msg


@pytest.mark.parametrize(
    ("kwargs", "argument", "hint"),
    [
        ({"crop": (60, 0, 10, 10)}, "crop=(60, 0, 10, 10)", "64x48"),
        ({"crop": (0, 0, 10)}, "crop=(0, 0, 10)", "(x, y, width, height)"),
        ({"crop": (-1, 0, 10, 10)}, "crop=(-1, 0, 10, 10)", "x, y >= 0"),
        ({"size": 0}, "size=0", ">= 1"),
        ({"size": (32.5, 20)}, "size=(32.5, 20)", "(width, height)"),
        ({"size": (None, None)}, "size=(None, None)", "(width, height)"),
        ({"stride": 0}, "stride=0", ">= 1"),
        ({"stride": 1.5}, "stride=1.5", ">= 1"),
        ({"frames": (5, 2)}, "frames=(5, 2)", "stop must be greater"),
        ({"frames": (-5, None)}, "frames=(-5, None)", "negative"),
        ({"frames": [1, 2, 3]}, "frames=[1, 2, 3]", "(start, stop)"),
        ({"frames": slice(0, 9, 2), "stride": 3}, "frames=slice(0, 9, 2)", "give one"),
        ({"seconds": (2.0, 1.0)}, "seconds=(2.0, 1.0)", "t0 < t1"),
        ({"frames": (0, 2), "seconds": (0, 1)}, "frames/seconds", "at most one"),
        ({"dtype": torch.uint8}, "dtype=torch.uint8", "floating"),
        ({"device": "nodevice"}, "device='nodevice'", "torch device"),
    ],
)
def test_bad_arguments(clip, kwargs, argument, hint):
    path, _ = clip
    msg = _error(path, **kwargs)
    assert str(path) in msg and argument in msg and hint in msg


def test_output_that_does_not_fit(clip, monkeypatch):
    path, _ = clip

    def no_memory(*args, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr(torch, "empty", no_memory)
    msg = _error(path)
    assert str(path) in msg and "48 frames of 64x48" in msg and "size=" in msg


def test_video_error_pickles():
    err = VideoError("bad", path="a.mp4", argument="crop=(1, 2)")
    back = pickle.loads(pickle.dumps(err))
    assert str(back) == str(err) == "read_video: a.mp4: crop=(1, 2): bad"
    assert isinstance(back, ValueError)


# --------------------------------------------------------------------------- memory
@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from /proc")
def test_peak_memory_stays_near_the_output_size(tmp_path):
    """5 s of 1280 x 720 at 60 fps read at 160 x 90: the peak RSS rises far less than the
    3.3 GB the full-resolution float32 clip would take.

    The peak is the child's VmHWM: its ru_maxrss would not do, as Linux carries the parent's
    (pytest's) high-water mark into a child across fork and exec."""
    path = tmp_path / "hd.mp4"
    h, w, t = 720, 1280, 300
    base = _uint8(_smooth(1, h, w))[0]
    # four different frames, converted once, cycled: encoding stays fast
    images = [
        av.VideoFrame.from_ndarray(np.roll(base, 64 * k, axis=1), format="rgb24").reformat(
            format="yuv420p"
        )
        for k in range(4)
    ]
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=60, options={"preset": "ultrafast"})
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        for k in range(t):
            frame = images[k % 4]
            frame.pts = k
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    script = textwrap.dedent(
        f"""
        import diffcam

        def peak():
            for line in open("/proc/self/status"):
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024

        before = peak()
        v = diffcam.read_video({str(path)!r}, size=(160, 90))
        print(len(v), v.frames.numel() * 4, peak() - before)
        """
    )
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    n, output, rise = (int(v) for v in res.stdout.split())
    full_float = t * 3 * h * w * 4  # 3.3 GB
    assert n == t and output == t * 3 * 90 * 160 * 4  # 52 MB
    print(
        f"peak RSS rise {rise / 2**20:.0f} MiB (output {output / 2**20:.0f} MiB, "
        f"full-resolution float32 {full_float / 2**20:.0f} MiB)"
    )
    assert rise < 0.1 * full_float
