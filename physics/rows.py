"""Velocity constraint rows between pairs of bodies, and the mass-weighted operations on them.

A row is ``J_a . u_a + J_b . u_b`` where ``u = [v, w]`` (linear, angular velocity, world frame)
of bodies a and b, and J_a, J_b are 6-vectors. Generalised velocities are (B, N + 1, 6): slot N
is the fixed world (zero velocity, zero inverse mass), so a joint or contact with the world needs
no special case.
"""

from __future__ import annotations

import dataclasses

import torch

Tensor = torch.Tensor


@dataclasses.dataclass
class Rows:
    """A set of r rows.

    Attributes:
        body_a, body_b: (r,) long indices into the N + 1 body slots.
        jac_a, jac_b: (B, r, 6) Jacobian rows [linear, angular].
    """

    body_a: Tensor
    body_b: Tensor
    jac_a: Tensor
    jac_b: Tensor

    @property
    def count(self) -> int:
        return self.body_a.shape[0]

    @staticmethod
    def cat(parts: list[Rows]) -> Rows:
        return Rows(
            torch.cat([p.body_a for p in parts]),
            torch.cat([p.body_b for p in parts]),
            torch.cat([p.jac_a for p in parts], 1),
            torch.cat([p.jac_b for p in parts], 1),
        )


@dataclasses.dataclass
class Mobility:
    """Inverse mass of every body slot.

    Attributes:
        inv_mass: (B, N + 1) 1/kg, zero for static bodies and the world slot.
        inv_inertia: (B, N + 1, 3, 3) world-frame inverse inertia, zero likewise.
    """

    inv_mass: Tensor
    inv_inertia: Tensor

    def apply(self, jac: Tensor, body: Tensor) -> Tensor:
        """M^-1 J^T per row: (B, r, 6) rows of bodies ``body`` (r,) -> (B, r, 6)."""
        inv_mass = self.inv_mass.index_select(1, body)
        inv_inertia = self.inv_inertia.index_select(1, body)
        linear = inv_mass[..., None] * jac[..., :3]
        angular = (inv_inertia @ jac[..., 3:, None])[..., 0]
        return torch.cat([linear, angular], -1)

    def weighted(self, rows: Rows) -> tuple[Tensor, Tensor]:
        """(M^-1 J_a^T, M^-1 J_b^T), each (B, r, 6)."""
        return self.apply(rows.jac_a, rows.body_a), self.apply(rows.jac_b, rows.body_b)


def row_velocity(rows: Rows, velocity: Tensor) -> Tensor:
    """J u for each row: velocity (B, N + 1, 6) -> (B, r)."""
    return (rows.jac_a * velocity.index_select(1, rows.body_a)).sum(-1) + (
        rows.jac_b * velocity.index_select(1, rows.body_b)
    ).sum(-1)


def apply_impulse(
    velocity: Tensor, rows: Rows, weighted: tuple[Tensor, Tensor], impulse: Tensor
) -> Tensor:
    """u + M^-1 J^T lambda: velocity (B, N + 1, 6), impulse (B, r) (N s or N m s)."""
    velocity = velocity.index_add(1, rows.body_a, weighted[0] * impulse[..., None])
    return velocity.index_add(1, rows.body_b, weighted[1] * impulse[..., None])


def effective_matrix(rows: Rows, weighted: tuple[Tensor, Tensor]) -> Tensor:
    """J M^-1 J^T, (B, r, r): the change of each row's velocity per unit impulse on each row."""
    return coupling_matrix(rows, rows, weighted)


def diagonal(rows: Rows, weighted: tuple[Tensor, Tensor]) -> Tensor:
    """The diagonal (B, r) of `effective_matrix`, one product per row instead of (B, r, r)."""
    same = (rows.body_a == rows.body_b).to(rows.jac_a.dtype)
    own = (rows.jac_a * weighted[0]).sum(-1) + (rows.jac_b * weighted[1]).sum(-1)
    return own + same * ((rows.jac_a * weighted[1]).sum(-1) + (rows.jac_b * weighted[0]).sum(-1))


def coupling_matrix(rows: Rows, other: Rows, other_weighted: tuple[Tensor, Tensor]) -> Tensor:
    """J_rows M^-1 J_other^T, (B, r, s): the change of each of the r rows' velocities per unit
    impulse on each of the s ``other`` rows (``other_weighted``: their M^-1 J^T)."""
    same = [
        (rows.body_a[:, None] == other.body_a[None, :], rows.jac_a, other_weighted[0]),
        (rows.body_a[:, None] == other.body_b[None, :], rows.jac_a, other_weighted[1]),
        (rows.body_b[:, None] == other.body_a[None, :], rows.jac_b, other_weighted[0]),
        (rows.body_b[:, None] == other.body_b[None, :], rows.jac_b, other_weighted[1]),
    ]
    matrix = 0
    for mask, jac, weight in same:
        matrix = matrix + mask.to(jac.dtype) * (jac @ weight.transpose(1, 2))
    return matrix


def point_rows(
    body_a: Tensor,
    body_b: Tensor,
    direction: Tensor,
    lever_a: Tensor,
    lever_b: Tensor,
) -> Rows:
    """Rows for the relative velocity of two body points along ``direction``.

    Args:
        body_a, body_b: (r,) body slots.
        direction: (B, r, 3) unit vector; the row measures b's point velocity minus a's.
        lever_a, lever_b: (B, r, 3) from each body's centre of mass to its point (m).
    """
    jac_a = torch.cat([-direction, -torch.linalg.cross(lever_a, direction)], -1)
    jac_b = torch.cat([direction, torch.linalg.cross(lever_b, direction)], -1)
    return Rows(body_a, body_b, jac_a, jac_b)


def angular_rows(body_a: Tensor, body_b: Tensor, direction: Tensor) -> Rows:
    """Rows for the relative angular velocity (b minus a) along ``direction`` (B, r, 3)."""
    zero = torch.zeros_like(direction)
    return Rows(
        body_a,
        body_b,
        torch.cat([zero, -direction], -1),
        torch.cat([zero, direction], -1),
    )
