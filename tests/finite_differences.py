"""Gradients against central differences, for tests that would otherwise only check that a
gradient exists.

`check_directional` compares autograd's derivative of a scalar function along a random
direction of each input in turn with the central difference along it (two more evaluations
per input, whatever its size), in float64.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def check_directional(
    fn: Callable[..., torch.Tensor],
    inputs: Sequence[torch.Tensor],
    *,
    eps: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-12,
    seed: int = 0,
    names: Sequence[str] | None = None,
    nonzero: bool = True,
) -> list[torch.Tensor]:
    """Assert that, for each input x_i, the gradient of the scalar ``fn(*inputs)`` projected on a
    random unit direction v agrees with ``(fn(.., x_i + eps v, ..) - fn(.., x_i - eps v, ..)) /
    (2 eps)`` to ``atol + rtol * |difference|``; with ``nonzero`` also that the difference is not
    zero (the function does depend on x_i). Returns the gradients (None where unused)."""
    names = list(names) if names is not None else [f"inputs[{i}]" for i in range(len(inputs))]
    leaves = [x.detach().clone().requires_grad_(True) for x in inputs]
    for leaf in leaves:
        assert leaf.dtype == torch.float64, "central differences need float64"
    grads = torch.autograd.grad(fn(*leaves), leaves, allow_unused=True)
    generator = torch.Generator().manual_seed(seed)
    for i, (leaf, grad) in enumerate(zip(leaves, grads, strict=True)):
        v = torch.randn(leaf.shape, generator=generator, dtype=torch.float64)
        v = (v / v.norm()).to(leaf.device)
        values = [x.detach() for x in leaves]
        with torch.no_grad():
            values[i] = leaves[i].detach() + eps * v
            up = float(fn(*values))
            values[i] = leaves[i].detach() - eps * v
            down = float(fn(*values))
        numeric = (up - down) / (2 * eps)
        analytic = 0.0 if grad is None else float((grad * v).sum())
        assert grad is None or bool(torch.isfinite(grad).all()), names[i]
        if nonzero:
            assert abs(numeric) > 1e-10, f"{names[i]}: the function does not depend on it"
        assert abs(analytic - numeric) <= atol + rtol * abs(numeric), (
            f"{names[i]}: autograd {analytic!r} != central difference {numeric!r}"
        )
    return list(grads)
