"""Camera response: linear radiance -> camera output (`apply_response`) and back
(`invert_response`)."""

from __future__ import annotations

import torch

from .._safe import tiny
from .parameters import Param, is_plain, per_image


def _safe_pow(x: torch.Tensor, p: Param) -> torch.Tensor:
    """``x ** p`` for x >= 0 with finite gradients (in x and p) everywhere.

    Below a tiny ``eps`` the power is replaced by its chord ``x * eps ** (p - 1)`` (continuous
    at eps, 0 at 0), so neither ``p x^(p-1)`` nor ``x^p log x`` is evaluated at 0.
    """
    eps = tiny(x)
    big = x > eps
    xs = torch.where(big, x, torch.ones_like(x))
    return torch.where(big, xs**p, x * eps ** (p - 1.0))


# ---------------------------------------------------------------------------- response
def apply_response(
    x: torch.Tensor, gain: Param = 1.0, offset: Param = 0.0, gamma: Param = 1.0
) -> torch.Tensor:
    """Camera response: linear radiance -> camera output, ``offset + gain * x ** (1 / gamma)``.

    Args:
        x: (B, ...) linear radiance, >= 0 (e.g. (B, C, H, W)).
        gain: () or (B,) scale of the output (> 0).
        offset: () or (B,) black level, in output units.
        gamma: () or (B,) encoding exponent (> 0); 2.2 for an sRGB-like curve.

    Returns:
        (B, ...) camera output (nominally in [0, 1]). Parameters left at their plain Python
        defaults cost nothing; with all of them, ``x`` itself is returned.
    """
    y = x
    if not is_plain(gamma, 1.0):
        y = _safe_pow(y, 1.0 / per_image(gamma, x))
    if not is_plain(gain, 1.0):
        y = y * per_image(gain, x)
    if not is_plain(offset, 0.0):
        y = y + per_image(offset, x)
    return y


def invert_response(
    y: torch.Tensor, gain: Param = 1.0, offset: Param = 0.0, gamma: Param = 1.0
) -> torch.Tensor:
    """Inverse camera response: output -> linear radiance, ``clamp((y - offset) / gain, 0) ** gamma``.

    Args:
        y: (B, ...) camera output.
        gain, offset, gamma: () or (B,), as in `apply_response`.

    Returns:
        (B, ...) linear radiance >= 0 (outputs below the black level map to 0). With all
        parameters at their plain defaults ``y`` itself is returned (no clamp).
    """
    if is_plain(gain, 1.0) and is_plain(offset, 0.0) and is_plain(gamma, 1.0):
        return y
    x = y
    if not is_plain(offset, 0.0):
        x = x - per_image(offset, y)
    if not is_plain(gain, 1.0):
        x = x / per_image(gain, y)
    x = x.clamp(min=0.0)
    if not is_plain(gamma, 1.0):
        x = _safe_pow(x, per_image(gamma, y))
    return x
