"""Public entry points: argument checks, supersampling, and the choice of path."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F

from ..camera import PinholeCamera
from ..primitives import Primitive
from ..textures import build_atlas, composite
from .appearance import checked_transform, place_colours, transform_colours
from .background import background_colours, layer_inverse_depth
from .composite import channels_first
from .fast import PlanarArgs, PlanarRender
from .frame import Frame, TexMeta, make_frame
from .hits import hard_hits
from .mipmap import texture_levels
from .planar import planar_tables
from .sampling import sample_quad
from .silhouettes import EdgeProfile, soft_image

__all__ = [
    "render",
    "render_buffers",
    "Lighting",
    "RenderBuffers",
    "DEFAULT_EDGE_SOFTNESS",
    "ANTIALIAS",
]

#: ``edge_softness="antialias"``: antialiased edges. Each pixel's coverage by a primitive is
#: ``clamp(0.5 + d, 0, 1)`` of its centre's signed distance d (px, > 0 inside) to the
#: primitive's silhouette: a pixel-sized box filter of the edge (exact for an edge parallel
#: to a pixel side). The image looks hard-edged (a one-pixel ramp at each silhouette; every
#: pixel half a pixel or more inside a silhouette is the hard render's), and its gradient sees
#: the silhouettes move (docs/decisions/antialiased-default.md).
ANTIALIAS = "antialias"

#: The default ``edge_softness`` of `render`, `render_buffers` and `Scene.render`,
#: `Scene.render_buffers`, `Scene.render_states`: antialiased edges (`ANTIALIAS`), whose
#: gradient sees silhouettes move. ``edge_softness=0`` is the exact hard render (and the
#: fastest: no per-primitive soft samples, the compiled ``backend`` and ``mipmap`` apply);
#: the default's image is the same whether gradients are enabled or not.
DEFAULT_EDGE_SOFTNESS = ANTIALIAS


def edge_profile(edge_softness, supersample: int = 1) -> EdgeProfile | None:
    """The coverage profile of ``edge_softness`` at the sampling resolution (``supersample``
    samples per pixel and axis): None for hard edges (``<= 0``); a sigmoid of sigma
    ``edge_softness * supersample`` samples; or (`ANTIALIAS`) the ramp over one sample."""
    if isinstance(edge_softness, str):
        if edge_softness != ANTIALIAS:
            raise ValueError(
                f"render: edge_softness must be a number (px) or {ANTIALIAS!r}, "
                f"got {edge_softness!r}"
            )
        return EdgeProfile(1.0, ramp=True)
    sigma = float(edge_softness) * int(supersample)
    return EdgeProfile(sigma) if sigma > 0 else None


def edge_reach(edge_softness, dtype) -> float:
    """How far (output px) outside a silhouette ``edge_softness`` makes a primitive show."""
    profile = edge_profile(edge_softness)
    return 0.0 if profile is None else profile.margin(dtype)


# the reference path, and the fast path for scenes of rectangles and planes
BACKENDS = ("eager", "compile")


@dataclass
class Lighting:
    """Ambient + one directional Lambert light.

    ``shade = ambient + intensity * max(0, n . l)``, with ``n`` the unit surface normal facing
    the camera (two-sided) and ``l`` the unit vector *towards* the light (world frame).

    One light for every image, or one per image: any of the values may carry a batch axis
    (ambient, intensity (B,); direction (B, 3)).

    Args:
        ambient: float, () or (B,) tensor.
        direction: (3,) or (B, 3) direction from the scene towards the light (need not be
            unit).
        intensity: float, () or (B,) tensor.
    """

    ambient: float | torch.Tensor = 0.3
    direction: tuple | torch.Tensor = (0.3, -0.5, 1.0)
    intensity: float | torch.Tensor = 0.7


class RenderBuffers(NamedTuple):
    """image (B, 3, H, W) in [0, 1]; depth (B, 1, H, W) camera-z depth in metres (0 on the
    background, the layer's depth where a ``background_depth`` layer shows); object_id
    (B, H, W) long, the primitive index, -1 on the background (and where a layer shows);
    coverage (B, 1, H, W) in [0, 1], how much of each pixel the primitives cover (with soft or
    antialiased edges their accumulated opacity, differentiable; with hard edges 1 where a
    primitive wins; averaged over the samples when supersampling). Rendered over a black background,
    ``image`` is the primitives' colour premultiplied by ``coverage``."""

    image: torch.Tensor
    depth: torch.Tensor
    object_id: torch.Tensor
    coverage: torch.Tensor


def render(
    camera: PinholeCamera,
    primitives: list[Primitive],
    rotation: torch.Tensor,
    position: torch.Tensor,
    background=None,
    edge_softness: float | str = DEFAULT_EDGE_SOFTNESS,
    supersample: int = 1,
    lighting: Lighting | None = None,
    mipmap: bool = False,
    max_chunk_elements: int = 1 << 23,
    backend: str = "eager",
    background_depth: torch.Tensor | None = None,
    color_transform: torch.Tensor | None = None,
) -> torch.Tensor:
    """Render images (B, 3, H, W). Same arguments as :func:`render_buffers`; the depth,
    object-id and coverage buffers are not made."""
    return _draw(
        camera, primitives, rotation, position, background, edge_softness, supersample,
        lighting, mipmap, max_chunk_elements, backend, background_depth, color_transform, False,
    ).image  # fmt: skip


def render_buffers(
    camera: PinholeCamera,
    primitives: list[Primitive],
    rotation: torch.Tensor,
    position: torch.Tensor,
    background=None,
    edge_softness: float | str = DEFAULT_EDGE_SOFTNESS,
    supersample: int = 1,
    lighting: Lighting | None = None,
    mipmap: bool = False,
    max_chunk_elements: int = 1 << 23,
    backend: str = "eager",
    background_depth: torch.Tensor | None = None,
    color_transform: torch.Tensor | None = None,
) -> RenderBuffers:
    """Render images, depth and object ids.

    Args:
        camera: a :class:`PinholeCamera` with batch size B or 1.
        primitives: K :class:`Primitive` objects.
        rotation: (B|1, K, 3, 3) world_from_body rotation of each primitive.
        position: (B|1, K, 3) world_from_body translation (m).
        background: colour (3,), one colour per image (B, 3), texture (3, Ht, Wt) mapped
            over the whole image (v up), or an image (B|1, 3, s*H, s*W) at the sampling
            resolution (s = ``supersample``), used sample for sample; default light grey 0.9.
        edge_softness: how silhouette edges are drawn, and so whether the gradient sees
            silhouettes move. ``"antialias"`` (`DEFAULT_EDGE_SOFTNESS`): antialiased edges,
            a primitive's coverage of a pixel ``clamp(0.5 + d, 0, 1)`` of the pixel centre's
            signed silhouette distance d (px), composited front to back: looks hard-edged,
            and its gradient agrees with finite differences of the image at steps of a
            fraction of a pixel (with supersampling: one sample wide). A number sigma > 0:
            soft silhouettes ``sigmoid(d / sigma)``, sigma in (output) pixels (wide ones for
            fitting from far off, as `diffcam.fit_scene`'s schedule does). 0: hard edges,
            exactly the hard render (and no per-primitive autograd graph); its gradient is
            the exact derivative of a hard-edged image, which does not see silhouettes
            move (only textures and shading), so it can point the wrong way for a loss that
            silhouettes dominate. Use 0 where no gradient is wanted and speed matters (a
            video), or for exact ids and pixel values. The default renders the same image
            with and without gradients enabled.
        supersample: s, renders s x s samples per pixel and box-filters them. ``depth`` and
            ``object_id`` are taken from sample (s // 2, s // 2) of each pixel (its centre for
            odd s).
        lighting: optional :class:`Lighting` (Lambert shading), one for every image or one
            per image; None = unlit texture colour.
        mipmap: trilinear mip-mapping with a per-pixel level from screen-space (u, v)
            differences, so that minified textures do not alias. Hard edges only
            (``edge_softness=0``): soft and antialiased edges sample level 0.
        max_chunk_elements: bound on B * K * rows * W per chunk of the per-primitive passes;
            soft edges keep their per-sample graph for the backward up to about 32 such
            chunks (1 GiB of float32 by default) and recompute it in the backward beyond.
        backend: "eager" (default: the reference path, every primitive kind and option,
            chunked, no compilation) or "compile" (the fast path: a fused forward and a
            hand-written backward through ``torch.compile``, several times faster than eager
            for scenes of rectangles and planes, after a one-off compilation of seconds to
            tens of seconds per scene structure and image size). "compile" applies to hard
            edges (``edge_softness=0``, not the default) without mip-mapping when every
            primitive is a rectangle or a plane; other
            scenes and settings take the reference path (compiled autograd of curved
            primitives was slower than eager). On Linux,
            `diffcam.allocator.keep_freed_memory()` makes repeated large renders faster still
            (no fresh pages to fault in on every call).
        background_depth: optional (B|1, 1, s*H, s*W) camera-z depth (m) of an image-valued
            ``background``, in the depth buffer's convention (0, or inf, = nothing there).
            The background then acts as a pre-rendered opaque layer (e.g. static scenery
            rendered once with ``camera.scaled(s)``, ``supersample=1``): a sample shows the
            nearest primitive only where it is nearer than the layer, otherwise the layer,
            whose depth it also returns (object id -1). With soft or antialiased edges the
            layer is the opaque back at its depth: primitives behind it are hidden. Gradients
            flow to the layer's image and depth where it shows; the choice of what shows is
            piecewise constant.
        color_transform: optional (B|1, K, 3, 4) affine colour map per image and primitive:
            primitive k shows in image b the colour ``clamp(T[:, :3] @ c + T[:, 3], 0, 1)``
            (``T = color_transform[b, k]``) of its texture's (or flat) colour c at each
            sample, before shading. Brightness, contrast, saturation and hue changes are of
            this form, so a batch whose images differ in the bodies' colours is one call.
            Differentiable in ``color_transform``. Takes the reference path.

    Returns:
        :class:`RenderBuffers` (image, depth, object_id).
    """
    return _draw(
        camera, primitives, rotation, position, background, edge_softness, supersample,
        lighting, mipmap, max_chunk_elements, backend, background_depth, color_transform, True,
    )  # fmt: skip


def _draw(camera, primitives, rotation, position, background, edge_softness, supersample,
          lighting, mipmap, max_chunk_elements, backend, background_depth, color_transform,
          buffers: bool):  # fmt: skip
    """:func:`render_buffers` (arguments as there); with ``buffers`` False only the image is
    made (depth, object_id and coverage are None), which spares the soft path its winners."""
    if len(primitives) == 0:
        raise ValueError("render: need at least one primitive")
    if backend not in BACKENDS:
        raise ValueError(f"render: backend must be 'eager' or 'compile', got {backend!r}")
    s = int(supersample)
    cam = camera.scaled(s) if s > 1 else camera
    edge = edge_profile(edge_softness, s)
    if mipmap and edge is not None:
        warnings.warn(
            "render: mipmap applies to hard edges (edge_softness=0) only; soft and "
            f"antialiased edges (edge_softness={edge_softness!r}) sample textures unfiltered",
            stacklevel=3,
        )
    frame = make_frame(cam, primitives, rotation, position, lighting, color_transform)
    transform = checked_transform(color_transform, frame.B, frame.K, frame.o.dtype, frame.o.device)
    img, depth, oid, coverage = _render(
        frame,
        primitives,
        background,
        background_depth,
        edge,
        mipmap,
        max_chunk_elements,
        backend,
        buffers,
        transform,
    )
    if not buffers:
        img = F.avg_pool2d(img, s) if s > 1 else img
        return RenderBuffers(img, None, None, None)
    if background_depth is not None:  # the layer's depth where the layer shows
        layer_depth = background_depth.to(dtype=depth.dtype, device=depth.device)
        depth = torch.where(oid.unsqueeze(1) >= 0, depth, layer_depth)
    if coverage is None:  # hard edges: the winner covers its sample
        coverage = (oid >= 0).unsqueeze(1).to(img.dtype)
    if s > 1:
        img = F.avg_pool2d(img, s)
        coverage = F.avg_pool2d(coverage, s)
        depth = depth[:, :, s // 2 :: s, s // 2 :: s]
        oid = oid[:, s // 2 :: s, s // 2 :: s]
    return RenderBuffers(img, depth, oid, coverage)


def _render(
    frame: Frame,
    prims,
    background,
    background_depth,
    edge,
    mipmap,
    max_chunk,
    backend,
    buffers,
    transform=None,
):
    """(image (B, 3, H, W), depth (B, 1, H, W), object id (B, H, W), coverage (B, 1, H, W) or
    None for hard edges) at the sampling resolution; ``edge`` the soft or antialiased edges'
    :class:`EdgeProfile` (samples), None for hard edges; ``transform``
    the checked (B|1, K, 3, 4) colour transform or None. Without ``buffers`` the soft path
    may return None for depth, object id and coverage."""
    B, H, W = frame.B, frame.H, frame.W
    dtype, device = frame.o.dtype, frame.o.device
    fast = (
        edge is None
        and not mipmap
        and backend == "compile"
        and frame.planar_only
        and transform is None
    )
    atlas = build_atlas(
        [p.appearance(dtype, device) for p in prims],
        [p.wrap == "repeat" for p in prims],
        mipmap,
        quad=not fast,
    )
    bg = background_colours(background, B, H, W, dtype, device)
    w0 = layer_inverse_depth(background, background_depth, B, H, W, dtype, device)
    if edge is not None:
        return _render_soft(frame, atlas, bg, w0, edge, max_chunk, buffers, transform)
    if fast:
        return _render_fast(frame, atlas, bg, w0)
    return _render_eager(frame, atlas, bg, w0, mipmap, max_chunk, buffers, transform)


def _render_soft(frame: Frame, atlas, bg, w0, edge, max_chunk, buffers: bool, transform):
    """Soft or antialiased edges: the composited image and coverage, and (``buffers``) the
    depth (with gradients) and object id of the hard winner, found among the same samples."""
    B, H, W = frame.B, frame.H, frame.W
    out = soft_image(frame, atlas, bg, edge, max_chunk, w0, buffers, transform)
    img = out.image.view(B, 3, H, W)
    if not buffers:
        return img, None, None, None
    depth, oid = out.depth.view(B, 1, H, W), out.object_id.view(B, H, W)
    return img, depth, oid, out.coverage.view(B, 1, H, W)


def _render_fast(frame: Frame, atlas, bg, w0):
    """Hard edges of a scene of rectangles and planes: the compiled planar fast path."""
    tabs = planar_tables(frame)
    args = PlanarArgs(
        tabs.test,
        TexMeta.level0(atlas),
        frame.codes,
        frame.H,
        frame.W,
        frame.light is not None,
        w0,
        # Whether a backward can follow (inside the Function, needs_input_grad is True
        # even under no_grad): only then keep per-pixel data for it.
        torch.is_grad_enabled() and any(t.requires_grad for t in (tabs.plan, atlas.texels, bg)),
    )
    img, depth, oid = PlanarRender.apply(tabs.plan, atlas.texels, bg, args)
    return img, depth, oid, None


def _render_eager(
    frame: Frame, atlas, bg, w0, mipmap: bool, max_chunk: int, buffers: bool, transform=None
):
    """Hard edges, chunked: nearest hit, the winners' :class:`Hits`, then texturing and
    shading of the foreground samples over the background (and, with ``buffers``, the
    depth image; else None)."""
    B, H, W = frame.B, frame.H, frame.W
    oid, hits = hard_hits(frame, max_chunk, w0=w0)
    depth = hits.depth_image(B * H * W).view(B, 1, H, W) if buffers else None
    if hits.pix.numel() == 0:  # a copy: never a view of a pre-rendered layer the caller keeps
        img = bg.permute(0, 2, 1).expand(B, 3, H * W).clone(memory_format=torch.contiguous_format)
        return img.view(B, 3, H, W), depth, oid, None
    meta0, meta1, blend = texture_levels(atlas, hits, oid, mipmap, B, H, W)
    if transform is not None:
        return (
            _transformed_image(atlas, hits, meta0, meta1, blend, bg, transform, frame),
            depth,
            oid,
            None,
        )
    img = composite(
        atlas.quad, hits.u, hits.v, hits.shade, blend, bg, hits.pix, meta0, meta1, (B, H, W)
    )
    return img, depth, oid, None


def _transformed_image(atlas, hits, meta0, meta1, blend, bg, transform, frame: Frame):
    """Hard edges with a colour transform: each hit's texture colour (both mip levels,
    blended), mapped by its (image, primitive) transform, shaded and placed over the
    background, with autograd: (B, 3, H, W)."""
    B, H, W = frame.B, frame.H, frame.W
    P = H * W
    colour = sample_quad(atlas.quad, hits.u, hits.v, *meta0)
    if meta1 is not None:
        upper = sample_quad(atlas.quad, hits.u, hits.v, *meta1)
        colour = colour + (upper - colour) * blend.unsqueeze(1)
    colour = transform_colours(colour, transform, hits.pix // P, hits.prim)
    if hits.shade is not None:
        colour = colour * hits.shade.unsqueeze(1)
    return place_colours(channels_first(bg, B), colour, hits.pix, P).view(B, 3, H, W)
