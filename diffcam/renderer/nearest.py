"""No-grad nearest-hit selection: which primitive each pixel shows.

Each primitive is intersected (without autograd) with the rays of a pixel window that bounds
its projection (from its local bounding box; the whole image for an infinite plane or a box
straddling the camera plane), and the nearest hit per pixel is kept. Only the winner's index
survives this pass: the selection is piecewise constant, so it needs no gradient.
"""

from __future__ import annotations

import torch

from ..primitives import BOX, CAPSULE, CYLINDER, MESH, PLANE, RECT, SPHERE, intersect
from .frame import Frame, local_dirs
from .planar import Tables


def nearest_hits(tabs: Tables, f: Frame, w0, px_chunk: int):
    """No-grad nearest hit -> (B, H, W) primitive index or -1.

    Compares inverse depth (larger = nearer), starting from the layer's ``w0`` (B|1, H, W)
    when there is one (else 0: nothing). Each primitive is tested only inside a pixel window
    that contains its projection (``pixel_windows``): moving bodies usually cover a small
    part of the image. Planar primitives use their affine forms ``tabs.test`` (three
    broadcast adds per pixel), the others the analytic ``intersect`` on the detached
    ``tabs.A, o, h``; at most ``px_chunk`` pixels at a time.
    """
    B, K, H, W, codes = f.B, f.K, f.H, f.W, f.codes
    A, o, h, dx, dy = tabs.A, tabs.o, tabs.h, tabs.dx, tabs.dy
    dtype, device = dx.dtype, dx.device
    if w0 is None:
        best_w = torch.zeros(B, H, W, dtype=dtype, device=device)
    else:
        best_w = w0.new_empty(B, H, W).copy_(w0.expand(B, H, W))  # (not a slow clone)
    best_k = torch.full((B, H, W), -1, dtype=torch.long, device=device)
    # planar primitives first, then the others grouped by kind (the order ties resolve in)
    order = [k for k, c in enumerate(codes) if c in (PLANE, RECT)]
    order += sorted(set(range(K)) - set(order), key=lambda k: (codes.index(codes[k]), k))
    for k in order:
        code = codes[k]
        y0, x0, hk, wk = pixel_windows(
            code, A[:, k], o[:, k], h[:, k], f.fx, f.fy, f.cx, f.cy, H, W
        )
        if hk == 0 or wk == 0:
            continue  # off-screen or behind the camera in every image
        nb = max(1, min(B, px_chunk // (hk * wk)))
        for b0 in range(0, B, nb):
            b1 = min(B, b0 + nb)
            rows = y0[b0:b1, None] + torch.arange(hk, device=device)  # (nb, hk)
            cols = x0[b0:b1, None] + torch.arange(wk, device=device)  # (nb, wk)
            if code in (PLANE, RECT):
                w, hit = _planar_window_test(tabs, code, k, b0, b1, rows, cols)
            elif code == MESH:  # the mesh's BVH, image by image
                from .mesh import mesh_window_hits

                d = local_dirs(
                    A[b0:b1, k : k + 1], dx[b0:b1].gather(1, cols), dy[b0:b1].gather(1, rows)
                )
                window = (rows.unsqueeze(2) * W + cols.unsqueeze(1)).view(b1 - b0, -1)
                w, hit = mesh_window_hits(f, k, b0, d[:, 0], window)
            else:
                d = local_dirs(
                    A[b0:b1, k : k + 1], dx[b0:b1].gather(1, cols), dy[b0:b1].gather(1, rows)
                )
                t, hit = _intersect_culled(
                    code, o[b0:b1, k, None, None, None], d, h[b0:b1, k, None, None, None]
                )
                hit, t = hit[:, 0], t[:, 0]
                w = torch.where(hit, 1.0 / t, torch.zeros_like(t))
            # merge: gather / scatter along each image's flat pixels (a window lies inside it)
            idx = (rows.unsqueeze(2) * W + cols.unsqueeze(1)).view(b1 - b0, -1)
            img_w, img_k = best_w.view(B, -1)[b0:b1], best_k.view(B, -1)[b0:b1]
            cur_w, cur_k = img_w.gather(1, idx), img_k.gather(1, idx)
            w = w.reshape(b1 - b0, -1)
            better = hit.reshape(b1 - b0, -1) & (w > cur_w)
            img_w.scatter_(1, idx, torch.where(better, w, cur_w))
            img_k.scatter_(1, idx, torch.where(better, k, cur_k))
    return best_k


def _planar_window_test(tabs: Tables, code: int, k: int, b0: int, b1: int, rows, cols):
    """Inverse depth w and hit mask, (nb, hk, wk), of planar primitive k on the window
    rows (nb, hk) x cols (nb, wk) of images b0:b1."""
    dtype = tabs.dx.dtype
    x = (cols.to(dtype) + 0.5).unsqueeze(1)
    y = (rows.to(dtype) + 0.5).unsqueeze(2)

    def ev(F):
        f = F[b0:b1, k].view(-1, 3, 1, 1)
        return (f[:, 0] * x + f[:, 2]) + f[:, 1] * y

    w = ev(tabs.test.w)
    if code == RECT:
        return w, torch.maximum(ev(tabs.test.nx).abs_(), ev(tabs.test.ny).abs_()) < w
    return w, w > 0


def _intersect_culled(code, o, d, h):
    """``intersect`` without autograd, the same values; cylinders and capsules are tested
    exactly only on the rays that pass near their axis line (a cheap test: the others miss
    the infinite cylinder of radius r that contains them), which in a window around a thin
    pole is a small fraction. o, h (..., 3) broadcast against d (..., 3)."""
    if code not in (CYLINDER, CAPSULE):
        return intersect(code, o, d, h)
    ox, oy, r = o[..., 0], o[..., 1], h[..., 0]
    dx, dy = d[..., 0], d[..., 1]
    a = dx * dx + dy * dy
    b = ox * dx + oy * dy
    c = ox * ox + oy * oy - r * r
    # real roots of |xy(t)|^2 = r^2, with a generous margin: the exact test decides
    near = b * b - a * c >= -1e-3 * (b * b + (a * c).abs())
    q = near.nonzero(as_tuple=True)
    t = torch.ones_like(a)
    hit = torch.zeros_like(near)
    t[q], hit[q] = intersect(code, o.expand_as(d)[q], d[q], h.expand_as(d)[q])
    return t, hit


def pixel_windows(code, A, o, h, fx, fy, cx, cy, H, W):
    """Pixel windows that contain every pixel whose ray can hit one primitive, per image.

    The primitive lies in its local box of half extents ``e``; when all 8 corners are in
    front of the camera, the projection of the box is the convex hull of the projected
    corners (a perspective projection keeps convexity for z > 0), so their pixel bounds,
    plus a one-pixel margin for rounding, bound its silhouette. Otherwise (or for an infinite
    plane) the window is the whole image.

    Args: A (B, 3, 3) local_from_camera; o, h (B, 3) camera centre in the local frame and half
    sizes (m); fx, fy, cx, cy (B,) px.

    Returns:
        y0, x0: (B,) long first row and column of each image's window; hk, wk: the common
        window size (int; 0 when the primitive is off-screen in every image). Windows are
        moved inside the image where they would stick out.
    """
    B, device = A.shape[0], A.device
    if code == PLANE:
        zero = torch.zeros(B, dtype=torch.long, device=device)
        return zero, zero, H, W
    r, hl = h[:, :1], h[:, 1:2]
    if code in (BOX, RECT, MESH):  # a rectangle's h_z is 0; a mesh's h bounds its vertices
        e = h
    elif code == SPHERE:
        e = r.expand(B, 3)
    else:
        e = torch.cat([r, r, hl + r if code == CAPSULE else hl], 1)
    signs = torch.tensor(
        [[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)],
        dtype=A.dtype,
        device=device,
    )
    corners = signs * e.unsqueeze(1) - o.unsqueeze(1)  # (B, 8, 3), relative to the camera
    pc = corners @ A  # camera frame: A^T (p - o), as rows
    z = pc[..., 2]
    zs = torch.where(z > 0, z, torch.ones_like(z))
    px = fx.unsqueeze(1) * pc[..., 0] / zs + cx.unsqueeze(1)
    py = fy.unsqueeze(1) * pc[..., 1] / zs + cy.unsqueeze(1)
    ok = (z > 0).all(1) & torch.isfinite(px).all(1) & torch.isfinite(py).all(1)

    def bounds(p, n):
        # pixel j's ray passes through j + 0.5: j in [ceil(min - 0.5), floor(max - 0.5)]
        lo = torch.where(ok, torch.floor(p.amin(1) - 0.5) - 1, 0.0).clamp(0, n)
        hi = torch.where(ok, torch.ceil(p.amax(1) - 0.5) + 1, n - 1.0).clamp(-1, n - 1)
        size = int((hi - lo + 1).clamp(min=0).max())
        return torch.minimum(lo, torch.full_like(lo, n - size)).long(), size

    y0, hk = bounds(py, H)
    x0, wk = bounds(px, W)
    return y0, x0, hk, wk
