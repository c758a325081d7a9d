"""Soft silhouettes (``edge_softness = sigma > 0``).

Every primitive gets a coverage ``alpha = sigmoid(signed silhouette distance in pixels /
sigma)`` and a colour at every pixel; these are composited front to back in depth order.
Coverage below sigmoid(-_SOFT_TAIL) is taken as exactly 0, so a primitive only needs the
pixels within ``_SOFT_TAIL * sigma`` of its silhouette (or inside it), which `reach` finds
without autograd. Colours, depths and coverage are computed with autograd on those pixels only
(`_soft_samples`) and composited on their union (`_composite`), whose depth ordering also
gives the hard winner's id and depth (`_winner_images`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.utils.checkpoint import checkpoint

from ..primitives import PLANE, RECT, silhouette_distance, surface_uv
from .frame import Frame
from .reach import candidates, kept_pixels, ray_dirs
from .sampling import sample_quad
from .shading import shade_at

# Soft coverage sigmoid(sd / sigma) is treated as exactly 0 where sd <= -_SOFT_TAIL * sigma.
# float32: sigmoid(-9.21) = 1.0e-4, the cut-off of PyTorch3D's soft rasteriser: it changes a
# pixel by at most K * 1e-4 of the largest colour difference (below an 8-bit level) and
# d(coverage)/d(sd) by at most 1e-4 / sigma, and halves the pixels a soft edge touches next to
# a cut at float32's rounding (17). float64 keeps the exact cut, sigmoid(-37) = 8.5e-17 (below
# half an ulp of 1), so float64 renders and their finite differences are those of the
# untruncated sum.
_SOFT_TAIL = {torch.float16: 9.21, torch.bfloat16: 9.21, torch.float32: 9.21, torch.float64: 37.0}


_SAVED_PER_SAMPLE = 80  # elements a soft sample's graph keeps for the backward (about)
_CHECKPOINT_CHUNKS = 32  # with the default max_chunk_elements (2**23): 1 GiB of float32


class Samples(NamedTuple):
    """Soft samples, S of them: pid (S,) long flat sample index ``b * H * W + row * W + col``;
    prim (S,) long primitive index; alpha (S,) coverage; depth (S,) camera-z depth (m) of the
    hit or of the ray's closest approach; colour (S, 3); hit (S,) bool, whether the ray meets
    the primitive there (in front of a pre-rendered layer). alpha, depth and colour are
    autograd-tracked. The samples come in blocks, one per primitive in index order, each
    holding a pixel at most once: ``blocks`` lists (primitive, start, stop)."""

    pid: torch.Tensor
    prim: torch.Tensor
    alpha: torch.Tensor
    depth: torch.Tensor
    colour: torch.Tensor
    hit: torch.Tensor
    blocks: tuple = ()


class SoftImage(NamedTuple):
    """A soft render of B images of P = H*W samples: image (B, 3, P); coverage (B, P) the
    primitives' accumulated opacity; object_id (B*P,) long, the nearest primitive the ray
    meets (-1: none); depth (B*P,) its camera-z depth (m, tracked; 0 where none)."""

    image: torch.Tensor
    coverage: torch.Tensor
    object_id: torch.Tensor
    depth: torch.Tensor


def _soft(f: Frame, atlas, bg, sigma: float, max_chunk: int, w0) -> SoftImage:
    """Soft silhouettes, composited front to back over ``bg``, and the hard winner's id and
    depth from the same samples.

    Shapes: bg (B|1, H*W, 3); sigma in samples (px); ``w0`` (B|1, H, W): inverse depth (1/m)
    of a pre-rendered layer (``bg``) or None; primitive samples at or behind it get coverage
    0, as the hard test would hide them.

    A primitive's coverage is exactly 0 where its silhouette distance is at most
    ``-_SOFT_TAIL * sigma`` (see there for the error bound); pixels where every primitive's
    is are the background. Only the pixels some primitive reaches are composited; every pixel
    a primitive's surface covers is among them, so the winners are those of the hard test.
    """
    B, P = f.B, f.H * f.W
    margin = sigma * _SOFT_TAIL[f.o.dtype]
    samples = _soft_samples(f, atlas, sigma, margin, max_chunk, w0)
    if samples is None:  # a copy: never a view of a pre-rendered layer the caller keeps
        image = _channels_first(bg, B)
        zeros = bg.new_zeros(B, P)
        return SoftImage(image, zeros, torch.full((B * P,), -1, device=bg.device), zeros.view(-1))
    image, coverage, winners = _composite(samples, bg, B, P, f.K)
    object_id, depth = _winner_images(samples, winners, B * P)
    return SoftImage(image, coverage, object_id, depth)


def _winner_images(s: Samples, winners, n_pix: int):
    """Object id (n_pix,) long (-1: none) and depth (n_pix,) (tracked, 0: none) images of
    the winning samples ``winners`` (W,) long (one per pixel at most)."""
    pix = s.pid[winners]
    object_id = torch.full((n_pix,), -1, dtype=torch.long, device=pix.device)
    object_id[pix] = s.prim[winners]
    return object_id, s.depth.new_zeros(n_pix).index_put((pix,), s.depth[winners])


def _soft_samples(f: Frame, atlas, sigma: float, margin: float, max_chunk: int, w0):
    """Every primitive's :class:`Samples` at the pixels its soft edge reaches
    (`reach.kept_pixels` of `reach.candidates`); None when no pixel is kept."""
    B, H, W = f.B, f.H, f.W
    device = f.o.device
    P = H * W
    light = f.light
    kept = {}
    for k, cand in candidates(f, margin).items():
        pixels = kept_pixels(f, k, cand, margin, max_chunk)
        if pixels is not None:
            kept[k] = pixels
    if not kept:
        return None
    # a sample's graph keeps about _SAVED_PER_SAMPLE elements for the backward: recompute
    # them in the backward (checkpoint) only past _CHECKPOINT_CHUNKS chunks' worth
    saved = _SAVED_PER_SAMPLE * sum(pix.numel() for pix, _ in kept.values())
    use_ckpt = saved > _CHECKPOINT_CHUNKS * max_chunk and torch.is_grad_enabled()
    # each primitive's texture in the atlas: offset, width, height, repeat (0-d tensors)
    texture = {k: (atlas.offset[k, 0], atlas.width[k, 0], atlas.height[k, 0], atlas.repeat[k])
               for k in kept}  # fmt: skip

    def piece(k, b0, b1, pix, A, o, h, dxp, dyp, fx, fy, quad, uv_scale, w0c):
        """Coverage (nb, n), depth (nb, n), colour (nb, n, 3) of primitive k at pixels
        ``pix`` (nb, n) of images b0:b1, and whether the ray meets it there, in front of the
        layer (nb, n) bool."""
        code, nb, n = f.codes[k], b1 - b0, pix.shape[1]
        kk = slice(k, k + 1)
        d = ray_dirs(A[b0:b1, k], dxp[b0:b1], dyp[b0:b1], pix, W)
        ok, hk_, Ak = o[b0:b1, kk], h[b0:b1, kk], A[b0:b1, kk]
        fx1, fy1 = fx[b0:b1].unsqueeze(1), fy[b0:b1].unsqueeze(1)
        sd, depth, pt, hit = silhouette_distance(
            code, ok, d, hk_, Ak, fx1, fy1, 0.5 * (fx1 + fy1), with_hit=True
        )
        hg = hk_.unsqueeze(2)
        u, v = surface_uv(code, pt, hg)
        u, v = (u * uv_scale[k, 0]).reshape(-1), (v * uv_scale[k, 1]).reshape(-1)
        col = sample_quad(quad, u, v, *texture[k]).view(nb, 1, n, 3)
        if light is not None:
            l_k = light.direction[b0:b1, kk].unsqueeze(2)
            planar = code in (PLANE, RECT)
            shade = shade_at(code, pt, d, hg, l_k, light.ambient, light.intensity, planar)
            col = col * shade.unsqueeze(-1)
        alpha = torch.sigmoid(sd / sigma)
        if w0c is not None:  # depth * w0 < 1 <=> nearer than the layer (0 where it is empty)
            front = depth * w0c.unsqueeze(1) < 1
            alpha = torch.where(front, alpha, 0.0)
            hit = hit & front
        return alpha[:, 0], depth[:, 0], col[:, 0], hit[:, 0]

    pids, slots, alphas, depths, colors, hits = [], [], [], [], [], []
    blocks, start = [], 0
    for k in sorted(kept):
        pix_all, valid_all = kept[k]
        if blocks:
            start = blocks[-1][2]
        blocks.append((k, start, start))
        n = pix_all.shape[1]
        nb = max(1, min(B, max_chunk // max(1, 16 * n)))
        for b0 in range(0, B, nb):
            b1 = min(B, b0 + nb)
            pix, valid = pix_all[b0:b1], valid_all[b0:b1]
            if not bool(valid.any()):
                continue
            w0c = None
            if w0 is not None:
                w0c = w0.expand(B, H, W)[b0:b1].reshape(b1 - b0, -1).gather(1, pix)
            args = (
                k,
                b0,
                b1,
                pix,
                f.A,
                f.o,
                f.h,
                f.dxp,
                f.dyp,
                f.fx,
                f.fy,
                atlas.quad,
                f.uv_scale,
                w0c,
            )
            if use_ckpt:
                alpha, depth, col, hit = checkpoint(piece, *args, use_reentrant=False)
            else:
                alpha, depth, col, hit = piece(*args)
            pid = pix + (torch.arange(b0, b1, device=device) * P).unsqueeze(1)
            real = valid.reshape(-1).nonzero().squeeze(1)  # once for all five columns
            pids.append(pid.reshape(-1)[real])
            slots.append(torch.full((real.numel(),), k, dtype=torch.long, device=device))
            alphas.append(alpha.reshape(-1).index_select(0, real))
            depths.append(depth.reshape(-1).index_select(0, real))
            colors.append(col.reshape(-1, 3).index_select(0, real))
            hits.append(hit.reshape(-1)[real])
            blocks[-1] = (k, blocks[-1][1], blocks[-1][2] + pids[-1].numel())
    if not pids:
        return None
    cat = torch.cat
    columns = (cat(pids), cat(slots), cat(alphas), cat(depths), cat(colors), cat(hits))
    return Samples(*columns, tuple(blocks))


def _composite(s: Samples, bg, B: int, P: int, K: int):
    """Front-to-back compositing of the samples over the background ``bg`` (B|1, P, 3) on the
    union of their pixels -> image (B, 3, P), coverage (B, P), and the hard winners: per
    pixel the sample of the nearest primitive the ray meets (lower index on a tie, as in the
    hard test), as sample indices (W,) long.

    Most pixels hold one primitive's sample: there the result is ``a c + (1 - a) bg`` with no
    ordering, and the sample wins where it is a hit; only pixels that several primitives
    reach are sorted by depth (`_composite_sorted`). The image is the background, written
    once, with those pixels set.
    """
    with torch.no_grad():
        single = torch.bincount(s.pid, minlength=B * P)[s.pid] == 1
    one = single.nonzero().squeeze(1)
    if 2 * one.numel() < s.pid.numel():  # mostly overlaps: all in depth order, no split
        everything = torch.arange(s.pid.numel(), device=s.pid.device)
        q, colours, coverage_q, winners = _composite_sorted(s, everything, bg, B, P, K)
        return (*_write(bg, B, P, q, colours, coverage_q), winners)
    p1, a1 = s.pid[one], s.alpha.index_select(0, one).unsqueeze(1)
    out1 = a1 * s.colour.index_select(0, one) + (1.0 - a1) * _background_at(bg, p1, P)
    pixels, colours, coverages = [p1], [out1], [a1[:, 0]]
    winners = [one[s.hit[one]]]
    if one.numel() < s.pid.numel():
        many = (~single).nonzero().squeeze(1)
        part = Samples(*(x[many] for x in s[:6]))
        pixels_m, colours_m, coverage_m, winners_m = _composite_sorted(part, many, bg, B, P, K)
        pixels.append(pixels_m)
        colours.append(colours_m)
        coverages.append(coverage_m)
        winners.append(winners_m)
    image, coverage = _write(bg, B, P, torch.cat(pixels), torch.cat(colours), torch.cat(coverages))
    return image, coverage, torch.cat(winners)


def _write(bg, B: int, P: int, q, colours, coverage_q):
    """The background (B|1, P, 3) as a new (B, 3, P) image with pixels ``q`` (N,) (flat
    sample indices) set to ``colours`` (N, 3), and the coverage (B, P): ``coverage_q`` (N,)
    there, 0 elsewhere."""
    b, p = q // P, q % P
    image = _channels_first(bg, B)
    # in place on the image itself (not a view: its backward gathers the set pixels' gradient
    # instead of copying the whole image's)
    image[b, :, p] = colours
    coverage = bg.new_zeros(B, P)
    coverage[b, p] = coverage_q
    return image, coverage


def _channels_first(bg, B: int):
    """A new (B, 3, P) image of the background ``bg`` (B|1, P, 3)."""
    if bg.shape[0] == 1:  # transpose the one image, then copy it contiguously
        return bg.transpose(1, 2).contiguous().expand(B, -1, -1).clone()
    return bg.transpose(1, 2).clone(memory_format=torch.contiguous_format)


def _background_at(bg, pid, P: int):
    """The background (B|1, P, 3) at flat sample indices ``pid`` (N,) -> (N, 3)."""
    if bg.shape[0] == 1:
        return bg[0].index_select(0, pid % P)
    return bg.reshape(-1, 3).index_select(0, pid)


def _composite_sorted(s: Samples, index, bg, B: int, P: int, K: int):
    """Samples of pixels that hold several, composited in depth order over ``bg``
    (B|1, P, 3): the pixels' flat indices (N,), their colours (N, 3) and coverage (N,), and
    the winning samples (the first hit in depth order) as entries of ``index`` (S,), the
    samples' indices in the caller's list."""
    dtype, device = s.alpha.dtype, s.alpha.device
    # the union of the pixels as a list of N flat pixels, and each sample's row in it
    # (marks over all pixels: linear, where sorting the samples is not)
    n_pix = B * P
    mark = torch.zeros(n_pix, dtype=torch.bool, device=device)
    mark[s.pid] = True
    q = mark.nonzero().squeeze(1)
    row_of = torch.empty(n_pix, dtype=torch.long, device=device)
    row_of[q] = torch.arange(q.numel(), device=device)
    at = (row_of[s.pid], s.prim)
    N = q.numel()
    # a primitive not evaluated at a pixel: coverage 0, behind everything; the order is
    # piecewise constant, so the depths need no gradient
    alpha = torch.zeros(N, K, dtype=dtype, device=device).index_put(at, s.alpha)
    with torch.no_grad():
        depth = torch.full((N, K), _FAR, dtype=dtype, device=device).index_put(at, s.depth)
        order = depth.argsort(dim=1, stable=True)  # ties in primitive order
        hit = torch.zeros(N, K, dtype=torch.bool, device=device).index_put(at, s.hit)
        sample = torch.zeros(N, K, dtype=torch.long, device=device).index_put(at, index)
        hit, sample = hit.gather(1, order), sample.gather(1, order)
        first = hit.to(torch.uint8).argmax(1, keepdim=True)  # the first hit in depth order
        winners = sample.gather(1, first)[:, 0][hit.any(1)]
    color = torch.zeros(N, K, 3, dtype=dtype, device=device).index_put(at, s.colour)
    alpha = alpha.gather(1, order)
    color = color.gather(1, order.unsqueeze(-1).expand_as(color))
    trans = torch.cumprod(1.0 - alpha, dim=1)
    before = torch.cat([torch.ones_like(trans[:, :1]), trans[:, :-1]], 1)
    behind = trans[:, -1:] * _background_at(bg, q, P)
    out = ((alpha * before).unsqueeze(-1) * color).sum(1) + behind
    return q, out, 1.0 - trans[:, -1], winners


_FAR = 1e30  # depth of a primitive not evaluated at a pixel (sorts last; coverage 0 there)
