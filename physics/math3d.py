"""Small batched 3D helpers with safe gradients at degenerate points."""

from __future__ import annotations

import contextlib

import torch
from torch.autograd import forward_ad

Tensor = torch.Tensor

# True while `tracing_for_compilation` is open: a step traced for a compiler outside
# torch.compile (torch.export, make_fx) then takes the branches it takes under torch.compile.
_tracing_for_compilation = False


def compiling() -> bool:
    """Whether the step is being traced for a compiler (torch.compile, or the ahead-of-time
    tracing of `physics.ahead_of_time`): code that branches on data or calls LAPACK per
    matrix takes its compiler-friendly form then."""
    return _tracing_for_compilation or torch.compiler.is_compiling()


@contextlib.contextmanager
def tracing_for_compilation():
    """`compiling()` is True inside."""
    global _tracing_for_compilation
    before, _tracing_for_compilation = _tracing_for_compilation, True
    try:
        yield
    finally:
        _tracing_for_compilation = before


def skew(vector: Tensor) -> Tensor:
    """Cross-product matrix: ``skew(a) @ b == a x b``.

    Args:
        vector: (..., 3).

    Returns:
        (..., 3, 3).
    """
    x, y, z = vector.unbind(-1)
    zero = torch.zeros_like(x)
    return torch.stack(
        [
            torch.stack([zero, -z, y], -1),
            torch.stack([z, zero, -x], -1),
            torch.stack([-y, x, zero], -1),
        ],
        -2,
    )


def safe_norm(vector: Tensor, dim: int = -1, keepdim: bool = False, eps: float = 1e-12) -> Tensor:
    """Euclidean norm whose gradient is zero (not NaN) at the zero vector.

    Args:
        vector: (..., 3) or any shape; ``dim`` is reduced.
    """
    squared = (vector * vector).sum(dim, keepdim=keepdim)
    # Guard the argument of sqrt, not its result: sqrt'(0) = inf would give 0 * inf = NaN.
    positive = squared > eps * eps
    return torch.where(positive, torch.sqrt(torch.where(positive, squared, 1.0)), 0.0)


def safe_normalize(vector: Tensor, fallback: Tensor | None = None, eps: float = 1e-12) -> Tensor:
    """Unit vector along ``vector`` (..., 3); ``fallback`` (broadcastable) where it has zero length."""
    norm = safe_norm(vector, keepdim=True, eps=eps)
    unit = vector / torch.where(norm > 0, norm, 1.0)
    if fallback is None:
        return unit
    return torch.where(norm > 0, unit, fallback.to(unit).expand_as(unit))


def safe_sqrt(value: Tensor, eps: float = 1e-24) -> Tensor:
    """sqrt with a zero (not infinite) gradient at 0 and for negative inputs."""
    positive = value > eps
    return torch.where(positive, torch.sqrt(torch.where(positive, value, 1.0)), 0.0)


