"""Blobs: the connected parts of each frame's foreground mask, with their area and centroid.

The classical first step of tracking (a threshold against the background, then the centroid of
each connected region): cheap, and with a wide reach, since a body anywhere in the image is
found. Components (8-connected) are labelled on the foreground pixels alone, all frames at
once, in torch (`component_labels`).
"""

from __future__ import annotations

import dataclasses

import torch

__all__ = ["Blobs", "find_blobs", "component_labels"]


@dataclasses.dataclass(frozen=True)
class Blobs:
    """Up to K blobs per frame, largest first, padded.

    Attributes:
        centre: (T, K, 2) centroids (x, y) in continuous pixel coordinates (a pixel (i, j)
            covers x in [j, j + 1], y in [i, i + 1]).
        area: (T, K) pixels; 0 where a frame has fewer than K blobs.
        count: (T,) blobs per frame (at most K).
        labels: (T, H, W) int16, each pixel's blob (its index k in that frame), -1 for none.
    """

    centre: torch.Tensor
    area: torch.Tensor
    count: torch.Tensor
    labels: torch.Tensor

    def pixels_of(self, chosen: torch.Tensor) -> torch.Tensor:
        """(T, 1, H, W) bool: the pixels of the blobs ``chosen`` (T, D) long (-1 = none)."""
        hit = torch.zeros_like(self.labels, dtype=torch.bool)
        for d in range(chosen.shape[1]):
            pick = chosen[:, d, None, None]
            hit |= (self.labels == pick) & (pick >= 0)
        return hit[:, None]

    @property
    def radius(self) -> torch.Tensor:
        """(T, K) the radius (px) of a disc of each blob's area."""
        return (self.area / torch.pi).sqrt()


def component_labels(mask: torch.Tensor) -> torch.Tensor:
    """(T, H, W) bool -> (T, H, W) int64: each foreground pixel's 8-connected component within
    its frame, labelled by the flat index (t * H * W + row * W + column) of its first pixel;
    -1 elsewhere.

    On the foreground pixels alone: the edges between neighbouring ones, then minimum-label
    propagation along the edges with pointer jumping, which settles in a few rounds."""
    t, h, w = mask.shape
    points = torch.nonzero(mask)  # (n, 3) in flat order
    out = torch.full((t, h, w), -1, dtype=torch.long, device=mask.device)
    if points.shape[0] == 0:
        return out
    node = torch.full((t, h, w), -1, dtype=torch.long, device=mask.device)
    node[mask] = torch.arange(points.shape[0], device=mask.device)
    frame, row, col = points.unbind(1)
    edges = []
    for dy, dx in ((0, 1), (1, -1), (1, 0), (1, 1)):  # half the 8 neighbours: each edge once
        r, c = row + dy, col + dx
        inside = (r < h) & (c >= 0) & (c < w)
        other = torch.full_like(row, -1)
        other[inside] = node[frame[inside], r[inside], c[inside]]
        keep = other >= 0
        edges.append(torch.stack([torch.nonzero(keep).flatten(), other[keep]]))
    a, b = torch.cat(edges, 1)
    labels = torch.arange(points.shape[0], device=mask.device)
    while True:
        low = torch.minimum(labels[a], labels[b])
        hooked = labels.scatter_reduce(0, a, low, "amin").scatter_reduce(0, b, low, "amin")
        while True:  # pointer jumping: a label's own label is no larger
            jumped = hooked[hooked]
            if torch.equal(jumped, hooked):
                break
            hooked = jumped
        if torch.equal(hooked, labels):
            break
        labels = hooked
    flat = (frame * h + row) * w + col
    out[mask] = flat[labels]
    return out


def find_blobs(mask: torch.Tensor, most: int = 16, min_area: int = 2) -> Blobs:
    """The connected components of each frame's mask.

    Args:
        mask: (T, 1, H, W) or (T, H, W) bool foreground (e.g. `imaging.foreground_mask`).
        most: K, the largest blobs kept per frame.
        min_area: blobs smaller than this (pixels) are dropped.

    Returns:
        `Blobs` on the mask's device.
    """
    mask = mask.reshape(mask.shape[0], *mask.shape[-2:]).bool()
    t, h, w = mask.shape
    device = mask.device
    centre = torch.zeros(t, most, 2, dtype=torch.float64, device=device)
    area = torch.zeros(t, most, dtype=torch.float64, device=device)
    count = torch.zeros(t, dtype=torch.long, device=device)
    ranks = torch.full((t, h, w), -1, dtype=torch.int16, device=device)
    if not bool(mask.any()):
        return Blobs(centre, area, count, ranks)
    labels = component_labels(mask)
    picked = labels[mask]
    unique, inverse = torch.unique(picked, return_inverse=True)
    pixels = torch.nonzero(mask)  # (n, 3) frame, row, column
    sizes = torch.bincount(inverse, minlength=len(unique)).double()
    xs = torch.bincount(inverse, pixels[:, 2].double() + 0.5, len(unique)) / sizes
    ys = torch.bincount(inverse, pixels[:, 1].double() + 0.5, len(unique)) / sizes
    frame = torch.div(unique, h * w, rounding_mode="floor")
    # largest first within each frame: sort by (frame, -area); too small ones rank last
    small = sizes < min_area
    order = torch.argsort(frame.double() * (h * w + 1) - torch.where(small, 0.0, sizes))
    starts = torch.searchsorted(frame[order], torch.arange(t, device=device))
    rank = torch.empty_like(order)
    rank[order] = torch.arange(len(order), device=device) - starts[frame[order]]
    kept = (rank < most) & ~small
    area[frame[kept], rank[kept]] = sizes[kept]
    centre[frame[kept], rank[kept]] = torch.stack([xs[kept], ys[kept]], -1)
    count = torch.bincount(frame[kept], minlength=t).clamp_max(most)
    ranks[mask] = torch.where(kept, rank, -1)[inverse].to(torch.int16)
    return Blobs(centre, area, count, ranks)
