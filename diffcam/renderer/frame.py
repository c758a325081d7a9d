"""The per-call geometry record: every primitive's pose in its local frame, the camera
intrinsics and the camera ray slopes, computed once per render call and read by every stage.

Camera-frame ray directions have z = 1 (the ray parameter is the camera depth), so they are
affine in the pixel coordinates: pixel (row i, column j) looks along ``(dxp[j], dyp[i], 1)``,
and primitive k sees it along ``A_k (dxp[j], dyp[i], 1)`` with ``A_k = R_k^T R_cam``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from ..camera import PinholeCamera
from ..primitives import MESH, PLANE, RECT, Primitive


class Light(NamedTuple):
    """Lambert lighting in the primitives' local frames: ``ambient`` and ``intensity``
    (B, K) per image and primitive, and ``direction`` (B, K, 3), the unit vector towards the
    light in each primitive's frame."""

    ambient: torch.Tensor
    intensity: torch.Tensor
    direction: torch.Tensor


class Frame(NamedTuple):
    """Geometry of one render call (B images, K primitives, H x W samples).

    A (B, K, 3, 3) local_from_camera rotations ``R_k^T R_cam``; o (B, K, 3) camera centre in
    each primitive's frame (m); h (B, K, 3) half-size parameters (m, see ``primitives``);
    fx, fy, cx, cy (B,) intrinsics (px); uv_scale (K, 2) texture repeats, and the same as K
    (su, sv) floats in ``repeats`` (read without a device sync); codes: K kind codes;
    light: :class:`Light` or None (unlit); dxp (B, W), dyp (B, H) camera ray slopes
    ``(j + 0.5 - cx) / fx`` and ``(i + 0.5 - cy) / fy``; meshes: K entries, a mesh
    primitive's `~diffcam.renderer.mesh.MeshFrame` (None for the other kinds).
    """

    A: torch.Tensor
    o: torch.Tensor
    h: torch.Tensor
    fx: torch.Tensor
    fy: torch.Tensor
    cx: torch.Tensor
    cy: torch.Tensor
    uv_scale: torch.Tensor
    repeats: tuple
    codes: tuple
    light: Light | None
    B: int
    K: int
    H: int
    W: int
    dxp: torch.Tensor
    dyp: torch.Tensor
    meshes: tuple = ()

    @property
    def planar_only(self) -> bool:
        """Whether every primitive is a rectangle or a plane."""
        return all(c in (PLANE, RECT) for c in self.codes)


class TexMeta(NamedTuple):
    """Level-0 texture slot data of a :class:`~diffcam.textures.TextureAtlas`, per primitive
    (K,): first texel ``offset``, ``width``, ``height`` (long) and ``repeat`` (bool)."""

    offset: torch.Tensor
    width: torch.Tensor
    height: torch.Tensor
    repeat: torch.Tensor

    @classmethod
    def level0(cls, atlas) -> TexMeta:
        return cls(atlas.offset[:, 0], atlas.width[:, 0], atlas.height[:, 0], atlas.repeat)


