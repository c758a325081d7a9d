"""Image-space randomisation: colour jitter and sensor noise, as differentiable torch ops.

Not torchvision: brightness, contrast and saturation follow
``torchvision.transforms.v2.functional``'s ``adjust_brightness`` / ``adjust_contrast`` /
``adjust_saturation`` formulas (ITU-R 601 grey weights, clamp to [0, 1] after each), in plain
torch, because the torchvision wheel available here would replace the CPU torch. The hue
shift differs: a rotation of the chroma plane in YIQ space (linear, so smooth in the pixels)
instead of torchvision's HSV shift (piecewise), and the four operations run in a fixed order
(brightness, contrast, saturation, hue) instead of ColorJitter's random one.

Gradients: brightness, contrast, saturation and hue are affine in the pixels (zero gradient
only where a clamp to [0, 1] saturates); the noise is reparameterised
(``x + sqrt(std^2 + shot * x) * eps`` with a given or drawn ``eps`` per pixel).
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "GREY_WEIGHTS",
    "color_jitter",
    "color_jitter_fused",
    "hue_matrix",
    "jitter_matrix",
    "sensor_noise",
    "to_grey",
]

# ITU-R 601 luma weights, as torchvision's rgb_to_grayscale
GREY_WEIGHTS = (0.2989, 0.587, 0.114)
# RGB -> YIQ (FCC NTSC); hue rotates the (I, Q) plane
RGB_TO_YIQ = (
    (0.299, 0.587, 0.114),
    (0.595716, -0.274453, -0.321263),
    (0.211456, -0.522591, 0.311135),
)


def _per_image(value, like: torch.Tensor) -> torch.Tensor:
    """A number, () or (B,) tensor as (B|1, 1, 1, 1) in ``like``'s dtype and device."""
    t = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    return t.reshape(-1, *([1] * (like.dim() - 1)))


def to_grey(x: torch.Tensor) -> torch.Tensor:
    """Grey (ITU-R 601) of colours along dim -3 ((..., 3, H, W)) or 0 ((3,) or (3, n))."""
    dim = -3 if x.dim() >= 3 else 0
    trailing = 2 if x.dim() >= 3 else x.dim() - 1
    w = torch.tensor(GREY_WEIGHTS, dtype=x.dtype, device=x.device).view(3, *([1] * trailing))
    return (x * w).sum(dim, keepdim=True)


def hue_matrix(turns: torch.Tensor) -> torch.Tensor:
    """(B, 3, 3) RGB -> RGB matrices rotating YIQ's chroma plane by ``turns`` (B,)."""
    yiq = torch.tensor(RGB_TO_YIQ, dtype=turns.dtype, device=turns.device)
    a = 2 * math.pi * turns
    c, s = torch.cos(a), torch.sin(a)
    one, zero = torch.ones_like(a), torch.zeros_like(a)
    rot = torch.stack(
        [
            torch.stack([one, zero, zero], -1),
            torch.stack([zero, c, -s], -1),
            torch.stack([zero, s, c], -1),
        ],
        -2,
    )
    return torch.linalg.inv(yiq) @ rot @ yiq


def color_jitter(
    images: torch.Tensor, brightness=None, contrast=None, saturation=None, hue=None
) -> torch.Tensor:
    """Brightness, contrast, saturation, then hue of images (B, 3, H, W) in [0, 1], each
    value a number or a (B,) tensor (per image); None skips that operation (so all None
    returns ``images`` itself). Differentiable in ``images`` (and in the values).

    brightness: ``x * f``; contrast: blend with the image's mean grey; saturation: blend with
    the pixel's grey (torchvision's adjust_* formulas, clamped to [0, 1] after each); hue: a
    rotation by ``hue`` turns of YIQ's chroma plane (not torchvision's HSV shift)."""
    x = images
    if brightness is not None:
        x = (x * _per_image(brightness, x)).clamp(0.0, 1.0)
    if contrast is not None:
        c = _per_image(contrast, x)
        mean = to_grey(x).mean(dim=(-3, -2, -1), keepdim=True)
        x = (c * x + (1 - c) * mean).clamp(0.0, 1.0)
    if saturation is not None:
        s = _per_image(saturation, x)
        x = (s * x + (1 - s) * to_grey(x)).clamp(0.0, 1.0)
    if hue is not None:
        turns = torch.as_tensor(hue, dtype=x.dtype, device=x.device).reshape(-1)
        m = hue_matrix(turns)  # (B|1, 3, 3)
        x = torch.einsum("bij,bjhw->bihw", m.expand(x.shape[0], 3, 3), x).clamp(0.0, 1.0)
    return x


