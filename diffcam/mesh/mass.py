"""Mass properties of a closed mesh: volume, centre of mass and inertia tensor, by the
divergence theorem over the signed tetrahedra (origin, a, b, c) of its faces, differentiable
in the vertices and the density."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .record import Mesh
from .topology import check_closed

__all__ = ["MassProperties", "mass_properties"]


@dataclass(frozen=True)
class MassProperties:
    """volume () (m^3); mass () (kg); center (3,) centre of mass in the mesh frame (m);
    inertia (3, 3) inertia tensor about the centre of mass, mesh axes (kg m^2)."""

    volume: torch.Tensor
    mass: torch.Tensor
    center: torch.Tensor
    inertia: torch.Tensor


def mass_properties(mesh: Mesh, density=1.0, check: bool = True) -> MassProperties:
    """The `MassProperties` of the solid that the closed ``mesh`` bounds, of uniform
    ``density`` (kg/m^3; a number or a () tensor, may require grad). With ``check``,
    `check_closed` first (a `MeshError` for open, non-manifold or degenerate meshes).

    Each face (a, b, c) and the origin span a tetrahedron of signed volume
    ``det[a, b, c] / 6``; summed, the signs cancel outside the solid. Its second moment is
    ``det / 120 * (a a^T + b b^T + c c^T + s s^T)`` with ``s = a + b + c``, and its centroid
    ``s / 4``. The inertia about the centre of mass is ``tr(C) I - C`` of the central
    second moment ``C = C_origin - m x x^T``."""
    if check:
        check_closed(mesh)
    v = mesh.vertices
    c = v[mesh.faces]  # (F, 3, 3): face, corner, xyz
    det = torch.linalg.det(c)  # (F,) six times the signed volumes
    volume = det.sum() / 6.0
    s = c.sum(1)  # (F, 3)
    first = (det.unsqueeze(1) * s).sum(0) / 24.0  # integral of x over the solid
    outer = c.transpose(1, 2) @ c + s.unsqueeze(2) * s.unsqueeze(1)  # (F, 3, 3)
    second = (det.view(-1, 1, 1) * outer).sum(0) / 120.0  # integral of x x^T
    rho = torch.as_tensor(density, dtype=v.dtype, device=v.device)
    center = first / volume
    central = rho * (second - volume * center.unsqueeze(1) * center.unsqueeze(0))
    eye = torch.eye(3, dtype=v.dtype, device=v.device)
    inertia = torch.diagonal(central).sum() * eye - central
    return MassProperties(volume, rho * volume, center, inertia)
