"""Soft-edge render speed (``edge_softness = 1`` px) against hard edges, 288 x 96, and the
Mitsuba 3 peer in the same run.

Prints one JSON line per case:
    {"bench", "B", "H", "W", "prims", ..., "forward_ms", "forward_min_ms", "backward_ms",
     "backward_min_ms", "hard_forward_ms", "hard_backward_ms", "soft_over_hard_forward_backward",
     "soft_over_hard_forward_backward_cpu", "threads"}

Cases, each beside the same render with hard edges (``hard_*``, and the ratio of the
forward+backward medians), both on the default path (eager; ``Scene.render`` for the scene):
  soft_pendulum_cart_b{1,16,64}_cached
      ``Scene.render`` of the bundled pendulum_cart.toml with the Scene's cached static layer (only
      the cart and the pole are rendered per frame), B frames of a 2-s rollout; the backward
      pass back-propagates a fixed random image gradient to the poses (the scene, frames and
      gradient of bench_render.py's pendulum_cart cases).
  soft_rect5_b64, soft_mixed5_b64
      bench_render.py's 5 textured rectangles (256^2 textures) / plane, box, sphere, capsule and
      cylinder; the backward pass is that of mean(image^2), to poses and textures. The
      rectangles also run the opt-in compiled hard path (``backend="compile"``, compiled in
      the warm-up) in turn with the two: ``hard_compile_*`` and
      ``soft_over_hard_compile_forward_backward``.

``--peer-python PY`` also runs ../shared/peers/mitsuba_cards.py with that interpreter (a venv
with mitsuba), B = 64 views of 5 textured cards, forward+backward to the textures, and one
image's pose gradient with the projective integrator (``--pose``), and prints its JSON line and
a summary line ``soft_vs_mitsuba`` (our soft B = 64 forward+backward over Mitsuba's projective
pose gradient of one image: below 1 is faster; with both sides' thread counts: Mitsuba's
script uses 2, ours ``--threads``).

Times are medians and minima (the steadier figure on a shared machine) over ``--repeats`` runs
after ``--warmup`` runs, the soft and the hard render in turn within each run;
``soft_over_hard_forward_backward_cpu`` is the ratio of the medians of process CPU time
(forward+backward), steadier than wall-clock when other processes compete for the cores.

Usage: python benchmarks/bench_soft.py [--case NAME] [--repeats N] [--threads T]
    [--peer-python PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _record import Recorder, add_record_flag  # noqa: E402

RECORD = Recorder("soft")  # benchmarks/results/soft.jsonl with --record

CASES = [f"soft_pendulum_cart_b{b}_cached" for b in (1, 16, 64)]
CASES += ["soft_rect5_b64", "soft_mixed5_b64"]
PEER = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "peers", "mitsuba_cards.py"
)


def _times(cases, repeats: int, warmup: int):
    """Per (forward, backward) pair in ``cases``: wall-clock forward and backward times (ms)
    and process CPU times of forward+backward, the pairs run in turn within each repeat, so
    that a slower spell of a shared machine falls on all of them alike."""
    out = [([], [], []) for _ in cases]
    for i in range(warmup + repeats):
        for (fwd, bwd), (f_ms, b_ms, cpu_ms) in zip(cases, out, strict=True):
            c0 = time.process_time()
            t0 = time.perf_counter()
            img = fwd()
            t1 = time.perf_counter()
            bwd(img)
            t2 = time.perf_counter()
            c2 = time.process_time()
            if i >= warmup:
                f_ms.append(1e3 * (t1 - t0))
                b_ms.append(1e3 * (t2 - t1))
                cpu_ms.append(1e3 * (c2 - c0))
    return out


def _primitives_case(kind: str, softness: float, backend: str = "eager"):
    """bench_render.py's 5-primitive scene: (forward, backward given the image, info)."""
    from bench_render import scene

    import diffcam

    cam, prims, R, p, textures = scene(kind)
    bg = torch.tensor([0.9, 0.9, 0.9])

    def fwd():
        return diffcam.render(
            cam, prims, R, p, background=bg, edge_softness=softness, backend=backend
        )

    def bwd(img):
        img.square().mean().backward()
        for x in [R, p, *textures]:
            x.grad = None

    info = {"H": cam.height, "W": cam.width, "prims": len(prims), "texture": 256}
    return fwd, bwd, info


