"""The model side of a fit: parameter values -> the frames the camera would have recorded.

`VideoModel` keeps the scene (its file read once), the frame times, the known actions and the
`ImageModel`. `build` turns the fitted values into a scene with those overrides (batch B: one
world per value when the values carry a leading batch axis), rolls it out and keeps the
trajectory; `frames` renders any subset of the video's frames from it. Keys are routed by
prefix: ``image.<field>`` sets an `ImageModel` field (``image.gain``, ``image.gamma``,
``image.distortion``, ``image.time_offset``...), ``initial_state.position_offset`` and
``initial_state.velocity_offset`` (N, 3) shift the dynamic bodies' initial state, and every
other key is a scene override (``joints.pivot.damping``, ``joints.pivot.position``...).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..formation import ImageModel, body_windows, render_video
from ..renderer.api import DEFAULT_EDGE_SOFTNESS

__all__ = [
    "VideoModel",
    "Built",
    "PhysicsTier",
    "render_rollout",
    "POSITION_OFFSET",
    "VELOCITY_OFFSET",
]

log = logging.getLogger(__name__)


@dataclasses.dataclass
class PhysicsTier:
    """When a fit's rollouts step compiled (``physics.rollout(..., compile=True)``, the
    ahead-of-time libraries of a tree in joint coordinates) instead of eagerly: a ski rental
    in seconds, given to `physics.dispatch` as a `physics.Tier` (`tier`), which decides.
    Compiled stepping costs a build (about ``build_seconds`` on a 2-core CPU, once per world
    structure, then on disk for every later process) and is then many times faster, so
    rollouts step eagerly until they have cost about what a build costs (a fit then pays at
    most about twice what the better choice in hindsight costs), or compiled from the start
    where the libraries are already on disk (`physics.ahead_of_time.on_disk`). Where gradients
    flow through the rollout, its backward's libraries are built too, so the price is
    ``gradient_build_seconds`` (to the world's tensors: the step and its VJP to the world,
    stepped one at a time; to the initial state only: the chained rollout's libraries).
    Models in maximal coordinates (contacts) step eagerly: torch.compile's build of their
    step took minutes. One tier is shared by every fit of a process.

    Attributes:
        build_seconds: the price of a build (s) for rollouts without gradients.
        gradient_build_seconds: the same where gradients flow through the rollout (s).
        eager_seconds: what eager rollouts have cost so far (s).
    """

    # about what the builds cost on a 2-core CPU (docs/performance.md): the bound needs that
    build_seconds: float = 120.0
    gradient_build_seconds: float = 300.0
    eager_seconds: float = 0.0
    announced: bool = False

    def tier(self, world, state, actions):
        """This tier's `physics.Tier` for a rollout of ``world`` from ``state`` (B worlds)
        under ``actions`` (steps, B, A) or None: ready when the libraries the rollout would
        use (with gradients flowing: those of its backward too) are on disk."""
        import physics.ahead_of_time
        import physics.dispatch

        steps = 1 if actions is None else max(len(actions), 1)
        facts = physics.dispatch.rollout_facts(
            world, state, steps, actions=actions, requested=False
        )
        action = None if actions is None or len(actions) == 0 else actions[0]
        to_world = facts.step_world_grad
        backward = to_world or (facts.grad_enabled and facts.state_grad)
        ready = world.structure.tree is not None and physics.ahead_of_time.on_disk(
            world, state, action, backward, rollout=not to_world, world_grad=to_world
        )
        price = self.gradient_build_seconds if backward else self.build_seconds
        return physics.Tier(
            "the fit's PhysicsTier", self.eager_seconds, price, "s", ready=ready,
            shortcut=", or at once when the libraries are on disk", reduced_only=True,
        )  # fmt: skip

    def route(self, world, state, steps: int, actions):
        """The `physics.Route` of a fit's rollout of ``steps`` steps (`physics.dispatch`
        decides, with `tier`), and the tier; says once when it switches to compiled."""
        import physics.dispatch

        tier = self.tier(world, state, actions)
        facts = physics.dispatch.rollout_facts(
            world, state, steps, actions=actions, requested=None, tier=tier
        )
        route = physics.dispatch.decide(facts)
        if route.compile and not tier.ready and not self.announced:
            log.warning(
                "fit: rollouts have stepped eagerly for %.0f s; from now on they step compiled "
                "(physics.last_route() says how)", self.eager_seconds,
            )  # fmt: skip
            self.announced = True
        return route, tier

    def compiles(self, world, state, actions) -> bool:
        """Whether a rollout of ``world`` from ``state`` (B worlds) under ``actions`` (steps,
        B, A) or None steps compiled (`route`)."""
        steps = 1 if actions is None else max(len(actions), 1)
        return self.route(world, state, steps, actions)[0].compile


PHYSICS_TIER = PhysicsTier()

POSITION_OFFSET = "initial_state.position_offset"
VELOCITY_OFFSET = "initial_state.velocity_offset"
IMAGE_PREFIX = "image."


@dataclasses.dataclass
class Built:
    """A scene with the current values, its trajectory (steps + 1, B, N, ...) and the image
    model with the values' ``image.*`` fields."""

    scene: Any
    trajectory: Any
    image_model: ImageModel


