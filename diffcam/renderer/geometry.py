"""Per-sample geometry by components: ray hits, silhouette distance, depth and surface point
of one primitive kind at lists of pixels (their texture coordinates and shading: `surface`).

Soft samples take `soft_geometry` (silhouette distance, depth, hit and the colouring point),
hard hits `ray_hit`; both then `surface.texture_coords` and `surface.shading`. The same
arithmetic as ``primitives.intersect``, ``primitive_silhouettes.silhouette_distance(..., with_hit=True)``,
``primitives.surface_uv`` and ``shading.shade_at`` (tests/diffcam/test_geometry.py holds
them to those in float64, values and gradients), written on separate x, y, z tensors
instead of (..., 3) vectors: a dot product is then five plain element-wise ops instead of a
product and a sum over a last axis of 3, and their backward passes allocate no (n, 3)
buffers and no stacks. Per-image quantities (the camera centre ``o`` and the half sizes
``h`` in the primitive's frame, focal lengths) are (nb, 1) columns that broadcast against
(nb, n) samples (or (n,) rows against (n,) samples).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from .. import primitive_silhouettes
from .. import primitives as prim
from .._safe import safe_div, safe_sqrt, tiny
from ..autodiff import plain_autograd
from ..primitives import BOX, CAPSULE, CYLINDER, PLANE, RECT, SPHERE
from .capsule import capsule_soft
from .edges import edge_distance

BIG = prim.BIG


class Vec(NamedTuple):
    """A 3-vector by components, each (nb, n) or a broadcastable (nb, 1) column."""

    x: torch.Tensor
    y: torch.Tensor
    z: torch.Tensor

    def dot(self, other: Vec) -> torch.Tensor:
        return self.x * other.x + self.y * other.y + self.z * other.z

    def stacked(self) -> torch.Tensor:
        """(nb, 1, n, 3), the layout of ``primitives``' per-pixel vectors."""
        return torch.stack(torch.broadcast_tensors(self.x, self.y, self.z), -1).unsqueeze(1)


def columns(t: torch.Tensor) -> Vec:
    """A (nb, 3) tensor as a :class:`Vec` of (nb, 1) columns."""
    return Vec(t[:, 0:1], t[:, 1:2], t[:, 2:3])


class SoftGeometry(NamedTuple):
    """Per sample (nb, n): signed silhouette distance ``sd`` (px, > 0 inside); ``depth`` (m)
    of the hit, else of the ray's closest approach (``BIG`` behind); ``point`` the local
    point that colours the sample (:class:`Vec`); ``hit`` bool, whether the ray meets the
    surface. With ``distance_only`` only ``sd`` is set."""

    sd: torch.Tensor
    depth: torch.Tensor | None = None
    point: Vec | None = None
    hit: torch.Tensor | None = None


def local_rays(A, dxp, dyp, pix, W: int) -> Vec:
    """Local ray directions (camera-frame z = 1, so t = depth) through pixels ``pix``
    (nb, n) (flat in-image indices ``row * W + col``) from the local_from_camera rotation
    A (nb, 3, 3) and the camera ray slopes dxp (nb, W), dyp (nb, H)."""
    rows = pix // W
    sx = dxp.gather(1, pix - rows * W)
    sy = dyp.gather(1, rows)
    comps = [A[:, i, 0:1] * sx + (A[:, i, 1:2] * sy + A[:, i, 2:3]) for i in range(3)]
    return Vec(*comps)


def soft_geometry(
    code: int, o: Vec, d: Vec, h: Vec, A, fx, fy, distance_only=False, face_misses=False
):
    """:class:`SoftGeometry` of primitive kind ``code`` seen from local camera centre ``o``
    along local rays ``d``; half sizes ``h`` (columns (nb, 1)); A (nb, 3, 3) the
    local_from_camera rotation; fx, fy (nb, 1) focal lengths (px). ``face_misses``: a box's
    rays that miss it within ``_HIT_REACH`` of its silhouette take their depth and colouring
    point from the face they pass (`_box_face_misses`; antialiased edges), not from the
    closest approach to the centre."""
    fm = 0.5 * (fx + fy)
    if code in (PLANE, RECT):
        return _planar(code, o, d, h, A, fx, fy, distance_only)
    if code == BOX:
        return _box(o, d, h, A, fx, fy, distance_only, face_misses)
    if code == SPHERE:
        return _sphere(o, d, h, fm, distance_only)
    return _cylinder_capsule(code, o, d, h, fm, distance_only)


