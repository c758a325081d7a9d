"""Triangle meshes in the renderer: their hit test, hard hits and soft samples.

A mesh primitive carries a `MeshShape` built once (its BVH's topology and its edge table);
each render call makes a `MeshFrame` of it in the render's dtype (corners that carry the
vertices' gradients, the BVH refitted to them). Per image and list of pixels,
`mesh_samples`:

1. casts the pixels' rays without autograd: which triangle each ray meets first, if any.
   Float32 renders cast through NVIDIA Warp's BVH kernel where warp-lang is installed
   (`diffcam.mesh.warp_rays`), others through the torch BVH (`diffcam.mesh.cast_rays`);
   `diffcam.mesh.ray_caster` says which;
2. recomputes, with autograd, the depth and barycentric coordinates of that triangle only
   (`diffcam.mesh.triangles.ray_triangle`): gradients reach the pose, the camera and the
   vertices; (u, v) and smooth normals are the corners' values weighted by them;
3. for soft and antialiased edges, the signed silhouette distance (px): the distance from
   the pixel centre to the nearest *outer* silhouette edge's image (an edge between a
   triangle facing the camera and one facing away, whose image has no part of the mesh just
   outside it: a ray through a point half a pixel outside its midpoint misses the mesh),
   positive where the ray meets the mesh. Edges of the outline that the mesh hides from
   itself (a torus's inner rim in front of its far side) do not count, so pixels inside the
   outline are fully covered. Rays that miss take their depth, (u, v) and normal from the
   nearest point of that edge on its front triangle.

The nearest edge is chosen without autograd (in Warp's kernel where the rays are cast
through Warp, `diffcam.mesh.warp_rays.nearest_segments`), and its distance recomputed with
it: the gradient of the minimum is that edge's, exact almost everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from .._safe import safe_sqrt
from ..mesh.bvh import BVH, build_bvh, refit
from ..mesh.raycast import RayCast, cast_rays, cast_rays_brute_force
from ..mesh.record import Mesh
from ..mesh.topology import welded_faces
from ..mesh.triangles import ray_shear, ray_triangle
from ..mesh.warp_rays import WarpMesh, nearest_segments, ray_caster
from .shading import lambert

__all__ = ["MeshShape", "MeshFrame", "MeshSamples", "mesh_shape", "mesh_frame", "mesh_samples"]

BIG = 1e30  # the silhouette distance (px) where no outer edge is in view; fits float32
NUDGE = 0.5  # px outside an edge's midpoint where the outer-edge test casts its ray


@dataclass(frozen=True)
class MeshShape:
    """What a mesh primitive keeps between render calls (no gradients).

    Attributes:
        mesh: the `Mesh` in the body frame (m; vertices may require grad).
        smooth: shade with interpolated normals (the mesh's own, else area-weighted vertex
            normals) instead of the faces'.
        bvh: the BVH built from the mesh's vertices (refitted at each render call).
        edge_face: (E, 2) long the faces on either side of each edge (-1: none, an open
            edge); the edge runs from corner ``edge_slot[e, 0]`` to the next corner of face
            ``edge_face[e, 0]`` and the other way round on face ``edge_face[e, 1]``.
        edge_slot: (E, 2) long the edge's first corner on each face.
        half_extent: (3,) float the largest |coordinate| of the vertices per axis (m).
        ray_casting: the ray caster asked for (`diffcam.mesh.ray_caster`): "auto" (Warp
            for float32 renders where it is installed, else the torch BVH), "bvh", "warp" or
            "brute_force" (every ray against every triangle: the reference).
    """

    mesh: Mesh
    smooth: bool
    bvh: BVH
    edge_face: torch.Tensor
    edge_slot: torch.Tensor
    half_extent: torch.Tensor
    ray_casting: str = "auto"


def mesh_shape(
    mesh: Mesh, smooth: bool = False, leaf_size: int = 8, ray_casting: str = "auto"
) -> MeshShape:
    """The `MeshShape` of ``mesh`` (body frame): its BVH (leaves of at most ``leaf_size``
    triangles) and its edge table (edges matched across faces by vertex position, so meshes
    split at texture seams count as closed); ``ray_casting`` as in `MeshShape`."""
    ray_caster(ray_casting)  # an unknown caster, or Warp asked for without it: the error now
    corners = mesh.corners().detach()
    faces = welded_faces(mesh).cpu().numpy()
    F = faces.shape[0]
    a = faces.reshape(-1)
    b = faces[:, [1, 2, 0]].reshape(-1)
    key = np.minimum(a, b) * (faces.max() + 1) + np.maximum(a, b)
    order = np.argsort(key, kind="stable")
    ks = key[order]
    starts = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]])
    counts = np.diff(np.r_[starts, ks.size])
    rows = []
    for s, c in zip(starts, counts, strict=True):
        ids = order[s : s + c]
        if c == 2:  # a shared edge: the faces on both sides
            rows.append((ids[0] // 3, ids[0] % 3, ids[1] // 3, ids[1] % 3))
        else:  # open (or non-manifold: each of its faces on its own)
            rows += [(i // 3, i % 3, -1, 0) for i in ids]
    table = torch.tensor(rows, dtype=torch.long, device=corners.device).view(-1, 4)
    assert F > 0
    return MeshShape(
        mesh,
        bool(smooth),
        build_bvh(corners, leaf_size),
        table[:, [0, 2]].contiguous(),
        table[:, [1, 3]].contiguous(),
        mesh.vertices.detach().abs().amax(0),
        ray_casting,
    )


class MeshFrame(NamedTuple):
    """A mesh for one render call, in its dtype and on its device: corners (F, 3, 3) (m,
    autograd-tracked from the vertices); uvs (F, 3, 2) or None; normals (F, 3, 3) corner
    normals for smooth shading or None (flat); bvh refitted to the corners (the torch BVH's
    caster); edge_face and edge_slot (E, 2) long; caster: "warp", "bvh" or "brute_force"
    (`diffcam.mesh.ray_caster`), warp: the corners as a `WarpMesh` for "warp"; memo: this
    render call's no-grad
    results per image, which the soft samples' pass takes from the distance pass that chose
    their pixels: ``("edges", b)`` the image's `OuterEdges`, ``("faces", b)`` the candidate
    pixels (n,) long and the triangle each ray meets (n,) long (-1: none)."""

    corners: torch.Tensor
    uvs: torch.Tensor | None
    normals: torch.Tensor | None
    bvh: BVH
    edge_face: torch.Tensor
    edge_slot: torch.Tensor
    caster: str = "bvh"
    warp: WarpMesh | None = None
    memo: dict | None = None

    def cast(self, o: torch.Tensor, d: torch.Tensor) -> RayCast:
        """No-grad nearest hits of rays from o (3,) or (R, 3) along d (R, 3) (mesh frame)."""
        if self.warp is not None:
            return self.warp.cast(o, d)
        if self.caster == "brute_force":
            return cast_rays_brute_force(self.corners, o, d)
        return cast_rays(self.bvh, self.corners, o, d)


def mesh_frame(shape: MeshShape, dtype, device, mesh: Mesh | None = None) -> MeshFrame:
    """The `MeshFrame` of ``shape`` for a render in ``dtype`` on ``device``: of ``mesh``
    (the same faces, the vertices as they are now, with their gradients) when given, else of
    the mesh the shape was built from."""
    mesh = (shape.mesh if mesh is None else mesh).to(dtype=dtype, device=device)
    corners = mesh.corners()
    normals = None
    if shape.smooth:
        normals = mesh.corner_normals()
        if normals is None:
            normals = mesh.vertex_normals()[mesh.faces]
    caster = ray_caster(shape.ray_casting, dtype)
    bvh = shape.bvh
    bvh = BVH(
        bvh.lo.to(dtype=dtype, device=device),
        bvh.hi.to(dtype=dtype, device=device),
        bvh.children.to(device),
        bvh.leaf_faces.to(device),
        bvh.levels,
        bvh.leaf_size,
    )
    return MeshFrame(
        corners,
        mesh.corner_uvs(),
        normals,
        refit(bvh, corners) if caster == "bvh" else bvh,
        shape.edge_face.to(device),
        shape.edge_slot.to(device),
        caster,
        WarpMesh(corners) if caster == "warp" else None,
        {},
    )


class MeshSamples(NamedTuple):
    """Per sample (n,): sd the signed silhouette distance (px, > 0 where the ray meets the
    mesh; ``BIG`` / ``-BIG`` where no outer edge is in view); with ``surface``: depth (m,
    camera z), u, v texture coordinates (uv_scale applied), shade (None when unlit), all
    tracked; hit (n,) bool."""

    sd: torch.Tensor
    depth: torch.Tensor | None
    u: torch.Tensor | None
    v: torch.Tensor | None
    shade: torch.Tensor | None
    hit: torch.Tensor


class Camera1(NamedTuple):
    """One image's view of one mesh: A (3, 3) local_from_camera rotation; o (3,) camera
    centre in the mesh frame (m); fx, fy, cx, cy () intrinsics (px). (Hard hits give them
    per sample instead: (n, 3, 3), (n, 3), (n,).)"""

    A: torch.Tensor
    o: torch.Tensor
    fx: torch.Tensor
    fy: torch.Tensor
    cx: torch.Tensor
    cy: torch.Tensor


def camera_rays(cam: Camera1, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Local ray directions (n, 3) through continuous pixels (x, y) (n,) (camera-frame
    z = 1: the ray parameter is the depth). ``cam``'s values may also be per sample (a
    leading (n,) axis)."""
    sx = (x - cam.cx) / cam.fx
    sy = (y - cam.cy) / cam.fy
    A = cam.A
    return sx.unsqueeze(-1) * A[..., :, 0] + sy.unsqueeze(-1) * A[..., :, 1] + A[..., :, 2]


