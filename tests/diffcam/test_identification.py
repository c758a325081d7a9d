"""Identification from images with `diffcam.fit_scene`: a texture and a camera, on tiny scenes.

The texture test also checks the seen-texel measure of ``examples/texture_identification.py``
(imported from its file): texels no pixel ever samples keep their initial grey.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import diffcam
from diffcam import fit_scene
from diffcam.fit import Runtime, Schedule

ROOT = Path(__file__).resolve().parents[2]


def _example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scene(scene_tools, folder, camera: dict, texture: str, body: dict, timestep=0.05):
    """Write a scene without gravity: one camera, one texture called "skin", one body."""
    data = {
        "world": {"gravity": [0.0, 0.0, 0.0], "timestep": timestep},
        "camera": {"position": [0.0, -3.0, 0.0], "look_at": [0.0, 0.0, 0.0], **camera},
        "textures": {"skin": texture},
        "bodies": [{"texture": "skin", **body}],
    }
    return scene_tools.write_scene(data, folder)


# A textured ball spinning about the camera axis: its front half turns under the pixels, so
# every texel there is sampled with ever different bilinear weights; the back half is never
# seen.
BALL_CAMERA = {"resolution": [24, 24], "fov_y_deg": 20.0, "background": [1.0, 1.0, 1.0]}
BALL = {
    "name": "ball",
    "shape": "sphere",
    "size": 0.45,
    "mass": 1.0,
    "angular_velocity": [0.0, 2.5, 0.0],
    "collide": False,
}
BALL_STEPS = 6


@pytest.mark.slow
def test_texture_recovered_on_seen_texels(tmp_path, scene_tools):
    path = _scene(scene_tools, tmp_path, BALL_CAMERA, "checker.png", BALL)
    texture_example = _example("texture_identification")
    dtype = torch.float64
    truth = torch.rand(3, 6, 8, generator=torch.Generator().manual_seed(0), dtype=dtype)
    observed = diffcam.render_rollout(  # hard silhouettes (not the default antialiased ones)
        path, {"textures.skin": truth}, None, BALL_STEPS, dtype=dtype, edge_softness=0.0
    ).detach()
    grey = torch.full_like(truth, 0.5)
    result = fit_scene(
        path,
        observed,
        {"textures.skin": {"init": grey, "bounds": (0.0, 1.0), "lr": 0.5}},
        dtype=dtype,
        schedule=Schedule(
            iterations=60,
            edge_softness=0.0,  # the observed frames have hard silhouettes
            lr=1e-3,  # the key's own lr (logit units) must win over this one
            tolerance=0.0,
        ),
        runtime=Runtime(progress=False),
    )
    fitted = result.values["textures.skin"]
    cover = texture_example.coverage(path, "skin", steps=BALL_STEPS, size=(6, 8), dtype=dtype)
    seen, touched = cover >= 1.0, cover > 0
    assert 0.3 < float(seen.float().mean()) < 0.8, cover  # the front half, not the back
    assert texture_example.psnr(fitted, truth, seen) >= 30.0
    assert texture_example.psnr(grey, truth, seen) < 15.0  # so the fit did the work
    assert bool((fitted[:, ~touched] == 0.5).all())  # never sampled: never moved
    assert result.history[-1] < 1e-3 * result.history[0]


def test_coverage_counts_pixel_samples(tmp_path, scene_tools):
    """A thin card square to the camera: the total coverage is the number of pixels that show
    it, per frame (each pixel's bilinear weights sum to one)."""
    card = {"name": "card", "shape": "box", "size": [0.6, 0.02, 0.4], "static": True}
    camera = {"resolution": [16, 12], "fov_y_deg": 12.0}
    path = _scene(scene_tools, tmp_path, camera, "checker.png", card)
    cover = _example("texture_identification").coverage(path, "skin", steps=1)
    ids = diffcam.load_scene(path).render_buffers(diffcam.load_scene(path).initial_state())
    shown = int((ids.object_id >= 0).sum())
    assert shown > 20
    assert float(cover.sum()) == pytest.approx(2 * shown, rel=1e-4)  # two frames (steps = 1)


# A smooth texture on a wall that fills the view: no silhouettes, no minified texture, so the
# renderer's camera gradient is that of a smooth image.
WALL_CAMERA = {"resolution": [32, 24], "fov_y_deg": 40.0}
WALL = {
    "name": "wall",
    "shape": "plane",
    "size": [6.0, 4.0],
    "static": True,
    "position": [0.0, 1.0, 0.0],
    "quat": [0.70710678, 0.70710678, 0.0, 0.0],  # facing the camera
}


@pytest.mark.slow
def test_camera_position_and_field_of_view_recovered(tmp_path, scene_tools):
    g = torch.Generator().manual_seed(1)
    coarse = torch.rand(3, 5, 5, generator=g, dtype=torch.float64)
    smooth = torch.nn.functional.interpolate(coarse[None], size=(32, 32), mode="bicubic")[0]
    pixels = (smooth.clamp(0, 1).permute(1, 2, 0).numpy() * 255 + 0.5).astype(np.uint8)
    Image.fromarray(pixels, "RGB").save(tmp_path / "wall.png")
    path = _scene(scene_tools, tmp_path, WALL_CAMERA, "wall.png", WALL)
    dtype = torch.float64
    observed = diffcam.render_rollout(path, None, None, 1, dtype=dtype).detach()

    def overrides(values):  # the camera slides sideways; distance and height are known
        x = values["x"]
        position = torch.stack([x, torch.full_like(x, -3.0), torch.zeros_like(x)])
        return {"camera.position": position, "camera.fov_y_deg": values["fov"]}

    # a wall alone cannot tell distance from field of view, hence the known distance
    result = fit_scene(
        path,
        observed,
        {
            "x": {"init": 0.05, "lr": 0.005},  # m
            "fov": {"init": 42.0, "positive": True, "lr": 0.005},  # 5 % too wide
        },
        dtype=dtype,
        to_overrides=overrides,
        schedule=Schedule(iterations=60, pyramid_levels=2, tolerance=0.0),
        runtime=Runtime(progress=False),
    )
    x, fov = float(result.values["x"]), float(result.values["fov"])
    assert abs(x) < 0.002, x
    assert abs(fov / 40.0 - 1.0) < 0.002, fov
    assert result.history[-1] < 0.01 * result.history[0]


def test_key_learning_rate_is_checked(tmp_path, scene_tools):
    path = _scene(scene_tools, tmp_path, BALL_CAMERA, "checker.png", BALL)
    observed = torch.zeros(2, 3, 24, 24)
    for bad in (0.0, -1.0, math.inf, "fast"):
        with pytest.raises(ValueError, match="'lr' must be a positive number"):
            fit_scene(path, observed, {"world.timestep": {"init": 0.05, "lr": bad}})
