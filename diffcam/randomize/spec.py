"""The table of `Randomization`'s numeric fields: kind, identity, bounds and meaning.

Shared by the checks (`config`) and the draws (`sampling`), so both read one definition.
"""

from __future__ import annotations

import math

Range = tuple[float, float]  # (lo, hi)

# field -> (kind, identity, lower bound, upper bound, meaning); kind "range": (lo, hi) drawn
# uniformly; "max": a number m >= 0, drawn uniformly in [-m, m] (or an angle in [0, m]);
# "prob": a probability.
FIELD_SPECS: dict[str, tuple] = {
    "texture_brightness": ("range", 1.0, 0.0, math.inf, "a factor on the texture's colours"),
    "texture_contrast": ("range", 1.0, 0.0, math.inf, "a factor about the texture's mean grey"),
    "texture_saturation": ("range", 1.0, 0.0, math.inf, "a factor; 0 = grey"),
    "texture_hue": ("range", 0.0, -0.5, 0.5, "a hue shift in turns"),
    "procedural_textures": ("prob", 0.0, 0.0, 1.0, "a probability per body"),
    "ambient_scale": ("range", 1.0, 0.0, math.inf, "a factor on [light] ambient"),
    "intensity_scale": ("range", 1.0, 0.0, math.inf, "a factor on [light] intensity"),
    "light_direction_deg": ("max", 0.0, 0.0, 180.0, "degrees the light may tilt"),
    "camera_translation": ("max", 0.0, 0.0, math.inf, "metres per world axis"),
    "camera_rotation_deg": ("max", 0.0, 0.0, 180.0, "degrees about each camera axis"),
    "focal_scale": ("range", 1.0, 1e-6, math.inf, "a factor on fx and fy"),
    "principal_point_px": ("max", 0.0, 0.0, math.inf, "pixels per image axis"),
    "background_offset": ("max", 0.0, 0.0, 1.0, "added to each background channel"),
    "procedural_background": ("prob", 0.0, 0.0, 1.0, "a probability per episode"),
    "brightness": ("range", 1.0, 0.0, math.inf, "a factor on the image"),
    "contrast": ("range", 1.0, 0.0, math.inf, "a factor about the image's mean grey"),
    "saturation": ("range", 1.0, 0.0, math.inf, "a factor; 0 = grey"),
    "hue": ("range", 0.0, -0.5, 0.5, "a hue shift in turns"),
    "noise_std": ("range", 0.0, 0.0, math.inf, "the read noise's std (image units)"),
    "shot_noise": ("range", 0.0, 0.0, math.inf, "variance per unit of signal"),
}
