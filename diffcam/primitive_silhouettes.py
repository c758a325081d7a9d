"""Soft silhouettes, the reference: each primitive's signed pixel distance to its silhouette.

Works like `primitives` in a primitive's local frame on broadcastable tensors (o the camera
centre, d ray directions with camera-frame z = 1, h half sizes). Rectangles and boxes use
exact distances to the projected edge lines (the minimum over the silhouette edges: exact
inside, a slight under-estimate outside near corners); spheres and capsules the ray's closest
approach to the centre / axis segment, scaled by focal / depth; cylinders combine both caps'
ellipses with the side strip; infinite planes the horizon. The renderer's fast soft path
(`renderer.geometry`, `renderer.surface`, `renderer.reach`) computes the same quantities by components; the tests
check it against this module.
"""

from __future__ import annotations

import torch

from ._safe import safe_div, safe_sqrt, tiny
from .primitives import BIG, BOX, CAPSULE, CYLINDER, PLANE, RECT, SPHERE, dot, eps_t, intersect

__all__ = ["silhouette_distance", "silhouette_lines"]


def edge_lines(o, starts, dirs, centre_sign_ref, A, fx, fy):
    """The image lines of edge planes: oriented local normals n (B, K, E, 3), camera-frame
    normals n_cam (B, K, E, 3) and pixel-gradient norms (B, K, E), as `edge_planes_sd`
    uses them (``n . d / norm`` is the signed pixel distance to edge e's line)."""
    n = torch.linalg.cross(starts - o.unsqueeze(2), dirs.expand_as(starts), dim=-1)  # (B,K,E,3)
    s = torch.sign(dot(n, centre_sign_ref.unsqueeze(2) - o.unsqueeze(2)))
    n = n * torch.where(s == 0, 1.0, s).unsqueeze(-1)
    n_cam = (n.unsqueeze(-2) @ A.unsqueeze(2)).squeeze(-2)  # A^T n as a row product
    gx = n_cam[..., 0] / fx.unsqueeze(-1)
    gy = n_cam[..., 1] / fy.unsqueeze(-1)
    norm = safe_sqrt(gx * gx + gy * gy)
    norm = torch.where(norm > 0, norm, 1.0)
    return n, n_cam, norm


def edge_planes_sd(o, d, starts, dirs, centre_sign_ref, active, A, fx, fy):
    """Signed pixel distance to the projection of a convex cone bounded by edge planes.

    Each edge (a 3-D line through ``starts[e]`` along ``dirs[e]``, local frame) spans a plane
    with the camera centre ``o``; its image is a straight line, and ``n . d`` (local) equals
    ``n_cam . d_cam`` which is affine in pixel coordinates with gradient
    ``(n_cam_x / fx, n_cam_y / fy)``: dividing by that gradient's norm gives an exact distance
    in pixels. Edges are oriented so that ``centre_sign_ref`` (a point inside) is positive; the
    distance to the convex silhouette is the minimum over the active edges.

    Shapes: o (B, K, 3); d (B, K, P, 3); starts, dirs (B, K, E, 3); active (B, K, E) bool;
    A (B, K, 3, 3) local_from_camera rotation; fx, fy (B, 1).
    """
    n, _, norm = edge_lines(o, starts, dirs, centre_sign_ref, A, fx, fy)
    val = d @ n.transpose(-1, -2)  # (B, K, P, E): n_e . d, a matmul (not a (P, E, 3) product)
    sd = val / norm.unsqueeze(2)
    sd = torch.where(active.unsqueeze(2), sd, BIG)
    return sd.amin(-1)


def rect_edges(o, h):
    """A rectangle's 4 edges: starts, dirs (B, K, 4, 3) local, all active (B, K, 4)."""
    hx, hy = h[..., 0], h[..., 1]
    zero = torch.zeros_like(hx)
    corners = [(hx, hy), (-hx, hy), (-hx, -hy), (hx, -hy)]
    starts = torch.stack([torch.stack([cx, cy, zero], -1) for cx, cy in corners], 2)
    ex = torch.stack([torch.ones_like(hx), zero, zero], -1)
    ey = torch.stack([zero, torch.ones_like(hx), zero], -1)
    dirs = torch.stack([ex, ey, ex, ey], 2)
    active = torch.ones(starts.shape[:-1], dtype=torch.bool, device=o.device)
    return starts, dirs, active


