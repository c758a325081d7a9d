"""diffcam's mesh ray casting (its BVH, traversed with torch ops) against NVIDIA Warp's
(`wp.Mesh`, `wp.mesh_query_ray`, a compiled kernel), the same rays and mesh, side by side in one
run: is the renderer's ray cast where a kernel language would pay?

Prints one JSON line per case, then one with the ratios. Not part of the test suite.

    python benchmarks/bench_mesh_warp.py [--repeats 7] [--rounds 3] [--record]
        [--peers-python /work/peers_venv/bin/python]

Each case: a torus (`diffcam.mesh.shapes.torus`, 2 n m triangles) at the origin, seen by B
pinhole cameras on a circle around it (B = 1: one image; B = 64: the views of a batch); the
rays of every pixel centre (unit directions, mesh frame). diffcam: `diffcam.mesh.build_bvh`
(once per mesh), `refit` (after the vertices move) and `diffcam.mesh.cast_rays` (nearest hit,
no autograd: the renderer's first pass), one torch thread. Warp: `wp.Mesh` (its BVH build) and
a kernel of `wp.mesh_query_ray` on the CPU device (one thread), run as a subprocess of
``--peers-python`` (`benchmarks/peers/warp_mesh_rays.py`). Medians of ``--repeats``; the two
take turns ``--rounds`` times (the machine's speed drifts) and the ratio is of the medians of
the rounds. Agreement: the share of rays where both hit or both miss, the share of common
hits on the same triangle, and the largest depth difference there.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _record import Recorder, add_record_flag  # noqa: E402

import diffcam  # noqa: E402
from diffcam.mesh.bvh import build_bvh, refit  # noqa: E402
from diffcam.mesh.raycast import cast_rays  # noqa: E402
from diffcam.mesh.shapes import torus  # noqa: E402

RECORD = Recorder("mesh_warp")  # benchmarks/results/mesh_warp.jsonl with --record
PEER = ROOT / "benchmarks" / "peers" / "warp_mesh_rays.py"

# (torus n_major, n_minor), (W, H), B
CASES = [
    ((50, 50), (288, 96), 1),
    ((50, 50), (640, 480), 1),
    ((50, 50), (288, 96), 64),
    ((128, 64), (640, 480), 1),
]


def camera_rays(width: int, height: int, views: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(R, 3) origins and unit directions of every pixel of ``views`` cameras on a circle of
    radius 3.6 m, 1.8 m up, looking at the origin (R = views H W)."""
    origins, directions = [], []
    for k in range(views):
        angle = 2 * math.pi * k / views
        eye = torch.tensor([3.6 * math.sin(angle), -3.6 * math.cos(angle), 1.8])
        cam = diffcam.PinholeCamera.look_at(
            eye, torch.zeros(3), torch.tensor([0.0, 0.0, 1.0]), 40.0, width, height
        )
        o, d = cam.rays()
        origins.append(o.reshape(-1, 3))
        directions.append(d.reshape(-1, 3))
    return torch.cat(origins), torch.cat(directions)


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def run_case(shape, size, views, repeats: int, rounds: int, peers_python: str, folder: Path):
    mesh = torus(0.8, 0.3, *shape)
    corners = mesh.vertices[mesh.faces]  # (F, 3, 3)
    origins, directions = camera_rays(*size, views)
    inputs = folder / "rays.npz"
    np.savez(
        inputs, vertices=mesh.vertices.numpy(), faces=mesh.faces.int().numpy(),
        origins=origins.numpy(), directions=directions.numpy(),
    )  # fmt: skip
    bvh = build_bvh(corners)
    ours_rounds, peer_rounds, peer = [], [], None
    for _ in range(rounds):
        ours_rounds.append(median_ms(lambda: cast_rays(bvh, corners, origins, directions), repeats))
        out = folder / "warp.npz"
        done = subprocess.run(
            [peers_python, str(PEER), str(inputs), str(out), "--repeats", str(repeats)],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        peer = json.loads(done.stdout.strip().splitlines()[-1])
        peer_rounds.append(peer["query_ms"])
    build_ms = median_ms(lambda: build_bvh(corners), repeats)
    refit_ms = median_ms(lambda: refit(bvh, corners), repeats)

    ours = cast_rays(bvh, corners, origins, directions)
    theirs = np.load(out)
    t_warp = torch.from_numpy(theirs["t"]).to(ours.t)
    face_warp = torch.from_numpy(theirs["face"]).long()
    hit_ours, hit_warp = torch.isfinite(ours.t), torch.isfinite(t_warp)
    both = hit_ours & hit_warp
    same_face = both & (ours.face == face_warp)
    depth_gap = (ours.t - t_warp)[same_face].abs().max() if bool(same_face.any()) else 0.0
    row = {
        "bench": "mesh_warp",
        "case": f"torus{corners.shape[0]}_{size[0]}x{size[1]}_B{views}",
        "triangles": int(corners.shape[0]),
        "rays": int(origins.shape[0]),
        "hit_share": round(float(hit_ours.float().mean()), 4),
        "ours_cast_ms": round(statistics.median(ours_rounds), 2),
        "warp_query_ms": round(statistics.median(peer_rounds), 2),
        "ours_over_warp_time": round(
            statistics.median(ours_rounds) / statistics.median(peer_rounds), 2
        ),
        "ours_cast_ms_rounds": [round(x, 2) for x in ours_rounds],
        "warp_query_ms_rounds": [round(x, 2) for x in peer_rounds],
        "ours_bvh_build_ms": round(build_ms, 2),
        "ours_refit_ms": round(refit_ms, 2),
        "warp_bvh_build_ms": peer["build_ms"],
        "hit_or_miss_agree": round(float((hit_ours == hit_warp).float().mean()), 6),
        "same_triangle_share_of_common_hits": round(
            float(same_face.sum()) / max(int(both.sum()), 1), 6
        ),
        "max_depth_gap_m": float(f"{float(depth_gap):.3g}"),
        "threads": torch.get_num_threads(),
        "warp": peer["warp"],
        "warp_device": peer["device"],
    }
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--peers-python", default="/work/peers_venv/bin/python")
    add_record_flag(ap)
    args = ap.parse_args()
    torch.set_num_threads(1)
    RECORD.enable(args.record, note=args.note)
    ratios = {}
    with tempfile.TemporaryDirectory() as tmp:
        for shape, size, views in CASES:
            row = run_case(shape, size, views, args.repeats, args.rounds, args.peers_python,
                           Path(tmp))  # fmt: skip
            RECORD.emit(row)
            ratios[row["case"]] = row["ours_over_warp_time"]
    RECORD.emit({"bench": "mesh_warp_ratios", "ours_time_over_warp_time": ratios})


if __name__ == "__main__":
    main()
