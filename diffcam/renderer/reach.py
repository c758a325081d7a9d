"""Which pixels a primitive's soft edge reaches: no-grad, per primitive and image.

A soft coverage ``sigmoid(sd / sigma)`` counts only where the silhouette distance ``sd``
exceeds ``-margin`` (``margin = SOFT_TAIL * sigma``, see ``silhouettes``). Two steps find
those pixels without a pass over every pixel and primitive: a cheap superset of candidate
pixels from the primitive's geometry (`candidates`), then the exact test of
``silhouette_distance`` on the candidates only (`kept_pixels`).

Candidates: boxes and rectangles, the per-row spans their edge lines allow (`_edge_spans`:
exactly the pixels, so they skip the second step); spheres, capsules and cylinders, the
per-row section of a bounding box grown by what the margin can reach (`_curved_spans`);
planes (their horizon), every pixel; meshes, the window of their bounds grown by the margin. Pixel lists are (B, n) flat in-image indices ``row * W + col`` padded to a
common n per primitive, with a (B, n) bool of which entries are real.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..primitive_silhouettes import silhouette_lines
from ..primitives import BOX, CYLINDER, MESH, PLANE, RECT
from .frame import Frame
from .geometry import columns, local_rays, soft_geometry


class PixelList(NamedTuple):
    """Per image, a list of pixels: pix (B, n) long flat in-image indices, padded with a
    real entry of the same image (or 0); valid (B, n) bool, which entries are real."""

    pix: torch.Tensor
    valid: torch.Tensor


def candidates(f: Frame, margin: float) -> dict[int, PixelList]:
    """No-grad: per primitive k, a superset of the pixels where its ``silhouette_distance``
    exceeds ``-margin`` (pixels), as a :class:`PixelList`."""
    B, H, W = f.B, f.H, f.W
    device = f.o.device
    groups: dict[int, list[int]] = {}
    for k, c in enumerate(f.codes):
        groups.setdefault(c, []).append(k)
    out = {}
    with torch.no_grad():
        for code, ks in groups.items():
            if code == MESH:  # each mesh its own window
                from .mesh import mesh_spans

                spans = [mesh_spans(f, k, margin) for k in ks]
                lo = torch.stack([s[0] for s in spans], 1)
                hi = torch.stack([s[1] for s in spans], 1)
            elif code in (BOX, RECT):
                lo, hi = _edge_spans(f, code, ks, margin)
            elif code == PLANE:
                lo = torch.zeros(B, len(ks), H, dtype=torch.long, device=device)
                hi = torch.full_like(lo, W - 1)
            else:
                lo, hi = _curved_spans(f, code, ks, margin)
            for j, k in enumerate(ks):
                out[k] = _span_pixels(lo[:, j], hi[:, j], W)
    return out


def kept_pixels(f: Frame, k: int, cand: PixelList, margin: float, max_chunk: int):
    """No-grad: the candidates ``cand`` of primitive k where its silhouette distance exceeds
    ``-margin``, as a :class:`PixelList` (in candidate order); None when no image keeps any.
    A box's or rectangle's candidates are already those pixels (`_edge_spans`)."""
    B, n_c = cand.pix.shape
    if n_c == 0:
        return None
    if f.codes[k] in (BOX, RECT):
        return cand
    nb = max(1, min(B, max_chunk // max(1, 16 * n_c)))
    keeps = []
    if f.codes[k] == MESH:  # the mesh's own distance, image by image
        from .mesh import mesh_soft_distance

        sd = torch.stack([mesh_soft_distance(f, k, b, cand.pix[b]) for b in range(B)])
        return _compact((sd > -margin) & cand.valid, cand.pix)
    with torch.no_grad():
        for b0 in range(0, B, nb):
            b1 = min(B, b0 + nb)
            A = f.A[b0:b1, k]
            d = local_rays(A, f.dxp[b0:b1], f.dyp[b0:b1], cand.pix[b0:b1], f.W)
            o, h = columns(f.o[b0:b1, k]), columns(f.h[b0:b1, k])
            fx, fy = f.fx[b0:b1, None], f.fy[b0:b1, None]
            g = soft_geometry(f.codes[k], o, d, h, A, fx, fy, distance_only=True)
            keeps.append(g.sd > -margin)
        keep = torch.cat(keeps) & cand.valid
    return _compact(keep, cand.pix)


def _compact(keep, pix) -> PixelList | None:
    """The entries of ``pix`` (B, n) where ``keep`` (B, n), moved to the front of each row
    (in order) and padded to the largest count with the row's first entry; None if none."""
    B = pix.shape[0]
    counts = keep.sum(1)
    n = int(counts.max()) if B else 0
    if n == 0:
        return None
    slot = torch.where(keep, keep.cumsum(1) - 1, n)  # the others to a dropped column n
    out = pix.new_empty(B, n + 1).copy_(pix[:, :1].expand(B, n + 1))  # (not a slow clone)
    out.scatter_(1, slot, pix)
    valid = torch.arange(n, device=pix.device) < counts.unsqueeze(1)
    return PixelList(out[:, :n], valid)


