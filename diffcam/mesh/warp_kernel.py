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
