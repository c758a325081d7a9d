"""Contact scenes with and without the broadphase (`physics.broadphase`): ms per step, eager, no
grad, one thread. Prints one JSON line per workload and variant: the median over ``--repeats``
rounds, each round a fresh process per checkout, run one after another (old, new, old, new...)
so that the load of a shared machine falls on every variant alike.

    python benchmarks/bench_broadphase.py [--repeats 5] [--against OTHER_CHECKOUT]

Variants: this checkout with the broadphase ("on") and without it (``World.broadphase =
False``: every candidate's rows in the solve, "off"); with ``--against``, another checkout of
the repository (say the commit before the broadphase, from ``git archive``) as "other".
Workloads: the incline (a block sliding on a plank, a floor, a wall and a stopper: 28 contact
candidates) at B = 1 and 19, the bounce (a ball, a floor and a wall) at B = 1 and 19, the box
stack (`box_stack`: 6 boxes and a floor, 108 candidates) at B = 1 and 64.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _record import Recorder, add_record_flag

ROOT = Path(__file__).resolve().parents[1]
RECORD = Recorder("broadphase")  # benchmarks/results/broadphase.jsonl with --record
WORKLOADS = [
    ("incline", "tests/data/scenes/incline.toml", 1, 200),
    ("incline", "tests/data/scenes/incline.toml", 19, 200),
    ("bounce", "tests/data/scenes/bounce.toml", 1, 200),
    ("bounce", "tests/data/scenes/bounce.toml", 19, 200),
    ("box_stack", "diffcam/data/scenes/box_stack.toml", 1, 100),
    ("box_stack", "diffcam/data/scenes/box_stack.toml", 64, 30),
]


def _worker(modes: list[str], checkout: Path) -> None:
    """Measure every workload once in this process, with ``checkout``'s physics and diffcam."""
    sys.path.insert(0, str(checkout))
    import torch

    import diffcam
    import physics

    torch.set_num_threads(1)
    for name, path, batch, steps in WORKLOADS:
        scene = diffcam.load_scene(ROOT / path, batch_size=batch)
        for mode in modes:
            if mode != "other":
                scene.world.broadphase = mode == "on"
            with torch.no_grad():
                physics.rollout(scene.world, scene.initial_state(), 10)  # warm-up
                times = []
                for _ in range(3):
                    start = time.perf_counter()
                    physics.rollout(scene.world, scene.initial_state(), steps)
                    times.append((time.perf_counter() - start) / steps)
            print(json.dumps({"scene": name, "B": batch, "mode": mode,
                              "ms": 1e3 * statistics.median(times)}), flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--against", type=Path, default=None)
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--checkout", type=Path, default=ROOT, help=argparse.SUPPRESS)
    add_record_flag(parser)
    args = parser.parse_args()
    RECORD.enable(args.record and args.worker is None, note=args.note)
    if args.worker is not None:
        _worker(args.worker.split(","), args.checkout)
        return
    runs = [(ROOT, "on,off")]
    if args.against is not None:
        runs.insert(0, (args.against.resolve(), "other"))
    results: dict[tuple, list[float]] = {}
    for _ in range(args.repeats):
        for root, modes in runs:
            command = [sys.executable, __file__, "--worker", modes, "--checkout", str(root)]
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            out = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
            for line in out.stdout.splitlines():
                row = json.loads(line)
                results.setdefault((row["scene"], row["B"], row["mode"]), []).append(row["ms"])
    for (scene, batch, mode), values in results.items():
        RECORD.emit({
            "bench": "contact_broadphase", "scene": scene, "B": batch, "variant": mode,
            "ms_per_step": round(statistics.median(values), 3),
            "runs": [round(v, 3) for v in values], "threads": 1, "grad": False, "compiled": False,
        })  # fmt: skip


if __name__ == "__main__":
    main()
