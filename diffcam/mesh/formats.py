"""`load_mesh`: a mesh file of any supported format. OBJ is read in plain Python (``obj``);
glTF / GLB, PLY, STL, OFF and the other formats ``trimesh`` reads go through ``trimesh``, the
optional ``mesh`` extra (``pip install diffcam[mesh]``)."""

from __future__ import annotations

from pathlib import Path

import torch

from .errors import MeshError
from .obj import read_obj
from .record import Mesh

__all__ = ["load_mesh", "TRIMESH_FORMATS"]

#: the file suffixes read through trimesh
TRIMESH_FORMATS = (".gltf", ".glb", ".ply", ".stl", ".off")


def load_mesh(path, dtype=torch.float32) -> Mesh:
    """The `Mesh` of the file ``path`` (.obj, or through trimesh .gltf, .glb, .ply, .stl,
    .off), all its geometry as one mesh; per-vertex uvs (V, 2) where trimesh finds texture
    coordinates. A `MeshError` names the file for an unknown suffix, an unreadable file or
    a missing trimesh."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix == ".obj":
        return read_obj(path, dtype=dtype)
    if suffix not in TRIMESH_FORMATS:
        raise MeshError(
            f"unknown mesh format {suffix or '(no suffix)'!r}; accepted: .obj, "
            + ", ".join(TRIMESH_FORMATS),
            file=path,
        )
    if not path.is_file():
        raise MeshError("no such mesh file", file=path)
    try:
        import trimesh
    except ImportError:
        raise MeshError(
            f"reading {suffix} meshes needs trimesh: pip install 'diffcam[mesh]' "
            "(or convert the mesh to .obj, which diffcam reads itself)",
            file=path,
        ) from None
    try:
        tm = trimesh.load(str(path), force="mesh", process=False)
    except Exception as err:  # trimesh raises many kinds; name the file
        raise MeshError(f"trimesh could not read the mesh: {err}", file=path) from None
    if len(tm.faces) == 0:
        raise MeshError("the mesh has no faces", file=path)
    uv = getattr(getattr(tm, "visual", None), "uv", None)
    uvs = None if uv is None or len(uv) != len(tm.vertices) else torch.tensor(uv, dtype=dtype)
    return Mesh(
        torch.tensor(tm.vertices, dtype=dtype),
        torch.tensor(tm.faces, dtype=torch.long),
        uvs,
        None,
        str(path),
    )
