"""Textures: bilinear, gather-based sampling from a packed texel atlas, with optional mip-maps.

Conventions (docs/design.md, "Conventions"): a texture is a (3, Ht, Wt) tensor in [0, 1], row 0 is the top
row of the PNG. Texture coordinates (u, v): u to the right, v up, so v = 0 is the bottom row.
Texel centres sit at ((k + 0.5) / Wt, (l + 0.5) / Ht); u = 0.5 / Wt hits the first column's
centre exactly.

Sampling gathers four texels per sample from a flat (N, 3) channels-last atlas. Its backward is
an index-add (a scatter of four weighted gradients per sample), which is deterministic on CPU and,
under ``torch.use_deterministic_algorithms(True)``, on CUDA too -- unlike ``F.grid_sample``'s
atomic CUDA backward.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

__all__ = [
    "sample_texture",
    "TextureAtlas",
    "build_atlas",
    "mip_levels",
    "gather_rows",
    "bilinear_corners",
]


class _GatherRows(torch.autograd.Function):
    """``src[idx]`` for a 2-D ``src`` (N, C); backward by ``index_add_`` (deterministic on CPU).

    Plain advanced indexing back-propagates through ``index_put_(accumulate=True)``, which is
    markedly slower on CPU for millions of samples; ``index_add_`` along dim 0 is parallel.
    """

    @staticmethod
    def forward(ctx, src, idx):
        ctx.save_for_backward(idx)
        ctx.n = src.shape[0]
        return src.index_select(0, idx)

    @staticmethod
    def backward(ctx, grad):
        (idx,) = ctx.saved_tensors
        out = grad.new_zeros((ctx.n, grad.shape[1]))
        if torch.are_deterministic_algorithms_enabled() and grad.is_cuda:
            out.index_put_((idx,), grad, accumulate=True)  # sort-based deterministic path
        else:
            out.index_add_(0, idx, grad)
        return out, None


def gather_rows(src: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Rows of ``src`` (N, C) at ``idx`` (M,) -> (M, C), differentiable in ``src``."""
    if src.requires_grad:
        return _GatherRows.apply(src, idx)
    return src.index_select(0, idx)


def bilinear_corners(u, v, offset, width, height, repeat, four: bool = True):
    """The bilinear footprint of samples (u, v) in textures stored row-major in a flat atlas
    (texel (row r, col c) at ``offset + r * width + c``); every argument has the samples'
    shape, ``repeat`` (bool) True for repeat (wrap) addressing, False for clamp-to-edge.

    The one place that maps texture coordinates to texels: for the autograd samplers, the
    eager composite (its quad table, one row per first corner) and the compiled planar
    path. For samples all in one texture, offset, width, height and repeat may be Python
    numbers (int, int, int, bool): the wrap mode is then chosen once, not per sample. Clamp
    mode clamps the continuous texel coordinate (clamp-to-edge), so that the (u, v) gradient
    is 0 where clamping holds it; repeat wraps the integer corners (in floating point:
    cheaper than an integer remainder, and fused well by Inductor).

    Returns:
        corners: the flat (long) indices of corners (x0, y0), (x1, y0), (x0, y1), (x1, y1),
            in range even for non-finite (u, v) (a NaN pose: the compiled path reads and
            scatters texels without bounds checks); only the first when not ``four``.
        ax, ay: the bilinear fractions along x and y, differentiable in (u, v).
        sx, sy: d x / d u and d y / d v of the texel coordinates (0 where clamping holds);
            Python floats for a repeating texture given as Python numbers.
    """
    if isinstance(repeat, bool):
        wf, hf = float(width), float(height)
    else:
        wf, hf = width.to(u.dtype), height.to(u.dtype)
    xr = u * wf - 0.5
    yr = (1.0 - v) * hf - 0.5  # v up, PNG rows top-down
    x0, x1, ax = _wrap_axis(xr, wf, repeat, four)
    y0, y1, ay = _wrap_axis(yr, hf, repeat, four)
    r0 = offset + y0 * width
    if not four:
        corners = (r0 + x0,)
    else:
        r1 = offset + y1 * width
        corners = (r0 + x0, r0 + x1, r1 + x0, r1 + x1)
    if repeat is True:
        return corners, ax, ay, wf, -hf
    sx = wf * (repeat | ((xr >= 0) & (xr <= wf - 1)))
    sy = -hf * (repeat | ((yr >= 0) & (yr <= hf - 1)))
    return corners, ax, ay, sx, sy


