"""The background: a colour, a texture mapped over the image, or a pre-rendered layer.

A pre-rendered layer is an image ``background`` at the sampling resolution with its depth
``background_depth`` (e.g. the static scenery of a scene, rendered once). The layer's inverse
depth seeds the nearest-hit test, so a primitive wins a pixel only where it is nearer;
elsewhere the pixel shows the layer (its colour, its depth, object id -1). Soft edges treat
the layer as the opaque back at its depth: primitives behind it get coverage 0.
"""

from __future__ import annotations

import torch

from ..textures import sample_texture


def background_colours(background, B, H, W, dtype, device) -> torch.Tensor:
    """(B|1, H*W, 3) background colours from a colour (3,), colours per image (B, 3), a
    texture (3, Ht, Wt) or an image (B|1, 3, H, W)."""
    if background is None:
        background = torch.full((3,), 0.9, dtype=dtype, device=device)
    if not isinstance(background, torch.Tensor):
        background = torch.as_tensor(background, dtype=dtype, device=device)
    background = background.to(dtype=dtype, device=device)
    if background.dim() == 1:
        return background.view(1, 1, 3).expand(1, H * W, 3)
    if background.dim() == 2:
        if background.shape[0] not in (1, B) or background.shape[1] != 3:
            raise ValueError(
                f"render: a background of one colour per image must have shape (B|1, 3) = "
                f"({B}|1, 3), got {tuple(background.shape)}"
            )
        return background.unsqueeze(1).expand(background.shape[0], H * W, 3)
    if background.dim() == 4:
        if background.shape[0] not in (1, B) or tuple(background.shape[1:]) != (3, H, W):
            raise ValueError(
                f"render: an image background must have shape (B|1, 3, H, W) = "
                f"({B}|1, 3, {H}, {W}) at the sampling resolution (supersample x the "
                f"camera's), got {tuple(background.shape)}"
            )
        return background.permute(0, 2, 3, 1).reshape(background.shape[0], H * W, 3)
    u = (torch.arange(W, dtype=dtype, device=device) + 0.5) / W
    v = 1.0 - (torch.arange(H, dtype=dtype, device=device) + 0.5) / H
    uu, vv = torch.meshgrid(u, v, indexing="xy")  # (H, W)
    return sample_texture(background, uu, vv, wrap="clamp").reshape(1, H * W, 3)


def layer_inverse_depth(background, background_depth, B, H, W, dtype, device):
    """(B|1, H, W) no-grad inverse depth of a pre-rendered layer (0 where it is empty), which
    seeds the nearest-hit test; None without a layer."""
    if background_depth is None:
        return None
    if not isinstance(background, torch.Tensor) or background.dim() != 4:
        raise ValueError(
            "render: background_depth needs the layer's colours as an image background "
            "(B|1, 3, H, W)"
        )
    if (
        not isinstance(background_depth, torch.Tensor)
        or background_depth.dim() != 4
        or background_depth.shape[0] not in (1, B)
        or tuple(background_depth.shape[1:]) != (1, H, W)
    ):
        got = background_depth
        got = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        raise ValueError(
            f"render: background_depth must be a tensor of shape (B|1, 1, H, W) = "
            f"({B}|1, 1, {H}, {W}) at the sampling resolution, got {got}"
        )
    with torch.no_grad():
        d = background_depth.to(dtype=dtype, device=device)[:, 0]
        # inverse depth as the nearest-hit test compares it; 0 (no surface) for d <= 0 or inf
        return torch.where(d > 0, 1.0 / torch.where(d > 0, d, torch.ones_like(d)), 0.0)


def background_image(background, height: int, width: int, dtype, device) -> torch.Tensor:
    """The background a render call of ``height`` x ``width`` samples draws behind the
    primitives, as an image (B|1, 3, height, width): from a colour (3,), colours per image
    (B, 3), a texture (3, Ht, Wt) mapped over the whole image, or an image (returned as
    it is)."""
    if isinstance(background, torch.Tensor) and background.dim() == 4:
        return background
    n = background.shape[0] if isinstance(background, torch.Tensor) and background.dim() == 2 else 1
    flat = background_colours(background, n, height, width, dtype, device)  # (B|1, H*W, 3)
    return flat.transpose(1, 2).reshape(flat.shape[0], 3, height, width)
