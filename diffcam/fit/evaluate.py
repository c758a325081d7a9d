"""Evaluations of a fit's objective, streamed over chunks of frames.

A long video does not fit in memory as one autograd graph or one Jacobian, so every evaluation
renders a few frames at a time, and over a clean plate only the windows around the moving
bodies (`diffcam.formation.body_windows`; outside them the model is the plate and the
residuals are constants):

* `loss_value`: the loss, without gradients.
* `loss_gradient`: the loss and d loss / d raw (in each key's ``raw.grad``), reverse mode in
  two phases: the rollout keeps its graph, each chunk of frames is rendered from a detached copy
  of the trajectory and back-propagated at once (its graph is freed), and the gradients the
  chunks left on the trajectory go back through the physics in one last pass.
* `normal_equations`: the residuals' Jacobian J with respect to every trainable raw scalar,
  accumulated chunk by chunk into ``J^T J``, ``J^T r`` and each frame's ``J_f^T r_f`` (all
  that Levenberg-Marquardt and the covariance need). The rendering is differentiated in
  forward mode (a world per scalar, each carrying its own tangent); the trajectory's tangents
  come from central differences of one batched rollout (2 P + 1 worlds, no autograd), which
  is far cheaper than forward-mode AD through every physics step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from ..renderer.api import DEFAULT_EDGE_SOFTNESS, edge_reach
from .keys import FitKey, prior_residuals
from .model import VideoModel
from .objective import Target

__all__ = [
    "Plan",
    "NormalEquations",
    "loss_value",
    "loss_gradient",
    "normal_equations",
    "explained",
    "batched_values",
]

_CHUNK_ELEMENTS = 1 << 22  # predicted values (frames x worlds x pixels) per forward-mode chunk
_DIFFERENCE_STEP = {torch.float32: 1e-3, torch.float64: 1e-6}  # raw units


@dataclasses.dataclass
class Plan:
    """Which frames count and how they are drawn: frames [0, horizon), pyramid ``level``,
    and the renderer's keyword arguments (``edge_softness``, ``supersample``)."""

    horizon: int
    level: int = 0
    render: dict = dataclasses.field(default_factory=dict)
    frames_per_chunk: int = 16

    def chunks(self, size: int | None = None):
        size = self.frames_per_chunk if size is None else size
        for start in range(0, self.horizon, size):
            yield slice(start, min(self.horizon, start + size))

    def margin(self, dtype: torch.dtype) -> float:
        """Pixels around a body that its soft silhouette reaches (and a bit for AA): soft
        coverage is exactly 0 beyond the renderer's cut, so windows this wide lose nothing."""
        softness = self.render.get("edge_softness", DEFAULT_EDGE_SOFTNESS)
        return edge_reach(softness, dtype) + 2.0


@dataclasses.dataclass
class NormalEquations:
    """At the current raw values: ``loss``; ``jtj`` (P, P) = J^T J and ``jtr`` (P,) = J^T r in
    float64; ``frame_jtr`` (T', P) each frame's J_f^T r_f; ``cost`` = sum(r**2) over every
    pixel; ``count`` = the number of residuals."""

    loss: float
    jtj: torch.Tensor
    jtr: torch.Tensor
    frame_jtr: torch.Tensor
    cost: float
    count: int


def _values(keys: Sequence[FitKey]) -> dict[str, torch.Tensor]:
    return {k.key: k.value() for k in keys}


def _windows(model: VideoModel, target: Target, built, plan: Plan):
    """The bodies' windows when the target knows the plate outside them, else None."""
    if target.plate is None:
        return None
    return model.windows(built, plan.horizon, plan.margin(model.scene.dtype), 2**plan.level)


def loss_value(model: VideoModel, target: Target, keys: Sequence[FitKey], plan: Plan) -> float:
    """The loss at the keys' current values (no gradient)."""
    with torch.no_grad():
        built = model.build(_values(keys), horizon=plan.horizon)
        windows = _windows(model, target, built, plan)
        total = 0.0
        for index in plan.chunks():
            part = None if windows is None else windows[index]
            frames = model.frames(built, index, windows=part, **plan.render)
            total += float(target.residuals(frames, index, plan.level, part).square().sum())
            if part is not None:
                total += float(target.outside(index, part, plan.level)[0])
        total += float(prior_residuals(keys).square().sum())
    return total / target.total_weight(slice(0, plan.horizon), plan.level)


