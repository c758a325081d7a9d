"""Primitives: analytic ray intersection, texture coordinates and normals.

Everything here works in a primitive's *local* (body) frame on broadcastable tensors: ray
origins ``o`` (..., 3), directions ``d`` (..., 3) and half-size parameters ``h`` (..., 3). The
ray parameter ``t`` is whatever ``d`` is scaled in; the renderer uses camera-frame directions
with z = 1, so ``t`` is the camera depth (m).

Half-size parameter ``h`` per kind (from the scene schema's ``size``):

========== ========================== ==========================
kind       size (schema)              h
========== ========================== ==========================
box        full extents [x, y, z]     [x/2, y/2, z/2]
sphere     radius r                   [r, 0, 0]
cylinder   [r, length]                [r, length/2, 0]
capsule    [r, length] (cylinder part) [r, length/2, 0]
rectangle  [x, y] (normal +z)         [x/2, y/2, 0]
plane      [x, y] or None (infinite)  [x/2, y/2, 0] / unused
mesh       (none: the mesh's vertices) max |vertex| per axis (bounds only)
========== ========================== ==========================

Meshes (kind ``"mesh"``) are not intersected here: ``diffcam.mesh`` casts their rays
(``diffcam.renderer.mesh``).

All functions are branch-free (``torch.where`` on guarded values) so they can run on the whole
(B, K, pixels) grid without autograd and again, differentiably, on the winning samples only;
they never produce inf or NaN values or gradients (misses get a finite dummy ``t`` and
``hit = False``).
"""

from __future__ import annotations

import math

import torch

from ._safe import safe_atan2, safe_div, safe_sqrt, tiny

__all__ = [
    "Primitive",
    "KINDS",
    "intersect",
    "surface_uv",
    "surface_normal",
]

PLANE, RECT, BOX, SPHERE, CYLINDER, CAPSULE, MESH = range(7)
KINDS = {
    "plane": PLANE,
    "rectangle": RECT,
    "box": BOX,
    "sphere": SPHERE,
    "cylinder": CYLINDER,
    "capsule": CAPSULE,
    "mesh": MESH,
}
BIG = 1e30  # finite "no hit" depth / "far inside" distance; fits float32