def _project(cam: Camera1, p: torch.Tensor):
    """Pixel coordinates x, y and depth z, each (...), of local points p (..., 3)."""
    pc = torch.einsum("...i,...ij->...j", p - cam.o, cam.A)  # camera frame: A^T (p - o)
    z = pc[..., 2]
    zs = torch.where(z > 0, z, torch.ones_like(z))
    return cam.fx * pc[..., 0] / zs + cam.cx, cam.fy * pc[..., 1] / zs + cam.cy, z


class OuterEdges(NamedTuple):
    """The outer silhouette edges of a mesh in one image (m of them): face (m,) long the
    front (camera-facing) triangle; i, j (m,) long its corners at the edge's ends."""

    face: torch.Tensor
    i: torch.Tensor
    j: torch.Tensor


def outer_edges(mf: MeshFrame, cam: Camera1) -> OuterEdges:
    """No-grad: the mesh's outer silhouette edges as seen by ``cam`` (module docstring)."""
    with torch.no_grad():
        c = mf.corners.detach()
        o = cam.o.detach()
        n = torch.linalg.cross(c[:, 1] - c[:, 0], c[:, 2] - c[:, 0])
        front = ((c[:, 0] - o) * n).sum(-1) < 0  # (F,)
        f0, f1 = mf.edge_face[:, 0], mf.edge_face[:, 1]
        s0, s1 = mf.edge_slot[:, 0], mf.edge_slot[:, 1]
        open_edge = f1 < 0
        fr0, fr1 = front[f0], front[f1.clamp(min=0)]
        sil = open_edge | (fr0 != fr1)
        # the front face and its corners at the edge's ends (the other face runs the edge
        # the other way round: its corners s1 + 1, s1)
        use0 = open_edge | fr0
        face = torch.where(use0, f0, f1)[sil]
        i = torch.where(use0, s0, (s1 + 1) % 3)[sil]
        j = torch.where(use0, (s0 + 1) % 3, s1)[sil]
        if face.numel() == 0:
            return OuterEdges(face, i, j)
        cam_d = Camera1(*(t.detach() for t in cam))
        pa, pb = c[face, i], c[face, j]
        pk = c[face, 3 - i - j]  # the front face's third corner
        xa, ya, za = _project(cam_d, pa)
        xb, yb, zb = _project(cam_d, pb)
        xk, yk, _ = _project(cam_d, pk)
        ex, ey = xb - xa, yb - ya
        length = torch.sqrt(ex * ex + ey * ey)
        nx, ny = ey, -ex  # a normal of the edge's image; outwards: away from the third corner
        away = nx * (xk - xa) + ny * (yk - ya) > 0
        nx, ny = torch.where(away, -nx, nx), torch.where(away, -ny, ny)
        scale = NUDGE / length.clamp(min=1e-12)
        mx = 0.5 * (xa + xb) + nx * scale
        my = 0.5 * (ya + yb) + ny * scale
        ok = (za > 1e-6) & (zb > 1e-6) & (length > 0)
        d = camera_rays(cam_d, mx, my)
        outside = mf.cast(o, d).face < 0
        keep = ok & outside
        return OuterEdges(face[keep], i[keep], j[keep])


