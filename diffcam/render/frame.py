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
from ..primitives import PLANE, RECT, Primitive


class Light(NamedTuple):
    """Lambert lighting in the primitives' local frames: ``ambient`` and ``intensity`` (float
    or () tensor) and ``direction`` (B, K, 3), the unit vector towards the light in each
    primitive's frame."""

    ambient: float | torch.Tensor
    intensity: float | torch.Tensor
    direction: torch.Tensor


class Frame(NamedTuple):
    """Geometry of one render call (B images, K primitives, H x W samples).

    A (B, K, 3, 3) local_from_camera rotations ``R_k^T R_cam``; o (B, K, 3) camera centre in
    each primitive's frame (m); h (B, K, 3) half-size parameters (m, see ``primitives``);
    fx, fy, cx, cy (B,) intrinsics (px); uv_scale (K, 2) texture repeats, and the same as K
    (su, sv) floats in ``repeats`` (read without a device sync); codes: K kind codes;
    light: :class:`Light` or None (unlit); dxp (B, W), dyp (B, H) camera ray slopes
    ``(j + 0.5 - cx) / fx`` and ``(i + 0.5 - cy) / fy``.
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
) -> Frame:
    """The :class:`Frame` of a render call. rotation (B|1, K, 3, 3) and position (B|1, K, 3)
    world_from_body; ``lighting`` a ``Lighting`` (world frame) or None."""
    dtype, device = position.dtype, position.device
    K = len(prims)
    if rotation.dim() != 4 or rotation.shape[-3] != K or position.shape[-2] != K:
        raise ValueError(
            f"render: {K} primitives but rotation {tuple(rotation.shape)} and position "
            f"{tuple(position.shape)} (expected (B, K, 3, 3) and (B, K, 3))"
        )
    B = max(cam.batch_size, rotation.shape[0], position.shape[0])
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
        ldir = torch.as_tensor(lighting.direction, dtype=dtype, device=device)
        ldir = ldir / torch.linalg.vector_norm(ldir)
        l_local = (Rt @ ldir.view(1, 1, 3, 1)).squeeze(-1)  # (B, K, 3)
        light = Light(lighting.ambient, lighting.intensity, l_local)
    xs = torch.arange(W, dtype=dtype, device=device) + 0.5
    ys = torch.arange(H, dtype=dtype, device=device) + 0.5
    dxp = (xs.unsqueeze(0) - cx.unsqueeze(1)) / fx.unsqueeze(1)  # (B, W)
    dyp = (ys.unsqueeze(0) - cy.unsqueeze(1)) / fy.unsqueeze(1)  # (B, H)
    codes = tuple(p.code for p in prims)
    return Frame(A, o, h, fx, fy, cx, cy, uv_scale, repeats, codes, light, B, K, H, W, dxp, dyp)


def _local_dirs(A, dx, dy):
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


def _pixel_centres(B: int, H: int, W: int, dtype, device):
    """Pixel-centre coordinates x = j + 0.5, y = i + 0.5 as (B, H * W) planes (px)."""
    x = torch.arange(W, dtype=dtype, device=device) + 0.5
    y = torch.arange(H, dtype=dtype, device=device) + 0.5
    return (
        x.view(1, 1, W).expand(B, H, W).reshape(B, H * W),
        y.view(1, H, 1).expand(B, H, W).reshape(B, H * W),
    )
