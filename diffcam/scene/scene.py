"""`Scene`: a loaded scene file, stepped with `physics` and drawn with `diffcam.render`."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..errors import SceneError
from ..renderer.api import DEFAULT_EDGE_SOFTNESS
from . import rendering
from .build import build_camera, build_lighting, build_primitives, build_world, load_textures
from .describe import describe
from .validate import SceneConfig, validate_scene

log = logging.getLogger(__name__)


class Scene:
    """A loaded scene: the physics world, the camera, textures and what each body looks like.

    Attributes:
        path: the scene file.
        config: the validated `SceneConfig`.
        world: the `physics.World`.
        camera: the `diffcam.PinholeCamera` (its parameters may require grad).
        textures: dict name -> (3, Ht, Wt) tensor.
        primitives: list of `diffcam.Primitive`, one per body in state order.
        background: (3,) colour or (3, Ht, Wt) texture.
        body_names, actuator_names: lists of str (state order, action-column order).
        drawn_bodies: indices (state order) of the bodies drawn (``visible`` in the file,
            default true); static_bodies, dynamic_bodies: those of them that are static and
            that move.
        batch_size, dtype, device, timestep: what the scene was loaded with, and the physics
            step (s).

    Rendering keeps the static bodies' pre-rendered layer in a one-entry cache (see `render`).
    """

    def __init__(
        self, config: SceneConfig, batch_size: int, device, dtype, source: tuple | None = None
    ):
        """``source``: (raw file data, base folder, overrides), as `load_scene` passes them,
        for `with_overrides` and `override_paths`."""
        self.config = config
        self.path = config.file
        self.batch_size = batch_size
        self.dtype = dtype
        self.device = torch.device(device) if device is not None else torch.device("cpu")

        def tensor(v):
            if isinstance(v, torch.Tensor):
                return v.to(device=self.device, dtype=dtype)
            return torch.as_tensor(v, device=self.device, dtype=dtype)

        self.textures = load_textures(config, tensor, self.device, dtype)
        self.world, self.spec = build_world(config, tensor, batch_size, self.device, dtype)
        self.body_names = list(self.world.body_names)
        self.actuator_names = list(self.world.actuator_names)
        self.timestep = float(config.world.get("timestep", self.spec.timestep))
        self.camera = build_camera(config.camera, tensor)
        self.lighting = build_lighting(config.light, tensor)
        bg = config.camera.get("background", [0.9, 0.9, 0.9])
        self.background = self.textures[bg] if isinstance(bg, str) else tensor(bg)
        self.primitives = build_primitives(config.bodies, self.textures, tensor)
        # the bodies drawn (``visible`` in the file, default true), static and moving apart
        self.drawn_bodies = [i for i, b in enumerate(config.bodies) if b.get("visible", True)]
        self.static_bodies = [i for i in self.drawn_bodies if self.world.is_static[i]]
        self.dynamic_bodies = [i for i in self.drawn_bodies if not self.world.is_static[i]]
        self._layer_cache: rendering.StaticLayer | None = None
        self._source = source
        # state-steps stepped eagerly on the default path (`step`, `rollout` with compile=None)
        self._eager_state_steps = 0
        # set once the compiled step's libraries were found on disk past a tenth of the way
        self._compile_now = False
        self._asked_disk: set[tuple[int, bool]] = set()

    # ----------------------------------------------------------------- simulation
    @property
    def n_actuators(self) -> int:
        return len(self.actuator_names)

    def initial_state(self):
        """The state of the file (with overrides): a `physics.State` of batch ``batch_size``."""
        import physics

        return physics.initial_state(self.world)

    def step(self, state, action=None, compile: bool | None = None):
        """One physics step; ``action`` (B, n_actuators) in `actuator_names` order, or None.

        ``compile``: True steps through `physics.compiled_step` (the libraries built ahead of
        time for a reduced world, else torch.compile), False through eager
        `physics.step`. None (the default) steps eagerly until this scene has stepped
        ``compile_after`` state-steps (batch size x steps, `step` and `rollout` together), then
        compiled (see `compile_after`). `physics.dispatch` decides; `explain` says which path
        and why."""
        import physics

        route, _ = self._route(state, action, compile=compile)
        if route.cause == "warming_up":
            self._warm(state.position.shape[0], state, action)
        if route.compile:
            return physics.compiled_step(self.world.dtype)(self.world, state, action)
        physics.dispatch.record(route)
        return physics.step(self.world, state, action)

    def rollout(self, steps: int, policy: Callable | None = None, state=None, **kwargs):
        """``steps`` steps from ``state`` (default: the initial state).

        Returns a `physics.State` with a leading time axis (steps + 1, B, ...); ``policy(state, t)``
        returns the action. Keyword arguments go to `physics.rollout` (``checkpoint_every``,
        ``actions``...); ``compile`` as in `step` (None, the default: compiled once the scene
        has stepped ``compile_after`` state-steps, this rollout's included).
        """
        import physics

        if state is None:
            state = self.initial_state()
        if kwargs.get("compile") is None:
            actions = kwargs.get("actions")
            route, tier = self._route(
                state, steps=steps, policy=policy, actions=actions, compile=None
            )
            if route.cause == "warming_up":
                action = None if actions is None or len(actions) == 0 else actions[0]
                # a rollout under an action sequence runs libraries of its own
                chained = policy is None and (actions is not None or not self.n_actuators)
                self._warm(state.position.shape[0] * int(steps), state, action, chained)
            kwargs.update(compile=None, tier=tier)  # physics.rollout decides the same
        return physics.rollout(self.world, state, steps, policy=policy, **kwargs)

    def explain(
        self,
        kind: str = "step",
        *,
        state=None,
        action=None,
        steps: int = 1,
        actions=None,
        policy: Callable | None = None,
        compile: bool | None = None,
    ):
        """Which path `step` (``kind="step"``, with ``action`` (B, n_actuators)) or `rollout`
        (``kind="rollout"``: ``steps`` steps under ``actions`` (steps, B, n_actuators) or
        ``policy``) takes now from ``state`` (default: the initial state), and why: a
        `physics.Route`, whose ``str`` is the sentence (`physics.explain`, with this scene's
        ``compile_after`` tier for ``compile=None``). Changes nothing, builds nothing."""
        import physics

        if kind not in ("step", "rollout"):
            raise ValueError(f"explain: kind is 'step' or 'rollout', got {kind!r}")
        state = self.initial_state() if state is None else state
        tier = self._tier() if compile is None else None
        if kind == "step":
            return physics.explain(self.world, state, action, compile=compile, tier=tier)
        if actions is not None:
            steps = actions.shape[0]
        return physics.explain(self.world, state, steps=steps, actions=actions, policy=policy,
                               compile=compile, tier=tier)  # fmt: skip

    #: State-steps (batch size x steps) a scene steps eagerly on the default path (``compile``
    #: None) before it compiles: None never compiles by default, 0 compiles from the first step.
    #: Compiling pays only after many steps (a first compiled call costs seconds to minutes:
    #: docs/performance.md, "The default scene path"). Like a JIT's tiering (the ski-rental rule: pay as
    #: you go until what you paid equals the price of buying), the default switches when the
    #: eager steps have cost about what compiling costs, so it is never more than about twice
    #: the better of the two choices made in hindsight. Where the compiled step's libraries
    #: are already on disk (`physics.ahead_of_time.on_disk`: built by an earlier process),
    #: compiling costs an export and a trace, about a tenth of a build: the default switches
    #: after a tenth of ``compile_after``.
    compile_after: int | None = 500_000

    @property
    def compiling(self) -> bool:
        """Whether the default path (``compile=None``) now steps compiled."""
        return self._compile_now or self._eager_state_steps >= self._threshold()

    def _threshold(self) -> float:
        return float("inf") if self.compile_after is None else self.compile_after

    def _tier(self):
        """The default path's `physics.Tier`: ``compile_after`` state-steps, a tenth of them
        where the libraries are on disk."""
        import physics

        price = self._threshold()
        shortcut = "" if self.compile_after is None else (
            f", or past {price / 10:,.0f} when the libraries are on disk")  # fmt: skip
        return physics.Tier(
            "Scene.compile_after", self._eager_state_steps, price, "state-steps",
            ready=self._compile_now, shortcut=shortcut,
        )  # fmt: skip

    def _route(self, state, action=None, *, steps=None, policy=None, actions=None, compile=None):
        """The `physics.Route` of a step (``steps`` None) or a rollout from ``state``, and the
        tier it was decided with (None unless ``compile`` is None); records nothing. Whether
        it compiles and why it stays eager are all it says: the builds are not looked up
        (the compiled entry points decide their path again)."""
        import physics.dispatch

        tier = self._tier() if compile is None else None
        route, _ = physics.dispatch.plan(
            self.world, state, action, steps=steps, policy=policy, actions=actions,
            requested=compile, tier=tier, look_up=False,
        )  # fmt: skip
        return route, tier

    def _warm(self, state_steps: int, state, action, chained: bool = False) -> None:
        """Count ``state_steps`` more eager state-steps of the default path, from ``state``
        with actions like ``action`` (B, A) or None; past a tenth of ``compile_after``, ask
        whether the compiled libraries are on disk; ``chained``: a rollout under an action
        sequence (`physics.aot_rollout`)."""
        self._eager_state_steps += int(state_steps)
        if not self.compiling and self._eager_state_steps >= self._threshold() / 10:
            self._compile_now = self._libraries_on_disk(state, action, chained)
        if self.compiling:
            log.info("%s: compiling the physics step (the default path, see Scene.compile_after)",
                     self.path)  # fmt: skip

    def _libraries_on_disk(self, state, action, chained: bool) -> bool:
        """Whether the compiled step's (``chained``: rollout's) libraries for this batch and
        grad mode are on disk (asked once per batch size, grad mode and kind)."""
        import physics.ahead_of_time

        asked = (state.position.shape[0], torch.is_grad_enabled(), chained)
        if asked in self._asked_disk:
            return False
        self._asked_disk.add(asked)
        if action is None and self.n_actuators:
            action = state.position.new_zeros(state.position.shape[0], self.n_actuators)
        return physics.ahead_of_time.on_disk(
            self.world, state, action, torch.is_grad_enabled(), rollout=chained
        )

    # ----------------------------------------------------------------- rendering
    def _poses(self, state):
        rot, pos = state.rotation, state.position
        if rot.dim() != 4 or pos.dim() != 3:
            raise ValueError(
                "Scene.render expects one state with rotation (B, N, 3, 3) and position "
                f"(B, N, 3); got {tuple(rot.shape)} and {tuple(pos.shape)} (for a trajectory, "
                "index its time axis first)"
            )
        return rot, pos

    def render(
        self,
        state,
        edge_softness: float | str = DEFAULT_EDGE_SOFTNESS,
        supersample: int = 1,
        static_cache: bool = True,
        **kwargs,
    ):
        """Draw every body at the state's pose: (B, 3, H, W) in [0, 1], differentiable.

        ``edge_softness``: as in `diffcam.render`: antialiased edges by default
        (`diffcam.DEFAULT_EDGE_SOFTNESS`, ``"antialias"``), whose gradient sees silhouettes
        move; 0 for the exact hard render (faster, e.g. for a video); sigma > 0 px for soft
        silhouettes. Keyword arguments go to `diffcam.render` (e.g. ``mipmap``, ``backend``,
        which apply to hard edges; ``lighting`` replaces the file's ``[light]``,
        ``background`` the camera's background; ``color_transform`` (B|1, N, 3, 4) maps each
        body's colours per image).

        Static bodies are drawn once into a cached layer (image and depth) that only the
        moving bodies are rendered over, when that is safe: the camera, the light, the
        background, the colour maps and the static bodies' sizes, textures, colours and file
        poses do not require grad (the layer is re-drawn when any of them, or the tensor
        object that holds them, the static poses in ``state``, the resolution,
        ``supersample``, ``edge_softness``, ``mipmap``, dtype or device change). With hard
        edges the result equals the full render, gradients included, except that the
        state's *static* rows get no gradient (static bodies do not move; to differentiate
        with respect to their poses, pass ``static_cache=False``). With soft or antialiased
        edges (the default) the static layer is soft-edged (antialiased) on its own and then
        is the opaque back of the moving bodies, so where a static silhouette's soft band
        (antialiased edge pixel) meets a moving body the result differs slightly from the
        full render.
        """
        return self._render(
            state, static_cache, False, edge_softness=edge_softness, supersample=supersample,
            **kwargs,
        ).image  # fmt: skip

    def render_trajectory(self, trajectory, every: int = 1, **kwargs) -> torch.Tensor:
        """Render a rollout (a State with a time axis, (T, B, ...)) every ``every`` steps.

        Returns (T', B, 3, H, W) with T' = ceil(T / every); keyword arguments as in `render`.
        """
        import physics

        if trajectory.position.dim() != 4:
            raise ValueError(
                "render_trajectory expects a trajectory with position (T, B, N, 3), got "
                f"{tuple(trajectory.position.shape)}"
            )
        frames = []
        for t in range(0, trajectory.position.shape[0], every):
            state = physics.State(*(x[t] for x in trajectory.tensors()))
            frames.append(self.render(state, **kwargs))
        return torch.stack(frames)

    def render_buffers(self, state, static_cache: bool = True, **kwargs):
        """Image, depth (B, 1, H, W) and object id (B, H, W; -1 = background, else body index).

        Keyword arguments, their defaults (antialiased edges: ``edge_softness=0`` for the
        hard render) and the static layer cache as in `render`.
        """
        return self._render(state, static_cache, True, **kwargs)

    def _render(self, state, static_cache: bool, want_ids: bool, **kwargs):
        """`diffcam.render_buffers` of the whole scene, over the cached static layer if it
        applies; the object ids are those of the scene's bodies only when ``want_ids``, which
        otherwise leaves depth, object ids and coverage out (None)."""
        from ..renderer import RenderBuffers, render, render_buffers

        def draw(*args, **kw):  # the image alone (no depth, ids, coverage) unless want_ids
            if want_ids:
                return render_buffers(*args, **kw)
            return RenderBuffers(render(*args, **kw), None, None, None)

        kwargs.setdefault("lighting", self.lighting)
        kwargs.setdefault("background", self.background)
        kwargs.setdefault("edge_softness", DEFAULT_EDGE_SOFTNESS)
        rot, pos = self._poses(state)
        layer = rendering.static_layer(self, rot, pos, kwargs) if static_cache else None
        if layer is None:
            drawn = self.drawn_bodies
            primitives = [self.primitives[i] for i in drawn]
            return rendering.draw_subset(
                draw, self.camera, primitives, drawn, rot, pos, want_ids, kwargs
            )
        kwargs.pop("background")
        dyn = self.dynamic_bodies
        transform = kwargs.pop("color_transform", None)
        if transform is not None:
            kwargs["color_transform"] = transform[:, dyn]
        out = draw(
            self.camera, [self.primitives[i] for i in dyn], rot[:, dyn], pos[:, dyn],
            background=layer.image, background_depth=layer.depth, **kwargs,
        )  # fmt: skip
        if not want_ids:
            return out
        # what the static bodies cover shows behind what the moving ones leave uncovered
        out = out._replace(coverage=out.coverage + (1.0 - out.coverage) * layer.coverage)
        moving = out.object_id
        ids = torch.tensor(dyn, device=moving.device)[moving.clamp(min=0)]
        return out._replace(object_id=torch.where(moving >= 0, ids, layer.object_id))

    def render_states(self, states, frames_per_call: int = 16, window=None, **kwargs):
        """Render a stack of states, e.g. the frames of a video: `RenderBuffers` whose tensors
        have two leading axes (M, B, ...).

        Args:
            states: a `physics.State` of (M, B, N, ...) tensors (M frames of the B worlds).
            frames_per_call: frames drawn per renderer call (memory and speed only).
            window: optional (origins (M, B, 2) long, (h, w)): draw only the h x w pixels from
                row, column ``origins`` of each image (any origin, even outside the image).
            kwargs: as in `render` (``edge_softness``, default antialiased edges;
                ``background``, ...).

        One world (B = 1) draws its frames as one batch over the static layer cache; several
        worlds, or windows, draw their frames together with the camera and the bodies' sizes
        repeated per frame (a world's parameters may differ from the others', e.g. a
        forward-mode Jacobian's columns), without the static layer.
        """
        return rendering.render_states(self, states, frames_per_call, window, **kwargs)

    def project_bodies(self, state) -> torch.Tensor:
        """(B, N, 2) continuous pixel coordinates (x, y) of every body's centre."""
        return self.camera.project(state.position)

    # ----------------------------------------------------------------- variants
    def view(self, camera=None, primitives: list | None = None) -> Scene:
        """The same scene seen through another ``camera`` or drawn with other ``primitives``
        (one per body), sharing everything else (world, textures, settings) with this one, with
        a static-layer cache of its own (see `render`)."""
        view = copy.copy(self)
        if camera is not None:
            view.camera = camera
        if primitives is not None:
            view.primitives = list(primitives)
        view._layer_cache = None
        return view

    def with_overrides(self, overrides: Mapping[str, Any], batch_size: int | None = None):
        """The same scene file with (more) overrides, without reading the file again: a new
        `Scene` (the overrides given at load time stay unless replaced)."""
        if self._source is None:
            raise SceneError(
                "with_overrides needs a scene made by load_scene (it keeps the file's data)",
                file=self.path,
            )
        data, base_dir, base = self._source
        merged = {**base, **overrides}
        batch = self.batch_size if batch_size is None else batch_size
        config = validate_scene(
            data, file=self.path, base_dir=base_dir, batch_size=batch, overrides=merged
        )
        scene = Scene(
            config, batch_size=batch, device=self.device, dtype=self.dtype,
            source=(data, base_dir, merged),
        )  # fmt: skip
        scene.compile_after = self.compile_after
        return scene

    def override_paths(self) -> list[str]:
        """Every key path an override (`with_overrides`, `load_scene`'s ``overrides``) may name
        in this scene."""
        from .overrides import override_paths

        if self._source is None:
            raise SceneError("override_paths needs a scene made by load_scene", file=self.path)
        return override_paths(self._source[0])

    # ----------------------------------------------------------------- description
    def summary(self) -> str:
        """A human-readable description (what ``diffcam check`` prints)."""
        return describe(self)

    def __repr__(self) -> str:
        return (
            f"Scene({self.path!r}, batch_size={self.batch_size}, bodies={self.body_names}, "
            f"actuators={self.actuator_names})"
        )