class Primitive:
    """One shape with its appearance. The pose comes separately, at render time.

    Args:
        kind: "box" | "sphere" | "capsule" | "cylinder" | "plane" | "rectangle" | "mesh".
        size: shape size in metres following the scene schema (see the module docstring):
            a number or a tensor of shape (k,) or (B, k) (per-batch sizes; may require grad).
            ``None`` only for an infinite plane.
        texture: (3, Ht, Wt) tensor in [0, 1] (may require grad), or None.
        color: (3,) tensor/sequence in [0, 1] used when there is no texture (grey if neither).
        uv_scale: (su, sv) texture repeats: the (u, v) below are multiplied by these.
        wrap: texture addressing, "repeat" (default) or "clamp".
        mesh: for kind "mesh", a `diffcam.mesh.Mesh` in the body frame (m; its vertices may
            require grad); ``size`` is then not used (scale the mesh: ``mesh.scaled(s)``).
        smooth: for kind "mesh": shade with interpolated normals (the mesh's own, else
            area-weighted vertex normals) instead of flat faces.
        ray_casting: for kind "mesh", how rays find the triangle they meet first:
            "auto" (default: NVIDIA Warp's BVH kernel for float32 renders where warp-lang
            is installed, ``pip install 'diffcam[warp]'``, else the torch BVH), "bvh" (the
            torch BVH, built at the first render), "warp", or "brute_force" (every ray
            against every triangle: the reference). `diffcam.mesh.ray_caster` says which
            one a render takes.
        mesh_shape: for kind "mesh", the `diffcam.renderer.mesh.MeshShape` (BVH and edge
            table) of another primitive's mesh with the same faces, to reuse instead of
            building one at the first render (a loop that makes a primitive per step for
            vertices that change: the BVH is refitted to them at each render).

    Texture (u, v) layouts (u right, v up, as seen from outside; "front" is the view from body
    -y towards +y with body +z up, i.e. the default scene camera):

    * rectangle / finite plane: u = x / size_x + 1/2, v = y / size_y + 1/2: seen from +z with
      +y up, the texture appears upright and unmirrored. From behind (-z) it is mirrored.
    * infinite plane: u = x, v = y (one texture repeat per metre, times ``uv_scale``).
    * box: every face shows the whole texture, upright and unmirrored seen from outside: side
      faces (+-x, +-y) with body +z up (front face -y: u = x/sx + 1/2, v = z/sz + 1/2; +x: u
      along +y; +y: u along -x; -x: u along -y); top (+z) seen from above with +y up (u along
      +x), bottom (-z) seen from below with +y up (u along -x).
    * sphere: longitude/latitude. u = 1/2 + atan2(x, -y) / 2pi, so u = 1/2 faces the front
      (-y) and u grows to the right seen from the front; the seam (u = 0 = 1) is at the back
      (+y). v = 1/2 + latitude / pi (v = 1 at the +z pole).
    * cylinder: side wrapped like the sphere's longitude, u = 1/2 + atan2(x, -y) / 2pi,
      v = z / length + 1/2; caps like the box's top/bottom faces with extent 2r.
    * capsule: u as the cylinder; v = (z + length/2 + r) / (length + 2r), linear in body z
      over the whole capsule including both hemispheres.
    * mesh: the mesh's own (u, v) (per vertex or per corner), interpolated barycentrically
      over each triangle; a mesh without them shows the texture's (0, 0) corner, so a
      textured mesh needs (u, v).
    """

    def __init__(
        self,
        kind,
        size=None,
        texture=None,
        color=None,
        uv_scale=(1.0, 1.0),
        wrap="repeat",
        mesh=None,
        smooth=False,
        ray_casting="auto",
        mesh_shape=None,
    ):
        if kind not in KINDS:
            raise ValueError(f"Primitive: unknown kind {kind!r}; expected one of {sorted(KINDS)}")
        if wrap not in ("repeat", "clamp"):
            raise ValueError(f"Primitive: wrap must be 'repeat' or 'clamp', got {wrap!r}")
        if kind == "mesh":
            if mesh is None:
                raise ValueError("Primitive: kind 'mesh' needs a mesh (a diffcam.mesh.Mesh)")
            if texture is not None and mesh.uvs is None:
                raise ValueError(
                    "Primitive: a textured mesh needs texture coordinates (uvs); "
                    f"{mesh.source or 'the mesh'} has none"
                )
            if ray_casting not in ("auto", "bvh", "warp", "brute_force"):
                raise ValueError(
                    "Primitive: ray_casting must be 'auto', 'bvh', 'warp' or 'brute_force', "
                    f"got {ray_casting!r}"
                )
        elif mesh is not None:
            raise ValueError(f"Primitive: only kind 'mesh' takes a mesh, not {kind!r}")
        if size is None and kind not in ("plane", "mesh"):
            raise ValueError(f"Primitive: kind {kind!r} needs a size")
        if texture is not None and (texture.dim() != 3 or texture.shape[0] != 3):
            raise ValueError(
                f"Primitive: texture must have shape (3, Ht, Wt), got {tuple(texture.shape)}"
            )
        self.kind = kind
        self.code = PLANE if (kind == "plane" and size is None) else KINDS[kind]
        if kind == "plane" and size is not None:
            self.code = RECT
        self.size = size
        self.texture = texture
        self.color = color
        self.uv_scale = uv_scale
        self.wrap = wrap
        self.mesh = mesh
        self.smooth = bool(smooth)
        self.ray_casting = ray_casting
        if mesh_shape is not None and not torch.equal(mesh_shape.mesh.faces, mesh.faces):
            raise ValueError("Primitive: mesh_shape was built for a mesh with other faces")
        self._shape = mesh_shape

    @property
    def mesh_shape(self):
        """The mesh's BVH and edge table (`diffcam.renderer.mesh.MeshShape`), built at the
        first use and kept (no gradients: a refit follows moved vertices)."""
        if self._shape is None:
            from .renderer.mesh import mesh_shape

            self._shape = mesh_shape(self.mesh, self.smooth, ray_casting=self.ray_casting)
        return self._shape

    def half_size(self, dtype, device) -> torch.Tensor:
        """(1|B, 3) half-size parameter ``h`` (see the module docstring)."""
        if self.code == PLANE:
            return torch.zeros(1, 3, dtype=dtype, device=device)
        if self.code == MESH:
            e = self.mesh.vertices.detach().abs().amax(0)
            return e.to(dtype=dtype, device=device).reshape(1, 3)
        s = self.size
        if not isinstance(s, torch.Tensor):
            s = torch.as_tensor(s, dtype=dtype, device=device)
        s = s.to(dtype=dtype, device=device)
        if s.dim() == 0:
            s = s.reshape(1, 1)
        elif s.dim() == 1:
            s = s.unsqueeze(0)
        z = torch.zeros_like(s[:, :1])
        if self.code == BOX:
            return 0.5 * s[:, :3]
        if self.code == SPHERE:
            return torch.cat([s[:, :1], z, z], dim=1)
        if self.code in (CYLINDER, CAPSULE):
            return torch.cat([s[:, :1], 0.5 * s[:, 1:2], z], dim=1)
        return torch.cat([0.5 * s[:, :2], z], dim=1)  # rectangle / finite plane

    def appearance(self, dtype, device) -> torch.Tensor:
        """(3, Ht, Wt) texture, or the colour as a (3, 1, 1) texture."""
        if self.texture is not None:
            return self.texture.to(dtype=dtype, device=device)
        c = self.color if self.color is not None else (0.7, 0.7, 0.7)
        if not isinstance(c, torch.Tensor):
            c = torch.as_tensor(c, dtype=dtype, device=device)
        return c.to(dtype=dtype, device=device).reshape(3, 1, 1)

    def __repr__(self) -> str:
        tex = f"texture{tuple(self.texture.shape)}" if self.texture is not None else "color"
        if self.code == MESH:
            return f"Primitive('mesh', {self.mesh.num_faces} faces, {tex})"
        return f"Primitive({self.kind!r}, size={self.size}, {tex})"


