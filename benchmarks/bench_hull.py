"""A convex hull against a box: ms per step, eager, float32, no grad, one thread, before and
after hulls collide exactly (`physics.contact_hull`). Prints one JSON line per workload and
variant: the median over ``--repeats`` rounds, each round a fresh process per checkout, run one
after another so that the load of a shared machine falls on every variant alike.

    python benchmarks/bench_hull.py [--repeats 5] [--against OTHER_CHECKOUT] [--record]

Variants: this checkout ("exact": the hull meets the box by faces and edges) and, with
``--against``, another checkout of the repository (the commit before exact hull contacts, from
``git worktree add`` or ``git archive``: the hull meets the box as the box that bounds its
points) as "bounding_box". Workloads: a wedge (6 points) and a rock (200 points on an
ellipsoid) thrown tumbling onto a static box on a floor, 100 steps (1 s: falling, landing,
sliding, resting), at B = 1 and B = 256.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _record import Recorder, add_record_flag

ROOT = Path(__file__).resolve().parents[1]
RECORD = Recorder("hull")  # benchmarks/results/hull.jsonl with --record
WORKLOADS = [("wedge", 1), ("wedge", 256), ("rock", 1), ("rock", 256)]
STEPS = 100


def _points(name: str) -> list[list[float]]:
    """The hull's points in units of its size."""
    if name == "wedge":
        return [[x, y, z] for x in (-0.5, 0.5) for y, z in ((-0.5, -1 / 3), (0.5, -1 / 3),
                                                             (0.0, 2 / 3))]  # fmt: skip
    points = []
    golden = math.pi * (3 - math.sqrt(5))
    for k in range(200):  # a Fibonacci sphere, squashed: an ellipsoid
        z = 1 - 2 * (k + 0.5) / 200
        ring = math.sqrt(1 - z * z)
        points.append([0.5 * ring * math.cos(golden * k), 0.4 * ring * math.sin(golden * k),
                       0.3 * z])  # fmt: skip
    return points


def _world(name: str, batch: int):
    import physics

    bodies = [
        physics.Body("floor", "plane", [5, 5], static=True),
        physics.Body("table", "box", [1.0, 1.0, 0.2], static=True, position=[0, 0, 0.1],
                     friction=0.5),
        physics.Body("hull", "hull", [0.2, 0.2, 0.2], mass=1.0, points=_points(name),
                     position=[0, 0, 0.5], quat=[0.95, 0.2, 0.1, 0.05],
                     velocity=[0.5, 0.0, 0.0], angular_velocity=[1.0, 2.0, 0.5], friction=0.5),
    ]  # fmt: skip
    return physics.build_world(physics.WorldSpec(bodies=bodies), batch_size=batch)


def _worker(checkout: Path) -> None:
    """Measure every workload once in this process, with ``checkout``'s physics."""
    sys.path.insert(0, str(checkout))
    import torch

    import physics

    torch.set_num_threads(1)
    for name, batch in WORKLOADS:
        world = _world(name, batch)
        with torch.no_grad():
            physics.rollout(world, physics.initial_state(world), 10)  # warm-up
            times = []
            for _ in range(3):
                start = time.perf_counter()
                physics.rollout(world, physics.initial_state(world), STEPS)
                times.append((time.perf_counter() - start) / STEPS)
        print(json.dumps({"hull": name, "B": batch, "ms": 1e3 * statistics.median(times)}),
              flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--against", type=Path, default=None)
    parser.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)
    add_record_flag(parser)
    args = parser.parse_args()
    if args.worker is not None:
        _worker(args.worker)
        return
    RECORD.enable(args.record, note=args.note)
    runs = [(ROOT, "exact")]
    if args.against is not None:
        runs.insert(0, (args.against.resolve(), "bounding_box"))
    results: dict[tuple, list[float]] = {}
    for _ in range(args.repeats):
        for root, variant in runs:
            command = [sys.executable, __file__, "--worker", str(root)]
            env = {**os.environ, "OMP_NUM_THREADS": "1"}
            out = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
            for line in out.stdout.splitlines():
                row = json.loads(line)
                results.setdefault((row["hull"], row["B"], variant), []).append(row["ms"])
    for (hull, batch, variant), values in results.items():
        RECORD.emit({
            "bench": "hull_box", "hull": hull, "B": batch, "variant": variant,
            "ms_per_step": round(statistics.median(values), 3),
            "runs": [round(v, 3) for v in values], "threads": 1, "grad": False, "compiled": False,
        })  # fmt: skip


if __name__ == "__main__":
    main()
