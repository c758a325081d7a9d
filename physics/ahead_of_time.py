"""The reduced step compiled ahead of time (AOTInductor): what `compiled_step` runs for worlds
in reduced coordinates.

A small world's compiled step computes less than torch.compile's runtime costs per call: its
guards, the autograd wrapper and a Python wrapper that allocates and views every buffer. Here
the step, in its unrolled form (`physics.articulated.step.unrolled_step`: every quantity a (B,) tensor,
which Inductor fuses into a few loops over the batch), is exported (`torch.export`, the batch
axis dynamic) and AOTInductor builds it into a shared library whose C++ runner does that work
instead. Its reverse-mode derivative is a second library, the step's vector-Jacobian product
(traced by `make_fx` through `torch.func.vjp`; it recomputes the forward from the step's
inputs, so a step saves only its inputs), built the first time a backward needs it; rollouts
under an action sequence build their own libraries through the same program
(`Program.library`, `physics.aot_rollout`). `_Step` joins the step and its VJP as one autograd
node per step. Gradients to the world's own tensors (a fit of masses or damping) take a third
library, the VJP to the world's tensor fields as well (`_StepWithWorld`). Batches below
`THREADED_BATCH` have their own builds (`Program`).

A world structure, dtype and device makes one program, shared by every batch size from 2 up
(the export specialises a batch axis of 1 away); a single world steps as a pair of identical
worlds (`paired`), which costs about what one does, so the same libraries serve it. The
libraries are kept in memory and on disk (``DIFFCAM_CACHE_DIR``, by default a folder in the
system's temporary directory), keyed by the world's structure, the inputs' shapes, Inductor's
options, the physics package's source and the torch version: another process traces the step
again but loads the library instead of compiling it. A failure to export or build the step
falls back to torch.compile (`compiled_step`), one of its VJP to an eager backward, each with
a warning and a record (`physics.notices`); the first build of a structure in a process is
announced (`physics.notices.announce_build`). Which calls come here is `physics.dispatch`'s
decision.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch.autograd.function import once_differentiable

from . import notices
from .articulated.step import WORLD_FIELDS, unrolled_step, unrolled_vjp
from .math3d import tracing_for_compilation
from .state import State
from .world import TENSOR_FIELDS, World

log = logging.getLogger(__name__)
Tensor = torch.Tensor

# The world's per-batch parameters: their first axis is the batch when it has the state's size.
_BATCHED = (
    "mass", "size", "friction", "restitution", "gravity", "joint_damping", "joint_lower",
    "joint_upper", "motor_max", "motor_gain", "motor_max_torque", "motor_max_velocity",
    "anchor_parent", "anchor_child", "axis_parent", "axis_child", "ref_parent", "ref_child",
    "rest_rotation", "initial_position", "initial_rotation", "initial_velocity",
    "initial_angular_velocity",
)  # fmt: skip
_STATE_TENSORS = 4
# Scalar C++ loops, as `compiled_step`'s (the engine's innermost axes are 2, 3 or 6 long), and
# fusion of nodes that share no buffer: the unrolled step's per-world scalars then fuse into a
# few loops over the batch (by default Inductor fuses only where that saves memory traffic).
# Each node is tried against its next two in a group (the default 64 made the scheduler's
# pairwise checks most of a build's time, for the same loops).
_INDUCTOR_CONFIGS = {
    "cpp.simdlen": 1,
    "aggressive_fusion": True,
    "score_fusion_memory_threshold": 0,
    "max_fusion_size": 1 << 20,
    "max_fusion_buffer_group_pairwise_attempts": 2,
}
# The dynamic axes of the exported programs: the batch; a trajectory's states and steps.
BATCH = torch.export.Dim("batch", min=2)
LENGTH = torch.export.Dim("length", min=1)
STEPS = torch.export.Dim("steps", min=1)
#: Batch size from which a backward runs the VJP build whose loops are split between threads.
THREADED_BATCH = 512


@dataclasses.dataclass(frozen=True)
class Traces:
    """The functions a `Program` builds, on flat tensor lists (see `Program`): ``step`` one
    step, ``vjp`` its vector-Jacobian product, ``vjp_world`` the same with the gradients of
    the world's tensor fields (`WORLD_FIELDS`) first."""

    step: Callable
    vjp: Callable
    vjp_world: Callable


