"""Per-(image, primitive) tables shared by the hard-edge paths.

Planar primitives (rectangles, planes) are homographies of the image: their hit test, depth
and (u, v) are ratios of affine functions of the pixel coordinates, evaluated from a few
per-(b, k) coefficients (``_planar_forms``) instead of a full ray intersection. The other
(generic) kinds keep their pose, size and the camera intrinsics in a table of the same layout
(one row of parameters per (b, k)), so that the winners' recomputation gathers one row per
pixel.

Both tables are read by named columns (the constants below): ``tab[..., P_DEPTH]`` or, for
(F, N) transposed tables and unbound tuples, ``g[P_DEPTH]``; ``affine(g, P_U, x, y)`` is the
form ``a x + b y + c`` stored at columns P_U .. P_U + 2.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..primitives import PLANE, RECT
from .frame import Frame
from .shading import planar_shade

# planar table columns: forms U, V, D (3 coefficients each), -o_z (depth = -o_z / D), the
# (u, v) offsets u0, v0, then the shading factor when lit: (B, K, 12 | 13)
P_U, P_V, P_D, P_DEPTH, P_U0, P_V0, P_SHADE = 0, 3, 6, 9, 10, 11, 12
# generic table columns: A (9, row-major), o (3), h (3), su, sv, fx, fy, cx, cy, then when
# lit the local light direction (3), the ambient and the intensity: (B, K, 21 | 26)
G_A, G_SU, G_SV, G_FX, G_FY, G_CX, G_CY, G_AMBIENT, G_INTENSITY = 0, 15, 16, 17, 18, 19, 20, 24, 25
G_O, G_H, G_LIGHT = slice(9, 12), slice(12, 15), slice(21, 24)


def affine(g, col: int, x, y):
    """``g[col] * x + g[col + 1] * y + g[col + 2]``: an affine form of the pixel coordinates
    (or ray slopes) stored at columns col .. col + 2 of a table row ``g``."""
    return g[col] * x + g[col + 1] * y + g[col + 2]


def safe_inverse(D):
    """1 / D, with 1 where |D| <= 1e-30 (a ray parallel to the plane: no hit there)."""
    return 1.0 / torch.where(D.abs() > 1e-30, D, torch.ones_like(D))


class PlanarForms(NamedTuple):
    """(B, K, 3) coefficient triples (a, b, c) of ``a x + b y + c`` (see ``_planar_forms``);
    u0, v0 (B, K, 1)."""

    D: torch.Tensor
    Nx: torch.Tensor
    Ny: torch.Tensor
    U: torch.Tensor
    V: torch.Tensor
    u0: torch.Tensor
    v0: torch.Tensor


class PlanarTest(NamedTuple):
    """No-grad planar hit-test forms (B, K, 3): inverse depth ``w`` and the normalised
    in-plane coordinates ``nx``, ``ny`` (see ``_planar_forms``)."""

    w: torch.Tensor
    nx: torch.Tensor
    ny: torch.Tensor


class Tables(NamedTuple):
    """Per-(b, k) tables of ``planar_tables``.

    plan (B, K, 12|13) differentiable planar forms (columns P_*) or None without planar
    primitives; gen (B, K, 21|26) differentiable generic parameters (columns G_*) or None
    without generic primitives; test: no-grad :class:`PlanarTest`; A (B, K, 3, 3), o, h
    (B, K, 3) detached geometry; dx (B, W), dy (B, H) no-grad camera ray slopes.
    """

    plan: torch.Tensor | None
    gen: torch.Tensor | None
    test: PlanarTest
    A: torch.Tensor
    o: torch.Tensor
    h: torch.Tensor
    dx: torch.Tensor
    dy: torch.Tensor


def _planar_forms(f: Frame) -> PlanarForms:
    """Per (b, k) affine forms in pixel coordinates (x, y) for planar primitives.

    With ``d(x, y) = M [x, y, 1]`` the local direction of the ray through continuous pixel
    (x, y), the hit point on the body z = 0 plane is ``p_xy = N_xy / D`` and its depth
    ``-o_z / D``, where ``D = d_z`` and ``N_x = o_x d_z - o_z d_x`` are affine in (x, y): a
    homography. Returns (B, K, 3) coefficient triples (a, b, c) of a x + b y + c:

    * no-grad test: ``w = -D / o_z`` (inverse depth), ``nx = N_x / (h_x |o_z|)``, same for y;
      a rectangle is hit iff ``max(|nx|, |ny|) < w``, an infinite plane iff ``w > 0``.
    * differentiable: ``U, V`` (so that u = U / D + u0, v = V / D + v0) and ``D``.
    """
    A, o, h, uv_scale = f.A, f.o, f.h, f.uv_scale
    c0 = A[..., :, 0] / f.fx.view(-1, 1, 1)
    c1 = A[..., :, 1] / f.fy.view(-1, 1, 1)
    c2 = A[..., :, 2] - c0 * f.cx.view(-1, 1, 1) - c1 * f.cy.view(-1, 1, 1)
    M = torch.stack([c0, c1, c2], -1)  # (B, K, 3 components, 3 coefficients)
    ox, oy, oz = o[..., 0:1], o[..., 1:2], o[..., 2:3]
    D = M[..., 2, :]
    Nx = ox * D - oz * M[..., 0, :]
    Ny = oy * D - oz * M[..., 1, :]
    is_rect = torch.tensor([c == RECT for c in f.codes], device=A.device).view(1, -1, 1)
    hx, hy = h[..., 0:1], h[..., 1:2]
    su, sv = uv_scale[:, 0].view(1, -1, 1), uv_scale[:, 1].view(1, -1, 1)
    hx_s = torch.where(hx > 0, hx, torch.ones_like(hx))
    hy_s = torch.where(hy > 0, hy, torch.ones_like(hy))
    U = Nx * torch.where(is_rect, su / (2 * hx_s), su)
    V = Ny * torch.where(is_rect, sv / (2 * hy_s), sv)
    u0 = torch.where(is_rect, 0.5 * su, torch.zeros_like(su)).expand_as(oz)
    v0 = torch.where(is_rect, 0.5 * sv, torch.zeros_like(sv)).expand_as(oz)
    return PlanarForms(D, Nx, Ny, U, V, u0, v0)


def planar_tables(f: Frame) -> Tables:
    """Per-(b, k) tables shared by the reference and the fast hard paths (see :class:`Tables`);
    the shading column / light columns are present when ``f.light`` is set."""
    B, K, H, W = f.B, f.K, f.H, f.W
    dtype, device = f.o.dtype, f.o.device
    planar = any(c in (PLANE, RECT) for c in f.codes)
    generic = any(c not in (PLANE, RECT) for c in f.codes)
    forms = _planar_forms(f)
    oz = f.o[..., 2:3]
    plan = None
    if planar:
        cols = [forms.U, forms.V, forms.D, -oz, forms.u0, forms.v0]
        if f.light is not None:
            amb, inten, l_local = f.light
            cols.append(planar_shade(oz, l_local[..., 2:3], amb.unsqueeze(-1), inten.unsqueeze(-1)))
        plan = torch.cat(cols, -1)
    gen = None
    if generic:
        f4 = torch.stack([f.fx, f.fy, f.cx, f.cy], -1).unsqueeze(1).expand(B, K, 4)
        cols = [f.A.reshape(B, K, 9), f.o, f.h, f.uv_scale.unsqueeze(0).expand(B, K, 2), f4]
        if f.light is not None:
            light = f.light
            cols += [light.direction, light.ambient.unsqueeze(-1), light.intensity.unsqueeze(-1)]
        gen = torch.cat(cols, -1)

    with torch.no_grad():
        w_scale = 1.0 / torch.where(oz.abs() > 0, oz.abs(), torch.ones_like(oz))
        D = forms.D
        Wf = torch.where(oz.abs() > 0, -D * torch.sign(oz) * w_scale, torch.zeros_like(D) - 1)
        hx = f.h[..., 0:1].clamp(min=1e-30)
        hy = f.h[..., 1:2].clamp(min=1e-30)
        test = PlanarTest(Wf, forms.Nx * w_scale / hx, forms.Ny * w_scale / hy)
        dxd = (torch.arange(W, dtype=dtype, device=device) + 0.5) - f.cx.detach().unsqueeze(1)
        dxd = dxd / f.fx.detach().unsqueeze(1)
        dyd = (torch.arange(H, dtype=dtype, device=device) + 0.5) - f.cy.detach().unsqueeze(1)
        dyd = dyd / f.fy.detach().unsqueeze(1)
        return Tables(plan, gen, test, f.A.detach(), f.o.detach(), f.h.detach(), dxd, dyd)
