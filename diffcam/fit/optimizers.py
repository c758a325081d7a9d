"""The optimisers of `fit_scene`, on raw parameters (see `keys`), every step bounded.

Each takes a `Problem` (the trainable raw tensors and the evaluations) and a budget of loss
evaluations, and records every evaluation. No step moves a raw parameter by more than
``max_step`` raw units (a factor e**max_step for positive keys, max_step * scale for free
ones): far from the optimum a model's curvature says little, and one wild step (a camera
moved metres, a length made negative) can leave the region where anything is visible.

* Adam (`adam`): first order, any number of parameters (textures); per-key learning rates,
  a cosine decay to a tenth over the budget, betas (0.5, 0.9) (fits run tens to hundreds of
  steps, where the default betas overshoot and then crawl).
* L-BFGS (`lbfgs`): quasi-Newton directions shortened to the bound, with a backtracking line
  search (so no trial point leaves the bound either).
* Levenberg-Marquardt (`levenberg_marquardt`): on the normal equations of the residuals, with
  Marquardt's scaling floored in raw units and Nielsen's damping update from the ratio of
  actual to predicted reduction; a trial step costs one plain evaluation, the Jacobian is recomputed
  only after a step is accepted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch

from .evaluate import NormalEquations

__all__ = ["Problem", "Refused", "adam", "lbfgs", "levenberg_marquardt"]

_BETAS = (0.5, 0.9)
_PATIENCE = 5  # Adam iterations of relative change below the tolerance before stopping


class Refused(Exception):
    """An evaluation the model refused at these values (a size out of range, a simulation that
    went non-finite): a trial step is rejected; an optimiser that cannot go on stops."""


@dataclasses.dataclass
class Problem:
    """raws: the trainable leaf tensors; lrs: per raw, its Adam learning rate or None;
    loss_gradient() -> loss, filling the raws' ``grad``; loss_value() -> loss;
    normal_equations() -> `NormalEquations`; record(loss) -> None, once per evaluation;
    max_step: the step bound in raw units; tolerance: relative loss change that counts as
    converged."""

    raws: list[torch.Tensor]
    lrs: list[float | None]
    loss_gradient: Callable[[], float]
    loss_value: Callable[[], float]
    normal_equations: Callable[[], NormalEquations]
    record: Callable[[float], None]
    max_step: float
    tolerance: float

    def get(self) -> torch.Tensor:
        return torch.cat([r.detach().reshape(-1) for r in self.raws])

    def put(self, x: torch.Tensor) -> None:
        with torch.no_grad():
            start = 0
            for r in self.raws:
                r.copy_(x[start : start + r.numel()].view_as(r))
                start += r.numel()


def _bounded(step: torch.Tensor, bound: float) -> torch.Tensor:
    """The step, shortened (direction kept) so that no entry exceeds the bound."""
    largest = float(step.abs().max()) if step.numel() else 0.0
    return step * (bound / largest) if largest > bound else step


def adam(problem: Problem, budget: int, lr: float) -> str:
    """Adam for ``budget`` iterations; returns "converged" or "budget"."""
    groups = [
        {"params": [r], "lr": lr if key_lr is None else key_lr}
        for r, key_lr in zip(problem.raws, problem.lrs, strict=True)
    ]
    optimizer = torch.optim.Adam(groups, lr=lr, betas=_BETAS)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda i: 0.1 + 0.45 * (1.0 + math.cos(math.pi * min(i / max(budget - 1, 1), 1.0))),
    )
    calm, previous = 0, None
    for _ in range(budget):
        optimizer.zero_grad(set_to_none=True)
        before = problem.get()
        try:
            value = problem.loss_gradient()
        except Refused:
            return "stalled"
        problem.record(value)
        optimizer.step()
        schedule.step()
        problem.put(before + _bounded(problem.get() - before, problem.max_step))
        if previous is not None:
            change = abs(previous - value) / max(abs(previous), 1e-30)
            calm = calm + 1 if change < problem.tolerance else 0
        previous = value
        if calm >= _PATIENCE:
            return "converged"
    return "budget"


def lbfgs(problem: Problem, budget: int, lr: float) -> str:
    """L-BFGS for ``budget`` loss evaluations; returns "converged" or "budget".

    The quasi-Newton direction (two-loop recursion over the last 10 steps; the first is the
    gradient, scaled to ``lr`` raw units) is shortened to the step bound, and a backtracking
    (Armijo) line search halves it until the loss falls: every evaluated point lies within
    the bound of the last accepted one.
    """
    history: list[tuple[torch.Tensor, torch.Tensor, float]] = []

    def evaluate() -> tuple[float, torch.Tensor]:
        for r in problem.raws:
            r.grad = None
        try:
            value = problem.loss_gradient()
        except Refused:
            value = math.inf
        problem.record(value)
        grads = [torch.zeros_like(r) if r.grad is None else r.grad for r in problem.raws]
        return value, torch.cat([g.detach().reshape(-1) for g in grads]).to(torch.float64)

    x = problem.get()
    value, grad = evaluate()
    if not math.isfinite(value):
        return "stalled"
    used = 1
    while used < budget:
        direction = -grad.clone()
        alphas = []
        for s, y, rho in reversed(history):
            alpha = rho * float(s @ direction)
            direction -= alpha * y
            alphas.append(alpha)
        if history:
            s, y, _ = history[-1]
            direction *= float(s @ y) / float(y @ y)
        else:
            direction *= lr / max(float(direction.abs().max()), 1e-300)
        for (s, y, rho), alpha in zip(history, reversed(alphas), strict=True):
            beta = rho * float(y @ direction)
            direction += (alpha - beta) * s
        if float(direction @ grad) >= 0:  # not a descent direction: restart from the gradient
            history.clear()
            direction = -grad * (lr / max(float(grad.abs().max()), 1e-300))
        direction = _bounded(direction, problem.max_step)
        slope, t = float(direction @ grad), 1.0
        while used < budget:
            problem.put(x + (t * direction).to(x.dtype))
            new_value, new_grad = evaluate()
            used += 1
            if math.isfinite(new_value) and new_value <= value + 1e-4 * t * slope:
                break
            t *= 0.5
        else:  # the budget ran out before the loss fell: keep the last accepted point
            problem.put(x)
            return "budget"
        s, y = (t * direction), new_grad - grad
        if float(s @ y) > 1e-12 * float(s @ s):
            history.append((s, y, 1.0 / float(s @ y)))
            del history[:-10]
        change = abs(value - new_value) / max(abs(value), 1e-30)
        x, value, grad = problem.get(), new_value, new_grad
        if change < problem.tolerance:
            return "converged"
    return "budget"


def levenberg_marquardt(problem: Problem, budget: int, state: dict | None = None) -> str:
    """Levenberg-Marquardt for ``budget`` evaluations (Jacobians and trial losses each count
    one); returns "converged", "budget" or "stalled" (no step of any length lowers the loss).

    ``state`` (a dict, updated) carries the damping from one call to the next: a fit's next
    stage starts as cautious as the last one ended, instead of wasting trials to find it again.
    """
    state = {} if state is None else state
    x = problem.get()
    try:
        eq = problem.normal_equations()
    except Refused:
        return "stalled"
    problem.record(eq.loss)
    used, lam, nu, calm = 1, state.get("damping", 1e-3), 2.0, 0
    while used < budget:
        diag = eq.jtj.diagonal()
        # Marquardt's scaling, floored at a tenth of the mean curvature: a key the frames barely
        # see (a damping over a fraction of a swing) is damped like an ordinary one in raw units
        # (its scale) instead of by its own tiny curvature, which would let it run off
        diag = diag.clamp_min(0.1 * float(diag.mean().clamp_min(1e-300)))
        try:
            step = -torch.linalg.solve(eq.jtj + lam * torch.diag(diag), eq.jtr)
        except RuntimeError:  # singular even with the damping: damp more
            lam, nu = lam * nu, nu * 2.0
            continue
        step = _bounded(step, problem.max_step)
        predicted = -float(eq.jtr @ step + 0.5 * step @ (eq.jtj @ step))  # of sum(r^2) / 2
        problem.put(x + step.to(x.dtype))
        try:
            trial = problem.loss_value()
        except Refused:
            trial = math.inf
        problem.record(trial)
        used += 1
        actual = 0.5 * (eq.loss - trial) * eq.cost / max(eq.loss, 1e-300)
        rho = actual / predicted if predicted > 0 else -1.0
        if math.isfinite(trial) and trial < eq.loss and rho > 0:
            change = (eq.loss - trial) / max(eq.loss, 1e-30)
            x = problem.get()
            lam *= max(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
            nu = 2.0
            calm = calm + 1 if change < problem.tolerance else 0
            state["damping"] = lam
            if calm >= 2 or used >= budget:
                return "converged" if calm >= 2 else "budget"
            try:
                eq = problem.normal_equations()
            except Refused:  # the Jacobian's own small steps leave the valid range: stop here
                return "stalled"
            problem.record(eq.loss)
            used += 1
        else:
            problem.put(x)
            lam, nu = lam * nu, nu * 2.0
            state["damping"] = min(lam, 1e3)
            if lam > 1e10:
                return "stalled"
    return "budget"
