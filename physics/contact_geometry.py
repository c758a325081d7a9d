"""Small batched geometry shared by the contact kinds (`physics.contacts`,
`physics.contact_box`, `physics.contact_box_segment`)."""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def sign(value: Tensor) -> Tensor:
    """+1 where ``value >= 0``, else -1 (never 0, unlike `torch.sign`)."""
    return torch.where(value >= 0, 1.0, -1.0).to(value.dtype)


def gather_rows(rows: Tensor, index: Tensor) -> Tensor:
    """``rows[..., index[..., k], :]``: rows (..., M, D), index (..., K) long -> (..., K, D)."""
    expanded = index[..., None].expand(*index.shape, rows.shape[-1])
    return torch.gather(rows.expand(*index.shape[:-1], *rows.shape[-2:]), -2, expanded)


def closest_segment_parameters(
    start_a: Tensor, delta_a: Tensor, start_b: Tensor, delta_b: Tensor
) -> tuple[Tensor, Tensor]:
    """Parameters s, t in [0, 1] of the closest points of two segments (Ericson, RTCD 5.1.9).

    Handles degenerate (zero-length) segments and parallel ones without NaN gradients.
    """
    eps = 1e-12
    offset = start_a - start_b
    aa = (delta_a * delta_a).sum(-1)
    ee = (delta_b * delta_b).sum(-1)
    f = (delta_b * offset).sum(-1)
    c = (delta_a * offset).sum(-1)
    b = (delta_a * delta_b).sum(-1)
    a_point, b_point = aa <= eps, ee <= eps
    safe_aa = torch.where(a_point, 1.0, aa)
    safe_ee = torch.where(b_point, 1.0, ee)
    denom = aa * ee - b * b
    parallel = denom <= eps * torch.clamp(aa * ee, min=eps)
    s_general = torch.where(parallel, 0.0, (b * f - c * ee) / torch.where(parallel, 1.0, denom))
    s = s_general.clamp(0.0, 1.0)
    t = (b * s + f) / safe_ee
    # Clamp t, then recompute s for the clamped t.
    s = torch.where(
        t < 0,
        (-c / safe_aa).clamp(0.0, 1.0),
        torch.where(t > 1, ((b - c) / safe_aa).clamp(0.0, 1.0), s),
    )
    t = t.clamp(0.0, 1.0)
    # Degenerate cases.
    s = torch.where(a_point, 0.0, torch.where(b_point, (-c / safe_aa).clamp(0.0, 1.0), s))
    t = torch.where(
        a_point,
        torch.where(b_point, 0.0, (f / safe_ee).clamp(0.0, 1.0)),
        torch.where(b_point, 0.0, t),
    )
    return s, t
