"""Blobs: the connected parts of each frame's foreground mask, with their area and centroid.

The classical first step of tracking (a threshold against the background, then the centroid of
each connected region): cheap, and with a wide reach, since a body anywhere in the image is
found. Components are labelled by propagating each pixel's largest neighbouring label (8-
connected) with pointer jumping, all frames at once, in torch.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

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
    """(T, H, W) bool -> (T, H, W) int64: each foreground pixel's component label (the largest
    flat index in its 8-connected component), -1 elsewhere."""
    t, h, w = mask.shape
    index = torch.arange(t * h * w, dtype=torch.float64, device=mask.device).view(t, 1, h, w)
    inside = mask[:, None]
    labels = torch.where(inside, index, torch.full_like(index, -1.0))
    while True:
        grown = F.max_pool2d(labels, 3, stride=1, padding=1)
        grown = torch.where(inside, grown, labels)
        flat = grown.view(-1)
        # pointer jumping: a label is a pixel's index, whose own label is at least as large
        jumped = torch.where(inside.view(-1), flat[flat.clamp_min(0).long()], flat)
        jumped = torch.maximum(jumped, flat).view_as(labels)
        if torch.equal(jumped, labels):
            return labels[:, 0].long()
        labels = jumped


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