# ---------------------------------------------------------------------------- intersection
def eps_t(x: torch.Tensor) -> float:
    return 1e-9 if x.dtype == torch.float64 else 1e-5


def dot(a, b):
    """Dot products over the last axis (of 3). Recorded for autograd, one product and a sum
    (two nodes); otherwise by components, which is faster on CPU than a sum over a last axis
    of 3 (and slower in the backward: each component's gradient is a buffer of its own)."""
    if torch.is_grad_enabled() and (a.requires_grad or b.requires_grad):
        return (a * b).sum(-1)
    ax, ay, az = a.unbind(-1)
    bx, by, bz = (ax, ay, az) if b is a else b.unbind(-1)
    return ax * bx + ay * by + az * bz


def _nearest_root(a, b, c):
    """Nearest positive root of a t^2 + 2 b t + c = 0 (a > 0) -> (t, valid)."""
    disc = b * b - a * c
    sq = safe_sqrt(disc)
    a_s = torch.where(a > tiny(a), a, 1.0)
    t0 = (-b - sq) / a_s
    t1 = (-b + sq) / a_s
    eps = eps_t(a)
    t = torch.where(t0 > eps, t0, t1)
    return t, (disc > 0) & (a > tiny(a)) & (t > eps)


def _both_roots(a, b, c):
    disc = b * b - a * c
    sq = safe_sqrt(disc)
    a_s = torch.where(a > tiny(a), a, 1.0)
    ok = (disc > 0) & (a > tiny(a))
    return (-b - sq) / a_s, (-b + sq) / a_s, ok


