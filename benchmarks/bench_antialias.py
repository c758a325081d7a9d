"""What the default antialiased edges cost against hard edges: `Scene.render` of the bundled
pendulum-cart (288 x 96, 7 bodies, static layer cached) at B = 1, 8, 64 frames of a rollout.

For each batch size, in each repeat the hard render (``edge_softness=0``) and the default
(``"antialias"``) run in turn, so that a machine shared with other work slows both alike:

- ``forward``: the render with gradients recorded (poses require grad);
- ``backward``: the backward of a fixed random image gradient after that forward;
- ``nograd``: the render under ``torch.no_grad()`` (what a video or a numpy-mode env pays).

Prints one JSON line per (B, mode): the medians (ms) of both and the ratio default / hard,
then a summary line. Wall clock, one thread by default (``--threads``). ``--sigma S`` also
times sigmoid soft edges of S px in the same turns (the other option the default was chosen
against: docs/decisions/antialiased-default.md).

    python benchmarks/bench_antialias.py [--batches 1 8 64] [--repeats 7] [--threads 1]
        [--sigma 0.5]
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _record import Recorder, add_record_flag  # noqa: E402

import diffcam  # noqa: E402
from diffcam.scene import SCENES_DIR  # noqa: E402

SCENE = SCENES_DIR / "pendulum_cart.toml"
EDGES = {"hard": 0.0, "antialias": "antialias"}
RECORD = Recorder("antialias")  # benchmarks/results/antialias.jsonl with --record


def frames(batch: int):
    """The scene and a state of ``batch`` frames of a 2-s rollout under a sine force (time as
    the batch axis), with poses that require grad."""
    scene = diffcam.load_scene(SCENE, batch_size=1)
    steps = 200
    force = 20.0 * torch.sin(2 * math.pi * 0.8 * 0.01 * torch.arange(steps)).view(steps, 1, 1)
    with torch.no_grad():
        traj = scene.rollout(steps, actions=force, compile=False)
    index = torch.linspace(0, steps, batch).round().long() if batch > 1 else torch.tensor([100])
    state = traj[index, 0]
    rot = state.rotation.clone().requires_grad_()
    pos = state.position.clone().requires_grad_()
    return scene, state.replace(rotation=rot, position=pos)


def once(scene, state, softness, grad_out):
    """(forward ms, backward ms, no-grad forward ms) of one render of each kind."""
    t0 = time.perf_counter()
    img = scene.render(state, edge_softness=softness)
    t1 = time.perf_counter()
    img.backward(grad_out)
    t2 = time.perf_counter()
    with torch.no_grad():
        scene.render(state, edge_softness=softness)
    t3 = time.perf_counter()
    state.rotation.grad = state.position.grad = None
    return 1e3 * (t1 - t0), 1e3 * (t2 - t1), 1e3 * (t3 - t2)


# per mode, its time (ms) from a repeat's (forward, backward, no-grad forward)
MODES = {
    "forward": lambda t: t[0],
    "backward": lambda t: t[1],
    "forward+backward": lambda t: t[0] + t[1],
    "nograd": lambda t: t[2],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--sigma", type=float, default=None, help="also soft edges of S px")
    add_record_flag(parser)
    args = parser.parse_args()
    RECORD.enable(args.record, note=args.note)
    torch.set_num_threads(args.threads)
    edges = dict(EDGES)
    if args.sigma is not None:
        edges["soft"] = args.sigma
    summary = {}
    for batch in args.batches:
        scene, state = frames(batch)
        grad_out = torch.rand(batch, 3, scene.camera.height, scene.camera.width)
        times = {name: [] for name in edges}
        for r in range(args.warmup + args.repeats):
            for name, softness in edges.items():
                t = once(scene, state, softness, grad_out)
                if r >= args.warmup:
                    times[name].append(t)
        medians = {
            mode: {name: statistics.median(pick(t) for t in ts) for name, ts in times.items()}
            for mode, pick in MODES.items()
        }
        for mode, med in medians.items():
            line = {"bench": "antialias", "B": batch, "mode": mode}
            line.update({f"{name}_ms": round(ms, 2) for name, ms in med.items()})
            line["ratio"] = round(med["antialias"] / med["hard"], 3)
            if "soft" in med:
                line["sigma"] = args.sigma
                line["soft_ratio"] = round(med["soft"] / med["hard"], 3)
            line.update(threads=args.threads, repeats=args.repeats)
            RECORD.emit(line)
            summary[f"B{batch}_{mode}"] = line["ratio"]
    RECORD.emit({"bench": "antialias", "summary": "ratio antialias / hard", **summary})


if __name__ == "__main__":
    main()
