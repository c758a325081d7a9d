"""The renderer: nearest analytic hit per pixel, textures, soft silhouettes, shading, AA.

Pipeline, split at the rasterise / shade boundary:

1. ``frame``: the per-call geometry record. Camera-frame ray directions with z = 1 (ray
   parameter = depth) are affine in the pixel coordinates; each primitive's local directions
   are ``A d_cam`` with ``A = R_k^T R_cam``.
2. ``nearest``: without autograd, intersect each primitive with the rays of a pixel window
   that bounds its projection and keep the nearest hit per pixel (its index only). Planar
   primitives (rectangles, planes) are homographies of the image, tested from a few
   per-(b, k) coefficients (``planar``) instead of a full ray intersection.
3. ``hits``: with autograd, recompute the intersection for the winning primitive of each
   foreground pixel only, into one typed per-pixel record (``Hits``: pixel, primitive,
   depth, (u, v), shading factor).
4. Shading: a gather-based bilinear texture sample (``textures.composite``, with per-pixel
   mip levels from ``mipmap``) times the Lambert factor (``shading``), over the background
   (``background``: a colour, a texture, or a pre-rendered layer with its depth).

Soft and antialiased edges (``edge_softness > 0``, or ``"antialias"``, the default):
``silhouettes`` composites every primitive's coverage and colour front to back inside
per-primitive pixel windows (``reach``). Three autograd nodes with hand-written backward
passes carry most of its per-sample work: the box and rectangle edge
distance (``edges``), one texture sample of every soft sample (``sampling``) and the
compositing (``composite``); forward-mode AD and functorch transforms take their
autograd-recorded references (tests/diffcam/test_soft_fast.py checks they agree).

Per-image appearance: a ``Lighting`` whose values carry a batch axis lights each image on its
own, ``color_transform`` (``appearance``) maps each primitive's texture colour by an affine map
per image before shading, and the background may be a colour per image; so a batch of
differently lit and coloured views (domain randomisation) is one call.

Backends: one reference path and one fast path. "eager" (default) is the pipeline above,
chunked, for every primitive kind and option. "compile" is the fast path for hard edges
without mip-mapping when every primitive is a rectangle or a plane (``fast``, through
``torch.compile``): one fused pass over all pixels (its own nearest-hit test from the planar
forms, per-pixel values selected among few primitives instead of gathered, the bilinear
corners of ``textures.bilinear_corners`` like the reference path) and a hand-written backward
from what the forward keeps per pixel: per-pixel gradients, their sums per (b, k) as fused
masked sums, the texel scatter on blocks of images, one single-threaded scatter per CPU
thread (``scatter``). Other scenes given "compile" take the reference path. Both give the
same values and gradients (tests/diffcam/test_backends.py).
On the CPU every backward is deterministic for a given thread count (index_add; the compiled
scatters run without atomics, each block into its own buffer, summed in a fixed order); on
CUDA the scatters use atomic adds, so their summation order may vary between runs.
"""

from .api import (
    ANTIALIAS,
    DEFAULT_EDGE_SOFTNESS,
    Lighting,
    RenderBuffers,
    render,
    render_buffers,
)

__all__ = [
    "render",
    "render_buffers",
    "Lighting",
    "RenderBuffers",
    "DEFAULT_EDGE_SOFTNESS",
    "ANTIALIAS",
]
