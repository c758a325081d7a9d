"""A plain, hand-written PyTorch renderer for textured rectangles: the speed baseline.

What a straightforward implementation does: world-frame rays for every pixel, ray-rectangle
intersection for every primitive with autograd, a masked nearest hit (running ``where``), and
``F.grid_sample`` of every primitive's texture at every pixel. Same conventions as diffcam
(OpenCV camera axes, half-pixel centres, v up), so its images match ``diffcam.render`` for
rectangles; ``benchmarks/bench_render.py`` times it beside diffcam.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def plain_render(fx, fy, cx, cy, Rc, tc, H, W, R, pos, half, textures, background):
    """Render textured rectangles.

    Args:
        fx, fy, cx, cy: (B,) intrinsics (pixels, half-pixel convention).
        Rc, tc: (B, 3, 3), (B, 3) world_from_camera.
        H, W: image size.
        R, pos: (B, K, 3, 3), (B, K, 3) world_from_body of each rectangle (normal body +z).
        half: (K, 2) half extents (m).
        textures: list of K (3, Ht, Wt) tensors.
        background: (3,) colour.

    Returns:
        (B, 3, H, W) image.
    """
    B, K = pos.shape[:2]
    xs = torch.arange(W, dtype=pos.dtype) + 0.5
    ys = torch.arange(H, dtype=pos.dtype) + 0.5
    yy, xx = torch.meshgrid(ys, xs, indexing="ij")
    d_cam = torch.stack(
        [
            (xx - cx.view(B, 1, 1)) / fx.view(B, 1, 1),
            (yy - cy.view(B, 1, 1)) / fy.view(B, 1, 1),
            torch.ones(B, H, W, dtype=pos.dtype),
        ],
        -1,
    )
    d = torch.einsum("bij,bhwj->bhwi", Rc, d_cam)  # world directions (t = depth)
    best = torch.full((B, H, W), float("inf"), dtype=pos.dtype)
    image = background.view(1, 3, 1, 1).expand(B, 3, H, W)
    for k in range(K):
        o_l = torch.einsum("bji,bj->bi", R[:, k], tc - pos[:, k])  # R^T (o - p)
        d_l = torch.einsum("bji,bhwj->bhwi", R[:, k], d)
        t = -o_l[:, 2].view(B, 1, 1) / d_l[..., 2]
        x = o_l[:, 0].view(B, 1, 1) + t * d_l[..., 0]
        y = o_l[:, 1].view(B, 1, 1) + t * d_l[..., 1]
        hit = (t > 0) & (x.abs() <= half[k, 0]) & (y.abs() <= half[k, 1])
        closer = hit & (t < best)
        best = torch.where(closer, t, best)
        # grid_sample: x in [-1, 1] left to right, y in [-1, 1] top to bottom (v up -> flip)
        grid = torch.stack([x / half[k, 0], -y / half[k, 1]], -1)
        col = F.grid_sample(
            textures[k].unsqueeze(0).expand(B, -1, -1, -1),
            grid,
            mode="bilinear",
            padding_mode="border",
            align_corners=False,
        )
        image = torch.where(closer.unsqueeze(1), col, image)
    return image