def _span_pixels(lo, hi, W: int) -> PixelList:
    """The pixels of per-row column spans lo..hi (B, H) long, inclusive (empty where
    lo > hi), as a :class:`PixelList` in row-major order."""
    B, H = lo.shape
    lo = lo.clamp(min=0)
    hi = hi.clamp(max=W - 1)
    count = (hi - lo + 1).clamp(min=0)  # (B, H)
    end = count.cumsum(1)
    total = end[:, -1]
    n = int(total.max()) if B else 0
    j = torch.arange(n, device=lo.device).expand(B, n)
    # the row of slot j: how many rows end at or before j (a count of rows' ends, summed)
    marks = torch.zeros(B, n + 1, dtype=end.dtype, device=lo.device)
    marks.scatter_add_(1, end.clamp(max=n), torch.ones_like(end))
    row = marks[:, :n].cumsum(1).clamp(max=H - 1)
    # slot j of row y is pixel y W + lo[y] + (j - the row's first slot): one gather of the
    # per-row part
    first = torch.arange(H, device=lo.device) * W + lo - (end - count)  # (B, H)
    pix = first.gather(1, row) + j
    valid = j < total.unsqueeze(1)
    pix = torch.where(valid, pix, pix[:, :1]).clamp(0, H * W - 1)
    return PixelList(pix, valid)


# pixels a span grows by on each side against rounding (the exact test prunes them)
_SPAN_SLACK = 0.01


def _edge_spans(f: Frame, code: int, ks: list[int], margin: float):
    """Per row, the columns lo..hi (B, Kg, H) long (inclusive; empty where lo > hi) where the
    silhouette distance of boxes or rectangles ``ks`` exceeds -margin.

    Their distance is the minimum over silhouette edges of a signed distance to the edge's
    image line, affine in the pixel: ``a x + b(y)``
    (`primitive_silhouettes.silhouette_lines`). On row y each line allows
    x > (-margin - b) / a (a > 0) or x < (-margin - b) / a (a < 0), or the whole row or none
    (a = 0): the span is the intersection, exactly the pixels the per-pixel test keeps (up to
    ``_SPAN_SLACK``).
    """
    B, H, W = f.B, f.H, f.W
    A, o, h = f.A[:, ks], f.o[:, ks], f.h[:, ks]
    n_cam, norm, active = silhouette_lines(code, o, h, A, f.fx.unsqueeze(1), f.fy.unsqueeze(1))
    fx, fy = f.fx.view(B, 1, 1), f.fy.view(B, 1, 1)
    a = n_cam[..., 0] / (fx * norm)  # (B, Kg, E) per pixel in x
    y = torch.arange(H, dtype=a.dtype, device=a.device) + 0.5
    b = (
        n_cam[..., 1:2] * ((y - f.cy.view(B, 1, 1, 1)) / fy.unsqueeze(-1))
        + (n_cam[..., 2:3] - n_cam[..., 0:1] * (f.cx / f.fx).view(B, 1, 1, 1))
    ) / norm.unsqueeze(-1)  # (B, Kg, E, H)
    a, act = a.unsqueeze(-1), active.unsqueeze(-1)
    bound = (-margin - b) / torch.where(a != 0, a, torch.ones_like(a))
    bound = bound.clamp(-2.0 * W - 2, 3.0 * W + 2)
    left = torch.where(act & (a > 0), bound, -float(W)).amax(2)  # x > left
    right = torch.where(act & (a < 0), bound, 2.0 * W).amin(2)  # x < right
    blocked = (act & (a == 0) & (b <= -margin)).any(2)
    lo = torch.ceil(left - 0.5 - _SPAN_SLACK)
    hi = torch.floor(right - 0.5 + _SPAN_SLACK)
    finite = torch.isfinite(n_cam).all(-1).all(-1).unsqueeze(-1) & torch.isfinite(norm).all(
        -1
    ).unsqueeze(-1)
    hi = torch.where(blocked | ~finite, -1.0, hi)
    return lo.long(), hi.long()


_CORNER_PAIRS = [(a, b) for a in range(8) for b in range(a + 1, 8)]


