"""The points a mesh body collides with: vertices of its convex hull, found by support queries."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["support_points"]


def _fibonacci_directions(count: int) -> np.ndarray:
    """(count, 3) unit vectors spread evenly over the sphere (a Fibonacci lattice)."""
    k = np.arange(count) + 0.5
    z = 1.0 - 2.0 * k / count
    radius = np.sqrt(np.clip(1.0 - z * z, 0.0, None))
    azimuth = math.pi * (3.0 - math.sqrt(5.0)) * k
    return np.stack([radius * np.cos(azimuth), radius * np.sin(azimuth), z], -1)


def support_points(vertices: np.ndarray, directions: int = 512) -> np.ndarray:
    """Vertices of the convex hull of ``vertices`` (V, 3): for each of ``directions`` directions
    spread over the sphere, plus the 26 of a cube's faces, edges and corners, the vertex
    farthest along it; each once. Every point returned is a hull vertex; a hull vertex whose
    normal cone no direction falls in is left out (a thin sliver of the hull, at most the
    directions' spacing wide, is then missing from contacts).

    Returns:
        (K, 3) float64, K <= directions + 26.
    """
    vertices = np.asarray(vertices, dtype=np.float64)
    axes = np.array([[i, j, k] for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)
                     if (i, j, k) != (0, 0, 0)], dtype=np.float64)  # fmt: skip
    axes /= np.linalg.norm(axes, axis=1, keepdims=True)
    queries = np.concatenate([axes, _fibonacci_directions(directions)])
    farthest = (vertices @ queries.T).argmax(0)
    return vertices[np.unique(farthest)]
