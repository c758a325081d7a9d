"""Fit scene parameters to observed video frames by gradient descent through physics + rendering.

::

    result = diffcam.fit_scene(
        "scenes/pendulum.toml", observed,  # observed: (T, 3, H, W) in [0, 1] or a video file
        keys={"joints.pivot.damping": {"init": 0.1, "positive": True}},
    )
    result.values["joints.pivot.damping"], result.unidentifiable, result.history

Each iteration reloads the scene with the current override tensors (the world's derived tensors
carry the graph), rolls it out with the known actions, renders every state and takes the mean
squared pixel error against the observed frames; Adam updates the (reparameterised) parameters.
Parameters the initial gradient cannot see are reported in ``unidentifiable`` and left alone.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

__all__ = ["FitResult", "fit_scene", "render_rollout"]

_POSITION_OFFSET = "initial_state.position_offset"
_VELOCITY_OFFSET = "initial_state.velocity_offset"
# Adam with short memories: fits run tens to hundreds of iterations, where the default
# (0.9, 0.999) overshoots (momentum) and then crawls (v remembers the large early gradients).
_BETAS = (0.5, 0.9)
_PATIENCE = 5  # iterations of relative loss change below ``tolerance`` before stopping


@dataclass
class FitResult:
    """What `fit_scene` found.

    Attributes:
        values: key path -> fitted value (detached; the key's own shape and units). With
            ``fit_initial_state`` also ``"initial_state.position_offset"`` (N, 3) m and
            ``"initial_state.velocity_offset"`` (N, 3) m/s, N bodies in state order (rows of
            static bodies stay zero).
        history: the loss (mean squared pixel error, at that iteration's pyramid level) per
            iteration (per loss evaluation for L-BFGS and Levenberg-Marquardt).
        gradient_norms: key path -> |d loss / d raw parameter| at the initial values (the raw
            parameter is log(value) for ``positive`` keys, the logit of the position within
            ``bounds`` for bounded keys, else the value itself).
        unidentifiable: key paths whose initial gradient was (near) zero; kept at ``init``.
        frames: (T, 3, H, W) rendered frames of the fitted rollout, in [0, 1] (detached).
        iterations: optimisation iterations run (early stopping may end before ``iterations``).
        seconds: wall-clock time of the whole fit.
    """

    values: dict[str, torch.Tensor]
    history: list[float]
    gradient_norms: dict[str, float]
    unidentifiable: list[str]
    frames: torch.Tensor
    iterations: int
    seconds: float
    levels: list[int] = field(default_factory=list)  # pyramid level of each iteration (0 = full)
    # key path -> the value at each entry of ``history`` (detached): before each Adam update, at
    # each L-BFGS or Levenberg-Marquardt evaluation
    value_history: dict[str, list[torch.Tensor]] = field(default_factory=dict)


# --------------------------------------------------------------------------- reparameterisation
@dataclass
class _Param:
    key: str
    raw: torch.Tensor  # leaf tensor that Adam optimises
    positive: bool
    bounds: tuple[float, float] | None
    lr: float | None = None  # this key's initial Adam learning rate (None: fit_scene's lr)

    def value(self) -> torch.Tensor:
        return self.value_of(self.raw)

    def value_of(self, raw: torch.Tensor) -> torch.Tensor:
        """The key's value for a raw parameter ``raw`` (the shape of ``self.raw``)."""
        if self.positive:
            return torch.exp(raw)
        if self.bounds is not None:
            lo, hi = self.bounds
            return lo + (hi - lo) * torch.sigmoid(raw)
        return raw


def _make_param(key: str, spec: Any, dtype: torch.dtype) -> _Param:
    if not isinstance(spec, Mapping) or "init" not in spec:
        raise ValueError(
            f"keys[{key!r}]: expected a dict with 'init' (and optionally 'positive', "
            f"'bounds', 'lr'), got {spec!r}"
        )
    unknown = set(spec) - {"init", "positive", "bounds", "lr"}
    if unknown:
        raise ValueError(
            f"keys[{key!r}]: unknown spec entries {sorted(unknown)}; "
            "accepted: 'init', 'positive', 'bounds', 'lr'"
        )
    init = spec["init"]
    init = (
        init.detach().to(dtype=dtype).clone()
        if isinstance(init, torch.Tensor)
        else torch.as_tensor(init, dtype=dtype)
    )
    positive = bool(spec.get("positive", False))
    bounds = spec.get("bounds")
    if positive and bounds is not None:
        raise ValueError(f"keys[{key!r}]: give 'positive' or 'bounds', not both")
    if positive:
        if not bool((init > 0).all()):
            raise ValueError(f"keys[{key!r}]: 'positive' needs init > 0, got {init.tolist()}")
        raw = torch.log(init)
    elif bounds is not None:
        lo, hi = (float(b) for b in bounds)
        if not lo < hi:
            raise ValueError(f"keys[{key!r}]: bounds must be (lo, hi) with lo < hi, got {bounds}")
        if not bool(((init > lo) & (init < hi)).all()):
            raise ValueError(
                f"keys[{key!r}]: init {init.tolist()} must lie strictly inside bounds {bounds}"
            )
        u = (init - lo) / (hi - lo)
        raw = torch.log(u) - torch.log1p(-u)
        bounds = (lo, hi)
    else:
        raw = init
    key_lr = spec.get("lr")
    if key_lr is not None and not (isinstance(key_lr, (int, float)) and 0 < key_lr < math.inf):
        raise ValueError(f"keys[{key!r}]: 'lr' must be a positive number, got {key_lr!r}")
    key_lr = None if key_lr is None else float(key_lr)
    return _Param(key, raw.clone().requires_grad_(True), positive, bounds, key_lr)


# --------------------------------------------------------------------------- observed frames
def _read_observed(observed, dtype: torch.dtype) -> torch.Tensor:
    """(T, 3, H, W) float frames in [0, 1] from a tensor/array or a video file."""
    if isinstance(observed, (str, Path)):
        import imageio.v3 as iio

        arr = iio.imread(observed)  # (T, H, W, C) uint8
        frames = torch.as_tensor(arr)
        if frames.dim() == 3:  # grey video
            frames = frames[..., None].expand(*frames.shape, 3)
        frames = frames[..., :3].permute(0, 3, 1, 2).to(dtype) / 255.0
        return frames.contiguous()
    frames = torch.as_tensor(observed).detach().to(dtype)
    if frames.dim() != 4 or frames.shape[1] != 3:
        raise ValueError(f"observed frames must have shape (T, 3, H, W), got {tuple(frames.shape)}")
    return frames


# --------------------------------------------------------------------------- the model
def render_rollout(
    scene_path,
    overrides: Mapping[str, Any] | None,
    actions: torch.Tensor | None,
    steps: int,
    *,
    dtype: torch.dtype = torch.float32,
    edge_softness: float = 0.0,
    position_offset: torch.Tensor | None = None,
    velocity_offset: torch.Tensor | None = None,
    frame_every: int = 1,
    compile_physics: bool = False,
    time_chunk: int = 16,
) -> torch.Tensor:
    """The frames a scene with these overrides renders along a rollout (batch size 1).

    This is the model `fit_scene` compares with the observed frames; derivative-free baselines
    can call it too (under ``torch.no_grad()``).

    Args:
        scene_path: the TOML scene file.
        overrides: key path -> value (tensors may require grad), as for `load_scene`.
        actions: (steps, 1, n_actuators) actions (the actuators' units), or None for none.
        steps: physics steps.
        dtype: scene dtype.
        edge_softness: silhouette softness in pixels (0 = hard edges).
        position_offset, velocity_offset: optional (N, 3) additions (m, m/s) to the initial
            positions and linear velocities of the bodies.
        frame_every: render every this many physics steps (a camera slower than the physics).
        compile_physics: step the physics with `physics.compiled_step` (torch.compile; a
            one-off compilation of tens of seconds, then several times faster at batch size 1).
        time_chunk: frames rendered per renderer call (memory and speed only; the frames are
            the same).

    Returns:
        (steps // frame_every + 1, 3, H, W) frames in [0, 1]; frame i shows the state after
        i * frame_every steps.
    """
    frames = _rollout_frames(
        scene_path, overrides, actions, steps, 1, dtype=dtype, edge_softness=edge_softness,
        position_offset=position_offset, velocity_offset=velocity_offset,
        frame_every=frame_every, compile_physics=compile_physics, time_chunk=time_chunk,
    )  # fmt: skip
    return frames[:, 0]


def _rollout_frames(
    scene_path, overrides, actions, steps, batch_size, *, dtype, edge_softness, position_offset,
    velocity_offset, frame_every, compile_physics, time_chunk,
) -> torch.Tensor:  # fmt: skip
    """`render_rollout` for a batch of worlds: (T', B, 3, H, W); overrides (B, ...) or shared,
    actions (steps, B or 1, A), offsets (B or 1, N, 3)."""
    import physics

    from .scene import load_scene

    scene = load_scene(scene_path, batch_size=batch_size, dtype=dtype, overrides=overrides)
    state = scene.initial_state()
    if position_offset is not None:
        state = state.replace(position=state.position + position_offset)
    if velocity_offset is not None:
        state = state.replace(linear_velocity=state.linear_velocity + velocity_offset)
    if actions is not None and actions.shape[1] != batch_size:
        actions = actions.expand(steps, batch_size, actions.shape[-1])
    trajectory = physics.rollout(
        scene.world, state, steps, actions=actions, compile=compile_physics
    )
    times = torch.arange(0, steps + 1, frame_every, device=state.position.device)
    if batch_size > 1:  # a scene's per-body sizes are (B, ...): one frame of all worlds per call
        return torch.stack(
            [scene.render(trajectory[int(t)], edge_softness=edge_softness) for t in times]
        )
    # One world: its frames as one batch (time x 1), a chunk of frames per renderer call.
    # Several frames per call amortise the per-call cost, while a chunk of consecutive frames
    # keeps the soft-edge pixel windows (a union over the chunk) small.
    frames = physics.State(*(x[times].flatten(0, 1) for x in trajectory.tensors()))
    chunks = [
        scene.render(
            physics.State(*(x[i : i + time_chunk] for x in frames.tensors())),
            edge_softness=edge_softness,
        )
        for i in range(0, len(times), time_chunk)
    ]
    return torch.cat(chunks, 0)[:, None]


def _adam(params, offsets, unidentifiable, loss_at, budget, iterations, lr, tolerance, record,
          snapshot) -> None:  # fmt: skip
    """Adam with a cosine-decaying step, ``budget[i]`` iterations at pyramid level L-1-i."""
    lr = 0.05 if lr is None else lr
    # one parameter group per key, so that a key's own "lr" applies to it alone
    groups = [
        {"params": [p.raw], "lr": lr if p.lr is None else p.lr}
        for p in params
        if p.key not in unidentifiable
    ]
    if offsets:
        groups.append({"params": list(offsets.values()), "lr": lr})
    optimizer = torch.optim.Adam(groups, lr=lr, betas=_BETAS)
    # cosine decay from lr to lr / 10 over the whole budget: Adam's constant-size steps
    # otherwise keep the parameters oscillating around the optimum by about lr.
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda i: 0.1 + 0.45 * (1.0 + math.cos(math.pi * min(i / max(iterations - 1, 1), 1.0))),
    )
    levels = len(budget)
    for idx, level in enumerate(range(levels - 1, -1, -1)):
        calm, previous = 0, None
        for _ in range(budget[idx]):
            optimizer.zero_grad(set_to_none=True)
            snapshot()
            loss, _ = loss_at(level)
            loss.backward()
            optimizer.step()
            schedule.step()
            value = record(loss, level)
            if previous is not None:
                change = abs(previous - value) / max(abs(previous), 1e-30)
                calm = calm + 1 if change < tolerance else 0
            previous = value
            if calm >= _PATIENCE:
                break


def _lbfgs(trainable, loss_at, budget, lr, tolerance, record, snapshot) -> None:
    """torch.optim.LBFGS with a strong-Wolfe line search, ``budget[i]`` loss evaluations at
    pyramid level L-1-i (the line search may finish its last iteration a few beyond)."""
    levels = len(budget)
    for idx, level in enumerate(range(levels - 1, -1, -1)):
        if budget[idx] < 1:
            continue
        optimizer = torch.optim.LBFGS(
            trainable,
            lr=1.0 if lr is None else lr,
            max_iter=budget[idx],
            max_eval=budget[idx],
            history_size=20,
            tolerance_grad=0.0,  # stop on the loss: pixel losses are tiny numbers
            tolerance_change=tolerance,
            line_search_fn="strong_wolfe",
        )
        scale: list[float] = []  # 1 / the level's first loss: the search sees a loss of order 1

        def closure(level=level, scale=scale, optimizer=optimizer):
            optimizer.zero_grad(set_to_none=True)
            snapshot()
            loss, _ = loss_at(level)
            value = record(loss, level)
            if not scale:
                scale.append(1.0 / value if value > 0 else 1.0)
            scaled = loss * scale[0]
            scaled.backward()
            return scaled.detach()

        optimizer.step(closure)


_LM_MAX_PARAMETERS = 64  # Jacobian columns: one batched forward-mode rollout per 8 of them
_LM_GROUP = 8
_LM_MAX_STEP = 2.0


def _levenberg_marquardt(raws, residuals, budget, tolerance, record, snapshot) -> None:
    """Levenberg-Marquardt on the raw parameters, ``budget[i]`` evaluations at level L-1-i.

    ``residuals(level)`` -> (r (M,), J (M, P)) at the raws' current values; P = all raw
    scalars in order. A step solves (JᵀJ + λ diag(JᵀJ)) δ = -Jᵀr (Marquardt's scaling makes it
    invariant to the parameters' units); it is kept when the loss falls (λ / 3), else undone
    (λ x 4). Each evaluation (accepted or not) is one entry of the history.
    """
    from physics import SimulationError

    from .errors import SceneError

    def get() -> torch.Tensor:
        return torch.cat([r.detach().reshape(-1) for r in raws])

    def put(x: torch.Tensor) -> None:
        with torch.no_grad():
            i = 0
            for r in raws:
                r.copy_(x[i : i + r.numel()].view_as(r))
                i += r.numel()

    levels = len(budget)
    for idx, level in enumerate(range(levels - 1, -1, -1)):
        if budget[idx] < 1:
            continue
        snapshot()
        r, J = residuals(level)
        loss = float(r.square().mean())
        record(torch.tensor(loss), level)
        x, lam, calm = get(), 1e-3, 0
        for _ in range(budget[idx] - 1):
            J64, r64 = J.to(torch.float64), r.to(torch.float64)
            A = J64.T @ J64
            g = J64.T @ r64
            # Marquardt's scaling, floored so that a direction the images barely see (a column
            # near zero) gets a small step instead of its noise divided by nothing
            diag = A.diagonal().clamp_min(1e-6 * float(A.diagonal().max().clamp_min(1e-300)))
            step = -torch.linalg.solve(A + lam * torch.diag(diag), g)
            # at most _LM_MAX_STEP per raw unit (a factor e^2 for positive keys): far from the
            # optimum the linear model is poor, and a wild step would leave the valid range
            step = step.clamp(-_LM_MAX_STEP, _LM_MAX_STEP)
            put(x + step.to(x.dtype))
            snapshot()
            try:
                r_new, J_new = residuals(level)
                new_loss = float(r_new.square().mean())
            except (SceneError, SimulationError):  # e.g. a length the scene refuses
                r_new, J_new, new_loss = None, None, math.inf
            record(torch.tensor(new_loss), level)
            if new_loss < loss:  # (a NaN loss is rejected too)
                change = (loss - new_loss) / max(loss, 1e-30)
                x, r, J, loss = get(), r_new, J_new, new_loss
                lam = max(lam / 3.0, 1e-9)
                calm = calm + 1 if change < tolerance else 0
                if calm >= 2:
                    break
            else:
                put(x)
                lam *= 4.0
                if lam > 1e8:  # no step of any length lowers the loss: a (local) minimum
                    break
        put(x)


# --------------------------------------------------------------------------- the fit
def fit_scene(
    scene_path,
    observed,
    keys: dict[str, dict],
    actions=None,
    steps: int | None = None,
    *,
    iterations: int = 200,
    lr: float | None = None,
    optimizer: str = "adam",
    pyramid_levels: int = 1,
    edge_softness: float = 0.0,
    dtype: torch.dtype = torch.float32,
    progress: bool = True,
    tolerance: float = 1e-7,
    fit_initial_state: bool = False,
    to_overrides=None,
    frame_every: int = 1,
    compile_physics: bool = False,
) -> FitResult:
    """Fit override values of a scene so that its rendered rollout matches observed frames.

    Args:
        scene_path: the TOML scene file (DESIGN.md section 6).
        observed: (T, 3, H, W) frames in [0, 1] (tensor or array), frame i the render of the
            state after i * frame_every steps (frame 0 the initial state); or a path to a
            video file (read with imageio.v3, divided by 255). H, W must equal the camera
            resolution.
        keys: override key path (``joints.pivot.damping``...) -> ``{"init": value,
            "positive": bool, "bounds": (lo, hi) or None}``; ``init`` in the key's own shape and
            units. ``positive`` optimises log(value); ``bounds`` optimises the logit of
            (value - lo) / (hi - lo); otherwise the value itself. An optional ``"lr"`` sets
            this key's initial learning rate in those raw units (default ``lr``): keys of
            different units, or a texture's thousands of logits next to a metre, each get a
            step size of their own.
        actions: (steps, n_actuators) known actions in ``scene.actuator_names`` order (the
            actuators' units: N or N m for force motors...); None = zeros.
        steps: number of physics steps (default (T - 1) * frame_every; must equal it).
        iterations: the budget, shared equally between pyramid levels: Adam iterations; for
            ``"lbfgs"`` loss evaluations (line search trials included; the last line search
            may run a few over); for ``"lm"`` evaluations of the residuals and their Jacobian
            (rejected steps included).
        lr: Adam's initial learning rate (default 0.05; betas (0.5, 0.9)) in raw-parameter
            units (log units for ``positive`` keys), decaying along a cosine to lr / 10 at the
            end; L-BFGS's first step length (default 1, on the scaled loss).
        optimizer: ``"adam"`` (first order; any number of parameters, e.g. textures),
            ``"lbfgs"`` (`torch.optim.LBFGS`, strong-Wolfe line search on the loss scaled by
            its first value: long exploratory steps, good far from the optimum, e.g. on a
            coarse pyramid level; it stalls on parameters the images barely see), or ``"lm"``
            (Levenberg-Marquardt on the pixel residuals, for at most 64 scalars: from close
            enough it converges in a handful of evaluations on parameters that the images
            confound -- mass and damping -- where first-order methods zig-zag; being local,
            it can stall far from the optimum, so start it from an ``"lbfgs"`` or ``"adam"``
            fit). ``"lm"`` takes the residuals' Jacobian by forward-mode AD, one batched
            rollout (a world per column, 8 columns per rollout) per evaluation, with eager
            physics; an evaluation costs about two of Adam's iterations. Per-key ``"lr"`` is
            Adam's only; ``compile_physics`` is not used by ``"lm"``.
        pyramid_levels: L > 1 compares frames average-pooled by 2^(L-1), ..., 2, 1 (coarse to
            fine) for equal shares of the iterations.
        edge_softness: passed to `Scene.render` (pixels); > 0 gives silhouette gradients.
        frame_every: physics steps between observed frames (a camera slower than the physics;
            fewer renders per iteration).
        compile_physics: step the physics through torch.compile (see `render_rollout`).
        dtype: float32 or float64 for the scene and the parameters.
        progress: show a tqdm bar with the loss.
        tolerance: stop (at the finest level; move on to the next level otherwise) when the
            loss's relative change stays below this for 5 iterations (Adam) or for 2 accepted
            steps (Levenberg-Marquardt), or (L-BFGS) a step changes the loss by less than
            this times the level's first loss.
        fit_initial_state: also fit additive offsets, (N, 3) m and (N, 3) m/s, to the initial
            positions and linear velocities of the dynamic bodies (rotations are kept).
        to_overrides: optional function from the fitted values (key -> tensor) to the scene
            overrides (key path -> tensor), for parameters that are not one scene number: e.g.
            a pole length that sets both ``bodies.pole.size`` and ``bodies.pole.position``
            (keys may then be any names). Default: the keys are the override paths.

    Returns:
        A `FitResult`.

    Raises:
        diffcam.SceneError: a key path the scene does not have (or a bad value for it).
        ValueError: frames whose H, W differ from the camera resolution, a bad action shape,
            ``steps`` not equal to (T - 1) * frame_every, or a bad key spec.
    """
    from tqdm.auto import tqdm

    from .scene import load_scene

    start = time.perf_counter()
    if not isinstance(keys, Mapping):
        raise ValueError(f"keys must be a dict of key path -> spec, got {type(keys).__name__}")
    params = [_make_param(k, spec, dtype) for k, spec in keys.items()]
    if optimizer not in ("adam", "lbfgs", "lm"):
        raise ValueError(f"optimizer must be 'adam', 'lbfgs' or 'lm', got {optimizer!r}")
    if pyramid_levels < 1 or int(pyramid_levels) != pyramid_levels:
        raise ValueError(f"pyramid_levels must be an integer >= 1, got {pyramid_levels!r}")
    pyramid_levels = int(pyramid_levels)

    def overrides() -> dict[str, torch.Tensor]:
        values = {p.key: p.value() for p in params}
        return dict(to_overrides(values)) if to_overrides is not None else values

    # Load once with the initial values: unknown key paths raise the loader's SceneError.
    scene0 = load_scene(scene_path, batch_size=1, dtype=dtype, overrides=overrides())
    width, height = scene0.camera.width, scene0.camera.height
    target = _read_observed(observed, dtype).to(scene0.device)
    if tuple(target.shape[-2:]) != (height, width):
        raise ValueError(
            f"observed frames are {tuple(target.shape[-2:])} (H, W) but the scene camera renders "
            f"{(height, width)} (H, W) (camera.resolution = [{width}, {height}]); "
            f"observed shape {tuple(target.shape)}"
        )
    n_frames = target.shape[0]
    if n_frames < 2:
        raise ValueError(f"need at least 2 observed frames, got {n_frames}")
    if frame_every < 1 or int(frame_every) != frame_every:
        raise ValueError(f"frame_every must be an integer >= 1, got {frame_every!r}")
    if steps is None:
        steps = (n_frames - 1) * frame_every
    if steps != (n_frames - 1) * frame_every:
        raise ValueError(
            f"steps = {steps} but {n_frames} observed frames, one every {frame_every} steps, "
            f"need steps = (T - 1) * frame_every = {(n_frames - 1) * frame_every}"
        )
    n_act = len(scene0.actuator_names)
    if actions is not None:
        actions = torch.as_tensor(actions).detach().to(device=scene0.device, dtype=dtype)
        if tuple(actions.shape) != (steps, n_act):
            raise ValueError(
                f"actions must have shape (steps, n_actuators) = {(steps, n_act)}, "
                f"got {tuple(actions.shape)}"
            )
        actions = actions[:, None, :]  # (steps, B=1, A)
    elif n_act:
        actions = torch.zeros(steps, 1, n_act, device=scene0.device, dtype=dtype)

    n_bodies = len(scene0.body_names)
    dynamic = torch.tensor(
        [not s for s in scene0.world.is_static], device=scene0.device, dtype=dtype
    )[:, None]
    offsets: dict[str, torch.Tensor] = {}
    if fit_initial_state:
        for name in (_POSITION_OFFSET, _VELOCITY_OFFSET):
            offsets[name] = torch.zeros(
                n_bodies, 3, device=scene0.device, dtype=dtype, requires_grad=True
            )

    def simulate(with_grad: bool) -> torch.Tensor:
        """(T, 3, H, W) rendered frames of the rollout with the current parameters."""
        with torch.set_grad_enabled(with_grad):
            return render_rollout(
                scene_path, overrides(), actions, steps, dtype=dtype, edge_softness=edge_softness,
                frame_every=frame_every, compile_physics=compile_physics,
                position_offset=offsets[_POSITION_OFFSET] * dynamic if offsets else None,
                velocity_offset=offsets[_VELOCITY_OFFSET] * dynamic if offsets else None,
            )  # fmt: skip

    def pool(frames: torch.Tensor, level: int) -> torch.Tensor:
        k = min(2**level, height, width)
        return F.avg_pool2d(frames, k) if k > 1 else frames

    def loss_at(level: int) -> tuple[torch.Tensor, torch.Tensor]:
        frames = simulate(True)
        return F.mse_loss(pool(frames, level), pool(target, level)), frames

    def residuals(level: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Pixel residuals r (M,) and their Jacobian J (M, P) with respect to the trainable
        raw scalars, by forward-mode AD: world b of a batched rollout carries the tangent of
        raw scalar b, so one rollout gives up to _LM_GROUP columns."""
        from torch.autograd import forward_ad

        x = torch.cat([t.detach().reshape(-1) for t in trainable])
        P = x.numel()
        goal = pool(target, level).reshape(-1)
        columns, primal = [], None
        for c0 in range(0, P, _LM_GROUP):
            n = min(_LM_GROUP, P - c0)
            tangent = torch.zeros(n, P, dtype=x.dtype, device=x.device)
            tangent[:, c0 : c0 + n] = torch.eye(n, dtype=x.dtype, device=x.device)
            with torch.no_grad(), forward_ad.dual_level():
                X = forward_ad.make_dual(x.expand(n, P).clone(), tangent)
                worlds = []
                for b in range(n):
                    raw_of, i = {}, 0
                    for t in trainable:
                        raw_of[id(t)] = X[b, i : i + t.numel()].view_as(t)
                        i += t.numel()
                    values = {p.key: p.value_of(raw_of.get(id(p.raw), p.raw)) for p in params}
                    over = dict(to_overrides(values)) if to_overrides is not None else values
                    over = {
                        k: torch.as_tensor(v, dtype=dtype, device=x.device) for k, v in over.items()
                    }
                    offs = {k: raw_of[id(o)] * dynamic for k, o in offsets.items()}
                    worlds.append((over, offs))
                batched = {k: torch.stack([w[0][k] for w in worlds]) for k in worlds[0][0]}
                offs = {k: torch.stack([w[1][k] for w in worlds]) for k in offsets}
                frames = _rollout_frames(
                    scene_path,
                    batched,
                    actions,
                    steps,
                    n,
                    dtype=dtype,
                    edge_softness=edge_softness,
                    position_offset=offs.get(_POSITION_OFFSET),
                    velocity_offset=offs.get(_VELOCITY_OFFSET),
                    frame_every=frame_every,
                    compile_physics=False,
                    time_chunk=1,
                )  # fmt: skip  (T', n, 3, H, W)
                value, tangent_frames = forward_ad.unpack_dual(frames)
            if primal is None:
                primal = pool(value[:, 0], level).reshape(-1) - goal
            if tangent_frames is None:  # nothing on the path depends on these columns
                tangent_frames = torch.zeros_like(value)
            for b in range(n):
                columns.append(pool(tangent_frames[:, b], level).reshape(-1))
        return primal, torch.stack(columns, 1)

    # ---- identifiability: gradient at the initial values (full resolution)
    gradient_norms: dict[str, float] = {}
    unidentifiable: list[str] = []
    if params:
        loss0, _ = loss_at(0)
        grads = torch.autograd.grad(
            loss0, [p.raw for p in params], allow_unused=True, materialize_grads=True
        )
        norms = [float(g.detach().norm()) for g in grads]
        gradient_norms = {p.key: n for p, n in zip(params, norms, strict=True)}
        scale = max(1.0, max(norms))
        for p, n in zip(params, norms, strict=True):
            if n == 0.0 or not math.isfinite(n) or n < 1e-8 * scale:
                unidentifiable.append(p.key)
                p.raw.requires_grad_(False)
        if unidentifiable:
            warnings.warn(
                "fit_scene: the loss does not depend on "
                + ", ".join(repr(k) for k in unidentifiable)
                + " at the initial values (zero gradient); left at their initial values",
                stacklevel=2,
            )

    # ---- optimisation, coarse to fine
    trainable = [p.raw for p in params if p.key not in unidentifiable] + list(offsets.values())
    n_scalars = sum(t.numel() for t in trainable)
    if optimizer == "lm" and n_scalars > _LM_MAX_PARAMETERS:
        raise ValueError(
            f"optimizer='lm' builds a Jacobian column per fitted scalar; these keys have "
            f"{n_scalars} (at most {_LM_MAX_PARAMETERS}): use optimizer='adam' for textures "
            "and other large parameters"
        )
    history: list[float] = []
    levels_run: list[int] = []
    value_history: dict[str, list[torch.Tensor]] = {p.key: [] for p in params}

    def record(loss: torch.Tensor, level: int) -> float:
        value = float(loss.detach())
        history.append(value)
        levels_run.append(level)
        bar.update(1)
        bar.set_postfix(loss=f"{value:.3e}", level=level)
        return value

    def snapshot() -> None:
        for p in params:
            value_history[p.key].append(p.value().detach().clone())

    if trainable and iterations > 0:
        per_level = iterations // pyramid_levels
        budget = [per_level] * (pyramid_levels - 1) + [
            iterations - per_level * (pyramid_levels - 1)
        ]
        bar = tqdm(total=iterations, disable=not progress, desc="fit_scene", leave=False)
        try:
            if optimizer == "adam":
                _adam(params, offsets, unidentifiable, loss_at, budget, iterations, lr,
                      tolerance, record, snapshot)  # fmt: skip
            elif optimizer == "lbfgs":
                _lbfgs(trainable, loss_at, budget, lr, tolerance, record, snapshot)
            else:
                _levenberg_marquardt(trainable, residuals, budget, tolerance, record, snapshot)
        finally:
            bar.close()

    with torch.no_grad():
        values = {p.key: p.value().detach().clone() for p in params}
        for name, off in offsets.items():
            values[name] = (off * dynamic).detach().clone()
        frames = simulate(False).detach()
    return FitResult(
        values=values,
        history=history,
        gradient_norms=gradient_norms,
        unidentifiable=unidentifiable,
        frames=frames,
        iterations=len(history),
        seconds=time.perf_counter() - start,
        levels=levels_run,
        value_history=value_history,
    )