def cache_dir() -> Path:
    """Where built steps are kept: ``DIFFCAM_CACHE_DIR``, else a folder in the system's
    temporary directory."""
    root = os.environ.get("DIFFCAM_CACHE_DIR") or Path(tempfile.gettempdir()) / "diffcam_cache"
    return Path(root) / "aot_steps"


class Program:
    """A world structure's step built ahead of time: ``forward(inputs)`` and ``vjp(inputs +
    gradients)`` run the libraries on flat tensor lists: the world's tensor fields the step
    reads (`WORLD_FIELDS`), the state's 4 tensors and, when the step takes one, the action
    (B, A); ``vjp`` takes the gradients of the next state's 4 tensors after them and returns
    those of the state's and the action's, with ``world=True`` those of the world's tensor
    fields first (a library of its own, for fits of the world's parameters). ``library``
    builds the rollout's functions (`physics.aot_rollout`).

    Every library comes in two builds, made as batches need them (the VJP on its first
    backward): for batches of `THREADED_BATCH` and more, with its loops split between
    threads; for smaller ones, single-threaded (starting the threads for each loop costs more
    than they save)."""

    def __init__(
        self, key: str, traces: Traces, inputs: list[Tensor], batched: list[bool], label: str = ""
    ):
        self.key = key
        self.label = label or f"the world structure {key}"  # `notices.StructureId.label`
        self._traces = traces
        # the first batch entry is all that tracing needs (`_example`)
        self._inputs = [
            t.detach()[:1] if b else t.detach() for t, b in zip(inputs, batched, strict=True)
        ]
        self.batched = batched  # which inputs have a batch axis
        self._forwards: dict[bool, Callable | None] = {}
        self._vjps: dict[tuple[bool, bool], Callable] = {}
        self._libraries: dict[tuple[str, bool], Callable | None] = {}

    def forward(self, inputs: list[Tensor]) -> list[Tensor]:
        threaded = inputs[len(WORLD_FIELDS)].shape[0] >= THREADED_BATCH
        return self._forwards[threaded](inputs)

    def status(self, batch: int) -> str:
        """The forward build for batches of this size: "ready" (built or loaded in this
        process), "failed" or "untried" (neither yet: the disk cache is not looked at)."""
        threaded = batch >= THREADED_BATCH
        if threaded not in self._forwards:
            return "untried"
        return "failed" if self._forwards[threaded] is None else "ready"

    def library_status(self, names: tuple[str, ...], threaded: bool) -> str:
        """`status` of the libraries ``names`` (`library`) of one kind of batch together:
        "failed" if any failed, "ready" if all are there, else "untried"."""
        found = [self._libraries.get((name, threaded), "untried") for name in names]
        if any(f is None for f in found):
            return "failed"
        return "untried" if "untried" in found else "ready"

    def serves(self, batch: int) -> bool:
        """Whether the forward build for batches of this size is there, built now if need be
        (a failed build is remembered, with a warning: those batches take torch.compile)."""
        threaded = batch >= THREADED_BATCH
        if threaded not in self._forwards:
            try:
                self._forward_build(threaded)
            except Exception as error:  # noqa: BLE001 - any failure falls back to torch.compile
                sizes = f"{'>=' if threaded else '<'} {THREADED_BATCH}"
                notices.fall_back(
                    self.label, self.key, f"aot_build:{_kind(threaded)}",
                    "ahead-of-time step", "torch.compile",
                    f"the reduced step could not be built ahead of time for batches {sizes} "
                    f"({type(error).__name__}: {error}); those step through torch.compile "
                    "instead",
                )  # fmt: skip
                self._forwards[threaded] = None
        return self._forwards[threaded] is not None

    def _forward_build(self, threaded: bool) -> Callable:
        if threaded not in self._forwards:
            example = _example(self._inputs, self.batched, threaded)
            self._forwards[threaded] = _build(
                f"{self.key}-forward-{_kind(threaded)}-{_sizes([t.shape for t in example])}",
                lambda: _export(self._traces.step, example, self.batched),
            )
        return self._forwards[threaded]

    def vjp(self, inputs: list[Tensor], world: bool = False) -> list[Tensor]:
        threaded = inputs[len(WORLD_FIELDS)].shape[0] >= THREADED_BATCH
        if (world, threaded) not in self._vjps:
            example = _example(self._inputs, self.batched, threaded)
            name, trace = (
                ("vjp_world", self._traces.vjp_world) if world else ("vjp", self._traces.vjp)
            )
            try:
                self._vjps[world, threaded] = _build(
                    f"{self.key}-{name}-{_kind(threaded)}-{_sizes([t.shape for t in example])}",
                    lambda: _export_vjp(trace, example, self.batched),
                )
            except Exception as error:  # noqa: BLE001 - any failure falls back to eager
                notices.fall_back(
                    self.label, self.key, f"aot_{name}:{_kind(threaded)}",
                    "ahead-of-time backward", "eager backward",
                    f"the reduced step's VJP{' to the world' if world else ''} could not be "
                    f"built ahead of time ({type(error).__name__}: {error}); its backward runs "
                    "eagerly",
                )  # fmt: skip
                # the same trace, run eagerly
                self._vjps[world, threaded] = lambda inputs, trace=trace: list(trace(*inputs))
        return self._vjps[world, threaded](inputs)

    def library(self, name: str, trace: Callable, example: Callable, threaded: bool,
                through_make_fx: bool, eager_fallback: bool) -> Callable | None:  # fmt: skip
        """Another function of this world structure built as a library on first use (the
        rollout's, `physics.aot_rollout`): ``trace`` on flat tensor lists, exported from the
        inputs and dynamic axes that ``example(step inputs, batched)`` makes of the step's
        example inputs (`_example`). A failed build warns once and gives None, or with
        ``eager_fallback`` runs ``trace`` eagerly."""
        if (name, threaded) not in self._libraries:
            inputs, axes = example(_example(self._inputs, self.batched, threaded), self.batched)
            try:
                # the example follows from the key and the kind: its name needs no more
                built = _build(
                    f"{self.key}-rollout-{name}-{_kind(threaded)}",
                    lambda: _export_traced(trace, inputs, axes, through_make_fx),
                )
            except Exception as error:  # noqa: BLE001 - any failure falls back
                then = "it runs eagerly" if eager_fallback else "rollouts take single steps"
                notices.fall_back(
                    self.label, self.key, f"rollout_library:{name}:{_kind(threaded)}",
                    "ahead-of-time rollout", "eager" if eager_fallback else "single steps",
                    f"the reduced rollout's {name!r} could not be built ahead of time "
                    f"({type(error).__name__}: {error}); {then}",
                )  # fmt: skip
                built = (lambda inputs: list(trace(*inputs))) if eager_fallback else None
            self._libraries[name, threaded] = built
        return self._libraries[name, threaded]


