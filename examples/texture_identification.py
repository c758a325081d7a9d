"""Recover the pendulum-cart pole's texture from frames of a known motion.

The rail's force motor is driven by a known push sequence, so the pole swings; the frames
(288 x 96, one every 2 physics steps, 41 frames) are rendered with the bundled ``stripes``
texture (64 x 64 texels: yellow and black bands with a faint grain). `diffcam.fit_scene` then fits the key
``textures.stripes`` from flat grey 0.5 by Adam through the renderer: 12,288 numbers, each kept
in [0, 1] by ``bounds = (0, 1)`` (a logistic reparameterisation; the key's own ``lr`` is in those
logit units).

Why the pole and not the cart's wood: the cart's front face stays parallel to the image plane
and moves only sideways, so every pixel row always samples the same texture row with the same
pair of bilinear weights, and 128 x 128 wood texels fall on about 18 x 9 pixels: most of that
texture is not determined by the frames at all. The pole is only about 3 pixels wide, but it
swings, so its pixels land on ever different (u, v) and most of the texels on its visible side
are pinned down by several pixels with different bilinear weights.

Seen texels. The renderer is linear in the texture (hard edges, no shading for this purpose), so
the derivative of the sum of the unlit frames with respect to the texture is, per texel, the
sum of the bilinear weights that all pixel samples of all frames put on it: its *coverage*, in
pixel samples (one pixel whose ray hits a texel centre contributes 1). The back of the pole is
never seen (coverage 0) and keeps its grey: Adam does not move a parameter whose gradient is
always zero. A texel counts as **seen** when its coverage is at least 1, as much weight as one
pixel looking straight at it; texels with a smaller, non-zero coverage ("touched" only as the
far corners of bilinear footprints near the silhouette) are reported separately.

    python examples/texture_identification.py [--quick] [--out out/texture_identification.png]

Writes a PNG (true | fitted | seen mask, texel row 0 at the top, as in the PNG file) and prints
one JSON line: iterations, seconds, psnr_seen_db, seen_fraction, and the same for touched
texels.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import torch
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import diffcam  # noqa: E402
from diffcam.fit import Schedule  # noqa: E402
from diffcam.scene import SCENES_DIR  # noqa: E402

SCENE = SCENES_DIR / "pendulum_cart.toml"
TEXTURE = "stripes"
GREY = 0.5


def push_sequence(steps: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """(steps, 1) known rail force (N): alternating 30 N pushes, 0.1, 0.2, 0.2 ... s long.

    Over 80 steps (0.8 s) the pole swings by up to 23 degrees either way while the cart stays
    within 0.27 m of the middle of its +-1 m rail.
    """
    t = torch.arange(steps, dtype=dtype)
    phase = torch.div(t + 10, 20, rounding_mode="floor")  # 0 for 10 steps, then every 20 steps
    return (30.0 * (1.0 - 2.0 * (phase % 2)))[:, None]


def coverage(
    scene_path, name: str, actions=None, steps=None, frame_every=1, size=None, dtype=torch.float32
) -> torch.Tensor:
    """(Ht, Wt) summed bilinear weight that the unlit frames of a rollout put on each texel.

    The unlit image is linear in the texture, so d(sum of channel 0 of all frames) / d(texel)
    is exactly the sum over all pixels of the texel's bilinear weight in that pixel's sample.

    Args:
        scene_path: the scene file; ``name`` one of its ``[textures]``.
        actions: (steps, n_actuators) known actions or None (zeros); ``steps`` defaults to
            their number; a frame every ``frame_every`` steps, as in `diffcam.fit_scene`.
        size: (Ht, Wt) of the texture to measure (default: the file's).
    """
    if size is None:
        size = diffcam.load_scene(scene_path).textures[name].shape[1:]
    ones = torch.ones(3, *size, dtype=dtype, requires_grad=True)
    scene = diffcam.load_scene(scene_path, dtype=dtype, overrides={f"textures.{name}": ones})
    steps = actions.shape[0] if steps is None else steps
    batched = None if actions is None else actions[:, None, :].to(dtype)
    trajectory = scene.rollout(steps, actions=batched)
    total = sum(
        # hard edges (not the default): the seen texels of the hard-edged observed frames
        scene.render(trajectory[t], lighting=None, edge_softness=0.0)[:, 0].sum()
        for t in range(0, steps + 1, frame_every)
    )
    (grad,) = torch.autograd.grad(total, ones)
    return grad[0]


def psnr(estimate: torch.Tensor, truth: torch.Tensor, mask: torch.Tensor) -> float:
    """PSNR (dB, peak 1) of (3, Ht, Wt) textures over the texels where ``mask`` (Ht, Wt)."""
    mse = float(((estimate - truth)[:, mask] ** 2).mean())
    return 10.0 * math.log10(1.0 / max(mse, 1e-20))


def save_panel(path: Path, true: torch.Tensor, fitted: torch.Tensor, seen: torch.Tensor):
    """PNG of true | fitted | seen mask, (3, Ht, Wt) each, enlarged 4x (nearest)."""
    mask = seen.to(true.dtype).expand_as(true)
    gap = torch.ones(3, true.shape[1], 2, dtype=true.dtype)
    panel = torch.cat([true, gap, fitted, gap, mask], 2).clamp(0, 1)
    image = (panel.permute(1, 2, 0).numpy() * 255 + 0.5).astype(np.uint8)
    image = image.repeat(4, axis=0).repeat(4, axis=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(image, "RGB").save(path)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer frames and iterations")
    parser.add_argument("--frames", type=int, help="observed frames (default 41; quick 21)")
    parser.add_argument("--frame-every", type=int, default=2, help="physics steps per frame")
    parser.add_argument("--iterations", type=int, help="Adam iterations (default 100; quick 40)")
    parser.add_argument("--lr", type=float, default=0.3, help="initial lr in logit units")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: busy box)")
    parser.add_argument("--out", type=Path, default=ROOT / "out" / "texture_identification.png")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    n_frames = args.frames or (21 if args.quick else 41)
    iterations = args.iterations or (40 if args.quick else 100)
    every = args.frame_every

    actions = push_sequence((n_frames - 1) * every)
    truth = diffcam.load_scene(SCENE).textures[TEXTURE]
    with torch.no_grad():
        observed = diffcam.render_rollout(  # hard-edged, as measured (docs/tutorials/fit-video.md)
            SCENE, None, actions[:, None, :], actions.shape[0], frame_every=every,
            edge_softness=0.0,
        )  # fmt: skip
    cover = coverage(SCENE, TEXTURE, actions, frame_every=every)
    seen, touched = cover >= 1.0, cover > 0

    result = diffcam.fit_scene(
        SCENE,
        observed,
        {
            f"textures.{TEXTURE}": {
                "init": torch.full_like(truth, GREY),
                "bounds": (0.0, 1.0),
                "lr": args.lr,  # logit units: 0.3 takes a texel from 0.5 to 0.1 in ~8 steps
            }
        },
        actions,
        frame_every=every,
        schedule=Schedule(
            iterations=iterations,
            tolerance=0.0,  # run the whole budget: the loss keeps creeping down on faint texels
            edge_softness=0.0,  # the observed frames are hard-edged renders
        ),
    )
    fitted = result.values[f"textures.{TEXTURE}"]
    save_panel(args.out, truth, fitted, seen)
    report = {
        "example": "texture_identification",
        "texture": TEXTURE,
        "texels": int(cover.numel()),
        "frames": n_frames,
        "frame_every": every,
        "iterations": result.iterations,
        "seconds": round(result.seconds, 1),
        "psnr_seen_db": round(psnr(fitted, truth, seen), 2),
        "seen_fraction": round(float(seen.float().mean()), 4),
        "psnr_touched_db": round(psnr(fitted, truth, touched), 2),
        "touched_fraction": round(float(touched.float().mean()), 4),
        "psnr_grey_seen_db": round(psnr(torch.full_like(truth, GREY), truth, seen), 2),
        "unseen_kept_grey": bool((fitted[:, ~touched] == GREY).all()),
        "loss_first": result.history[0],
        "loss_last": result.history[-1],
        "png": str(args.out),
    }
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