def _min_valid(cands, valids):
    """Smallest valid candidate -> (t, any_valid); gradients flow to the chosen candidate."""
    big = torch.full_like(cands[0], BIG)
    stacked = torch.stack([torch.where(v, c, big) for c, v in zip(cands, valids, strict=True)])
    t = stacked.amin(0)
    hit = t < 0.5 * BIG
    return torch.where(hit, t, 1.0), hit


def intersect(code: int, o: torch.Tensor, d: torch.Tensor, h: torch.Tensor):
    """Nearest intersection with t > 0 of rays ``o + t d`` with one primitive kind.

    Args:
        code: primitive kind code (``KINDS[name]``; a finite plane is ``RECT``).
        o, d: (..., 3) ray origin and direction in the primitive's local frame.
        h: (..., 3) half-size parameter (module docstring).

    Returns:
        t: (...) ray parameter of the hit (finite dummy 1 where missed).
        hit: (...) bool.
    """
    eps = eps_t(d)
    ox, oy, oz = o.unbind(-1)
    dx, dy, dz = d.unbind(-1)
    if code in (PLANE, RECT):
        t = safe_div(-oz, dz)
        hit = (t > eps) & (dz.abs() > tiny(dz))
        if code == RECT:
            hit = hit & ((ox + t * dx).abs() <= h[..., 0]) & ((oy + t * dy).abs() <= h[..., 1])
        return torch.where(hit, t, 1.0), hit
    if code == SPHERE:
        r = h[..., 0]
        t, hit = _nearest_root(dot(d, d), dot(o, d), dot(o, o) - r * r)
        return torch.where(hit, t, 1.0), hit
    if code == BOX:
        inv = safe_div(torch.ones_like(d), d)
        ta = (-h - o) * inv
        tb = (h - o) * inv
        tnear = torch.minimum(ta, tb).amax(-1)
        tfar = torch.maximum(ta, tb).amin(-1)
        hit = (tfar >= tnear) & (tfar > eps)
        t = torch.where(tnear > eps, tnear, tfar)
        return torch.where(hit, t, 1.0), hit
    if code in (CYLINDER, CAPSULE):
        r, hl = h[..., 0], h[..., 1]
        a = dx * dx + dy * dy
        b = ox * dx + oy * dy
        c = ox * ox + oy * oy - r * r
        s0, s1, ok = _both_roots(a, b, c)
        cands = [s0, s1]
        valids = [ok & (s0 > eps) & ((oz + s0 * dz).abs() <= hl), ok & (s1 > eps)]
        valids[1] = valids[1] & ((oz + s1 * dz).abs() <= hl)
        if code == CYLINDER:
            r2 = r * r
            for zc in (hl, -hl):
                tc = safe_div(zc - oz, dz)
                px, py = ox + tc * dx, oy + tc * dy
                cands.append(tc)
                valids.append((tc > eps) & (px * px + py * py <= r2) & (dz.abs() > tiny(dz)))
        else:
            aa = dot(d, d)
            for zc in (hl, -hl):
                oc = torch.stack([ox, oy, oz - zc], -1)
                tsph, vs = _nearest_root(aa, dot(oc, d), dot(oc, oc) - r * r)
                cands.append(tsph)
                valids.append(vs)
        return _min_valid(cands, valids)
    raise ValueError(f"unknown primitive code {code}")


# ---------------------------------------------------------------------------- (u, v), normals
def longitude(x, y):
    """Longitude coordinate in [0, 1]: 1/2 at body -y, growing towards +x (seen from -y)."""
    return 0.5 + safe_atan2(x, -y) / (2.0 * math.pi)


def _box_face(p, h):
    """Index (...,) long of the box face axis a point is on: argmax |p_i| / h_i (the first
    axis on ties). Written as comparisons: an argmax over a last axis of 3 is slow on CPU."""
    ratio = p.abs() / torch.where(h > 0, h, 1.0)
    rx, ry, rz = ratio.unbind(-1)
    axis = [torch.full_like(rx, i, dtype=torch.long) for i in range(3)]
    return torch.where((rx >= ry) & (rx >= rz), axis[0], torch.where(ry >= rz, axis[1], axis[2]))


