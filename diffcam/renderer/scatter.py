"""The texel scatter of the planar backward: every pixel's colour gradient added into the
four texels of its bilinear sample. On the CPU the compiled scatter runs without atomics over
blocks of images, each into its own buffer, summed in a fixed order (deterministic for a
given thread count)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import torch

_SCATTER_POOL: dict[tuple[int, int], ThreadPoolExecutor] = {}
_SCATTER_POOL_LOCK = threading.Lock()


def scatter_texels(idx, ax, ay, gc, n_texels: int):
    """Texel gradient (n_texels, 3) from the corners' int32 indices (4 planes (B, P); the
    index n_texels is a sink whose sum is dropped), the bilinear fractions ax, ay (B, P)
    and the RGB gradient reaching the texture (B, 3, P).

    One buffer per channel (4 bytes a texel: 1.3 MB for five 256² textures), which stays in
    a core's cache where the interleaved (n_texels, 3) buffer does not.
    """
    weights = ((1 - ax) * (1 - ay), ax * (1 - ay), (1 - ax) * ay, ax * ay)
    channels = []
    for ch in range(3):
        g_tex = torch.zeros(n_texels + 1, dtype=gc.dtype, device=gc.device)
        for corner, weight in zip(idx, weights, strict=True):
            value = (gc[:, ch] * weight).reshape(-1)
            g_tex = g_tex.index_put((corner.reshape(-1).long(),), value, accumulate=True)
        channels.append(g_tex[:n_texels])
    return torch.stack(channels, -1)


def scatter_in_threads(scatter, idx, ax, ay, gc, n_texels: int):
    """``scatter`` (`scatter_texels` or its compiled form) on min(threads, B) blocks of
    images, the first in this thread and the others in a pool, summed."""
    B = ax.shape[0]
    workers = min(torch.get_num_threads(), B)
    if workers < 2:
        return _without_grad(scatter, idx, ax, ay, gc, n_texels)
    key = (os.getpid(), workers)  # a forked child (a DataLoader worker) has no pool threads
    with _SCATTER_POOL_LOCK:
        pool = _SCATTER_POOL.get(key)
        if pool is None:
            pool = _SCATTER_POOL[key] = ThreadPoolExecutor(workers - 1, "diffcam-scatter")
    bounds = [B * i // workers for i in range(workers + 1)]
    blocks = [
        ([corner[b] for corner in idx], ax[b], ay[b], gc[b])
        for b in (slice(lo, hi) for lo, hi in zip(bounds, bounds[1:], strict=False))
    ]
    futures = [pool.submit(_without_grad, scatter, *block, n_texels) for block in blocks[1:]]
    g_tex = _without_grad(scatter, *blocks[0], n_texels)
    for future in futures:
        g_tex += future.result()
    return g_tex


def _without_grad(fn, *args):
    # Grad mode is per thread: the same mode in every thread keeps one compiled graph.
    with torch.no_grad():
        return fn(*args)
