"""The first stage of a fit from video: the bodies' projected centres against the blobs.

Before any pixel is rendered, the scene's moving bodies are fitted to where the video's blobs
are (what a classical tracker does: a threshold against the background, the centroid of each
region), through the same physics and camera as the pixel stages: every evaluation rolls the
scene out and projects each drawn moving body's centre into every frame. It is cheap (no
rendering) and reaches far (a blob anywhere in the image is a candidate), so it takes a
user's rough start to where the pixel stages can refine it.

Each frame's blobs are matched to the bodies by the model's prediction (the nearest blob of a
plausible area: a hand or a person merged with a body makes a blob far too large to be it);
bodies that share a blob (a double pendulum's links) are compared as a group, the blob's
centroid against their area-weighted mean. The residuals pass through a Charbonnier loss
(quadratic near zero, linear far out: convex, so a wrong restitution's bounces pull it the
right way however far off they are) whose scale shrinks from stage to stage, and a match
beyond a few scales counts as no match (a constant), so a frame where a hand or a shadow took
the blob pulls little. The horizon grows
from the first fraction of a second to the whole video: a restitution or a friction that is
wrong bends the trajectory only after the first bounce or metre, where a long horizon's
nearest blobs would be the wrong ones.

Levenberg-Marquardt (`diffcam.fit.optimizers`) runs on these residuals; their Jacobian comes
from central differences of one batched rollout (2P + 1 worlds).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from ..fit.evaluate import NormalEquations, batched_values
from ..fit.keys import FitKey
from ..fit.optimizers import Problem, Refused, levenberg_marquardt
from ..fit.result import parameter_covariance
from .blobs import Blobs

__all__ = [
    "CentreFit",
    "centre_equations",
    "fit_centres",
    "match_blobs",
    "predicted_centres",
    "projected",
]

_DIFFERENCE_STEP = {torch.float32: 1e-3, torch.float64: 1e-6}  # raw units
_GATE = 8.0  # a match farther than this many loss scales is no match


@dataclasses.dataclass
class CentreFit:
    """What the centre stage did.

    Attributes:
        status: the last Levenberg-Marquardt run's ("converged", "budget", "stalled").
        evaluations: rollouts (Jacobians and trials) in all.
        matched: the fraction of (frame, body) pairs matched to a blob at the end.
        error_px: the median distance (px) between a matched body's projected centre and its
            blob's centroid at the end.
        stages: per horizon, its frames, loss scale (px), evaluations, loss and status.
        blobs: (T, D) the blob each body is matched to in each frame at the end, -1 for none.
        covariance: (P, P) of the fitted scalars in value units (`fit.result.
            parameter_covariance` of the centre residuals at the end), or None.
        scalars: (key, flat index) of each of the P scalars.
        equations: the residuals' `NormalEquations` at the end (raw units), or None.
        sensitivity: key -> the norm of the centre residuals' derivative with respect to its
            raw scalars at the end, without priors (how much the blobs see the key).
    """

    status: str
    evaluations: int
    matched: float
    error_px: float
    stages: list[dict]
    blobs: torch.Tensor
    covariance: torch.Tensor | None = None
    scalars: list = dataclasses.field(default_factory=list)
    equations: NormalEquations | None = None
    sensitivity: dict = dataclasses.field(default_factory=dict)


def predicted_centres(model, keys: Sequence[FitKey], trainable, rows, bodies, horizon):
    """Projected centres of ``bodies`` for each row of raw scalars.

    Args:
        model: the `diffcam.fit.model.VideoModel`.
        keys, trainable: every fitted key, and those whose raw scalars ``rows`` give.
        rows: (n, P) raw scalars of ``trainable`` (one world each).
        bodies: indices (state order) of the bodies to project.
        horizon: frames [0, horizon) of the model's times.

    Returns:
        (centres (n, T', D, 2) continuous pixels (x, y), radius (n, T', D) the radius (px) of a
        disc of the body's apparent area seen side-on, depth (n, T', D) metres along the
        optical axis).
    """
    n = rows.shape[0]
    with torch.no_grad():
        built = model.build(batched_values(keys, trainable, rows), batch=n, horizon=horizon)
    return projected(built, model.times[:horizon], bodies)


def projected(built, times: torch.Tensor, bodies):
    """`predicted_centres` of a built model (its B worlds) at ``times`` (T',) s."""
    import physics

    with torch.no_grad():
        states = physics.states_at(built.trajectory, times, built.scene.timestep)
        points = states.position[:, :, bodies].transpose(0, 1)  # (n, T', D, 3)
        n = points.shape[0]
        camera = built.scene.camera
        pixels, depth = camera.project_with_depth(points.reshape(n, -1, 3))
        pixels = pixels.view(n, len(times), len(bodies), 2)
        depth = depth.view(n, len(times), len(bodies))
        focal = camera.fy.detach().reshape(-1, 1, 1).expand(n, 1, 1)
        area = _side_area(built.scene.world)[:, bodies]  # (n, D) m^2
        radius = focal * (area / math.pi).sqrt()[:, None, :] / depth.clamp_min(1e-6)
    return pixels.double(), radius.double(), depth.double()


def _side_area(world) -> torch.Tensor:
    """(B, N) each body's silhouette area seen side-on (m^2): a sphere's disc, a capsule's or
    cylinder's side, a box's (or a mesh's stand-in box's: its principal moments') largest
    face."""
    size = world.size
    areas = []
    for i, shape in enumerate(world.shapes):
        s = size[:, i]
        if shape == "sphere":
            areas.append(math.pi * s[:, 0].square())
        elif shape == "capsule":
            areas.append(2 * s[:, 0] * s[:, 1] + math.pi * s[:, 0].square())
        elif shape == "cylinder":
            areas.append(2 * s[:, 0] * s[:, 1])
        elif shape in ("box", "hull"):
            two = s[:, :3].sort(-1).values[:, 1:]
            areas.append(two[:, 0] * two[:, 1])
        else:  # a plane (static): its drawn extent
            areas.append(s[:, 0] * s[:, 1])
    return torch.stack(areas, 1)


class _Centres:
    """The residuals of one horizon and loss scale, and the optimiser's `Problem` on them."""

    def __init__(self, model, keys, trainable, blobs: Blobs, bodies, horizon: int, scale: float):
        self.model, self.keys, self.trainable = model, keys, trainable
        self.bodies, self.horizon, self.scale = list(bodies), int(horizon), float(scale)
        self.centre = blobs.centre[:horizon]  # (T', K, 2)
        self.area = blobs.area[:horizon]  # (T', K)
        self.last = None  # (centres (T', D, 2), matches (T', D)) of the last normal equations

    def raw(self) -> torch.Tensor:
        return torch.cat([k.raw.detach().reshape(-1) for k in self.trainable])

    def prior(self, rows: torch.Tensor) -> torch.Tensor:
        """(n, P) the priors' residuals (raw - raw0) / sigma of rows of raw scalars (0 for a
        scalar without a prior)."""
        start, sigma, centre = 0, [], []
        for k in self.trainable:
            n = k.raw.numel()
            centre.append(k.raw_of(k.init).detach().reshape(-1))
            sigma.append(
                torch.full((n,), math.inf, dtype=rows.dtype, device=rows.device)
                if k.prior is None else k.prior.detach().reshape(-1).to(rows)
            )  # fmt: skip
            start += n
        return (rows - torch.cat(centre).to(rows)) / torch.cat(sigma)

    def match(self, centres, radius, depth) -> torch.Tensor:
        """(T', D) index of the blob each body is matched to at one world's prediction
        (centres (T', D, 2)), -1 for none."""
        blobs = Blobs(self.centre, self.area, None, None)
        return _match(blobs, centres, radius, depth, self.scale, self.model.scene.camera)

    def residuals(self, centres, radius, matched) -> torch.Tensor:
        """(n, T', D, 2) residuals (x, y) of every world's prediction against the matched blobs,
        in loss scales; a body matched to nothing has a constant residual (the gate's)."""
        n, t, d = radius.shape
        has = matched >= 0  # (T', D)
        index = matched.clamp_min(0)
        blob_centre = torch.gather(self.centre, 1, index[..., None].expand(t, d, 2))  # (T', D, 2)
        # bodies that share a blob are compared as a group: their area-weighted centroid
        weight = (math.pi * radius.square()) * has  # (n, T', D)
        share = torch.zeros(n, t, self.centre.shape[1], dtype=radius.dtype, device=radius.device)
        share.scatter_add_(2, index.expand(n, t, d), weight)
        moment = share.new_zeros(n, t, self.centre.shape[1], 2)
        moment.scatter_add_(2, index[..., None].expand(n, t, d, 2), weight[..., None] * centres)
        group = moment / share[..., None].clamp_min(1e-12)
        members = share.new_zeros(t, self.centre.shape[1])
        members.scatter_add_(1, index, has.to(radius.dtype))
        count = torch.gather(members, 1, index).clamp_min(1)  # (T', D)
        grouped = torch.gather(group, 2, index[None, ..., None].expand(n, t, d, 2))
        r = (grouped - blob_centre) / self.scale / count.sqrt()[..., None]  # (n, T', D, 2)
        robust = r * _charbonnier(r.norm(dim=-1, keepdim=True))
        gate = _GATE * float(_charbonnier(torch.tensor(_GATE))) / math.sqrt(2)
        return torch.where(has[..., None], robust, r.new_tensor([gate, gate]))

    def evaluate(self, rows):
        centres, radius, depth = predicted_centres(
            self.model, self.keys, self.trainable, rows, self.bodies, self.horizon
        )
        if not bool(torch.isfinite(centres).all()):
            raise Refused("the rollout or the projection is not finite at these values")
        return centres, radius, depth

    def loss_value(self) -> float:
        rows = self.raw()[None]
        centres, radius, depth = self.evaluate(rows)
        matched = self.match(centres[0], radius[0], depth[0])
        r = self.residuals(centres, radius, matched)
        return float(r.square().sum() + self.prior(rows).square().sum()) / r[0].numel()

    def normal_equations(self) -> NormalEquations:
        x = self.raw()
        p = x.numel()
        step = _DIFFERENCE_STEP.get(x.dtype, 1e-3)
        offsets = torch.zeros(2 * p + 1, p, dtype=x.dtype, device=x.device)
        eye = torch.eye(p, dtype=x.dtype, device=x.device) * step
        offsets[1::2], offsets[2::2] = eye, -eye
        centres, radius, depth = self.evaluate(x + offsets)
        matched = self.match(centres[0], radius[0], depth[0])
        self.last = (centres[0], matched)
        r = self.residuals(centres, radius, matched).flatten(2)  # (2P + 1, T', 2 D)
        primal = r[0]
        jac = ((r[1::2] - r[2::2]) / (2 * step)).permute(1, 2, 0)  # (T', 2 D, P)
        jtj = torch.einsum("tnp,tnq->pq", jac, jac)
        frame_jtr = torch.einsum("tnp,tn->tp", jac, primal)
        count = primal.numel()
        prior = self.prior(x[None].double())[0]
        inverse = 1.0 / torch.cat([
            torch.full((k.raw.numel(),), math.inf, dtype=torch.float64) if k.prior is None
            else k.prior.detach().reshape(-1).double() for k in self.trainable
        ])  # fmt: skip
        self.sensitivity = jtj.diagonal().clamp_min(0).sqrt()  # the data's, without priors
        jtj = jtj + torch.diag(inverse.square())
        jtr = frame_jtr.sum(0) + prior * inverse
        cost = float(primal.square().sum() + prior.square().sum())
        return NormalEquations(cost / count, jtj, jtr, frame_jtr, cost, count)

    def matches(self) -> tuple[torch.Tensor, float]:
        """(the blob each body is matched to per frame, (T', D) long, -1 for none; the median
        matched distance in px), at the last normal equations' point if they were taken."""
        if self.last is None:
            centres, radius, depth = self.evaluate(self.raw()[None])
            self.last = (centres[0], self.match(centres[0], radius[0], depth[0]))
        centres, matched = self.last
        has = matched >= 0
        if not bool(has.any()):
            return matched, math.inf
        index = matched.clamp_min(0)
        blob = torch.gather(self.centre, 1, index[..., None].expand(*index.shape, 2))
        distance = (blob - centres).norm(dim=-1)[has]
        return matched, float(distance.median())


def _match(blobs: Blobs, centres, radius, depth, scale: float, camera) -> torch.Tensor:
    """(T', D) index of the blob of ``blobs`` (its first T' frames) each body is matched to
    for one world's prediction (centres (T', D, 2), radius and depth (T', D)), -1 for none:
    the nearest blob of a plausible area within a few loss scales."""
    horizon = centres.shape[0]
    centre, area = blobs.centre[:horizon], blobs.area[:horizon, None, :]  # area (T', 1, K)
    predicted_area = math.pi * radius.square()  # (T', D)
    # a blob much larger than all the bodies is a body merged with something else (a hand,
    # a person): its centroid is not the bodies'
    together = predicted_area.sum(-1, keepdim=True)[..., None]  # (T', 1, 1)
    # and one much smaller a fragment: of a body behind a hand, or a speck of noise
    small = torch.clamp_min(0.25 * predicted_area[..., None], 2.0)  # (T', D, 1)
    plausible = (area > 0) & (area <= 2.5 * together + 10.0) & (area >= small)
    distance = (centre[:, None, :, :] - centres[:, :, None, :]).norm(dim=-1)
    distance = torch.where(plausible, distance, torch.full_like(distance, math.inf))
    nearest, index = distance.min(-1)
    width, height = camera.width, camera.height
    inside = (centres[..., 0] > -radius) & (centres[..., 0] < width + radius)
    inside &= (centres[..., 1] > -radius) & (centres[..., 1] < height + radius)
    ok = (nearest < _GATE * scale + radius) & inside & (depth > 0)
    return torch.where(ok, index, torch.full_like(index, -1))


def _charbonnier(norm: torch.Tensor) -> torch.Tensor:
    """The factor that makes a residual of length ``norm`` (in loss scales) a Charbonnier
    one: squared, 2 (sqrt(1 + norm^2) - 1), quadratic near 0 and growing like 2 norm."""
    return torch.sqrt(2.0 / (torch.sqrt(1.0 + norm.square()) + 1.0))


def centre_equations(model, keys, trainable, blobs: Blobs, bodies, scale: float):
    """The centre residuals' `NormalEquations` over every frame of ``model`` at the keys'
    values, with loss ``scale`` (px)."""
    problem = _Centres(model, keys, trainable, blobs, bodies, model.frame_count, scale)
    return problem.normal_equations()


def match_blobs(built, times, blobs: Blobs, bodies, scale: float) -> torch.Tensor:
    """(T, D) the blob each body is matched to in each frame of a built model (batch 1) at
    ``times`` (T,), -1 for none (nearer than a few loss ``scale`` (px), of a plausible area)."""
    centres, radius, depth = projected(built, times, bodies)
    return _match(blobs, centres[0], radius[0], depth[0], scale, built.scene.camera)


def _horizons(times: torch.Tensor, first: float) -> list[int]:
    """Frame counts of growing horizons: ``first`` seconds (at least 6 frames), doubling to
    two seconds, then growing four times at a step."""
    count = times.shape[0]
    spans, h = [], first
    while True:
        span = max(6, int((times <= float(times[0]) + h + 1e-9).sum()))
        if span >= count:
            spans.append(count)
            return spans
        if not spans or span > spans[-1]:
            spans.append(span)
        h *= 2.0 if h < 2.0 else 4.0  # past the first seconds a fit reaches far


def fit_centres(
    model,
    keys: Sequence[FitKey],
    trainable: Sequence[FitKey],
    blobs: Blobs,
    bodies: Sequence[int],
    *,
    budget: int = 60,
    first_horizon: float = 0.25,
    scales: tuple[float, float] | None = None,
    max_step: float = 4.0,
    record=None,
    uncertainty: bool = True,
) -> CentreFit:
    """Fit the trainable keys so that the bodies' projected centres follow the blobs.

    Args:
        model: the `diffcam.fit.model.VideoModel` (its times are the blobs' frames').
        keys, trainable: every key, and those to fit (their ``raw`` is changed in place).
        blobs: `find_blobs` of the video's foreground masks.
        bodies: the drawn moving bodies (state indices) to match to blobs.
        budget: rollouts (Jacobians and trials) in all, shared by the horizons; 0 fits
            nothing (the matches and the covariance at the keys' values).
        first_horizon: seconds of video in the first horizon (doubling to the whole video).
        scales: the Cauchy loss's scale (px) in the first and the last horizon (default
            from a twelfth of the image's width down to a pixel at 160 px wide).
        max_step: the largest change of a raw parameter per step.
        record: optional callable(loss) called once per evaluation (progress).
        uncertainty: also the covariance of the fitted scalars at the end.
    """
    width = model.scene.camera.width
    if scales is None:
        scales = (width / 12.0, max(1.0, width / 160.0))
    spans = _horizons(model.times, first_horizon)
    stages: list[dict] = []
    used, status, damping = 0, "budget", {}
    for i, span in enumerate(spans if budget > 0 else []):
        fraction = i / max(len(spans) - 1, 1)
        scale = scales[0] * (scales[1] / scales[0]) ** fraction
        problem = _Centres(model, keys, trainable, blobs, bodies, span, scale)
        share = max(3, (budget - used) // (len(spans) - i))
        losses: list[float] = []

        def note(value: float, losses=losses) -> None:
            losses.append(float(value))
            if record is not None:
                record(value)

        status = levenberg_marquardt(
            Problem(
                raws=[k.raw for k in trainable], lrs=[None] * len(trainable),
                loss_gradient=_unused, loss_value=problem.loss_value,
                normal_equations=problem.normal_equations, record=note,
                max_step=max_step, tolerance=1e-4,
            ),
            share,
            damping,
        )  # fmt: skip
        used += len(losses)
        stages.append({
            "horizon_frames": span, "scale_px": scale, "evaluations": len(losses),
            "loss": min(losses, default=math.nan), "status": status,
        })  # fmt: skip
    final = _Centres(model, keys, trainable, blobs, bodies, spans[-1], scales[1])
    covariance = equations = None
    if uncertainty:
        equations = final.normal_equations()
        covariance = parameter_covariance(equations, spans[-1], trainable)
    blob, error = final.matches()
    scalars = [(k.key, i) for k in trainable for i in range(k.raw.numel())]
    sensitivity = {}
    if equations is not None:  # how much the centres move per raw unit of each key
        for (key, _), value in zip(scalars, final.sensitivity.tolist(), strict=True):
            sensitivity[key] = math.hypot(sensitivity.get(key, 0.0), value)
    return CentreFit(status, used, float((blob >= 0).double().mean()), error, stages, blob,
                     covariance, scalars, equations, sensitivity)  # fmt: skip


def _unused() -> float:
    raise RuntimeError("the centre stage runs Levenberg-Marquardt only")
