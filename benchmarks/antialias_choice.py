"""The measurements behind the default ``edge_softness`` (docs/decisions/antialiased-default.md).

Two questions, on the bundled pendulum-cart (288 x 96) along a rollout under a sine force:

1. Which edges look antialiased: the mean absolute error (over colour channels) of each
   candidate against a 4 x 4 supersampled hard render, over the pixels a silhouette crosses
   (those whose 16 sub-samples do not all show the same body; printed as ``edge_mae``) and
   over all pixels (``all_mae``; textures differ inside bodies too, the same for every
   candidate). Candidates: hard edges (0), the antialiasing ramp ("antialias") and
   sigmoid soft edges of several sigmas.
2. Whether the gradient sees silhouettes: d loss / d log(pole mass) and d loss / d log(hinge
   damping) of the pixel loss of the fit in tests/diffcam/test_antialias.py (frames of a
   0.6 s rollout against frames made with other values), by autograd and by central finite
   differences at steps h (float64), and the same for a pose: d loss / d x of the cart's
   position (m) against frames with the cart 2 px to the side, at steps of 1/8 to 1/1000 px.

Prints one JSON line per measurement. Usage: python benchmarks/antialias_choice.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import diffcam  # noqa: E402
import physics  # noqa: E402
from diffcam.scene import SCENES_DIR  # noqa: E402

SCENE = SCENES_DIR / "pendulum_cart.toml"
TRUE = (0.2, 0.05)  # pole mass (kg), hinge damping (N m s / rad): the target frames
START = (0.35, 0.1)  # where the fit starts (x1.75, x2)
STEPS, EVERY = 60, 4


def rollout_frames(scene, softness, states_only=False):
    """The frames (T, 3, H, W) of a 0.6 s rollout under a sine force (25 N, 0.5 s period)."""
    t = torch.arange(STEPS, dtype=scene.dtype) * scene.timestep
    actions = (25.0 * torch.sin(2 * math.pi * t / 0.5)).view(STEPS, 1, 1)
    traj = scene.rollout(STEPS, actions=actions, compile=False)
    shown = traj[torch.arange(0, STEPS + 1, EVERY)]
    if states_only:
        return shown
    return scene.render_states(shown, frames_per_call=32, edge_softness=softness).image[:, 0]


def fit_scene(log_m, log_c, dtype):
    overrides = {"bodies.pole.mass": log_m.exp(), "joints.hinge.damping": log_c.exp()}
    return diffcam.load_scene(SCENE, batch_size=1, dtype=dtype, overrides=overrides)


def look(quick: bool):
    """Question 1: each candidate's error against a 4 x 4 supersampled hard render."""
    dtype = torch.float64
    scene = diffcam.load_scene(SCENE, batch_size=1, dtype=dtype)
    with torch.no_grad():
        shown = rollout_frames(scene, 0.0, states_only=True)
        states = physics.State(*(x[::2].flatten(0, 1) for x in shown.tensors()))
        rot, pos = states.rotation, states.position
        ref = scene.render(states, edge_softness=0.0, supersample=4, static_cache=False)
        fine = diffcam.render_buffers(
            scene.camera.scaled(4), scene.primitives, rot, pos, background=scene.background,
            lighting=scene.lighting, edge_softness=0.0,
        ).object_id  # fmt: skip
        B, H, W = ref.shape[0], ref.shape[2], ref.shape[3]
        sub = fine.view(B, H, 4, W, 4).permute(0, 1, 3, 2, 4).reshape(B, H, W, 16)
        edge = (sub != sub[..., :1]).any(-1)
        sigmas = [0.25, 0.35, 0.5] if quick else [0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.5, 0.7, 1.0]
        for softness in [0.0, "antialias", *sigmas]:
            img = scene.render(states, edge_softness=softness, static_cache=False)
            err = (img - ref).abs().mean(1)
            line = {
                "measure": "look",
                "edge_softness": softness,
                "edge_mae": float(err[edge].mean()),
                "edge_max": float(err[edge].max()),
                "all_mae": float(err.mean()),
                "edge_pixels": int(edge.sum()),
                "frames": B,
            }
            print(json.dumps(line), flush=True)


def gradients(quick: bool):
    """Question 2: autograd against central differences."""
    dtype = torch.float64
    lm0, lc0 = (torch.tensor(math.log(v), dtype=dtype) for v in TRUE)
    steps = [1e-2, 1e-4] if quick else [1e-2, 1e-3, 1e-4, 1e-6]
    cases = [0.0, "antialias", 0.5] if quick else [0.0, "antialias", 0.25, 0.5, 1.0]
    for softness in cases:
        with torch.no_grad():
            target = rollout_frames(fit_scene(lm0, lc0, dtype), softness)

        def loss(p, softness=softness, target=target):
            frames = rollout_frames(fit_scene(p[0], p[1], dtype), softness)
            return ((frames - target) ** 2).mean()

        p = torch.tensor([math.log(v) for v in START], dtype=dtype, requires_grad=True)
        (grad,) = torch.autograd.grad(loss(p), p)
        for i, name in enumerate(("log_mass", "log_damping")):
            line = {"measure": "fit_gradient", "edge_softness": softness, "parameter": name,
                    "autograd": float(grad[i])}  # fmt: skip
            with torch.no_grad():
                for h in steps:
                    e = torch.zeros(2, dtype=dtype)
                    e[i] = h
                    fd = (loss(p.detach() + e) - loss(p.detach() - e)) / (2 * h)
                    line[f"fd_{h:g}"] = float(fd)
            print(json.dumps(line), flush=True)
    pose_gradients(quick)


def pose_gradients(quick: bool):
    """d loss / d (cart x) against frames with the cart 2 px to the side, one frame."""
    dtype = torch.float64
    scene = diffcam.load_scene(SCENE, batch_size=1, dtype=dtype)
    state = scene.initial_state()
    cart = scene.body_names.index("cart")
    metres_per_px = float(state.position[0, cart, 1] - scene.camera.translation[0, 1])
    metres_per_px /= float(scene.camera.fx[0])
    px = [1 / 8, 1 / 1000] if quick else [1 / 4, 1 / 8, 1 / 32, 1 / 1000]
    for softness in [0.0, "antialias", 0.5]:

        def render(x, softness=softness):
            pos = state.position.clone()
            pos[0, cart, 0] = pos[0, cart, 0] + x
            return scene.render(state.replace(position=pos), edge_softness=softness)

        with torch.no_grad():
            target = render(torch.tensor(2 * metres_per_px, dtype=dtype))
        x = torch.tensor(0.0, dtype=dtype, requires_grad=True)
        (g,) = torch.autograd.grad(((render(x) - target) ** 2).mean(), x)
        line = {"measure": "pose_gradient", "edge_softness": softness, "autograd": float(g)}
        with torch.no_grad():
            for step in px:
                h = step * metres_per_px
                up = ((render(torch.tensor(h, dtype=dtype)) - target) ** 2).mean()
                down = ((render(torch.tensor(-h, dtype=dtype)) - target) ** 2).mean()
                line[f"fd_{step:g}px"] = float((up - down) / (2 * h))
        print(json.dumps(line), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer candidates and steps")
    parser.add_argument("--only", choices=["look", "gradients", "pose"], default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.only in (None, "look"):
        look(args.quick)
    if args.only in (None, "gradients"):
        gradients(args.quick)
    if args.only == "pose":
        pose_gradients(args.quick)


if __name__ == "__main__":
    main()
