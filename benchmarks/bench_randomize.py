"""Domain-randomised rendering speed: one batched call against one call per episode.

Prints one JSON line per (edge softness, batch) case:
    {"bench": "randomize", "B", "H", "W", "edge_softness", "plain_ms", "batched_ms",
     "per_episode_ms", "per_episode_over_batched", "batched_over_plain", "threads", "repeats"}

Each case renders a frame of the bundled ``pendulum_cart.toml`` (288 x 96, cached static layer)
for B episodes, forward and backward (a fixed random image gradient to the poses), three ways
in turn within each repeat:
  plain        ``Scene.render``, no randomisation;
  batched      ``RandomizedScene.render`` with ``Randomization.moderate()``: the whole batch in
               one render call (per-image camera, light and colour maps);
  per_episode  the same episodes drawn one render call each (the episode's camera, light and
               colour maps), the way randomised batches were drawn before the renderer took
               per-image appearance.
Image-space jitter and noise are included in ``batched`` (cheap next to rendering) and left
out of ``per_episode``. Times are medians (ms) over ``--repeats`` runs after one warm-up.

Usage: python benchmarks/bench_randomize.py [--batch 8 64] [--repeats 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import diffcam  # noqa: E402
from diffcam.randomize import Randomization, randomize  # noqa: E402

SCENE = diffcam.scene.SCENES_DIR / "pendulum_cart.toml"


def _state(scene, generator):
    """The initial state with the cart and the pole moved a little per episode."""
    state = scene.initial_state()
    pos = state.position.clone()
    i = scene.body_names.index("cart")
    pos[:, i, 0] += 0.3 * torch.rand(pos.shape[0], generator=generator) - 0.15
    return state.__class__(pos, state.rotation, state.linear_velocity, state.angular_velocity)


def _per_episode(rs, views, state, softness):
    """The episodes of ``rs`` drawn one render call each (camera, light, colour maps), with
    ``views[b]``: episode b's view of the scene (its camera and its own static layer)."""
    images = []
    for b, view in enumerate(views):
        one = state.__class__(*(x[b : b + 1] for x in state.tensors()))
        kw = rs._episode_arguments(slice(b, b + 1), 1)
        images.append(view.render(one, edge_softness=softness, **kw))
    return torch.cat(images)


def _episode_views(rs) -> list:
    views = []
    for b in range(rs.base.batch_size):
        view = copy.copy(rs._episode_views.get(b, rs.base))
        view.camera = rs._camera_of(b)
        view._layer_cache = None
        views.append(view)
    return views


def run_case(B: int, softness: float, repeats: int) -> dict:
    g = torch.Generator().manual_seed(0)
    scene = diffcam.load_scene(SCENE, batch_size=B)
    rs = randomize(scene, Randomization.moderate(), torch.Generator().manual_seed(1))
    state = _state(scene, g)
    cam = scene.camera
    grad = torch.rand((B, 3, cam.height, cam.width), generator=g)
    views = _episode_views(rs)

    def timed(draw):
        pos = state.position.clone().requires_grad_(True)
        st = state.__class__(pos, state.rotation, state.linear_velocity, state.angular_velocity)
        t0 = time.perf_counter()
        image = draw(st)
        image.backward(grad)
        return 1e3 * (time.perf_counter() - t0)

    ways = {
        "plain": lambda st: scene.render(st, edge_softness=softness),
        "batched": lambda st: rs.render(st, edge_softness=softness),
        "per_episode": lambda st: _per_episode(rs, views, st, softness),
    }
    times = {name: [] for name in ways}
    for r in range(repeats + 1):
        for name, draw in ways.items():
            t = timed(draw)
            if r:  # the first run warms the caches
                times[name].append(t)
    med = {name: statistics.median(v) for name, v in times.items()}
    return {
        "bench": "randomize",
        "B": B,
        "H": cam.height,
        "W": cam.width,
        "edge_softness": softness,
        "plain_ms": round(med["plain"], 1),
        "batched_ms": round(med["batched"], 1),
        "per_episode_ms": round(med["per_episode"], 1),
        "per_episode_over_batched": round(med["per_episode"] / med["batched"], 2),
        "batched_over_plain": round(med["batched"] / med["plain"], 2),
        "threads": torch.get_num_threads(),
        "repeats": repeats,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--softness", type=float, nargs="+", default=[0.0, 1.0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for softness in args.softness:
        for B in args.batch:
            print(json.dumps(run_case(B, softness, args.repeats)), flush=True)


if __name__ == "__main__":
    main()
