"""Meshes made in code: a textured torus and a box, for tests, benchmarks and the bundled
torus (``diffcam/data/meshes/make_meshes.py``)."""

from __future__ import annotations

import math

import torch

from .record import Mesh

__all__ = ["torus", "box"]


def torus(
    major: float = 1.0,
    minor: float = 0.35,
    n_major: int = 48,
    n_minor: int = 24,
    dtype=torch.float32,
) -> Mesh:
    """A closed torus around body z of radii ``major`` and ``minor`` (m), 2 n_major n_minor
    outward triangles, with per-corner (u, v) (F, 3, 2): u once around z (from body -y, growing
    towards +x, as a sphere's longitude), v once around the tube (0 at the outer equator,
    growing upwards; the seams' corners have u or v = 1 on one side, 0 on the other)."""
    verts = []
    for i in range(n_major):
        phi = 2 * math.pi * i / n_major - math.pi / 2  # i = 0 at body -y
        for j in range(n_minor):
            th = 2 * math.pi * j / n_minor
            rho = major + minor * math.cos(th)
            verts.append((rho * math.cos(phi), rho * math.sin(phi), minor * math.sin(th)))

    def vid(i, j):
        return (i % n_major) * n_minor + j % n_minor

    faces, uvs = [], []
    for i in range(n_major):
        for j in range(n_minor):
            quad = [(i, j), (i + 1, j), (i + 1, j + 1), (i, j + 1)]
            for tri in ((0, 1, 2), (0, 2, 3)):
                faces.append([vid(*quad[t]) for t in tri])
                uvs.append([(quad[t][0] / n_major, quad[t][1] / n_minor) for t in tri])
    return Mesh(
        torch.tensor(verts, dtype=dtype),
        torch.tensor(faces, dtype=torch.long),
        torch.tensor(uvs, dtype=dtype),
    )


def box(extents=(1.0, 1.0, 1.0), dtype=torch.float32) -> Mesh:
    """A closed box of full ``extents`` (m) centred at the origin: 8 vertices, 12 outward
    triangles, no (u, v)."""
    signs = torch.tensor(
        [[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], dtype=dtype
    )
    v = 0.5 * signs * torch.tensor(extents, dtype=dtype)
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    faces = [t for a, b, c, d in quads for t in ((a, b, c), (a, c, d))]
    return Mesh(v, torch.tensor(faces, dtype=torch.long))