def _curved_spans(f: Frame, code: int, ks: list[int], margin: float):
    """Per row, the columns lo..hi (B, Kg, H) long (inclusive; empty where lo > hi) that may
    hold a pixel of spheres, capsules or cylinders ``ks`` with silhouette distance > -margin:
    the row's section of the image of a local box around the primitive, grown by what the
    margin can reach (and by ``_SPAN_SLACK``).

    Their distance is ``(r - ray's distance to the axis) * f / t`` (caps and the cylinder's
    ends alike), t the depth of the ray's closest point. Where it exceeds -m, that point lies
    within r + m t / f of an axis point within hl of the centre (a cylinder's unclamped axis
    point: within hl + m t / f). With zc the centre's depth and a_z the axis's depth component,
    that axis point is at most zc + hl a_z deep (a cylinder's: + a_z m t / f), so
    t <= zc + hl a_z + r + c m t / f (c = 1, a cylinder's 1 + a_z), i.e.
    t <= T = (zc + hl a_z + r) / (1 - c m / f): the ray meets the local box of half sizes
    (r + E, r + E, hl + r + E), E = m T / f (a cylinder's point is level with its axis point:
    hl + E). The box's image is the convex hull of its 8 corners'
    images, whose section by a row is spanned by the crossings of the 28 corner pairs. Where
    the box is not wholly in front of the camera (or c m >= f), every pixel.
    """
    B, H, W = f.B, f.H, f.W
    A, o, h = f.A[:, ks], f.o[:, ks], f.h[:, ks]
    r, hl = h[..., 0], h[..., 1]
    f_mean = 0.5 * (f.fx + f.fy).unsqueeze(1)  # (B, 1)
    centre = -(A.transpose(-1, -2) @ o.unsqueeze(-1)).squeeze(-1)  # camera frame (B, Kg, 3)
    a_z = A[..., 2, 2].abs()  # the axis's depth component
    reach = ((1.0 + a_z) if code == CYLINDER else 1.0) * margin / f_mean
    T = (centre[..., 2] + hl * a_z + r) / (1.0 - reach).clamp(min=1e-6)
    E = margin * T / f_mean
    along = hl + E if code == CYLINDER else hl + r + E
    half = torch.stack([r + E, r + E, along], -1)  # (B, Kg, 3)
    signs = torch.tensor(
        [[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)],
        dtype=A.dtype,
        device=A.device,
    )
    # corner = centre + sum_i s_i half_i (local axis i in the camera frame: row i of A)
    corners = centre.unsqueeze(2) + (signs * half.unsqueeze(2)) @ A  # (B, Kg, 8, 3)
    z = corners[..., 2]
    bounded = (reach < 1) & (z.amin(-1) > 0)  # (B, Kg)
    z = torch.where(bounded.unsqueeze(-1), z, torch.ones_like(z))
    u = f.fx.view(B, 1, 1) * corners[..., 0] / z + f.cx.view(B, 1, 1)  # (B, Kg, 8)
    v = f.fy.view(B, 1, 1) * corners[..., 1] / z + f.cy.view(B, 1, 1)
    a, b = zip(*_CORNER_PAIRS, strict=True)
    ua, ub, va, vb = u[..., a], u[..., b], v[..., a], v[..., b]  # (B, Kg, 28)
    y = torch.arange(H, dtype=u.dtype, device=u.device) + 0.5  # row centres
    ya, yb, y = va.unsqueeze(-1), vb.unsqueeze(-1), y.view(1, 1, 1, H)
    crosses = (torch.minimum(ya, yb) <= y) & (y <= torch.maximum(ya, yb))  # (B, Kg, 28, H)
    dv = yb - ya
    w = torch.where(dv != 0, (y - ya) / torch.where(dv != 0, dv, torch.ones_like(dv)), 0.0)
    x = ua.unsqueeze(-1) + w * (ub - ua).unsqueeze(-1)
    big = torch.finfo(u.dtype).max
    x_lo = torch.where(crosses, x, big).amin(2)  # (B, Kg, H)
    x_hi = torch.where(crosses, x, -big).amax(2)
    # pixel j's centre j + 0.5 in [x_lo, x_hi]
    lo = torch.ceil(x_lo.clamp(-2.0, W + 2.0) - 0.5 - _SPAN_SLACK)
    hi = torch.floor(x_hi.clamp(-2.0, W + 2.0) - 0.5 + _SPAN_SLACK)
    lo = torch.where(bounded.unsqueeze(-1), lo, 0.0).long()
    hi = torch.where(bounded.unsqueeze(-1), hi, W - 1.0).long()
    return lo, hi
