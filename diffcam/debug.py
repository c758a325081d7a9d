"""Debug views: see several batch elements at once, depth and object-id maps, and what a
gradient "looks at".

All functions take and return image tensors (..., 3, H, W) with values in [0, 1] (row 0 at the
top), so their outputs go straight into `diffcam.write_video` or an image viewer::

    out = scene.render_buffers(state)
    views = [out.image, colorize_depth(out.depth), colorize_ids(out.object_id)]
    frame = tile(torch.cat(views), ncols=len(views))
    heat = gradient_heatmap(lambda img: ((img - target) ** 2).sum(), out.image)
    marked = draw_points(out.image, scene.project_bodies(state))

Nothing here is differentiable on purpose: these are for looking, computed without grad.
The render in the example is the default one, antialiased edges (``edge_softness=0`` for the
hard render): its ``object_id`` and ``depth`` are the hard winner's either way, and a
`gradient_heatmap` of a loss through it shows what the pose gradient sees, silhouettes
included.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

__all__ = [
    "tile",
    "colorize",
    "colorize_depth",
    "colorize_ids",
    "gradient_heatmap",
    "draw_points",
    "id_palette",
]


# --------------------------------------------------------------------------- tiling
def _best_ncols(n: int, h: int, w: int, aspect: float = 16 / 9) -> int:
    best, best_err = 1, float("inf")
    for c in range(1, n + 1):
        r = math.ceil(n / c)
        err = abs(math.log((c * w) / (r * h)) - math.log(aspect))
        if err < best_err - 1e-9:
            best, best_err = c, err
    return best


@torch.no_grad()
def tile(images: torch.Tensor, ncols: int | None = None, pad: int = 2, pad_value: float = 1.0):
    """Lay a batch of images out on a grid.

    Args:
        images: (B, C, H, W), or (T, B, C, H, W) for a video of B tiled streams.
        ncols: columns; default: the count that makes the grid closest to 16:9.
        pad: pixels between tiles (and none around the border).
        pad_value: colour of the padding (and of empty cells).

    Returns:
        (C, H', W') for a batch, or (T, C, H', W') for a video.
    """
    if images.dim() == 5:
        return torch.stack([tile(f, ncols, pad, pad_value) for f in images])
    if images.dim() != 4:
        raise ValueError(f"tile: expected (B, C, H, W) or (T, B, C, H, W), got {images.shape}")
    b, c, h, w = images.shape
    ncols = _best_ncols(b, h, w) if ncols is None else max(1, min(int(ncols), b))
    nrows = math.ceil(b / ncols)
    out = images.new_full((c, nrows * h + (nrows - 1) * pad, ncols * w + (ncols - 1) * pad),
                          pad_value)  # fmt: skip
    for k in range(b):
        r, q = divmod(k, ncols)
        y, x = r * (h + pad), q * (w + pad)
        out[:, y : y + h, x : x + w] = images[k].detach()
    return out


# --------------------------------------------------------------------------- colour maps
# Turbo colour map (Mikhail, Google 2019), polynomial approximation by the same author.
_TURBO_R = (0.13572138, 4.61539260, -42.66032258, 132.13108234, -152.94239396, 59.28637943)
_TURBO_G = (0.09140261, 2.19418839, 4.84296658, -14.18503333, 4.27729857, 2.82956604)
_TURBO_B = (0.10667330, 12.64194608, -60.58204836, 110.36276771, -89.90310912, 27.34824973)


def colorize(values: torch.Tensor, cmap: str = "turbo") -> torch.Tensor:
    """Map values in [0, 1] of shape (...,) to colours (..., 3) ("turbo", "heat" or "gray")."""
    x = values.clamp(0.0, 1.0)
    if cmap == "gray":
        return x.unsqueeze(-1).expand(*x.shape, 3)
    if cmap == "heat":  # black -> red -> yellow -> white
        r = (3 * x).clamp(0, 1)
        g = (3 * x - 1).clamp(0, 1)
        b = (3 * x - 2).clamp(0, 1)
        return torch.stack([r, g, b], dim=-1)
    if cmap != "turbo":
        raise ValueError(f"colorize: unknown colour map {cmap!r} (turbo, heat, gray)")
    chans = []
    for coeffs in (_TURBO_R, _TURBO_G, _TURBO_B):
        acc = torch.zeros_like(x)
        for c in reversed(coeffs):
            acc = acc * x + c
        chans.append(acc.clamp(0.0, 1.0))
    return torch.stack(chans, dim=-1)


def _channels_first(rgb_last: torch.Tensor) -> torch.Tensor:
    return rgb_last.movedim(-1, -3).contiguous()


@torch.no_grad()
def colorize_depth(
    depth: torch.Tensor,
    near: float | None = None,
    far: float | None = None,
    background: Sequence[float] = (0.0, 0.0, 0.0),
    cmap: str = "turbo",
) -> torch.Tensor:
    """Depth map -> colours: near is warm (red), far is cold (blue), no hit is ``background``.

    Args:
        depth: (B, 1, H, W) or (B, H, W) depths (m). Pixels that hit nothing are recognised
            as non-finite, <= 0 or >= 1e20 values.
        near, far: the depth range mapped onto the colour map; default: the 1st and 99th
            percentiles of each image's valid depths.

    Returns:
        (B, 3, H, W) in [0, 1].
    """
    d = depth.detach()
    if d.dim() == 4:
        if d.shape[1] != 1:
            raise ValueError(f"colorize_depth: expected (B, 1, H, W), got {tuple(d.shape)}")
        d = d[:, 0]
    if d.dim() == 2:
        d = d.unsqueeze(0)
    d = d.to(torch.float32) if not d.is_floating_point() else d
    valid = torch.isfinite(d) & (d > 0) & (d < 1e20)
    out = torch.empty(*d.shape, 3, dtype=d.dtype, device=d.device)
    bg = torch.as_tensor(background, dtype=d.dtype, device=d.device)
    for k in range(d.shape[0]):
        v = d[k][valid[k]]
        if v.numel() == 0:
            out[k] = bg
            continue
        lo = float(near) if near is not None else float(torch.quantile(v.float(), 0.01))
        hi = float(far) if far is not None else float(torch.quantile(v.float(), 0.99))
        if hi <= lo:
            hi = lo + 1e-6
        # near -> 1 (red), far -> 0.1 (blue; turbo's darkest end is kept for "no hit")
        x = 1.0 - 0.9 * ((d[k] - lo) / (hi - lo)).clamp(0.0, 1.0)
        col = colorize(torch.where(valid[k], x, torch.zeros_like(x)), cmap)
        out[k] = torch.where(valid[k].unsqueeze(-1), col, bg)
    return _channels_first(out)


def id_palette(n: int, device=None, dtype=torch.float32) -> torch.Tensor:
    """(n, 3) distinct, saturated colours (golden-ratio hues, alternating brightness)."""
    k = torch.arange(n, dtype=torch.float64)
    hue = (k * 0.618033988749895 + 0.05) % 1.0
    sat = 0.75 - 0.15 * ((k // 7) % 2)
    val = 0.95 - 0.25 * (k % 2)
    # hsv -> rgb
    h6 = hue * 6.0
    i = torch.floor(h6)
    f = h6 - i
    p, q, t = val * (1 - sat), val * (1 - sat * f), val * (1 - sat * (1 - f))
    i = i.long() % 6
    table = torch.stack(
        [
            torch.stack([val, t, p], -1),
            torch.stack([q, val, p], -1),
            torch.stack([p, val, t], -1),
            torch.stack([p, q, val], -1),
            torch.stack([t, p, val], -1),
            torch.stack([val, p, q], -1),
        ]
    )  # (6, n, 3)
    rgb = table[i, torch.arange(n)]
    return rgb.to(device=device, dtype=dtype)


@torch.no_grad()
def colorize_ids(
    ids: torch.Tensor,
    n: int | None = None,
    background: Sequence[float] = (0.0, 0.0, 0.0),
) -> torch.Tensor:
    """Object-id map -> colours, one distinct colour per id; -1 (background) -> ``background``.

    Args:
        ids: (B, H, W) or (B, 1, H, W) integer ids (body indices, -1 for no hit).
        n: how many ids to prepare colours for (default: max id + 1).

    Returns:
        (B, 3, H, W) float32 in [0, 1].
    """
    ids = ids.detach()
    if ids.dim() == 4:
        ids = ids[:, 0]
    ids = ids.long()
    n = int(ids.max().item()) + 1 if n is None else int(n)
    n = max(n, 1)
    pal = id_palette(n, device=ids.device)
    bg = torch.as_tensor(background, dtype=torch.float32, device=ids.device)
    col = pal[ids.clamp(0, n - 1)]
    col = torch.where((ids >= 0).unsqueeze(-1), col, bg)
    return _channels_first(col)


# --------------------------------------------------------------------------- gradients
def gradient_heatmap(
    loss_or_grad: Callable[[torch.Tensor], torch.Tensor] | torch.Tensor,
    image: torch.Tensor,
    alpha: float = 0.75,
    signed: bool = False,
    percentile: float = 0.99,
) -> torch.Tensor:
    """Overlay the gradient of a loss with respect to the pixels on a greyed image.

    Args:
        loss_or_grad: a function ``loss(image) -> scalar`` (its gradient with respect to the
            image is computed here), or the gradient itself, shaped like ``image``.
        image: (B, 3, H, W) or (3, H, W) in [0, 1].
        alpha: strength of the overlay.
        signed: False: the magnitude (summed over channels) on a "heat" map; True: red where
            the loss grows with brightness, blue where it shrinks.
        percentile: the per-image gradient magnitude mapped to full intensity (robust max).

    Returns:
        an image shaped like ``image``: the picture in grey, the gradient in colour.
    """
    squeeze = image.dim() == 3
    img = image.detach().unsqueeze(0) if squeeze else image.detach()
    if callable(loss_or_grad):
        with torch.enable_grad():
            x = img.clone().requires_grad_(True)
            loss = loss_or_grad(x.squeeze(0) if squeeze else x)
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise ValueError("gradient_heatmap: the loss function must return a scalar")
            (grad,) = torch.autograd.grad(loss, x, allow_unused=True)
        if grad is None:
            grad = torch.zeros_like(img)
    else:
        grad = loss_or_grad.detach()
        grad = grad.unsqueeze(0) if grad.dim() == 3 else grad
        if grad.shape != img.shape:
            raise ValueError(
                f"gradient_heatmap: gradient shape {tuple(grad.shape)} != image {tuple(img.shape)}"
            )
    grad = torch.nan_to_num(grad.to(img.dtype))
    with torch.no_grad():
        gray = (0.299 * img[:, 0] + 0.587 * img[:, 1] + 0.114 * img[:, 2]).unsqueeze(1)
        base = (0.25 + 0.5 * gray).expand_as(img)
        g = grad.sum(1) if signed else grad.abs().sum(1)  # (B, H, W)
        flat = g.abs().reshape(g.shape[0], -1).float()
        scale = torch.quantile(flat, percentile, dim=1) if flat.shape[1] > 1 else flat[:, 0]
        scale = torch.where(scale > 0, scale, flat.max(dim=1).values)
        scale = torch.where(scale > 0, scale, torch.ones_like(scale)).to(g.dtype)
        x = (g / scale.view(-1, 1, 1)).clamp(-1.0, 1.0)
        if signed:
            red = torch.tensor([1.0, 0.15, 0.1], dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
            blue = torch.tensor([0.1, 0.35, 1.0], dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
            colour = torch.where(x.unsqueeze(1) >= 0, red, blue)
        else:  # red for small, through yellow to white for the largest gradients
            colour = _channels_first(colorize(0.34 + 0.66 * x, "heat"))
        a = alpha * x.abs().unsqueeze(1).sqrt()
        out = ((1 - a) * base + a * colour).clamp(0, 1)
    return out.squeeze(0) if squeeze else out


# --------------------------------------------------------------------------- markers
@torch.no_grad()
def draw_points(
    image: torch.Tensor,
    pixels: torch.Tensor,
    color: Sequence[float] | torch.Tensor | None = None,
    radius: float = 2.5,
    outline: bool = True,
) -> torch.Tensor:
    """Draw filled dots at continuous pixel coordinates (x = column, y = row; centres at +0.5).

    Args:
        image: (B, 3, H, W) or (3, H, W).
        pixels: (B, N, 2) or (N, 2) points, e.g. ``scene.project_bodies(state)`` or
            ``camera.project(points)``. Non-finite points are skipped.
        color: (3,) for all dots or (N, 3) one per point; default: `id_palette` (matching
            `colorize_ids`).
        radius: dot radius in pixels.
        outline: draw a dark ring around each dot so it shows on any background.

    Returns:
        a copy of ``image`` with the dots.
    """
    squeeze = image.dim() == 3
    img = (image.unsqueeze(0) if squeeze else image).detach().clone()
    pts = pixels.detach()
    if pts.dim() == 2:
        pts = pts.unsqueeze(0)
    b, _, h, w = img.shape
    if pts.shape[0] not in (1, b) or pts.shape[-1] != 2:
        raise ValueError(f"draw_points: pixels {tuple(pts.shape)} do not fit images {img.shape}")
    pts = pts.expand(b, -1, 2).to(img.dtype)
    n = pts.shape[1]
    if color is None:
        cols = id_palette(n, device=img.device, dtype=img.dtype)
    else:
        cols = torch.as_tensor(color, dtype=img.dtype, device=img.device).reshape(-1, 3)
        cols = cols.expand(n, 3)
    ys = torch.arange(h, dtype=img.dtype, device=img.device) + 0.5
    xs = torch.arange(w, dtype=img.dtype, device=img.device) + 0.5
    for k in range(n):
        p = pts[:, k]  # (B, 2)
        ok = torch.isfinite(p).all(-1)
        p = torch.where(ok.unsqueeze(-1), p, torch.full_like(p, -1e6))
        d2 = (xs.view(1, 1, w) - p[:, 0].view(b, 1, 1)) ** 2 + (
            ys.view(1, h, 1) - p[:, 1].view(b, 1, 1)
        ) ** 2
        if outline:
            ring = (d2 <= (radius + 1.2) ** 2).unsqueeze(1)
            img = torch.where(ring, torch.zeros_like(img), img)
        dot = (d2 <= radius**2).unsqueeze(1)
        img = torch.where(dot, cols[k].view(1, 3, 1, 1), img)
    return img.squeeze(0) if squeeze else img
