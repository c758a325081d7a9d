"""Soft-edge render speed (``edge_softness = 1`` px) on scenes/pendulum_cart.toml, 288 x 96.

Prints one JSON line per case:
    {"bench", "B", "H", "W", "moving", "forward_ms", "forward_min_ms", "backward_ms",
     "backward_min_ms", "threads"}

Cases: ``soft_pendulum_cart_b{1,16}_cached``: ``Scene.render`` with the Scene's cached static
layer (only the cart and the pole are rendered per frame) at B = 1 and B = 16 frames of a 2-s
rollout; the backward pass back-propagates a fixed random image gradient to the poses.
(bench_render.py has the hard-edge pendulum_cart cases.)

Times are medians and minima (the steadier figure on a shared machine) over ``--repeats`` runs
after ``--warmup`` runs.

Usage: python benchmarks/bench_soft.py [--case NAME] [--repeats N] [--threads T]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch

CASES = [f"soft_pendulum_cart_b{b}_cached" for b in (1, 16)]


def pendulum_cart(batch: int, sigma: float = 1.0):
    """-> (forward, backward given the image, info) for ``batch`` frames of a rollout."""
    import diffcam
    from diffcam.scene import SCENES_DIR

    scene = diffcam.load_scene(SCENES_DIR / "pendulum_cart.toml", batch_size=1)
    steps = 200
    force = 20.0 * torch.sin(2 * math.pi * 0.8 * 0.01 * torch.arange(steps)).view(steps, 1, 1)
    with torch.no_grad():
        traj = scene.rollout(steps, actions=force)
    frames = torch.linspace(0, steps, batch).round().long() if batch > 1 else torch.tensor([100])
    state = traj[frames, 0]  # time as the batch axis
    rot = state.rotation.clone().requires_grad_()
    pos = state.position.clone().requires_grad_()
    posed = state.replace(rotation=rot, position=pos)
    grad = torch.rand(batch, 3, scene.camera.height, scene.camera.width)

    def fwd():
        return scene.render(posed, edge_softness=sigma, static_cache=True)

    def bwd(img):
        img.backward(grad)

    moving = sum(not static for static in scene.world.is_static)
    info = {"B": batch, "H": scene.camera.height, "W": scene.camera.width, "moving": moving}
    return fwd, bwd, info


def run_case(case: str, repeats: int, warmup: int) -> dict:
    batch = int(case.split("_b")[1].split("_")[0])
    fwd, bwd, info = pendulum_cart(batch)
    f_ms, b_ms = [], []
    for i in range(warmup + repeats):
        t0 = time.perf_counter()
        img = fwd()
        t1 = time.perf_counter()
        bwd(img)
        t2 = time.perf_counter()
        if i >= warmup:
            f_ms.append(1e3 * (t1 - t0))
            b_ms.append(1e3 * (t2 - t1))
    return {
        "bench": case,
        **info,
        "forward_ms": round(statistics.median(f_ms), 2),
        "forward_min_ms": round(min(f_ms), 2),
        "backward_ms": round(statistics.median(b_ms), 2),
        "backward_min_ms": round(min(b_ms), 2),
        "threads": torch.get_num_threads(),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=CASES, action="append")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    for case in args.case or CASES:
        print(json.dumps(run_case(case, args.repeats, args.warmup)), flush=True)


if __name__ == "__main__":
    main()
