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
            iteration.
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
    # key path -> the value before each iteration's update (detached), parallel to ``history``
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
        if self.positive:
            return torch.exp(self.raw)
        if self.bounds is not None:
            lo, hi = self.bounds
            return lo + (hi - lo) * torch.sigmoid(self.raw)
        return self.raw


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

    Returns:
        (steps // frame_every + 1, 3, H, W) frames in [0, 1]; frame i shows the state after
        i * frame_every steps.
    """
    import physics

    from .scene import load_scene

    scene = load_scene(scene_path, batch_size=1, dtype=dtype, overrides=overrides)
    state = scene.initial_state()
    if position_offset is not None:
        state = state.replace(position=state.position + position_offset)
    if velocity_offset is not None:
        state = state.replace(linear_velocity=state.linear_velocity + velocity_offset)
    trajectory = physics.rollout(
        scene.world, state, steps, actions=actions, compile=compile_physics
    )
    frames = [
        scene.render(trajectory[t], edge_softness=edge_softness)
        for t in range(0, steps + 1, frame_every)
    ]
    return torch.cat(frames, 0)


# --------------------------------------------------------------------------- the fit
def fit_scene(
    scene_path,
    observed,
    keys: dict[str, dict],
    actions=None,
    steps: int | None = None,
    *,
    iterations: int = 200,
    lr: float = 0.05,
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
        iterations: maximum number of Adam iterations (shared equally between pyramid levels).
        lr: initial learning rate of Adam (betas (0.5, 0.9)), in raw-parameter units (log
            units for ``positive`` keys); it decays along a cosine to lr / 10 at the end.
        pyramid_levels: L > 1 compares frames average-pooled by 2^(L-1), ..., 2, 1 (coarse to
            fine) for equal shares of the iterations.
        edge_softness: passed to `Scene.render` (pixels); > 0 gives silhouette gradients.
        frame_every: physics steps between observed frames (a camera slower than the physics;
            fewer renders per iteration).
        compile_physics: step the physics through torch.compile (see `render_rollout`).
        dtype: float32 or float64 for the scene and the parameters.
        progress: show a tqdm bar with the loss.
        tolerance: stop (at the finest level; move on to the next level otherwise) when the
            loss's relative change stays below this for 5 iterations.
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
    history: list[float] = []
    levels_run: list[int] = []
    value_history: dict[str, list[torch.Tensor]] = {p.key: [] for p in params}
    if trainable and iterations > 0:
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
        per_level = iterations // pyramid_levels
        budget = [per_level] * (pyramid_levels - 1) + [
            iterations - per_level * (pyramid_levels - 1)
        ]
        bar = tqdm(total=iterations, disable=not progress, desc="fit_scene", leave=False)
        try:
            for idx, level in enumerate(range(pyramid_levels - 1, -1, -1)):
                calm, previous = 0, None
                for _ in range(budget[idx]):
                    optimizer.zero_grad(set_to_none=True)
                    for p in params:
                        value_history[p.key].append(p.value().detach().clone())
                    loss, _ = loss_at(level)
                    loss.backward()
                    optimizer.step()
                    schedule.step()
                    value = float(loss.detach())
                    history.append(value)
                    levels_run.append(level)
                    bar.update(1)
                    bar.set_postfix(loss=f"{value:.3e}", level=level)
                    if previous is not None:
                        change = abs(previous - value) / max(abs(previous), 1e-30)
                        calm = calm + 1 if change < tolerance else 0
                    previous = value
                    if calm >= _PATIENCE:
                        break
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
