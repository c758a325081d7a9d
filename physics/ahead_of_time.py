"""The reduced step compiled ahead of time (AOTInductor): what `compiled_step` runs for worlds
in reduced coordinates with a batch of two or more.

A small world's compiled step computes less than torch.compile's runtime costs per call: its
guards, the autograd wrapper and a Python wrapper that allocates and views every buffer. Here
the step is exported (`torch.export`, the batch axis dynamic) and AOTInductor builds it into a
shared library whose C++ runner does that work instead; its reverse-mode derivative is a second
library, the step's vector-Jacobian product (traced by `make_fx` through `torch.func.vjp`; it
recomputes the forward from the step's inputs, so a step saves only its inputs), built the
first time a backward needs it. `_Step` joins the two as one autograd node per step, and
`_Rollout` a whole rollout under a fixed action sequence as one node (`aot_reduced_rollout`).
Batches below `THREADED_BATCH` have their own builds (`Program`).

A world structure, dtype and device makes one program, shared by every batch size from 2 up. The
libraries are kept in memory and on disk (``DIFFCAM_CACHE_DIR``, by default a folder in the
system's temporary directory), keyed by the world's structure, the inputs' shapes, Inductor's
options, the physics package's source and the torch version: another process traces the step
again but loads the library instead of compiling it. A failure to export or build the step
falls back to torch.compile (`compiled_step`), one of its VJP to an eager backward, each with
a warning.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import torch
from torch.autograd.function import once_differentiable

from .articulated import reduced_step
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
# Scalar C++ loops, as `compiled_step`'s (the engine's innermost axes are 2, 3 or 6 long).
_INDUCTOR_CONFIGS = {"cpp.simdlen": 1}
# The single-threaded builds' (`Program`): one planned block for the intermediate buffers.
_PLANNED_CONFIGS = {**_INDUCTOR_CONFIGS, "memory_planning": True}
# Inductor's memory planning recurses through the graph's buffers: deeper than Python's
# default limit for a few bodies (a cart-pole with a welded tip).
_PLANNING_RECURSION_LIMIT = 20_000
#: Batch size from which a backward runs the VJP build whose loops are split between threads.
THREADED_BATCH = 512


def cache_dir() -> Path:
    """Where built steps are kept: ``DIFFCAM_CACHE_DIR``, else a folder in the system's
    temporary directory."""
    root = os.environ.get("DIFFCAM_CACHE_DIR") or Path(tempfile.gettempdir()) / "diffcam_cache"
    return Path(root) / "aot_steps"


class Program:
    """A world structure's step built ahead of time: ``forward(inputs)`` and
    ``vjp(inputs + output gradients)`` run the libraries on flat tensor lists: the world's
    tensor fields (`TENSOR_FIELDS` order), the state's 4 tensors and, when the step takes
    one, the action (B, A). ``vjp`` returns the gradients of the state's tensors and the
    action.

    Each comes in two builds, made as batches need them (the VJP on its first backward):
    for batches of `THREADED_BATCH` and more, with its loops split between threads; for
    smaller ones, single-threaded (starting the threads for each loop costs more than they
    save) and with its intermediate buffers planned into one allocation per call (there the
    allocations of about a hundred small buffers cost more than the arithmetic; a large
    batch's one block would be fresh pages on every call instead)."""

    def __init__(self, key: str, trace: Callable, inputs: list[Tensor], batched: list[bool]):
        self.key = key
        self._trace = trace
        # the first batch entry is all that tracing needs (`_example`)
        self._inputs = [
            t.detach()[:1] if b else t.detach() for t, b in zip(inputs, batched, strict=True)
        ]
        self._batched = batched
        self._forwards: dict[bool, Callable | None] = {}
        self._vjps: dict[bool, Callable] = {}
        self._forward_build(threaded=inputs[len(TENSOR_FIELDS)].shape[0] >= THREADED_BATCH)

    def forward(self, inputs: list[Tensor]) -> list[Tensor]:
        threaded = inputs[len(TENSOR_FIELDS)].shape[0] >= THREADED_BATCH
        return self._forwards[threaded](inputs)

    def serves(self, batch: int) -> bool:
        """Whether the forward build for batches of this size is there, built now if need be
        (a failed build is remembered, with a warning: those batches take torch.compile)."""
        threaded = batch >= THREADED_BATCH
        if threaded not in self._forwards:
            try:
                self._forward_build(threaded)
            except Exception as error:  # noqa: BLE001 - any failure falls back to torch.compile
                log.warning("the reduced step could not be built ahead of time for batches %s "
                            "%d (%s: %s); those step through torch.compile instead",
                            ">=" if threaded else "<", THREADED_BATCH, type(error).__name__,
                            error)  # fmt: skip
                self._forwards[threaded] = None
        return self._forwards[threaded] is not None

    def _forward_build(self, threaded: bool) -> Callable:
        if threaded not in self._forwards:
            example = _example(self._inputs, self._batched, threaded)
            self._forwards[threaded] = _build(
                f"{self.key}-forward-{_sizes([t.shape for t in example])}",
                lambda: _export(self._trace, example, self._batched),
                threaded,
            )
        return self._forwards[threaded]

    def vjp(self, inputs: list[Tensor]) -> list[Tensor]:
        threaded = inputs[len(TENSOR_FIELDS)].shape[0] >= THREADED_BATCH
        if threaded not in self._vjps:
            example = _example(self._inputs, self._batched, threaded)
            try:
                self._vjps[threaded] = _build(
                    f"{self.key}-vjp-{_sizes([t.shape for t in example])}",
                    lambda: _export_vjp(self._trace, example, self._batched),
                    threaded,
                )
            except Exception as error:  # noqa: BLE001 - any failure falls back to eager
                log.warning("the reduced step's VJP could not be built ahead of time (%s: %s); "
                            "its backward runs eagerly", type(error).__name__, error)  # fmt: skip
                self._vjps[threaded] = self._eager_vjp
        return self._vjps[threaded](inputs)

    def _eager_vjp(self, inputs: list[Tensor]) -> list[Tensor]:
        """`vjp` by eager autograd (the step recomputed, then `torch.func.vjp`)."""
        n_fixed = len(TENSOR_FIELDS)
        fixed, free = inputs[:n_fixed], inputs[n_fixed:-_STATE_TENSORS]
        _, pull = torch.func.vjp(lambda *f: self._trace(*fixed, *f), *free)
        return list(pull(tuple(inputs[-_STATE_TENSORS:])))


class _Step(torch.autograd.Function):
    """One step through a `Program`: inputs the state's 4 tensors and the action (if any),
    outputs the next state's 4 tensors; the backward runs the program's VJP on the saved
    inputs. The world's tensors come as one list, not as inputs of the node (autograd would
    check and save each of them on every step): they get no gradient, since worlds whose
    tensors require grad take the eager step."""

    @staticmethod
    def forward(ctx, program: Program, world_inputs: list[Tensor], *inputs: Tensor):
        ctx.program, ctx.world_inputs = program, world_inputs
        ctx.save_for_backward(*inputs)
        return tuple(program.forward([*world_inputs, *inputs]))

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads: Tensor):
        inputs = [*ctx.world_inputs, *ctx.saved_tensors, *(g.contiguous() for g in grads)]
        return (None, None, *ctx.program.vjp(inputs))


