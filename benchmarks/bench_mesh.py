"""Mesh rendering speed: the BVH against brute-force ray casting, over triangle counts and
image sizes.

Prints one JSON line per case:
    {"bench": "mesh", "case", "caster", "triangles", "W", "H", "pixels", "covered",
     "forward_ms", "forward_backward_ms", "threads"}

Each case renders a textured, lit torus (`diffcam.mesh.shapes.torus`, 2 n m triangles)
filling about a third of the image, with the default antialiased edges, B = 1: ``forward_ms``
is ``render`` under ``no_grad``, ``forward_backward_ms`` a render with gradients and the
backward pass of a fixed random image gradient to the pose, the vertices and the texture.
``caster`` is ``bvh`` (the torch BVH), ``warp`` (NVIDIA Warp's kernel, the default for float32
where warp-lang is installed; run when it is) or ``brute_force`` (every ray against every
triangle, `Primitive(ray_casting="brute_force")`); brute force is skipped (``"skipped"``) where the
smaller cases' cost per (pixel, triangle) pair says it would take more than ``--budget``
seconds (30 by default). Times are medians over ``--repeats`` runs after one warm-up.

Usage: python benchmarks/bench_mesh.py [--threads T] [--repeats N] [--budget S] [--record]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _record import Recorder, add_record_flag  # noqa: E402

import diffcam  # noqa: E402
from diffcam.mesh import Mesh  # noqa: E402
from diffcam.mesh.shapes import torus  # noqa: E402

RECORD = Recorder("mesh")  # benchmarks/results/mesh.jsonl with --record

TORI = [(16, 8), (32, 16), (64, 32), (128, 64)]  # 256 to 16384 triangles
SIZES = [(64, 48), (128, 96), (256, 192)]


def setup(n_major: int, n_minor: int, width: int, height: int, caster: str):
    """A render function f(vertices, texture, position) -> image of a torus, and its inputs."""
    mesh = torus(0.8, 0.3, n_major, n_minor)
    cam = diffcam.PinholeCamera.look_at(
        torch.tensor([0.4, -3.6, 1.8]), torch.zeros(3), torch.tensor([0.0, 0.0, 1.0]), 45.0,
        width, height,
    )  # fmt: skip
    texture = torch.rand(3, 64, 64, generator=torch.Generator().manual_seed(0))
    R = torch.eye(3).view(1, 1, 3, 3)

    def render(vertices, tex, position, shape=None):
        # the BVH is built once per mesh (``shape``), not per render
        prim = diffcam.Primitive(
            "mesh", mesh=Mesh(vertices, mesh.faces, mesh.uvs), texture=tex, ray_casting=caster,
            mesh_shape=shape,
        )  # fmt: skip
        return diffcam.render(cam, [prim], R, position.view(1, 1, 3), lighting=diffcam.Lighting())

    return render, mesh, texture, torch.zeros(3)


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times)


def run_case(n_major, n_minor, width, height, caster, repeats):
    render, mesh, texture, position = setup(n_major, n_minor, width, height, caster)
    shape = diffcam.Primitive(
        "mesh", mesh=Mesh(mesh.vertices, mesh.faces, mesh.uvs), ray_casting=caster
    ).mesh_shape
    with torch.no_grad():
        image = render(mesh.vertices, texture, position, shape)
    covered = float((image - image[..., :1, :1]).abs().sum(1).gt(1e-6).float().mean())
    grad = torch.rand(image.shape, generator=torch.Generator().manual_seed(1))

    def forward():
        with torch.no_grad():
            render(mesh.vertices, texture, position, shape)

    def forward_backward():
        leaves = [x.clone().requires_grad_(True) for x in (mesh.vertices, texture, position)]
        out = render(*leaves, shape)
        out.backward(grad)

    return {
        "bench": "mesh",
        "case": f"torus{2 * n_major * n_minor}_{width}x{height}",
        "caster": caster,
        "triangles": 2 * n_major * n_minor,
        "W": width,
        "H": height,
        "pixels": width * height,
        "covered": round(covered, 3),
        "forward_ms": round(timed(forward, repeats), 2),
        "forward_backward_ms": round(timed(forward_backward, repeats), 2),
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--budget", type=float, default=30.0, help="brute force limit (s)")
    add_record_flag(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    RECORD.enable(args.record, note=args.note)
    per_pair = None  # brute force's seconds per (pixel, triangle) pair, from the cases run
    for width, height in SIZES:
        for n_major, n_minor in TORI:
            row = run_case(n_major, n_minor, width, height, "bvh", args.repeats)
            RECORD.emit({**row, "threads": args.threads})
            if diffcam.mesh.warp_rays.available():
                warp = run_case(n_major, n_minor, width, height, "warp", args.repeats)
                RECORD.emit({**warp, "threads": args.threads})
            pairs = width * height * 2 * n_major * n_minor
            # a brute-force case runs its forward+backward 1 + repeats times, and forwards
            estimate = None if per_pair is None else per_pair * pairs * 2 * (1 + args.repeats)
            if estimate is not None and estimate > args.budget:
                RECORD.emit(
                    {"bench": "mesh", "case": row["case"], "caster": "brute_force", "triangles": row["triangles"],
                     "W": width, "H": height, "pixels": width * height, "skipped": True,
                     "estimated_s": round(estimate, 1), "threads": args.threads}
                )  # fmt: skip
                continue
            brute = run_case(n_major, n_minor, width, height, "brute_force", args.repeats)
            RECORD.emit({**brute, "threads": args.threads})
            per_pair = max(per_pair or 0.0, brute["forward_backward_ms"] / 1000.0 / pairs)


if __name__ == "__main__":
    main()
