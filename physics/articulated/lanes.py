"""Per-world scalars: 3-vectors and 3x3 matrices held as separate (B,) tensors, one per
component, with structural zeros as None.

Written this way, every operation of a step is elementwise over the batch alone, so a compiler
(Inductor) fuses the whole step into one loop over the worlds, with each world's arithmetic in
registers; with (B, 3) and (B, 3, 3) tensors every differently shaped intermediate is a loop and
a buffer of its own. A None stands for an exact zero known from the model's structure (a body a
joint does not move, the world frame's spin): the products with it are skipped, not computed.
"""

from __future__ import annotations

import dataclasses

import torch

Tensor = torch.Tensor


@dataclasses.dataclass(frozen=True, slots=True)
class Vec:
    """A 3-vector: x, y, z each a (B,) or (1,) tensor (broadcast against each other)."""

    x: Tensor
    y: Tensor
    z: Tensor

    @staticmethod
    def of(tensor: Tensor) -> Vec:
        """The components of a (..., 3) tensor."""
        return Vec(tensor[..., 0], tensor[..., 1], tensor[..., 2])

    def stack(self) -> Tensor:
        """(..., 3)."""
        return torch.stack(torch.broadcast_tensors(self.x, self.y, self.z), -1)

    def __add__(self, other: Vec) -> Vec:
        return Vec(self.x + other.x, self.y + other.y, self.z + other.z)

    def __sub__(self, other: Vec) -> Vec:
        return Vec(self.x - other.x, self.y - other.y, self.z - other.z)

    def __neg__(self) -> Vec:
        return Vec(-self.x, -self.y, -self.z)

    def scale(self, factor: Tensor | float) -> Vec:
        return Vec(self.x * factor, self.y * factor, self.z * factor)

    def times(self, factors: Vec) -> Vec:
        """Componentwise product (a diagonal matrix times the vector)."""
        return Vec(self.x * factors.x, self.y * factors.y, self.z * factors.z)

    def dot(self, other: Vec) -> Tensor:
        return self.x * other.x + self.y * other.y + self.z * other.z

    def cross(self, other: Vec) -> Vec:
        return Vec(
            self.y * other.z - self.z * other.y,
            self.z * other.x - self.x * other.z,
            self.x * other.y - self.y * other.x,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Mat:
    """A 3x3 matrix by its columns (each a `Vec`)."""

    c0: Vec
    c1: Vec
    c2: Vec

    @staticmethod
    def of(tensor: Tensor) -> Mat:
        """The columns of a (..., 3, 3) tensor."""
        return Mat(*(Vec.of(tensor[..., :, k]) for k in range(3)))

    @staticmethod
    def from_columns(c0: Vec, c1: Vec, c2: Vec) -> Mat:
        return Mat(c0, c1, c2)

    def columns(self) -> tuple[Vec, Vec, Vec]:
        return (self.c0, self.c1, self.c2)

    def stack(self) -> Tensor:
        """(..., 3, 3)."""
        return torch.stack([c.stack() for c in self.columns()], -1)

    def apply(self, vector: Vec) -> Vec:
        """self @ vector."""
        return self.c0.scale(vector.x) + self.c1.scale(vector.y) + self.c2.scale(vector.z)

    def apply_transposed(self, vector: Vec) -> Vec:
        """self^T @ vector."""
        return Vec(self.c0.dot(vector), self.c1.dot(vector), self.c2.dot(vector))

    def compose(self, other: Mat) -> Mat:
        """self @ other."""
        return Mat(*(self.apply(c) for c in other.columns()))


# Sums and products where None is an exact zero.
def add(*terms):
    """The sum of vectors (`Vec`) or of scalars ((B,) tensors), None standing for zero."""
    present = [t for t in terms if t is not None]
    if not present:
        return None
    total = present[0]
    for term in present[1:]:
        total = total + term
    return total


def cross(a: Vec | None, b: Vec | None) -> Vec | None:
    return None if a is None or b is None else a.cross(b)


def dot(a: Vec | None, b: Vec | None) -> Tensor | None:
    return None if a is None or b is None else a.dot(b)


def scale(a: Vec | None, factor: Tensor | float) -> Vec | None:
    return None if a is None else a.scale(factor)


def negate(a: Vec | None) -> Vec | None:
    return None if a is None else -a


def spd_inverse(matrix: list[list[Tensor]]) -> list[list[Tensor]]:
    """The inverse of a small symmetric positive definite matrix given by its entries (each
    (B,)), by Gauss-Jordan elimination without pivoting (stable for SPD matrices), as
    `physics.math3d.spd_inverse` computes it under a compiler."""
    size = len(matrix)
    rows = [
        list(matrix[i]) + [None] * size for i in range(size)
    ]  # the augmented [M | I], None = 0 except the identity's ones (below)
    ones = {(i, size + i) for i in range(size)}

    def entry(i, j):
        if (i, j) in ones:
            return 1.0
        return rows[i][j]

    for k in range(size):
        pivot = rows[k][k]
        pivot_row = [None if entry(k, j) is None else entry(k, j) / pivot for j in range(2 * size)]
        new_rows = []
        for i in range(size):
            if i == k:
                new_rows.append(pivot_row)
                continue
            factor = rows[i][k]
            new_rows.append(
                [
                    _minus_product(entry(i, j), factor, pivot_row[j]) if factor is not None
                    else entry(i, j)
                    for j in range(2 * size)
                ]
            )  # fmt: skip
        rows = new_rows
        ones = set()  # every entry is explicit from here on
    return [[rows[i][size + j] for j in range(size)] for i in range(size)]


def _minus_product(value, factor, other):
    """value - factor * other with None as zero (value may be a Python float)."""
    if other is None:
        return value
    product = factor * other
    return -product if value is None else value - product
