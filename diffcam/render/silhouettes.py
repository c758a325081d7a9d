"""Soft silhouettes (``edge_softness = sigma > 0``).

Every primitive gets a coverage ``alpha = sigmoid(signed silhouette distance in pixels /
sigma)`` and a colour at every pixel; these are composited front to back in depth order. A
no-grad pass of the silhouette distance finds, per primitive, a pixel window outside which its
coverage is below sigmoid(-17) (float32) or sigmoid(-37) (float64) and is taken as exactly 0
(``_SOFT_TAIL``); colours, depths and coverage are computed with autograd only inside the
windows, in batch chunks with activation checkpointing when large, and composited on the union
of the windows.
"""

from __future__ import annotations

import torch
from torch.utils.checkpoint import checkpoint

from ..primitives import BOX, PLANE, RECT, silhouette_distance, surface_uv
from .frame import Frame, _local_dirs
from .shading import shade_at

# Soft coverage sigmoid(sd / sigma) is treated as exactly 0 where sd <= -_SOFT_TAIL * sigma:
# sigmoid(-17) = 4.1e-8 (below float32's half ulp of 1, 6e-8), sigmoid(-37) = 8.5e-17 (below
# float64's, 1.1e-16). Per pixel this changes the image by at most K * sigmoid(-tail) times the
# largest colour difference, and d(coverage)/d(sd) there by at most sigmoid(-tail) / sigma.
_SOFT_TAIL = {torch.float16: 10.0, torch.bfloat16: 10.0, torch.float32: 17.0, torch.float64: 37.0}


_SAVED_PER_SAMPLE = 80  # elements a soft sample's graph keeps for the backward (about)
_CHECKPOINT_CHUNKS = 32  # with the default max_chunk_elements (2**23): 1 GiB of float32


def _soft(f: Frame, atlas, bg, sigma: float, max_chunk: int, w0):
    """Soft silhouettes, composited front to back over ``bg``; returns the colours (B*H*W, 3)
    and the primitives' accumulated opacity (B*H*W,).

    Shapes: bg (B|1, H*W, 3); sigma in samples (px); ``w0`` (B|1, H, W): inverse depth (1/m)
    of a pre-rendered layer (``bg``) or None; primitive samples at or behind it get coverage
    0, as the hard test would hide them.

    Each primitive is evaluated (with autograd) only inside a pixel window per image (a common
    size over the batch, as in ``_nearest``) that holds every pixel where its silhouette
    distance exceeds ``-_SOFT_TAIL * sigma``: found by a no-grad pass of the same
    ``silhouette_distance``, so the bound holds whatever the shape (sharp polygon corners
    included). Outside its window a primitive's coverage is exactly 0 instead of below
    sigmoid(-_SOFT_TAIL) (see there for the error bound); pixels outside every window are
    the background. Only the union of the windows is composited.
    """
    B, P = f.B, f.H * f.W
    groups: dict[int, list[int]] = {}
    for k, c in enumerate(f.codes):
        groups.setdefault(c, []).append(k)
    f_mean = (0.5 * (f.fx + f.fy)).unsqueeze(1)
    fx1, fy1 = f.fx.unsqueeze(1), f.fy.unsqueeze(1)
    margin = sigma * _SOFT_TAIL[f.o.dtype]
    windows = _soft_windows(
        f.A, f.o, f.h, f.dxp, f.dyp, fx1, fy1, f_mean, groups, margin, max_chunk
    )
    bg_flat = bg.expand(B, P, 3).reshape(B * P, 3)
    samples = _soft_samples(f, windows, atlas, sigma, max_chunk, w0)
    if samples is None:  # a copy: never a view of a pre-rendered layer the caller keeps
        return bg_flat.clone(memory_format=torch.contiguous_format), bg_flat.new_zeros(B * P)
    return _composite(samples, bg_flat, f.K)


