"""Per-image appearance: an affine colour map per (image, primitive) on the texture's colour.

``color_transform`` T (B|1, K, 3, 4) draws primitive k in image b with the colour
``clamp(T[b, k, :, :3] @ c + T[b, k, :, 3], 0, 1)`` in place of its texture's (or flat)
colour c, before shading. Brightness, contrast about a fixed grey, saturation and a YIQ hue
rotation are all of this form, so one render call draws a batch whose images differ in their
bodies' colours (domain randomisation) from one set of textures.
"""

from __future__ import annotations

import torch

__all__ = ["checked_transform", "transform_colours", "place_colours"]


def checked_transform(transform, B: int, K: int, dtype, device) -> torch.Tensor | None:
    """``transform`` as a (B|1, K, 3, 4) tensor in the render's dtype and device (None stays
    None); a ValueError names the expected shape."""
    if transform is None:
        return None
    if not isinstance(transform, torch.Tensor) or transform.dim() != 4:
        got = tuple(transform.shape) if isinstance(transform, torch.Tensor) else type(transform)
        raise ValueError(
            f"render: color_transform must be a (B|1, K, 3, 4) tensor = ({B}|1, {K}, 3, 4), "
            f"got {got}"
        )
    if transform.shape[0] not in (1, B) or tuple(transform.shape[1:]) != (K, 3, 4):
        raise ValueError(
            f"render: color_transform must have shape (B|1, K, 3, 4) = ({B}|1, {K}, 3, 4) "
            f"(one affine colour map per image and primitive), got {tuple(transform.shape)}"
        )
    return transform.to(dtype=dtype, device=device)


def transform_colours(colour, transform, image, prim) -> torch.Tensor:
    """The mapped colours (S, 3) of texture colours ``colour`` (S, 3) of samples of images
    ``image`` (S,) long and primitives ``prim`` (S,) long under ``transform``
    (B|1, K, 3, 4), clamped to [0, 1]."""
    n_img, K = transform.shape[:2]
    row = prim if n_img == 1 else image * K + prim
    m = transform.reshape(n_img * K, 3, 4).index_select(0, row)  # (S, 3, 4)
    mapped = torch.einsum("sij,sj->si", m[:, :, :3], colour) + m[:, :, 3]
    return mapped.clamp(0.0, 1.0)


def place_colours(bg_channels_first, colour, pix, P: int) -> torch.Tensor:
    """The image (B, 3, P) ``bg_channels_first`` (a fresh (B, 3, P) tensor) with samples
    ``pix`` (S,) (flat ``b * P + p``) set to ``colour`` (S, 3); differentiable in both."""
    B = bg_channels_first.shape[0]
    base = (pix // P) * (3 * P) + pix % P
    index = torch.cat([base, base + P, base + 2 * P])
    flat = bg_channels_first.reshape(-1).index_put((index,), colour.t().reshape(-1))
    return flat.view(B, 3, P)
