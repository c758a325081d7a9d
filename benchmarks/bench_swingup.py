"""Where a swing-up training iteration's time goes: render / policy (CNN or MLP) / physics, forward
and backward. Prints one JSON line per configuration. Not part of the test suite.

    python benchmarks/bench_swingup.py [--batch 16] [--seconds 0.5] [--observations pixels state]
        [--control-every 2] [--bptt-segment 25] [--edge-softness 0|SIGMA|antialias] [--threads 1]
        [--downsample 1] [--render-downscale 1] [--compile-physics] [--channels-first]
        [--also-before] [--cpu-time] [--plain-repeats 3] [--record [--note TEXT]]

``--also-before`` measures, in the same process and first, the path before issue 38 with the
same settings otherwise: frames rendered at the camera's full resolution and pooled (render
downscale 1, downsample x render downscale), the CNN in the default (NCHW) layout, and the
physics stepped one step at a time (not one rollout call per held action).
``--channels-first`` runs the CNN in NCHW instead of channels-last. ``--cpu-time`` times the
parts by the process's CPU time instead of wall time (one thread): on a shared machine the
wall time follows the other jobs (2-3 x the CPU time at a load of 5 on 2 cores); the CPU time
much less, though it too grows with them (shared caches). Every configuration also times ``--plain-repeats``
whole iterations without the timers (``iteration_wall``, ``iteration_cpu``: the median).

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
import time
import types
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _record import Recorder, add_record_flag  # noqa: E402

import diffcam  # noqa: E402
from tasks import swingup  # noqa: E402

RECORD = Recorder("swingup")


class StepsOnly:
    """The scene without ``rollout``: `diffcam.policy_rollout` steps it one step at a time."""

    def __init__(self, scene) -> None:
        self._scene = scene

    def __getattr__(self, name: str):
        if name == "rollout":
            raise AttributeError(name)
        return getattr(self._scene, name)


def measure(observation: str, args, before: bool) -> dict:
    render_downscale = 1 if before else args.render_downscale
    downsample = args.downsample * (args.render_downscale if before else 1)
    channels_first = before or args.channels_first
    scene = diffcam.load_scene("pendulum_cart", batch_size=args.batch)
    if before:
        scene = StepsOnly(scene)
    config = swingup.SwingUpConfig(
        observation=observation,
        seconds=args.seconds,
        control_every=args.control_every,
        bptt_segment=args.bptt_segment or None,
        edge_softness=args.edge_softness,
        downsample=downsample,
        render_downscale=render_downscale,
        compile_physics=args.compile_physics,
    )
    torch.manual_seed(0)
    policy = swingup.make_policy(config, swingup.motor_limit(scene))
    if channels_first:
        policy = policy.to(memory_format=torch.contiguous_format)
    # A non-zero output layer, so that the backward pass reaches every layer as in training.
    torch.nn.init.normal_(policy.output.weight, std=0.1)
    episodes = swingup.SwingUpEpisodes(scene, policy, config)
    starts = swingup.random_starts(args.batch, torch.Generator().manual_seed(0))
    # Warm-up on a short episode (first-call costs: allocator, caches).
    short = dataclasses.replace(config, seconds=2 * args.control_every * scene.timestep)
    swingup.time_iteration(swingup.SwingUpEpisodes(scene, policy, short), starts, repeats=1)
    # Two more warm-up iterations at full length: the first long episode pays its first
    # allocations (fresh pages), which a training run pays once.
    swingup.time_iteration(episodes, starts, repeats=1)
    ms = swingup.time_iteration(episodes, starts, repeats=3)
    # A whole iteration without the timers (forward, backward; the optimizer step is
    # negligible), wall and CPU time of this process: on a shared machine the CPU time is the
    # figure that depends less on the other jobs.
    wall, cpu = [], []
    for _ in range(args.plain_repeats):
        w, c = time.perf_counter(), time.process_time()
        loss, _ = episodes(starts)
        loss.backward()
        wall.append(1e3 * (time.perf_counter() - w))
        cpu.append(1e3 * (time.process_time() - c))
    policy.zero_grad(set_to_none=True)
    plain = {
        "iteration_wall": round(sorted(wall)[len(wall) // 2], 1) if wall else None,
        "iteration_cpu": round(sorted(cpu)[len(cpu) // 2], 1) if cpu else None,
    }
    control_steps = ms["control_steps"]
    per_step = {
        f"{k}_per_control_step": round(v / control_steps, 2)
        for k, v in ms.items()
        if k.startswith(("forward_", "backward_"))
    }
    return {
        "bench": "swingup_iteration",
        "path": "before issue 38" if before else "this commit",
        "observation": observation,
        "B": args.batch,
        "seconds": args.seconds,
        "control_every": args.control_every,
        "bptt_segment": args.bptt_segment,
        "edge_softness": args.edge_softness,
        "downsample": downsample,
        "render_downscale": render_downscale,
        "compile_physics": args.compile_physics,
        "cnn_layout": "NCHW" if channels_first else "NHWC",
        "physics": "per step" if before else "one rollout per held action (compiled)",
        "resolution": scene.config.camera["resolution"],
        "rendered": [
            scene.config.camera["resolution"][0] // render_downscale,
            scene.config.camera["resolution"][1] // render_downscale,
        ],
        "unit": "ms",
        **ms,
        **per_step,
        **plain,
        "clock": "CPU time of this process" if args.cpu_time else "wall",
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
    parser.add_argument(
        "--edge-softness",
        type=lambda v: v if v == "antialias" else float(v),
        default=0.0,
        help="sigma in pixels, or antialias",
    )
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--downsample", type=int, default=1, help="frames pooled dxd (1, 2, 4)")
    parser.add_argument(
        "--render-downscale", type=int, default=1, help="frames rendered at 1/r resolution"
    )
    parser.add_argument(
        "--compile-physics", action="store_true", help="physics through torch.compile"
    )
    parser.add_argument(
        "--channels-first", action="store_true", help="the CNN in NCHW, not channels-last"
    )
    parser.add_argument(
        "--also-before",
        action="store_true",
        help="first measure the path before issue 38 (full resolution pooled, NCHW, per step)",
    )
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time the parts by this process's CPU time, not wall time (one thread: less "
        "dependent on the machine's other jobs)",
    )
    parser.add_argument(
        "--plain-repeats", type=int, default=3, help="untimed whole iterations (median)"
    )
    add_record_flag(parser)
    args = parser.parse_args()
    if args.cpu_time:
        from diffcam import profiling
        from tasks.swingup import timing

        clock = types.SimpleNamespace(perf_counter=time.process_time)
        profiling.time = timing.time = clock
    RECORD.enable(args.record, note=args.note)
    torch.set_num_threads(args.threads)
    for observation in args.observations:
        for before in (True, False) if args.also_before else (False,):
            full = measure(observation, args, before)
            print(json.dumps(full), flush=True)
            # the results file keeps the split, one row per pass (the docs' table)
            for direction in ("forward", "backward"):
                parts = ("render", "policy", "physics", "recompute", "other", "total")
                RECORD.emit(
                    {
                        "path": full["path"],
                        "pass": f"{observation}, {direction}",
                        "B": full["B"],
                        "edges": full["edge_softness"],
                        "rendered": full["rendered"] if observation == "pixels" else None,
                        **{
                            ("CNN" if k == "policy" else k): full.get(f"{direction}_{k}")
                            for k in parts
                            if f"{direction}_{k}" in full
                        },
                        "iteration (untimed)": full[
                            "iteration_cpu" if args.cpu_time else "iteration_wall"
                        ],
                        "clock": "CPU" if args.cpu_time else "wall",
                        "load_1min": full["load_average_1min"],
                    }
                )


if __name__ == "__main__":
    main()
