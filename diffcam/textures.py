"""Textures: bilinear, gather-based sampling from a packed texel atlas, with optional mip-maps.

Conventions (DESIGN.md section 3): a texture is a (3, Ht, Wt) tensor in [0, 1], row 0 is the top
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

__all__ = ["sample_texture", "TextureAtlas", "build_atlas", "mip_levels", "gather_rows"]


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


def _bilinear_flat(
    texels: torch.Tensor,
    offset: torch.Tensor,
    width: torch.Tensor,
    height: torch.Tensor,
    repeat: torch.Tensor,
    u: torch.Tensor,
    v: torch.Tensor,
) -> torch.Tensor:
    """Bilinear sample of per-sample textures stored in a flat atlas.

    Args:
        texels: (N, 3) atlas, channels last; texture texel (row r, col c) is at
            ``offset + r * width + c``.
        offset, width, height: (M,) long, per sample.
        repeat: (M,) bool, True for repeat (wrap) addressing, False for clamp-to-edge.
        u, v: (M,) texture coordinates (v up).

    Returns:
        (M, 3) colours.
    """
    wf = width.to(u.dtype)
    hf = height.to(u.dtype)
    x = u * wf - 0.5
    y = (1.0 - v) * hf - 0.5  # v up, PNG rows top-down
    x0f = torch.floor(x.detach())
    y0f = torch.floor(y.detach())
    ax = (x - x0f).unsqueeze(-1)  # gradients to (u, v) flow through these weights
    ay = (y - y0f).unsqueeze(-1)
    x0 = x0f.long()
    y0 = y0f.long()
    x1 = x0 + 1
    y1 = y0 + 1
    wm1 = width - 1
    hm1 = height - 1

    def wrap(i, n, nm1):
        return torch.where(repeat, torch.remainder(i, n), torch.minimum(i.clamp(min=0), nm1))

    x0, x1 = wrap(x0, width, wm1), wrap(x1, width, wm1)
    y0, y1 = wrap(y0, height, hm1), wrap(y1, height, hm1)
    r0 = offset + y0 * width
    r1 = offset + y1 * width
    idx = torch.cat([r0 + x0, r0 + x1, r1 + x0, r1 + x1])
    c = gather_rows(texels, idx).view(4, -1, texels.shape[1])
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
    u = u.reshape(-1)
    v = v.reshape(-1)
    m = u.shape[0]
    z = torch.zeros(m, dtype=torch.long, device=u.device)
    out = _bilinear_flat(
        texels,
        z,
        z + Wt,
        z + Ht,
        torch.full((m,), wrap == "repeat", dtype=torch.bool, device=u.device),
        u,
        v,
    )
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


@dataclass
class TextureAtlas:
    """All textures of a render call packed into one flat (N, 3) tensor.

    Per texture slot s (one per primitive) and mip level l: ``offset[s, l]``, ``width[s, l]``,
    ``height[s, l]`` (long); ``num_levels[s]``; ``repeat[s]`` (bool); ``uv_scale[s]`` (2,).
    Levels beyond a slot's last one repeat the last one.
    """

    texels: torch.Tensor
    offset: torch.Tensor
    width: torch.Tensor
    height: torch.Tensor
    num_levels: torch.Tensor
    repeat: torch.Tensor

    def sample(
        self, slot: torch.Tensor, u: torch.Tensor, v: torch.Tensor, level: torch.Tensor | None
    ) -> torch.Tensor:
        """Colours (M, 3) for samples in ``slot`` (M,) long at (u, v) (M,).

        ``level`` (M,) float (detached) selects a mip level per sample, blended trilinearly;
        None samples level 0 only.
        """
        rep = self.repeat[slot]
        if level is None or self.offset.shape[1] == 1:
            return _bilinear_flat(
                self.texels,
                self.offset[slot, 0],
                self.width[slot, 0],
                self.height[slot, 0],
                rep,
                u,
                v,
            )
        nl = self.num_levels[slot]
        lv = torch.minimum(level.clamp(min=0), (nl - 1).to(level.dtype))
        l0 = torch.floor(lv).long()
        l1 = torch.minimum(l0 + 1, nl - 1)
        a = (lv - l0.to(lv.dtype)).unsqueeze(-1)
        c0 = _bilinear_flat(
            self.texels,
            self.offset[slot, l0],
            self.width[slot, l0],
            self.height[slot, l0],
            rep,
            u,
            v,
        )
        c1 = _bilinear_flat(
            self.texels,
            self.offset[slot, l1],
            self.width[slot, l1],
            self.height[slot, l1],
            rep,
            u,
            v,
        )
        return c0 + (c1 - c0) * a


def build_atlas(
    textures: list[torch.Tensor], repeat: list[bool], mipmap: bool = False
) -> TextureAtlas:
    """Pack textures (each (3, Ht, Wt), one per slot; the same tensor object may appear in
    several slots and is stored once) into a :class:`TextureAtlas`."""
    device = textures[0].device
    dtype = textures[0].dtype
    chunks: list[torch.Tensor] = []
    seen: dict[int, list[tuple[int, int, int]]] = {}
    slot_levels: list[list[tuple[int, int, int]]] = []
    n = 0
    for tex in textures:
        key = id(tex)
        if key not in seen:
            levels = mip_levels(tex) if mipmap else [tex]
            info = []
            for lev in levels:
                C, h, w = lev.shape
                chunks.append(lev.permute(1, 2, 0).reshape(h * w, C))
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

    texels = torch.cat(chunks, 0) if len(chunks) > 1 else chunks[0]
    return TextureAtlas(
        texels=texels.to(dtype),
        offset=lt(off),
        width=lt(wid),
        height=lt(hei),
        num_levels=lt([len(s) for s in slot_levels]),
        repeat=torch.tensor(repeat, dtype=torch.bool, device=device),
    )
