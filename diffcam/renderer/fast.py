"""The fast path (backend "compile" when every primitive is a rectangle or a plane): a plain
tensor forward over all pixels and a hand-written backward from what the forward keeps per
pixel (per-pixel gradients, their sums per (image, primitive), scatter-adds into the texels),
each compiled by ``torch.compile``. The per-pixel values are selected among few primitives
instead of gathered, the (b, k) sums are fused masked sums, and the texel scatter runs on
blocks of images, one single-threaded scatter per CPU thread. It gives the reference path's
values and gradients (tests/diffcam/test_backends.py); every other scene takes that path.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..primitives import RECT
from ..textures import bilinear_corners
from .frame import TexMeta, pixel_centres
from .planar import P_D, P_DEPTH, P_SHADE, P_U, P_U0, P_V, P_V0, PlanarTest, affine, safe_inverse
from .scatter import scatter_in_threads, scatter_texels

# Primitive count up to which compiled code selects table entries with chains of ``where``.
_MAX_SELECT_PRIMITIVES = 16
# The float planes (B, P) the forward keeps for the backward, by index: d colour / d u (RGB),
# d colour / d v (RGB), the bilinear fractions ax, ay, then (lit) the unshaded colour (RGB).
S_DU, S_DV, S_AX, S_AY, S_COLOUR = 0, 3, 6, 7, 8


def _planar_table_at(plan_tab, kc, xp, yp):
    """The planar table (B, K, 12|13) at each pixel's primitive ``kc`` (B, P) and the ratios'
    parts there: (the entries as (B, P) planes, by column, U, V, 1 / D) at pixel centres
    xp, yp (B, P).

    Under torch.compile with few primitives the entries are a chain of selects, which Inductor
    fuses into vector blends; a gather there becomes one scalar load per pixel and entry.
    With more primitives (or called uncompiled), one gather.
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
    U = affine(g, P_U, xp, yp)
    V = affine(g, P_V, xp, yp)
    return g, U, V, safe_inverse(affine(g, P_D, xp, yp))


def _planar_nearest(test: PlanarTest, codes: tuple, xp, yp, w0):
    """Winner map (B, P) long (-1: none) from the planar test forms at pixel centres xp, yp
    (B, P), against a layer's inverse depth ``w0`` (B|1, H, W) if any."""
    B, P = xp.shape
    if w0 is None:
        best_w = torch.zeros(B, P, dtype=xp.dtype, device=xp.device)
    else:
        best_w = w0.reshape(w0.shape[0], P)
    best_k = torch.full((B, P), -1, dtype=torch.long, device=xp.device)
    for k, code in enumerate(codes):

        def ev(F, k=k):
            f = F[:, k].unsqueeze(-1)
            return f[:, 0] * xp + f[:, 1] * yp + f[:, 2]

        w = ev(test.w)
        hit = torch.maximum(ev(test.nx).abs(), ev(test.ny).abs()) < w if code == RECT else w > 0
        better = hit & (w > best_w)
        best_w = torch.where(better, w, best_w)
        best_k = torch.where(better, k, best_k)
    return best_k


def _bilinear_corners(u, v, fg, kc, meta: TexMeta):
    """:func:`textures.bilinear_corners` of (u, v) (B, P) in each pixel's texture ``kc``
    (B, P), with the fractions ax, ay 0 off the objects ``fg`` (so that the backward's texel
    weights stay finite there)."""
    off, wi, hi, rep = meta.offset[kc], meta.width[kc], meta.height[kc], meta.repeat[kc]
    corners, ax, ay, sx, sy = bilinear_corners(u, v, off, wi, hi, rep)
    zero = torch.zeros_like(ax)
    return corners, torch.where(fg, ax, zero), torch.where(fg, ay, zero), sx, sy


