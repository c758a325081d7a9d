"""Soft samples' geometry of capsules in one autograd node, with a hand-written backward.

``geometry._cylinder_capsule`` recorded op by op keeps some hundred element-wise nodes per
batch of samples, each with its own buffers in the backward. `capsule_soft` computes the
same values (the same arithmetic, in the same order) without recording, and its backward
applies the chain rule by hand:

* the closest approach of the ray ``o + t d`` to the axis segment: ``z_line`` (the axis
  point nearest the ray's line), ``z_seg`` (it clamped to the segment), ``t_seg`` (the ray
  parameter nearest ``z_seg``), the offset ``w = o + t_seg d - z_seg e_z`` and its length
  ``dist``; the silhouette distance ``sd = (r - dist) fm / t_seg`` in front of the camera;
* the hit's ray parameter ``t`` by the implicit function theorem on the surface
  ``|p - c(p)|^2 = r^2`` (``c(p)`` the axis point nearest ``p = o + t d``, ``n = p - c``):
  ``dt = -(n . (do + t dd) - |n_z| dhl - r dr) / (n . d)``, the derivative of whichever
  root of the side's or an end sphere's quadratic the forward took.

`geometry` uses it when plain autograd runs (`autodiff.plain_autograd`); under forward-mode
AD or functorch transforms it keeps the recorded form.
"""

from __future__ import annotations

import torch

from .. import primitives as prim
from .._safe import tiny


class _CapsuleSoft(torch.autograd.Function):
    """sd (px), depth (m), colouring point x, y, z (m) and hit (bool), each (nb, n), of a
    capsule of radius r and half length hl (nb, 1) seen from o (columns ox, oy, oz (nb, 1))
    along directions dx, dy, dz (nb, n); fm (nb, 1) the mean focal length (px). ``hits``
    maps the silhouette distance (nb, n) to the rays' hit parameter t and hit mask (the
    intersection test, `geometry._hit_near_silhouette`, passed in: `geometry` imports this
    module)."""

    @staticmethod
    def forward(ctx, hits, ox, oy, oz, dx, dy, dz, r, hl, fm):
        eps = prim.eps_t(dz)
        # the recorded form's arithmetic in its order, products and sums in place where
        # that gives the same values (a + b = b + a exactly)
        rho2 = (dx * dx).add_(dy * dy)
        a = (dz * dz).add_(rho2)
        od = (ox * dx).add_(oy * dy).add_(oz * dz)
        z_line = (a * oz).sub_(dz * od).div_(rho2.clamp(min=tiny(rho2)))
        z_seg = torch.clamp(z_line, -hl, hl)
        t_seg = (z_seg * dz).sub_(od).div_(a.clamp(min=tiny(a)))
        qx, qy, qz = ((t_seg * di).add_(oi) for oi, di in ((ox, dx), (oy, dy), (oz, dz)))
        wz = qz - z_seg
        w2 = (qx * qx).add_(qy * qy).add_(wz * wz)
        # selects as products with float masks, exact here (every operand is finite)
        dist = w2.clamp(min=0.0).sqrt_().mul_(_step(w2 - tiny(w2), 0.0))  # safe_sqrt
        front_f = _step(t_seg - eps, 0.0)
        back_f = 1.0 - front_f
        big_back = back_f * prim.BIG
        t_s = (t_seg * front_f).add_(back_f)
        sd = torch.sub(r, dist).mul_(fm).div_(t_s).mul_(front_f).sub_(big_back)
        o, d = (ox, oy, oz), (dx, dy, dz)
        t_hit, hit = hits(sd)
        hit_f = hit.to(sd.dtype)
        miss_f = 1.0 - hit_f
        depth = (t_hit * hit_f).add_((t_seg * front_f).add_(big_back).mul_(miss_f))
        px, py, pz = (
            (t_hit * di).add_(oi).mul_(hit_f).add_(qi * miss_f)
            for oi, di, qi in zip(o, d, (qx, qy, qz), strict=True)
        )
        ctx.mark_non_differentiable(hit)
        ctx.save_for_backward(
            *(ox, oy, oz, dx, dy, dz, r, hl, fm, rho2, a, od, z_line, z_seg, t_seg, t_s),
            *(qx, qy, wz, dist, sd, front_f, hit_f, miss_f, t_hit, px, py, pz),
        )
        return sd, depth, px, py, pz, hit

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g_sd, g_depth, g_px, g_py, g_pz, _g_hit):
        saved = ctx.saved_tensors
        ox, oy, oz, dx, dy, dz, r, hl, fm = saved[:9]
        g_o, g_d, g_r, g_hl, g_fm = _closest_approach_backward(
            saved, g_sd, g_depth, g_px, g_py, g_pz
        )
        hit_f, miss_f, t_hit, px, py, pz = saved[-6:]
        # the hit: p = o + t d, dt from the implicit surface |p - c(p)|^2 = r^2
        nz = pz - torch.clamp(pz, -hl, hl)
        nd = torch.mul(px, dx).addcmul_(py, dy).addcmul_(nz, dz)
        g_th = torch.addcmul(g_depth, g_px, dx).addcmul_(g_py, dy).addcmul_(g_pz, dz)
        kk = g_th.mul_(hit_f).div_(nd.mul_(hit_f).add_(miss_f))  # dL/dt / (n . d) where hit
        th = t_hit * hit_f
        g_r.addcmul_(kk, r)
        g_hl.addcmul_(kk, nz.abs())
        for i, (gp, n) in enumerate(((g_px, px), (g_py, py), (g_pz, nz))):
            gh = torch.mul(gp, hit_f).addcmul_(kk, n, value=-1.0)
            g_o[i].add_(gh)
            g_d[i].addcmul_(th, gh)
        return (
            None,
            *(g.sum_to_size(c.shape) for g, c in zip(g_o, (ox, oy, oz), strict=True)),
            *g_d,
            g_r.sum_to_size(r.shape),
            g_hl.sum_to_size(hl.shape),
            g_fm.sum_to_size(fm.shape),
        )