_PROGRAMS: dict[tuple, Program | None] = {}
#: File names of the libraries this process built and of those it loaded from the disk cache.
BUILT: list[str] = []
LOADED: list[str] = []


def aot_reduced_step(world: World, state: State, action: Tensor | None) -> State | None:
    """`reduced_step` through the world structure's `Program`, or None where it does not
    serve: a batch of one, forward-mode AD or a functorch transform (the libraries see plain
    tensors), a world whose own tensors require grad (with grad enabled: the program gives
    them no gradient), or a structure whose export or build failed."""
    batch = state.position.shape[0]
    if batch < 2 or not _plain_reverse_mode():
        return None
    if world.actuator_names and action is None:
        return None  # the step's own error (no action for a world with actuators)
    action = action if world.actuator_names else None
    program, world_inputs, world_grad = _lookup(world, state, action)
    if program is None or (world_grad and torch.is_grad_enabled()) or not program.serves(batch):
        return None
    inputs = [t.contiguous() for t in state.tensors()]
    if action is not None:
        inputs.append(action.contiguous())
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        outputs = _Step.apply(program, world_inputs, *inputs)
    else:
        outputs = program.forward([*world_inputs, *inputs])
    return State(*outputs)


def aot_reduced_rollout(
    world: World, state: State, steps: int, actions: Tensor | None, gradient_decay: float = 1.0
) -> State | None:
    """`steps` reduced steps from ``state`` under a fixed action sequence ``actions``
    (steps, B|1, A) (None for a world without actuators) through the world structure's
    `Program`, as one autograd node (`_Rollout`): the trajectory (steps + 1, B, ...), index 0
    the initial state, or None where `aot_reduced_step` would not serve. ``gradient_decay``
    scales the gradient reaching each step's input state, as `rollout.decay_state_gradient`
    applied before every step does."""
    batch = state.position.shape[0]
    if batch < 2 or steps < 1 or not _plain_reverse_mode():
        return None
    if not world.actuator_names:
        actions = None
    elif actions is None:
        return None  # the step's own error (no action for a world with actuators)
    else:
        actions = actions.contiguous()
    program, world_inputs, world_grad = _lookup(
        world, state, None if actions is None else actions[0]
    )
    if program is None or (world_grad and torch.is_grad_enabled()) or not program.serves(batch):
        return None
    inputs = [t.contiguous() for t in state.tensors()]
    if actions is not None:
        inputs.append(actions)
    if torch.is_grad_enabled() and any(t.requires_grad for t in inputs):
        return State(*_Rollout.apply(program, world_inputs, steps, gradient_decay, *inputs))
    return State(*_run_forward(program, world_inputs, steps, inputs))


