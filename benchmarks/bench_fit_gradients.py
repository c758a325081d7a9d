"""A gradient fit of a mass and a damping (`diffcam.fit_scene` with Adam): seconds to fit with
the physics stepped eagerly and through the ahead-of-time step whose backward is the VJP to the
world's tensors (`physics.ahead_of_time`), in the same process, one thread.

    python benchmarks/bench_fit_gradients.py [--iterations 40] [--record]

The workload: the bundled pendulum_cart scene (288 x 96), the cart pushed by a known force
(a 0.7 Hz sine of 8 N) for 2 s (200 steps); its frames at 25 fps rendered from a "true" world
(cart 1.4 kg, rail damping 0.8 N s/m); the fit starts from the scene's values (1.0 kg, 0.5) and
runs Adam on both keys. Each variant fits from the same start with the same schedule, so the
fitted values agree to round-off between variants; the JSON lines give the seconds, the
fitted values and the routes the physics took (`physics.dispatch`: the gradient iterations',
then the final rollout's without gradients).

Variants, in this order: "eager" (``compile_physics=False``), "ahead_of_time_first"
(``compile_physics=True`` in this process for the first time: it builds the step's libraries,
or loads them where an earlier process built them, see "built"), "ahead_of_time" (the same
again: the libraries in memory).
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _record import Recorder, add_record_flag  # noqa: E402

import diffcam  # noqa: E402
import physics  # noqa: E402
import physics.dispatch  # noqa: E402
from diffcam.fit import Runtime, Schedule  # noqa: E402
from physics import ahead_of_time  # noqa: E402

RECORD = Recorder("fit_gradients")  # benchmarks/results/fit_gradients.jsonl with --record
TRUTH = {"bodies.cart.mass": 1.4, "joints.rail.damping": 0.8}
START = {"bodies.cart.mass": 1.0, "joints.rail.damping": 0.5}
SECONDS, FRAME_EVERY = 2.0, 4


def workload():
    """The scene, the known actions (steps, 1) and the true frames (T, 3, H, W)."""
    scene = diffcam.load_scene("pendulum_cart")
    steps = round(SECONDS / scene.timestep)
    t = torch.arange(steps, dtype=torch.float32) * scene.timestep
    actions = (8.0 * torch.sin(2 * math.pi * 0.7 * t))[:, None]
    true = scene.with_overrides(TRUTH)
    with torch.no_grad():
        trajectory = true.rollout(steps, actions=actions[:, None, :], compile=False)
        frames = torch.cat([true.render(trajectory[i]) for i in range(0, steps + 1, FRAME_EVERY)])
    return scene, actions, frames


def fit(scene, actions, frames, iterations: int, compile_physics: bool) -> dict:
    keys = {name: {"init": value, "positive": True} for name, value in START.items()}
    routes: list[str] = []
    record = physics.dispatch.record

    def recording(route):  # each route the fit's physics took, once, in order
        if str(route) not in routes:
            routes.append(str(route))
        return record(route)

    physics.dispatch.record = recording
    start = time.perf_counter()
    try:
        result = diffcam.fit_scene(
            scene, frames, keys, actions=actions, frame_every=FRAME_EVERY,
            schedule=Schedule(iterations=iterations, optimizer="adam", lr=0.05, edge_softness=1.0),
            runtime=Runtime(progress=False, uncertainty=False, compile_physics=compile_physics),
        )  # fmt: skip
    finally:
        physics.dispatch.record = record
    seconds = time.perf_counter() - start
    return {
        "seconds": round(seconds, 2),
        "iterations": result.iterations,
        "loss_first": result.history[0],
        "loss_last": result.history[-1],
        **{f"fitted:{k}": round(float(v), 5) for k, v in result.values.items()},
        "routes": routes,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=40)
    add_record_flag(parser)
    args = parser.parse_args()
    RECORD.enable(args.record, note=args.note)
    torch.set_num_threads(1)
    scene, actions, frames = workload()
    variants = [("eager", False), ("ahead_of_time_first", True), ("ahead_of_time", True)]
    for name, compile_physics in variants:
        before = len(ahead_of_time.BUILT), len(ahead_of_time.LOADED)
        row = fit(scene, actions, frames, args.iterations, compile_physics)
        built = len(ahead_of_time.BUILT) - before[0], len(ahead_of_time.LOADED) - before[1]
        RECORD.emit({"bench": "fit_gradients", "variant": name, "libraries_built": built[0],
                     "libraries_loaded": built[1], "truth": TRUTH, "start": START, **row})  # fmt: skip


if __name__ == "__main__":
    main()
