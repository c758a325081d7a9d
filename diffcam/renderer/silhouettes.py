"""Soft silhouettes (``edge_softness = sigma > 0``) and antialiased edges
(``edge_softness = "antialias"``).

Every primitive gets a coverage ``alpha`` from its signed silhouette distance ``sd`` in
pixels (an :class:`EdgeProfile`: ``sigmoid(sd / sigma)``, or the antialiasing ramp
``clamp(0.5 + sd, 0, 1)``, a pixel's box-filtered coverage by a straight edge) and a colour
at every pixel; these are composited front to back in depth order. Coverage below
sigmoid(-SOFT_TAIL) is taken as exactly 0, so a primitive only needs the pixels within
``SOFT_TAIL * sigma`` of its silhouette (or inside it; the ramp's: within half a pixel),
which `reach` finds without autograd. Colours, depths and coverage are computed with autograd on those pixels only
(`_soft_samples`) and composited on their union (`composite`), whose depth ordering also
gives the hard winner's id and depth (`_winner_images`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch.utils.checkpoint import checkpoint

from ..primitives import MESH
from .appearance import transform_colours
from .composite import channels_first, composite, make_plan
from .frame import Frame
from .geometry import columns, local_rays, soft_geometry
from .reach import candidates, kept_pixels
from .sampling import sample_quad_blocks
from .surface import shading, texture_coords

# Soft coverage sigmoid(sd / sigma) is treated as exactly 0 where sd <= -SOFT_TAIL * sigma.
# float32: sigmoid(-9.21) = 1.0e-4, the cut-off of PyTorch3D's soft rasteriser: it changes a
# pixel by at most K * 1e-4 of the largest colour difference (below an 8-bit level) and
# d(coverage)/d(sd) by at most 1e-4 / sigma, and halves the pixels a soft edge touches next to
# a cut at float32's rounding (17). float64 keeps the exact cut, sigmoid(-37) = 8.5e-17 (below
# half an ulp of 1), so float64 renders and their finite differences are those of the
# untruncated sum.
SOFT_TAIL = {torch.float16: 9.21, torch.bfloat16: 9.21, torch.float32: 9.21, torch.float64: 37.0}


class EdgeProfile(NamedTuple):
    """How a soft sample's coverage follows its silhouette distance ``sd`` (samples, > 0
    inside): ``sigmoid(sd / width)`` (soft silhouettes, ``width`` = sigma), or with ``ramp``
    ``clamp(0.5 + sd / width, 0, 1)`` (antialiased edges, ``width`` = 1 sample: the
    coverage of a pixel-sized box by a straight edge parallel to a pixel side; exactly 1
    half a pixel inside, exactly 0 half a pixel outside)."""

    width: float
    ramp: bool = False

    def margin(self, dtype) -> float:
        """How far (samples) outside the silhouette the coverage can be above 0."""
        return 0.5 * self.width if self.ramp else self.width * SOFT_TAIL[dtype]

    def coverage(self, sd):
        if self.ramp:
            return torch.clamp(sd / self.width + 0.5, 0.0, 1.0)
        return torch.sigmoid(sd / self.width)


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
    meets (-1: none); depth (B*P,) its camera-z depth (m, tracked; 0 where none). For the
    image alone, coverage, object_id and depth are None."""

    image: torch.Tensor
    coverage: torch.Tensor
    object_id: torch.Tensor
    depth: torch.Tensor


def soft_image(
    f: Frame, atlas, bg, edge: EdgeProfile, max_chunk: int, w0, ids: bool = True, transform=None
) -> SoftImage:
    """Soft silhouettes, composited front to back over ``bg``, and (``ids``; else None) the
    hard winner's id and depth from the same samples; ``transform`` (B|1, K, 3, 4) maps the
    texture colours per image and primitive (`appearance`), or None.

    Shapes: bg (B|1, H*W, 3); ``edge`` the coverage's :class:`EdgeProfile` (samples); ``w0`` (B|1, H, W): inverse depth (1/m)
    of a pre-rendered layer (``bg``) or None; primitive samples at or behind it get coverage
    0, as the hard test would hide them.

    A primitive's coverage is exactly 0 where its silhouette distance is at most
    ``-edge.margin(dtype)`` (sigmoid: ``-SOFT_TAIL * sigma``, see there for the error
    bound); pixels where every primitive's
    is are the background. Only the pixels some primitive reaches are composited; every pixel
    a primitive's surface covers is among them, so the winners are those of the hard test.
    """
    B, P = f.B, f.H * f.W
    margin = edge.margin(f.o.dtype)
    samples = _soft_samples(f, atlas, edge, margin, max_chunk, w0, transform)
    if samples is None:  # a copy: never a view of a pre-rendered layer the caller keeps
        image = channels_first(bg, B)
        if not ids:
            return SoftImage(image, None, None, None)
        zeros = bg.new_zeros(B, P)
        return SoftImage(image, zeros, torch.full((B * P,), -1, device=bg.device), zeros.view(-1))
    s = samples
    plan = make_plan(s.pid, s.prim, s.depth.detach(), s.hit, B, P, f.K, ids)
    image, coverage = composite(samples.alpha, samples.colour, bg, plan, with_coverage=ids)
    if not ids:
        return SoftImage(image, None, None, None)
    object_id, depth = _winner_images(samples, plan.winners, B * P)
    return SoftImage(image, coverage, object_id, depth)


def _winner_images(s: Samples, winners, n_pix: int):
    """Object id (n_pix,) long (-1: none) and depth (n_pix,) (tracked, 0: none) images of
    the winning samples ``winners`` (W,) long (one per pixel at most)."""
    pix = s.pid[winners]
    object_id = torch.full((n_pix,), -1, dtype=torch.long, device=pix.device)
    object_id[pix] = s.prim[winners]
    return object_id, s.depth.new_zeros(n_pix).index_put((pix,), s.depth[winners])


