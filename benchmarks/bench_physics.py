"""Cart-pole speed and memory: state-steps per second, forward and forward+backward; box-stack
contact detection and steps (the bundled `box_stack.toml`: box-box and box-plane contacts).

Prints one JSON line per measurement. Not part of the test suite.

    python benchmarks/bench_physics.py [--batches 1 64 1024 4096] [--steps 50] [--compile]
        [--at-stop 20 4] [--coordinates maximal reduced] [--workloads cartpole box_stack]
        [--box-stack-batches 1 64]

``--coordinates``: the maximal engine (joints as constraints) and/or reduced joint coordinates
(`physics.articulated`), the same cart-pole either way.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import physics  # noqa: E402
from physics.contacts import find_contacts  # noqa: E402
from tests.physics.models import cart_pole  # noqa: E402

BOX_STACK = "box_stack"  # the bundled scene, loaded by its name


def measure(
    batch: int,
    steps: int,
    backward: bool,
    compiled: bool,
    stop_sweeps: int | None = None,
    coordinates: str = "maximal",
) -> dict:
    """One workload's speed. ``stop_sweeps``: instead of the free cart-pole, the cart pushed
    against a rail stop (a bounded row active at every step) with that many solver sweeps."""
    if stop_sweeps is None:
        world = cart_pole(
            theta0=0.3, batch_size=batch, dtype=torch.float32, coordinates=coordinates
        )
        actions = torch.randn(steps, batch, 1)
    else:
        world = cart_pole(theta0=2.0, limits=[-0.5, 0.0], solver_iterations=stop_sweeps,
                          batch_size=batch, dtype=torch.float32,
                          coordinates=coordinates)  # fmt: skip
        actions = 40.0 + torch.randn(steps, batch, 1)
    if compiled:
        # Each batch size and grad mode is its own graph (two with gradients: the first step's
        # state needs none); past Dynamo's recompile limit (8) it would silently run eager.
        torch._dynamo.reset()
    step = physics.compiled_step(torch.float32) if compiled else physics.step

    def run():
        a = actions.clone().requires_grad_(backward)
        state = physics.initial_state(world)
        for action in a.unbind(0):
            state = step(world, state, action)
        if backward:
            (state.position.square().sum() + state.linear_velocity.sum()).backward()

    with torch.set_grad_enabled(backward):
        run()  # warm-up (and compilation)
        # The median of several runs: this machine's run-to-run spread is about 10 %.
        times = []
        for _ in range(7 if batch <= 1024 else 3):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        elapsed = statistics.median(times)
    return {
        "bench": "cartpole" if stop_sweeps is None else "cartpole_at_stop",
        "coordinates": world.coordinates,
        "solver_sweeps": world.solver_iterations,
        "mode": "forward+backward" if backward else "forward",
        "compiled": compiled,
        "B": batch,
        "steps": steps,
        "ms_per_step": round(1e3 * elapsed / steps, 3),
        "state_steps_per_s": round(batch * steps / elapsed),
        "threads": torch.get_num_threads(),
    }


def peak_memory(
    checkpoint_every: int | None,
    compiled: bool = False,
    batch: int = 64,
    steps: int = 300,
    coordinates: str = "maximal",
) -> dict:
    """Peak resident memory of a 300-step backward pass, measured in a fresh process: the
    high-water mark (VmHWM) over the resident size just before, after resetting the mark
    (``/proc/self/clear_refs``; without it, the peak of importing torch can hide the rise).
    Linux only; elsewhere the rise of getrusage's peak, which that can hide."""
    code = f"""
import resource, sys, torch
sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
import physics
from tests.physics.models import cart_pole

def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(key + ":"))

world = cart_pole(theta0=0.3, batch_size={batch}, dtype=torch.float32,
                  coordinates={coordinates!r})
actions = torch.randn({steps}, {batch}, 1, requires_grad=True)
# Warm up (libraries, allocator) so that the peak below is the 300-step graph's.
warm = physics.rollout(world, physics.initial_state(world), 12, actions=actions[:12],
                       checkpoint_every={checkpoint_every}, compile={compiled})
warm.position.square().sum().backward()
try:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the high-water mark to the current resident size
    before, peak = status("VmRSS"), lambda: status("VmHWM")
except OSError:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
trajectory = physics.rollout(world, physics.initial_state(world), {steps}, actions=actions,
                             checkpoint_every={checkpoint_every}, compile={compiled})
trajectory.position.square().sum().backward()
print((peak() - before) / 1024)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {
        "bench": "cartpole_memory",
        "coordinates": coordinates,
        "B": batch,
        "steps": steps,
        "checkpoint_every": checkpoint_every,
        "compiled": compiled,
        "peak_rss_increase_mb": round(float(out.stdout.strip().splitlines()[-1]), 1),
    }


def saved_tensor_bytes(
    checkpoint_every: int | None, batch: int = 64, steps: int = 300, coordinates: str = "maximal"
) -> dict:
    """Bytes the autograd graph keeps for backward (unique saved tensors): deterministic,
    unlike RSS, which also counts allocator caching. With checkpointing it counts what the
    graph holds between segments; the recompute adds one segment's worth during backward."""
    world = cart_pole(theta0=0.3, batch_size=batch, dtype=torch.float32, coordinates=coordinates)
    actions = torch.randn(steps, batch, 1, requires_grad=True)
    saved: dict = {}

    def pack(tensor):
        saved[(tensor.data_ptr(), tensor.dtype, tuple(tensor.shape))] = (
            tensor.numel() * tensor.element_size()
        )
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        physics.rollout(world, physics.initial_state(world), steps, actions=actions,
                        checkpoint_every=checkpoint_every)  # fmt: skip
    return {
        "bench": "cartpole_saved_tensors",
        "coordinates": coordinates,
        "B": batch,
        "steps": steps,
        "checkpoint_every": checkpoint_every,
        "saved_mb": round(sum(saved.values()) / 2**20, 1),
    }