def quat_to_matrix(quat: Tensor) -> Tensor:
    """Rotation matrix from a quaternion [w, x, y, z] (MuJoCo order), normalised first.

    Args:
        quat: (..., 4).

    Returns:
        (..., 3, 3) world_from_body rotation.
    """
    q = quat / safe_norm(quat, keepdim=True).clamp_min(1e-12)
    w, x, y, z = q.unbind(-1)
    return torch.stack(
        [
            torch.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            torch.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            torch.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def axis_angle_to_matrix(axis_angle: Tensor) -> Tensor:
    """Rodrigues' formula, safe at zero angle.

    Args:
        axis_angle: (..., 3) rotation vector (rad).

    Returns:
        (..., 3, 3).
    """
    angle_sq = (axis_angle * axis_angle).sum(-1, keepdim=True)[..., None]
    small = angle_sq < 1e-8
    safe_sq = torch.where(small, torch.ones_like(angle_sq), angle_sq)
    angle = torch.sqrt(safe_sq)
    # Taylor series near zero keep the gradient finite.
    sin_over = torch.where(small, 1 - angle_sq / 6, torch.sin(angle) / angle)
    one_minus_cos_over = torch.where(small, 0.5 - angle_sq / 24, (1 - torch.cos(angle)) / safe_sq)
    k = skew(axis_angle)
    eye = torch.eye(3, dtype=axis_angle.dtype, device=axis_angle.device)
    return eye + sin_over * k + one_minus_cos_over * (k @ k)


def renormalize_rotation(rotation: Tensor) -> Tensor:
    """One step of ``R <- (3R - R R^T R) / 2`` (Premerlani 2009), pulling R back to SO(3).

    Args:
        rotation: (..., 3, 3), nearly orthonormal.
    """
    return 1.5 * rotation - 0.5 * rotation @ rotation.transpose(-1, -2) @ rotation


def tangent_basis(normal: Tensor) -> tuple[Tensor, Tensor]:
    """Two unit vectors orthogonal to ``normal`` (..., 3) and to each other, smooth per branch."""
    x_axis = torch.zeros_like(normal)
    x_axis[..., 0] = 1.0
    y_axis = torch.zeros_like(normal)
    y_axis[..., 1] = 1.0
    # Cross with whichever axis is far from the normal, so the result never has zero length.
    helper = torch.where(normal[..., :1].abs() < 0.9, x_axis, y_axis)
    first = safe_normalize(torch.linalg.cross(normal, helper))
    second = torch.linalg.cross(normal, first)
    return first, second


def rotation_error(rotation: Tensor) -> Tensor:
    """Small-angle rotation vector of a rotation near identity, (..., 3,3) -> (..., 3).

    ``vee((R - R^T) / 2)`` equals ``sin(angle) * axis``: exact to first order, smooth everywhere.
    """
    return 0.5 * torch.stack(
        [
            rotation[..., 2, 1] - rotation[..., 1, 2],
            rotation[..., 0, 2] - rotation[..., 2, 0],
            rotation[..., 1, 0] - rotation[..., 0, 1],
        ],
        -1,
    )


def hinge_angle(axis: Tensor, parent_ref: Tensor, child_ref: Tensor) -> Tensor:
    """Signed angle (rad, in (-pi, pi]) from ``parent_ref`` to ``child_ref`` about ``axis``.

    Args:
        axis, parent_ref, child_ref: (..., 3); the refs are unit vectors normal to the unit
            axis, so the angle's sine and cosine never both vanish.
    """
    sine = (axis * torch.linalg.cross(parent_ref, child_ref)).sum(-1)
    return torch.atan2(sine, (parent_ref * child_ref).sum(-1))


def spd_inverse(matrix: Tensor) -> Tensor:
    """Inverse of a batch of small symmetric positive definite matrices (B, m, m).

    Eager: LAPACK Cholesky (`cholesky_ex`: no host sync; a degenerate model gives a non-finite
    state, which `rollout` reports with the step and body). Under torch.compile: Gauss-Jordan
    elimination without pivoting (stable for SPD matrices) written as m tensor updates, which
    Inductor fuses into one loop over the batch instead of one LAPACK call per matrix.
    """
    if not compiling():
        factor, _ = torch.linalg.cholesky_ex(matrix)
        if forward_ad.unpack_dual(factor).tangent is not None:
            # Forward-mode AD (Jacobians by jvp): torch.cholesky_inverse's forward derivative
            # is wrong (torch 2.13, checked by gradcheck); cholesky_solve's is right.
            eye = torch.eye(factor.shape[-1], dtype=factor.dtype, device=factor.device)
            return torch.cholesky_solve(eye.expand_as(factor), factor)
        return torch.cholesky_inverse(factor)
    size = matrix.shape[-1]
    eye = torch.eye(size, dtype=matrix.dtype, device=matrix.device).expand_as(matrix)
    augmented = torch.cat([matrix, eye], -1)  # (B, m, 2m)
    for k in range(size):
        pivot_row = augmented[:, k : k + 1, :] / augmented[:, k : k + 1, k : k + 1]
        augmented = augmented - augmented[:, :, k : k + 1] * pivot_row
        augmented = torch.cat([augmented[:, :k], pivot_row, augmented[:, k + 1 :]], 1)
    return augmented[:, :, size:]
