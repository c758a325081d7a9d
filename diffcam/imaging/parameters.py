"""Scalar parameters of the imaging functions: Python floats or () / (B,) tensors, made ready
to broadcast against an image."""

from __future__ import annotations

import torch

Param = float | torch.Tensor


def as_tensor_like(p, like: torch.Tensor) -> torch.Tensor:
    """``p`` (tensor, float or array-like) as a tensor of ``like``'s dtype and device; a tensor
    is converted differentiably, anything else directly (no float32 round trip)."""
    if isinstance(p, torch.Tensor):
        return p.to(dtype=like.dtype, device=like.device)
    return torch.as_tensor(p, dtype=like.dtype, device=like.device)


def is_plain(p: Param, value: float) -> bool:
    """True if ``p`` is a Python number equal to ``value`` (then the operation is skipped)."""
    return isinstance(p, int | float) and float(p) == value


def per_image(p: Param, like: torch.Tensor) -> Param:
    """``p`` ready to broadcast against ``like`` (B, ...): floats stay floats, a (B,) tensor
    becomes (B, 1, ..., 1); tensors take ``like``'s dtype and device (differentiably)."""
    if not isinstance(p, torch.Tensor):
        return float(p)
    p = p.to(dtype=like.dtype, device=like.device)
    if p.dim() == 0:
        return p
    if p.dim() != 1:
        raise ValueError(f"per-image parameters must have shape () or (B,), got {tuple(p.shape)}")
    return p.view(-1, *([1] * (like.dim() - 1)))
