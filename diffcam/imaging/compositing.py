"""`composite_over_plate`: rendered objects over an observed background in linear light."""

from __future__ import annotations

import torch

from .parameters import Param, is_plain
from .response import apply_response, invert_response


def composite_over_plate(
    color: torch.Tensor,
    coverage: torch.Tensor,
    plate: torch.Tensor,
    gain: Param = 1.0,
    offset: Param = 0.0,
    gamma: Param = 1.0,
) -> torch.Tensor:
    """Rendered objects over an observed background, blended in linear light.

    ``apply_response(color + (1 - coverage) * invert_response(plate))``, plus
    ``(1 - coverage) * residual`` where ``residual = plate - apply_response(invert_response(plate))``
    is the part of the plate the response cannot produce (values below the black level, and
    rounding): uncovered pixels reproduce the plate whatever the response parameters.

    Args:
        color: (B, 3, H, W) premultiplied linear radiance of the objects (the render over black;
            0 where coverage is 0).
        coverage: (B, 1, H, W) in [0, 1], 1 where objects fully cover the pixel.
        plate: (B|1, 3, H, W) observed background, camera-output units.
        gain, offset, gamma: () or (B,) response, as in `apply_response`.

    Returns:
        (B, 3, H, W) camera output.
    """
    uncovered = 1.0 - coverage
    if is_plain(gain, 1.0) and is_plain(offset, 0.0) and is_plain(gamma, 1.0):
        return color + uncovered * plate
    radiance = invert_response(plate, gain, offset, gamma)
    residual = plate - apply_response(radiance, gain, offset, gamma)
    out = apply_response(color + uncovered * radiance, gain, offset, gamma)
    return out + uncovered * residual