def _step(x, at_zero: float):
    """A float mask of ``x > 0`` (``at_zero`` 0) or ``x >= 0`` (``at_zero`` 1): selects by
    masks (a product with a 0 or 1) are exact for finite values and several times faster
    on CPU than ``torch.where`` on a bool condition."""
    return torch.sign(x).add_(at_zero).clamp_(0.0, 1.0)


def _closest_approach_backward(saved, g_sd, g_depth, g_px, g_py, g_pz):
    """Gradients (o and d by components, r, hl, fm; (nb, n) each) of sd, of the missed rays'
    depth and colouring point q, through the ray's closest approach to the axis segment.
    Products are accumulated in place (``addcmul_``) into buffers this function owns."""
    ox, oy, oz, dx, dy, dz, r, hl, fm, rho2, a, od, z_line, z_seg, t_seg, t_s = saved[:16]
    qx, qy, wz, dist, sd, front_f, hit_f, miss_f = saved[16:24]
    # sd = (r - dist) fm / t_seg in front (a constant behind)
    k = torch.mul(g_sd, front_f).div_(t_s)
    g_r = k * fm
    g_fm = torch.sub(r, dist).mul_(k)
    # d sd / d w = -s w, s = k fm / dist (0 where dist = 0: sign(dist) is that mask)
    s = torch.div(g_r, dist.clamp(min=tiny(dist))).mul_(torch.sign(dist))
    gq = [
        torch.mul(g, miss_f).addcmul_(s, w, value=-1.0)
        for g, w in ((g_px, qx), (g_py, qy), (g_pz, wz))
    ]
    # t_seg: through q, sd's 1 / t_seg and the depth of missed rays in front
    g_t = torch.mul(g_depth, miss_f).mul_(front_f)
    g_t.addcmul_(gq[0], dx).addcmul_(gq[1], dy).addcmul_(gq[2], dz).addcmul_(k, sd, value=-1.0)
    g_d = [t_seg * g for g in gq]
    # t_seg = (z_seg dz - od) / max(a, tiny)
    gn = g_t.div_(a.clamp(min=tiny(a)))
    g_a = torch.mul(gn, t_seg).mul_(_step(a - tiny(a), 1.0)).neg_()
    g_zseg = torch.mul(gn, dz).addcmul_(s, wz)
    # z_seg = clamp(z_line, -hl, hl)
    above, below = _step(z_line - hl, 0.0), _step(-hl - z_line, 0.0)
    g_hl = (above - below).mul_(g_zseg)
    g_zline = above.add_(below).sub_(1.0).mul_(g_zseg).neg_()  # inside the segment
    # z_line = (a oz - dz od) / max(rho2, tiny)
    gm = g_zline.div_(rho2.clamp(min=tiny(rho2)))
    g_a.addcmul_(gm, oz)
    g_rho2 = torch.mul(gm, z_line).mul_(_step(rho2 - tiny(rho2), 1.0)).neg_().add_(g_a)
    g_od = torch.addcmul(gn, gm, dz).neg_()  # od = o . d
    g_o = [torch.addcmul(g, g_od, di) for g, di in zip(gq, (dx, dy, dz), strict=True)]
    g_o[2].addcmul_(gm, a)
    g_d[0].addcmul_(g_od, ox).addcmul_(dx, g_rho2, value=2.0)  # rho2 = dx^2 + dy^2
    g_d[1].addcmul_(g_od, oy).addcmul_(dy, g_rho2, value=2.0)
    g_d[2].addcmul_(g_od, oz).addcmul_(gn, z_seg).addcmul_(gm, od, value=-1.0)
    g_d[2].addcmul_(dz, g_a, value=2.0)  # a = rho2 + dz^2
    return g_o, g_d, g_r, g_hl, g_fm


def capsule_soft(o, d, r, hl, fm, hits):
    """(sd, depth, point (x, y, z), hit) of `_CapsuleSoft` for a local camera centre ``o``
    (a ``geometry.Vec`` of (nb, 1) columns), ray directions ``d`` (a Vec of (nb, n)), radius
    ``r``, half length ``hl`` and mean focal length ``fm`` (px) (nb, 1); ``hits`` as there."""
    dx, dy, dz = torch.broadcast_tensors(d.x, d.y, d.z)
    sd, depth, px, py, pz, hit = _CapsuleSoft.apply(hits, *o, dx, dy, dz, r, hl, fm)
    return sd, depth, (px, py, pz), hit
