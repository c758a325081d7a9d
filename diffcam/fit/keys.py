"""The fitted keys: each key's value as a function of a raw, unit-free parameter.

Optimisers work on raw parameters whose unit step is a sensible change of the key:

* ``positive`` keys: raw = log(value), a unit is a factor e;
* ``bounds = (lo, hi)``: raw = logit((value - lo) / (hi - lo));
* otherwise: raw = (value - init) / scale, a unit is ``scale`` in the key's own units (default
  a tenth of the initial value's magnitude, at least 0.01).

So a step bound in raw units (`fit_scene`'s ``max_step``) bounds every key in its own terms: a
camera position moves at most ``max_step * scale`` metres per step, a mass at most a factor
``e ** max_step``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import torch

__all__ = ["FitKey", "make_key", "prior_residuals"]

_SPEC_ENTRIES = ("init", "positive", "bounds", "lr", "scale", "prior")


@dataclasses.dataclass
class FitKey:
    """One fitted key.

    Attributes:
        key: the key path (``joints.pivot.damping``) or a name `to_overrides` understands.
        raw: the leaf tensor the optimisers change (the key's shape).
        init: the initial value (the key's shape and units).
        kind: "positive", "bounded" or "free".
        bounds: (lo, hi) for bounded keys.
        scale: value units per raw unit of a free key (a tensor broadcastable to the key).
        lr: this key's Adam learning rate in raw units, or None for `fit_scene`'s.
        prior: the standard deviation (raw units, the key's shape or ()) of a Gaussian prior
            centred on ``init``, or None for none: the start is then a measurement, and a
            direction the images barely see stays near it instead of drifting.
    """

    key: str
    raw: torch.Tensor
    init: torch.Tensor
    kind: str
    bounds: tuple[float, float] | None
    scale: torch.Tensor
    lr: float | None = None
    prior: torch.Tensor | None = None

    def value(self) -> torch.Tensor:
        return self.value_of(self.raw)

    def value_of(self, raw: torch.Tensor) -> torch.Tensor:
        """The key's value for a raw parameter of ``raw``'s shape (may carry a batch axis)."""
        if self.kind == "positive":
            return torch.exp(raw)
        if self.kind == "bounded":
            lo, hi = self.bounds
            return lo + (hi - lo) * torch.sigmoid(raw)
        return self.init.to(raw) + self.scale.to(raw) * raw

    def derivative(self, raw: torch.Tensor) -> torch.Tensor:
        """d value / d raw, elementwise (the key's shape)."""
        if self.kind == "positive":
            return torch.exp(raw)
        if self.kind == "bounded":
            lo, hi = self.bounds
            s = torch.sigmoid(raw)
            return (hi - lo) * s * (1.0 - s)
        return self.scale.to(raw).expand_as(raw)

    def raw_of(self, value: torch.Tensor) -> torch.Tensor:
        """The raw parameter of a value (the inverse of `value_of`)."""
        value = torch.as_tensor(value, dtype=self.raw.dtype, device=self.raw.device)
        if self.kind == "positive":
            return torch.log(value)
        if self.kind == "bounded":
            lo, hi = self.bounds
            u = ((value - lo) / (hi - lo)).clamp(1e-12, 1 - 1e-12)
            return torch.log(u) - torch.log1p(-u)
        return (value - self.init) / self.scale


def prior_residuals(keys) -> torch.Tensor:
    """(n,) the keys' prior residuals (raw - raw at init) / prior over every scalar of the keys
    with a prior (differentiable in ``raw``); empty without priors."""
    parts = [
        ((k.raw - k.raw_of(k.init)) / k.prior).reshape(-1) for k in keys if k.prior is not None
    ]
    if not parts:
        return torch.zeros(0)
    return torch.cat(parts)


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def make_key(key: str, spec: Any, dtype: torch.dtype, device=None) -> FitKey:
    """A `FitKey` from ``{"init": ..., "positive": bool, "bounds": (lo, hi), "scale": s,
    "lr": lr}``; raises ValueError naming the key and what is accepted."""
    if not isinstance(spec, Mapping) or "init" not in spec:
        raise ValueError(
            f"keys[{key!r}]: expected a dict with 'init' (and optionally 'positive', "
            f"'bounds', 'scale', 'lr'), got {spec!r}"
        )
    unknown = set(spec) - set(_SPEC_ENTRIES)
    if unknown:
        raise ValueError(
            f"keys[{key!r}]: unknown spec entries {sorted(unknown)}; accepted: "
            + ", ".join(repr(e) for e in _SPEC_ENTRIES)
        )
    init = spec["init"]
    if isinstance(init, torch.Tensor):
        init = init.detach().to(dtype=dtype, device=device).clone()
    else:
        try:
            init = torch.as_tensor(init, dtype=dtype, device=device)
        except (TypeError, ValueError):
            raise ValueError(
                f"keys[{key!r}]: init must be a number or a tensor, got {init!r}"
            ) from None
    if not bool(torch.isfinite(init).all()):
        raise ValueError(f"keys[{key!r}]: init must be finite, got {init.tolist()}")
    positive = bool(spec.get("positive", False))
    bounds = spec.get("bounds")
    if positive and bounds is not None:
        raise ValueError(f"keys[{key!r}]: give 'positive' or 'bounds', not both")
    scale = torch.ones((), dtype=dtype, device=device)
    if positive:
        if not bool((init > 0).all()):
            raise ValueError(f"keys[{key!r}]: 'positive' needs init > 0, got {init.tolist()}")
        kind, raw = "positive", torch.log(init)
    elif bounds is not None:
        if len(bounds) != 2 or not all(_number(b) for b in bounds) or not bounds[0] < bounds[1]:
            raise ValueError(f"keys[{key!r}]: bounds must be (lo, hi) with lo < hi, got {bounds}")
        lo, hi = float(bounds[0]), float(bounds[1])
        if not bool(((init > lo) & (init < hi)).all()):
            raise ValueError(
                f"keys[{key!r}]: init {init.tolist()} must lie strictly inside bounds {bounds}"
            )
        u = (init - lo) / (hi - lo)
        kind, raw, bounds = "bounded", torch.log(u) - torch.log1p(-u), (lo, hi)
    else:
        given = spec.get("scale")
        if given is None:
            magnitude = float(init.abs().max()) if init.numel() else 0.0
            scale = torch.tensor(max(0.1 * magnitude, 0.01), dtype=dtype, device=device)
        else:
            scale = torch.as_tensor(given, dtype=dtype, device=device)
            if not bool(torch.isfinite(scale).all()) or not bool((scale > 0).all()):
                raise ValueError(f"keys[{key!r}]: 'scale' must be positive, got {given!r}")
        kind, raw = "free", torch.zeros_like(init)
    if "scale" in spec and kind != "free":
        raise ValueError(
            f"keys[{key!r}]: 'scale' is for keys without 'positive' or 'bounds' (those already "
            "step in log or logit units)"
        )
    lr = spec.get("lr")
    if lr is not None and not (_number(lr) and 0 < lr < math.inf):
        raise ValueError(f"keys[{key!r}]: 'lr' must be a positive number, got {lr!r}")
    prior = spec.get("prior")
    if prior is not None:
        prior = torch.as_tensor(prior, dtype=dtype, device=device)
        if not bool(torch.isfinite(prior).all()) or not bool((prior > 0).all()):
            raise ValueError(
                f"keys[{key!r}]: 'prior' must be positive (raw units), got {spec['prior']!r}"
            )
        prior = prior.expand_as(init).clone()
    return FitKey(key, raw.clone().requires_grad_(True), init, kind, bounds, scale,
                  None if lr is None else float(lr), prior)  # fmt: skip
