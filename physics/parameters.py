"""Model values to batched tensors: a number, list or tensor of a spec becomes a (B, ...) tensor
on the world's device and dtype (keeping its graph), with a `ModelError` for a wrong shape or an
out-of-range value."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from .spec import Body, ModelError, WorldSpec

Tensor = torch.Tensor


def as_tensor(value, shape: tuple[int, ...], batch: int, what: str, dtype, device) -> Tensor:
    """A number, list or tensor -> tensor (B, *shape); a tensor keeps its graph."""
    if isinstance(value, Tensor):
        tensor = value.to(dtype=dtype, device=device)
    else:
        try:
            tensor = torch.as_tensor(value, dtype=dtype, device=device)
        except (TypeError, ValueError) as error:
            raise ModelError(
                f"{what}: expected a number or a list of numbers, got {value!r}"
            ) from error
    if tuple(tensor.shape) == shape:
        return tensor.expand(batch, *shape)
    if tuple(tensor.shape) == (batch, *shape):
        return tensor
    if tensor.dim() == 0 and len(shape) == 1:
        raise ModelError(f"{what}: expected {shape[0]} numbers, got one number")
    raise ModelError(
        f"{what}: expected shape {list(shape)} (or [{batch}, ...] with one value per batch "
        f"element), got {list(tensor.shape)}"
    )


def padded_size(body: Body, batch: int, dtype, device) -> Tensor:
    """The body's size as (B, 3): sphere [r, 0, 0], box [x, y, z], capsule/cylinder [r, L, 0]."""
    what = f"body {body.name!r}: size"
    count = {
        "sphere": (),
        "box": (3,),
        "capsule": (2,),
        "cylinder": (2,),
        "plane": (2,),
        "hull": (3,),
    }[body.shape]
    value = body.size
    if body.shape == "sphere":
        if isinstance(value, Tensor) and tuple(value.shape) == (1,):
            value = value.reshape(())
        elif isinstance(value, Sequence):
            raise ModelError(f"{what}: a sphere's size is its radius, one number (size = 0.1)")
    size = as_tensor(value, count, batch, what, dtype, device)
    if count == ():
        size = size[:, None]
    padding = torch.zeros(batch, 3 - size.shape[1], dtype=dtype, device=device)
    return torch.cat([size, padding], 1)


def check_positive(
    tensor: Tensor, what: str, allow_zero: bool = False, allow_inf: bool = False
) -> None:
    # One host sync at build time (never inside a step) to give a clear model error.
    bad = (tensor < 0) if allow_zero else (tensor <= 0)
    finite = ~torch.isnan(tensor) if allow_inf else torch.isfinite(tensor)
    if not finite.all() or bad.any():
        sign = "non-negative" if allow_zero else "positive"
        raise ModelError(f"{what}: must be finite and {sign}, got {tensor.detach().cpu().tolist()}")


def first_device(spec: WorldSpec) -> torch.device:
    for body in spec.bodies:
        for value in (getattr(body, f.name) for f in dataclasses.fields(body)):
            if isinstance(value, Tensor):
                return value.device
    for joint in spec.joints:
        for value in (joint.anchor, joint.axis, joint.damping, joint.limits):
            if isinstance(value, Tensor):
                return value.device
    if isinstance(spec.gravity, Tensor):
        return spec.gravity.device
    return torch.device("cpu")