def jitter_matrix(brightness, contrast, saturation, hue, mean_grey=None) -> torch.Tensor:
    """(..., 3, 4) affine colour map ``x -> M[:, :3] @ x + M[:, 3]`` of `color_jitter`'s four
    operations composed (brightness, contrast, saturation, hue), without the clamps between
    them. Each value a (...,) tensor; ``mean_grey`` (...,): the grey the contrast blends
    towards, taken before the brightness (it is scaled by it); None: each colour's own grey
    (a flat colour's contrast)."""
    dtype, device = brightness.dtype, brightness.device
    eye = torch.eye(3, dtype=dtype, device=device)
    w = torch.tensor(GREY_WEIGHTS, dtype=dtype, device=device)
    b, c, s = (x[..., None, None] for x in (brightness, contrast, saturation))
    if mean_grey is None:  # towards the colour's own grey: linear
        lin_c, off_c = c * eye + (1 - c) * w, torch.zeros_like(b[..., 0]).expand(*b.shape[:-2], 3)
    else:
        lin_c = c * eye.expand(c.shape[:-2] + (3, 3))
        off_c = ((1 - c) * b * mean_grey[..., None, None])[..., 0].expand(*b.shape[:-2], 3)
    lin_s = s * eye + (1 - s) * w  # rows: s e_i + (1 - s) w
    lin_h = hue_matrix(hue.reshape(-1)).view(*hue.shape, 3, 3)
    hs = lin_h @ lin_s
    lin = hs @ lin_c * b
    off = (hs @ off_c.unsqueeze(-1)).squeeze(-1)
    return torch.cat([lin, off.unsqueeze(-1)], -1)


def color_jitter_fused(images: torch.Tensor, brightness, contrast, saturation, hue):
    """`color_jitter` of images (B, 3, H, W) as one affine colour map per image
    (`jitter_matrix`) and one clamp to [0, 1] at the end, instead of a clamp after each
    operation: the same where no intermediate colour leaves [0, 1], and three passes over
    the pixels instead of about fifteen. Values: (B,) tensors (or numbers); the contrast's
    mean grey is each image's (differentiable)."""
    B = images.shape[0]

    def per_image(v):
        return torch.as_tensor(v, dtype=images.dtype, device=images.device).expand(B)

    mean = to_grey(images).mean(dim=(-3, -2, -1))
    m = jitter_matrix(*(per_image(v) for v in (brightness, contrast, saturation, hue)), mean)
    mapped = torch.baddbmm(m[:, :, 3:], m[:, :, :3], images.reshape(B, 3, -1))
    return mapped.clamp(0.0, 1.0).view(images.shape)


def sensor_noise(
    images: torch.Tensor, std, shot, eps: torch.Tensor | None = None, generator=None
) -> torch.Tensor:
    """Per-pixel sensor noise: ``x + sqrt(std^2 + shot * x) * eps``, clamped to [0, 1].

    std: read noise (image units), shot: variance per unit of signal (Poisson-like), each a
    number or (B,) tensor. eps: standard normal noise shaped like ``images`` (drawn from
    ``generator`` if None). Reparameterised: differentiable in ``images``."""
    if eps is None:
        eps = torch.randn(images.shape, generator=generator, dtype=images.dtype)
        eps = eps.to(images.device)
    std, shot = _per_image(std, images), _per_image(shot, images)
    variance = std * std + shot * images.clamp(min=0.0)
    return (images + variance.clamp(min=1e-24).sqrt() * eps).clamp(0.0, 1.0)