def _eps(t: torch.Tensor) -> float:
    return prim.eps_t(t)


def _div_nonneg(a, b):
    """``safe_div(a, b)`` for ``b >= 0`` (a sum of squares): the same values, with ``b``
    raised to ``tiny(b)`` by one clamp instead of safe_div's sign test and selects."""
    return a / b.clamp(min=tiny(b))


def _edges_sd(code, o: Vec, d: Vec, h: Vec, A, fx, fy):
    """Rectangles' and boxes' distance to their silhouette edges' image lines: the fused
    ``edges.edge_distance`` node (the reference under forward-mode AD)."""
    o3 = torch.cat([o.x, o.y, o.z], -1).unsqueeze(1)  # (nb, 1, 3)
    h3 = torch.cat([h.x, h.y, h.z], -1).unsqueeze(1)
    starts, dirs, active = (
        primitive_silhouettes.rect_edges if code == RECT else primitive_silhouettes.box_edges
    )(o3, h3)
    if code == BOX:  # at most 6 of the 12 edges are on the silhouette: those first, 6 kept
        keep = torch.argsort((~active).to(torch.uint8), dim=-1, stable=True)[..., :6]
        along = keep.unsqueeze(-1).expand(*keep.shape, 3)
        starts, dirs, active = (
            starts.gather(2, along),
            dirs.gather(2, along),
            active.gather(2, keep),
        )
    Ak = A.unsqueeze(1)
    if plain_autograd():
        return edge_distance(o3, d, starts, dirs, active, Ak, fx, fy)
    zero = torch.zeros_like(o3)
    sd = primitive_silhouettes.edge_planes_sd(
        o3, d.stacked(), starts, dirs, zero, active, Ak, fx, fy
    )
    return sd[:, 0]


def _planar(code, o: Vec, d: Vec, h: Vec, A, fx, fy, distance_only):
    if code == PLANE:
        gx, gy = A[:, 2, 0:1] / fx, A[:, 2, 1:2] / fy  # the local z axis in the camera frame
        norm = safe_sqrt(gx * gx + gy * gy)
        norm = torch.where(norm > 0, norm, 1.0)
        sd = -torch.sign(o.z) * d.z / norm
    else:
        sd = _edges_sd(code, o, d, h, A, fx, fy)
    if distance_only:
        return SoftGeometry(sd)
    t, hit, front = _planar_hit(code, o, d, h)
    depth = torch.where(front, t, BIG)
    t0 = torch.where(front, t, 0.0)
    point = Vec(o.x + t0 * d.x, o.y + t0 * d.y, o.z + t0 * d.z)
    return SoftGeometry(sd, depth, point, hit)


def _planar_hit(code, o: Vec, d: Vec, h: Vec):
    """The plane's ray parameter t (any sign), whether the ray hits the plane (rectangle)
    in front, and whether the plane point is in front."""
    t = safe_div(-o.z, d.z)
    front = t > _eps(d.z)
    hit = front & (d.z.abs() > tiny(d.z))
    if code == RECT:
        hit = hit & ((o.x + t * d.x).abs() <= h.x) & ((o.y + t * d.y).abs() <= h.y)
    return t, hit, front


def ray_hit(code: int, o: Vec, d: Vec, h: Vec):
    """``primitives.intersect`` by components: the nearest intersection t > 0 of rays
    ``o + t d`` with a primitive of kind ``code`` and half sizes ``h``, as (t, hit), t
    (a finite dummy 1 where missed) and hit (bool), each shaped like the rays."""
    if code in (PLANE, RECT):
        t, hit, _ = _planar_hit(code, o, d, h)
    elif code == BOX:
        t, hit = _box_hit(o, d, h)
    elif code == SPHERE:
        t, hit = _nearest_root(d.dot(d), o.dot(d), o.dot(o) - h.x * h.x, _eps(d.z))
    else:
        rho2 = d.x * d.x + d.y * d.y
        a = rho2 + d.z * d.z
        return _cylinder_capsule_hit(code, o, d, h.x, h.y, rho2, a, o.dot(d), _eps(d.z))
    return torch.where(hit, t, 1.0), hit


# Rays whose silhouette distance is at most -_HIT_REACH (px) miss (see `_hit_near_silhouette`).
_HIT_REACH = 1.0


