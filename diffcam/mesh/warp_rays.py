"""The nearest hit of many rays with one mesh through NVIDIA Warp (`wp.Mesh`, its BVH built
and traversed in a compiled kernel, `wp.mesh_query_ray`), when warp-lang is installed
(``pip install 'diffcam[warp]'``): the renderer's no-grad ray cast, on the CPU and on CUDA,
sharing memory with torch (`wp.from_torch`). Like `diffcam.mesh.cast_rays` it only says which
triangle each ray meets first; the renderer recomputes that hit with autograd.

Warp meshes hold float32 points, so the renderer takes this path for float32 renders
(`ray_caster`); float64 renders keep the torch BVH (`diffcam.mesh.cast_rays`), so that their
choice of triangle at an edge is float64's.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import sys

import torch

from .raycast import RayCast

__all__ = ["WarpMesh", "available", "nearest_segments", "ray_caster"]

log = logging.getLogger("diffcam")

CASTERS = ("auto", "bvh", "warp", "brute_force")


@functools.cache
def _warp():
    """The initialised warp module and the kernel module, or None without warp-lang."""
    if importlib.util.find_spec("warp") is None:
        return None
    try:
        import warp as wp

        wp.config.log_level = wp.LOG_WARNING  # no greeting, no line per kernel load
        with _native_stderr_silenced():  # its native "no CUDA driver" notice on CPU machines
            wp.init()
        from . import warp_kernel
    except Exception as error:  # noqa: BLE001 - an unusable Warp leaves the torch BVH
        log.warning(
            "mesh rays: warp-lang is installed but could not be used (%s: %s); rays are cast "
            "through the torch BVH", type(error).__name__, error,
        )  # fmt: skip
        return None

    log.info(
        "mesh rays: NVIDIA Warp %s casts the renderer's rays (float32 renders)", wp.__version__
    )
    return wp, warp_kernel


@contextlib.contextmanager
def _native_stderr_silenced():
    """File descriptor 2 sent to the null device (what native code prints), then restored."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def available() -> bool:
    """Whether warp-lang is installed (then float32 mesh renders cast their rays through it)."""
    return _warp() is not None


def ray_caster(requested: str = "auto", dtype=torch.float32) -> str:
    """The ray caster a mesh primitive's ``ray_casting=requested`` takes for a render in
    ``dtype``: "warp" (Warp's kernel), "bvh" (the torch BVH) or "brute_force" (every ray
    against every triangle, the reference). "auto" (the default): "warp" for float32 where
    warp-lang is installed, else "bvh". Asking for "warp" without warp-lang raises an error
    naming the extra to install."""
    if requested not in CASTERS:
        raise ValueError(f"ray_casting must be one of {CASTERS}, got {requested!r}")
    if requested == "warp" and not available():
        raise ImportError(
            "ray_casting='warp' needs NVIDIA Warp: pip install 'diffcam[warp]' (or warp-lang), "
            "or leave ray_casting at 'auto'"
        )
    if requested != "auto":
        return requested
    return "warp" if dtype == torch.float32 and available() else "bvh"


def nearest_segments(px, py, xa, ya, xb, yb) -> torch.Tensor:
    """The index (n,) long of the 2-D segment a-b nearest to each point (px, py) (n,) (the
    first of equals), of segments (xa, ya)-(xb, yb) (m,), m >= 1, float32 on one device; no
    gradient. One Warp thread per point, looping over the segments: the renderer's search for
    the silhouette edge nearest to each pixel, without a (points x segments) tensor."""
    wp, kernel = _warp()
    device = px.device
    flat = [t.detach().to(torch.float32).contiguous() for t in (px, py, xa, ya, xb, yb)]
    out = torch.empty(flat[0].shape[0], dtype=torch.int32, device=device)
    if out.numel():
        wp_device = wp.device_from_torch(device)
        wp.launch(kernel.nearest_segments, dim=out.numel(),
                  inputs=[*(wp.from_torch(t) for t in flat), wp.from_torch(out)],
                  device=wp_device)  # fmt: skip
        wp.synchronize_device(wp_device)
    return out.long()


class WarpMesh:
    """A mesh's triangles as a `wp.Mesh` (its BVH built by Warp), for one render call.

    Args:
        corners: (F, 3, 3) triangle corners (face, corner, xyz; m, mesh frame); detached, cast
            to float32 (Warp's points), on the device it will be queried on.
    """

    def __init__(self, corners: torch.Tensor):
        wp, _ = _warp()
        points = corners.detach().to(torch.float32).reshape(-1, 3).contiguous()
        indices = torch.arange(points.shape[0], dtype=torch.int32, device=points.device)
        # kept: the Warp arrays share these tensors' memory
        self._points, self._indices = points, indices
        self.device = points.device
        self.mesh = wp.Mesh(
            points=wp.from_torch(points, dtype=wp.vec3), indices=wp.from_torch(indices)
        )

    def cast(self, o: torch.Tensor, d: torch.Tensor) -> RayCast:
        """The nearest hit (`RayCast`, t in multiples of d as `cast_rays`) of rays ``o + t d``
        (o (3,) or (R, 3), d (R, 3); mesh frame). No gradient."""
        wp, kernel = _warp()
        d = d.detach().to(torch.float32)
        o = o.detach().to(torch.float32).expand_as(d).contiguous()
        d = d.contiguous()
        count = d.shape[0]
        t = torch.empty(count, dtype=torch.float32, device=self.device)
        face = torch.empty(count, dtype=torch.int32, device=self.device)
        if count:
            wp.launch(
                kernel.nearest_hits, dim=count,
                inputs=[self.mesh.id, wp.from_torch(o, dtype=wp.vec3),
                        wp.from_torch(d, dtype=wp.vec3), wp.from_torch(t), wp.from_torch(face)],
                device=wp.device_from_torch(self.device),
            )  # fmt: skip
            wp.synchronize_device(wp.device_from_torch(self.device))
        return RayCast(t, face.long())