def make_frame(
    cam: PinholeCamera,
    prims: list[Primitive],
    rotation: torch.Tensor,
    position: torch.Tensor,
    lighting,
    color_transform=None,
) -> Frame:
    """The :class:`Frame` of a render call. rotation (B|1, K, 3, 3) and position (B|1, K, 3)
    world_from_body; ``lighting`` a ``Lighting`` (world frame; per image when its values
    have a batch axis) or None; ``color_transform`` (B|1, K, 3, 4) or None only counts
    towards the batch size."""
    dtype, device = position.dtype, position.device
    K = len(prims)
    if rotation.dim() != 4 or rotation.shape[-3] != K or position.shape[-2] != K:
        raise ValueError(
            f"render: {K} primitives but rotation {tuple(rotation.shape)} and position "
            f"{tuple(position.shape)} (expected (B, K, 3, 3) and (B, K, 3))"
        )
    light_batch = 1 if lighting is None else lighting_batch(lighting)
    transform_batch = color_transform.shape[0] if isinstance(color_transform, torch.Tensor) else 1
    B = max(cam.batch_size, rotation.shape[0], position.shape[0], light_batch, transform_batch)
    H, W = cam.height, cam.width
    R = rotation.expand(B, K, 3, 3)
    pos = position.expand(B, K, 3)
    Rc = cam.rotation.to(dtype).expand(B, 3, 3)
    tc = cam.translation.to(dtype).expand(B, 3)
    fx, fy, cx, cy = (v.to(dtype).expand(B) for v in (cam.fx, cam.fy, cam.cx, cam.cy))

    Rt = R.transpose(-1, -2)
    A = Rt @ Rc.unsqueeze(1)  # (B, K, 3, 3) local_from_camera rotation
    o = (Rt @ (tc.unsqueeze(1) - pos).unsqueeze(-1)).squeeze(-1)  # (B, K, 3) camera centre, local
    h = torch.cat([p.half_size(dtype, device).expand(B, 3).unsqueeze(1) for p in prims], 1)
    repeats = tuple((float(p.uv_scale[0]), float(p.uv_scale[1])) for p in prims)
    uv_scale = torch.tensor(repeats, dtype=dtype, device=device)
    light = None
    if lighting is not None:
        ldir = torch.as_tensor(lighting.direction, dtype=dtype, device=device).reshape(-1, 3)
        ldir = ldir / torch.linalg.vector_norm(ldir, dim=-1, keepdim=True)
        l_local = (Rt @ ldir.view(-1, 1, 3, 1)).squeeze(-1)  # (B, K, 3)
        ambient, intensity = (
            torch.as_tensor(x, dtype=dtype, device=device).reshape(-1, 1).expand(B, K)
            for x in (lighting.ambient, lighting.intensity)
        )
        light = Light(ambient, intensity, l_local)
    xs = torch.arange(W, dtype=dtype, device=device) + 0.5
    ys = torch.arange(H, dtype=dtype, device=device) + 0.5
    dxp = (xs.unsqueeze(0) - cx.unsqueeze(1)) / fx.unsqueeze(1)  # (B, W)
    dyp = (ys.unsqueeze(0) - cy.unsqueeze(1)) / fy.unsqueeze(1)  # (B, H)
    codes = tuple(p.code for p in prims)
    meshes = ()
    if MESH in codes:
        from .mesh import mesh_frame

        meshes = tuple(
            mesh_frame(p.mesh_shape, dtype, device, p.mesh) if p.code == MESH else None
            for p in prims
        )
    return Frame(
        A, o, h, fx, fy, cx, cy, uv_scale, repeats, codes, light, B, K, H, W, dxp, dyp, meshes
    )


def lighting_batch(lighting) -> int:
    """The number of images a ``Lighting`` is given for: 1 for one light, else the length
    of its per-image values (ambient and intensity (B,), direction (B, 3)); a ValueError
    names the field whose shape does not fit."""
    sizes = {}
    for name, per_image_dims in (("ambient", 1), ("direction", 2), ("intensity", 1)):
        value = getattr(lighting, name)
        shape = tuple(value.shape) if isinstance(value, torch.Tensor) else ()
        if name == "direction":
            shape = tuple(torch.as_tensor(value).shape) if not shape else shape
            ok = shape == (3,) or (len(shape) == 2 and shape[1] == 3)
        else:
            ok = len(shape) <= 1
        if not ok:
            expected = "(3,) or (B, 3)" if name == "direction" else "a number, () or (B,)"
            raise ValueError(f"render: Lighting.{name} must be {expected}, got shape {shape}")
        if len(shape) == per_image_dims and shape[0] != 1:
            sizes[name] = shape[0]
    if len(set(sizes.values())) > 1:
        raise ValueError(f"render: Lighting's per-image values disagree on the batch: {sizes}")
    return next(iter(sizes.values()), 1)


def local_dirs(A, dx, dy):
    """Local directions (B, Kg, h, W, 3) from A (B, Kg, 3, 3), dx (B, W), dy (B, h).

    Built component-major (each component a contiguous (B, Kg, h, W) block, one broadcast
    multiply-add each) and returned as a last-dim view, so the per-component arithmetic in
    ``intersect`` runs on contiguous memory.
    """
    a = A.unsqueeze(-1).unsqueeze(-1)  # (B, Kg, 3, 3, 1, 1)
    x = dx[:, None, None, :]  # (B, 1, 1, W)
    y = dy[:, None, :, None]  # (B, 1, h, 1)
    comps = [a[:, :, i, 0] * x + (a[:, :, i, 1] * y + a[:, :, i, 2]) for i in range(3)]
    return torch.stack(comps, 0).movedim(0, -1)


def pixel_centres(B: int, H: int, W: int, dtype, device):
    """Pixel-centre coordinates x = j + 0.5, y = i + 0.5 as (B, H * W) planes (px)."""
    x = torch.arange(W, dtype=dtype, device=device) + 0.5
    y = torch.arange(H, dtype=dtype, device=device) + 0.5
    return (
        x.view(1, 1, W).expand(B, H, W).reshape(B, H * W),
        y.view(1, H, 1).expand(B, H, W).reshape(B, H * W),
    )
