"""Joint limits and servos in joint space: bounded impulses on single coordinates, solved by
projected Gauss-Seidel on accumulated impulses."""

from __future__ import annotations

import dataclasses

import torch

from ..actuators import servo_speeds
from ..world import World
from .dynamics import JointSpace
from .tree import Tree

Tensor = torch.Tensor


# A bound's target speed is clamped to this (m/s or rad/s, beyond any motion) so that an
# infinite bound stays out of the arithmetic (inf * 0 in a backward pass would be NaN).
FAR = 1e9


@dataclasses.dataclass
class Row:
    """A bounded row on one coordinate: sign q'_column driven to ``target`` (B,) by a
    generalised impulse whose accumulated value stays in [lower, upper] (B,) (N s or N m s)."""

    key: tuple
    column: int
    sign: float
    target: Tensor
    lower: Tensor
    upper: Tensor


def limit_rows(world: World, tree: Tree, q: Tensor) -> list[Row]:
    """One-sided rows keeping each limited coordinate's speed in [(lower - q) / dt,
    (upper - q) / dt] (q: (B, C)): a drift of dt then ends at the limit at most, and an impact
    is inelastic (the coordinate stops at its limit)."""
    rows = []
    for column in tree.limited:
        joint = tree.coordinate_joints[column]
        for sign, bound in ((1.0, world.joint_lower), (-1.0, world.joint_upper)):
            target = sign * ((bound[:, joint] - q[:, column]) / world.timestep).clamp(-FAR, FAR)
            zero = torch.zeros_like(target)
            rows.append(Row(("limit", column, sign), column, sign, target, zero, zero + FAR))
    return rows


def servo_rows(world: World, tree: Tree, q: Tensor, action: Tensor) -> list[Row]:
    """The paper's servos (`servo_speeds`, as in the maximal engine), one row each.
    q: (B, C); action: (B, A)."""
    if not tree.servos:
        return []
    wanted, bound = servo_speeds(world, action, torch.stack([q[:, c] for _, c in tree.servos], 1))
    return [
        Row(("servo", actuator), column, 1.0, wanted[:, k], -bound[:, k], bound[:, k])
        for k, (actuator, column) in enumerate(tree.servos)
    ]


def solve_rows(world: World, space: JointSpace, rows: list[Row], q_dot: Tensor, start: dict):
    """q' (B, C) after the rows' impulses, and the accumulated impulses (by row key).

    The impulses act in joint space: a generalised impulse e_c lambda changes q' by
    M^-1 e_c lambda. Projected Gauss-Seidel over the rows, each impulse accumulated and clamped
    to its bounds, warm-started from ``start`` (whose effect is already in q'):
    ``world.solver_iterations`` sweeps, one when a row is alone or the rows are one
    coordinate's two limits (they cannot both push): one sweep is then exact.
    """
    accumulated = dict(start)
    single = len(rows) == 1 or (
        len({row.column for row in rows}) == 1 and all(row.key[0] == "limit" for row in rows)
    )
    for _ in range(1 if single else world.solver_iterations):
        for row in rows:
            response = space.inverse[:, :, row.column]  # (B, C): q' change per unit impulse
            old = accumulated.get(row.key, torch.zeros_like(row.target))
            change = (row.target - row.sign * q_dot[:, row.column]) / response[:, row.column]
            new = torch.minimum(torch.maximum(old + change, row.lower), row.upper)
            q_dot = q_dot + (row.sign * (new - old))[:, None] * response
            accumulated[row.key] = new
    return q_dot, accumulated
