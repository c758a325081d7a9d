"""Shared helpers for the diffcam tests (small scenes, rotations, an asymmetric texture)."""

from __future__ import annotations

import math

import torch

import diffcam


def rot(axis: str, angle: float, dtype=torch.float64) -> torch.Tensor:
    """Rotation matrix (3, 3) about a coordinate axis by ``angle`` radians."""
    c, s = math.cos(angle), math.sin(angle)
    m = {
        "x": [[1, 0, 0], [0, c, -s], [0, s, c]],
        "y": [[c, 0, s], [0, 1, 0], [-s, 0, c]],
        "z": [[c, -s, 0], [s, c, 0], [0, 0, 1]],
    }[axis]
    return torch.tensor(m, dtype=dtype)


def axis_angle(w: torch.Tensor) -> torch.Tensor:
    """Differentiable rotation matrix from an axis-angle vector (..., 3) (Rodrigues)."""
    theta2 = (w * w).sum(-1, keepdim=True)[..., None]
    theta = torch.sqrt(theta2 + 1e-30)
    x, y, z = w.unbind(-1)
    zero = torch.zeros_like(x)
    Kx = torch.stack([zero, -z, y, z, zero, -x, -y, x, zero], -1).reshape(*w.shape[:-1], 3, 3)
    eye = torch.eye(3, dtype=w.dtype)
    return (
        eye
        + torch.sin(theta) / theta * Kx
        + (1 - torch.cos(theta)) / theta2.clamp(min=1e-30) * (Kx @ Kx)
    )


# body +z towards the viewer at -y, body +y up: how a rectangle faces the default camera
FACING_FRONT = [[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]]

# quadrant colours of the asymmetric texture, as seen in the PNG (row 0 at the top)
TL, TR, BL, BR = (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0), (1.0, 1.0, 0.0)


def quadrant_texture(n: int = 8, dtype=torch.float64) -> torch.Tensor:
    """(3, n, n) texture: top-left red, top-right green, bottom-left blue, bottom-right
    yellow (top = PNG row 0 = v near 1)."""
    t = torch.zeros(3, n, n, dtype=dtype)
    h = n // 2
    for (r, c), col in zip([(0, 0), (0, 1), (1, 0), (1, 1)], [TL, TR, BL, BR], strict=True):
        t[:, r * h : (r + 1) * h, c * h : (c + 1) * h] = torch.tensor(col, dtype=dtype).view(
            3, 1, 1
        )
    return t


def front_camera(width=40, height=30, dtype=torch.float64, eye=(0.0, -3.0, 0.0), fov=40.0):
    """Camera at ``eye`` looking at the origin along +y, z up."""
    return diffcam.PinholeCamera.look_at(
        torch.tensor(eye, dtype=dtype),
        torch.zeros(3, dtype=dtype),
        torch.tensor([0.0, 0.0, 1.0], dtype=dtype),
        torch.tensor(fov, dtype=dtype),
        width,
        height,
    )


def smooth_texture(n: int = 16, dtype=torch.float64, seed: int = 0) -> torch.Tensor:
    """A smooth random texture (low-frequency) so finite differences are well behaved."""
    g = torch.Generator().manual_seed(seed)
    base = torch.rand(3, 4, 4, generator=g, dtype=dtype)
    return (
        torch.nn.functional.interpolate(
            base.unsqueeze(0), size=(n, n), mode="bicubic", align_corners=False
        )
        .squeeze(0)
        .clamp(0, 1)
    )
