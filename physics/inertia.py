"""Volume and principal moments of inertia of the primitive shapes (uniform density)."""

from __future__ import annotations

import math

import torch

Tensor = torch.Tensor


def shape_volume(shape: str, size: Tensor) -> Tensor:
    """Volume (m^3) of a shape.

    Args:
        shape: "sphere" | "box" | "capsule" | "cylinder".
        size: (..., 3) padded size: sphere [r, 0, 0]; box [x, y, z] full extents;
            capsule / cylinder [r, length, 0] (axis along body z).
    """
    if shape == "sphere":
        return 4.0 / 3.0 * math.pi * size[..., 0] ** 3
    if shape == "box":
        return size[..., 0] * size[..., 1] * size[..., 2]
    radius, length = size[..., 0], size[..., 1]
    cylinder = math.pi * radius**2 * length
    if shape == "cylinder":
        return cylinder
    if shape == "capsule":
        return cylinder + 4.0 / 3.0 * math.pi * radius**3
    raise ValueError(f"no volume for shape {shape!r}")


def shape_inertia(shape: str, mass: Tensor, size: Tensor) -> Tensor:
    """Principal moments of inertia about the centre of mass, in the body frame (kg m^2).

    Args:
        shape: "sphere" | "box" | "capsule" | "cylinder" | "hull".
        mass: (...,) kg.
        size: (..., 3) padded size, as in `shape_volume`.

    Returns:
        (..., 3) diagonal of the body-frame inertia tensor [Ixx, Iyy, Izz].
    """
    if shape == "sphere":
        # 2/5 m r^2: the original Theano engine forgot the r^2.
        moment = 0.4 * mass * size[..., 0] ** 2
        return torch.stack([moment, moment, moment], -1)
    if shape in ("box", "hull"):  # a hull's size is the box with its moments per kilogram
        x2, y2, z2 = size[..., 0] ** 2, size[..., 1] ** 2, size[..., 2] ** 2
        return torch.stack([y2 + z2, x2 + z2, x2 + y2], -1) * (mass / 12.0)[..., None]
    radius, length = size[..., 0], size[..., 1]
    r2, l2 = radius**2, length**2
    if shape == "cylinder":
        across = mass * (3 * r2 + l2) / 12.0
        return torch.stack([across, across, 0.5 * mass * r2], -1)
    if shape == "capsule":
        # Split the mass between the cylinder and the two hemispherical caps by volume; a cap's
        # centroid sits 3r/8 from its flat face (parallel-axis theorem for the caps).
        cylinder_volume = math.pi * r2 * length
        caps_volume = 4.0 / 3.0 * math.pi * radius**3
        cylinder_mass = mass * cylinder_volume / (cylinder_volume + caps_volume)
        caps_mass = mass - cylinder_mass
        across = cylinder_mass * (l2 / 12.0 + r2 / 4.0) + caps_mass * (
            0.4 * r2 + l2 / 4.0 + 3.0 * length * radius / 8.0
        )
        axial = 0.5 * cylinder_mass * r2 + 0.4 * caps_mass * r2
        return torch.stack([across, across, axial], -1)
    raise ValueError(f"no inertia for shape {shape!r}")


def body_moments(mass: Tensor, size: Tensor, shape_groups: dict[str, Tensor]) -> Tensor:
    """Principal moments of every body (B, N, 3) (kg m^2), zero for the bodies in no group.

    Args:
        mass: (B, N) kg; size: (B, N, 3) padded sizes (m).
        shape_groups: shape -> (n,) long indices of the dynamic bodies of that shape.
    """
    moments = torch.zeros_like(size)
    for shape, index in shape_groups.items():
        moments = moments.index_copy(
            1, index, shape_inertia(shape, mass.index_select(1, index), size.index_select(1, index))
        )
    return moments