def _near_silhouette(sd):
    """(the flat indices (m,) of the rays whose silhouette distance ``sd`` (nb, n) exceeds
    ``-_HIT_REACH``, a function giving those rays' values (m,) of an (nb, n) tensor or an
    (nb, 1) per-image column)."""
    sel = (sd > -_HIT_REACH).view(-1).nonzero().squeeze(1)
    image = sel // sd.shape[-1]

    def take(x):
        if x.shape[-1] == 1:  # a per-image column
            return x.reshape(-1).index_select(0, image)
        return x.reshape(-1).index_select(0, sel)

    return sel, take


def _hit_near_silhouette(code: int, o: Vec, d: Vec, h: Vec, sd):
    """`ray_hit` (t, hit) of a box or capsule for the rays whose silhouette distance ``sd``
    (px) exceeds ``-_HIT_REACH``; elsewhere (1, False), as it would give there.

    A ray meets a box or capsule only where its silhouette distance is >= 0: for a box the
    distance to the projected outline, for a capsule ``(r - dist) f / t`` with ``dist`` the
    ray's distance to the axis segment, ``t`` the depth of the ray's closest approach (where
    that lies behind the camera, -``BIG``: a ray from outside meets the capsule only around
    its closest approach). Rounding moves these distances by far less than a pixel, so the
    intersection, which costs more than the distance, is tested on the rays within
    ``_HIT_REACH`` of the silhouette only: a soft edge's samples mostly lie outside it.
    Shapes: o, h (nb, 1) columns; d and sd (nb, n)."""
    shape = sd.shape
    sel, take = _near_silhouette(sd)
    t, hit = ray_hit(code, *(Vec(*(take(x) for x in v)) for v in (o, d, h)))
    n = sd.numel()
    t_all = sd.new_ones(n).index_put((sel,), t)
    hit_all = torch.zeros(n, dtype=torch.bool, device=sd.device).index_put_((sel,), hit)
    return t_all.view(shape), hit_all.view(shape)


def _closest_approach_depth(o: Vec, d: Vec):
    """Ray parameter (depth) of the ray's closest approach to the local origin."""
    return _div_nonneg(-o.dot(d), d.dot(d))


def _box(o: Vec, d: Vec, h: Vec, A, fx, fy, distance_only, face_misses=False):
    sd = _edges_sd(BOX, o, d, h, A, fx, fy)
    if distance_only:
        return SoftGeometry(sd)
    eps = _eps(d.z)
    if face_misses:
        return _box_face_misses(o, d, h, sd, eps)
    t_hit, hit = _hit_near_silhouette(BOX, o, d, h, sd)
    tc = _closest_approach_depth(o, d)
    depth = torch.where(hit, t_hit, torch.where(tc > eps, tc, BIG))
    t = torch.where(hit, t_hit, tc.clamp(min=0))
    return SoftGeometry(sd, depth, Vec(o.x + t * d.x, o.y + t * d.y, o.z + t * d.z), hit)


# A box miss's colouring point keeps the face it passes: the other coordinates are clamped
# to within this fraction of the half sizes, so that `surface` picks that face, not an edge
# neighbour (a texture coordinate off by at most half of it).
_FACE_INSET = 1e-5


def _box_face_misses(o: Vec, d: Vec, h: Vec, sd, eps: float) -> SoftGeometry:
    """`_box`'s geometry where rays that miss the box near its silhouette (``sd`` above
    ``-_HIT_REACH``) are coloured and depth-sorted at the face they pass.

    A ray that misses a box enters its last slab past its first exit (``near > far``); where
    it crosses that slab's plane, at depth ``near``, it is just beside the face there (the
    face a ray a little further inside meets), so that face's point nearest the crossing and
    the depth ``near`` join the hit's point and depth continuously as the ray crosses the
    silhouette: an antialiased edge pixel's colour and depth order do not jump when its
    centre crosses the outline. (`_box`'s miss point, the closest approach to the centre, lies
    on another face or off the box, and sorts an elongated box by its centre.) Rays further
    out keep `_box`'s miss point (antialiased coverage is 0 there). The hits are `_box`'s."""
    shape = sd.shape
    sel, take = _near_silhouette(sd)
    os, ds, hs = (Vec(*(take(x) for x in v)) for v in (o, d, h))
    near, far, axis = _box_slabs(os, ds, hs, with_axis=True)
    hit = (far >= near) & (far > eps)
    t_sel = torch.where(near > eps, near, far)
    face = ~hit & (near > eps)  # a miss beside a face in front of the camera
    n = sd.numel()
    flat = torch.zeros(n, dtype=torch.bool, device=sd.device)
    hit_all = flat.index_put((sel,), hit).view(shape)
    face_all = flat.index_put((sel,), face).view(shape)
    t_all = sd.new_ones(n).index_put((sel,), torch.where(hit | face, t_sel, 1.0)).view(shape)
    tc = _closest_approach_depth(o, d)
    near_face = hit_all | face_all
    depth = torch.where(near_face, t_all, torch.where(tc > eps, tc, BIG))
    t = torch.where(near_face, t_all, tc.clamp(min=0))
    at = sel[face]  # the face misses' flat indices
    tf, af = t_sel[face], axis[face]
    point = []
    for i, (oi, di, oc, dc, hc) in enumerate(zip(o, d, os, ds, hs, strict=True)):
        p = oi + t * di
        pf = oc[face] + tf * dc[face]
        hf = hc[face]
        on_plane = torch.where(pf >= 0, hf, -hf)  # exactly on the passed face's plane
        inset = clamp_symmetric(pf, hf * (1.0 - _FACE_INSET))
        pf = torch.where(af == i, on_plane, inset)
        point.append(p.reshape(-1).index_put((at,), pf).view(shape))
    return SoftGeometry(sd, depth, Vec(*point), hit_all)


