"""write_video: frame count, size and fps read back with imageio; atomic writes."""

from __future__ import annotations

import imageio.v2 as imageio_v2
import imageio.v3 as iio
import numpy as np
import pytest
import torch

import diffcam
from diffcam import video


def _frames(t=10, h=32, w=48):
    """Smooth colour ramps (video codecs blur noise) with a moving white block."""
    y = torch.linspace(0, 1, h).view(h, 1).expand(h, w)
    x = torch.linspace(0, 1, w).view(1, w).expand(h, w)
    base = torch.stack([x, y, 1 - x * y]).expand(t, 3, h, w).clone()
    for k in range(t):
        c = (4 * k) % (w - 4)
        base[k, :, 4:12, c : c + 4] = 1.0
    return base


def _mp4_info(path):
    reader = imageio_v2.get_reader(str(path), "ffmpeg")
    try:
        meta = reader.get_meta_data()
        frames = [f for f in reader]
    finally:
        reader.close()
    return meta, np.stack(frames)


@pytest.mark.parametrize("fps", [10, 24])
def test_mp4_frames_size_fps(tmp_path, fps):
    frames = _frames(t=7)
    out = diffcam.write_video(tmp_path / "a.mp4", frames, fps=fps)
    meta, got = _mp4_info(out)
    assert got.shape == (7, 32, 48, 3)
    assert meta["fps"] == pytest.approx(fps)
    assert meta["size"] == (48, 32)
    # content survives H.264 roughly
    ref = video.frames_to_uint8(frames).astype(float)
    assert np.abs(got.astype(float) - ref).mean() < 20


def test_mp4_odd_size_is_padded(tmp_path):
    frames = _frames(t=3, h=31, w=45)
    meta, got = _mp4_info(diffcam.write_video(tmp_path / "odd.mp4", frames, fps=5))
    assert got.shape == (3, 32, 46, 3)


def test_gif_frames_size_and_timing(tmp_path):
    frames = _frames(t=6, h=20, w=30)
    frames[3] = frames[2]  # a repeated frame is kept as its own frame
    frames[4] = frames[2]
    out = diffcam.write_video(tmp_path / "a.gif", frames, fps=20)
    got = iio.imread(out, index=None)
    assert got.shape[:3] == (6, 20, 30)
    from PIL import Image

    with Image.open(out) as im:
        durations = []
        for k in range(im.n_frames):
            im.seek(k)
            durations.append(im.info["duration"])
    assert sum(durations) == pytest.approx(6 / 20 * 1000, abs=10)
    # colours are close (palette quantisation)
    ref = video.frames_to_uint8(frames).astype(float)
    assert np.abs(got[..., :3].astype(float) - ref).mean() < 12


def test_accepts_list_and_float64_and_clips(tmp_path):
    frames = [torch.full((3, 8, 8), 2.0, dtype=torch.float64), torch.zeros(3, 8, 8) - 1]
    out = diffcam.write_video(tmp_path / "c.gif", frames, fps=2)
    got = iio.imread(out, index=None)
    assert got.shape[0] == 2 and got[0].min() >= 250 and got[1].max() <= 5


def test_atomic_no_partial_file_on_crash(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("crash while encoding")

    monkeypatch.setattr(video.writing, "_write_mp4", boom)
    with pytest.raises(RuntimeError):
        diffcam.write_video(tmp_path / "x.mp4", _frames(t=2), fps=5)
    assert list(tmp_path.iterdir()) == []


def test_overwrites_existing_and_leaves_no_temp(tmp_path):
    target = tmp_path / "v.gif"
    target.write_text("old")
    diffcam.write_video(target, _frames(t=2, h=8, w=8), fps=5)
    assert [p.name for p in tmp_path.iterdir()] == ["v.gif"]
    assert iio.imread(target, index=None).shape[0] == 2


@pytest.mark.parametrize(
    "path, frames, fps",
    [
        ("x.avi", torch.zeros(2, 3, 4, 4), 5),
        ("x.mp4", torch.zeros(2, 4, 4, 3), 5),
        ("x.mp4", torch.zeros(2, 3, 4, 4), 0),
        ("x.gif", torch.zeros(0, 3, 4, 4), 5),
    ],
)
def test_bad_arguments(tmp_path, path, frames, fps):
    with pytest.raises(ValueError):
        diffcam.write_video(tmp_path / path, frames, fps=fps)
    assert list(tmp_path.iterdir()) == []