class _Step(torch.autograd.Function):
    """One step through a `Program`: inputs the state's 4 tensors and the action (if any),
    outputs the next state's 4 tensors; the backward runs the program's VJP on the saved
    inputs. The world's tensors come as one list, not as inputs of the node (autograd would
    check and save each of them on every step): they get no gradient (`_StepWithWorld` gives
    them one)."""

    @staticmethod
    def forward(ctx, program: Program, world_inputs: list[Tensor], *inputs: Tensor):
        ctx.program, ctx.world_inputs = program, world_inputs
        ctx.save_for_backward(*inputs)
        return tuple(program.forward([*world_inputs, *inputs]))

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads: Tensor):
        grads = [g.contiguous() for g in grads]
        return (None, None, *ctx.program.vjp([*ctx.world_inputs, *ctx.saved_tensors, *grads]))


class _StepWithWorld(torch.autograd.Function):
    """`_Step` for a world whose tensors require grad: the world's tensor fields the step
    reads (`WORLD_FIELDS`) are inputs of the node too, and the backward runs the program's
    VJP to the world (``vjp(..., world=True)``)."""

    @staticmethod
    def forward(ctx, program: Program, *inputs: Tensor):
        ctx.program = program
        ctx.save_for_backward(*inputs)
        return tuple(program.forward(list(inputs)))

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads: Tensor):
        grads = [g.contiguous() for g in grads]
        return (None, *ctx.program.vjp([*ctx.saved_tensors, *grads], world=True))


def step_indices(n: int, device: torch.device) -> list[Tensor]:
    """The step indices 0 .. n - 1 as () int64 tensors on ``device`` (for libraries that pick
    a step of a trajectory), made once and reused."""
    cached = _INDICES.setdefault(str(device), [])
    if len(cached) < n:
        cached[:] = list(torch.arange(max(n, 2 * len(cached)), device=device).unbind())
    return cached


_INDICES: dict[str, list[Tensor]] = {}