def _soft_samples(f: Frame, windows, atlas, sigma: float, max_chunk: int, w0):
    """Every primitive's samples inside its windows ``{k: (y0, x0, hk, wk)}``: flat sample
    indices (S,) long, primitive indices (S,) long, coverage (S,), depth (S,) (m) and colour
    (S, 3), autograd-tracked; None when no window holds a pixel."""
    B, H, W = f.B, f.H, f.W
    device = f.o.device
    P = H * W
    code_of = {k: c for k, c in enumerate(f.codes)}
    f_mean = (0.5 * (f.fx + f.fy)).unsqueeze(1)
    fx1, fy1 = f.fx.unsqueeze(1), f.fy.unsqueeze(1)
    light = f.light
    # a sample's graph keeps about _SAVED_PER_SAMPLE elements for the backward: recompute
    # them in the backward (checkpoint) only past _CHECKPOINT_CHUNKS chunks' worth
    saved = _SAVED_PER_SAMPLE * B * sum(hk * wk for _, _, hk, wk in windows.values())
    use_ckpt = saved > _CHECKPOINT_CHUNKS * max_chunk and torch.is_grad_enabled()
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
            l_k = light.direction[b0:b1, k : k + 1].unsqueeze(2)
            planar = code in (PLANE, RECT)
            shade = shade_at(code, pt, d, hg, l_k, light.ambient, light.intensity, planar)
            col = col * shade.unsqueeze(-1)
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
            args = (k, b0, b1, rows, cols, f.A, f.o, f.h, f.dxp, f.dyp, texels, f.uv_scale, w0c)
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
    if not pids:
        return None
    return (
        torch.cat(pids),
        torch.cat(slots),
        torch.cat(alphas),
        torch.cat(depths),
        torch.cat(colors),
    )


def _composite(samples, bg_flat, K: int):
    """Front-to-back compositing of the ``samples`` of ``_soft_samples`` over ``bg_flat``
    (B*H*W, 3) on the union of their pixels -> colours (B*H*W, 3), coverage (B*H*W,).

    Most pixels hold one primitive's sample: there the result is ``a c + (1 - a) bg`` with no
    ordering; only pixels where windows overlap are sorted by depth (`_composite_sorted`).
    """
    pid, slot, alpha_s, depth_s, color_s = samples
    n_pix = bg_flat.shape[0]
    with torch.no_grad():
        single = torch.bincount(pid, minlength=n_pix)[pid] == 1
    one = single.nonzero().squeeze(1)
    p1, a1 = pid[one], alpha_s[one].unsqueeze(1)
    out1 = a1 * color_s[one] + (1.0 - a1) * bg_flat[p1]
    pixels, colours, coverages = [p1], [out1], [a1[:, 0]]
    if one.numel() < pid.numel():
        many = (~single).nonzero().squeeze(1)
        pm, out_m, cover_m = _composite_sorted(
            pid[many], slot[many], alpha_s[many], depth_s[many], color_s[many], bg_flat, K
        )
        pixels.append(pm)
        colours.append(out_m)
        coverages.append(cover_m)
    q = torch.cat(pixels)
    coverage = bg_flat.new_zeros(n_pix).index_copy(0, q, torch.cat(coverages))
    return bg_flat.index_copy(0, q, torch.cat(colours)), coverage


def _composite_sorted(pid, slot, alpha_s, depth_s, color_s, bg_flat, K: int):
    """Samples (S,) of pixels that hold several, composited in depth order over ``bg_flat``:
    the pixels' flat indices (N,), their colours (N, 3) and coverage (N,)."""
    dtype, device = bg_flat.dtype, bg_flat.device
    n_pix = bg_flat.shape[0]
    # the union of the pixels as a list of N flat pixels, and each sample's row in it
    mark = torch.zeros(n_pix, dtype=torch.bool, device=device)
    mark[pid] = True
    q = mark.nonzero().squeeze(1)
    row_of = torch.empty(n_pix, dtype=torch.long, device=device)
    row_of[q] = torch.arange(q.numel(), device=device)
    at = (row_of[pid], slot)
    N = q.numel()
    # a primitive not evaluated at a pixel: coverage 0, behind everything; the order is
    # piecewise constant, so the depths need no gradient
    alpha = torch.zeros(N, K, dtype=dtype, device=device).index_put(at, alpha_s)
    with torch.no_grad():
        depth = torch.full((N, K), _FAR, dtype=dtype, device=device).index_put(at, depth_s)
        order = depth.argsort(dim=1)
    color = torch.zeros(N, K, 3, dtype=dtype, device=device).index_put(at, color_s)
    alpha = alpha.gather(1, order)
    color = color.gather(1, order.unsqueeze(-1).expand_as(color))
    trans = torch.cumprod(1.0 - alpha, dim=1)
    before = torch.cat([torch.ones_like(trans[:, :1]), trans[:, :-1]], 1)
    out = ((alpha * before).unsqueeze(-1) * color).sum(1) + trans[:, -1:] * bg_flat[q]
    return q, out, 1.0 - trans[:, -1]


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