def _run_forward(program: Program, world_inputs: list[Tensor], steps: int, inputs: list[Tensor]):
    """The 4 trajectory tensors (steps + 1, B, ...) of `steps` program steps from the state
    ``inputs[:4]`` under the actions ``inputs[4]`` (steps, B|1, A), if any."""
    per_step = inputs[4].unbind(0) if len(inputs) > _STATE_TENSORS else None
    states = [inputs[:_STATE_TENSORS]]
    for t in range(steps):
        step_inputs = [*world_inputs, *states[-1]]
        if per_step is not None:
            step_inputs.append(per_step[t])
        states.append(program.forward(step_inputs))
    return tuple(torch.stack(column) for column in zip(*states, strict=True))


class _Rollout(torch.autograd.Function):
    """A whole rollout through a `Program` as one autograd node: inputs the initial state's
    4 tensors and the actions (steps, B|1, A) if any, outputs the trajectory's 4 tensors
    (steps + 1, B, ...). It saves the trajectory; the backward runs the program's VJP step by
    step from the last, the state's gradient scaled by ``decay`` at each step's input. One
    node, not one per step: autograd's per-node work and the per-step Python of `rollout`
    cost more than a small world's step computes."""

    @staticmethod
    def forward(ctx, program, world_inputs, steps: int, decay: float, *inputs: Tensor):
        trajectory = _run_forward(program, world_inputs, steps, list(inputs))
        ctx.program, ctx.world_inputs, ctx.steps, ctx.decay = program, world_inputs, steps, decay
        ctx.save_for_backward(*trajectory, *inputs[_STATE_TENSORS:])
        return trajectory

    @staticmethod
    @once_differentiable
    def backward(ctx, *grads: Tensor):
        saved = ctx.saved_tensors
        # per-step views, each made by one unbind, not one index per step
        states = list(zip(*(x.unbind(0) for x in saved[:_STATE_TENSORS]), strict=True))
        per_step = saved[_STATE_TENSORS].unbind(0) if len(saved) > _STATE_TENSORS else None
        incoming = list(zip(*(g.contiguous().unbind(0) for g in grads), strict=True))
        g_state, g_actions = list(incoming[-1]), []
        for t in range(ctx.steps - 1, -1, -1):
            inputs = [*ctx.world_inputs, *states[t]]
            if per_step is not None:
                inputs.append(per_step[t])
            pulled = ctx.program.vjp([*inputs, *g_state])
            if per_step is not None:
                g_actions.append(pulled[_STATE_TENSORS])
            g_state = torch._foreach_add(incoming[t], pulled[:_STATE_TENSORS], alpha=ctx.decay)
        g_actions = [torch.stack(g_actions[::-1])] if per_step is not None else []
        return (None, None, None, None, *g_state, *g_actions)


