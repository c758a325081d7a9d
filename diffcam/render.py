"""The renderer: nearest analytic hit per pixel, textures, soft silhouettes, shading, AA.

Pipeline (hard edges, ``edge_softness = 0``):

1. Camera-frame ray directions with z = 1 (ray parameter = depth) are affine in the pixel
   coordinates; each primitive's local directions are ``A d_cam`` with ``A = R_k^T R_cam``.
2. Without autograd, intersect each primitive with the rays of a pixel window that bounds
   its projection (from its local bounding box; the whole image for an infinite plane or a
   box straddling the camera plane) and keep the nearest hit per pixel. Only the winner's
   index survives this pass: the selection is piecewise constant, so it needs no gradient.
3. With autograd, recompute the intersection for the winning primitive of each foreground
   pixel only ((B*H*W) samples, not (B*K*H*W)): depth, local hit point, (u, v), normal, and a
   gather-based bilinear texture sample. Gradients reach poses (through t and (u, v)),
   sizes, camera intrinsics/pose, textures, colours and the background.

Soft edges (``edge_softness = sigma > 0``): every primitive gets a coverage
``alpha = sigmoid(signed silhouette distance in pixels / sigma)`` and a colour at every pixel;
these are composited front to back in depth order. A no-grad pass of the silhouette distance
finds, per primitive, a pixel window outside which its coverage is below sigmoid(-17) (float32)
or sigmoid(-37) (float64) and is taken as exactly 0 (``_SOFT_TAIL``); colours, depths and
coverage are computed with autograd only inside the windows, in batch chunks with activation
checkpointing when large, and composited on the union of the windows.

Planar primitives (rectangles, planes) are homographies of the image: their hit test, depth
and (u, v) are ratios of affine functions of the pixel coordinates, evaluated from a few
per-(b, k) coefficients (``_planar_forms``) instead of a full ray intersection.

Pre-rendered layers: ``background`` may be an image at the sampling resolution and
``background_depth`` its depth (e.g. the static scenery of a scene, rendered once). The layer's
inverse depth seeds the nearest-hit test, so a primitive wins a pixel only where it is nearer;
elsewhere the pixel shows the layer (its colour, its depth, object id -1). Soft edges treat the
layer as the opaque back at its depth: primitives behind it get coverage 0.

Backends (hard edges, no mip-mapping): "eager" (default) is the chunked pipeline above;
"dense" is one branch-free pass over all pixels with the K primitives unrolled (and, for
planar-only scenes, a hand-written backward from what the forward keeps per pixel: per-pixel
gradients, their sums per (b, k) as one batched matrix product, scatter-adds into the texels);
"compile" runs "dense" through ``torch.compile`` (per-pixel values selected among few
primitives instead of gathered, the (b, k) sums as fused masked sums, the texel scatter on
blocks of images, one single-threaded scatter per CPU thread). All three give the same values
and gradients (tests/diffcam/test_backends.py). On the CPU every backward is deterministic for
a given thread count (index_add; the compiled scatters run without atomics, each block into
its own buffer, summed in a fixed order); on CUDA the scatters use atomic adds, so their
summation order may vary between runs.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .camera import PinholeCamera
from .primitives import (
    BOX,
    CAPSULE,
    CYLINDER,
    PLANE,
    RECT,
    SPHERE,
    Primitive,
    intersect,
    silhouette_distance,
    surface_normal,
    surface_uv,
)
from .textures import _bilinear_texels, build_atlas, composite, sample_texture

__all__ = ["render", "render_buffers", "Lighting", "RenderBuffers"]


@dataclass
class Lighting:
    """Ambient + one directional Lambert light.

    ``shade = ambient + intensity * max(0, n . l)``, with ``n`` the unit surface normal facing
    the camera (two-sided) and ``l`` the unit vector *towards* the light (world frame).

    Args:
        ambient: float or () tensor.
        direction: (3,) direction from the scene towards the light (need not be unit).
        intensity: float or () tensor.
    """

    ambient: float | torch.Tensor = 0.3
    direction: tuple | torch.Tensor = (0.3, -0.5, 1.0)
    intensity: float | torch.Tensor = 0.7


class RenderBuffers(NamedTuple):
    """image (B, 3, H, W) in [0, 1]; depth (B, 1, H, W) camera-z depth in metres (0 on the
    background, the layer's depth where a ``background_depth`` layer shows); object_id
    (B, H, W) long, the primitive index, -1 on the background (and where a layer shows);
    coverage (B, 1, H, W) in [0, 1], how much of each pixel the primitives cover (the soft
    silhouettes' accumulated opacity, differentiable; with hard edges 1 where a primitive
    wins, averaged over the samples when supersampling). Rendered over a black background,
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
    edge_softness: float = 0.0,
    supersample: int = 1,
    lighting: Lighting | None = None,
    mipmap: bool = False,
    max_chunk_elements: int = 1 << 23,
    backend: str = "eager",
    background_depth: torch.Tensor | None = None,
) -> torch.Tensor:
    """Render images (B, 3, H, W). Same arguments as :func:`render_buffers`."""
    return render_buffers(
        camera,
        primitives,
        rotation,
        position,
        background=background,
        background_depth=background_depth,
        edge_softness=edge_softness,
        supersample=supersample,
        lighting=lighting,
        mipmap=mipmap,
        max_chunk_elements=max_chunk_elements,
        backend=backend,
    ).image


def render_buffers(
    camera: PinholeCamera,
    primitives: list[Primitive],
    rotation: torch.Tensor,
    position: torch.Tensor,
    background=None,
    edge_softness: float = 0.0,
    supersample: int = 1,
    lighting: Lighting | None = None,
    mipmap: bool = False,
    max_chunk_elements: int = 1 << 23,
    backend: str = "eager",
    background_depth: torch.Tensor | None = None,
) -> RenderBuffers:
    """Render images, depth and object ids.

    Args:
        camera: a :class:`PinholeCamera` with batch size B or 1.
        primitives: K :class:`Primitive` objects.
        rotation: (B|1, K, 3, 3) world_from_body rotation of each primitive.
        position: (B|1, K, 3) world_from_body translation (m).
        background: colour (3,), texture (3, Ht, Wt) mapped over the whole image (v up), or
            an image (B|1, 3, s*H, s*W) at the sampling resolution (s = ``supersample``),
            used sample for sample; default light grey 0.9.
        edge_softness: sigma in (output) pixels of the soft silhouettes; 0 = hard edges
            (exactly the hard render, and no (B, K, H, W) autograd graph).
        supersample: s, renders s x s samples per pixel and box-filters them. ``depth`` and
            ``object_id`` are taken from sample (s // 2, s // 2) of each pixel (its centre for
            odd s).
        lighting: optional :class:`Lighting` (Lambert shading); None = unlit texture colour.
        mipmap: trilinear mip-mapping with a per-pixel level from screen-space (u, v)
            differences (hard-edge path only), so that minified textures do not alias.
        max_chunk_elements: bound on B * K * rows * W per chunk of the per-primitive passes.
        backend: "eager" (default; chunked, cache-friendly, no compilation), "dense" (one
            branch-free pass over all pixels) or "compile" (the dense pass through
            ``torch.compile``: fused loops, about 2-4x faster than eager for scenes of
            rectangles/planes, after a one-off compilation of seconds to tens of seconds per
            scene structure and image size). "dense" applies to hard edges without
            mip-mapping; "compile" to those when every primitive is a rectangle or plane
            (compiled autograd of curved primitives was slower than eager); other settings
            use the eager path. On Linux, `diffcam.allocator.keep_freed_memory()` makes
            repeated large renders faster still (no fresh pages to fault in on every call).
        background_depth: optional (B|1, 1, s*H, s*W) camera-z depth (m) of an image-valued
            ``background``, in the depth buffer's convention (0, or inf, = nothing there).
            The background then acts as a pre-rendered opaque layer (e.g. static scenery
            rendered once with ``camera.scaled(s)``, ``supersample=1``): a sample shows the
            nearest primitive only where it is nearer than the layer, otherwise the layer,
            whose depth it also returns (object id -1). With ``edge_softness > 0`` the layer
            is the opaque back at its depth: primitives behind it are hidden. Gradients flow
            to the layer's image and depth where it shows; the choice of what shows is
            piecewise constant.

    Returns:
        :class:`RenderBuffers` (image, depth, object_id).
    """
    if len(primitives) == 0:
        raise ValueError("render: need at least one primitive")
    if backend not in ("eager", "dense", "compile"):
        raise ValueError(f"render: backend must be 'eager', 'dense' or 'compile', got {backend!r}")
    s = int(supersample)
    cam = camera.scaled(s) if s > 1 else camera
    img, depth, oid, coverage = _render(
        cam,
        primitives,
        rotation,
        position,
        background,
        background_depth,
        float(edge_softness) * s,
        lighting,
        mipmap,
        max_chunk_elements,
        backend,
    )
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


