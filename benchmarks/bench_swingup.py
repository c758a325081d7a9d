"""Where a swing-up training iteration's time goes: render / policy (CNN or MLP) / physics, forward
and backward. Prints one JSON line per configuration. Not part of the test suite.

    python benchmarks/bench_swingup.py [--batch 16] [--seconds 0.5] [--observations pixels state]
        [--control-every 2] [--bptt-segment 25] [--edge-softness 0] [--threads 1]
        [--downsample 1] [--compile-physics]

The forward split is measured; the backward total is measured and split by timing the backward
of one render / policy call / physics step built separately (see diffcam.profiling). An episode
of S seconds costs about S / seconds times the figures measured here (every part is per step).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import diffcam  # noqa: E402
from diffcam.tasks import swingup  # noqa: E402


def measure(observation: str, args) -> dict:
    scene = diffcam.load_scene("pendulum_cart", batch_size=args.batch)
    config = swingup.SwingUpConfig(
        observation=observation,
        seconds=args.seconds,
        control_every=args.control_every,
        bptt_segment=args.bptt_segment or None,
        edge_softness=args.edge_softness,
        downsample=args.downsample,
        compile_physics=args.compile_physics,
    )
    torch.manual_seed(0)
    policy = swingup.make_policy(config, swingup.motor_limit(scene))
    # A non-zero output layer, so that the backward pass reaches every layer as in training.
    torch.nn.init.normal_(policy.output.weight, std=0.1)
    episodes = swingup.SwingUpEpisodes(scene, policy, config)
    starts = swingup.random_starts(args.batch, torch.Generator().manual_seed(0))
    # Warm-up on a short episode (first-call costs: allocator, caches).
    short = dataclasses.replace(config, seconds=2 * args.control_every * scene.timestep)
    swingup.time_iteration(swingup.SwingUpEpisodes(scene, policy, short), starts, repeats=1)
    ms = swingup.time_iteration(episodes, starts, repeats=3)
    control_steps = ms["control_steps"]
    per_step = {
        f"{k}_per_control_step": round(v / control_steps, 2)
        for k, v in ms.items()
        if k.startswith(("forward_", "backward_"))
    }
    return {
        "bench": "swingup_iteration",
        "observation": observation,
        "B": args.batch,
        "seconds": args.seconds,
        "control_every": args.control_every,
        "bptt_segment": args.bptt_segment,
        "edge_softness": args.edge_softness,
        "downsample": args.downsample,
        "compile_physics": args.compile_physics,
        "resolution": scene.config.camera["resolution"],
        "unit": "ms",
        **ms,
        **per_step,
        "threads": torch.get_num_threads(),
        "load_average_1min": round(os.getloadavg()[0], 2),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "method": "forward measured per part; backward total measured, split estimated from "
        "separately built graphs of one render / policy call / physics step",
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=0.5, help="simulated seconds")
    parser.add_argument("--observations", nargs="+", default=["pixels", "state"])
    parser.add_argument("--control-every", type=int, default=2)
    parser.add_argument("--bptt-segment", type=int, default=25, help="0: no checkpointing")
    parser.add_argument("--edge-softness", type=float, default=0.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--downsample", type=int, default=1, help="frames pooled dxd (1, 2, 4)")
    parser.add_argument(
        "--compile-physics", action="store_true", help="physics through torch.compile"
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for observation in args.observations:
        print(json.dumps(measure(observation, args)), flush=True)


if __name__ == "__main__":
    main()