def _box_slabs(o: Vec, d: Vec, h: Vec, with_axis: bool = False):
    """The slab test of rays ``o + t d`` against a box of half sizes ``h``: the last slab
    entry ``near``, the first exit ``far`` and (``with_axis``; else None) the axis (long: 0,
    1, 2) of the slab entered last (the face a hit from outside lands on)."""
    near = far = axis = None
    for i, (oi, di, hi) in enumerate(zip(o, d, h, strict=True)):
        inv = safe_div(torch.ones_like(di), di)
        ta, tb = (-hi - oi) * inv, (hi - oi) * inv
        lo, hi_ = _smaller(ta, tb), _larger(ta, tb)
        if near is None:
            near, far = lo, hi_
            if with_axis:
                axis = torch.zeros(lo.shape, dtype=torch.long, device=lo.device)
            continue
        if with_axis:
            axis = torch.where(near >= lo, axis, i)
        near = _larger(near, lo)
        far = _smaller(far, hi_)
    return near, far, axis


def _box_hit(o: Vec, d: Vec, h: Vec):
    """The slabs' entry (or, from inside, exit) ray parameter and whether the ray hits."""
    eps = _eps(d.z)
    near, far, _ = _box_slabs(o, d, h)
    return torch.where(near > eps, near, far), (far >= near) & (far > eps)


def _nearest_root(a, b, c, eps):
    """Nearest root t > eps of a t^2 + 2 b t + c = 0 (a > 0) -> (t, valid)."""
    disc = b * b - a * c
    sq = safe_sqrt(disc)
    big_a = a > tiny(a)
    a_s = torch.where(big_a, a, 1.0)
    t0, t1 = (-b - sq) / a_s, (-b + sq) / a_s
    t = torch.where(t0 > eps, t0, t1)
    return t, (disc > 0) & big_a & (t > eps)


def _sphere(o: Vec, d: Vec, h: Vec, fm, distance_only):
    r = h.x
    eps = _eps(d.z)
    dd, od = d.dot(d), o.dot(d)
    tc = _div_nonneg(-od, dd)
    q = Vec(o.x + tc * d.x, o.y + tc * d.y, o.z + tc * d.z)
    front = tc > eps
    tc_s = torch.where(front, tc, 1.0)
    sd = torch.where(front, (r - safe_sqrt(q.dot(q))) * fm / tc_s, -BIG)
    if distance_only:
        return SoftGeometry(sd)
    t, hit = _nearest_root(dd, od, o.dot(o) - r * r, eps)
    t_hit = torch.where(hit, t, 1.0)
    depth = torch.where(hit, t_hit, torch.where(front, tc, BIG))
    point = Vec(
        *(torch.where(hit, oi + t_hit * di, qi) for oi, di, qi in zip(o, d, q, strict=True))
    )
    return SoftGeometry(sd, depth, point, hit)


