"""`check_closed`: whether a mesh bounds a solid, which its mass properties and physics need:
every edge shared by exactly two faces that run through it in opposite directions, no
degenerate faces, and a positive enclosed volume (outward-facing triangles)."""

from __future__ import annotations

import torch

from .errors import MeshError
from .record import Mesh

__all__ = ["check_closed", "welded_faces"]


def welded_faces(mesh: Mesh) -> torch.Tensor:
    """(F, 3) long faces re-indexed so that vertices at exactly the same position share one
    index (files that split vertices at texture seams describe one surface)."""
    _, inverse = torch.unique(mesh.vertices.detach(), dim=0, return_inverse=True)
    return inverse[mesh.faces]


def check_closed(mesh: Mesh, what: str = "mesh") -> None:
    """Raise a `MeshError` (naming the mesh's file, what is wrong, an example face or edge
    and the fix) unless ``mesh`` is closed: no degenerate faces (repeated corners or zero
    area), every edge shared by exactly two faces (not open, not non-manifold) with
    opposite orientations (consistently wound), and a positive volume (outward-facing).
    ``what`` names the mesh in the message."""
    src = mesh.source
    faces = welded_faces(mesh)
    f64 = mesh.vertices.detach().to(torch.float64)
    # degenerate: a repeated corner, or an area below round-off of the mesh's size
    repeated = (
        (faces[:, 0] == faces[:, 1]) | (faces[:, 1] == faces[:, 2]) | (faces[:, 0] == faces[:, 2])
    )
    c = f64[mesh.faces]
    area2 = torch.linalg.cross(c[:, 1] - c[:, 0], c[:, 2] - c[:, 0]).norm(dim=-1)
    extent = float((f64.amax(0) - f64.amin(0)).norm())
    bad = repeated | (area2 <= 1e-12 * extent * extent)
    if bool(bad.any()):
        k = int(bad.nonzero()[0, 0])
        raise MeshError(
            f"{what} has {int(bad.sum())} degenerate face(s) (zero area or a repeated "
            f"vertex), e.g. face {k} = {mesh.faces[k].tolist()}: remove them",
            file=src,
        )
    # directed edges (a, b) of every face; a closed, consistently wound surface has each
    # undirected edge exactly twice, once in each direction
    directed = torch.cat([faces[:, [0, 1]], faces[:, [1, 2]], faces[:, [2, 0]]])
    lo, hi = directed.amin(1), directed.amax(1)
    n = int(faces.max()) + 1
    key = lo * n + hi
    uniq, counts = torch.unique(key, return_counts=True)
    if bool((counts == 1).any()):
        e = int(uniq[counts == 1][0])
        raise MeshError(
            f"{what} is open: {int((counts == 1).sum())} edge(s) belong to one face only, "
            f"e.g. the edge between vertices {e // n} and {e % n}: close the holes "
            "(physics needs a closed mesh to have a volume)",
            file=src,
        )
    if bool((counts > 2).any()):
        e = int(uniq[counts > 2][0])
        raise MeshError(
            f"{what} is non-manifold: {int((counts > 2).sum())} edge(s) belong to more than "
            f"two faces, e.g. the edge between vertices {e // n} and {e % n}: split it into "
            "separate closed surfaces",
            file=src,
        )
    forward = torch.unique(directed[:, 0] * n + directed[:, 1])
    if forward.numel() != directed.shape[0]:
        raise MeshError(
            f"{what} is not consistently wound: two faces run through an edge in the same "
            "direction; orient every face counter-clockwise seen from outside",
            file=src,
        )
    volume = float(torch.linalg.det(c).sum()) / 6.0
    if volume <= 0:
        raise MeshError(
            f"{what} faces inwards (its signed volume is {volume:.3g}): reverse every face's "
            "vertex order",
            file=src,
        )
