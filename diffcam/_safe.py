"""Safe math helpers: finite values *and* finite gradients at degenerate inputs.

The trick throughout is to guard the argument (``torch.where`` on the inner value) before the
singular function, not the output: ``where(cond, sqrt(x), 0)`` still back-propagates
``0 * inf = nan`` through the unselected branch, whereas ``sqrt(where(cond, x, 1))`` does not.
"""

from __future__ import annotations

import torch

__all__ = ["safe_sqrt", "safe_norm", "safe_div", "safe_atan2", "safe_normalize", "tiny"]


def tiny(t: torch.Tensor) -> float:
    """A small positive number suited to ``t``'s dtype (used as a guard threshold)."""
    return 1e-12 if t.dtype == torch.float64 else 1e-8


def safe_sqrt(x: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """``sqrt(max(x, 0))`` with a zero (not infinite) gradient for ``x <= eps``."""
    eps = tiny(x) if eps is None else eps
    ok = x > eps
    return torch.where(ok, torch.sqrt(torch.where(ok, x, 1.0)), 0.0)


def safe_norm(v: torch.Tensor, dim: int = -1, keepdim: bool = False) -> torch.Tensor:
    """Euclidean norm along ``dim``; gradient 0 (not NaN) at the zero vector."""
    return safe_sqrt((v * v).sum(dim=dim, keepdim=keepdim))


def safe_normalize(v: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """``v / |v|`` along ``dim``; returns 0 for the zero vector, with finite gradients."""
    n = safe_norm(v, dim=dim, keepdim=True)
    return v / torch.where(n > 0, n, torch.ones_like(n))


def safe_div(a: torch.Tensor, b: torch.Tensor, eps: float | None = None) -> torch.Tensor:
    """``a / b`` with ``|b|`` clamped away from 0 (keeping its sign) so nothing is inf/NaN."""
    eps = tiny(b) if eps is None else eps
    b_safe = torch.where(
        b.abs() > eps, b, torch.where(b < 0, b.new_tensor(-eps), b.new_tensor(eps))
    )
    return a / b_safe


def safe_atan2(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``atan2(y, x)`` whose gradient is 0 instead of NaN at ``x = y = 0`` (e.g. sphere poles)."""
    r2 = x * x + y * y
    ok = r2 > tiny(r2)
    return torch.atan2(
        torch.where(ok, y, torch.zeros_like(y)), torch.where(ok, x, torch.ones_like(x))
    )