def _cylinder_capsule(code, o: Vec, d: Vec, h: Vec, fm, distance_only):
    """Closest approach between the ray and the axis (local z) line or segment."""
    r, hl = h.x, h.y
    if code == CAPSULE and not distance_only and plain_autograd():  # one fused node
        d_full = Vec(*torch.broadcast_tensors(d.x, d.y, d.z))

        def hits(sd):
            return _hit_near_silhouette(CAPSULE, o, d_full, Vec(r, hl, hl), sd)

        sd, depth, point, hit = capsule_soft(o, d, r, hl, fm, hits)
        return SoftGeometry(sd, depth, Vec(*point), hit)
    eps = _eps(d.z)
    rho2 = d.x * d.x + d.y * d.y  # |d|^2 - d_z^2
    a = rho2 + d.z * d.z
    od = o.dot(d)
    z_line = _div_nonneg(a * o.z - d.z * od, rho2)
    z_seg = clamp_symmetric(z_line, hl) if code == CAPSULE else z_line
    t_seg = _div_nonneg(z_seg * d.z - od, a)
    q = Vec(o.x + t_seg * d.x, o.y + t_seg * d.y, o.z + t_seg * d.z)
    qz = q.z - z_seg
    dist = safe_sqrt(q.x * q.x + q.y * q.y + qz * qz)
    front = t_seg > eps
    t_s = torch.where(front, t_seg, 1.0)
    sd = torch.where(front, (r - dist) * fm / t_s, -BIG)
    if code == CYLINDER:
        sd = _smaller(sd, torch.where(front, (hl - z_line.abs()) * fm / t_s, -BIG))
        for zc in (hl, -hl):
            tcap = safe_div(zc - o.z, d.z)
            ok = (tcap > eps) & (d.z.abs() > tiny(d.z))
            tcap_s = torch.where(ok, tcap, 1.0)
            px, py = o.x + tcap_s * d.x, o.y + tcap_s * d.y
            sd_cap = torch.where(ok, (r - safe_sqrt(px * px + py * py)) * fm / tcap_s, -BIG)
            sd = _larger(sd, sd_cap)
    if distance_only:
        return SoftGeometry(sd)
    if code == CAPSULE:
        t_hit, hit = _hit_near_silhouette(code, o, d, h, sd)
    else:
        t_hit, hit = _cylinder_capsule_hit(code, o, d, r, hl, rho2, a, od, eps)
    depth = torch.where(hit, t_hit, torch.where(front, t_seg, BIG))
    point = Vec(
        *(torch.where(hit, oi + t_hit * di, qi) for oi, di, qi in zip(o, d, q, strict=True))
    )
    return SoftGeometry(sd, depth, point, hit)


def _cylinder_capsule_hit(code, o: Vec, d: Vec, r, hl, rho2, a, od, eps):
    """``primitives.intersect`` of a cylinder or capsule: the nearest valid candidate among
    the side's two roots and the caps (discs, or the end spheres)."""
    b = o.x * d.x + o.y * d.y
    orho2 = o.x * o.x + o.y * o.y
    disc = b * b - rho2 * (orho2 - r * r)
    sq = safe_sqrt(disc)
    big_a = rho2 > tiny(rho2)
    a_s = torch.where(big_a, rho2, 1.0)
    ok = (disc > 0) & big_a
    cands, valids = [], []
    for s in ((-b - sq) / a_s, (-b + sq) / a_s):
        cands.append(s)
        valids.append(ok & (s > eps) & ((o.z + s * d.z).abs() <= hl))
    for zc in (hl, -hl):
        if code == CYLINDER:
            tc = safe_div(zc - o.z, d.z)
            px, py = o.x + tc * d.x, o.y + tc * d.y
            cands.append(tc)
            valids.append((tc > eps) & (px * px + py * py <= r * r) & (d.z.abs() > tiny(d.z)))
        else:
            ocz = o.z - zc
            t, valid = _nearest_root(a, od - zc * d.z, orho2 + ocz * ocz - r * r, eps)
            cands.append(t)
            valids.append(valid)
    best = None
    for c, v in zip(cands, valids, strict=True):
        c = torch.where(v, c, BIG)
        best = c if best is None else _smaller(best, c)
    hit = best < 0.5 * BIG
    return torch.where(hit, best, 1.0), hit


# ---------------------------------------------------------------------------- (u, v), shading
def clamp_symmetric(x, lim):
    """x clamped to [-lim, lim] (one autograd node, cheaper than a maximum and a minimum)."""
    return torch.clamp(x, -lim, lim)


def _smaller(a, b):
    """The element-wise minimum, as a select (its backward is cheaper than ``minimum``'s;
    on exact ties the gradient goes to ``a`` instead of half to each)."""
    return torch.where(a <= b, a, b)


def _larger(a, b):
    """The element-wise maximum, as :func:`_smaller`."""
    return torch.where(a >= b, a, b)