def _planar_forward(
    plan_tab, texels, bg, test: PlanarTest, meta: TexMeta, codes, H, W, lit, w0, keep=False
):
    """Image (B, 3, H, W), depth (B, 1, H, W) and primitive id (B, H, W) of a planar scene:
    the nearest hit (against a layer's inverse depth ``w0`` (B|1, H, W) if any), its (u, v)
    from the planar table, a bilinear texel sample. Plain tensor code without autograd, fused
    by ``torch.compile``; every per-pixel quantity is a
    (B, P) plane, colours one plane per channel (an (B, P, 3) layout made Inductor loop over
    the 3 channels with masked vectors).

    plan_tab (B, K, 12|13) (columns P_*), texels (N, 3), bg (B|1, P, 3), test (B, K, 3)
    forms, meta (K,) texture slots.

    With ``keep`` (a backward will follow) also what the backward needs per pixel, taken from
    the texel values this pass gathers anyway, so that the backward gathers no texel again,
    as separate (B, P) planes (stacking them cost a copy each; their order: S_*), then the
    int32 flat texel index of each bilinear corner (4; the background's: ``len(texels)``, a
    sink).
    """
    B = test.w.shape[0]
    xp, yp = pixel_centres(B, H, W, test.w.dtype, test.w.device)
    best_k = _planar_nearest(test, codes, xp, yp, w0)
    fg = best_k >= 0
    kc = best_k.clamp(min=0)
    g, U, V, inv = _planar_table_at(plan_tab, kc, xp, yp)
    u = U * inv + g[P_U0]
    v = V * inv + g[P_V0]
    corners, ax, ay, sx, sy = _bilinear_corners(u, v, fg, kc, meta)
    shade = g[P_SHADE] if lit else None
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
    depth = torch.where(fg, g[P_DEPTH] * inv, torch.zeros_like(inv))
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
        plan_tab: (B, K, 12|13) the table of `_planar_forms`; g_img (B, 3, H, W); g_depth
            (B, 1, H, W) or None (no gradient reaches the depth); best_k (B, H, W); saved:
            the 8|11 float planes (B, P) kept by `_planar_forward` (indices S_*).

    Returns:
        g_tab: (B, K, F) gradient of the table's entries (F = 12, 13 lit).
        gc: (B, 3, P) the RGB gradient reaching the texture when lit; None unlit (it is
            ``g_img`` itself: the forward's corner indices send the background's to a
            sink texel).
        g_bg: (B|1, P, 3) gradient of the background.
    """
    B = plan_tab.shape[0]
    P = H * W
    xp, yp = pixel_centres(B, H, W, plan_tab.dtype, plan_tab.device)
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
        extra = [sum(gc[ch] * saved[S_COLOUR + ch] for ch in range(3))]
        gc = [c * g[P_SHADE] for c in gc]
    gu = sum(gc[ch] * saved[S_DU + ch] for ch in range(3))
    gv = sum(gc[ch] * saved[S_DV + ch] for ch in range(3))
    gU = gu * inv
    gV = gv * inv
    if g_depth is None:
        g_inv = gu * U + gv * V
        g_w = torch.zeros_like(xp)
    else:
        gd = torch.where(fg, g_depth.reshape(B, P), torch.zeros_like(xp))
        g_inv = gu * U + gv * V + gd * g[P_DEPTH]
        g_w = gd * inv
    gD = -g_inv * inv * inv
    # per-pixel gradient of each table column, in column order (P_U .. P_V0, then P_SHADE)
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
    # More primitives (or uncompiled): the per-(image, primitive) sums as one batched product with the one-hot
    # primitive ids (background pixels: all zero), (B, K, P) with the pixels innermost.
    ks = torch.arange(K, device=best_k.device)
    one_hot = (best_k.unsqueeze(1) == ks.view(1, -1, 1)).to(plan_tab.dtype)
    g_tab = torch.bmm(torch.stack(feats + extra, 1), one_hot.transpose(1, 2)).transpose(1, 2)
    return g_tab, gc, g_bg


_PLANAR_FNS = {}


def _planar_fns():
    """(forward, per-pixel backward, texel scatter), compiled once per process."""
    if "f" not in _PLANAR_FNS:
        # Without Inductor's bounds checks on gathers and scatters: the texel indices are
        # in range by construction (`textures.bilinear_corners`), and the checks cost.
        unchecked = {"assert_indirect_indexing": False}
        _PLANAR_FNS["f"] = torch.compile(_planar_forward, dynamic=False, options=unchecked)
        # room for the K × F masked sums in one fused loop (Inductor's default: 16)
        _PLANAR_FNS["b"] = torch.compile(
            _planar_backward_pixels, dynamic=False, options={"cpp.max_horizontal_fusion_size": 128}
        )
        _PLANAR_FNS["s"] = torch.compile(scatter_texels, dynamic=False, options=unchecked)
        # CPU: single-threaded, in C++ with the GIL released (cpp_wrapper), one per thread.
        _PLANAR_FNS["s_cpu"] = torch.compile(
            scatter_texels,
            dynamic=False,
            options={**unchecked, "cpp.threads": 1, "cpp_wrapper": True},
        )
    return _PLANAR_FNS["f"], _PLANAR_FNS["b"], _compiled_scatter


def _compiled_scatter(idx, ax, ay, gc, n_texels: int):
    """The compiled `scatter_texels`; on the CPU over blocks of images, one block per
    thread, each into its own texel buffer, then summed.

    A parallel scatter into one buffer needs atomic adds, which cost more than they save
    on the CPU (Inductor's two-thread scatter with compare-and-swap is slower than one
    thread); private buffers are cheap by comparison. One block with one thread or a
    single image; CUDA scatters in one call.
    """
    if ax.device.type != "cpu":
        return _PLANAR_FNS["s"](idx, ax, ay, gc, n_texels)
    return scatter_in_threads(_PLANAR_FNS["s_cpu"], idx, ax, ay, gc, n_texels)


class PlanarArgs(NamedTuple):
    """The non-differentiable inputs of :class:`PlanarRender`: no-grad test forms (B, K, 3),
    texture slots (K,), kind codes, image size, lit, the layer's inverse depth w0 (B|1, H, W)
    or None, and ``keep`` (whether a backward can follow)."""

    test: PlanarTest
    meta: TexMeta
    codes: tuple
    H: int
    W: int
    lit: bool
    w0: torch.Tensor | None
    keep: bool


class PlanarRender(torch.autograd.Function):
    """Hard-edge render of planar primitives (rectangles, planes) with a hand-written
    backward in three stages: per pixel (from what the forward kept: the colour's derivatives
    along u and v, the bilinear fractions and corner indices; 48 bytes a pixel, 60 lit), the
    per-(image, primitive) sums of the planar table's gradient, and the texel scatter.

    Inputs: plan_tab (B, K, 12|13), texels (N, 3), bg (B|1, H*W, 3) (the differentiable
    ones) and :class:`PlanarArgs`. The compiled loops run over the whole batch at once.
    """

    @staticmethod
    def forward(ctx, plan_tab, texels, bg, a: PlanarArgs):
        # A non-finite pose (a diverged simulation) gives no hit, but background pixels
        # still evaluate primitive 0's table; finite there, no NaN reaches a gradient (the
        # backward's per-primitive sums are products with a one-hot, where 0 * NaN = NaN).
        plan_tab = torch.nan_to_num(plan_tab, nan=0.0, posinf=0.0, neginf=0.0)
        args = (a.test, a.meta, a.codes, a.H, a.W, a.lit, a.w0, a.keep)
        img, depth, best_k, *kept = _planar_fns()[0](plan_tab, texels, bg, *args)
        ctx.save_for_backward(plan_tab, best_k, *kept)
        ctx.args = (a.H, a.W, a.lit, bg.shape[0] == 1, texels.shape[0])
        ctx.mark_non_differentiable(best_k)
        ctx.set_materialize_grads(False)  # no zero planes for an unused depth
        return img, depth, best_k

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_img, g_depth, _):
        plan_tab, best_k, *kept = ctx.saved_tensors
        saved, idx = kept[:-4], kept[-4:]
        H, W, lit, bg_shared, n_texels = ctx.args
        _, pixels, scatter = _planar_fns()
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
        g_tex = None
        if not no_image_grad:
            g_tex = scatter(idx, saved[S_AX], saved[S_AY], gc, n_texels)
        return g_tab, g_tex, g_bg, None