def explained(
    model: VideoModel, target: Target, keys: Sequence[FitKey], plan: Plan
) -> float | None:
    """How much of the moving bodies' pixels the model explains: 1 - (its squared residuals
    in the bodies' windows) / (those of the plate alone there), at the keys' values. Near 1 a
    good fit (up to noise and appearance the model lacks); near 0 or below, the model's
    bodies are not where the video's are (a wrong local minimum). None without a plate."""
    if target.plate is None:
        return None
    with torch.no_grad():
        built = model.build(_values(keys), horizon=plan.horizon)
        windows = _windows(model, target, built, plan)
        fitted = empty = 0.0
        for index in plan.chunks():
            part = windows[index]
            frames = model.frames(built, index, windows=part, **plan.render)
            fitted += float(target.residuals(frames, index, plan.level, part).square().sum())
            outside = float(target.outside(index, part, plan.level)[0])
            empty += float(target.total_error(index, plan.level)) - outside
    return 1.0 - fitted / max(empty, 1e-300)


def loss_gradient(model: VideoModel, target: Target, keys: Sequence[FitKey], plan: Plan) -> float:
    """The loss, and its gradient accumulated into ``raw.grad`` of the keys (whose raw
    tensors require grad)."""
    import physics

    norm = target.total_weight(slice(0, plan.horizon), plan.level)
    with torch.enable_grad():
        built = model.build(_values(keys), horizon=plan.horizon)
        windows = _windows(model, target, built, plan)
        tensors = built.trajectory.tensors()
        through_physics = any(t.requires_grad for t in tensors)
        detached = physics.State(*(t.detach().requires_grad_(through_physics) for t in tensors))
        total = 0.0
        for index in plan.chunks():
            part = None if windows is None else windows[index]
            frames = model.frames(built, index, trajectory=detached, windows=part, **plan.render)
            loss = target.residuals(frames, index, plan.level, part).square().sum() / norm
            if loss.requires_grad:
                loss.backward(retain_graph=True)
            total += float(loss.detach())
            if part is not None:
                total += float(target.outside(index, part, plan.level)[0]) / norm
        prior = prior_residuals(keys).square().sum() / norm
        if prior.requires_grad:
            prior.backward()
        total += float(prior.detach())
        if through_physics:
            pairs = [
                (t, d.grad) for t, d in zip(tensors, detached.tensors(), strict=True)
                if d.grad is not None and t.requires_grad
            ]  # fmt: skip
            if pairs:
                torch.autograd.backward([p[0] for p in pairs], [p[1] for p in pairs])
    return total


def batched_values(keys: Sequence[FitKey], trainable: Sequence[FitKey], rows: torch.Tensor):
    """Every key's value for each row of raw scalars ``rows`` (n, P) of the trainable keys."""
    values, start = {}, 0
    for k in trainable:
        n = k.raw.numel()
        values[k.key] = k.value_of(rows[:, start : start + n].reshape(rows.shape[0], *k.raw.shape))
        start += n
    for k in keys:  # the others, one (equal) value per world
        values.setdefault(k.key, k.value().detach().expand(rows.shape[0], *k.raw.shape))
    return values


def _trajectory_tangents(model: VideoModel, keys, trainable, x: torch.Tensor, horizon: int):
    """The rollout at x and its derivative along each raw scalar, by central differences
    of one batched rollout: (primal State (S+1, 1, N, ...), tangent State (S+1, P, N, ...))."""
    import physics

    columns = x.numel()
    step = _DIFFERENCE_STEP.get(x.dtype, 1e-3)
    offsets = torch.zeros(2 * columns + 1, columns, dtype=x.dtype, device=x.device)
    eye = torch.eye(columns, dtype=x.dtype, device=x.device) * step
    offsets[1::2], offsets[2::2] = eye, -eye
    with torch.no_grad():
        built = model.build(
            batched_values(keys, trainable, x + offsets), batch=2 * columns + 1, horizon=horizon
        )
    primal, tangent = [], []
    for t in built.trajectory.tensors():
        primal.append(t[:, :1])
        tangent.append((t[:, 1::2] - t[:, 2::2]) / (2 * step))
    return physics.State(*primal), physics.State(*tangent)


