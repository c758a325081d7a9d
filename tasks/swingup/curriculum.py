"""`curriculum_ranges`: the start distribution of a training curriculum that widens from near
upright to every angle."""

from __future__ import annotations

import dataclasses
import math

from diffcam.cartpole import StartRanges


def curriculum_ranges(
    ranges: StartRanges, iteration: int, iterations: int, first_theta: float = 0.3
) -> StartRanges:
    """The start distribution of training iteration ``iteration`` (0-based) of a curriculum
    that begins near upright and widens to every angle (a reverse curriculum: the controller
    first learns to balance, then to catch from further down, and last to swing up).

    Over the first ``iterations`` iterations theta is centred on upright (pi) with a half-width
    growing linearly from ``first_theta`` to pi (at pi every angle, the hanging start
    included); from then on ``ranges`` as given. x, x_dot and theta_dot keep ``ranges``'.
    ``iterations`` 0: no curriculum.
    """
    if iteration >= iterations:
        return ranges
    half = first_theta + (math.pi - first_theta) * iteration / iterations
    return dataclasses.replace(ranges, theta=half, theta_centre=math.pi)