_PROGRAMS: dict[tuple, Program | None] = {}
#: File names of the libraries this process built and of those it loaded from the disk cache.
BUILT: list[str] = []
LOADED: list[str] = []


def aot_reduced_step(world: World, state: State, action: Tensor | None) -> State | None:
    """`reduced_step` through the world structure's `Program`, or None where it does not
    serve: an empty batch, forward-mode AD or a functorch transform (the libraries see plain
    tensors), or a structure whose export or build failed. (`compiled_step` asks
    `physics.dispatch` first and calls `lookup_step` and `run_step` itself.)"""
    if state.position.shape[0] < 1 or not plain_reverse_mode():
        return None
    found = lookup_step(world, state, action)
    return None if found is None else run_step(found, state)


@dataclasses.dataclass(frozen=True)
class Lookup:
    """What stepping a world through its `Program` takes: the program (None if it could not
    be made), the world's tensor fields the step reads (`WORLD_FIELDS`, contiguous), whether
    any of them requires grad (with grad enabled: the step then gives them gradients through
    `_StepWithWorld`), and the action (B, A) (per world; None for a world without
    actuators)."""

    program: Program | None
    world_inputs: list[Tensor]
    world_grad: bool
    action: Tensor | None
    paired: bool = False  # a single world, stepped as a pair (`paired`)


def lookup_step(world: World, state: State, action: Tensor | None) -> Lookup | None:
    """The `Lookup` for stepping ``world`` from ``state`` (B, N, ...) with ``action`` (B|1, A),
    building nothing, or None where no program applies: maximal coordinates, an empty batch,
    no action for a world with actuators (the step's own error). A single world looks up
    the program of its pair (`paired`)."""
    batch = state.position.shape[0]
    if world.structure.tree is None or batch < 1:
        return None
    if world.actuator_names and action is None:
        return None
    single = batch == 1
    if single:
        world, state = paired(world, state)
        batch = 2
    action = per_world(action, batch, dim=2) if world.actuator_names else None
    program, world_inputs, world_grad = lookup_program(world, state, action)
    return Lookup(program, world_inputs, world_grad, action, paired=single)


def paired(world: World, state: State) -> tuple[World, State]:
    """A single world (B = 1) as two identical ones, for the libraries (an exported batch axis
    starts at 2): the world's per-batch fields the step reads and the state repeated along
    the batch axis (views). The world's pair is made once (kept in its ``__dict__`` while
    those fields are the same objects). Worlds are independent, so the first of the pair
    steps as the single world does, and its gradients are the single world's."""
    current = [getattr(world, name) for name in WORLD_FIELDS]
    cached = world.__dict__.get("_aot_pair")
    if cached is None or not all(a is b for a, b in zip(cached[0], current, strict=True)):
        doubled = {
            name: t.expand(2, *t.shape[1:])
            for name, t in zip(WORLD_FIELDS, current, strict=True)
            if name in _BATCHED and t.dim() > 0 and t.shape[0] == 1
        }
        cached = (current, dataclasses.replace(world, **doubled))
        world.__dict__["_aot_pair"] = cached
    return cached[1], State(*(t.expand(2, *t.shape[1:]) for t in state.tensors()))


def run_step(found: Lookup, state: State) -> State | None:
    """One step from ``state`` through ``found.program`` (its forward for this batch built or
    loaded now if need be; a `_Step` node when gradients flow, a `_StepWithWorld` node when
    they flow to the world's tensors), or None if there is no program or that build
    failed."""
    if found.paired:
        state = State(*(t.expand(2, *t.shape[1:]) for t in state.tensors()))
    batch = state.position.shape[0]
    program = found.program
    if program is None or not program.serves(batch):
        return None
    inputs = [t.contiguous() for t in state.tensors()]
    if found.action is not None:
        inputs.append(found.action.contiguous())
    if torch.is_grad_enabled() and found.world_grad:
        outputs = _StepWithWorld.apply(program, *found.world_inputs, *inputs)
    elif torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        outputs = _Step.apply(program, found.world_inputs, *inputs)
    else:
        outputs = program.forward([*found.world_inputs, *inputs])
    if found.paired:
        outputs = [t[:1] for t in outputs]
    return State(*outputs)