def _median_ms(run, repeats: int, calls: int) -> float:
    """Median over ``repeats`` runs of the time (ms) of one of ``calls`` calls of ``run``."""
    run()  # warm-up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            run()
        times.append((time.perf_counter() - start) / calls)
    return round(1e3 * statistics.median(times), 3)


def box_stack(batch: int, steps: int = 20, repeats: int = 7) -> list[dict]:
    """`physics.contacts.find_contacts` on the box-stack scene (15 box-box pairs, 48 box-plane corner
    candidates), and a `steps`-step rollout forward and forward+backward (the gradient of the
    final positions with respect to the initial velocities)."""
    import diffcam  # the scene loader; physics itself never imports diffcam

    scene = diffcam.load_scene(BOX_STACK, batch_size=batch, dtype=torch.float32)
    world, state = scene.world, scene.initial_state()
    common = {"B": batch, "box_pairs": len(world.box_contact_a), "threads": torch.get_num_threads()}
    with torch.no_grad():
        contacts_ms = _median_ms(
            lambda: find_contacts(world, state.position, state.rotation), repeats, 20
        )
    results = [{"bench": "box_stack_find_contacts", **common, "ms_per_call": contacts_ms}]
    for backward in (False, True):

        def run(backward=backward):
            velocity = state.linear_velocity.clone().requires_grad_(backward)
            current = state.replace(linear_velocity=velocity)
            for _ in range(steps):
                current = physics.step(world, current)
            if backward:
                current.position.sum().backward()

        with torch.set_grad_enabled(backward):
            elapsed = _median_ms(run, repeats, 1)
        results.append(
            {
                "bench": "box_stack_step",
                "mode": "forward+backward" if backward else "forward",
                **common,
                "steps": steps,
                "ms_per_step": round(elapsed / steps, 3),
            }
        )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 64, 1024, 4096])
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--compile", action="store_true", help="also measure torch.compile(step)")
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument(
        "--at-stop",
        type=int,
        nargs="*",
        default=[20, 4],
        help="solver sweeps of the cart-at-its-stop workload (B = 64, maximal and eager; reduced "
        "coordinates take one sweep, eager and compiled); none: skip it",
    )
    parser.add_argument(
        "--coordinates", nargs="+", default=["maximal", "reduced"], choices=["maximal", "reduced"]
    )
    parser.add_argument(
        "--workloads",
        nargs="+",
        default=["cartpole", "box_stack"],
        choices=["cartpole", "box_stack"],
    )
    parser.add_argument("--box-stack-batches", type=int, nargs="+", default=[1, 64])
    args = parser.parse_args()
    if "box_stack" in args.workloads:
        for batch in args.box_stack_batches:
            for result in box_stack(batch):
                print(json.dumps(result), flush=True)
    if "cartpole" in args.workloads:
        _cartpole(args)


def _cartpole(args: argparse.Namespace) -> None:
    """The cart-pole workloads: at its stop, free, and memory."""
    for sweeps in args.at_stop:
        for backward in (False, True):
            print(json.dumps(measure(64, args.steps, backward, False, sweeps)), flush=True)
    if args.at_stop and "reduced" in args.coordinates:
        # Reduced coordinates at the stop: one limited coordinate, exact in one sweep.
        for compiled in [False, True] if args.compile else [False]:
            for backward in (False, True):
                result = measure(64, args.steps, backward, compiled, 1, "reduced")
                print(json.dumps(result), flush=True)
    for coordinates in args.coordinates:
        for compiled in [False, True] if args.compile else [False]:
            for batch in args.batches:
                for backward in (False, True):
                    result = measure(batch, args.steps, backward, compiled, None, coordinates)
                    print(json.dumps(result), flush=True)
    if not args.no_memory:
        for coordinates in args.coordinates:
            for every in (None, 10, 30):
                print(json.dumps(peak_memory(every, coordinates=coordinates)), flush=True)
                print(json.dumps(saved_tensor_bytes(every, coordinates=coordinates)), flush=True)
            if args.compile:
                for every in (None, 10):
                    result = peak_memory(every, compiled=True, coordinates=coordinates)
                    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
