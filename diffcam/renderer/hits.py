"""The differentiable per-pixel hit record: the winners of the nearest-hit selection
recomputed with autograd, for each foreground pixel only ((B*H*W) samples, not (B*K*H*W)):
depth, (u, v) and the shading factor. Gradients reach poses (through the depth and (u, v)),
sizes, camera intrinsics and pose, and the lighting.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..primitives import MESH, PLANE, RECT
from .frame import Frame
from .geometry import Vec, ray_hit
from .nearest import nearest_hits
from .planar import (
    G_A,
    G_AMBIENT,
    G_CX,
    G_CY,
    G_FX,
    G_FY,
    G_H,
    G_INTENSITY,
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
    planar_tables,
    safe_inverse,
)
from .surface import shading, texture_coords


class Hits(NamedTuple):
    """What each foreground sample shows, N samples (autograd-tracked where marked).

    pix (N,) long flat sample index ``b * H * W + row * W + col``; prim (N,) long primitive
    index; depth (N,) camera-z depth (m, tracked); u, v (N,) texture coordinates with
    uv_scale applied (tracked); shade (N,) Lambert factor (tracked), None when unlit.
    """

    pix: torch.Tensor
    prim: torch.Tensor
    depth: torch.Tensor
    u: torch.Tensor
    v: torch.Tensor
    shade: torch.Tensor | None

    def depth_image(self, n: int) -> torch.Tensor:
        """(n,) flat depth buffer: the hits' depths, 0 elsewhere."""
        out = torch.zeros(n, dtype=self.depth.dtype, device=self.depth.device)
        if self.pix.numel() == 0:
            return out
        return out.index_put((self.pix,), self.depth)