def per_world(actions: Tensor | None, batch: int, dim: int) -> Tensor | None:
    """Actions shared by every world (batch axis -2 of size 1: (1, A) for a step, dim 2;
    (steps, 1, A) for a rollout, dim 3) as per-world ones: one program (and one set of
    libraries) serves both; the expansion's backward sums the gradients back. Others as
    given."""
    if actions is None or actions.dim() != dim or actions.shape[-2] != 1:
        return actions
    return actions.expand(*actions.shape[:-2], batch, actions.shape[-1])


def plain_reverse_mode() -> bool:
    """False inside forward-mode AD or a functorch transform (vmap, jacfwd...)."""
    if getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0:
        return False
    stack = getattr(torch._C._functorch, "peek_interpreter_stack", None)
    return stack is None or stack() is None


def lookup_program(world: World, state: State, action: Tensor | None):
    """The `Program` for this world, state and action (None if it cannot be built), the
    world's tensor fields the step reads (`WORLD_FIELDS`) made contiguous (kept on the
    world, in its ``__dict__``, while those fields are the same objects; made afresh each
    call where one requires grad, so that an optimizer's in-place update is seen and each
    step has its own graph), and whether any of them requires grad."""
    current = [getattr(world, name) for name in WORLD_FIELDS]
    world_grad = any(t.requires_grad for t in current)
    cached = world.__dict__.get("_aot_steps")
    if cached is None or not all(a is b for a, b in zip(cached[0], current, strict=True)):
        cached = (current, [t.contiguous() for t in current], {})
        world.__dict__["_aot_steps"] = cached
    _, world_inputs, programs = cached
    if world_grad:
        world_inputs = [t.contiguous() for t in current]
    tensors = [*state.tensors(), *([] if action is None else [action])]
    batch = state.position.shape[0]
    local = (batch, tuple((t.shape, t.dtype, t.device) for t in tensors))
    if local not in programs:
        inputs = [*world_inputs, *tensors]
        batched = _batched(world_inputs, tensors, batch)
        signature = _signature(world, inputs, batched)
        if signature not in _PROGRAMS:
            _PROGRAMS[signature] = _program(world, inputs, batched, signature)
        programs[local] = _PROGRAMS[signature]
    return programs[local], world_inputs, world_grad


def _batched(world_inputs: list[Tensor], tensors: list[Tensor], batch: int) -> list[bool]:
    """Which of the step's inputs (the world's tensor fields, then the state's tensors and
    the action) have a batch axis."""
    return [
        name in _BATCHED and t.dim() > 0 and t.shape[0] == batch
        for name, t in zip(WORLD_FIELDS, world_inputs, strict=True)
    ] + [t.shape[0] == batch for t in tensors]


def on_disk(
    world: World,
    state: State,
    action: Tensor | None,
    backward: bool,
    rollout: bool = False,
    world_grad: bool = False,
) -> bool:
    """Whether the libraries that stepping ``world`` from ``state`` with ``action`` (B, A)
    would use are in the disk cache: the forward for this batch size and, with
    ``backward``, its VJP (with ``world_grad``, the VJP to the world's tensors); with
    ``rollout``, those of a rollout under an action sequence (`physics.aot_rollout`). Then
    stepping compiled costs an export and a trace (seconds), not a build. False where the step
    is not built ahead of time (maximal coordinates, an empty batch); a single world's are its
    pair's (`paired`).
    """
    batch = state.position.shape[0]
    if world.structure.tree is None or batch < 1:
        return False
    if batch == 1:
        world, state = paired(world, state)
        batch = 2
    action = per_world(action, batch, dim=2) if world.actuator_names else None
    world_inputs = [getattr(world, name) for name in WORLD_FIELDS]
    tensors = [*state.tensors(), *([] if action is None else [action])]
    inputs = [*world_inputs, *tensors]
    batched = _batched(world_inputs, tensors, batch)
    key = _key(_signature(world, inputs, batched))
    threaded = batch >= THREADED_BATCH
    kind = _kind(threaded)
    if rollout:
        names = ROLLOUT_LIBRARIES + (ROLLOUT_VJPS if backward else ())
        return all(_library_path(f"{key}-rollout-{name}-{kind}").exists() for name in names)
    shapes = _example_shapes(inputs, batched, threaded)
    names = ["forward", "vjp_world" if world_grad else "vjp"] if backward else ["forward"]
    return all(_library_path(f"{key}-{n}-{kind}-{_sizes(shapes)}").exists() for n in names)


