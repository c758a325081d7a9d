"""Soft-edge render speed (``edge_softness = 1`` px) on scenes/pendulum_cart.toml, 288 x 96.

Prints one JSON line per case:
    {"bench", "B", "H", "W", "prims", "moving", ..., "forward_ms", "forward_min_ms", "backward_ms",
     "backward_min_ms", "hard_forward_ms", "hard_backward_ms", "soft_over_hard_forward_backward",
     "threads"}

Cases: ``soft_pendulum_cart_b{1,16,64}_cached``: ``Scene.render`` with the Scene's cached
static layer (only the cart and the pole are rendered per frame) at B = 1, 16 and 64 frames of
a 2-s rollout, beside the same render with hard edges (``hard_*``, and the ratio of the
forward+backward medians); the backward pass back-propagates a fixed random image gradient to the poses (the
scene, frames and gradient of bench_render.py's hard-edge pendulum_cart cases).

Times are medians and minima (the steadier figure on a shared machine) over ``--repeats`` runs
after ``--warmup`` runs.

Usage: python benchmarks/bench_soft.py [--case NAME] [--repeats N] [--threads T]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

CASES = [f"soft_pendulum_cart_b{b}_cached" for b in (1, 16, 64)]


def _times(fwd, bwd, repeats: int, warmup: int):
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
    return f_ms, b_ms


def run_case(case: str, repeats: int, warmup: int) -> dict:
    from bench_render import pendulum_cart  # the same scene, frames and image gradient

    batch = int(case.split("_b")[1].split("_")[0])
    fwd, bwd, _, info = pendulum_cart(batch, cached=True, edge_softness=1.0)
    f_ms, b_ms = _times(fwd, bwd, repeats, warmup)
    hard_fwd, hard_bwd, _, _ = pendulum_cart(batch, cached=True, edge_softness=0.0)
    hf_ms, hb_ms = _times(hard_fwd, hard_bwd, repeats, warmup)
    soft_total = statistics.median([a + b for a, b in zip(f_ms, b_ms, strict=True)])
    hard_total = statistics.median([a + b for a, b in zip(hf_ms, hb_ms, strict=True)])
    return {
        "bench": case,
        "B": batch,
        **info,
        "forward_ms": round(statistics.median(f_ms), 2),
        "forward_min_ms": round(min(f_ms), 2),
        "backward_ms": round(statistics.median(b_ms), 2),
        "backward_min_ms": round(min(b_ms), 2),
        "hard_forward_ms": round(statistics.median(hf_ms), 2),
        "hard_backward_ms": round(statistics.median(hb_ms), 2),
        "soft_over_hard_forward_backward": round(soft_total / hard_total, 2),
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
