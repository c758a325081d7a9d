"""The `Mesh` record: a triangle mesh's vertices, faces and optional texture coordinates and
normals, immutable."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import MeshError

__all__ = ["Mesh"]


@dataclass(frozen=True)
class Mesh:
    """A triangle mesh in its own (body) frame.

    Attributes:
        vertices: (V, 3) float vertex positions (m).
        faces: (F, 3) long vertex indices of each triangle, counter-clockwise seen from
            outside (the outward normal is ``(b - a) x (c - a)``).
        uvs: None, per-vertex texture coordinates (V, 2), or per-corner ones (F, 3, 2)
            (what an OBJ file with ``vt`` gives: a seam needs two (u, v) at one vertex).
            (u, v) in texture units: u right, v up (v = 0 is the image's bottom row).
        normals: None, per-vertex unit normals (V, 3) or per-corner ones (F, 3, 3), used
            for smooth shading.
        source: the file the mesh was read from (for error messages), or None.
    """

    vertices: torch.Tensor
    faces: torch.Tensor
    uvs: torch.Tensor | None = None
    normals: torch.Tensor | None = None
    source: str | None = None

    def __post_init__(self):
        v, f = self.vertices, self.faces
        if v.dim() != 2 or v.shape[1] != 3 or not v.is_floating_point():
            raise MeshError(
                f"vertices must be a float (V, 3) tensor, got {_desc(v)}", file=self.source
            )
        if f.dim() != 2 or f.shape[1] != 3 or f.dtype != torch.long:
            raise MeshError(f"faces must be a long (F, 3) tensor, got {_desc(f)}", file=self.source)
        if f.shape[0] == 0:
            raise MeshError("the mesh has no faces", file=self.source)
        if int(f.min()) < 0 or int(f.max()) >= v.shape[0]:
            raise MeshError(
                f"face indices must be in [0, {v.shape[0]}), got [{int(f.min())}, {int(f.max())}]",
                file=self.source,
            )
        for name, width in (("uvs", 2), ("normals", 3)):
            a = getattr(self, name)
            if a is None:
                continue
            ok = (a.dim() == 2 and a.shape == (v.shape[0], width)) or (
                a.dim() == 3 and a.shape == (f.shape[0], 3, width)
            )
            if not ok:
                raise MeshError(
                    f"{name} must be (V, {width}) = ({v.shape[0]}, {width}) or (F, 3, {width}) = "
                    f"({f.shape[0]}, 3, {width}), got {tuple(a.shape)}",
                    file=self.source,
                )

    @property
    def num_faces(self) -> int:
        return int(self.faces.shape[0])

    def corners(self) -> torch.Tensor:
        """(F, 3, 3) the positions of each face's three corners (m)."""
        return self.vertices[self.faces]

    def corner_uvs(self) -> torch.Tensor | None:
        """(F, 3, 2) texture coordinates of each face's corners, or None."""
        return _per_corner(self.uvs, self.faces)

    def corner_normals(self) -> torch.Tensor | None:
        """(F, 3, 3) normals of each face's corners, or None."""
        return _per_corner(self.normals, self.faces)

    def face_normals(self) -> torch.Tensor:
        """(F, 3) unit outward normals of the faces (zero for a degenerate face)."""
        c = self.corners()
        n = torch.linalg.cross(c[:, 1] - c[:, 0], c[:, 2] - c[:, 0])
        return n / n.norm(dim=-1, keepdim=True).clamp(min=torch.finfo(n.dtype).tiny)

    def vertex_normals(self) -> torch.Tensor:
        """(V, 3) area-weighted averages of the faces' normals at each vertex, unit length."""
        c = self.corners()
        n = torch.linalg.cross(c[:, 1] - c[:, 0], c[:, 2] - c[:, 0])  # twice the area
        acc = torch.zeros_like(self.vertices)
        for i in range(3):
            acc = acc.index_add(0, self.faces[:, i], n)
        return acc / acc.norm(dim=-1, keepdim=True).clamp(min=torch.finfo(acc.dtype).tiny)

    def to(self, dtype=None, device=None) -> Mesh:
        """The same mesh with float tensors in ``dtype`` on ``device``."""

        def conv(a):
            return None if a is None else a.to(dtype=dtype, device=device)

        return Mesh(
            conv(self.vertices),
            self.faces.to(device=device),
            conv(self.uvs),
            conv(self.normals),
            self.source,
        )

    def scaled(self, scale) -> Mesh:
        """The mesh scaled about its origin by a number or per axis (3,); normals follow
        (the inverse-transpose, renormalised)."""
        s = torch.as_tensor(scale, dtype=self.vertices.dtype, device=self.vertices.device)
        normals = self.normals
        if normals is not None:
            normals = normals / s
            normals = normals / normals.norm(dim=-1, keepdim=True).clamp(
                min=torch.finfo(normals.dtype).tiny
            )
        return Mesh(self.vertices * s, self.faces, self.uvs, normals, self.source)


def _per_corner(a, faces):
    if a is None:
        return None
    return a if a.dim() == 3 else a[faces]


def _desc(t) -> str:
    return f"{tuple(t.shape)} {t.dtype}" if isinstance(t, torch.Tensor) else type(t).__name__
