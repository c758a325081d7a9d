"""``<asset><mesh>`` and ``type="mesh"`` geoms: the mesh files, their scale and volume.

A mesh asset names a file (``.obj``, read by diffcam itself, or ``.stl``, read through
``trimesh``, the ``mesh`` extra), found as MuJoCo finds it: an absolute ``file``, else
``<compiler meshdir>`` (else ``assetdir``) relative to the model file's directory. The scene
body gets the file's absolute path, the asset's ``scale`` and the geom's pose; the scene
itself moves the body's frame to the mesh's centre of mass and principal axes, which is
where MuJoCo puts a mesh geom's frame (``geom_pos``/``geom_quat`` = the geom's ``pos``/``quat``
composed with the mesh's centre of mass and principal axes), so the body's state is MuJoCo's
geom pose. Mass: the geom's ``mass``, else ``density`` times the mesh's enclosed volume.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import torch

from ..mesh import Mesh, MeshError, check_closed, load_mesh, mass_properties
from .context import ConversionContext
from .defaults import class_attrs
from .xmltree import Node

__all__ = ["MeshAsset", "geom_mesh_asset", "mesh_volume", "read_mesh_asset"]

#: mesh file suffixes diffcam reads (MuJoCo also reads its binary .msh)
MESH_SUFFIXES = (".obj", ".stl")


@dataclass
class MeshAsset:
    """One ``<asset><mesh>``.

    Attributes:
        name: the asset's name (its file's stem if it has none, as in MuJoCo).
        path: the mesh file, absolute.
        scale: (3,) per-axis scale of the file's vertices (MuJoCo's ``scale``).
        inertia: MuJoCo's ``inertia`` mode: "legacy" (its default), "exact" or "convex".
        node: the ``<mesh>`` element (for error messages).
        mesh: the scaled mesh (float64, m), read when a geom first uses the asset.
    """

    name: str
    path: Path
    scale: list[float]
    inertia: str
    node: Node
    mesh: Mesh | None = None


def read_mesh_asset(ctx: ConversionContext, node: Node) -> None:
    """Record an ``<asset><mesh>`` in ``ctx.meshes`` (the file is read when a geom uses it)."""
    a = class_attrs(ctx, node, None)
    ctx.check_attrs(node, a)
    _refuse_mesh_attrs(ctx, node, a)
    if "file" not in a:
        raise ctx.error(node, "a mesh needs a file", '<mesh file="part.obj"/> (or .stl)')
    if a.get("inertia", "legacy") == "shell":
        raise ctx.error(
            node,
            'inertia="shell" is not supported: diffcam bodies are solid',
            'inertia="exact", "convex" or "legacy"',
        )
    inertia = ctx.boolean(node, a, "inertia", ("legacy", "exact", "convex", "shell")) or "legacy"
    scale = ctx.floats(node, a, "scale", (3,), [1.0, 1.0, 1.0])
    if min(scale) <= 0:
        raise ctx.error(
            node, f"scale {scale}: mirrored or flattened meshes are not supported", "> 0"
        )
    file = a["file"]
    if ctx.strippath:
        file = Path(file).name
    name = a.get("name") or Path(file).stem
    if name in ctx.meshes:
        raise ctx.error(node, f"mesh {name!r} is defined twice")
    ctx.meshes[name] = MeshAsset(name, _mesh_path(ctx, file), scale, inertia, node)


def _refuse_mesh_attrs(ctx: ConversionContext, node: Node, a: dict) -> None:
    """Refuse the ``<mesh>`` attributes that give a mesh other than by its file."""
    inline = [k for k in ("vertex", "face", "normal", "texcoord") if k in a]
    if inline:
        raise ctx.error(
            node,
            f"inline mesh data ({', '.join(inline)}) is not supported",
            'the mesh in an OBJ file: <mesh file="part.obj"/>',
        )
    if "builtin" in a or "params" in a:
        raise ctx.error(
            node,
            "builtin (procedural) meshes are not supported",
            'the mesh in an OBJ file: <mesh file="part.obj"/>',
        )
    if "refpos" in a or "refquat" in a:
        raise ctx.error(node, "refpos / refquat are not supported", "the mesh moved in its file")
    if "content_type" in a:
        raise ctx.error(node, "content_type is not supported", "a file named .obj or .stl")


def _mesh_path(ctx: ConversionContext, file: str) -> Path:
    """Where MuJoCo looks for mesh ``file``: itself if absolute, else in ``meshdir`` (else
    ``assetdir``), which is itself relative to the model file's directory unless absolute."""
    if Path(file).is_absolute():
        return Path(file)
    folder = Path(ctx.meshdir or ctx.assetdir or "")
    if not folder.is_absolute():
        folder = ctx.model_dir / folder
    return (folder / file).resolve()


