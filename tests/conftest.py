"""Fixtures shared by every test: the floating-point dtypes and the devices to run on.

A test that takes ``dtype`` runs once in float32 and once in float64 (a test that needs other
dtypes parametrises ``dtype`` itself, which takes precedence); one that takes ``device`` runs
on the CPU and, where one is available, on CUDA.

Markers (pyproject.toml): ``slow`` for tests of more than about a second; ``compile`` for tests that
build compiled code (torch.compile graphs, ahead-of-time libraries), which take minutes on a
cold cache (the physics libraries' cache is keyed by the physics source, so any edit there
empties it), and so count as slow too: ``-m "not slow"`` is the quick suite,
``-m compile`` the compiled paths alone.
"""

from __future__ import annotations

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


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("compile") is not None:
            item.add_marker(pytest.mark.slow)
