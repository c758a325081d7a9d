"""Write rendered frames to MP4 (H.264 through imageio-ffmpeg) or GIF (Pillow), atomically.

The file is written to a temporary name in the same folder and renamed when complete, so a
crash (or Ctrl-C) never leaves a half-written video behind under the requested name.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import torch

_SUFFIXES = (".mp4", ".gif")


def frames_to_uint8(frames) -> np.ndarray:
    """(T, 3, H, W) floats in [0, 1] (tensor, array or a list of (3, H, W)) -> (T, H, W, 3) uint8.

    Values outside [0, 1] are clipped; NaN becomes 0. A (T, 3, H, W) uint8 tensor or array is
    taken as 0-255 values as they are.
    """
    if isinstance(frames, (list, tuple)):
        frames = [
            f.detach().cpu() if isinstance(f, torch.Tensor) else np.asarray(f) for f in frames
        ]
        frames = np.stack([np.asarray(f, dtype=np.float32) for f in frames]) if frames else None
    if frames is None:
        raise ValueError("write_video: no frames")
    if isinstance(frames, torch.Tensor):
        if frames.dtype == torch.uint8:
            frames = frames.cpu().numpy()
        else:
            frames = frames.detach().to("cpu", torch.float32).numpy()
    if getattr(frames, "dtype", None) == np.uint8 and frames.ndim == 4 and frames.shape[1] == 3:
        return np.ascontiguousarray(
            frames.transpose(0, 2, 3, 1)
        )  # already 0-255: no copy as floats
    arr = np.asarray(frames, dtype=np.float32)
    if arr.ndim != 4 or arr.shape[1] != 3:
        raise ValueError(
            f"write_video: frames must have shape (T, 3, H, W), got {tuple(arr.shape)}"
        )
    if arr.shape[0] < 1 or arr.shape[2] < 1 or arr.shape[3] < 1:
        raise ValueError(f"write_video: empty frames of shape {tuple(arr.shape)}")
    arr = np.nan_to_num(arr, nan=0.0, posinf=1.0, neginf=0.0)
    arr = np.clip(arr, 0.0, 1.0)
    out = (arr * 255.0 + 0.5).astype(np.uint8)
    return np.ascontiguousarray(out.transpose(0, 2, 3, 1))


def write_video(path: str | os.PathLike, frames, fps: float = 30, *, quality: int = 8) -> Path:
    """Write frames to ``path`` (.mp4 or .gif), atomically.

    Args:
        path: output file; its suffix picks the format: ``.mp4`` (H.264, yuv420p, through
            imageio-ffmpeg) or ``.gif`` (Pillow, looping).
        frames: (T, 3, H, W) tensor or array with values in [0, 1] (clipped), or a list of
            (3, H, W) frames.
        fps: frames per second (> 0).
        quality: MP4 quality 0-10 (imageio-ffmpeg's scale; 10 is best).

    MP4 with yuv420p needs even sizes: an odd width or height is padded by one pixel
    (repeating the last column / row), so the video is then one pixel larger than the frames.
    GIF stores delays in 1/100 s; frame delays are rounded so the total duration stays right.
    Consecutive identical frames are kept as separate frames in both formats.

    Returns:
        the path written.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in _SUFFIXES:
        raise ValueError(f"write_video: unsupported format {path.suffix!r} (use .mp4 or .gif)")
    if not (isinstance(fps, (int, float)) and np.isfinite(fps) and fps > 0):
        raise ValueError(f"write_video: fps must be a positive number, got {fps!r}")
    arr = frames_to_uint8(frames)
    folder = path.parent if str(path.parent) else Path(".")
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{path.stem}.", suffix=f".part{suffix}")
    os.close(fd)
    try:
        if suffix == ".mp4":
            _write_mp4(tmp, arr, fps, quality)
        else:
            _write_gif(tmp, arr, fps)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600 files; use the usual mode
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return path


def _write_mp4(tmp: str, arr: np.ndarray, fps: float, quality: int) -> None:
    import imageio_ffmpeg

    t, h, w, _ = arr.shape
    ph, pw = h % 2, w % 2
    if ph or pw:
        arr = np.pad(arr, ((0, 0), (0, ph), (0, pw), (0, 0)), mode="edge")
    writer = imageio_ffmpeg.write_frames(
        tmp,
        (w + pw, h + ph),
        fps=fps,
        codec="libx264",
        pix_fmt_in="rgb24",
        pix_fmt_out="yuv420p",
        quality=quality,
        macro_block_size=1,
        ffmpeg_log_level="error",
        output_params=["-f", "mp4"],
    )
    writer.send(None)  # start the generator
    try:
        for frame in arr:
            writer.send(np.ascontiguousarray(frame))
    finally:
        writer.close()


def _gif_delays(t: int, fps: float) -> list[int]:
    """Per-frame delays in ms, multiples of 10 ms, summing to the right total duration."""
    cs = [round((k + 1) * 100.0 / fps) - round(k * 100.0 / fps) for k in range(t)]
    return [max(1, c) * 10 for c in cs]


def _write_gif(tmp: str, arr: np.ndarray, fps: float) -> None:
    from PIL import Image

    t, h, w, _ = arr.shape
    dup = [k > 0 and np.array_equal(arr[k], arr[k - 1]) for k in range(t)]
    # One global palette from a mosaic of sample frames. If some frames repeat their
    # predecessor, use 128 colours twice (indices c and c + 128 look the same) and flip one
    # pixel to the twin index, so Pillow does not merge the repeated frames into one.
    ncol = 128 if any(dup) else 256
    picks = np.unique(np.linspace(0, t - 1, min(t, 16)).round().astype(int))
    mosaic = Image.fromarray(arr[picks].reshape(-1, w, 3))
    pal_img = mosaic.quantize(colors=ncol, method=Image.Quantize.MEDIANCUT)
    palette = (pal_img.getpalette() or [])[: 3 * ncol]
    palette += [0] * (3 * ncol - len(palette))
    holder = Image.new("P", (1, 1))
    holder.putpalette(palette)
    full = palette + palette if ncol == 128 else palette
    images = []
    toggled = False
    for k in range(t):
        q = Image.fromarray(arr[k]).quantize(palette=holder, dither=Image.Dither.NONE)
        idx = np.asarray(q, dtype=np.uint8).copy()
        toggled = (not toggled) if dup[k] else False
        if toggled:
            idx[0, 0] = (idx[0, 0] % 128) + 128
        im = Image.frombytes("P", (w, h), idx.tobytes())
        im.putpalette(full)
        images.append(im)
    images[0].save(
        tmp,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=_gif_delays(t, fps),
        loop=0,
        disposal=1,
        optimize=False,
    )


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
