"""Fixtures shared by every test: the floating-point dtypes and the devices to run on.

A test that takes ``dtype`` runs once in float32 and once in float64 (a test that needs other
dtypes parametrises ``dtype`` itself, which takes precedence); one that takes ``device`` runs
on the CPU and, where one is available, on CUDA.
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