def surface_uv(code: int, p: torch.Tensor, h: torch.Tensor):
    """Texture coordinates (u, v), each (...), of local points ``p`` (..., 3).

    Points off the surface are first projected onto it (clamped / radially), which the soft
    silhouette path uses for samples just outside the outline. See :class:`Primitive` for the
    layouts. ``uv_scale`` is applied by the caller.
    """
    x, y, z = p.unbind(-1)
    if code == PLANE:
        return x, y
    if code == RECT:
        hx, hy = h[..., 0], h[..., 1]
        u = torch.minimum(torch.maximum(x, -hx), hx) / (2 * hx) + 0.5
        v = torch.minimum(torch.maximum(y, -hy), hy) / (2 * hy) + 0.5
        return u, v
    if code == SPHERE:
        rho = safe_sqrt(x * x + y * y)
        return longitude(x, y), 0.5 + safe_atan2(z, rho) / math.pi
    if code == BOX:
        hx, hy, hz = h[..., 0], h[..., 1], h[..., 2]
        pc = torch.minimum(torch.maximum(p, -h), h)
        x, y, z = pc.unbind(-1)
        sx, sy, sz = x / (2 * hx), y / (2 * hy), z / (2 * hz)  # each in [-1/2, 1/2]
        face = _box_face(p, h)
        pos = p.gather(-1, face.unsqueeze(-1)).squeeze(-1) >= 0
        # u (right) and v (up) for each face seen from outside
        u_x = torch.where(pos, sy, -sy)
        u_y = torch.where(pos, -sx, sx)
        u_z = torch.where(pos, sx, -sx)
        u = torch.where(face == 0, u_x, torch.where(face == 1, u_y, u_z)) + 0.5
        v = torch.where(face == 2, sy, sz) + 0.5
        return u, v
    r, hl = h[..., 0], h[..., 1]
    u_side = longitude(x, y)
    if code == CYLINDER:
        zc = torch.minimum(torch.maximum(z, -hl), hl)
        rho = safe_sqrt(x * x + y * y)
        cap = z.abs() * r > rho * hl  # |z|/hl > rho/r, without dividing
        top = z >= 0
        u_cap = torch.where(top, x, -x) / (2 * r) + 0.5
        v_cap = y / (2 * r) + 0.5
        v_side = zc / (2 * hl) + 0.5
        return torch.where(cap, u_cap, u_side), torch.where(cap, v_cap, v_side)
    # capsule
    zc = torch.minimum(torch.maximum(z, -hl - r), hl + r)
    return u_side, (zc + hl + r) / (2 * hl + 2 * r)


def surface_normal(code: int, p: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """Outward unit normal (..., 3) at local surface points ``p`` (..., 3)."""
    x, y, z = p.unbind(-1)
    zero = torch.zeros_like(x)
    one = torch.ones_like(x)
    if code in (PLANE, RECT):
        return torch.stack([zero, zero, one], -1)
    if code == SPHERE:
        return p / torch.where(h[..., :1] > 0, h[..., :1], 1.0)
    if code == BOX:
        face = _box_face(p, h)
        sign = torch.where(p.gather(-1, face.unsqueeze(-1)) >= 0, 1.0, -1.0).to(p.dtype)
        return torch.nn.functional.one_hot(face, 3).to(p.dtype) * sign
    r, hl = h[..., 0:1], h[..., 1]
    r_s = torch.where(r > 0, r, 1.0)
    if code == CYLINDER:
        rho = safe_sqrt(x * x + y * y)
        cap = (z.abs() * r[..., 0] > rho * hl).unsqueeze(-1)
        n_cap = torch.stack([zero, zero, torch.where(z >= 0, one, -one)], -1)
        n_side = torch.stack([x, y, zero], -1) / r_s
        return torch.where(cap, n_cap, n_side)
    zc = torch.minimum(torch.maximum(z, -hl), hl)
    return torch.stack([x, y, z - zc], -1) / r_s
