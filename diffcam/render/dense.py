"""The dense hard-edge path (backends "dense" and "compile" for scenes with curved
primitives): one branch-free pass over all pixels with the K primitives unrolled."""

from __future__ import annotations

import torch

from ..primitives import PLANE, RECT, intersect, surface_uv
from ..textures import _bilinear_texels
from .frame import TexMeta, _pixel_centres
from .planar import (
    G_A,
    G_CX,
    G_CY,
    G_FX,
    G_FY,
    G_H,
    G_LIGHT,
    G_O,
    G_SU,
    G_SV,
    P_D,
    P_DEPTH,
    P_SHADE,
    P_U,
    P_U0,
    P_V,
    P_V0,
    Tables,
    affine,
    safe_inverse,
)
from .shading import shade_at


def _hard_dense(
    tabs: Tables,
    texels,
    meta: TexMeta,
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
    loops over pixels, forward and backward.

    tabs: the :class:`Tables` (with the shading columns when ``lit``); texels (N, 3); meta
    (K,) texture slot data; bg (1|B, H*W, 3); amb, inten the lighting's ambient and
    intensity; w0 (1|B, H, W) inverse depth (1/m) of a pre-rendered layer, or None.
    Returns image (B, 3, H, W), depth (B, 1, H, W) (m) and object id (B, H, W).
    """
    B = tabs.test.w.shape[0]
    P = H * W
    best_k = _dense_nearest(tabs, codes, H, W, w0)
    kq = best_k.view(B, P)
    kc = kq.clamp(min=0)
    fg = (kq >= 0).unsqueeze(-1)
    xp, yp = _pixel_centres(B, H, W, tabs.test.w.dtype, tabs.test.w.device)
    u, v, depth, shade = _dense_surface(tabs, codes, kq, xp, yp, lit, amb, inten)
    # texture: four gathers from the flat (N, 3) texels + bilinear (in fused code the loads
    # are cheap, and the backward scatters into N texels rather than a 4x larger quad table)
    uf, vf = u.reshape(-1), v.reshape(-1)
    kf = kc.reshape(-1)
    col = _bilinear_texels(
        texels, meta.offset[kf], meta.width[kf], meta.height[kf], meta.repeat[kf], uf, vf
    ).view(B, P, 3)
    if lit:
        col = col * shade.unsqueeze(-1)
    img = torch.where(fg, col, bg)
    depth = torch.where(fg[..., 0], depth, torch.zeros_like(depth))
    return img.view(B, H, W, 3).permute(0, 3, 1, 2), depth.view(B, 1, H, W), best_k


def _dense_nearest(tabs: Tables, codes: tuple, H: int, W: int, w0):
    """No-grad winner map (B, H, W) long (-1: none) over every pixel, primitives in order."""
    test = tabs.test
    B = test.w.shape[0]
    dtype, device = test.w.dtype, test.w.device
    x = torch.arange(W, dtype=dtype, device=device) + 0.5
    y = torch.arange(H, dtype=dtype, device=device) + 0.5
    with torch.no_grad():
        best_w = torch.zeros(B, H, W, dtype=dtype, device=device) if w0 is None else w0
        best_k = torch.full((B, H, W), -1, dtype=torch.long, device=device)
        xx = x.view(1, 1, W)
        yy = y.view(1, H, 1)
        dxx = tabs.dx.view(B, 1, W)
        dyy = tabs.dy.view(B, H, 1)
        for k, code in enumerate(codes):
            if code in (PLANE, RECT):

                def ev(F, k=k):
                    f = F[:, k].view(B, 3, 1, 1)
                    return f[:, 0] * xx + f[:, 1] * yy + f[:, 2]

                w = ev(test.w)
                hit = (
                    torch.maximum(ev(test.nx).abs(), ev(test.ny).abs()) < w
                    if code == RECT
                    else w > 0
                )
            else:
                a = tabs.A[:, k].view(B, 3, 3, 1, 1)
                d = torch.stack(
                    [a[:, i, 0] * dxx + a[:, i, 1] * dyy + a[:, i, 2] for i in range(3)], -1
                )
                o, h = tabs.o[:, k].view(B, 1, 1, 3), tabs.h[:, k].view(B, 1, 1, 3)
                t, hit = intersect(code, o, d, h)
                w = torch.where(hit, 1.0 / t, torch.zeros_like(t))
            better = hit & (w > best_w)
            best_w = torch.where(better, w, best_w)
            best_k = torch.where(better, k, best_k)
    return best_k


def _dense_surface(tabs: Tables, codes: tuple, kq, xp, yp, lit: bool, amb, inten):
    """u, v, depth, shade (B, P) (shade None unlit) of each pixel's winner ``kq`` (B, P) at
    pixel centres xp, yp (B, P); values of background pixels are those of the last
    primitive (masked by the caller).

    Each primitive is evaluated at every pixel and selected with where (no gather from the
    (B, K) tables): the backward then reduces over pixels instead of scattering into a few
    hundred table entries, which compiled CPU code would do with contended atomics.
    """
    B, P = kq.shape
    u = v = depth = shade = None

    def merge(old, new, sel):
        return new if old is None else torch.where(sel, new, old)

    for k, code in enumerate(codes):
        sel = kq == k
        if code in (PLANE, RECT):
            g = tabs.plan[:, k].unsqueeze(-1).unbind(1)  # each (B, 1)
            inv = safe_inverse(affine(g, P_D, xp, yp))
            u = merge(u, affine(g, P_U, xp, yp) * inv + g[P_U0], sel)
            v = merge(v, affine(g, P_V, xp, yp) * inv + g[P_V0], sel)
            depth = merge(depth, g[P_DEPTH] * inv, sel)
            if lit:
                shade = merge(shade, g[P_SHADE].expand(B, P), sel)
        else:
            g = tabs.gen[:, k].unsqueeze(-1).unbind(1)
            dcx = (xp - g[G_CX]) / g[G_FX]
            dcy = (yp - g[G_CY]) / g[G_FY]
            d = torch.stack([affine(g, G_A + 3 * i, dcx, dcy) for i in range(3)], -1)
            ow = torch.stack(g[G_O], -1)
            hw = torch.stack(g[G_H], -1)
            t, _ = intersect(code, ow, d, hw)
            pt = ow + t.unsqueeze(-1) * d
            uc, vc = surface_uv(code, pt, hw)
            u = merge(u, uc * g[G_SU], sel)
            v = merge(v, vc * g[G_SV], sel)
            depth = merge(depth, t, sel)
            if lit:
                l_k = torch.stack(g[G_LIGHT], -1)
                shade = merge(shade, shade_at(code, pt, d, hw, l_k, amb, inten, True), sel)
    return u, v, depth, shade


_COMPILED = {}


def _dense_fn(compiled: bool):
    """``_hard_dense``, or its ``torch.compile`` form (compiled once per process)."""
    if not compiled:
        return _hard_dense
    if "fn" not in _COMPILED:
        _COMPILED["fn"] = torch.compile(_hard_dense, dynamic=False)
    return _COMPILED["fn"]