def _wrap_axis(x, n, repeat, second: bool):
    """Along one axis of n texels (float): the texel indices (long) i0 and i0 + 1 (None
    unless ``second``), wrapped or clamped and in [0, n - 1], and the fraction of the
    continuous texel coordinate x (texel centres at integers) past i0. ``repeat`` is a bool
    tensor (per sample) or a Python bool (``n`` then a Python float)."""
    if isinstance(repeat, bool):
        xq = x if repeat else x.clamp(0.0, n - 1)
        x0 = torch.floor(xq.detach())
        i0 = x0 - n * torch.floor(x0 / n) if repeat else x0
    else:
        xq = torch.where(repeat, x, torch.minimum(x.clamp(min=0), n - 1))
        x0 = torch.floor(xq.detach())
        i0 = torch.where(repeat, x0 - n * torch.floor(x0 / n), x0)
    frac = xq - x0
    i1 = None
    if second:
        wrapped = torch.where(i0 + 1 >= n, 0.0, i0 + 1)
        if isinstance(repeat, bool):
            i1 = wrapped if repeat else (i0 + 1).clamp(max=n - 1)
        else:
            i1 = torch.where(repeat, wrapped, torch.minimum(i0 + 1, n - 1))
        i1 = _in_range(i1, n - 1).long()
    return _in_range(i0, n - 1).long(), i1, frac


def _in_range(x, top):
    """``x`` clamped to [0, top] (a tensor or a Python number), NaN to 0 (``clamp`` keeps
    NaN; ``nan_to_num`` also maps +-inf to finite values, which the clamp then sends to the
    ends, as it would the infinities)."""
    x = torch.nan_to_num(x, nan=0.0)
    return x.clamp(0.0, top) if isinstance(top, float) else torch.minimum(x.clamp(min=0), top)


def _bilinear_flat(texels, offset, width, height, repeat, u, v):
    """Autograd-tracked bilinear sample (M, 3) of per-sample textures in a flat (N, 3)
    atlas (channels last); offset, width, height (M,) long, repeat (M,) bool, u, v (M,)
    texture coordinates (v up). See :func:`bilinear_corners`."""
    corners, ax, ay, _, _ = bilinear_corners(u, v, offset, width, height, repeat)
    c = gather_rows(texels, torch.cat(corners)).view(4, -1, texels.shape[1])
    ax, ay = ax.unsqueeze(-1), ay.unsqueeze(-1)
    top = c[0] + (c[1] - c[0]) * ax
    bot = c[2] + (c[3] - c[2]) * ax
    return top + (bot - top) * ay


def sample_texture(
    texture: torch.Tensor, u: torch.Tensor, v: torch.Tensor, wrap: str = "repeat"
) -> torch.Tensor:
    """Bilinear sample of one texture.

    Args:
        texture: (3, Ht, Wt) in [0, 1] (may require grad).
        u, v: (...) texture coordinates, u right, v up (v = 0 is the image's bottom row).
        wrap: "repeat" or "clamp".

    Returns:
        (..., 3) colours; differentiable in ``texture``, ``u`` and ``v``.
    """
    C, Ht, Wt = texture.shape
    texels = texture.permute(1, 2, 0).reshape(Ht * Wt, C)
    shape = u.shape
    u, v = u.reshape(-1), v.reshape(-1)
    z = torch.zeros(u.shape[0], dtype=torch.long, device=u.device)
    rep = torch.full_like(z, wrap == "repeat", dtype=torch.bool)
    out = _bilinear_flat(texels, z, z + Wt, z + Ht, rep, u, v)
    return out.reshape(*shape, C)


