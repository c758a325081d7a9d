"""`keep_freed_memory`: after it, a repeated large allocation no longer faults in fresh pages."""

from __future__ import annotations

import subprocess
import sys

import pytest

CODE = """
import resource, torch
from diffcam.allocator import keep_freed_memory

def faults_per_call():
    def work():
        x = torch.empty(10_000_000)  # 40 MB: above glibc's largest mmap threshold
        x.fill_(1.0)
    for _ in range(8):  # the heap may grow over the first few calls before it settles
        work()
    counts = []
    for _ in range(5):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        work()
        counts.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return sorted(counts)[2]  # the median call

default = faults_per_call()
took = keep_freed_memory()
print(default, took, faults_per_call())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
@pytest.mark.slow
def test_keep_freed_memory_stops_page_faults():
    # A subprocess: the setting is process-wide and must not leak into the test session.
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    default, took, after = out.stdout.split()
    assert took == "True"
    assert float(default) > 5000  # 40 MB of 4 kB pages is ~9,800 faults per call by default
    assert float(after) < 100
