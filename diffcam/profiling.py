"""Where the time of a closed-loop training iteration goes: rendering, the network, physics.

Method (say it with every figure):

- Forward: measured. `TimedScene` and `TimedModule` wrap the scene's ``render`` and ``step`` and
  the policy's ``forward`` with wall-clock timers, and the iteration runs through them; "other"
  is the rest of the forward (observers, gradient decay, the loss).
- Backward: the total is measured. Autograd runs one backward pass over the whole graph, so its
  split is *estimated*: the backward of one render, one policy call and one physics step is
  timed on separately built graphs of the same shapes (inputs that require grad, a random
  projection of the outputs as the loss) and multiplied by how often each part ran. With
  checkpointed BPTT the forward runs again inside the backward ("recompute", taken as the
  measured forward). "other" is the measured total minus those: autograd overhead, the loss.

Timings are wall clock (``time.perf_counter``) on whatever else the machine is doing: on a
shared machine repeat them and read the medians.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

import torch
from torch import nn

__all__ = ["Stopwatch", "TimedModule", "TimedScene", "backward_seconds"]


class Stopwatch:
    """Accumulated seconds and call counts per name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)

    def timed(self, name: str, fn: Callable) -> Callable:
        """``fn`` with every call's wall time added to ``name``."""

        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
                self.calls[name] += 1

        return wrapper


class TimedScene:
    """A scene whose ``render``, ``step`` and ``rollout`` are timed by ``watch`` (as "render",
    "physics", "physics"); everything else is the wrapped scene's."""

    def __init__(self, scene, watch: Stopwatch) -> None:
        self._scene = scene
        self.render = watch.timed("render", scene.render)
        self.step = watch.timed("physics", scene.step)
        if hasattr(scene, "rollout"):
            self.rollout = watch.timed("physics", scene.rollout)

    def __getattr__(self, name: str):
        return getattr(self._scene, name)


class TimedModule(nn.Module):
    """``module`` with its forward timed by ``watch`` under ``name``; same parameters."""

    def __init__(self, module: nn.Module, watch: Stopwatch, name: str) -> None:
        super().__init__()
        self.module = module
        self._forward = watch.timed(name, module)

    def forward(self, *args, **kwargs):
        return self._forward(*args, **kwargs)


def backward_seconds(build: Callable[[], torch.Tensor | tuple], repeats: int = 3) -> float:
    """Median wall time of the backward pass of ``build()``'s outputs (not of ``build``).

    ``build`` makes a fresh graph from inputs that require grad; each output is contracted with
    a fixed random tensor of its shape, so every output element carries gradient.
    """
    times = []
    generator = torch.Generator().manual_seed(0)
    for _ in range(repeats):
        outputs = build()
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        loss = sum(
            (o * torch.randn(o.shape, generator=generator, dtype=o.dtype).to(o.device)).sum()
            for o in outputs
        )
        start = time.perf_counter()
        loss.backward()
        times.append(time.perf_counter() - start)
    return sorted(times)[len(times) // 2]
