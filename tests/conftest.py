"""Fixtures shared by every test: the floating-point dtypes and the devices to run on.

A test that takes ``dtype`` runs once in float32 and once in float64 (a test that needs other
dtypes parametrises ``dtype`` itself, which takes precedence); one that takes ``device`` runs
on the CPU and, where one is available, on CUDA. ``single_thread``: one torch thread during a
test; ``tiny_pendulum_cart``: the bundled pendulum-cart at a tiny camera resolution (the
library's tests and the task tests use both).

Markers (pyproject.toml): ``slow`` for tests of more than about a second; ``compile`` for tests that
build compiled code (torch.compile graphs, ahead-of-time libraries), which take minutes on a
cold cache (the physics libraries' cache is keyed by the physics source, so any edit there
empties it), and so count as slow too: ``-m "not slow"`` is the quick suite,
``-m compile`` the compiled paths alone.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

DTYPES = [torch.float32, torch.float64]
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(params=DTYPES, ids=["float32", "float64"])
def dtype(request) -> torch.dtype:
    return request.param


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)


@pytest.fixture(autouse=True)
def _fresh_physics_notices(monkeypatch):
    """Each test its own first-build notices and fallbacks (`physics.notices`, once per
    process otherwise): a test that makes a build fail sees its own warning."""
    from physics import notices

    monkeypatch.setattr(notices, "_FALLBACKS", {})
    monkeypatch.setattr(notices, "_ANNOUNCED", set())


@pytest.fixture
def single_thread():
    """One torch thread for the test: tiny frames render fastest on one, and more threads
    thrash on a shared 2-core machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def tiny_pendulum_cart(tmp_path):
    """``make(width, height) -> path``: the bundled pendulum_cart.toml at a tiny resolution (its
    textures still resolve, from the bundled textures)."""
    from diffcam.scene import SCENES_DIR  # (the physics tests load no diffcam)

    def make(width: int = 36, height: int = 12) -> Path:
        text = (SCENES_DIR / "pendulum_cart.toml").read_text(encoding="utf-8")
        assert "resolution = [288, 96]" in text, "the test expects the file's 288 x 96 camera"
        path = tmp_path / f"pendulum_cart_{width}x{height}.toml"
        path.write_text(text.replace("resolution = [288, 96]", f"resolution = [{width}, {height}]"))
        return path

    return make


@pytest.fixture(autouse=True)
def _fresh_fit_tier(monkeypatch):
    """Each test its own fit tier (`diffcam.fit.model.PHYSICS_TIER`, otherwise shared by the
    fits of a process): whether a fit's rollouts compile depends on that fit's own eager
    time, not on the tests a worker ran before it."""
    model = sys.modules.get("diffcam.fit.model")
    if model is not None:
        monkeypatch.setattr(model, "PHYSICS_TIER", model.PhysicsTier())


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("compile") is not None:
            item.add_marker(pytest.mark.slow)