def _chunking(f: Frame, max_chunk: int):
    """(px_chunk, nb, rows): pixels per chunk of the per-primitive passes, and the chunks of
    the recomputation: nb whole images, or row blocks of one image when an image is too
    large."""
    px_chunk = max(1, max_chunk // max(1, 4 * f.K))
    P = f.H * f.W
    if P <= px_chunk:
        return px_chunk, max(1, min(f.B, px_chunk // P)), f.H
    return px_chunk, 1, max(1, px_chunk // f.W)


def nearest_ids(f: Frame, max_chunk: int, w0=None) -> torch.Tensor:
    """No-grad winner map (B, H, W) long (-1: nothing nearer than the layer ``w0``
    (B|1, H, W) inverse depth, or than infinity without one)."""
    with torch.no_grad():
        return nearest_hits(
            planar_tables(f._replace(light=None)), f, w0, _chunking(f, max_chunk)[0]
        )


def hard_hits(f: Frame, max_chunk: int, w0=None, oid=None) -> tuple[torch.Tensor, Hits]:
    """Nearest hit per pixel and the differentiable recomputation of the winner.

    ``oid`` (B, H, W), when given, is the winner map to recompute (no hit test); ``w0``
    (B|1, H, W) is the inverse depth of a pre-rendered layer that the primitives must beat.
    Returns the winner map (B, H, W) long (-1 on the background) and the :class:`Hits`.
    """
    tabs = planar_tables(f)
    px_chunk, nb, rows = _chunking(f, max_chunk)
    if oid is None:
        with torch.no_grad():
            oid = nearest_hits(tabs, f, w0, px_chunk)
    return oid, _recompute(f, tabs, oid, nb, rows)


def _recompute(f: Frame, tabs: Tables, oid, nb: int, rows: int) -> Hits:
    """The :class:`Hits` of winner map ``oid`` (B, H, W), in chunks of ``nb`` images by
    ``rows`` rows; per chunk the foreground pixels are listed once, then split by kind."""
    B, K, H, W, codes = f.B, f.K, f.H, f.W, f.codes
    dtype, device = f.o.dtype, f.o.device
    P = H * W
    code_tab = torch.tensor(codes, dtype=torch.long, device=device)
    # (F, B*K): index_select(1, .) gives contiguous rows, one per table column
    plan = None if tabs.plan is None else tabs.plan.reshape(B * K, -1).t()
    gen = None if tabs.gen is None else tabs.gen.reshape(B * K, -1).t()
    xs = torch.arange(W, dtype=dtype, device=device) + 0.5
    ys = torch.arange(H, dtype=dtype, device=device) + 0.5
    parts = []
    for b0 in range(0, B, nb):
        b1 = min(B, b0 + nb)
        for r0 in range(0, H, rows):
            r1 = min(H, r0 + rows)
            kq = oid[b0:b1, r0:r1].reshape(-1)
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
                if code == MESH:
                    parts += _mesh_parts(f, k, b, row, col, xs, ys, P, W)
                    continue
                if code in (PLANE, RECT):
                    depth, u, v, shade = _planar_at(plan, bk, xs[col], ys[row], f.light)
                else:
                    depth, u, v, shade = _generic_at(code, gen, bk, xs[col], ys[row], f.light)
                parts.append(Hits(b * P + row * W + col, k, depth, u, v, shade))
    if not parts:
        e = torch.zeros(0, dtype=dtype, device=device)
        el = torch.zeros(0, dtype=torch.long, device=device)
        return Hits(el, el, e, e, e, None)
    cols = [torch.cat(c) for c in zip(*(p[:5] for p in parts), strict=True)]
    shade = torch.cat([p.shade for p in parts]) if f.light is not None else None
    return Hits(*cols, shade)


def _mesh_parts(f: Frame, k_sel, b, row, col, xs, ys, P: int, W: int) -> list[Hits]:
    """The :class:`Hits` of mesh winners (primitives ``k_sel`` (N,) at images b, rows, cols
    (N,)), one part per mesh primitive."""
    from .mesh import mesh_hard_hits

    parts = []
    for k in k_sel.unique().tolist():
        m = (k_sel == k).nonzero().squeeze(1)
        bm, rm, cm = b[m], row[m], col[m]
        depth, u, v, shade = mesh_hard_hits(f, k, bm, xs[cm], ys[rm], rm * W + cm)
        parts.append(Hits(bm * P + rm * W + cm, k_sel[m], depth, u, v, shade))
    return parts


def _planar_at(plan, bk, x, y, light):
    """Depth, u, v, shade (N,) of planar primitives at pixel centres x, y (N,) from the
    transposed planar table ``plan`` (F, B*K) at rows ``bk`` (N,) = b * K + k."""
    g = plan.index_select(1, bk)
    inv = safe_inverse(affine(g, P_D, x, y))
    u = affine(g, P_U, x, y) * inv + g[P_U0]
    v = affine(g, P_V, x, y) * inv + g[P_V0]
    shade = g[P_SHADE] if light is not None else None
    return g[P_DEPTH] * inv, u, v, shade


def _generic_at(code, gen, bk, x, y, light):
    """Depth, u, v, shade (N,) of curved primitives and boxes of kind ``code`` at pixel
    centres x, y (N,): the ray intersection from the transposed generic table ``gen``
    (F, B*K) at rows ``bk`` (N,), by components (`geometry`)."""
    g = gen.index_select(1, bk)
    dcx = (x - g[G_CX]) / g[G_FX]
    dcy = (y - g[G_CY]) / g[G_FY]
    d = Vec(*(affine(g, G_A + 3 * i, dcx, dcy) for i in range(3)))
    o, h = Vec(*g[G_O]), Vec(*g[G_H])
    depth, _ = ray_hit(code, o, d, h)
    p = Vec(o.x + depth * d.x, o.y + depth * d.y, o.z + depth * d.z)
    u, v = texture_coords(code, p, h)
    shade = None
    if light is not None:
        l_dir = Vec(*g[G_LIGHT])
        shade = shading(code, p, d, h, l_dir, g[G_AMBIENT], g[G_INTENSITY], two_sided=True)
    return depth, u * g[G_SU], v * g[G_SV], shade