def _soft_samples(f: Frame, atlas, edge: EdgeProfile, margin: float, max_chunk: int, w0, transform):
    """Every primitive's :class:`Samples` at the pixels its soft edge reaches
    (`reach.kept_pixels` of `reach.candidates`); None when no pixel is kept.

    Geometry (coverage, depth, texture coordinates, shading) is computed per primitive and
    chunk of images (`_piece`); the texture is sampled once for all samples
    (`sampling.sample_quad_blocks`), one autograd node instead of one per piece."""
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
    columns, blocks, start = [], [], 0
    for k in sorted(kept):
        parts = _primitive_samples(f, k, kept[k], edge, max_chunk, w0, use_ckpt)
        n = sum(part[0].numel() for part in parts)
        if n:
            columns += parts
            blocks.append((k, start, start + n))
            start += n
    if not columns:
        return None
    pid, prim, alpha, depth, u, v, shade, hit = (
        None if c[0] is None else torch.cat(c) for c in zip(*columns, strict=True)
    )
    # each block's texture in the atlas: offset, width, height, repeat (Python numbers)
    textures = [(a, b, *atlas.level0[k]) for k, a, b in blocks]
    if transform is None:
        colour = sample_quad_blocks(atlas.quad, u, v, textures, shade)
    else:
        colour = sample_quad_blocks(atlas.quad, u, v, textures)
        colour = transform_colours(colour, transform, pid // (f.H * f.W), prim)
        colour = colour if shade is None else colour * shade.unsqueeze(1)
    return Samples(pid, prim, alpha, depth, colour, hit, tuple(blocks))


def _primitive_samples(f: Frame, k: int, kept, edge, max_chunk: int, w0, use_ckpt: bool):
    """Primitive k's samples at its kept pixels (a :class:`~reach.PixelList`), in chunks of
    images: per chunk the columns pid, prim, alpha, depth, u, v, shade (None when unlit)
    and hit, each (n,), of its real entries."""
    B, H, W = f.B, f.H, f.W
    device = f.o.device
    pix_all, valid_all = kept
    n = pix_all.shape[1]
    nb = max(1, min(B, max_chunk // max(1, 16 * n)))
    out = []
    for b0 in range(0, B, nb):
        b1 = min(B, b0 + nb)
        pix, valid = pix_all[b0:b1], valid_all[b0:b1]
        if not bool(valid.any()):
            continue
        w0c = None
        if w0 is not None:
            w0c = w0.expand(B, H, W)[b0:b1].reshape(b1 - b0, -1).gather(1, pix)
        args = (f, k, b0, b1, pix, edge, f.A, f.o, f.h, f.dxp, f.dyp, f.fx, f.fy, w0c)
        if use_ckpt:
            values = checkpoint(_piece, *args, use_reentrant=False)
        else:
            values = _piece(*args)
        pid = pix + (torch.arange(b0, b1, device=device) * (H * W)).unsqueeze(1)
        real = valid.reshape(-1).nonzero().squeeze(1)  # once for every column
        prim = torch.full((real.numel(),), k, dtype=torch.long, device=device)
        columns = [
            None if x is None else x.reshape(-1).index_select(0, real) for x in (pid, *values)
        ]
        out.append((columns[0], prim, *columns[1:]))
    return out


def _piece(f: Frame, k: int, b0: int, b1: int, pix, edge, A, o, h, dxp, dyp, fx, fy, w0c):
    """Coverage, depth, texture coordinates u and v (``uv_scale`` applied), shading (None
    when unlit), each (nb, n), of primitive k at pixels ``pix`` (nb, n) of images b0:b1, and
    whether the ray meets it there, in front of the layer (nb, n) bool. The tensors it
    differentiates come as arguments (for ``checkpoint``)."""
    code = f.codes[k]
    if code == MESH:
        from .mesh import mesh_piece

        alpha, depth, u, v, shade, hit = mesh_piece(f, k, b0, b1, pix, edge)
        if w0c is not None:  # depth * w0 < 1 <=> nearer than the layer (0 where it is empty)
            front = depth * w0c < 1
            alpha = torch.where(front, alpha, 0.0)
            hit = hit & front
        return alpha, depth, u, v, shade, hit
    Ak = A[b0:b1, k]
    d = local_rays(Ak, dxp[b0:b1], dyp[b0:b1], pix, f.W)
    hk = columns(h[b0:b1, k])
    g = soft_geometry(
        code, columns(o[b0:b1, k]), d, hk, Ak, fx[b0:b1, None], fy[b0:b1, None],
        face_misses=edge.ramp,
    )  # fmt: skip
    u, v = texture_coords(code, g.point, hk)
    su, sv = f.repeats[k]  # plain numbers: a scale of 1 is skipped
    u, v = (u if su == 1.0 else u * su), (v if sv == 1.0 else v * sv)
    light = f.light
    shade = None
    if light is not None:
        l_k = columns(light.direction[b0:b1, k])
        ambient, intensity = light.ambient[b0:b1, k, None], light.intensity[b0:b1, k, None]
        shade = shading(code, g.point, d, hk, l_k, ambient, intensity)
    alpha = edge.coverage(g.sd)
    hit = g.hit
    if w0c is not None:  # depth * w0 < 1 <=> nearer than the layer (0 where it is empty)
        front = g.depth * w0c < 1
        alpha = torch.where(front, alpha, 0.0)
        hit = hit & front
    return alpha, g.depth, u, v, shade, hit
