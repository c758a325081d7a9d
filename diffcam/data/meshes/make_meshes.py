"""Write the bundled meshes (run from the repository root: ``python
diffcam/data/meshes/make_meshes.py``).

``torus.obj``: a closed torus around body z, major radius 0.5 m, tube radius 0.18 m,
48 x 24 quads (2304 triangles), with per-corner (u, v) once around each circle
(`diffcam.mesh.shapes.torus`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from diffcam.mesh.obj import write_obj
from diffcam.mesh.shapes import torus

HERE = Path(__file__).resolve().parent


def main() -> None:
    mesh = torus(0.5, 0.18, 48, 24, dtype=torch.float64)
    write_obj(
        mesh,
        HERE / "torus.obj",
        header="A torus around z: major radius 0.5 m, tube radius 0.18 m, 2304 triangles,\n"
        "(u, v) once around z and once around the tube. Written by make_meshes.py.",
    )


if __name__ == "__main__":
    main()