# ---------------------------------------------------------------------------- internals
def _background(background, B, H, W, dtype, device) -> torch.Tensor:
    """(B|1, H*W, 3) background colours from a colour, a texture or an image."""
    if background is None:
        background = torch.full((3,), 0.9, dtype=dtype, device=device)
    if not isinstance(background, torch.Tensor):
        background = torch.as_tensor(background, dtype=dtype, device=device)
    background = background.to(dtype=dtype, device=device)
    if background.dim() == 1:
        return background.view(1, 1, 3).expand(1, H * W, 3)
    if background.dim() == 4:
        if background.shape[0] not in (1, B) or tuple(background.shape[1:]) != (3, H, W):
            raise ValueError(
                f"render: an image background must have shape (B|1, 3, H, W) = "
                f"({B}|1, 3, {H}, {W}) at the sampling resolution (supersample x the "
                f"camera's), got {tuple(background.shape)}"
            )
        return background.permute(0, 2, 3, 1).reshape(background.shape[0], H * W, 3)
    u = (torch.arange(W, dtype=dtype, device=device) + 0.5) / W
    v = 1.0 - (torch.arange(H, dtype=dtype, device=device) + 0.5) / H
    uu, vv = torch.meshgrid(u, v, indexing="xy")  # (H, W)
    return sample_texture(background, uu, vv, wrap="clamp").reshape(1, H * W, 3)


def _layer_inverse_depth(background, background_depth, B, H, W, dtype, device):
    """(B|1, H, W) no-grad inverse depth of a pre-rendered layer (0 where it is empty), which
    seeds the nearest-hit test; None without a layer."""
    if background_depth is None:
        return None
    if not isinstance(background, torch.Tensor) or background.dim() != 4:
        raise ValueError(
            "render: background_depth needs the layer's colours as an image background "
            "(B|1, 3, H, W)"
        )
    if (
        not isinstance(background_depth, torch.Tensor)
        or background_depth.dim() != 4
        or background_depth.shape[0] not in (1, B)
        or tuple(background_depth.shape[1:]) != (1, H, W)
    ):
        got = background_depth
        got = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        raise ValueError(
            f"render: background_depth must be a tensor of shape (B|1, 1, H, W) = "
            f"({B}|1, 1, {H}, {W}) at the sampling resolution, got {got}"
        )
    with torch.no_grad():
        d = background_depth.to(dtype=dtype, device=device)[:, 0]
        # inverse depth as the nearest-hit test compares it; 0 (no surface) for d <= 0 or inf
        return torch.where(d > 0, 1.0 / torch.where(d > 0, d, torch.ones_like(d)), 0.0)