def box_edges(o, h):
    """A box's 12 edges: starts, dirs (B, K, 12, 3) local, and whether each is on the
    silhouette seen from ``o`` (B, K, 12): for edge axis a, the other axes b, c at signs
    (sb, sc), active when exactly one of its two faces faces the camera."""
    starts, dirs, active = [], [], []
    front = [(o[..., i] > h[..., i], -o[..., i] > h[..., i]) for i in range(3)]
    eye = torch.eye(3, dtype=o.dtype, device=o.device)
    for a in range(3):
        b, c = (a + 1) % 3, (a + 2) % 3
        for sb in (1, -1):
            for sc in (1, -1):
                comps = [None, None, None]
                comps[a] = torch.zeros_like(h[..., a])
                comps[b] = sb * h[..., b]
                comps[c] = sc * h[..., c]
                starts.append(torch.stack(comps, -1))
                dirs.append(eye[a].expand_as(o))
                fb = front[b][0] if sb > 0 else front[b][1]
                fc = front[c][0] if sc > 0 else front[c][1]
                active.append(fb ^ fc)
    return torch.stack(starts, 2), torch.stack(dirs, 2), torch.stack(active, 2)


def silhouette_lines(code, o, h, A, fx, fy):
    """The image lines whose minimum is a box's or rectangle's silhouette distance: camera-
    frame normals n_cam (B, K, E, 3), pixel-gradient norms (B, K, E) and which are active
    (B, K, E) bool. At pixel (x, y) line e's signed distance (px) is
    ``(n_cam . ((x - cx) / fx, (y - cy) / fy, 1)) / norm``. Shapes: o, h (B, K, 3);
    A (B, K, 3, 3); fx, fy (B, 1)."""
    starts, dirs, active = (box_edges if code == BOX else rect_edges)(o, h)
    _, n_cam, norm = edge_lines(o, starts, dirs, torch.zeros_like(o), A, fx, fy)
    return n_cam, norm, active


def silhouette_distance(code, o, d, h, A, fx, fy, f_mean, distance_only=False, with_hit=False):
    """Signed distance (pixels, > 0 inside) to the primitive's silhouette, plus the depth used
    for front-to-back ordering and a local point whose (u, v) colours the sample.

    Args:
        code: kind code (`primitives.KINDS`).
        o: (B, K, 3) camera centre in each local frame.
        d: (B, K, P, 3) local ray directions (camera-frame z = 1, so t = depth).
        h: (B, K, 3) half sizes.
        A: (B, K, 3, 3) local_from_camera rotations; fx, fy, f_mean: (B, 1) focal lengths.

    Returns:
        sd (B, K, P) pixels; depth (B, K, P) (m); point (B, K, P, 3) local. With
        ``distance_only`` (the cheap form for finding where sd matters): sd, None, None.
        With ``with_hit``, a fourth value: whether the ray meets the surface (B, K, P) bool
        (there ``depth`` is the hit's depth).
    """
    oo, hh = o.unsqueeze(2), h.unsqueeze(2)
    # the ray hit only sets depth and point: a distance-only call skips it
    t_hit, hit = (None, None) if distance_only else intersect(code, oo, d, hh)
    if code in (PLANE, RECT):
        sd = _planar_distance(code, o, d, h, A, fx, fy)
        depth, point = (None, None) if distance_only else _planar_depth_point(oo, d)
    else:
        if code == BOX:
            starts, dirs, active = box_edges(o, h)
            sd = edge_planes_sd(o, d, starts, dirs, torch.zeros_like(o), active, A, fx, fy)
            closest = None
        elif code == SPHERE:
            sd, closest = _sphere_distance(oo, d, hh, f_mean)
        else:
            sd, closest = _round_distance(code, oo, d, hh, f_mean)
        if distance_only:
            return sd, None, None
        depth, point = _depth_point(oo, d, t_hit, hit, closest)
    return (sd, depth, point, hit) if with_hit else (sd, depth, point)