#: The libraries a rollout under an action sequence builds (`physics.aot_rollout`): forward,
#: and for its backward.
ROLLOUT_LIBRARIES = ("first", "block", "states")
ROLLOUT_VJPS = ("first_vjp", "vjp")


def _signature(world: World, inputs: list[Tensor], batched: list[bool]) -> tuple:
    """What the program depends on: the world's static fields, every input's shape (the
    batch axis as "B"), dtype and device."""
    static = tuple(
        (f.name, repr(getattr(world, f.name)))
        for f in dataclasses.fields(World)
        if f.name not in TENSOR_FIELDS and f.name != "structure"
    )
    shapes = tuple(
        (("B", *t.shape[1:]) if b else tuple(t.shape), str(t.dtype), str(t.device))
        for t, b in zip(inputs, batched, strict=True)
    )
    return static, shapes


def _program(world: World, inputs: list[Tensor], batched: list[bool], signature) -> Program | None:
    key = _key(signature)
    label = notices.structure_of(world).label
    _LABELS[key] = label
    try:
        log.info("the reduced step's program (AOTInductor), key %s: its libraries are built or "
                 "loaded on first use", key)  # fmt: skip
        return Program(key, _traces(world, len(inputs) > len(WORLD_FIELDS) + _STATE_TENSORS),
                       inputs, batched, label)  # fmt: skip
    except Exception as error:  # noqa: BLE001 - any failure falls back to torch.compile
        notices.fall_back(
            label, key, "aot_program", "ahead-of-time step", "torch.compile",
            f"the reduced step could not be built ahead of time ({type(error).__name__}: "
            f"{error}); stepping through torch.compile instead",
        )  # fmt: skip
        return None


#: Each program key's structure label (`notices.StructureId.label`), for the build notice.
_LABELS: dict[str, str] = {}


def _traces(world: World, with_action: bool) -> Traces:
    """The step and its VJP of ``world`` on flat tensor lists (`Program`), through
    `unrolled_step` (the world's tensor fields are inputs: one build serves every value of
    them)."""
    n_world = len(WORLD_FIELDS)

    def split(flat):
        """The world, the state's 4 tensors, the action (or None) and the rest."""
        model = dataclasses.replace(world, **dict(zip(WORLD_FIELDS, flat[:n_world], strict=True)))
        end = n_world + _STATE_TENSORS + int(with_action)
        action = flat[end - 1] if with_action else None
        return model, flat[n_world : n_world + _STATE_TENSORS], action, flat[end:]

    def step(*flat: Tensor) -> tuple[Tensor, ...]:
        model, state, action, _ = split(flat)
        return unrolled_step(model, State(*state), action).tensors()

    def vjp(*flat: Tensor) -> tuple[Tensor, ...]:
        model, state, action, grads = split(flat)
        return tuple(unrolled_vjp(model, State(*state), action, State(*grads)))

    def vjp_world(*flat: Tensor) -> tuple[Tensor, ...]:
        model, state, action, grads = split(flat)
        return tuple(unrolled_vjp(model, State(*state), action, State(*grads), WORLD_FIELDS))

    return Traces(step, vjp, vjp_world)


def _key(signature) -> str:
    return hashlib.sha256(repr((signature, torch.__version__)).encode()).hexdigest()[:24]


def _example_shapes(inputs: list[Tensor], batched: list[bool], threaded: bool) -> list[tuple]:
    """The shapes of `_example`'s tensors."""
    sizes = {n for t, b in zip(inputs, batched, strict=True) for n in t.shape[int(b) :]}
    candidates = (1031, 1033, 1039, 1049, 1051) if threaded else (17, 19, 23, 29, 31, 37)
    batch = next(n for n in candidates if n not in sizes)
    return [
        (batch, *t.shape[1:]) if b else tuple(t.shape) for t, b in zip(inputs, batched, strict=True)
    ]


def _example(inputs: list[Tensor], batched: list[bool], threaded: bool) -> list[Tensor]:
    """Inputs to trace with: the batched ones repeated to a batch size that no other axis
    has (tracing gives equal sizes one symbol, and a batch of 3 beside (3,)-vectors would
    then be traced as the constant 3). Inductor splits loops between threads by this size:
    ``threaded`` takes a size past its threshold, else one below it."""
    shapes = _example_shapes(inputs, batched, threaded)
    return [
        t[:1].expand(shape).contiguous() if b else t
        for t, b, shape in zip(inputs, batched, shapes, strict=True)
    ]