def _segment_point(px, py, xa, ya, xb, yb):
    """The parameter s (clamped to [0, 1]) of the point of segments a-b nearest to points p,
    and the squared distance; broadcastable."""
    ex, ey = xb - xa, yb - ya
    ee = ex * ex + ey * ey
    s = ((px - xa) * ex + (py - ya) * ey) / torch.where(ee > 0, ee, torch.ones_like(ee))
    s = s.clamp(0.0, 1.0)
    dx, dy = px - xa - s * ex, py - ya - s * ey
    return s, dx * dx + dy * dy


def _nearest_edge(
    edges: OuterEdges, c, cam: Camera1, x, y, chunk: int = 1 << 22, warp: bool = False
):
    """No-grad: the index (n,) long of the outer edge nearest to each pixel (x, y) (n,);
    with ``warp``, searched in Warp's kernel (`diffcam.mesh.warp_rays.nearest_segments`)."""
    with torch.no_grad():
        cam_d = Camera1(*(t.detach() for t in cam))
        xa, ya, _ = _project(cam_d, c[edges.face, edges.i])
        xb, yb, _ = _project(cam_d, c[edges.face, edges.j])
        if warp:
            return nearest_segments(x, y, xa, ya, xb, yb)
        m = xa.numel()
        rows = max(1, chunk // m)
        out = []
        for s in range(0, x.numel(), rows):
            px, py = x[s : s + rows, None], y[s : s + rows, None]
            out.append(_segment_point(px, py, xa, ya, xb, yb)[1].argmin(1))
        return torch.cat(out) if out else x.new_zeros(0, dtype=torch.long)


def mesh_samples(
    mf: MeshFrame,
    cam: Camera1,
    x: torch.Tensor,
    y: torch.Tensor,
    surface: bool = True,
    silhouette: bool = True,
    light=None,
    uv_scale=(1.0, 1.0),
    face: torch.Tensor | None = None,
    image: int | None = None,
) -> MeshSamples:
    """The `MeshSamples` of one mesh in one image at continuous pixels x, y (n,) (pixel
    centres: j + 0.5, i + 0.5).

    Args:
        mf: the mesh's `MeshFrame`; cam: the image's `Camera1` (tracked).
        surface: compute depth, (u, v) and shading (else only sd and hit).
        silhouette: compute the silhouette distance (else sd is ``BIG`` where hit).
        light: None (unlit) or (direction (3,) unit, local frame; ambient (); intensity ()).
        uv_scale: (su, sv) texture repeats (numbers).
        face: (n,) long the hit triangle of each ray when already known (-1: none).
        image: the image's index when ``cam`` is one image's: its outer silhouette edges
            are then found once per render call (``mf.memo``).
    """
    c = mf.corners
    d = camera_rays(cam, x, y)  # (n, 3), tracked
    if face is None:
        face = mf.cast(cam.o, d).face
    hit = face >= 0
    big = torch.full_like(x, BIG)
    sd = torch.where(hit, big, -big)
    edges = None
    if silhouette:
        key = ("edges", image)
        if image is None or mf.memo is None or key not in mf.memo:
            edges = outer_edges(mf, cam)
            if image is not None and mf.memo is not None:
                mf.memo[key] = edges
        else:
            edges = mf.memo[key]
    has_edges = edges is not None and edges.face.numel() > 0
    if has_edges:
        e = _nearest_edge(edges, c.detach(), cam, x.detach(), y.detach(), warp=mf.warp is not None)
        ef, ei, ej = edges.face[e], edges.i[e], edges.j[e]
        xa, ya, za = _project(cam, c[ef, ei])
        xb, yb, zb = _project(cam, c[ef, ej])
        s, dist2 = _segment_point(x, y, xa, ya, xb, yb)
        dist = safe_sqrt(dist2)
        sd = torch.where(hit, dist, -dist)
    if not surface:
        return MeshSamples(sd, None, None, None, None, hit)
    # the hit triangle's depth and barycentric weights, with autograd
    f_hit = face.clamp(min=0)
    tri = c[f_hit]
    th = ray_triangle(cam.o, ray_shear(d), tri[:, 0], tri[:, 1], tri[:, 2], t_min=0.0)
    depth, bary, f_all = th.t, th.bary, f_hit
    if has_edges:  # misses: the nearest edge point on its front triangle
        miss = ~hit
        z_edge = za + s * (zb - za)
        depth = torch.where(hit, depth, z_edge)
        w_edge = torch.nn.functional.one_hot(ei, 3).to(x.dtype) * (1 - s).unsqueeze(
            -1
        ) + torch.nn.functional.one_hot(ej, 3).to(x.dtype) * s.unsqueeze(-1)
        bary = torch.where(miss.unsqueeze(-1), w_edge, bary)
        f_all = torch.where(hit, f_hit, ef)
    else:
        depth = torch.where(hit, depth, big)
    if mf.uvs is not None:
        uv = (bary.unsqueeze(-1) * mf.uvs[f_all]).sum(1)
        u, v = uv[:, 0] * uv_scale[0], uv[:, 1] * uv_scale[1]
    else:
        u = v = torch.zeros_like(depth)
    shade = None
    if light is not None:
        l_dir, ambient, intensity = light
        t3 = c[f_all]
        if mf.normals is not None:
            n = (bary.unsqueeze(-1) * mf.normals[f_all]).sum(1)
        else:
            n = torch.linalg.cross(t3[:, 1] - t3[:, 0], t3[:, 2] - t3[:, 0])
        length = safe_sqrt((n * n).sum(-1)).clamp(min=1e-12)
        cos = (n * l_dir).sum(-1) / length
        # two-sided: the normal facing the camera
        facing = (n.detach() * d.detach()).sum(-1) > 0
        cos = torch.where(facing, -cos, cos)
        shade = lambert(cos, ambient, intensity)
    return MeshSamples(sd, depth, u, v, shade, hit)


def frame_camera(f, b, k: int) -> Camera1:
    """The `Camera1` of primitive k in image(s) ``b`` (an int, or (n,) long per sample) of
    the render's `~diffcam.renderer.frame.Frame` ``f``."""
    return Camera1(f.A[b, k], f.o[b, k], f.fx[b], f.fy[b], f.cx[b], f.cy[b])


def frame_light(f, b, k: int):
    """The (direction, ambient, intensity) of primitive k in image(s) ``b``, or None."""
    if f.light is None:
        return None
    return f.light.direction[b, k], f.light.ambient[b, k], f.light.intensity[b, k]


def mesh_window_hits(f, k: int, b0: int, d: torch.Tensor, pix: torch.Tensor | None = None):
    """No-grad inverse depth and hit mask (nb, hk, wk) of mesh primitive k in images
    b0:b0+nb along local directions d (nb, hk, wk, 3) (the nearest-hit window test).
    ``pix`` (nb, hk * wk) long, the window's flat pixel indices (ascending), lets the hard
    hits' recomputation take each ray's triangle from here (``mf.memo``)."""
    mf = f.meshes[k]
    ws, hits = [], []
    for i in range(d.shape[0]):
        rc = mf.cast(f.o[b0 + i, k].detach(), d[i].reshape(-1, 3))
        if pix is not None and mf.memo is not None:
            mf.memo[("faces", b0 + i)] = (pix[i], rc.face)
        hit = rc.face >= 0
        ws.append(torch.where(hit, 1.0 / torch.where(hit, rc.t, 1.0), 0.0).view(d.shape[1:3]))
        hits.append(hit.view(d.shape[1:3]))
    return torch.stack(ws), torch.stack(hits)


def mesh_hard_hits(
    f, k: int, b: torch.Tensor, x: torch.Tensor, y: torch.Tensor, pix: torch.Tensor | None = None
):
    """Depth, u, v (uv_scale applied) and shade (None when unlit), each (n,) and tracked,
    of mesh primitive k at pixels x, y (n,) of images b (n,) long, all of which it wins;
    ``pix`` (n,) long their flat in-image indices, to take their triangles from the
    nearest-hit test (`mesh_window_hits`) instead of casting again."""
    face = None
    if pix is not None:
        face = torch.full_like(b, -1)
        for image in b.unique().tolist():
            sel = (b == image).nonzero().squeeze(1)
            known = _known_faces(f.meshes[k], image, pix[sel])
            if known is None:
                face = None
                break
            face[sel] = known
    s = mesh_samples(
        f.meshes[k],
        frame_camera(f, b, k),
        x,
        y,
        silhouette=False,
        light=frame_light(f, b, k),
        uv_scale=f.repeats[k],
        face=face,
    )
    return s.depth, s.u, s.v, s.shade


def mesh_spans(f, k: int, margin: float):
    """No-grad: per row, the columns lo..hi (B, H) long (inclusive; empty where lo > hi)
    that may hold a pixel of mesh primitive k with silhouette distance > -margin: the pixel
    window of its bounds (`nearest.pixel_windows`) grown by the margin, the whole image
    where the bounds are not wholly in front of the camera."""
    from ..primitives import MESH
    from .nearest import pixel_windows

    B, H, W = f.B, f.H, f.W
    with torch.no_grad():
        A, o, h = f.A[:, k].detach(), f.o[:, k].detach(), f.h[:, k].detach()
        y0, x0, hk, wk = pixel_windows(
            MESH, A, o, h, f.fx.detach(), f.fy.detach(), f.cx.detach(), f.cy.detach(), H, W
        )
        grow = int(np.ceil(margin)) + 1
        rows = torch.arange(H, device=A.device)
        inside = (rows >= y0.unsqueeze(1) - grow) & (rows < (y0 + hk).unsqueeze(1) + grow)
        lo = (x0 - grow).unsqueeze(1).expand(B, H)
        hi = torch.where(inside, (x0 + wk - 1 + grow).unsqueeze(1), -1)
        return lo.clamp(min=0), hi.clamp(max=W - 1)


def mesh_soft_distance(f, k: int, b: int, pix: torch.Tensor) -> torch.Tensor:
    """No-grad silhouette distance (n,) (px) of mesh primitive k in image b at flat pixels
    ``pix`` (n,) long."""
    with torch.no_grad():
        mf, cam = f.meshes[k], frame_camera(f, b, k)
        x, y = _centres(f, pix)
        face = mf.cast(cam.o, camera_rays(cam, x, y)).face
        if mf.memo is not None:  # for the samples' pass (`mesh_piece`)
            mf.memo[("faces", b)] = (pix, face)
        return mesh_samples(mf, cam, x, y, surface=False, face=face, image=b).sd


def _known_faces(mf: MeshFrame, b: int, pix: torch.Tensor) -> torch.Tensor | None:
    """The triangles (n,) long that image b's rays through pixels ``pix`` (n,) meet, from
    an earlier cast of this render call (the nearest-hit test's window or the soft edges'
    distance pass, ``mf.memo``) when it covered every one of them, else None."""
    known = None if mf.memo is None else mf.memo.get(("faces", b))
    if known is None:
        return None
    cand, face = known
    order = torch.argsort(cand)
    sorted_cand = cand[order]
    pos = torch.searchsorted(sorted_cand, pix).clamp(max=cand.numel() - 1)
    if not bool((sorted_cand[pos] == pix).all()):
        return None
    return face[order[pos]]


def _centres(f, pix):
    row = pix // f.W
    col = pix - row * f.W
    dtype = f.o.dtype
    return col.to(dtype) + 0.5, row.to(dtype) + 0.5


def mesh_piece(f, k: int, b0: int, b1: int, pix: torch.Tensor, edge):
    """Coverage, depth, u, v, shade (None when unlit) and hit, each (nb, n), of mesh
    primitive k at flat pixels ``pix`` (nb, n) of images b0:b1 (the soft samples'
    ``silhouettes._piece``)."""
    cols = []
    for i, b in enumerate(range(b0, b1)):
        x, y = _centres(f, pix[i])
        s = mesh_samples(
            f.meshes[k],
            frame_camera(f, b, k),
            x,
            y,
            light=frame_light(f, b, k),
            uv_scale=f.repeats[k],
            face=_known_faces(f.meshes[k], b, pix[i]),
            image=b,
        )
        cols.append((edge.coverage(s.sd), s.depth, s.u, s.v, s.shade, s.hit))
    alpha, depth, u, v, shade, hit = (
        None if c[0] is None else torch.stack(c) for c in zip(*cols, strict=True)
    )
    return alpha, depth, u, v, shade, hit
