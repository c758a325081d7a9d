"""A bounding volume hierarchy over a mesh's triangles, built once (numpy, median split) and
refitted to moved vertices in torch.

Nodes are numbered breadth first, so each level is a contiguous range and a refit goes level
by level from the leaves up with a few tensor ops per level. A leaf holds at most
``leaf_size`` triangles, listed in a padded (nodes, leaf_size) table (-1: none) that the
traversal (`raycast`) gathers from directly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

__all__ = ["BVH", "build_bvh", "refit"]


@dataclass(frozen=True)
class BVH:
    """The hierarchy of one mesh (N nodes).

    Attributes:
        lo, hi: (N, 3) float bounds of each node's triangles (mesh frame, m).
        children: (N, 2) long child nodes of an internal node; -1 for a leaf.
        leaf_faces: (N, leaf_size) long faces of a leaf (-1 padding; all -1 for an internal
            node).
        levels: (L + 1,) Python ints: level i is nodes ``levels[i]:levels[i + 1]``.
        leaf_size: most triangles per leaf.
    """

    lo: torch.Tensor
    hi: torch.Tensor
    children: torch.Tensor
    leaf_faces: torch.Tensor
    levels: tuple
    leaf_size: int

    @property
    def num_nodes(self) -> int:
        return int(self.children.shape[0])


def build_bvh(corners: torch.Tensor, leaf_size: int = 8) -> BVH:
    """The `BVH` of triangles ``corners`` (F, 3, 3) (face, corner, xyz; m): each node's
    triangles are split at the median of their centroids along the longest axis of the
    centroids' bounds, until at most ``leaf_size`` remain. No gradient."""
    tri = corners.detach().cpu().to(torch.float64).numpy()
    centroid = tri.mean(1)
    n_faces = tri.shape[0]
    # breadth first: each level's nodes, as (face indices) lists
    level = [np.arange(n_faces)]
    nodes, kids, levels = [], [], [0]
    while level:
        next_level = []
        base = len(nodes) + len(level)  # the first node number of the next level
        for faces in level:
            nodes.append(faces)
            if faces.size <= leaf_size:
                kids.append((-1, -1))
                continue
            c = centroid[faces]
            axis = int(np.argmax(c.max(0) - c.min(0)))
            order = faces[np.argsort(c[:, axis], kind="stable")]
            half = order.size // 2
            kids.append((base + len(next_level), base + len(next_level) + 1))
            next_level += [order[:half], order[half:]]
        levels.append(len(nodes))
        level = next_level
    n = len(nodes)
    table = np.full((n, leaf_size), -1, dtype=np.int64)
    for i, faces in enumerate(nodes):
        if kids[i][0] < 0:
            table[i, : faces.size] = faces
    device = corners.device
    children = torch.tensor(kids, dtype=torch.long, device=device)
    leaf_faces = torch.from_numpy(table).to(device)
    zeros = torch.zeros(n, 3, dtype=corners.dtype, device=device)
    bvh = BVH(zeros, zeros, children, leaf_faces, tuple(levels), leaf_size)
    return refit(bvh, corners)


def refit(bvh: BVH, corners: torch.Tensor) -> BVH:
    """The same hierarchy with bounds recomputed for triangles ``corners`` (F, 3, 3) (the
    mesh the BVH was built for, vertices moved): leaves from their triangles, then each
    level from the one below. No gradient; the dtype and device of ``corners``."""
    with torch.no_grad():
        c = corners.detach()
        tlo, thi = c.amin(1), c.amax(1)  # (F, 3)
        big = torch.finfo(c.dtype).max
        pad = bvh.leaf_faces < 0
        idx = bvh.leaf_faces.clamp(min=0)
        lo = torch.where(pad.unsqueeze(-1), big, tlo[idx]).amin(1)  # (N, 3); internal: big
        hi = torch.where(pad.unsqueeze(-1), -big, thi[idx]).amax(1)
        kids = bvh.children
        for i in range(len(bvh.levels) - 2, -1, -1):  # levels from the deepest up
            a, b = bvh.levels[i], bvh.levels[i + 1]
            k = kids[a:b]
            internal = k[:, 0] >= 0
            if not bool(internal.any()):
                continue
            rows = internal.nonzero().squeeze(1) + a
            k = kids[rows]
            lo[rows] = torch.minimum(lo[k[:, 0]], lo[k[:, 1]])
            hi[rows] = torch.maximum(hi[k[:, 0]], hi[k[:, 1]])
    return BVH(lo, hi, bvh.children, bvh.leaf_faces, bvh.levels, bvh.leaf_size)
