"""Seeded procedural textures for randomisation (stripes, checks or blobs of two random
colours)."""

from __future__ import annotations

import torch

__all__ = ["procedural_texture"]


def procedural_texture(seed: int, size: int = 32, dtype=torch.float32, device=None):
    """A (3, size, size) texture in [0, 1] from ``seed``: stripes, checks or smooth blobs
    (bilinearly upsampled random values) of two random colours; seamless under repeat for
    stripes and checks."""
    g = torch.Generator().manual_seed(int(seed))
    kind = int(torch.randint(0, 3, (1,), generator=g))
    a, b = torch.rand(3, generator=g, dtype=torch.float64), torch.rand(3, generator=g)
    b = b.to(torch.float64)
    n = int(torch.randint(2, 6, (1,), generator=g))
    k = torch.arange(size, dtype=torch.float64)
    if kind == 0:  # stripes, horizontal or vertical
        band = ((k * n / size).floor() % 2).view(1, size)
        mask = band.expand(size, size)
        if bool(torch.rand(1, generator=g) < 0.5):
            mask = mask.t()
    elif kind == 1:  # checks
        band = (k * n / size).floor()
        mask = (band.view(size, 1) + band.view(1, size)) % 2
    else:  # blobs
        coarse = torch.rand((1, 1, n + 1, n + 1), generator=g, dtype=torch.float64)
        mask = torch.nn.functional.interpolate(
            coarse, size=(size, size), mode="bilinear", align_corners=True
        )[0, 0]
    tex = a.view(3, 1, 1) * mask + b.view(3, 1, 1) * (1 - mask)
    return tex.to(dtype=dtype, device=device).contiguous()
