"""The renderer: nearest analytic hit per pixel, textures, soft silhouettes, shading, AA.

Pipeline (hard edges, ``edge_softness = 0``):

1. Camera-frame ray directions with z = 1 (ray parameter = depth) are affine in the pixel
   coordinates; each primitive's local directions are ``A d_cam`` with ``A = R_k^T R_cam``.
2. Without autograd, in row chunks, intersect every primitive kind on the whole
   (B, K_kind, rows, W) grid and keep the nearest hit (masked min over K). Only the winner's
   index survives this pass: the selection is piecewise constant, so it needs no gradient.
3. With autograd, recompute the intersection for the winning primitive of each foreground
   pixel only ((B*H*W) samples, not (B*K*H*W)): depth, local hit point, (u, v), normal, and a
   gather-based bilinear texture sample. Gradients reach poses (through t and (u, v)),
   sizes, camera intrinsics/pose, textures, colours and the background.

Soft edges (``edge_softness = sigma > 0``): every primitive gets a coverage
``alpha = sigmoid(signed silhouette distance in pixels / sigma)`` and a colour at every pixel;
these are composited front to back in depth order. This path is (B, K, H, W)-sized with
autograd; it is chunked over rows with activation checkpointing when large.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from .camera import PinholeCamera
from .primitives import Primitive, intersect, silhouette_distance, surface_normal, surface_uv
from .textures import build_atlas, sample_texture

__all__ = ["render", "render_buffers", "Lighting", "RenderBuffers"]


@dataclass
class Lighting:
    """Ambient + one directional Lambert light.

    ``shade = ambient + intensity * max(0, n . l)``, with ``n`` the unit surface normal facing
    the camera (two-sided) and ``l`` the unit vector *towards* the light (world frame).

    Args:
        ambient: float or () tensor.
        direction: (3,) direction from the scene towards the light (need not be unit).
        intensity: float or () tensor.
    """

    ambient: float | torch.Tensor = 0.3
    direction: tuple | torch.Tensor = (0.3, -0.5, 1.0)
    intensity: float | torch.Tensor = 0.7


class RenderBuffers(NamedTuple):
    """image (B, 3, H, W) in [0, 1]; depth (B, 1, H, W) camera-z depth in metres (0 on the
    background); object_id (B, H, W) long, the primitive index, -1 on the background."""

    image: torch.Tensor
    depth: torch.Tensor
    object_id: torch.Tensor


def render(
    camera: PinholeCamera,
    primitives: list[Primitive],
    rotation: torch.Tensor,
    position: torch.Tensor,
    background=None,
    edge_softness: float = 0.0,
    supersample: int = 1,
    lighting: Lighting | None = None,
    mipmap: bool = False,
    max_chunk_elements: int = 1 << 23,
) -> torch.Tensor:
    """Render images (B, 3, H, W). Same arguments as :func:`render_buffers`."""
    return render_buffers(
        camera,
        primitives,
        rotation,
        position,
        background=background,
        edge_softness=edge_softness,
        supersample=supersample,
        lighting=lighting,
        mipmap=mipmap,
        max_chunk_elements=max_chunk_elements,
    ).image


def render_buffers(
    camera: PinholeCamera,
    primitives: list[Primitive],
    rotation: torch.Tensor,
    position: torch.Tensor,
    background=None,
    edge_softness: float = 0.0,
    supersample: int = 1,
    lighting: Lighting | None = None,
    mipmap: bool = False,
    max_chunk_elements: int = 1 << 23,
) -> RenderBuffers:
    """Render images, depth and object ids.

    Args:
        camera: a :class:`PinholeCamera` with batch size B or 1.
        primitives: K :class:`Primitive` objects.
        rotation: (B|1, K, 3, 3) world_from_body rotation of each primitive.
        position: (B|1, K, 3) world_from_body translation (m).
        background: colour (3,) or texture (3, Ht, Wt) mapped over the whole image (v up);
            default light grey 0.9.
        edge_softness: sigma in (output) pixels of the soft silhouettes; 0 = hard edges
            (exactly the hard render, and no (B, K, H, W) autograd graph).
        supersample: s, renders s x s samples per pixel and box-filters them. ``depth`` and
            ``object_id`` are taken from sample (s // 2, s // 2) of each pixel (its centre for
            odd s).
        lighting: optional :class:`Lighting` (Lambert shading); None = unlit texture colour.
        mipmap: trilinear mip-mapping with a per-pixel level from screen-space (u, v)
            differences (hard-edge path only), so that minified textures do not alias.
        max_chunk_elements: bound on B * K * rows * W per chunk of the per-primitive passes.

    Returns:
        :class:`RenderBuffers` (image, depth, object_id).
    """
    if len(primitives) == 0:
        raise ValueError("render: need at least one primitive")
    s = int(supersample)
    cam = camera.scaled(s) if s > 1 else camera
    img, depth, oid = _render(
        cam,
        primitives,
        rotation,
        position,
        background,
        float(edge_softness) * s,
        lighting,
        mipmap,
        max_chunk_elements,
    )
    if s > 1:
        img = F.avg_pool2d(img, s)
        depth = depth[:, :, s // 2 :: s, s // 2 :: s]
        oid = oid[:, s // 2 :: s, s // 2 :: s]
    return RenderBuffers(img, depth, oid)


# ---------------------------------------------------------------------------- internals
def _background(background, B, H, W, dtype, device) -> torch.Tensor:
    """(B|1, H*W, 3) background colours."""
    if background is None:
        background = torch.full((3,), 0.9, dtype=dtype, device=device)
    if not isinstance(background, torch.Tensor):
        background = torch.as_tensor(background, dtype=dtype, device=device)
    background = background.to(dtype=dtype, device=device)
    if background.dim() == 1:
        return background.view(1, 1, 3).expand(1, H * W, 3)
    u = (torch.arange(W, dtype=dtype, device=device) + 0.5) / W
    v = 1.0 - (torch.arange(H, dtype=dtype, device=device) + 0.5) / H
    uu, vv = torch.meshgrid(u, v, indexing="xy")  # (H, W)
    return sample_texture(background, uu, vv, wrap="clamp").reshape(1, H * W, 3)


def _render(cam, prims, rotation, position, background, sigma, lighting, mipmap, max_chunk):
    dtype, device = position.dtype, position.device
    K = len(prims)
    if rotation.shape[-3] != K or position.shape[-2] != K:
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

    xs = torch.arange(W, dtype=dtype, device=device) + 0.5
    ys = torch.arange(H, dtype=dtype, device=device) + 0.5
    dxp = (xs.unsqueeze(0) - cx.unsqueeze(1)) / fx.unsqueeze(1)  # (B, W)
    dyp = (ys.unsqueeze(0) - cy.unsqueeze(1)) / fy.unsqueeze(1)  # (B, H)

    codes = [p.code for p in prims]
    groups: dict[int, list[int]] = {}
    for k, c in enumerate(codes):
        groups.setdefault(c, []).append(k)

    # ---- pass 1: nearest hit, no autograd, row chunks
    rows = max(1, min(H, max_chunk // max(1, B * K * W)))
    best_t = torch.empty(B, H, W, dtype=dtype, device=device)
    best_k = torch.empty(B, H, W, dtype=torch.long, device=device)
    with torch.no_grad():
        Ad, od, hd, dxd, dyd = A.detach(), o.detach(), h.detach(), dxp.detach(), dyp.detach()
        for r0 in range(0, H, rows):
            r1 = min(H, r0 + rows)
            bt = torch.full((B, r1 - r0, W), float("inf"), dtype=dtype, device=device)
            bk = torch.full((B, r1 - r0, W), -1, dtype=torch.long, device=device)
            for code, ks in groups.items():
                d = _local_dirs(Ad[:, ks], dxd, dyd[:, r0:r1])  # (B, Kg, h, W, 3)
                t, hit = intersect(code, od[:, ks, None, None], d, hd[:, ks, None, None])
                t = torch.where(hit, t, torch.full_like(t, float("inf")))
                tmin, kmin = t.min(dim=1)
                kmin = torch.tensor(ks, device=device)[kmin]
                better = tmin < bt
                bt = torch.where(better, tmin, bt)
                bk = torch.where(better, kmin, bk)
            best_t[:, r0:r1] = bt
            best_k[:, r0:r1] = bk

    # ---- appearance: textures packed into one atlas (colours as 1x1 textures)
    atlas = build_atlas(
        [p.appearance(dtype, device) for p in prims], [p.wrap == "repeat" for p in prims], mipmap
    )
    uv_scale = torch.tensor(
        [list(map(float, p.uv_scale)) for p in prims], dtype=dtype, device=device
    )
    light = None
    if lighting is not None:
        ldir = torch.as_tensor(lighting.direction, dtype=dtype, device=device)
        ldir = ldir / torch.linalg.vector_norm(ldir)
        l_local = (Rt @ ldir.view(1, 1, 3, 1)).squeeze(-1)  # (B, K, 3)
        light = (lighting.ambient, lighting.intensity, l_local)
    bg = _background(background, B, H, W, dtype, device)

    if sigma > 0:
        img = _soft(
            A,
            o,
            h,
            dxp,
            dyp,
            fx,
            fy,
            groups,
            atlas,
            uv_scale,
            light,
            bg,
            sigma,
            B,
            K,
            H,
            W,
            max_chunk,
        )
    else:
        img = None
    img_hard, depth = _winner_pass(
        A, o, h, dxp, dyp, best_k, codes, atlas, uv_scale, light, bg, mipmap, B, K, H, W
    )
    if img is None:
        img = img_hard
    return (
        img.view(B, H, W, 3).permute(0, 3, 1, 2),
        depth.view(B, 1, H, W),
        best_k,
    )


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


def _shade(color, code, p, d, n_local_light, h, light):
    amb, inten, _ = light
    n = surface_normal(code, p, h)
    n = n / torch.linalg.vector_norm(n, dim=-1, keepdim=True).clamp(min=1e-12)
    facing = (n * d).sum(-1, keepdim=True)
    n = torch.where(facing > 0, -n, n)  # two-sided: the side seen by the camera
    lam = (n * n_local_light).sum(-1, keepdim=True).clamp(min=0)
    return color * (amb + inten * lam)


def _winner_pass(A, o, h, dxp, dyp, best_k, codes, atlas, uv_scale, light, bg, mipmap, B, K, H, W):
    """Differentiable recomputation for the winning primitive of each foreground pixel."""
    dtype, device = o.dtype, o.device
    P = H * W
    kflat = best_k.reshape(-1)
    code_tab = torch.tensor(codes, dtype=torch.long, device=device)
    code_pix = torch.where(kflat >= 0, code_tab[kflat.clamp(min=0)], -1)
    parts = [A.reshape(B * K, 9), o.reshape(B * K, 3), h.reshape(B * K, 3)]
    if light is not None:
        parts.append(light[2].reshape(B * K, 3))
    params = torch.cat(parts, 1)
    dx_flat = dxp.reshape(-1)
    dy_flat = dyp.reshape(-1)

    idx_all, k_all, uv_all, extra = [], [], [], []
    for code in sorted(set(codes)):
        idx = (code_pix == code).nonzero().squeeze(1)
        if idx.numel() == 0:
            continue
        b = idx // P
        pix = idx - b * P
        row = pix // W
        col = pix - row * W
        k = kflat[idx]
        g = params[b * K + k]  # (n, 15|18)
        dcx = dx_flat[b * W + col]
        dcy = dy_flat[b * H + row]
        Aw = g[:, :9].view(-1, 3, 3)
        d = Aw[:, :, 0] * dcx.unsqueeze(1) + Aw[:, :, 1] * dcy.unsqueeze(1) + Aw[:, :, 2]
        ow, hw = g[:, 9:12], g[:, 12:15]
        t, _ = intersect(code, ow, d, hw)
        p = ow + t.unsqueeze(1) * d
        u, v = surface_uv(code, p, hw)
        sc = uv_scale[k]
        idx_all.append(idx)
        k_all.append(k)
        uv_all.append(torch.stack([u * sc[:, 0], v * sc[:, 1]], 1))
        extra.append((code, p, d, hw, g[:, 15:18] if light is not None else None, t))
    depth = torch.zeros(B * P, dtype=dtype, device=device)
    img = bg.expand(B, P, 3).reshape(B * P, 3)
    if not idx_all:
        return img, depth
    idx = torch.cat(idx_all)
    k = torch.cat(k_all)
    uv = torch.cat(uv_all)
    level = _mip_level(uv.detach(), idx, k, best_k, atlas, B, H, W) if mipmap else None
    color = atlas.sample(k, uv[:, 0], uv[:, 1], level)
    if light is not None:
        shaded, n0 = [], 0
        for code, p, d, hw, ll, _ in extra:
            n1 = n0 + p.shape[0]
            shaded.append(_shade(color[n0:n1], code, p, d, ll, hw, light))
            n0 = n1
        color = torch.cat(shaded)
    img = img.index_copy(0, idx, color)
    depth = depth.index_copy(0, idx, torch.cat([e[5] for e in extra]))
    return img, depth


def _mip_level(uv, idx, k, best_k, atlas, B, H, W):
    """Per-sample mip level (detached float) from screen-space (u, v) differences in texels.

    Differences are taken to the neighbour on the same primitive; of the forward and backward
    neighbours the smaller difference is used, which ignores texture seams and face edges.
    """
    dtype = uv.dtype
    P = H * W
    uvi = torch.zeros(B * P, 2, dtype=dtype, device=uv.device)
    uvi[idx] = uv * torch.stack([atlas.width[k, 0], atlas.height[k, 0]], 1).to(dtype)
    uvi = uvi.view(B, H, W, 2)
    kid = best_k

    def deriv(dim):
        n = uvi.shape[dim]
        fwd = uvi.narrow(dim, 1, n - 1) - uvi.narrow(dim, 0, n - 1)
        same = kid.narrow(dim, 1, n - 1) == kid.narrow(dim, 0, n - 1)
        mag = torch.where(same, torch.linalg.vector_norm(fwd, dim=-1), float("inf"))
        pad_shape = list(mag.shape)
        pad_shape[dim] = 1
        inf = torch.full(pad_shape, float("inf"), dtype=dtype, device=uv.device)
        f = torch.cat([mag, inf], dim)  # forward difference of each pixel
        bwd = torch.cat([inf, mag], dim)  # backward difference
        m = torch.minimum(f, bwd)
        return torch.where(torch.isfinite(m), m, torch.zeros_like(m))

    rho = torch.maximum(deriv(2), deriv(1)).reshape(-1)[idx]
    return torch.log2(rho.clamp(min=1.0))


def _soft(
    A, o, h, dxp, dyp, fx, fy, groups, atlas, uv_scale, light, bg, sigma, B, K, H, W, max_chunk
):
    """Soft silhouettes, composited front to back; returns (B*H*W, 3)."""
    f_mean = (0.5 * (fx + fy)).unsqueeze(1)
    fx1, fy1 = fx.unsqueeze(1), fy.unsqueeze(1)
    bgv = bg.expand(B, H * W, 3).view(B, H, W, 3)

    def chunk(r0, r1, A, o, h, dxp, dyp, texels, uv_scale, bgc):
        atlas.texels = texels
        hh = r1 - r0
        alphas, depths, colors = [], [], []
        for code, ks in groups.items():
            d = _local_dirs(A[:, ks], dxp, dyp[:, r0:r1]).reshape(B, len(ks), hh * W, 3)
            sd, depth, pt = silhouette_distance(
                code, o[:, ks], d, h[:, ks], A[:, ks], fx1, fy1, f_mean
            )
            hg = h[:, ks].unsqueeze(2)
            u, v = surface_uv(code, pt, hg)
            kk = torch.tensor(ks, device=o.device)
            sc = uv_scale[kk].view(1, -1, 1, 2)
            slot = kk.view(1, -1, 1).expand(B, len(ks), hh * W).reshape(-1)
            col = atlas.sample(
                slot, (u * sc[..., 0]).reshape(-1), (v * sc[..., 1]).reshape(-1), None
            ).view(B, len(ks), hh * W, 3)
            if light is not None:
                ll = light[2][:, ks].unsqueeze(2)
                col = _shade(col, code, pt, d, ll, hg, light)
            alphas.append(torch.sigmoid(sd / sigma))
            depths.append(depth)
            colors.append(col)
        alpha = torch.cat(alphas, 1)  # (B, K, n)
        depth = torch.cat(depths, 1)
        color = torch.cat(colors, 1)
        order = depth.argsort(dim=1)
        alpha = alpha.gather(1, order)
        color = color.gather(1, order.unsqueeze(-1).expand_as(color))
        trans = torch.cumprod(1.0 - alpha, dim=1)
        before = torch.cat([torch.ones_like(trans[:, :1]), trans[:, :-1]], 1)
        w = (alpha * before).unsqueeze(-1)
        out = (w * color).sum(1) + trans[:, -1:].transpose(1, 2) * bgc.reshape(B, -1, 3)
        return out.view(B, hh, W, 3)

    rows = max(1, min(H, max_chunk // max(1, 16 * B * K * W)))
    texels = atlas.texels
    outs = []
    for r0 in range(0, H, rows):
        r1 = min(H, r0 + rows)
        args = (r0, r1, A, o, h, dxp, dyp, texels, uv_scale, bgv[:, r0:r1])
        if rows < H and torch.is_grad_enabled():
            outs.append(checkpoint(chunk, *args, use_reentrant=False))
        else:
            outs.append(chunk(*args))
    atlas.texels = texels
    return torch.cat(outs, 1).reshape(B * H * W, 3)