def _plain_reverse_mode() -> bool:
    """False inside forward-mode AD or a functorch transform (vmap, jacfwd...)."""
    if getattr(torch.autograd.forward_ad, "_current_level", -1) >= 0:
        return False
    stack = getattr(torch._C._functorch, "peek_interpreter_stack", None)
    return stack is None or stack() is None


def _lookup(world: World, state: State, action: Tensor | None):
    """The `Program` for this world, state and action (None if it cannot be built), the
    world's tensor fields made contiguous (kept on the world, in its ``__dict__``, while its
    tensor fields are the same objects), and whether any of them requires grad."""
    current = [getattr(world, name) for name in TENSOR_FIELDS]
    world_grad = any(t.requires_grad for t in current)
    cached = world.__dict__.get("_aot_steps")
    if cached is None or not all(a is b for a, b in zip(cached[0], current, strict=True)):
        cached = (current, [t.contiguous() for t in current], {})
        world.__dict__["_aot_steps"] = cached
    _, world_inputs, programs = cached
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
        for name, t in zip(TENSOR_FIELDS, world_inputs, strict=True)
    ] + [t.shape[0] == batch for t in tensors]


def on_disk(world: World, state: State, action: Tensor | None, backward: bool) -> bool:
    """Whether the libraries that stepping ``world`` from ``state`` with ``action`` (B, A)
    would use are in the disk cache: the forward for this batch size and, with
    ``backward``, its VJP. Then stepping compiled costs an export and a trace (seconds), not a
    build. False where the step is not built ahead of time (maximal coordinates, B < 2)."""
    batch = state.position.shape[0]
    if world.structure.tree is None or batch < 2:
        return False
    action = action if world.actuator_names else None
    world_inputs = [getattr(world, name) for name in TENSOR_FIELDS]
    tensors = [*state.tensors(), *([] if action is None else [action])]
    inputs = [*world_inputs, *tensors]
    batched = _batched(world_inputs, tensors, batch)
    key = _key(_signature(world, inputs, batched))
    threaded = batch >= THREADED_BATCH
    shapes = _example_shapes(inputs, batched, threaded)
    names = ["forward", "vjp"] if backward else ["forward"]
    return all(_library_path(f"{key}-{n}-{_sizes(shapes)}", threaded).exists() for n in names)


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
    n_world = len(TENSOR_FIELDS)
    with_action = len(inputs) > n_world + _STATE_TENSORS

    def trace(*flat: Tensor) -> tuple[Tensor, ...]:
        parameters = dict(zip(TENSOR_FIELDS, flat[:n_world], strict=True))
        state = State(*flat[n_world : n_world + _STATE_TENSORS])
        action = flat[-1] if with_action else None
        return reduced_step(dataclasses.replace(world, **parameters), state, action).tensors()

    key = _key(signature)
    try:
        log.info("building the reduced step ahead of time (AOTInductor), key %s", key)
        return Program(key, trace, inputs, batched)
    except Exception as error:  # noqa: BLE001 - any failure falls back to torch.compile
        log.warning("the reduced step could not be built ahead of time (%s: %s); stepping "
                    "through torch.compile instead", type(error).__name__, error)  # fmt: skip
        return None


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


