"""The cached static layer is read, never written: renders after the first stay correct."""

from __future__ import annotations

import pytest
import torch

import diffcam
from diffcam.scene import SCENES_DIR

SCENE = SCENES_DIR / "pendulum_cart.toml"


@pytest.mark.parametrize("batch", [1, 3])
def test_repeated_cached_renders_equal_uncached_ones_and_backpropagate(batch):
    scene = diffcam.load_scene(SCENE, batch_size=batch, dtype=torch.float64)
    state = scene.initial_state()
    pole = scene.body_names.index("pole")
    for shift in (0.0, 0.3, -0.4):  # the pole moves between renders over one cached layer
        position = state.position.clone()
        position[:, pole, 0] += shift
        position.requires_grad_(True)
        moved = state.replace(position=position)
        cached = scene.render(moved)
        reference = scene.render(moved, static_cache=False)
        torch.testing.assert_close(cached, reference, rtol=0, atol=1e-12)
        (grad,) = torch.autograd.grad(cached.square().sum(), position)
        assert torch.isfinite(grad).all() and grad[:, pole].abs().sum() > 0