def geom_mesh_asset(ctx: ConversionContext, node: Node, attrs: dict) -> MeshAsset:
    """The asset of a ``type="mesh"`` geom, its file read (scaled): a `MJCFError` naming the
    geom or the ``<mesh>`` for an unknown name, a missing or unreadable file."""
    name = attrs.get("mesh")
    if name is None:
        raise ctx.error(node, 'a type="mesh" geom needs mesh="..."', "the name of an <asset><mesh>")
    if name not in ctx.meshes:
        raise ctx.error(
            node, f"mesh {name!r} is not an <asset><mesh>", ", ".join(ctx.meshes) or "none"
        )
    asset = ctx.meshes[name]
    if asset.mesh is None:
        asset.mesh = _read_mesh_file(ctx, asset)
    return asset


def _read_mesh_file(ctx: ConversionContext, asset: MeshAsset) -> Mesh:
    suffix = asset.path.suffix.lower()
    if suffix not in MESH_SUFFIXES:
        raise ctx.error(
            asset.node,
            f"mesh file {asset.path.name}: {suffix or 'no suffix'} files are not supported",
            ".obj (diffcam reads it), .stl (with pip install 'diffcam[mesh]')",
        )
    if not asset.path.is_file():
        raise ctx.error(
            asset.node,
            f"mesh file {str(asset.path)!r} not found",
            "a file relative to <compiler meshdir> (or assetdir), itself relative to the model "
            "file's directory",
        )
    try:
        mesh = load_mesh(asset.path, dtype=torch.float64)
    except MeshError as err:  # a missing trimesh for .stl names the fix
        raise ctx.error(asset.node, str(err)) from None
    if asset.scale != [1.0, 1.0, 1.0]:
        mesh = mesh.scaled(asset.scale)
    return mesh


def mesh_volume(ctx: ConversionContext, node: Node, asset: MeshAsset) -> float:
    """m^3 enclosed by the asset's (closed) mesh, for a geom's ``density``; a `MJCFError`
    naming the geom for an open mesh. Notes where MuJoCo's ``inertia`` mode gives another
    volume (``legacy`` and ``convex`` differ from the exact one for a non-convex mesh)."""
    try:
        check_closed(asset.mesh, what=f"mesh {asset.name!r} ({asset.path.name})")
    except MeshError as err:
        raise ctx.error(
            node,
            f"{err.reason}: a moving mesh body's mass and inertia come from a closed mesh",
            "a closed (watertight) mesh",
        ) from None
    volume = float(mass_properties(asset.mesh, check=False).volume)
    if asset.inertia != "exact":
        hull = _hull_volume(asset.mesh)
        if hull is not None and not math.isclose(hull, volume, rel_tol=1e-6):
            ctx.note(
                f"mesh {asset.name!r} is not convex: diffcam's mass properties are exact, "
                f"MuJoCo's inertia=\"{asset.inertia}\" ones are not (its convex hull's volume is "
                f'{hull:.6g} m^3, the mesh\'s {volume:.6g} m^3); set inertia="exact" on the '
                "<mesh> for MuJoCo to agree"
            )
    return volume


def _hull_volume(mesh: Mesh) -> float | None:
    """m^3 of the convex hull of the mesh's vertices (None without scipy)."""
    try:
        from scipy.spatial import ConvexHull
    except ImportError:
        return None
    return float(ConvexHull(mesh.vertices.numpy()).volume)
