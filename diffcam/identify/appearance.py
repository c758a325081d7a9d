"""Each moving body's look, learnt from the video at the current pose: a texture, not a colour.

Over a clean plate, the camera's output at a pixel is affine in the bodies' textures for a
given pose: ``out = base + A t``, where ``base`` is the frame with every texture black (the
plate where the bodies do not cover it) and ``A t`` the bodies' own light (coverage, shading
and the bilinear texture lookup, all fixed by the pose). The textures ``t`` that best explain
the frames solve a linear least-squares problem,

    min_t  sum_p w_p (A t - (y - base))_p^2 + lam |t - m|^2,

solved by conjugate gradients on its normal equations with a Jacobi preconditioner: ``A p`` is a
render with texture ``p`` (minus ``base``), ``A^T u`` one backward pass. ``m`` is the body's
mean colour and ``lam`` small: a texel no frame shows (the back of a ball) stays near it. The
pixel weights ``w`` are the Charbonnier loss's (iteratively reweighted): a hand or a shadow
in a body's window pulls with a bounded force. Two colours, a printed pattern, a highlight
that moves with the body, or a clear part that lets the wall show through all become
texels, where one colour would have been their grey average.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from ..fit.model import VideoModel

__all__ = ["texture_size", "estimate_textures"]

_LOSS_SCALE = 0.1  # Charbonnier scale (intensity) of the reweighting
_RIDGE = 1e-3  # lam, relative to the mean diagonal of A^T W A


def texture_size(scene, body: int, radius_px: float) -> tuple[int, int]:
    """(Ht, Wt) of a body's learnt texture: about a texel per two pixels of its apparent size,
    wrapped shapes twice as wide as high, between 2 and 32 texels a side."""
    high = int(min(16, max(2, round(radius_px))))
    wrapped = scene.world.shapes[body] in ("sphere", "capsule", "cylinder")
    return high, (2 * high if wrapped else high)


def _render(model: VideoModel, built, scene, index, windows, render):
    """The model's frames ``index`` within ``windows`` for ``scene`` (textures set)."""
    import dataclasses

    view = dataclasses.replace(built, scene=scene)
    part = windows[index]
    return model.frames(view, index, windows=part, **render)[:, 0]  # (n, 3, h, w)