def _sizes(shapes: list[tuple]) -> str:
    """A short digest of the example's shapes (Inductor's code depends on them)."""
    return hashlib.sha256(repr([tuple(shape) for shape in shapes]).encode()).hexdigest()[:12]


def _dynamic_shapes(batched: list[bool]) -> tuple:
    batch = torch.export.Dim("batch", min=2)
    return tuple({0: batch} if b else None for b in batched)


class _AsModule(torch.nn.Module):
    """A function of tensors as the module `torch.export` takes."""

    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def forward(self, *args: Tensor):
        return self.fn(*args)


def _export(trace: Callable, example: list[Tensor], batched: list[bool]):
    with tracing_for_compilation():
        return torch.export.export(
            _AsModule(trace), tuple(example), dynamic_shapes=(_dynamic_shapes(batched),),
            strict=False,
        )  # fmt: skip


def _export_vjp(trace: Callable, example: list[Tensor], batched: list[bool]):
    """The VJP of ``trace`` with respect to its state and action inputs, exported: inputs
    ``example`` then the 4 output gradients."""
    from torch.fx.experimental.proxy_tensor import make_fx

    n_fixed = len(TENSOR_FIELDS)

    def vjp(*flat: Tensor) -> tuple[Tensor, ...]:
        inputs, grads = flat[:-_STATE_TENSORS], flat[-_STATE_TENSORS:]
        fixed = inputs[:n_fixed]
        _, pull = torch.func.vjp(lambda *free: trace(*fixed, *free), *inputs[n_fixed:])
        return pull(tuple(grads))

    state = example[n_fixed : n_fixed + _STATE_TENSORS]
    grads = [torch.randn_like(t) for t in state]
    with tracing_for_compilation():
        graph = make_fx(vjp, tracing_mode="symbolic", _allow_non_fake_inputs=True)(*example, *grads)
        return torch.export.export(
            _AsModule(graph), (*example, *grads),
            dynamic_shapes=(_dynamic_shapes(batched + [True] * _STATE_TENSORS),), strict=False,
        )  # fmt: skip


def _build(key: str, export: Callable, threaded: bool) -> Callable[[list[Tensor]], list[Tensor]]:
    """The runner of an AOTInductor library: loaded from the disk cache when one was built
    for ``key`` by the same physics code (the file name hashes both), else built from
    ``export()`` there (written to a temporary name, then renamed: a crash leaves no partial
    file). A single-threaded build (not ``threaded``) plans its buffers (`Program`)."""
    configs = _INDUCTOR_CONFIGS if threaded else _PLANNED_CONFIGS
    path = _library_path(key, threaded)
    path.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings(), _quiet("torch.export.pt2_archive._package"):
        # torch's own deprecation notices while (un)pickling, and a note that the library's
        # recorded vector ISA (none: scalar loops) differs from the machine's
        warnings.simplefilter("ignore", FutureWarning)
        if path.exists():
            LOADED.append(path.name)
        else:
            partial = path.with_name(f"{path.stem}.{os.getpid()}.partial.pt2")
            with _recursion_limit(_PLANNING_RECURSION_LIMIT):
                torch._inductor.aoti_compile_and_package(
                    export(),
                    package_path=str(partial),
                    # a copy: the call adds its own entries to the dict it is given
                    inductor_configs=dict(configs),
                )
            os.replace(partial, path)
            BUILT.append(path.name)
        return torch._inductor.aoti_load_package(str(path)).loader.run


def _library_path(key: str, threaded: bool) -> Path:
    """Where the library ``key`` (with the build options of ``threaded``) is kept on disk."""
    configs = _INDUCTOR_CONFIGS if threaded else _PLANNED_CONFIGS
    digest = hashlib.sha256(f"{key}\n{configs}\n{_source_digest()}".encode())
    return cache_dir() / f"{digest.hexdigest()[:32]}.pt2"


@contextlib.contextmanager
def _recursion_limit(limit: int):
    """Python's recursion limit at least ``limit`` inside."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(previous, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


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
