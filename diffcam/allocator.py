"""Keep freed memory in the process for reuse (glibc), instead of handing it back to the OS.

Why: a render or a training step allocates the same large per-pixel buffers on every call
(Inductor's intermediates, autograd's saved tensors: tens of MB each). glibc's default serves
every block above a dynamic threshold (128 kB to 32 MB) with its own ``mmap`` and unmaps it on
free, so the next call touches fresh pages again: the kernel zero-fills every 4 kB page on its
first write. On the renderer's benchmark (64 images of 288 x 96, forward + backward, compiled)
that was ~74,000 page faults and ~130 ms of kernel time per call; with this it is none
(benchmarks/bench_render.py reports both). The price: the resident memory stays at its peak
instead of shrinking after a large free. Opt in; nothing in the library calls it on import.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

# mallopt parameters (glibc <malloc.h>)
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Tell glibc's malloc to serve large blocks from its heap and never trim it.

    Process-wide and lasting (it affects every later allocation of the process, torch's and
    everybody else's). Returns True when it took effect, False where there is no glibc (macOS,
    Windows, musl): there it does nothing. CUDA memory is not affected (PyTorch caches it).
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    # No mmap for large blocks: they come from the heap and go back to it when freed. A block
    # a secondary thread's arena cannot hold still falls back to mmap (glibc does that itself).
    ok = mallopt(_M_MMAP_MAX, 0) == 1
    # Never give the top of the heap back (the largest value the int argument allows).
    ok = mallopt(_M_TRIM_THRESHOLD, 2**31 - 1) == 1 and ok
    return ok


__all__ = ["keep_freed_memory"]