def _planar_distance(code, o, d, h, A, fx, fy):
    """(B, K, P) signed distance of a plane (to its horizon) or a rectangle (to its edges)."""
    if code == PLANE:
        n_cam = A[..., 2, :]  # local z axis in camera coordinates (row of A)
        gx, gy = n_cam[..., 0] / fx, n_cam[..., 1] / fy
        norm = safe_sqrt(gx * gx + gy * gy)
        norm = torch.where(norm > 0, norm, 1.0)
        side = -torch.sign(o[..., 2])
        return side.unsqueeze(-1) * d[..., 2] / norm.unsqueeze(-1)
    starts, dirs, active = rect_edges(o, h)
    return edge_planes_sd(o, d, starts, dirs, torch.zeros_like(o), active, A, fx, fy)


def _planar_depth_point(oo, d):
    """Depth and local point of the ray's crossing of the local z = 0 plane (far when it
    does not cross in front)."""
    t_pl = safe_div(-oo[..., 2], d[..., 2])
    front = t_pl > eps_t(d)
    depth = torch.where(front, t_pl, BIG)
    point = oo + torch.where(front, t_pl, 0.0).unsqueeze(-1) * d
    return depth, point


def _sphere_distance(oo, d, hh, f_mean):
    """A sphere's signed distance and the ray's closest approach to its centre: sd (B, K, P),
    (t, point, in front) of the closest approach."""
    r = hh[..., 0]
    tc = safe_div(-dot(oo, d), dot(d, d))
    q = oo + tc.unsqueeze(-1) * d
    front = tc > eps_t(d)
    tc_s = torch.where(front, tc, 1.0)
    sd = torch.where(front, (r - safe_sqrt(dot(q, q))) * f_mean.unsqueeze(-1) / tc_s, -BIG)
    return sd, (tc, q, front)


def _round_distance(code, oo, d, hh, f_mean):
    """A cylinder's or capsule's signed distance, from the closest approach between the ray
    and the axis (z) line or segment; with that approach's (t, point, in front)."""
    r, hl = hh[..., 0], hh[..., 1]
    fm = f_mean.unsqueeze(-1)
    eps = eps_t(d)
    a = dot(d, d)
    dx, dy, bz = d.unbind(-1)
    dd = dot(d, oo)
    ox, oy, oz = oo.unbind(-1)
    den = a - bz * bz  # a*c - b^2 with c = |e_z|^2 = 1
    z_line = safe_div(a * oz - bz * dd, den)
    z_seg = torch.minimum(torch.maximum(z_line, -hl), hl) if code == CAPSULE else z_line
    t_seg = safe_div(z_seg * bz - dd, a)
    q = oo + t_seg.unsqueeze(-1) * d
    axis_pt = torch.stack([torch.zeros_like(z_seg), torch.zeros_like(z_seg), z_seg], -1)
    dist = safe_sqrt(dot(q - axis_pt, q - axis_pt))
    front = t_seg > eps
    t_s = torch.where(front, t_seg, 1.0)
    sd = torch.where(front, (r - dist) * fm / t_s, -BIG)
    if code == CYLINDER:
        sd_between = torch.where(front, (hl - z_line.abs()) * fm / t_s, -BIG)
        sd = torch.minimum(sd, sd_between)
        for zc in (hl, -hl):
            tcap = safe_div(zc - oz, bz)
            ok = (tcap > eps) & (bz.abs() > tiny(bz))
            tcap_s = torch.where(ok, tcap, 1.0)
            px = ox + tcap_s * dx
            py = oy + tcap_s * dy
            sd_cap = torch.where(ok, (r - safe_sqrt(px * px + py * py)) * fm / tcap_s, -BIG)
            sd = torch.maximum(sd, sd_cap)
    return sd, (t_seg, q, front)


def _depth_point(oo, d, t_hit, hit, closest):
    """Depth and local point of a sample: the hit where the ray meets the surface, else the
    ray's closest approach (``closest`` = (t, point, in front); None for a box: the closest
    approach to its centre)."""
    if closest is None:
        tc = safe_div(-dot(oo, d), dot(d, d))
        front = tc > eps_t(d)
        depth = torch.where(hit, t_hit, torch.where(front, tc, BIG))
        point = oo + torch.where(hit, t_hit, tc.clamp(min=0)).unsqueeze(-1) * d
        return depth, point
    t, q, front = closest
    depth = torch.where(hit, t_hit, torch.where(front, t, BIG))
    point = torch.where(hit.unsqueeze(-1), oo + t_hit.unsqueeze(-1) * d, q)
    return depth, point