def _render(
    cam,
    prims,
    rotation,
    position,
    background,
    background_depth,
    sigma,
    lighting,
    mipmap,
    max_chunk,
    backend,
):
    dtype, device = position.dtype, position.device
    K = len(prims)
    if rotation.dim() != 4 or rotation.shape[-3] != K or position.shape[-2] != K:
        raise ValueError(
            f"render: {K} primitives but rotation {tuple(rotation.shape)} and position "
            f"{tuple(position.shape)} (expected (B, K, 3, 3) and (B, K, 3))"
        )
    B = max(cam.batch_size, rotation.shape[0], position.shape[0])
    H, W = cam.height, cam.width
    P = H * W
    R = rotation.expand(B, K, 3, 3)
    pos = position.expand(B, K, 3)
    Rc = cam.rotation.to(dtype).expand(B, 3, 3)
    tc = cam.translation.to(dtype).expand(B, 3)
    fx, fy, cx, cy = (v.to(dtype).expand(B) for v in (cam.fx, cam.fy, cam.cx, cam.cy))

    Rt = R.transpose(-1, -2)
    A = Rt @ Rc.unsqueeze(1)  # (B, K, 3, 3) local_from_camera rotation
    o = (Rt @ (tc.unsqueeze(1) - pos).unsqueeze(-1)).squeeze(-1)  # (B, K, 3) camera centre, local
    h = torch.cat([p.half_size(dtype, device).expand(B, 3).unsqueeze(1) for p in prims], 1)
    uv_scale = torch.tensor(
        [list(map(float, p.uv_scale)) for p in prims], dtype=dtype, device=device
    )
    codes = [p.code for p in prims]

    light = None
    if lighting is not None:
        ldir = torch.as_tensor(lighting.direction, dtype=dtype, device=device)
        ldir = ldir / torch.linalg.vector_norm(ldir)
        l_local = (Rt @ ldir.view(1, 1, 3, 1)).squeeze(-1)  # (B, K, 3)
        light = (lighting.ambient, lighting.intensity, l_local)

    planar_only = all(c in (PLANE, RECT) for c in codes)
    use_dense = (
        sigma <= 0 and not mipmap and (backend == "dense" or (backend == "compile" and planar_only))
    )
    atlas = build_atlas(
        [p.appearance(dtype, device) for p in prims],
        [p.wrap == "repeat" for p in prims],
        mipmap,
        quad=sigma <= 0 and not use_dense,
    )
    bg = _background(background, B, H, W, dtype, device)
    w0 = _layer_inverse_depth(background, background_depth, B, H, W, dtype, device)

    xs = torch.arange(W, dtype=dtype, device=device) + 0.5
    ys = torch.arange(H, dtype=dtype, device=device) + 0.5
    dxp = (xs.unsqueeze(0) - cx.unsqueeze(1)) / fx.unsqueeze(1)  # (B, W)
    dyp = (ys.unsqueeze(0) - cy.unsqueeze(1)) / fy.unsqueeze(1)  # (B, H)

    if sigma > 0:
        groups: dict[int, list[int]] = {}
        for k, c in enumerate(codes):
            groups.setdefault(c, []).append(k)
        with torch.no_grad():
            oid, depth_ng = _hard(
                A,
                o,
                h,
                fx,
                fy,
                cx,
                cy,
                codes,
                uv_scale,
                None,
                B,
                K,
                H,
                W,
                max_chunk,
                geometry_only=True,
                w0=w0,
            )
        img, coverage = _soft(
            A,
            o,
            h,
            dxp,
            dyp,
            fx,
            fy,
            groups,
            atlas,
            uv_scale,
            light,
            bg,
            sigma,
            B,
            K,
            H,
            W,
            max_chunk,
            w0,
        )
        img = img.view(B, H, W, 3).permute(0, 3, 1, 2)
        # depth with gradients: the hard winner's (cheap next to the soft pass)
        _, depth, _ = _hard(
            A, o, h, fx, fy, cx, cy, codes, uv_scale, None, B, K, H, W, max_chunk, oid=oid
        )
        return img, depth.view(B, 1, H, W), oid, coverage.view(B, 1, H, W)

    if use_dense:
        tabs = _tables(A, o, h, fx, fy, cx, cy, codes, uv_scale, light, B, K, H, W)
        lit = light is not None
        if planar_only:
            plan_tab, _, Wf, NXf, NYf = tabs[:5]
            img, depth, oid = _PlanarRender.apply(
                plan_tab,
                atlas.texels,
                bg,
                Wf,
                NXf,
                NYf,
                atlas.offset[:, 0],
                atlas.width[:, 0],
                atlas.height[:, 0],
                atlas.repeat,
                tuple(codes),
                H,
                W,
                lit,
                backend == "compile",
                max(1, max_chunk // (4 * K)),
                w0,
                # Whether a backward can follow (inside the Function, needs_input_grad is
                # True even under no_grad): only then keep per-pixel data for it.
                torch.is_grad_enabled()
                and any(t.requires_grad for t in (plan_tab, atlas.texels, bg)),
            )
            return img, depth, oid, None
        img, depth, oid = _dense_fn(backend == "compile")(
            *tabs,
            atlas.texels,
            atlas.offset[:, 0],
            atlas.width[:, 0],
            atlas.height[:, 0],
            atlas.repeat,
            bg,
            tuple(codes),
            H,
            W,
            lit,
            light[0] if lit else 0.0,
            light[1] if lit else 0.0,
            w0,
        )
        return img, depth, oid, None
    oid, depth, samples = _hard(
        A, o, h, fx, fy, cx, cy, codes, uv_scale, light, B, K, H, W, max_chunk, w0=w0
    )
    pix, slot, u, v, shade = samples
    if pix.numel() == 0:  # a copy: never a view of a pre-rendered layer the caller keeps
        img = bg.permute(0, 2, 1).expand(B, 3, P).clone(memory_format=torch.contiguous_format)
        return img.view(B, 3, H, W), depth.view(B, 1, H, W), oid, None
    meta0 = (atlas.offset[slot, 0], atlas.width[slot, 0], atlas.height[slot, 0], atlas.repeat[slot])
    meta1 = blend = None
    if mipmap and atlas.offset.shape[1] > 1:
        level = _mip_level(torch.stack([u, v], 1).detach(), pix, slot, oid, atlas, B, H, W)
        nl = atlas.num_levels[slot]
        lv = torch.minimum(level, (nl - 1).to(level.dtype))
        l0 = torch.floor(lv).long()
        l1 = torch.minimum(l0 + 1, nl - 1)
        blend = lv - l0.to(lv.dtype)
        meta0 = (
            atlas.offset[slot, l0],
            atlas.width[slot, l0],
            atlas.height[slot, l0],
            atlas.repeat[slot],
        )
        meta1 = (
            atlas.offset[slot, l1],
            atlas.width[slot, l1],
            atlas.height[slot, l1],
            atlas.repeat[slot],
        )
    img = composite(atlas.quad, u, v, shade, blend, bg, pix, meta0, meta1, (B, H, W))
    return img, depth.view(B, 1, H, W), oid, None


def _planar_forms(A, o, h, fx, fy, cx, cy, uv_scale, codes):
    """Per (b, k) affine forms in pixel coordinates (x, y) for planar primitives.

    With ``d(x, y) = M [x, y, 1]`` the local direction of the ray through continuous pixel
    (x, y), the hit point on the body z = 0 plane is ``p_xy = N_xy / D`` and its depth
    ``-o_z / D``, where ``D = d_z`` and ``N_x = o_x d_z - o_z d_x`` are affine in (x, y): a
    homography. Returns (B, K, 3) coefficient triples (a, b, c) of a x + b y + c:

    * no-grad test: ``w = -D / o_z`` (inverse depth), ``nx = N_x / (h_x |o_z|)``, same for y;
      a rectangle is hit iff ``max(|nx|, |ny|) < w``, an infinite plane iff ``w > 0``.
    * differentiable: ``U, V`` (so that u = U / D + u0, v = V / D + v0) and ``D``.
    """
    c0 = A[..., :, 0] / fx.view(-1, 1, 1)
    c1 = A[..., :, 1] / fy.view(-1, 1, 1)
    c2 = A[..., :, 2] - c0 * cx.view(-1, 1, 1) - c1 * cy.view(-1, 1, 1)
    M = torch.stack([c0, c1, c2], -1)  # (B, K, 3 components, 3 coefficients)
    ox, oy, oz = o[..., 0:1], o[..., 1:2], o[..., 2:3]
    D = M[..., 2, :]
    Nx = ox * D - oz * M[..., 0, :]
    Ny = oy * D - oz * M[..., 1, :]
    is_rect = torch.tensor([c == RECT for c in codes], device=A.device).view(1, -1, 1)
    hx, hy = h[..., 0:1], h[..., 1:2]
    su, sv = uv_scale[:, 0].view(1, -1, 1), uv_scale[:, 1].view(1, -1, 1)
    hx_s = torch.where(hx > 0, hx, torch.ones_like(hx))
    hy_s = torch.where(hy > 0, hy, torch.ones_like(hy))
    U = Nx * torch.where(is_rect, su / (2 * hx_s), su)
    V = Ny * torch.where(is_rect, sv / (2 * hy_s), sv)
    u0 = torch.where(is_rect, 0.5 * su, torch.zeros_like(su)).expand_as(oz)
    v0 = torch.where(is_rect, 0.5 * sv, torch.zeros_like(sv)).expand_as(oz)
    return D, Nx, Ny, U, V, u0, v0


def _tables(A, o, h, fx, fy, cx, cy, codes, uv_scale, light, B, K, H, W):
    """Per-(b, k) tables shared by the chunked and the dense hard paths.

    Returns plan_tab (B, K, 12|13) differentiable planar forms [U(3), V(3), D(3), -o_z, u0,
    v0, (shade)]; gen_tab (B, K, 21|24) differentiable generic parameters [A(9), o(3), h(3),
    su, sv, fx, fy, cx, cy, (light(3))]; no-grad planar test forms Wf, NXf, NYf (B, K, 3);
    detached A, o, h; no-grad camera-frame direction components dxd (B, W), dyd (B, H).
    """
    dtype, device = o.dtype, o.device
    planar = [k for k, c in enumerate(codes) if c in (PLANE, RECT)]
    generic = [k for k, c in enumerate(codes) if c not in (PLANE, RECT)]
    D, Nx, Ny, U, V, u0, v0 = _planar_forms(A, o, h, fx, fy, cx, cy, uv_scale, codes)
    oz = o[..., 2:3]
    # differentiable per-(b, k) tables
    plan_tab = None
    if planar:
        cols = [U, V, D, -oz, u0, v0]
        if light is not None:
            amb, inten, l_local = light
            # planar normal is body +z, flipped towards the camera (two-sided)
            facing = torch.where(oz >= 0, l_local[..., 2:3], -l_local[..., 2:3])
            cols.append(amb + inten * facing.clamp(min=0))
        plan_tab = torch.cat(cols, -1)
    gen_tab = None
    if generic:
        f4 = torch.stack([fx, fy, cx, cy], -1).unsqueeze(1).expand(B, K, 4)
        cols = [A.reshape(B, K, 9), o, h, uv_scale.unsqueeze(0).expand(B, K, 2), f4]
        if light is not None:
            cols.append(light[2])
        gen_tab = torch.cat(cols, -1)

    with torch.no_grad():
        w_scale = 1.0 / torch.where(oz.abs() > 0, oz.abs(), torch.ones_like(oz))
        Wf = torch.where(oz.abs() > 0, -D * torch.sign(oz) * w_scale, torch.zeros_like(D) - 1)
        hx = h[..., 0:1].clamp(min=1e-30)
        hy = h[..., 1:2].clamp(min=1e-30)
        NXf = Nx * w_scale / hx
        NYf = Ny * w_scale / hy
        Ad, od, hd = A.detach(), o.detach(), h.detach()
        dxd = (torch.arange(W, dtype=dtype, device=device) + 0.5) - cx.detach().unsqueeze(1)
        dxd = dxd / fx.detach().unsqueeze(1)
        dyd = (torch.arange(H, dtype=dtype, device=device) + 0.5) - cy.detach().unsqueeze(1)
        dyd = dyd / fy.detach().unsqueeze(1)
    return plan_tab, gen_tab, Wf, NXf, NYf, Ad, od, hd, dxd, dyd


def _hard(
    A,
    o,
    h,
    fx,
    fy,
    cx,
    cy,
    codes,
    uv_scale,
    light,
    B,
    K,
    H,
    W,
    max_chunk,
    geometry_only=False,
    oid=None,
    w0=None,
):
    """Nearest hit per pixel and the differentiable recomputation of the winner.

    ``oid`` (B, H, W), when given, is the winner map to recompute (no hit test); ``w0``
    (B|1, H, W) is the inverse depth of a pre-rendered layer that the primitives must beat.

    Returns object_id (B, H, W) long, depth (B*H*W,) and samples = (pix, slot, u, v, shade):
    per foreground pixel its flat index, primitive index, texture coordinates (uv_scale
    applied) and shading factor (None without lighting).
    """
    dtype, device = o.dtype, o.device
    P = H * W
    code_tab = torch.tensor(codes, dtype=torch.long, device=device)

    plan_tab, gen_tab, Wf, NXf, NYf, Ad, od, hd, dxd, dyd = _tables(
        A, o, h, fx, fy, cx, cy, codes, uv_scale, light, B, K, H, W
    )
    if plan_tab is not None:
        plan_tab = plan_tab.reshape(B * K, -1).t()  # index_select(1, .) gives contiguous rows
    if gen_tab is not None:
        gen_tab = gen_tab.reshape(B * K, -1).t()
    xs = torch.arange(W, dtype=dtype, device=device) + 0.5
    ys = torch.arange(H, dtype=dtype, device=device) + 0.5

    # chunks: nb whole images, or row blocks of one image when an image is too large
    px_chunk = max(1, max_chunk // max(1, 4 * K))
    if P <= px_chunk:
        nb, rows = max(1, min(B, px_chunk // P)), H
    else:
        nb, rows = 1, max(1, px_chunk // W)
    if oid is None:
        with torch.no_grad():
            oid = _nearest(Wf, NXf, NYf, Ad, od, hd, dxd, dyd, fx, fy, cx, cy, codes, w0, px_chunk)
    if geometry_only:
        return oid, None
    out_pix, out_k, out_u, out_v, out_d, out_s = [], [], [], [], [], []
    for b0 in range(0, B, nb):
        b1 = min(B, b0 + nb)
        for r0 in range(0, H, rows):
            r1 = min(H, r0 + rows)
            best_k = oid[b0:b1, r0:r1]
            # foreground pixels (one pass over the chunk), then split by kind on that list
            kq = best_k.reshape(-1)
            q_fg = (kq >= 0).nonzero().squeeze(1)
            k_fg = kq[q_fg]
            code_fg = code_tab[k_fg]
            nbh = (r1 - r0) * W
            for code in sorted(set(codes)):
                sel = (code_fg == code).nonzero().squeeze(1)
                if sel.numel() == 0:
                    continue
                q, k = q_fg[sel], k_fg[sel]
                bl = q // nbh
                rem = q - bl * nbh
                row = rem // W + r0
                col = rem - (row - r0) * W
                b = bl + b0
                bk = b * K + k
                x = xs[col]
                y = ys[row]
                if code in (PLANE, RECT):
                    g = plan_tab.index_select(1, bk)
                    Ug = g[0] * x + g[1] * y + g[2]
                    Vg = g[3] * x + g[4] * y + g[5]
                    Dg = g[6] * x + g[7] * y + g[8]
                    inv = 1.0 / torch.where(Dg.abs() > 1e-30, Dg, torch.ones_like(Dg))
                    u = Ug * inv + g[10]
                    v = Vg * inv + g[11]
                    depth = g[9] * inv
                    shade = g[12] if light is not None else None
                else:
                    g = gen_tab.index_select(1, bk)
                    dcx = (x - g[19]) / g[17]
                    dcy = (y - g[20]) / g[18]
                    d = torch.stack(
                        [g[3 * i] * dcx + g[3 * i + 1] * dcy + g[3 * i + 2] for i in range(3)], 1
                    )
                    ow = g[9:12].t()
                    hw = g[12:15].t()
                    depth, _ = intersect(code, ow, d, hw)
                    p = ow + depth.unsqueeze(1) * d
                    u, v = surface_uv(code, p, hw)
                    u = u * g[15]
                    v = v * g[16]
                    shade = None
                    if light is not None:
                        amb, inten, _ = light
                        n = surface_normal(code, p, hw)
                        n = n / torch.linalg.vector_norm(n, dim=1, keepdim=True).clamp(min=1e-12)
                        n = torch.where((n * d).sum(1, keepdim=True) > 0, -n, n)
                        lam = (n * g[21:24].t()).sum(1).clamp(min=0)
                        shade = amb + inten * lam
                out_pix.append(b * P + row * W + col)
                out_k.append(k)
                out_u.append(u)
                out_v.append(v)
                out_d.append(depth)
                out_s.append(shade)
    depth_img = torch.zeros(B * P, dtype=dtype, device=device)
    if not out_pix:
        e = torch.zeros(0, dtype=dtype, device=device)
        el = torch.zeros(0, dtype=torch.long, device=device)
        return oid, depth_img, (el, el, e, e, None)
    pix = torch.cat(out_pix)
    depth_img = depth_img.index_put((pix,), torch.cat(out_d))
    shade = torch.cat(out_s) if light is not None else None
    return oid, depth_img, (pix, torch.cat(out_k), torch.cat(out_u), torch.cat(out_v), shade)


def _nearest(Wf, NXf, NYf, A, o, h, dx, dy, fx, fy, cx, cy, codes, w0, px_chunk):
    """No-grad nearest hit -> (B, H, W) primitive index or -1.

    Compares inverse depth (larger = nearer), starting from the layer's ``w0`` (B|1, H, W)
    when there is one (else 0: nothing). Each primitive is tested only inside a pixel window
    that contains its projection (``_pixel_windows``): moving bodies usually cover a small
    part of the image. Planar primitives use their affine forms (three broadcast adds per
    pixel), the others the analytic ``intersect``; at most ``px_chunk`` pixels at a time.
    Shapes as returned by ``_tables``; fx, fy, cx, cy (B,).
    """
    B, K = Wf.shape[:2]
    H, W = dy.shape[1], dx.shape[1]
    dtype, device = dx.dtype, dx.device
    if w0 is None:
        best_w = torch.zeros(B, H, W, dtype=dtype, device=device)
    else:
        best_w = w0.expand(B, H, W).clone()
    best_k = torch.full((B, H, W), -1, dtype=torch.long, device=device)
    # planar primitives first, then the others grouped by kind (the order ties resolve in)
    order = [k for k, c in enumerate(codes) if c in (PLANE, RECT)]
    order += sorted(set(range(K)) - set(order), key=lambda k: (codes.index(codes[k]), k))
    for k in order:
        code = codes[k]
        y0, x0, hk, wk = _pixel_windows(code, A[:, k], o[:, k], h[:, k], fx, fy, cx, cy, H, W)
        if hk == 0 or wk == 0:
            continue  # off-screen or behind the camera in every image
        nb = max(1, min(B, px_chunk // (hk * wk)))
        for b0 in range(0, B, nb):
            b1 = min(B, b0 + nb)
            rows = y0[b0:b1, None] + torch.arange(hk, device=device)  # (nb, hk)
            cols = x0[b0:b1, None] + torch.arange(wk, device=device)  # (nb, wk)
            if code in (PLANE, RECT):
                x = (cols.to(dtype) + 0.5).unsqueeze(1)
                y = (rows.to(dtype) + 0.5).unsqueeze(2)

                def ev(F, k=k, b0=b0, b1=b1, x=x, y=y):
                    f = F[b0:b1, k].view(-1, 3, 1, 1)
                    return (f[:, 0] * x + f[:, 2]) + f[:, 1] * y

                w = ev(Wf)
                if code == RECT:
                    hit = torch.maximum(ev(NXf).abs_(), ev(NYf).abs_()) < w
                else:
                    hit = w > 0
            else:
                d = _local_dirs(
                    A[b0:b1, k : k + 1], dx[b0:b1].gather(1, cols), dy[b0:b1].gather(1, rows)
                )
                t, hit = _intersect_culled(
                    code, o[b0:b1, k, None, None, None], d, h[b0:b1, k, None, None, None]
                )
                hit, t = hit[:, 0], t[:, 0]
                w = torch.where(hit, 1.0 / t, torch.zeros_like(t))
            # merge: gather / scatter along each image's flat pixels (a window lies inside it)
            idx = (rows.unsqueeze(2) * W + cols.unsqueeze(1)).view(b1 - b0, -1)
            img_w, img_k = best_w.view(B, -1)[b0:b1], best_k.view(B, -1)[b0:b1]
            cur_w, cur_k = img_w.gather(1, idx), img_k.gather(1, idx)
            w = w.reshape(b1 - b0, -1)
            better = hit.reshape(b1 - b0, -1) & (w > cur_w)
            img_w.scatter_(1, idx, torch.where(better, w, cur_w))
            img_k.scatter_(1, idx, torch.where(better, k, cur_k))
    return best_k


def _intersect_culled(code, o, d, h):
    """``intersect`` without autograd, the same values; cylinders and capsules are tested
    exactly only on the rays that pass near their axis line (a cheap test: the others miss
    the infinite cylinder of radius r that contains them), which in a window around a thin
    pole is a small fraction. o, h (..., 3) broadcast against d (..., 3)."""
    if code not in (CYLINDER, CAPSULE):
        return intersect(code, o, d, h)
    ox, oy, r = o[..., 0], o[..., 1], h[..., 0]
    dx, dy = d[..., 0], d[..., 1]
    a = dx * dx + dy * dy
    b = ox * dx + oy * dy
    c = ox * ox + oy * oy - r * r
    # real roots of |xy(t)|^2 = r^2, with a generous margin: the exact test decides
    near = b * b - a * c >= -1e-3 * (b * b + (a * c).abs())
    q = near.nonzero(as_tuple=True)
    t = torch.ones_like(a)
    hit = torch.zeros_like(near)
    t[q], hit[q] = intersect(code, o.expand_as(d)[q], d[q], h.expand_as(d)[q])
    return t, hit


def _pixel_windows(code, A, o, h, fx, fy, cx, cy, H, W):
    """Pixel windows that contain every pixel whose ray can hit one primitive, per image.

    The primitive lies in its local box of half extents ``e``; when all 8 corners are in
    front of the camera, the projection of the box is the convex hull of the projected
    corners (a perspective projection keeps convexity for z > 0), so their pixel bounds,
    plus a one-pixel margin for rounding, bound its silhouette. Otherwise (or for an infinite
    plane) the window is the whole image.

    Args: A (B, 3, 3) local_from_camera; o, h (B, 3) camera centre in the local frame and half
    sizes; fx, fy, cx, cy (B,).

    Returns:
        y0, x0: (B,) long first row and column of each image's window; hk, wk: the common
        window size (int; 0 when the primitive is off-screen in every image). Windows are
        moved inside the image where they would stick out.
    """
    B, device = A.shape[0], A.device
    if code == PLANE:
        zero = torch.zeros(B, dtype=torch.long, device=device)
        return zero, zero, H, W
    r, hl = h[:, :1], h[:, 1:2]
    if code in (BOX, RECT):  # a rectangle's h_z is 0
        e = h
    elif code == SPHERE:
        e = r.expand(B, 3)
    else:
        e = torch.cat([r, r, hl + r if code == CAPSULE else hl], 1)
    signs = torch.tensor(
        [[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)],
        dtype=A.dtype,
        device=device,
    )
    corners = signs * e.unsqueeze(1) - o.unsqueeze(1)  # (B, 8, 3), relative to the camera
    pc = corners @ A  # camera frame: A^T (p - o), as rows
    z = pc[..., 2]
    zs = torch.where(z > 0, z, torch.ones_like(z))
    px = fx.unsqueeze(1) * pc[..., 0] / zs + cx.unsqueeze(1)
    py = fy.unsqueeze(1) * pc[..., 1] / zs + cy.unsqueeze(1)
    ok = (z > 0).all(1) & torch.isfinite(px).all(1) & torch.isfinite(py).all(1)

    def bounds(p, n):
        # pixel j's ray passes through j + 0.5: j in [ceil(min - 0.5), floor(max - 0.5)]
        lo = torch.where(ok, torch.floor(p.amin(1) - 0.5) - 1, 0.0).clamp(0, n)
        hi = torch.where(ok, torch.ceil(p.amax(1) - 0.5) + 1, n - 1.0).clamp(-1, n - 1)
        size = int((hi - lo + 1).clamp(min=0).max())
        return torch.minimum(lo, torch.full_like(lo, n - size)).long(), size

    y0, hk = bounds(py, H)
    x0, wk = bounds(px, W)
    return y0, x0, hk, wk


def _local_dirs(A, dx, dy):
    """Local directions (B, Kg, h, W, 3) from A (B, Kg, 3, 3), dx (B, W), dy (B, h).

    Built component-major (each component a contiguous (B, Kg, h, W) block, one broadcast
    multiply-add each) and returned as a last-dim view, so the per-component arithmetic in
    ``intersect`` runs on contiguous memory.
    """
    a = A.unsqueeze(-1).unsqueeze(-1)  # (B, Kg, 3, 3, 1, 1)
    x = dx[:, None, None, :]  # (B, 1, 1, W)
    y = dy[:, None, :, None]  # (B, 1, h, 1)
    comps = [a[:, :, i, 0] * x + (a[:, :, i, 1] * y + a[:, :, i, 2]) for i in range(3)]
    return torch.stack(comps, 0).movedim(0, -1)


def _shade(color, code, p, d, n_local_light, h, light):
    amb, inten, _ = light
    n = surface_normal(code, p, h)
    n = n / torch.linalg.vector_norm(n, dim=-1, keepdim=True).clamp(min=1e-12)
    if code in (PLANE, RECT):
        # two-sided: the side seen by the camera. Closed solids keep the outward normal: the
        # camera sees their outside, and at the points soft edges shade for rays that miss
        # (closest approach) n . d is 0 up to rounding, so a sign test there would flicker.
        facing = (n * d).sum(-1, keepdim=True)
        n = torch.where(facing > 0, -n, n)
    lam = (n * n_local_light).sum(-1, keepdim=True).clamp(min=0)
    return color * (amb + inten * lam)


def _mip_level(uv, idx, k, best_k, atlas, B, H, W):
    """Per-sample mip level (detached float) from screen-space (u, v) differences in texels.

    Differences are taken to the neighbour on the same primitive; of the forward and backward
    neighbours the smaller difference is used, which ignores texture seams and face edges.
    """
    dtype = uv.dtype
    P = H * W
    uvi = torch.zeros(B * P, 2, dtype=dtype, device=uv.device)
    uvi[idx] = uv * torch.stack([atlas.width[k, 0], atlas.height[k, 0]], 1).to(dtype)
    uvi = uvi.view(B, H, W, 2)
    kid = best_k

    def deriv(dim):
        n = uvi.shape[dim]
        fwd = uvi.narrow(dim, 1, n - 1) - uvi.narrow(dim, 0, n - 1)
        same = kid.narrow(dim, 1, n - 1) == kid.narrow(dim, 0, n - 1)
        mag = torch.where(same, torch.linalg.vector_norm(fwd, dim=-1), float("inf"))
        pad_shape = list(mag.shape)
        pad_shape[dim] = 1
        inf = torch.full(pad_shape, float("inf"), dtype=dtype, device=uv.device)
        f = torch.cat([mag, inf], dim)  # forward difference of each pixel
        bwd = torch.cat([inf, mag], dim)  # backward difference
        m = torch.minimum(f, bwd)
        return torch.where(torch.isfinite(m), m, torch.zeros_like(m))

    rho = torch.maximum(deriv(2), deriv(1)).reshape(-1)[idx]
    return torch.log2(rho.clamp(min=1.0))


# Soft coverage sigmoid(sd / sigma) is treated as exactly 0 where sd <= -_SOFT_TAIL * sigma:
# sigmoid(-17) = 4.1e-8 (below float32's half ulp of 1, 6e-8), sigmoid(-37) = 8.5e-17 (below
# float64's, 1.1e-16). Per pixel this changes the image by at most K * sigmoid(-tail) times the
# largest colour difference, and d(coverage)/d(sd) there by at most sigmoid(-tail) / sigma.
_SOFT_TAIL = {torch.float16: 10.0, torch.bfloat16: 10.0, torch.float32: 17.0, torch.float64: 37.0}


def _soft(
    A, o, h, dxp, dyp, fx, fy, groups, atlas, uv_scale, light, bg, sigma, B, K, H, W, max_chunk, w0
):
    """Soft silhouettes, composited front to back over ``bg``; returns the colours (B*H*W, 3)
    and the primitives' accumulated opacity (B*H*W,).

    Shapes: A (B, K, 3, 3); o, h (B, K, 3); dxp (B, W), dyp (B, H) camera ray slopes; fx, fy
    (B,) pixels; uv_scale (K, 2); bg (B|1, H*W, 3); ``w0`` (B|1, H, W): inverse depth (1/m) of
    a pre-rendered layer (``bg``) or None; primitive samples at or behind it get coverage 0,
    as the hard test would hide them.

    Each primitive is evaluated (with autograd) only inside a pixel window per image (a common
    size over the batch, as in ``_nearest``) that holds every pixel where its silhouette
    distance exceeds ``-_SOFT_TAIL * sigma``: found by a no-grad pass of the same
    ``silhouette_distance``, so the bound holds whatever the shape (sharp polygon corners
    included). Outside its window a primitive's coverage is exactly 0 instead of below
    sigmoid(-_SOFT_TAIL) (see there for the error bound); pixels outside every window are
    the background. Only the union of the windows is composited.
    """
    dtype, device = o.dtype, o.device
    P = H * W
    f_mean = (0.5 * (fx + fy)).unsqueeze(1)
    fx1, fy1 = fx.unsqueeze(1), fy.unsqueeze(1)
    code_of = {k: code for code, ks in groups.items() for k in ks}
    windows = _soft_windows(
        A, o, h, dxp, dyp, fx1, fy1, f_mean, groups, sigma * _SOFT_TAIL[dtype], max_chunk
    )
    bg_flat = bg.expand(B, P, 3).reshape(B * P, 3)
    work = 16 * B * sum(hk * wk for _, _, hk, wk in windows.values())
    use_ckpt = work > max_chunk and torch.is_grad_enabled()
    texels = atlas.texels

    def piece(k, b0, b1, rows, cols, A, o, h, dxp, dyp, texels, uv_scale, w0c):
        """Coverage (nb, n), depth (nb, n), colour (nb, n, 3) of primitive k on the window
        rows x cols (nb, hk) x (nb, wk) of images b0:b1."""
        atlas.texels = texels  # an explicit input, so that checkpoint re-runs see it
        code, nb = code_of[k], b1 - b0
        d = _local_dirs(A[b0:b1, k : k + 1], dxp[b0:b1].gather(1, cols), dyp[b0:b1].gather(1, rows))
        d = d.reshape(nb, 1, -1, 3)
        ok, hk_ = o[b0:b1, k : k + 1], h[b0:b1, k : k + 1]
        sd, depth, pt = silhouette_distance(
            code, ok, d, hk_, A[b0:b1, k : k + 1], fx1[b0:b1], fy1[b0:b1], f_mean[b0:b1]
        )
        hg = hk_.unsqueeze(2)
        u, v = surface_uv(code, pt, hg)
        n = d.shape[2]
        slot = torch.full((nb * n,), k, dtype=torch.long, device=device)
        col = atlas.sample(
            slot, (u * uv_scale[k, 0]).reshape(-1), (v * uv_scale[k, 1]).reshape(-1), None
        ).view(nb, 1, n, 3)
        if light is not None:
            col = _shade(col, code, pt, d, light[2][b0:b1, k : k + 1].unsqueeze(2), hg, light)
        alpha = torch.sigmoid(sd / sigma)
        if w0c is not None:  # depth * w0 < 1 <=> nearer than the layer (0 where it is empty)
            alpha = torch.where(depth * w0c.unsqueeze(1) < 1, alpha, torch.zeros_like(alpha))
        return alpha[:, 0], depth[:, 0], col[:, 0]

    pids, slots, alphas, depths, colors = [], [], [], [], []
    for k, (y0, x0, hk, wk) in windows.items():
        if hk == 0 or wk == 0:
            continue  # coverage below the bound in every pixel of every image
        nb = max(1, min(B, max_chunk // max(1, 16 * hk * wk)))
        for b0 in range(0, B, nb):
            b1 = min(B, b0 + nb)
            rows = y0[b0:b1, None] + torch.arange(hk, device=device)  # (nb, hk)
            cols = x0[b0:b1, None] + torch.arange(wk, device=device)  # (nb, wk)
            idx = (rows.unsqueeze(2) * W + cols.unsqueeze(1)).view(b1 - b0, -1)
            w0c = None
            if w0 is not None:
                w0c = w0.expand(B, H, W)[b0:b1].reshape(b1 - b0, -1).gather(1, idx)
            args = (k, b0, b1, rows, cols, A, o, h, dxp, dyp, texels, uv_scale, w0c)
            if use_ckpt:
                alpha, depth, col = checkpoint(piece, *args, use_reentrant=False)
            else:
                alpha, depth, col = piece(*args)
            pid = idx + (torch.arange(b0, b1, device=device) * P).unsqueeze(1)
            pids.append(pid.reshape(-1))
            slots.append(torch.full((pid.numel(),), k, dtype=torch.long, device=device))
            alphas.append(alpha.reshape(-1))
            depths.append(depth.reshape(-1))
            colors.append(col.reshape(-1, 3))
    atlas.texels = texels
    if not pids:  # a copy: never a view of a pre-rendered layer the caller keeps
        return bg_flat.clone(memory_format=torch.contiguous_format), bg_flat.new_zeros(B * P)
    # the union of the windows as a list of N flat pixels, and each sample's row in it
    pid = torch.cat(pids)
    mark = torch.zeros(B * P, dtype=torch.bool, device=device)
    mark[pid] = True
    q = mark.nonzero().squeeze(1)
    row_of = torch.empty(B * P, dtype=torch.long, device=device)
    row_of[q] = torch.arange(q.numel(), device=device)
    at = (row_of[pid], torch.cat(slots))
    N = q.numel()
    # a primitive not evaluated at a pixel: coverage 0, behind everything
    alpha = torch.zeros(N, K, dtype=dtype, device=device).index_put(at, torch.cat(alphas))
    depth = torch.full((N, K), _FAR, dtype=dtype, device=device).index_put(at, torch.cat(depths))
    color = torch.zeros(N, K, 3, dtype=dtype, device=device).index_put(at, torch.cat(colors))
    order = depth.argsort(dim=1)
    alpha = alpha.gather(1, order)
    color = color.gather(1, order.unsqueeze(-1).expand_as(color))
    trans = torch.cumprod(1.0 - alpha, dim=1)
    before = torch.cat([torch.ones_like(trans[:, :1]), trans[:, :-1]], 1)
    out = ((alpha * before).unsqueeze(-1) * color).sum(1) + trans[:, -1:] * bg_flat[q]
    coverage = bg_flat.new_zeros(B * P).index_copy(0, q, 1.0 - trans[:, -1])
    return bg_flat.index_copy(0, q, out), coverage


_FAR = 1e30  # depth of a primitive not evaluated at a pixel (sorts last; coverage 0 there)


def _soft_windows(A, o, h, dxp, dyp, fx1, fy1, f_mean, groups, margin, max_chunk):
    """No-grad: per primitive k, {k: (y0, x0, hk, wk)} as ``_pixel_windows`` returns them, a
    window per image (common size) holding every pixel where ``silhouette_distance`` exceeds
    ``-margin`` (pixels). Shapes as in ``_soft``; fx1, fy1, f_mean (B, 1)."""
    B = A.shape[0]
    H, W = dyp.shape[1], dxp.shape[1]
    device = A.device
    out = {}
    with torch.no_grad():
        for code, ks in groups.items():
            if code in (BOX, RECT):
                near_r, near_c = _coarse_near(A, o, h, dxp, dyp, fx1, fy1, f_mean, code, ks, margin)
            else:  # every pixel, in row chunks
                rows = max(1, min(H, max_chunk // max(1, 16 * B * len(ks) * W)))
                near_r, near_c = [], torch.zeros(B, len(ks), W, dtype=torch.bool, device=device)
                for r0 in range(0, H, rows):
                    r1 = min(H, r0 + rows)
                    d = _local_dirs(A[:, ks], dxp, dyp[:, r0:r1]).reshape(B, len(ks), -1, 3)
                    sd, _, _ = silhouette_distance(
                        code, o[:, ks], d, h[:, ks], A[:, ks], fx1, fy1, f_mean, distance_only=True
                    )
                    near = (sd > -margin).view(B, len(ks), r1 - r0, W)
                    near_r.append(near.any(3))
                    near_c |= near.any(2)
                near_r = torch.cat(near_r, 2)
            for j, k in enumerate(ks):
                y0, hk = _mask_bounds(near_r[:, j])
                x0, wk = _mask_bounds(near_c[:, j])
                out[k] = (y0, x0, hk, wk)
    return out


_COARSE = 4  # sample stride (pixels) of the no-grad distance pass for boxes and rectangles


def _coarse_near(A, o, h, dxp, dyp, fx1, fy1, f_mean, code, ks, margin):
    """Rows (B, Kg, H) and columns (B, Kg, W) that hold a pixel of primitives ``ks`` (boxes or
    rectangles) with silhouette distance > -margin, from a sample grid of stride ``_COARSE``.

    Their distance is a minimum of exact distances to lines in the image, so it is
    1-Lipschitz in pixel coordinates: a pixel within s / sqrt(2) of its block's sample g has
    sd(p) <= sd(g) + s / sqrt(2), and testing sd(g) > -(margin + s) marks every block that
    may hold such a pixel (a superset: never fewer pixels than the full test).
    """
    B, H, W, s = A.shape[0], dyp.shape[1], dxp.shape[1], _COARSE
    rc = (torch.arange(0, H, s, device=A.device) + s // 2).clamp(max=H - 1)
    cc = (torch.arange(0, W, s, device=A.device) + s // 2).clamp(max=W - 1)
    d = _local_dirs(A[:, ks], dxp[:, cc], dyp[:, rc]).reshape(B, len(ks), -1, 3)
    sd, _, _ = silhouette_distance(
        code, o[:, ks], d, h[:, ks], A[:, ks], fx1, fy1, f_mean, distance_only=True
    )
    near = (sd > -(margin + s)).view(B, len(ks), rc.numel(), cc.numel())
    near_r = near.any(3).repeat_interleave(s, 2)[..., :H]
    near_c = near.any(2).repeat_interleave(s, 2)[..., :W]
    return near_r, near_c


def _mask_bounds(mask):
    """First index (B,) long and common length (int) of windows that hold each image's True
    entries of ``mask`` (B, n), moved inside [0, n) (0 when no image has any)."""
    n = mask.shape[1]
    i = torch.arange(n, device=mask.device)
    lo = torch.where(mask, i, n).amin(1)
    hi = torch.where(mask, i, -1).amax(1)
    size = int((hi - lo + 1).clamp(min=0).max())
    return torch.minimum(lo, torch.full_like(lo, n - size)), size


# ---------------------------------------------------------------------------- dense path
def _hard_dense(
    plan_tab,
    gen_tab,
    Wf,
    NXf,
    NYf,
    Ad,
    od,
    hd,
    dxd,
    dyd,
    texels,
    t_off,
    t_w,
    t_h,
    t_rep,
    bg,
    codes: tuple,
    H: int,
    W: int,
    lit: bool,
    amb: float,
    inten: float,
    w0=None,
):
    """The hard-edge render as one dense, branch-free function over (B, H*W) pixels.

    Same results as the chunked eager path; written without data-dependent shapes (no
    ``nonzero``, no Python loops over data) so that ``torch.compile`` can fuse it into a few
    loops over pixels, forward and backward. Used when ``render(..., compile=True)``.

    Tables: plan_tab (B, K, 13) planar forms, gen_tab (B, K, 24) generic parameters (either
    may be None), Wf/NXf/NYf (B, K, 3) no-grad planar forms, Ad (B, K, 3, 3), od/hd (B, K, 3),
    dxd (B, W), dyd (B, H); t_off/t_w/t_h/t_rep (K,) texture slot data; texels (N, 3);
    bg (1|B, H*W, 3); w0 (1|B, H, W) inverse depth of a pre-rendered layer, or None.
    """
    B, K = Wf.shape[:2]
    dtype = Wf.dtype
    x = torch.arange(W, dtype=dtype, device=Wf.device) + 0.5
    y = torch.arange(H, dtype=dtype, device=Wf.device) + 0.5
    with torch.no_grad():
        best_w = torch.zeros(B, H, W, dtype=dtype, device=Wf.device) if w0 is None else w0
        best_k = torch.full((B, H, W), -1, dtype=torch.long, device=Wf.device)
        xx = x.view(1, 1, W)
        yy = y.view(1, H, 1)
        dxx = dxd.view(B, 1, W)
        dyy = dyd.view(B, H, 1)
        for k, code in enumerate(codes):
            if code in (PLANE, RECT):

                def ev(F, k=k):
                    f = F[:, k].view(B, 3, 1, 1)
                    return f[:, 0] * xx + f[:, 1] * yy + f[:, 2]

                w = ev(Wf)
                hit = torch.maximum(ev(NXf).abs(), ev(NYf).abs()) < w if code == RECT else w > 0
            else:
                a = Ad[:, k].view(B, 3, 3, 1, 1)
                d = torch.stack(
                    [a[:, i, 0] * dxx + a[:, i, 1] * dyy + a[:, i, 2] for i in range(3)], -1
                )
                t, hit = intersect(code, od[:, k].view(B, 1, 1, 3), d, hd[:, k].view(B, 1, 1, 3))
                w = torch.where(hit, 1.0 / t, torch.zeros_like(t))
            better = hit & (w > best_w)
            best_w = torch.where(better, w, best_w)
            best_k = torch.where(better, k, best_k)
    P = H * W
    kq = best_k.view(B, P)
    kc = kq.clamp(min=0)
    fg = (kq >= 0).unsqueeze(-1)
    xp, yp = _pixel_centres(B, H, W, dtype, Wf.device)
    u = v = depth = shade = None

    def merge(old, new, sel):
        return new if old is None else torch.where(sel, new, old)

    # Per-primitive evaluation selected with where (no gather from the (B, K) tables): the
    # backward then reduces over pixels instead of scattering into a few hundred table
    # entries, which compiled CPU code would do with contended atomics.
    for k, code in enumerate(codes):
        sel = kq == k
        if code in (PLANE, RECT):
            g = plan_tab[:, k].unsqueeze(-1).unbind(1)  # each (B, 1)
            Dg = g[6] * xp + g[7] * yp + g[8]
            inv = 1.0 / torch.where(Dg.abs() > 1e-30, Dg, torch.ones_like(Dg))
            u = merge(u, (g[0] * xp + g[1] * yp + g[2]) * inv + g[10], sel)
            v = merge(v, (g[3] * xp + g[4] * yp + g[5]) * inv + g[11], sel)
            depth = merge(depth, g[9] * inv, sel)
            if lit:
                shade = merge(shade, g[12].expand(B, P), sel)
        else:
            g = gen_tab[:, k].unsqueeze(-1).unbind(1)
            dcx = (xp - g[19]) / g[17]
            dcy = (yp - g[20]) / g[18]
            d = torch.stack(
                [g[3 * i] * dcx + g[3 * i + 1] * dcy + g[3 * i + 2] for i in range(3)], -1
            )
            ow = torch.stack(g[9:12], -1)
            hw = torch.stack(g[12:15], -1)
            t, _ = intersect(code, ow, d, hw)
            pt = ow + t.unsqueeze(-1) * d
            uc, vc = surface_uv(code, pt, hw)
            u = merge(u, uc * g[15], sel)
            v = merge(v, vc * g[16], sel)
            depth = merge(depth, t, sel)
            if lit:
                n = surface_normal(code, pt, hw)
                n = n / torch.linalg.vector_norm(n, dim=-1, keepdim=True).clamp(min=1e-12)
                n = torch.where((n * d).sum(-1, keepdim=True) > 0, -n, n)
                lam = (n * torch.stack(g[21:24], -1)).sum(-1).clamp(min=0)
                shade = merge(shade, amb + inten * lam, sel)
    # texture: four gathers from the flat (N, 3) texels + bilinear (in fused code the loads
    # are cheap, and the backward scatters into N texels rather than a 4x larger quad table)
    uf, vf = u.reshape(-1), v.reshape(-1)
    kf = kc.reshape(-1)
    col = _bilinear_texels(texels, t_off[kf], t_w[kf], t_h[kf], t_rep[kf], uf, vf).view(B, P, 3)
    if lit:
        col = col * shade.unsqueeze(-1)
    img = torch.where(fg, col, bg)
    depth = torch.where(fg[..., 0], depth, torch.zeros_like(depth))
    return img.view(B, H, W, 3).permute(0, 3, 1, 2), depth.view(B, 1, H, W), best_k


_COMPILED = {}


def _dense_fn(compiled: bool):
    if not compiled:
        return _hard_dense
    if "fn" not in _COMPILED:
        _COMPILED["fn"] = torch.compile(_hard_dense, dynamic=False)
    return _COMPILED["fn"]


# ---------------------------------------------------------------------------- planar fast path
def _pixel_centres(B: int, H: int, W: int, dtype, device):
    """Pixel-centre coordinates x = j + 0.5, y = i + 0.5 as (B, H * W) planes (px)."""
    x = torch.arange(W, dtype=dtype, device=device) + 0.5
    y = torch.arange(H, dtype=dtype, device=device) + 0.5
    return (
        x.view(1, 1, W).expand(B, H, W).reshape(B, H * W),
        y.view(1, H, 1).expand(B, H, W).reshape(B, H * W),
    )


def _planar_table_at(plan_tab, kc, xp, yp):
    """The planar table (B, K, 13) at each pixel's primitive ``kc`` (B, P) and the ratios'
    parts there: (the 13 entries as (B, P) planes, U, V, 1 / D) at pixel centres xp, yp.

    Under torch.compile with few primitives the entries are a chain of selects, which Inductor
    fuses into vector blends; a gather there becomes one scalar load per pixel and entry (the
    planar forward spent about a fifth of its time on them). Eager, one gather.
    """
    B, P = kc.shape
    K = plan_tab.shape[1]
    if torch.compiler.is_compiling() and K <= _MAX_SELECT_PRIMITIVES:
        g = []
        for column in plan_tab.unbind(-1):
            plane = column[:, :1].expand(B, P)
            for k in range(1, K):
                plane = torch.where(kc == k, column[:, k : k + 1], plane)
            g.append(plane)
    else:
        g = plan_tab.gather(1, kc.unsqueeze(-1).expand(B, P, plan_tab.shape[-1])).unbind(-1)
    U = g[0] * xp + g[1] * yp + g[2]
    V = g[3] * xp + g[4] * yp + g[5]
    D = g[6] * xp + g[7] * yp + g[8]
    return g, U, V, 1.0 / torch.where(D.abs() > 1e-30, D, torch.ones_like(D))


_MAX_SELECT_PRIMITIVES = 16


def _in_range(x, top):
    """``x`` clamped to [0, top], NaN to 0 (``clamp`` keeps NaN)."""
    return torch.minimum(torch.where(x >= 0, x, torch.zeros_like(x)), top)


def _planar_forward(
    plan_tab, texels, bg, Wf, NXf, NYf, t_off, t_w, t_h, t_rep, codes, H, W, lit, w0, keep=False
):
    """Image (B, 3, H, W), depth (B, 1, H, W) and primitive id (B, H, W) of a planar scene:
    the nearest hit (against a layer's inverse depth ``w0`` (B|1, H, W) if any), its (u, v)
    from the planar table, a bilinear texel sample. Plain tensor code without autograd, fused
    by ``torch.compile`` when the compiled backend is used; every per-pixel quantity is a
    (B, P) plane, colours one plane per channel (an (B, P, 3) layout made Inductor loop over
    the 3 channels with masked vectors).

    With ``keep`` (a backward will follow) also what the backward needs per pixel, taken from
    the texel values this pass gathers anyway, so that the backward gathers no texel again,
    as separate (B, P) planes (stacking them cost a copy each): d colour / d u (RGB, per unit
    u, clamping included), d colour / d v (RGB), the bilinear fractions ax, ay, (lit) the
    unshaded colour (RGB), then the int32 flat texel index of each bilinear corner (4; the
    background's: ``len(texels)``, a sink).
    """
    B, K = Wf.shape[:2]
    dtype = Wf.dtype
    P = H * W
    xp, yp = _pixel_centres(B, H, W, dtype, Wf.device)
    if w0 is None:
        best_w = torch.zeros(B, P, dtype=dtype, device=Wf.device)
    else:
        best_w = w0.reshape(w0.shape[0], P)
    best_k = torch.full((B, P), -1, dtype=torch.long, device=Wf.device)
    for k, code in enumerate(codes):

        def ev(F, k=k):
            f = F[:, k].unsqueeze(-1)
            return f[:, 0] * xp + f[:, 1] * yp + f[:, 2]

        w = ev(Wf)
        hit = torch.maximum(ev(NXf).abs(), ev(NYf).abs()) < w if code == RECT else w > 0
        better = hit & (w > best_w)
        best_w = torch.where(better, w, best_w)
        best_k = torch.where(better, k, best_k)
    fg = best_k >= 0
    kc = best_k.clamp(min=0)
    g, U, V, inv = _planar_table_at(plan_tab, kc, xp, yp)
    u = U * inv + g[10]
    v = V * inv + g[11]
    # bilinear texel coordinates (as _bilinear_texels)
    off, wi, hi, rep = t_off[kc], t_w[kc], t_h[kc], t_rep[kc]
    wf, hf = wi.to(dtype), hi.to(dtype)
    xr = u * wf - 0.5
    yr = (1.0 - v) * hf - 0.5
    xq = torch.where(rep, xr, torch.minimum(xr.clamp(min=0), wf - 1))
    yq = torch.where(rep, yr, torch.minimum(yr.clamp(min=0), hf - 1))
    x0f = torch.floor(xq)
    y0f = torch.floor(yq)
    # zero off the objects: the backward's texel weights stay finite there (a NaN pose)
    ax = torch.where(fg, xq - x0f, torch.zeros_like(xq))
    ay = torch.where(fg, yq - y0f, torch.zeros_like(yq))
    x0w = torch.where(rep, x0f - wf * torch.floor(x0f / wf), x0f)
    y0w = torch.where(rep, y0f - hf * torch.floor(y0f / hf), y0f)
    x1w = torch.where(rep, torch.where(x0w + 1 >= wf, 0.0, x0w + 1), torch.minimum(x0w + 1, wf - 1))
    y1w = torch.where(rep, torch.where(y0w + 1 >= hf, 0.0, y0w + 1), torch.minimum(y0w + 1, hf - 1))
    # In range even for non-finite (u, v) (a NaN pose): the compiled backend reads and
    # scatters texels without Inductor's bounds checks (they cost an eighth of the forward).
    x0w, x1w = (_in_range(x, wf - 1) for x in (x0w, x1w))
    y0w, y1w = (_in_range(y, hf - 1) for y in (y0w, y1w))
    r0 = off + y0w.long() * wi
    r1 = off + y1w.long() * wi
    corners = (r0 + x0w.long(), r0 + x1w.long(), r1 + x0w.long(), r1 + x1w.long())
    sx = wf * (rep | ((xr >= 0) & (xr <= wf - 1)))
    sy = -hf * (rep | ((yr >= 0) & (yr <= hf - 1)))
    shade = g[12] if lit else None
    image, colour, d_du, d_dv = [], [], [], []
    for ch in range(3):
        c00, c01, c10, c11 = (texels[:, ch][i] for i in corners)
        top = c00 + (c01 - c00) * ax
        bot = c10 + (c11 - c10) * ax
        col = top + (bot - top) * ay
        image.append(torch.where(fg, col if shade is None else col * shade, bg[..., ch]))
        colour.append(col)
        d_du.append(((c01 - c00) * (1 - ay) + (c11 - c10) * ay) * sx)
        d_dv.append((bot - top) * sy)
    depth = torch.where(fg, g[9] * inv, torch.zeros_like(inv))
    out = (
        torch.stack(image, 1).view(B, 3, H, W),
        depth.view(B, 1, H, W),
        best_k.view(B, H, W),
    )
    if not keep:
        return out
    planes = d_du + d_dv + [ax, ay] + (colour if lit else [])
    # the backward scatters every pixel's colour gradient: the background's to a sink texel
    sink = texels.shape[0]
    return out + tuple(planes) + tuple(torch.where(fg, i, sink).to(torch.int32) for i in corners)


def _planar_backward_pixels(plan_tab, bg_shared, H, W, lit, g_img, g_depth, best_k, saved):
    """The planar backward but for the texels: the per-pixel gradients, from the forward's
    ``saved`` planes (no texel is gathered again) and the planar table, summed per (image,
    primitive).

    Args:
        plan_tab: (B, K, 13) the table of `_planar_forms`; g_img (B, 3, H, W); g_depth
            (B, 1, H, W) or None (no gradient reaches the depth); best_k (B, H, W); saved:
            the 8|11 float planes (B, P) kept by `_planar_forward`.

    Returns:
        g_tab: (B, K, F) gradient of the table's entries (F = 12, 13 lit).
        gc: (B, 3, P) the RGB gradient reaching the texture when lit; None unlit (it is
            ``g_img`` itself: the forward's corner indices send the background's to a
            sink texel).
        g_bg: (B|1, P, 3) gradient of the background.
    """
    B = plan_tab.shape[0]
    P = H * W
    xp, yp = _pixel_centres(B, H, W, plan_tab.dtype, plan_tab.device)
    best_k = best_k.reshape(B, P).long()
    fg = best_k >= 0
    kc = best_k.clamp(min=0)
    g, U, V, inv = _planar_table_at(plan_tab, kc, xp, yp)
    gi = g_img.reshape(B, 3, P)
    g_bg = torch.where(fg.unsqueeze(1), torch.zeros_like(gi), gi).transpose(1, 2)
    if bg_shared:
        g_bg = g_bg.sum(0, keepdim=True)
    gc = [torch.where(fg, gi[:, ch], torch.zeros_like(xp)) for ch in range(3)]
    extra = []
    if lit:
        extra = [sum(gc[ch] * saved[8 + ch] for ch in range(3))]
        gc = [c * g[12] for c in gc]
    gu = sum(gc[ch] * saved[ch] for ch in range(3))
    gv = sum(gc[ch] * saved[3 + ch] for ch in range(3))
    gU = gu * inv
    gV = gv * inv
    if g_depth is None:
        g_inv = gu * U + gv * V
        g_w = torch.zeros_like(xp)
    else:
        gd = torch.where(fg, g_depth.reshape(B, P), torch.zeros_like(xp))
        g_inv = gu * U + gv * V + gd * g[9]
        g_w = gd * inv
    gD = -g_inv * inv * inv
    feats = [gU * xp, gU * yp, gU, gV * xp, gV * yp, gV, gD * xp, gD * yp, gD, g_w, gu, gv]
    gc = torch.stack(gc, 1) if lit else None
    K = plan_tab.shape[1]
    if torch.compiler.is_compiling() and K <= _MAX_SELECT_PRIMITIVES:
        # K × F masked sums over the pixels, which Inductor fuses into one pass computing
        # each pixel's features once (the product below writes and reads F + K planes).
        masks = [best_k == k for k in range(K)]
        sums = [
            [torch.where(m, f, torch.zeros_like(f)).sum(-1) for f in feats + extra] for m in masks
        ]
        return torch.stack([torch.stack(row, -1) for row in sums], 1), gc, g_bg
    # Eager: the per-(image, primitive) sums as one batched product with the one-hot
    # primitive ids (background pixels: all zero), (B, K, P) with the pixels innermost.
    ks = torch.arange(K, device=best_k.device)
    one_hot = (best_k.unsqueeze(1) == ks.view(1, -1, 1)).to(plan_tab.dtype)
    g_tab = torch.bmm(torch.stack(feats + extra, 1), one_hot.transpose(1, 2)).transpose(1, 2)
    return g_tab, gc, g_bg


def _scatter_texels(idx, ax, ay, gc, n_texels: int):
    """Texel gradient (n_texels, 3) from the corners' int32 indices (4 planes (B, P); the
    index n_texels is a sink whose sum is dropped), the bilinear fractions ax, ay (B, P)
    and the RGB gradient reaching the texture (B, 3, P).

    One buffer per channel (4 bytes a texel: 1.3 MB for five 256² textures, which stays in
    a core's cache; the interleaved (n_texels, 3) buffer did not, and took 17 ms where this
    takes 11).
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


_PLANAR_FNS = {}
_SCATTER_POOL: dict[tuple[int, int], ThreadPoolExecutor] = {}
_SCATTER_POOL_LOCK = threading.Lock()


def _planar_fns(compiled: bool):
    """(forward, per-pixel backward, texel scatter), compiled or not."""
    if not compiled:
        return _planar_forward, _planar_backward_pixels, _scatter_texels
    if "f" not in _PLANAR_FNS:
        # Without Inductor's bounds checks on gathers and scatters: the texel indices are
        # in range by construction (`_in_range`), and the checks cost 5 ms of 36 forward.
        unchecked = {"assert_indirect_indexing": False}
        _PLANAR_FNS["f"] = torch.compile(_planar_forward, dynamic=False, options=unchecked)
        # room for the K × F masked sums in one fused loop (Inductor's default: 16)
        _PLANAR_FNS["b"] = torch.compile(
            _planar_backward_pixels, dynamic=False, options={"cpp.max_horizontal_fusion_size": 128}
        )
        _PLANAR_FNS["s"] = torch.compile(_scatter_texels, dynamic=False, options=unchecked)
        # CPU: single-threaded, in C++ with the GIL released (cpp_wrapper), one per thread.
        _PLANAR_FNS["s_cpu"] = torch.compile(
            _scatter_texels,
            dynamic=False,
            options={**unchecked, "cpp.threads": 1, "cpp_wrapper": True},
        )
    return _PLANAR_FNS["f"], _PLANAR_FNS["b"], _compiled_scatter


def _compiled_scatter(idx, ax, ay, gc, n_texels: int):
    """The compiled `_scatter_texels`; on the CPU over blocks of images, one block per
    thread, each into its own texel buffer, then summed.

    A parallel scatter into one buffer needs atomic adds, which cost more than they save
    on the CPU (Inductor's two-thread scatter with compare-and-swap took 113 ms where one
    thread took 42); private buffers are cheap by comparison. One block with one thread or
    a single image; CUDA scatters in one call.
    """
    if ax.device.type != "cpu":
        return _PLANAR_FNS["s"](idx, ax, ay, gc, n_texels)
    return _scatter_in_threads(_PLANAR_FNS["s_cpu"], idx, ax, ay, gc, n_texels)


def _scatter_in_threads(scatter, idx, ax, ay, gc, n_texels: int):
    """``scatter`` (`_scatter_texels` or its compiled form) on min(threads, B) blocks of
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


class _PlanarRender(torch.autograd.Function):
    """Hard-edge render of planar primitives (rectangles, planes) with a hand-written
    backward in three stages: per pixel (from what the forward kept: the colour's derivatives
    along u and v, the bilinear fractions and corner indices; 48 bytes a pixel, 60 lit), the
    per-(image, primitive) sums of the planar table's gradient, and the texel scatter.

    Uncompiled, the forward runs over blocks of images (cache-sized, ``chunk`` pixels);
    compiled, the fused loops run over the whole batch at once.
    """

    @staticmethod
    def forward(
        ctx,
        plan_tab,
        texels,
        bg,
        Wf,
        NXf,
        NYf,
        t_off,
        t_w,
        t_h,
        t_rep,
        codes,
        H,
        W,
        lit,
        compiled,
        chunk,
        w0,
        keep,
    ):
        fwd = _planar_fns(compiled)[0]
        # A non-finite pose (a diverged simulation) gives no hit, but background pixels
        # still evaluate primitive 0's table; finite there, no NaN reaches a gradient (the
        # backward's per-primitive sums are products with a one-hot, where 0 * NaN = NaN).
        plan_tab = torch.nan_to_num(plan_tab, nan=0.0, posinf=0.0, neginf=0.0)
        B = Wf.shape[0]
        nb = B if compiled else max(1, min(B, chunk // (H * W)))
        outs = []
        for b0 in range(0, B, nb):
            sl = slice(b0, min(B, b0 + nb))
            bgs = bg if bg.shape[0] == 1 else bg[sl]
            w0s = w0 if w0 is None or w0.shape[0] == 1 else w0[sl]
            outs.append(
                fwd(
                    plan_tab[sl],
                    texels,
                    bgs,
                    Wf[sl],
                    NXf[sl],
                    NYf[sl],
                    t_off,
                    t_w,
                    t_h,
                    t_rep,
                    codes,
                    H,
                    W,
                    lit,
                    w0s,
                    keep,
                )
            )
        img, depth, best_k, *kept = (
            torch.cat(x) if len(outs) > 1 else x[0] for x in zip(*outs, strict=True)
        )
        ctx.save_for_backward(plan_tab, best_k, *kept)
        ctx.args = (H, W, lit, compiled, bg.shape[0] == 1, texels.shape[0])
        ctx.mark_non_differentiable(best_k)
        ctx.set_materialize_grads(False)  # no zero planes for an unused depth
        return img, depth, best_k

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_img, g_depth, _):
        plan_tab, best_k, *kept = ctx.saved_tensors
        saved, idx = kept[:-4], kept[-4:]
        H, W, lit, compiled, bg_shared, n_texels = ctx.args
        _, pixels, scatter = _planar_fns(compiled)
        B = plan_tab.shape[0]
        no_image_grad = g_img is None
        if no_image_grad:
            g_img = torch.zeros(B, 3, H, W, dtype=plan_tab.dtype, device=plan_tab.device)
        g_img = g_img.contiguous()
        if g_depth is not None:
            g_depth = g_depth.contiguous()
        g_tab, gc, g_bg = pixels(plan_tab, bg_shared, H, W, lit, g_img, g_depth, best_k, saved)
        if gc is None:
            gc = g_img.view(B, 3, H * W)
        g_tex = None if no_image_grad else scatter(idx, saved[6], saved[7], gc, n_texels)
        return (g_tab, g_tex, g_bg) + (None,) * 15