def estimate_textures(
    model: VideoModel,
    built,
    bodies: Sequence[int],
    sizes: Sequence[tuple[int, int]],
    frames: torch.Tensor,
    *,
    edge_softness: float = 0.5,
    count: int = 48,
    iterations: int = 12,
    reweights: int = 2,
) -> dict[str, torch.Tensor]:
    """Least-squares textures of ``bodies`` for a video, at the built model's pose.

    Args:
        model: the `VideoModel` (its image model must have a ``plate``).
        built: ``model.build(values)`` at the current values (batch 1).
        bodies: body indices (state order) whose textures are learnt.
        sizes: (Ht, Wt) of each body's texture.
        frames: (T, 3, H, W) the observed frames of ``model.times``.
        edge_softness: the silhouettes' softness (px) of the renders.
        count: at most this many frames, spread over the video, enter the fit.
        iterations: conjugate-gradient iterations per reweighting.
        reweights: Charbonnier reweightings (0 = plain least squares).

    Returns:
        body name -> (3, Ht, Wt) texture in [0, 1] (no gradient).
    """
    scene = built.scene
    names = [scene.body_names[i] for i in bodies]
    dtype, device = scene.dtype, scene.device
    total = model.frame_count
    index = torch.unique(torch.linspace(0, total - 1, min(count, total)).round().long())
    windows = model.windows(built, total, 2.0 + 3.0 * edge_softness)
    if windows is None:
        raise ValueError("estimate_textures: the model needs a clean plate")
    render = {"edge_softness": float(edge_softness)}
    from ..formation import crop

    observed = crop(frames[index], windows[index])[:, 0].to(dtype)  # (n, 3, h, w)

    def with_textures(textures):
        overrides = {f"bodies.{n}.texture": t for n, t in zip(names, textures, strict=True)}
        return scene.with_overrides(overrides)

    zeros = [torch.zeros(3, *s, dtype=dtype, device=device) for s in sizes]
    with torch.no_grad():
        base = _render(model, built, with_textures(zeros), index, windows, render)

    def apply(textures, grad: bool = False):
        """A t: the bodies' own light for textures t (a list), with a graph when ``grad``."""
        with torch.set_grad_enabled(grad):
            out = _render(model, built, with_textures(textures), index, windows, render)
        return out - base

    def adjoint(u):
        """A^T u for pixel values u (n, 3, h, w): a list of texture-shaped gradients."""
        textures = [torch.zeros(3, *s, dtype=dtype, device=device, requires_grad=True)
                    for s in sizes]  # fmt: skip
        out = apply(textures, grad=True)
        return list(torch.autograd.grad((out * u).sum(), textures, allow_unused=True))

    target = observed - base
    weights = torch.ones_like(target)
    ones = [torch.ones(3, *s, dtype=dtype, device=device) for s in sizes]
    lit = apply(ones)  # A 1: each pixel's total texel weight (coverage x shading)
    textures = None
    for _ in range(reweights + 1):
        diagonal = [g.clamp_min(0) for g in adjoint(weights * lit)]  # A^T W A 1 >= diag
        scale = sum(float(d.sum()) for d in diagonal) / max(sum(d.numel() for d in diagonal), 1)
        ridge = _RIDGE * max(scale, 1e-12)
        numerator = adjoint(weights * target)  # A^T W (y - base)
        mean = [_mean_colour(n, d) for n, d in zip(numerator, diagonal, strict=True)]
        rhs = [g + ridge * m for g, m in zip(numerator, mean, strict=True)]
        start = mean if textures is None else textures

        def normal(p, weights=weights, ridge=ridge):  # (A^T W A + lam) p
            return [g + ridge * x for g, x in zip(adjoint(weights * apply(p)), p, strict=True)]

        textures = _conjugate_gradients(
            normal, rhs, start, [d + ridge for d in diagonal], iterations
        )
        textures = [t.clamp(0, 1) for t in textures]
        if reweights:
            error = apply(textures) - target
            weights = 1.0 / torch.sqrt(1.0 + (error / _LOSS_SCALE).square())
    return {n: t.detach() for n, t in zip(names, textures, strict=True)}


def _mean_colour(numerator, diagonal) -> torch.Tensor:
    """The body's weighted mean colour, (3, 1, 1) broadcast to its texture's shape: the
    least-squares colour under the Jacobi approximation (a grey 0.5 where nothing shows)."""
    total = diagonal.sum((1, 2), keepdim=True)
    colour = numerator.sum((1, 2), keepdim=True) / total.clamp_min(1e-12)
    colour = torch.where(total > 1e-9, colour, torch.full_like(colour, 0.5)).clamp(0, 1)
    return colour.expand_as(numerator).clone()


def _conjugate_gradients(apply_normal, rhs, start, diagonal, iterations: int):
    """Preconditioned CG on lists of tensors: solve N x = rhs from ``start`` (N by
    ``apply_normal``, Jacobi preconditioner ``diagonal``)."""

    def dot(a, b):
        return sum(float((x * y).sum()) for x, y in zip(a, b, strict=True))

    x = [s.clone() for s in start]
    r = [b - n for b, n in zip(rhs, apply_normal(x), strict=True)]
    z = [ri / d for ri, d in zip(r, diagonal, strict=True)]
    p = [zi.clone() for zi in z]
    rz = dot(r, z)
    for _ in range(iterations):
        if not math.isfinite(rz) or rz <= 1e-30:
            break
        q = apply_normal(p)
        alpha = rz / max(dot(p, q), 1e-30)
        x = [xi + alpha * pi for xi, pi in zip(x, p, strict=True)]
        r = [ri - alpha * qi for ri, qi in zip(r, q, strict=True)]
        z = [ri / d for ri, d in zip(r, diagonal, strict=True)]
        rz_new = dot(r, z)
        p = [zi + (rz_new / rz) * pi for zi, pi in zip(z, p, strict=True)]
        rz = rz_new
    return x
