"""NVIDIA Warp's mesh ray queries (`wp.Mesh`, `wp.mesh_query_ray`) on the rays of a file: the
peer of `benchmarks/bench_mesh_warp.py`. Runs in the peers' venv (see README.md here).

    python warp_mesh_rays.py IN.npz OUT.npz [--repeats 7] [--device cpu]

IN.npz holds ``vertices`` (V, 3) float32, ``faces`` (F, 3) int32, ``origins`` and
``directions`` (R, 3) float32 (directions of unit length; mesh frame). OUT.npz gets ``t``
(R,) (inf where no hit) and ``face`` (R,) (-1 where none). Prints one JSON line: the BVH build
time (the first, then the median of ``--repeats`` rebuilds, as after moved vertices) and the
query time (median over ``--repeats`` launches after one warm-up), in ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
import warp as wp

MAX_T = 1.0e6


@wp.kernel
def _query(
    mesh: wp.uint64,
    origins: wp.array(dtype=wp.vec3),
    directions: wp.array(dtype=wp.vec3),
    t_out: wp.array(dtype=float),
    face_out: wp.array(dtype=int),
):
    i = wp.tid()
    hit = wp.mesh_query_ray(mesh, origins[i], directions[i], MAX_T)
    if hit.result:
        t_out[i] = hit.t
        face_out[i] = hit.face
    else:
        t_out[i] = wp.inf
        face_out[i] = -1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("inputs")
    ap.add_argument("outputs")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()

    wp.config.quiet = True
    wp.init()
    data = np.load(args.inputs)
    with wp.ScopedDevice(args.device):
        points = wp.array(data["vertices"].astype(np.float32), dtype=wp.vec3)
        indices = wp.array(data["faces"].astype(np.int32).reshape(-1), dtype=int)
        origins = wp.array(data["origins"].astype(np.float32), dtype=wp.vec3)
        directions = wp.array(data["directions"].astype(np.float32), dtype=wp.vec3)
        n = origins.shape[0]
        t_out = wp.zeros(n, dtype=float)
        face_out = wp.zeros(n, dtype=int)

        start = time.perf_counter()
        mesh = wp.Mesh(points=points, indices=indices)
        first_build_ms = (time.perf_counter() - start) * 1e3
        builds = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            wp.Mesh(points=points, indices=indices)
            builds.append((time.perf_counter() - start) * 1e3)

        def launch():
            wp.launch(_query, dim=n, inputs=[mesh.id, origins, directions, t_out, face_out])
            wp.synchronize()

        start = time.perf_counter()
        launch()  # the kernel's compile (or cache load) and a first run
        first_query_ms = (time.perf_counter() - start) * 1e3
        queries = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            launch()
            queries.append((time.perf_counter() - start) * 1e3)
        np.savez(args.outputs, t=t_out.numpy(), face=face_out.numpy())
    print(json.dumps({
        "peer": "warp", "warp": wp.__version__, "device": args.device, "rays": n,
        "triangles": int(data["faces"].shape[0]), "first_build_ms": round(first_build_ms, 2),
        "build_ms": round(statistics.median(builds), 2),
        "first_query_ms_incl_compile": round(first_query_ms, 1),
        "query_ms": round(statistics.median(queries), 2),
    }))  # fmt: skip


if __name__ == "__main__":
    main()
