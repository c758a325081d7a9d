"""3-vectors and 3x3 matrices held whole, as (B, 3) and (B, 3, 3) tensors, with the interface of
`physics.articulated.lanes`' `Vec` and `Mat`.

The reduced step (`physics.articulated.step`) is written once against that interface. On
lanes (one (B,) tensor per component) a compiler fuses it into a few loops over the worlds; run
eagerly, every component is an operator call of its own. Held whole, one call does a vector's or
a matrix's arithmetic: the eager step makes about a third of the calls, and a large batch reads
each vector's components from one buffer.
"""

from __future__ import annotations

import dataclasses

import torch

Tensor = torch.Tensor


@dataclasses.dataclass(frozen=True, slots=True)
class PackedVec:
    """A 3-vector: ``value`` (B, 3) or (1, 3)."""

    value: Tensor

    @staticmethod
    def of(tensor: Tensor) -> PackedVec:
        """A (..., 3) tensor."""
        return PackedVec(tensor)

    @property
    def x(self) -> Tensor:
        return self.value[..., 0]

    @property
    def y(self) -> Tensor:
        return self.value[..., 1]

    @property
    def z(self) -> Tensor:
        return self.value[..., 2]

    def stack(self) -> Tensor:
        """(..., 3)."""
        return self.value

    def __add__(self, other: PackedVec) -> PackedVec:
        return PackedVec(self.value + other.value)

    def __sub__(self, other: PackedVec) -> PackedVec:
        return PackedVec(self.value - other.value)

    def __neg__(self) -> PackedVec:
        return PackedVec(-self.value)

    def scale(self, factor: Tensor | float) -> PackedVec:
        if isinstance(factor, Tensor):
            return PackedVec(self.value * factor[..., None])
        return PackedVec(self.value * factor)

    def times(self, factors: PackedVec) -> PackedVec:
        """Componentwise product (a diagonal matrix times the vector)."""
        return PackedVec(self.value * factors.value)

    def dot(self, other: PackedVec) -> Tensor:
        return (self.value * other.value).sum(-1)

    def cross(self, other: PackedVec) -> PackedVec:
        return PackedVec(torch.linalg.cross(self.value, other.value))


@dataclasses.dataclass(frozen=True, slots=True)
class PackedMat:
    """A 3x3 matrix: ``value`` (B, 3, 3) or (1, 3, 3)."""

    value: Tensor

    @staticmethod
    def of(tensor: Tensor) -> PackedMat:
        """A (..., 3, 3) tensor."""
        return PackedMat(tensor)

    @staticmethod
    def from_columns(c0: PackedVec, c1: PackedVec, c2: PackedVec) -> PackedMat:
        parts = torch.broadcast_tensors(c0.value, c1.value, c2.value)
        return PackedMat(torch.stack(parts, -1))

    def columns(self) -> tuple[PackedVec, PackedVec, PackedVec]:
        return tuple(PackedVec(self.value[..., :, k]) for k in range(3))

    def stack(self) -> Tensor:
        """(..., 3, 3)."""
        return self.value

    def apply(self, vector: PackedVec) -> PackedVec:
        """self @ vector."""
        return PackedVec((self.value @ vector.value[..., None])[..., 0])

    def apply_transposed(self, vector: PackedVec) -> PackedVec:
        """self^T @ vector."""
        return PackedVec((vector.value[..., None, :] @ self.value)[..., 0, :])

    def compose(self, other: PackedMat) -> PackedMat:
        """self @ other."""
        return PackedMat(self.value @ other.value)
