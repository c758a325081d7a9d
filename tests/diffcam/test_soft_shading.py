"""Soft edges with lighting: the shading of fringe samples (rays that miss) is smooth.

For a ray that misses a curved solid, the soft-edge path shades the point of closest approach,
where the outward normal is perpendicular to the ray; a two-sided "face the camera" flip there
turned on rounding noise and made the image jump under micrometre moves.
"""

from __future__ import annotations

import pytest
import torch

import diffcam


@pytest.mark.parametrize("static_cache", [True, False])
def test_lit_soft_render_is_smooth_and_matches_finite_differences(tiny_pendulum_cart, static_cache):
    scene = diffcam.load_scene(tiny_pendulum_cart(36, 12), dtype=torch.float64)
    state = scene.initial_state()
    pole = scene.body_names.index("pole")
    weights = torch.randn(
        1, 3, 12, 36, generator=torch.Generator().manual_seed(0), dtype=torch.float64
    )

    def loss(dx):
        position = state.position.clone()
        position[0, pole, 0] = position[0, pole, 0] + dx
        image = scene.render(
            state.replace(position=position), edge_softness=1.0, static_cache=static_cache
        )
        return (image * weights).sum()

    x = torch.zeros((), dtype=torch.float64, requires_grad=True)
    (grad,) = torch.autograd.grad(loss(x), x)
    h = 1e-6
    with torch.no_grad():
        fd = (loss(h) - loss(-h)) / (2 * h)
        wiggle = max(abs(float(loss(k * 1e-6) - loss(0.0))) for k in (-2, -1, 1, 2))
    assert wiggle < 1e-4  # a 2 um move changes the weighted image by ~ grad * 2e-6 only
    assert float(grad) == pytest.approx(float(fd), rel=1e-4, abs=1e-8)
