"""The Warp kernel of `diffcam.mesh.warp_rays` (imported by it only when warp-lang is installed)."""

from __future__ import annotations

import warp as wp

# Farther than any scene (in multiples of a ray's direction): no hit is cut off.
MAX_T = 1.0e30


@wp.kernel
def nearest_hits(
    mesh: wp.uint64,
    origins: wp.array(dtype=wp.vec3),
    directions: wp.array(dtype=wp.vec3),
    t_out: wp.array(dtype=wp.float32),
    face_out: wp.array(dtype=wp.int32),
):
    """Per ray i: the ray parameter t of its nearest hit with ``mesh`` (inf where none) and the
    hit triangle (-1 where none)."""
    i = wp.tid()
    hit = wp.mesh_query_ray(mesh, origins[i], directions[i], MAX_T)
    if hit.result:
        t_out[i] = hit.t
        face_out[i] = hit.face
    else:
        t_out[i] = wp.inf
        face_out[i] = -1


@wp.kernel
def nearest_segments(
    px: wp.array(dtype=wp.float32),
    py: wp.array(dtype=wp.float32),
    xa: wp.array(dtype=wp.float32),
    ya: wp.array(dtype=wp.float32),
    xb: wp.array(dtype=wp.float32),
    yb: wp.array(dtype=wp.float32),
    index_out: wp.array(dtype=wp.int32),
):
    """Per point i: the index of the segment a-b nearest to it (the first of equals), as
    `diffcam.renderer.mesh`'s torch search finds it."""
    i = wp.tid()
    x = px[i]
    y = py[i]
    best = float(wp.inf)
    best_k = int(0)  # noqa: UP018 - Warp: a typed variable the loop may change
    for k in range(xa.shape[0]):
        ex = xb[k] - xa[k]
        ey = yb[k] - ya[k]
        ee = ex * ex + ey * ey
        s = float(0.0)  # noqa: UP018 - as above
        if ee > 0.0:
            s = wp.clamp(((x - xa[k]) * ex + (y - ya[k]) * ey) / ee, 0.0, 1.0)
        dx = x - xa[k] - s * ex
        dy = y - ya[k] - s * ey
        distance = dx * dx + dy * dy
        if distance < best:
            best = distance
            best_k = k
    index_out[i] = best_k