def normal_equations(
    model: VideoModel,
    target: Target,
    keys: Sequence[FitKey],
    trainable: Sequence[FitKey],
    plan: Plan,
    priors: bool = True,
) -> NormalEquations:
    """J^T J, J^T r and per-frame J_f^T r_f over the raw scalars of ``trainable`` (in order,
    each key flattened); the other keys stay at their values. ``priors``: include the keys'
    prior residuals (False: what the frames alone say)."""
    from torch.autograd import forward_ad

    import physics

    x = torch.cat([k.raw.detach().reshape(-1) for k in trainable])
    columns = x.numel()
    device = x.device
    jtj = torch.zeros(columns, columns, dtype=torch.float64, device=device)
    jtr = torch.zeros(columns, dtype=torch.float64, device=device)
    frame_jtr = torch.zeros(plan.horizon, columns, dtype=torch.float64, device=device)
    cost = 0.0
    primal, tangent = _trajectory_tangents(model, keys, trainable, x, plan.horizon)
    with torch.no_grad():
        windows = _windows(model, target, _single(model, keys, primal), plan)
    h, w = target.frames.shape[-2:] if windows is None else windows.size
    per_chunk = max(1, min(plan.frames_per_chunk, _CHUNK_ELEMENTS // (columns * 3 * h * w)))
    with torch.no_grad(), forward_ad.dual_level():
        rows = forward_ad.make_dual(
            x.expand(columns, columns).clone(), torch.eye(columns, dtype=x.dtype, device=device)
        )
        built = model.build(batched_values(keys, trainable, rows), batch=columns, simulate=False)
        trajectory = physics.State(*(
            forward_ad.make_dual(p.expand_as(d).contiguous(), d)
            for p, d in zip(primal.tensors(), tangent.tensors(), strict=True)
        ))  # fmt: skip
        for index in plan.chunks(per_chunk):
            part = None
            if windows is not None:
                part = windows[index]
                part = type(part)(part.origins.expand(-1, columns, 2), part.size)
                cost += float(target.outside(index, windows[index], plan.level)[0])
            frames = model.frames(built, index, trajectory=trajectory, windows=part, **plan.render)
            r_primal, r_tangent = forward_ad.unpack_dual(
                target.residuals(frames, index, plan.level, part)
            )  # (Tc, P, n)
            r = r_primal[:, 0].to(torch.float64)  # every world has the same primal
            if r_tangent is None:  # nothing drawn depends on the parameters
                r_tangent = torch.zeros_like(r_primal)
            jac = r_tangent.to(torch.float64).transpose(1, 2)  # (Tc, n, P)
            jtj += torch.einsum("tnp,tnq->pq", jac, jac)
            per_frame = torch.einsum("tnp,tn->tp", jac, r)
            frame_jtr[index] = per_frame
            jtr += per_frame.sum(0)
            cost += float(r.square().sum())
    # a Gaussian prior on a raw scalar is one more residual (raw - raw0) / sigma
    index = 0
    for k in trainable if priors else ():
        n = k.raw.numel()
        if k.prior is not None:
            sigma = k.prior.detach().reshape(-1).to(torch.float64)
            r = ((k.raw.detach() - k.raw_of(k.init)).reshape(-1).to(torch.float64)) / sigma
            jtj[range(index, index + n), range(index, index + n)] += 1.0 / sigma.square()
            jtr[index : index + n] += r / sigma
            cost += float(r.square().sum())
        index += n
    if priors:  # the fixed keys' priors: constants
        fixed = [k for k in keys if all(k is not t for t in trainable)]
        cost += float(prior_residuals(fixed).square().sum())
    norm = target.total_weight(slice(0, plan.horizon), plan.level)
    count = target.residual_count(slice(0, plan.horizon), plan.level)
    return NormalEquations(cost / norm, jtj, jtr, frame_jtr, cost, count)


def _single(model: VideoModel, keys: Sequence[FitKey], trajectory):
    """The model at the keys' values (batch 1) with a given trajectory."""
    built = model.build({k.key: k.value().detach() for k in keys}, simulate=False)
    built.trajectory = trajectory
    return built