class VideoModel:
    """Frames of a scene's rollout as a camera records them, for a fit.

    Args:
        scene: a `diffcam.Scene` made by `load_scene` (batch 1; its file is not read again).
        times: (T,) frame timestamps (s) on the video's clock.
        actions: (steps, A) known actions per physics step (the actuators' units) or None.
        image_model: the `ImageModel` whose fields ``image.*`` keys replace.
        to_overrides: optional function from the fitted values to the routed keys.
        compile_physics: True steps compiled, False eagerly; None (the default) as
            `PHYSICS_TIER` decides (compiled once eager rollouts have cost about what a
            build costs, or from the start when the compiled libraries are on disk).
        silhouette_weight: > 0 adds the bodies' coverage, times this weight, as a fourth
            channel of `frames` (for a silhouette term against a foreground mask).
    """

    def __init__(
        self,
        scene,
        times: torch.Tensor,
        actions: torch.Tensor | None,
        image_model: ImageModel | None,
        to_overrides: Callable[[dict], Mapping[str, Any]] | None = None,
        compile_physics: bool | None = None,
        silhouette_weight: float = 0.0,
    ):
        self.scene = scene
        self.silhouette_weight = float(silhouette_weight)
        self.times = times
        self.image_model = ImageModel() if image_model is None else image_model
        self.to_overrides = to_overrides
        self.compile_physics = compile_physics
        dt = scene.timestep
        self.steps = _steps_needed(times, self.image_model, dt)
        self.actions = _actions_for(actions, self.steps, len(scene.actuator_names), dt, times)
        dynamic = [not s for s in scene.world.is_static]
        self.dynamic = torch.tensor(dynamic, dtype=scene.dtype, device=scene.device)[:, None]

    @property
    def frame_count(self) -> int:
        return int(self.times.shape[0])

    def _apply_to_overrides(self, values: Mapping[str, torch.Tensor], batch: int) -> dict:
        """`to_overrides` of the values; with a batch, world by world (it is written for one
        world's values) and stacked."""
        if self.to_overrides is None:
            return dict(values)
        if batch == 1:  # values with a leading batch axis of 1 are one world's, without it
            return dict(self.to_overrides({k: v[0] if _batched(v, 1) else v
                                           for k, v in values.items()}))  # fmt: skip
        worlds = []
        for b in range(batch):
            one = {k: v[b] if _batched(v, batch) else v for k, v in values.items()}
            worlds.append(dict(self.to_overrides(one)))
        return {k: _stack_worlds([w[k] for w in worlds]) for k in worlds[0]}

    def route(self, values: Mapping[str, torch.Tensor], batch: int = 1) -> tuple[dict, dict, dict]:
        """(scene overrides, image model fields, initial-state offsets) of the fitted values."""
        routed = self._apply_to_overrides(values, batch)
        overrides, image, offsets = {}, {}, {}
        for key, value in routed.items():
            if key.startswith(IMAGE_PREFIX):
                field = key[len(IMAGE_PREFIX) :]
                if field not in ImageModel.FITTABLE:
                    raise ValueError(
                        f"keys: {key!r} is not an image-model key; accepted: "
                        + ", ".join(IMAGE_PREFIX + f for f in ImageModel.FITTABLE)
                    )
                image[field] = value
            elif key in (POSITION_OFFSET, VELOCITY_OFFSET):
                offsets[key] = value
            else:
                overrides[key] = value
        return overrides, image, offsets

    def build(
        self, values: Mapping[str, torch.Tensor], batch: int = 1, simulate: bool = True,
        horizon: int | None = None,
    ) -> Built:  # fmt: skip
        """The scene with these values and its rollout; values may carry a leading batch axis
        of size ``batch`` (one world each). The rollout covers the frames [0, horizon) (default
        all); ``simulate=False`` leaves the trajectory None (for a caller that has it)."""
        import physics

        overrides, image, offsets = self.route(values, batch)
        scene = self.scene.with_overrides(overrides, batch_size=batch)
        if not simulate:
            return Built(scene, None, self.image_model.replace(**image))
        state, steps, actions = self._rollout_inputs(scene, offsets, batch, horizon)
        compile, tier = self.compile_physics, None
        if compile is None:  # the default path: eager, or compiled when it pays (PhysicsTier)
            route, tier = PHYSICS_TIER.route(scene.world, state, steps, actions)
            compiled = route.compile
        else:
            compiled = compile
        start = time.perf_counter()
        trajectory = physics.rollout(
            scene.world, state, steps, actions=actions, compile=compile, tier=tier
        )
        if not compiled:
            PHYSICS_TIER.eager_seconds += time.perf_counter() - start
        return Built(scene, trajectory, self.image_model.replace(**image))

    def explain(
        self, values: Mapping[str, torch.Tensor], batch: int = 1, horizon: int | None = None
    ):
        """Which path `build`'s rollout with these values takes now, and why: a
        `physics.Route` (``str(route)`` is the sentence; `physics.explain`). Builds nothing."""
        import physics

        overrides, _, offsets = self.route(values, batch)
        scene = self.scene.with_overrides(overrides, batch_size=batch)
        state, steps, actions = self._rollout_inputs(scene, offsets, batch, horizon)
        tier = None if self.compile_physics is not None else PHYSICS_TIER.tier(
            scene.world, state, actions)  # fmt: skip
        return physics.explain(scene.world, state, steps=steps, actions=actions,
                               compile=self.compile_physics, tier=tier)  # fmt: skip

    def _rollout_inputs(self, scene, offsets: dict, batch: int, horizon: int | None):
        """The rollout's initial state (with the initial-state offsets), its steps (covering
        the frames [0, horizon), default all) and its actions (steps, B, A) or None."""
        state = scene.initial_state()
        if POSITION_OFFSET in offsets:
            state = state.replace(position=state.position + offsets[POSITION_OFFSET] * self.dynamic)
        if VELOCITY_OFFSET in offsets:
            moved = state.linear_velocity + offsets[VELOCITY_OFFSET] * self.dynamic
            state = state.replace(linear_velocity=moved)
        steps = self.steps
        if horizon is not None and horizon < self.frame_count:
            steps = min(
                steps, _steps_needed(self.times[:horizon], self.image_model, scene.timestep) + 1
            )
        actions = self.actions
        if actions is not None:
            actions = actions[:steps, None, :].expand(steps, batch, actions.shape[-1])
        return state, steps, actions

    def frames(self, built: Built, index, trajectory=None, windows=None, **render_kwargs):
        """(len(index), B, C, H, W) camera output at frames ``index`` (a slice or indices),
        from ``trajectory`` (default the built one, e.g. a detached copy); with `Windows` of
        those frames, only their pixels ((len(index), B, C, h, w)). C is 3, and 4 with a
        ``silhouette_weight``: the bodies' coverage times the weight after the colours."""
        trajectory = built.trajectory if trajectory is None else trajectory
        out = render_video(
            built.scene, trajectory, self.times[index], built.image_model, windows=windows,
            with_coverage=self.silhouette_weight > 0, **render_kwargs,
        )  # fmt: skip
        if self.silhouette_weight > 0:
            out = torch.cat([out[0], self.silhouette_weight * out[1]], 2)
        return out

    def windows(self, built: Built, horizon: int, margin: float, align: int = 1):
        """`Windows` around the moving bodies of frames [0, horizon), or None when there is no
        plate (then every pixel may depend on the parameters)."""
        if built.image_model.plate is None:
            return None
        return body_windows(
            built.scene, built.trajectory, self.times[:horizon], built.image_model, margin, align
        )

    def visible(self, built: Built, trajectory=None) -> torch.Tensor:
        """(T, B, N) bool: the body's centre is in front of the camera and inside the image
        at each frame's time (mid-exposure)."""
        import physics

        from ..formation import sample_times

        trajectory = built.trajectory if trajectory is None else trajectory
        batch = built.scene.batch_size
        with torch.no_grad():
            when = sample_times(self.times, built.image_model, batch).mean(1)  # (T, B)
            states = physics.states_at(trajectory, when, built.scene.timestep)
            camera = built.scene.camera
            points = states.position.detach().transpose(0, 1)  # (B, T, N, 3)
            pixels, depth = camera.project_with_depth(points.reshape(points.shape[0], -1, 3))
            x, y = pixels[..., 0], pixels[..., 1]
            inside = (depth > 0) & (x >= 0) & (x <= camera.width) & (y >= 0) & (y <= camera.height)
            return inside.view(points.shape[:3]).transpose(0, 1)


