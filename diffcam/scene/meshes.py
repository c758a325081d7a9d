"""Bodies of ``shape = "mesh"``: finding and reading their mesh files, their mass properties,
and what the physics engine is given for them.

The engine knows no meshes; it is given a convex hull (`physics.Body(shape="hull")`) posed at
the mesh's centre of mass along its principal axes: its size is the box with the mesh's
principal moments per kilogram, its points the vertices of the mesh's convex hull
(`diffcam.mesh.support_points`). It meets planes by those points (exact for the hull) and
boxes, spheres, capsules, cylinders and other hulls as the box bounding them. The body's state
is the hull's pose (the centre of mass and the principal axes); its drawn mesh is the file's,
moved into that frame, so the body looks where the file puts it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..errors import SceneError
from ..mesh import Mesh, MeshError, check_closed, load_mesh, mass_properties, support_points
from .paths import MESHES_DIR

__all__ = ["MeshBody", "mesh_body", "physics_standin", "resolve_mesh"]

_MIN_EXTENT = 1e-4  # m, the smallest stand-in box side (as the schema's smallest size)


@dataclass(frozen=True)
class MeshBody:
    """A mesh body's geometry, read once when the scene is validated.

    Attributes:
        mesh: the mesh in the body frame (float64, m): the file's vertices, scaled, less
            ``center``, in the principal axes.
        center: (3,) the centre of mass in the file's (scaled) mesh frame (m).
        axes: (3, 3) the principal axes as columns, in the file's mesh frame
            (mesh_from_body rotation, det +1).
        volume: the enclosed volume (m^3), None when not computed (static, or ``inertia``
            given).
        unit_moments: (3,) principal moments per kg (m^2).
        file: the mesh file.
    """

    mesh: Mesh
    center: np.ndarray
    axes: np.ndarray
    volume: float | None
    unit_moments: np.ndarray
    file: str

    def standin_size(self) -> list[float]:
        """Full extents [x, y, z] (m) of the box whose moments per kg are ``unit_moments``:
        ``x^2 = 6 (Iy + Iz - Ix) / m`` and likewise."""
        ix, iy, iz = (float(v) for v in self.unit_moments)
        sq = [6.0 * (iy + iz - ix), 6.0 * (ix + iz - iy), 6.0 * (ix + iy - iz)]
        return [max(_MIN_EXTENT, float(np.sqrt(max(s, 0.0)))) for s in sq]


def resolve_mesh(rel: str, base_dir: Path, file: str, key: str) -> Path:
    """The mesh file ``rel``: next to the scene file, then in ``$DIFFCAM_ASSETS``, then among
    the bundled meshes (``diffcam/data/meshes``); a `SceneError` lists where it looked."""
    candidates = [Path(base_dir) / rel]
    if os.environ.get("DIFFCAM_ASSETS"):
        candidates.append(Path(os.environ["DIFFCAM_ASSETS"]) / rel)
    candidates.append(MESHES_DIR / rel)
    for c in candidates:
        if c.is_file():
            return c
    bundled = sorted(p.name for p in MESHES_DIR.glob("*.obj"))
    raise SceneError(
        f"mesh file {rel!r} not found (looked in "
        + ", ".join(str(c.parent) for c in candidates)
        + ")",
        file=file,
        key=key,
        accepted="a mesh file (.obj; .gltf, .glb, .ply, .stl, .off with trimesh) relative to "
        "the scene file, or a bundled mesh: " + ", ".join(bundled),
    )


def mesh_body(b: dict, key: str, file: str, base_dir: Path) -> MeshBody:
    """The `MeshBody` of the validated body ``b`` (keys ``mesh``, ``scale``, ``static``,
    ``mass``, ``inertia``) of scene ``file``; ``key`` is ``bodies.<name>``. A closed mesh is
    needed for its mass properties (a moving body without ``inertia``)."""
    path = resolve_mesh(b["mesh"], base_dir, file, f"{key}.mesh")
    try:
        mesh = load_mesh(path, dtype=torch.float64)
    except MeshError as err:
        raise SceneError(str(err), file=file, key=f"{key}.mesh") from None
    scale = b.get("scale", 1.0)
    if scale != 1.0:
        mesh = mesh.scaled(scale)
    eye = np.eye(3)
    if b.get("static", False):
        return MeshBody(mesh, np.zeros(3), eye, None, np.ones(3), str(path))
    if "inertia" in b:
        inertia = np.asarray(b["inertia"], dtype=float)
        mass = b.get("mass")
        if mass is None:
            raise SceneError(
                "inertia needs a mass (the density would come from the volume of a closed mesh)",
                file=file,
                key=f"{key}.inertia",
                accepted="mass = ... (kg) with inertia, or no inertia",
            )
        m = float(mass) if not isinstance(mass, torch.Tensor) else float(mass.detach().mean())
        ix, iy, iz = inertia
        if ix > iy + iz or iy > ix + iz or iz > ix + iy:
            raise SceneError(
                f"principal moments {list(inertia)} break the triangle inequality "
                "(each at most the sum of the others): no rigid body has them",
                file=file,
                key=f"{key}.inertia",
            )
        return MeshBody(mesh, np.zeros(3), eye, None, inertia / m, str(path))
    try:
        check_closed(mesh, what=f"the mesh of {key}")
    except MeshError as err:
        raise SceneError(
            err.reason,
            file=file,
            key=f"{key}.mesh",
            accepted="a closed mesh, or give mass and inertia (principal moments, kg m^2) "
            "for an open one",
        ) from None
    props = mass_properties(mesh, density=1.0, check=False)
    center = props.center.numpy()
    moments, axes = np.linalg.eigh(props.inertia.numpy())
    off = props.inertia.numpy() - np.diag(np.diag(props.inertia.numpy()))
    if np.abs(off).max() <= 1e-9 * np.abs(moments).max():
        # already principal (a symmetric mesh): keep the file's axes
        axes, moments = eye, np.diag(props.inertia.numpy()).copy()
    elif np.linalg.det(axes) < 0:
        axes[:, 2] = -axes[:, 2]
    v = (mesh.vertices - torch.from_numpy(center)) @ torch.from_numpy(axes)
    normals = mesh.normals
    if normals is not None:
        normals = normals @ torch.from_numpy(axes)
    body_mesh = Mesh(v, mesh.faces, mesh.uvs, normals, mesh.source)
    volume = float(props.volume)
    return MeshBody(body_mesh, center, axes, volume, moments / volume, str(path))


def _hull_points(b: dict, mb: MeshBody) -> np.ndarray:
    """The body-frame vertices (K, 3) of the mesh's convex hull (m); a `SceneError` naming
    ``collide`` when they span no volume (a flat card cannot collide as a hull)."""
    points = support_points(mb.mesh.vertices.numpy())
    spread = points.max(0) - points.min(0) if len(points) else np.zeros(3)
    if len(points) < 4 or bool((spread <= 1e-9 * max(float(spread.max()), 1e-30)).any()):
        raise SceneError(
            "a mesh body collides by its convex hull, and this mesh's vertices span no volume "
            "(it is flat or a line)",
            file=mb.file,
            key=f"bodies.{b['name']}.collide",
            accepted="collide = false, or a closed mesh",
        )
    return points


def _quat_rotation(q: torch.Tensor) -> torch.Tensor:
    """(..., 3, 3) rotation of quaternions q (..., 4) [w, x, y, z] (normalised here)."""
    q = q / q.norm(dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        [
            torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            torch.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            torch.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def physics_standin(b: dict, tensor) -> dict:
    """The `physics.Body` keyword arguments of mesh body ``b`` (validated, with its
    `MeshBody` under ``"mesh_body"``): a convex hull of the mesh's vertices and principal
    moments, at its centre of mass along its principal axes. ``tensor`` converts numbers and
    tensors to the scene's dtype and device."""
    mb: MeshBody = b["mesh_body"]
    skip = ("texture", "color", "uv_scale", "visible", "mesh", "scale", "smooth", "inertia")
    skip += ("mesh_body", "shape", "size", "quat", "position", "density")
    kw = {k: v for k, v in b.items() if k not in skip}
    size = mb.standin_size()
    kw["size"] = size
    if not b.get("collide", True):
        kw["shape"] = "box"  # the same inertia; it never touches anything
    else:
        kw["shape"] = "hull"
        kw["points"] = (_hull_points(b, mb) / np.asarray(size)).tolist()
    if "density" in b:  # the mesh's volume, not the stand-in box's
        kw["mass"] = tensor(b["density"]) * mb.volume
    R = _quat_rotation(tensor(b.get("quat", [1.0, 0.0, 0.0, 0.0])))
    p = tensor(b.get("position", [0.0, 0.0, 0.0]))
    center, axes = tensor(mb.center.tolist()), tensor(mb.axes.tolist())
    kw["position"] = p + (R @ center.unsqueeze(-1)).squeeze(-1)
    kw["rotation"] = R @ axes
    return kw