def mip_levels(texture: torch.Tensor, max_levels: int = 16) -> list[torch.Tensor]:
    """Mip pyramid of a (3, Ht, Wt) texture: level 0 is the texture, each next level halves
    both sides (area average, differentiable) down to 1 x 1."""
    levels = [texture]
    t = texture
    while (t.shape[1] > 1 or t.shape[2] > 1) and len(levels) < max_levels:
        h, w = max(1, t.shape[1] // 2), max(1, t.shape[2] // 2)
        t = F.interpolate(t.unsqueeze(0), size=(h, w), mode="area").squeeze(0)
        levels.append(t)
    return levels


def _quad_table(texture: torch.Tensor, repeat: bool) -> torch.Tensor:
    """(Ht*Wt, 12) table: row r*Wt + c holds texels (r, c), (r, c+1), (r+1, c), (r+1, c+1)
    (3 channels each; the +1 neighbours wrap for repeat, clamp otherwise), so that a bilinear
    sample is one contiguous 12-float gather instead of four scattered ones."""
    t = texture.permute(1, 2, 0)  # (Ht, Wt, 3)
    if repeat:
        right = torch.roll(t, -1, dims=1)
    else:
        right = torch.cat([t[:, 1:], t[:, -1:]], 1)
    row = torch.cat([t, right], -1)  # (Ht, Wt, 6)
    if repeat:
        down = torch.roll(row, -1, dims=0)
    else:
        down = torch.cat([row[1:], row[-1:]], 0)
    return torch.cat([row, down], -1).reshape(-1, 12)


@dataclass
class TextureAtlas:
    """All textures of a render call packed for gather-based bilinear sampling.

    ``quad`` (N, 12) is the concatenation of every (texture, level)'s quad table (see
    ``_quad_table``); per slot s (one per primitive) and mip level l: ``offset[s, l]``,
    ``width[s, l]``, ``height[s, l]`` (long). ``num_levels[s]`` (long), ``repeat[s]`` (bool).
    Levels beyond a slot's last one repeat the last one. ``texels`` (N, 3) is level data in
    plain channels-last layout (used by the soft-edge path). ``level0`` holds each slot's
    level 0 (offset, width, height, repeat) as Python numbers, for samplers that take one
    texture at a time (no device sync to read them, no per-sample selects on them).
    """

    quad: torch.Tensor
    texels: torch.Tensor
    offset: torch.Tensor
    width: torch.Tensor
    height: torch.Tensor
    num_levels: torch.Tensor
    repeat: torch.Tensor
    level0: tuple = ()

    def sample(self, slot, u, v, level=None):
        """Autograd-tracked bilinear sample (M, 3) for ``slot`` (M,) long at (u, v) (M,);
        ``level`` (M,) detached float for trilinear mip-mapping or None for level 0."""
        rep = self.repeat[slot]

        def at(lev):
            off, w, h = self.offset[slot, lev], self.width[slot, lev], self.height[slot, lev]
            return _bilinear_flat(self.texels, off, w, h, rep, u, v)

        if level is None or self.offset.shape[1] == 1:
            return at(0)
        nl = self.num_levels[slot]
        lv = torch.minimum(level.clamp(min=0), (nl - 1).to(level.dtype))
        l0 = torch.floor(lv).long()
        l1 = torch.minimum(l0 + 1, nl - 1)
        a = (lv - l0.to(lv.dtype)).unsqueeze(-1)
        c0 = at(l0)
        return c0 + (at(l1) - c0) * a


def build_atlas(
    textures: list[torch.Tensor], repeat: list[bool], mipmap: bool = False, quad: bool = True
) -> TextureAtlas:
    """Pack textures (each (3, Ht, Wt), one per slot; the same tensor object with the same
    wrap mode is stored once) into a :class:`TextureAtlas`."""
    device = textures[0].device
    dtype = textures[0].dtype
    chunks: list[torch.Tensor] = []
    quads: list[torch.Tensor] = []
    seen: dict[tuple[int, bool], list[tuple[int, int, int]]] = {}
    slot_levels: list[list[tuple[int, int, int]]] = []
    n = 0
    for tex, rep in zip(textures, repeat, strict=True):
        key = (id(tex), bool(rep))
        if key not in seen:
            levels = mip_levels(tex) if mipmap else [tex]
            info = []
            for lev in levels:
                C, h, w = lev.shape
                chunks.append(lev.permute(1, 2, 0).reshape(h * w, C))
                if quad:
                    quads.append(_quad_table(lev, bool(rep)))
                info.append((n, w, h))
                n += h * w
            seen[key] = info
        slot_levels.append(seen[key])
    nmax = max(len(s) for s in slot_levels)
    off = [[s[min(i, len(s) - 1)][0] for i in range(nmax)] for s in slot_levels]
    wid = [[s[min(i, len(s) - 1)][1] for i in range(nmax)] for s in slot_levels]
    hei = [[s[min(i, len(s) - 1)][2] for i in range(nmax)] for s in slot_levels]

    def lt(x):
        return torch.tensor(x, dtype=torch.long, device=device)

    def cat(xs):
        return torch.cat(xs, 0) if len(xs) > 1 else xs[0]

    return TextureAtlas(
        quad=cat(quads).to(dtype) if quad else None,
        texels=cat(chunks).to(dtype),
        offset=lt(off),
        width=lt(wid),
        height=lt(hei),
        num_levels=lt([len(s) for s in slot_levels]),
        repeat=torch.tensor(repeat, dtype=torch.bool, device=device),
        level0=tuple((*s[0], bool(r)) for s, r in zip(slot_levels, repeat, strict=True)),
    )


# ---------------------------------------------------------------------------- fused sampler
def quad_coords(u, v, off, w, h, rep):
    """Quad-table row (the first corner's texel), bilinear fractions and d/du, d/dv scales
    of samples (all (n,)); see :func:`bilinear_corners`."""
    (row,), ax, ay, sx, sy = bilinear_corners(u, v, off, w, h, rep, four=False)
    return row, ax, ay, sx, sy


def bilerp(q, ax, ay):
    """q (n, 12) corners, ax/ay (n,) -> colour (n, 3), plus the pieces the backward needs."""
    c00, c01, c10, c11 = q[:, 0:3], q[:, 3:6], q[:, 6:9], q[:, 9:12]
    axe = ax.unsqueeze(1)
    top = c00 + (c01 - c00) * axe
    bot = c10 + (c11 - c10) * axe
    col = top + (bot - top) * ay.unsqueeze(1)
    return col, c00, c01, c10, c11, top, bot


class _Composite(torch.autograd.Function):
    """Texture lookup + shading + background composite, written straight into (B, 3, H, W).

    Works in chunks of samples (cache-sized, which on CPU is several times faster than one
    pass over millions of samples) with a hand-written backward: texture gradients are
    index-added into one (N, 12) buffer, deterministically on CPU.
    """

    @staticmethod
    def forward(ctx, quad, u, v, shade, blend, bg, pix, meta0, meta1, shape, chunk):
        B, H, W = shape
        P = H * W
        dtype = u.dtype
        # A fresh buffer, always: ``contiguous()`` would return ``bg`` itself when it already is
        # (B, 3, P)-contiguous (a pre-rendered layer), and the writes below would corrupt it.
        out = bg.permute(0, 2, 1).expand(B, 3, P).clone(memory_format=torch.contiguous_format)
        flat = out.view(-1)
        base = (pix // P) * (3 * P) + pix % P
        M = u.shape[0]
        for s0 in range(0, M, chunk):
            sl = slice(s0, min(M, s0 + chunk))
            col = _Composite._color(quad, u[sl], v[sl], blend, meta0, meta1, sl)[0]
            if shade is not None:
                col = col * shade[sl].unsqueeze(1)
            b = base[sl]
            for c in range(3):
                flat.index_put_((b + c * P,), col[:, c].to(dtype))
        ctx.save_for_backward(quad, u, v, shade, blend, base)
        ctx.meta = (meta0, meta1)
        ctx.shape = shape
        ctx.chunk = chunk
        ctx.bg_shape = bg.shape
        return out.view(B, 3, H, W)

    @staticmethod
    def _color(quad, u, v, blend, meta0, meta1, sl):
        off, w, h, rep = (m[sl] for m in meta0)
        i0, ax0, ay0, sx0, sy0 = quad_coords(u, v, off, w, h, rep)
        q0 = quad.index_select(0, i0)
        res0 = bilerp(q0, ax0, ay0)
        if meta1 is None:
            return res0[0], (i0, ax0, ay0, sx0, sy0, res0), None
        off, w, h, rep = (m[sl] for m in meta1)
        i1, ax1, ay1, sx1, sy1 = quad_coords(u, v, off, w, h, rep)
        res1 = bilerp(quad.index_select(0, i1), ax1, ay1)
        a = blend[sl].unsqueeze(1)
        col = res0[0] + (res1[0] - res0[0]) * a
        return col, (i0, ax0, ay0, sx0, sy0, res0), (i1, ax1, ay1, sx1, sy1, res1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        quad, u, v, shade, blend, base = ctx.saved_tensors
        meta0, meta1 = ctx.meta
        B, H, W = ctx.shape
        P = H * W
        g = grad_out.reshape(B, 3, P).contiguous().view(-1)
        need_q, need_u, need_v, need_s, _, need_bg = ctx.needs_input_grad[:6]
        gq = torch.zeros_like(quad) if need_q else None
        gu = torch.zeros_like(u) if need_u else None
        gv = torch.zeros_like(v) if need_v else None
        gs = torch.zeros_like(shade) if (need_s and shade is not None) else None
        M = u.shape[0]
        for s0 in range(0, M, ctx.chunk):
            sl = slice(s0, min(M, s0 + ctx.chunk))
            b = base[sl]
            gc = torch.stack([g[b + c * P] for c in range(3)], 1).to(u.dtype)
            col, lev0, lev1 = _Composite._color(quad, u[sl], v[sl], blend, meta0, meta1, sl)
            if gs is not None:
                gs[sl] = (gc * col).sum(1)
            if shade is not None:
                gc = gc * shade[sl].unsqueeze(1)
            levels = [(lev0, None)] if lev1 is None else [(lev0, False), (lev1, True)]
            for (i, ax, ay, sx, sy, (_, c00, c01, c10, c11, top, bot)), which in levels:
                if which is None:
                    gl = gc
                else:
                    a = blend[sl].unsqueeze(1)
                    gl = gc * a if which else gc * (1 - a)
                axe, aye = ax.unsqueeze(1), ay.unsqueeze(1)
                if gq is not None:
                    w00 = (1 - axe) * (1 - aye)
                    w01 = axe * (1 - aye)
                    w10 = (1 - axe) * aye
                    w11 = axe * aye
                    gq.index_add_(0, i, torch.cat([gl * w00, gl * w01, gl * w10, gl * w11], 1))
                if gu is not None or gv is not None:
                    dax = (c01 - c00) * (1 - aye) + (c11 - c10) * aye
                    day = bot - top
                    if gu is not None:
                        gu[sl] += (gl * dax).sum(1) * sx
                    if gv is not None:
                        gv[sl] += (gl * day).sum(1) * sy
        gbg = None
        if need_bg:
            gb = grad_out.reshape(B, 3, P).clone()
            fl = gb.view(-1)
            for c in range(3):
                fl[base + c * P] = 0
            gbg = gb.permute(0, 2, 1)
            if ctx.bg_shape[0] == 1 and B > 1:
                gbg = gbg.sum(0, keepdim=True)
        return gq, gu, gv, gs, None, gbg, None, None, None, None, None


def composite(quad, u, v, shade, blend, bg, pix, meta0, meta1, shape, chunk=1 << 16):
    """Sample textures at foreground samples and composite over the background.

    Args:
        quad: (N, 12) quad table of the atlas (may require grad).
        u, v: (M,) texture coordinates of the M foreground samples.
        shade: (M,) shading factor or None.
        blend: (M,) mip blend weight between the two levels (detached) or None.
        bg: (1|B, H*W, 3) background colours.
        pix: (M,) long flat index b * H * W + row * W + col of each sample.
        meta0, meta1: tuples (offset, width, height, repeat), each (M,), of the level(s) to
            sample; meta1 None without mip-mapping.
        shape: (B, H, W).

    Returns:
        (B, 3, H, W) image.
    """
    return _Composite.apply(quad, u, v, shade, blend, bg, pix, meta0, meta1, shape, chunk)