def _stack_worlds(values: list) -> Any:
    """One value per world stacked on a new leading axis; a value that no world changes (no
    forward-mode tangent, equal everywhere, e.g. a constant colour) stays one shared value."""
    from torch.autograd import forward_ad

    tensors = [torch.as_tensor(v) for v in values]
    if all(forward_ad.unpack_dual(t).tangent is None for t in tensors) and all(
        torch.equal(t, tensors[0]) for t in tensors[1:]
    ):
        return values[0]
    return torch.stack(tensors)


def _batched(value, batch: int) -> bool:
    return isinstance(value, torch.Tensor) and value.dim() > 0 and value.shape[0] == batch


def _steps_needed(times: torch.Tensor, image_model: ImageModel, dt: float) -> int:
    """Physics steps that cover the last frame's exposure (from the initial offset and
    exposure), with a step to spare for the interpolation."""
    exposure = float(torch.as_tensor(image_model.exposure).detach().max())
    offset = float(torch.as_tensor(image_model.time_offset).detach().max())
    last = float(times[-1]) + max(offset, 0.0) + 0.5 * max(exposure, 0.0)
    return max(1, _steps_to(last, dt, times.dtype))


def _steps_to(seconds: float, dt: float, dtype: torch.dtype) -> int:
    """Physics steps of ``dt`` (s) that reach ``seconds``: ceil(seconds / dt), where a time
    within the rounding of ``dtype`` (the frame times') above a whole step counts as that step.

    Frame times are kept in the scene's dtype: in float32 the frame at 20 * 0.02 s is
    0.40000000596 s, which is step 40 and not a 41st step (and the trajectory's interpolation
    reaches a hair past its last step)."""
    scaled = seconds / dt
    slack = 8 * torch.finfo(dtype).eps * max(abs(scaled), 1.0) if dtype.is_floating_point else 0
    return math.ceil(scaled - max(slack, 1e-9))


