"""Image formation of a real camera around the ideal pinhole render: response, lens, background.

Pure, batched, differentiable tensor functions; they know nothing of scenes or physics.

Conventions (as in `diffcam.camera`): images are (B, C, H, W) floats in [0, 1], row 0 at the top;
pixel (row i, column j) covers x in [j, j+1], y in [i, i+1] and its centre is (j + 0.5, i + 0.5);
intrinsics fx, fy, cx, cy are in pixels in that convention (an OpenCV calibration's cx, cy plus
0.5). Scalar parameters are Python floats or tensors of shape () or (B,) (one per image) and may
require grad; dtype and device follow the image (or points) argument.

* Camera response: ``apply_response`` (linear radiance -> camera output) and ``invert_response``.
* Lens distortion, OpenCV's (k1, k2, p1, p2, k3) model: ``distort_normalized``,
  ``undistort_normalized`` (Newton solve, implicit-function gradient),
  ``distortion_map`` and ``distort_image`` (ideal pinhole image -> distorted image), on a
  gather-based ``sample_bilinear`` whose backward is an index-add (deterministic, unlike
  ``F.grid_sample``'s atomic CUDA backward).
* ``composite_over_plate``: rendered objects over an observed background in linear light.
* From video frames (no gradient): ``clean_plate``, ``noise_level``, ``foreground_mask``,
  ``shadow_mask``, ``mean_color``.
"""

from .compositing import composite_over_plate
from .distortion import distort_normalized, undistort_normalized
from .parameters import Param
from .response import apply_response, invert_response
from .video_statistics import clean_plate, foreground_mask, mean_color, noise_level, shadow_mask
from .warping import distort_image, distortion_map, sample_bilinear

__all__ = [
    "Param",
    "apply_response",
    "invert_response",
    "distort_normalized",
    "undistort_normalized",
    "distortion_map",
    "sample_bilinear",
    "distort_image",
    "composite_over_plate",
    "clean_plate",
    "noise_level",
    "foreground_mask",
    "shadow_mask",
    "mean_color",
]