def run_case(case: str, repeats: int, warmup: int) -> dict:
    from bench_render import pendulum_cart  # the same scene, frames and image gradient

    batch = int(case.split("_b")[-1].split("_")[0])
    if case.startswith("soft_pendulum_cart"):
        fwd, bwd, _, info = pendulum_cart(batch, cached=True, edge_softness=1.0)
        hard_fwd, hard_bwd, _, _ = pendulum_cart(batch, cached=True, edge_softness=0.0)
    else:
        kind = "rect" if "rect" in case else "mixed"
        fwd, bwd, info = _primitives_case(kind, 1.0)
        hard_fwd, hard_bwd, _ = _primitives_case(kind, 0.0)
    pairs = [(fwd, bwd), (hard_fwd, hard_bwd)]
    if case.startswith("soft_rect"):  # the opt-in compiled hard path too (compiles in warm-up)
        pairs.append(_primitives_case("rect", 0.0, backend="compile")[:2])
    (f_ms, b_ms, cpu), (hf_ms, hb_ms, hard_cpu), *compiled = _times(pairs, repeats, max(1, warmup))
    soft_total = statistics.median([a + b for a, b in zip(f_ms, b_ms, strict=True)])
    hard_total = statistics.median([a + b for a, b in zip(hf_ms, hb_ms, strict=True)])
    out = {
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
        "soft_over_hard_forward_backward_cpu": round(
            statistics.median(cpu) / statistics.median(hard_cpu), 2
        ),
        "threads": torch.get_num_threads(),
    }
    if compiled:
        cf_ms, cb_ms, _ = compiled[0]
        out["hard_compile_forward_ms"] = round(statistics.median(cf_ms), 2)
        out["hard_compile_backward_ms"] = round(statistics.median(cb_ms), 2)
        compiled_total = statistics.median([a + b for a, b in zip(cf_ms, cb_ms, strict=True)])
        out["soft_over_hard_compile_forward_backward"] = round(soft_total / compiled_total, 2)
    return out


def run_peer(python: str) -> dict:
    """mitsuba_cards.py --cards 5 --batch 64 --pose with ``python``: its last JSON line."""
    cmd = [python, PEER, "--cards", "5", "--batch", "64", "--pose"]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    line = [x for x in out.splitlines() if '{"peer"' in x][-1]  # after Mitsuba's warnings
    return json.loads(line[line.index('{"peer"') :])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=CASES, action="append")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--peer-python", help="python of a venv with mitsuba: run the peer too")
    add_record_flag(ap)
    args = ap.parse_args()
    RECORD.enable(args.record, note=args.note)
    torch.set_num_threads(args.threads)
    results = {}
    for case in args.case or CASES:
        results[case] = run_case(case, args.repeats, args.warmup)
        RECORD.emit(results[case])
    if args.peer_python:
        peer = run_peer(args.peer_python)
        RECORD.emit(peer)
        one_image = peer["pose_forward_backward_ms_1spp"]
        summary = {"bench": "soft_vs_mitsuba", "mitsuba_pose_1_image_ms": one_image}
        summary.update(threads=torch.get_num_threads(), mitsuba_threads=peer.get("threads"))
        summary["mitsuba_textures_b64_fwd_bwd_ms"] = peer.get("forward_backward_ms")
        for case, r in results.items():
            if r["B"] == 64:
                total = r["forward_ms"] + r["backward_ms"]
                summary[f"{case}_over_mitsuba_pose_1_image"] = round(total / one_image, 2)
            if "hard_compile_forward_ms" in r:
                total = r["hard_compile_forward_ms"] + r["hard_compile_backward_ms"]
                key = f"{case}_hard_compile_over_mitsuba_pose_1_image"
                summary[key] = round(total / one_image, 2)
        RECORD.emit(summary)


if __name__ == "__main__":
    main()