def _actions_for(actions, steps: int, n_actuators: int, dt: float, times) -> torch.Tensor | None:
    """(steps, A) actions covering the rollout: a longer sequence is cut (with a warning), one
    short by at most the exposure margin repeats its last action."""
    if actions is None:
        return None
    if actions.dim() != 2 or actions.shape[1] != n_actuators:
        raise ValueError(
            f"actions must have shape (steps, n_actuators) with n_actuators = {n_actuators}, "
            f"got {tuple(actions.shape)}"
        )
    have = actions.shape[0]
    video_steps = _steps_to(float(times[-1]), dt, times.dtype)
    if have < video_steps:
        raise ValueError(
            f"the actions cover {have} steps ({have * dt:.4g} s) but the video lasts "
            f"{float(times[-1]):.4g} s ({video_steps} steps of {dt:g} s): give actions for the "
            f"whole video, or cut the video to the first {have * dt:.4g} s"
        )
    if have > steps:
        if have > video_steps + 1:
            warnings.warn(
                f"fit_scene: the video ({float(times[-1]):.4g} s) is shorter than the action "
                f"sequence ({have * dt:.4g} s); the fit uses the first {steps} steps",
                stacklevel=4,
            )
        return actions[:steps]
    if have < steps:
        actions = torch.cat([actions, actions[-1:].expand(steps - have, n_actuators)])
    return actions


def render_rollout(
    scene_path,
    overrides: Mapping[str, Any] | None,
    actions: torch.Tensor | None,
    steps: int,
    *,
    dtype: torch.dtype = torch.float32,
    edge_softness: float | str = DEFAULT_EDGE_SOFTNESS,
    position_offset: torch.Tensor | None = None,
    velocity_offset: torch.Tensor | None = None,
    frame_every: int = 1,
    compile_physics: bool = False,
    time_chunk: int = 16,
) -> torch.Tensor:
    """The frames a scene with these overrides renders along a rollout (batch size 1).

    Args:
        scene_path: the TOML scene file.
        overrides: key path -> value (tensors may require grad), as for `load_scene`.
        actions: (steps, 1, n_actuators) or (steps, n_actuators) actions, or None.
        steps: physics steps.
        dtype: scene dtype.
        edge_softness: as in `diffcam.render` (default antialiased edges; 0 = hard edges,
            sigma > 0 = soft silhouettes of sigma px).
        position_offset, velocity_offset: optional (N, 3) additions (m, m/s) to the initial
            positions and linear velocities of the bodies.
        frame_every: render every this many physics steps.
        compile_physics: step the physics with `physics.compiled_step`.
        time_chunk: frames rendered per renderer call (memory and speed only).

    Returns:
        (steps // frame_every + 1, 3, H, W) frames in [0, 1]; frame i shows the state after
        i * frame_every steps.
    """
    import physics

    from ..scene import load_scene

    scene = load_scene(scene_path, batch_size=1, dtype=dtype, overrides=overrides)
    state = scene.initial_state()
    if position_offset is not None:
        state = state.replace(position=state.position + position_offset)
    if velocity_offset is not None:
        state = state.replace(linear_velocity=state.linear_velocity + velocity_offset)
    if actions is not None and actions.dim() == 2:
        actions = actions[:, None, :]
    trajectory = physics.rollout(
        scene.world, state, steps, actions=actions, compile=compile_physics
    )
    shown = trajectory[torch.arange(0, steps + 1, frame_every)]
    buffers = scene.render_states(shown, frames_per_call=time_chunk, edge_softness=edge_softness)
    return buffers.image[:, 0]