def _export_traced(trace: Callable, example: list[Tensor], dims: list, through_make_fx: bool):
    """``trace`` exported with each input's batch axis ``dims`` (None: static; a dict of
    axis → `torch.export.Dim` for more than the batch axis) dynamic; with ``through_make_fx``,
    traced by `make_fx` first (a function that calls `torch.func`)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    dynamic = tuple(d if d is None or isinstance(d, dict) else {d: BATCH} for d in dims)
    with tracing_for_compilation():
        if through_make_fx:
            trace = make_fx(trace, tracing_mode="symbolic", _allow_non_fake_inputs=True)(*example)
        return torch.export.export(
            _AsModule(trace), tuple(example), dynamic_shapes=(dynamic,), strict=False
        )


def _sizes(shapes: list[tuple]) -> str:
    """A short digest of the example's shapes (Inductor's code depends on them)."""
    return hashlib.sha256(repr([tuple(shape) for shape in shapes]).encode()).hexdigest()[:12]


class _AsModule(torch.nn.Module):
    """A function of tensors as the module `torch.export` takes."""

    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def forward(self, *args: Tensor):
        return self.fn(*args)


def _export(trace: Callable, example: list[Tensor], batched: list[bool]):
    return _export_traced(trace, example, batch_axes(batched), through_make_fx=False)


def _export_vjp(vjp: Callable, example: list[Tensor], batched: list[bool]):
    """The step's VJP trace (`Traces.vjp`) exported from the step's ``example`` and the
    gradients of the next state (distinct tensors: export takes a tensor passed twice as one
    input)."""
    n = len(WORLD_FIELDS)
    grads = [torch.randn_like(t) for t in example[n : n + _STATE_TENSORS]]
    axes = batch_axes(batched) + [0] * _STATE_TENSORS
    return _export_traced(vjp, [*example, *grads], axes, through_make_fx=True)


def batch_axes(batched: list[bool]) -> list[int | None]:
    return [0 if b else None for b in batched]


def _build(key: str, export: Callable) -> Callable[[list[Tensor]], list[Tensor]]:
    """The runner of an AOTInductor library: loaded from the disk cache when one was built
    for ``key`` by the same physics code (the file name hashes both), else built from
    ``export()`` there (written to a temporary name, then renamed: a crash leaves no partial
    file)."""
    path = _library_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), _quiet("torch.export.pt2_archive._package"):
        # torch's own deprecation notices while (un)pickling, and a note that the library's
        # recorded vector ISA (none: scalar loops) differs from the machine's
        warnings.simplefilter("ignore", FutureWarning)
        if path.exists():
            LOADED.append(path.name)
        else:
            structure = key.split("-", 1)[0]  # the program's key
            notices.announce_build(
                structure,
                f"physics: building the reduced step of {_LABELS.get(structure, 'a world')} "
                "ahead of time (AOTInductor: the step, its backward and a rollout's libraries, "
                f"each when first needed), {notices.BUILD_COST}; kept in {cache_dir()} "
                "(DIFFCAM_CACHE_DIR) for later processes",
            )
            partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.pt2")
            torch._inductor.aoti_compile_and_package(
                export(),
                package_path=str(partial),
                # a copy: the call adds its own entries to the dict it is given
                inductor_configs=dict(_INDUCTOR_CONFIGS),
            )
            os.replace(partial, path)
            BUILT.append(path.name)
        return torch._inductor.aoti_load_package(str(path)).loader.run


def _kind(threaded: bool) -> str:
    """The build kind in a library's key: Inductor splits loops between threads or not by
    the example's batch size (`_example`)."""
    return "threaded" if threaded else "single"


def _library_path(key: str) -> Path:
    """Where the library ``key`` is kept on disk."""
    digest = hashlib.sha256(f"{key}\n{_INDUCTOR_CONFIGS}\n{_source_digest()}".encode())
    return cache_dir() / f"{digest.hexdigest()[:32]}.pt2"


@functools.cache
def _source_digest() -> str:
    """A hash of the physics package's source: a library built by other code is not reused."""
    digest = hashlib.sha256()
    for file in sorted(Path(__file__).parent.rglob("*.py")):
        digest.update(file.read_bytes())
    return digest.hexdigest()


@contextlib.contextmanager
def _quiet(name: str):
    """Only errors from the logger ``name`` inside."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)
