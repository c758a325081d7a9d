"""The default scene path against its peers, side by side in one run (issue 20).

Prints one JSON line per measurement, then one with the ratios. Not part of the test suite.

    python benchmarks/bench_default_path.py [--steps 300] [--repeats 7] [--no-peers]
        [--no-pendulum-cart] [--rounds 5]
        [--peers-python /work/peers_venv/bin/python] [--peers-dir /work/shared/peers]

The model is the peers' cart-pole (`/work/shared/peers/newton_cartpole.py`): cart 1 kg, a box
0.3 x 0.2 x 0.1 m on a slider along x; pole 0.1 kg, a box 0.02 x 0.02 x 0.6 m hinged about y at
the cart's centre, its centre 0.3 m above the hinge; no damping, dt 0.01 s, 300 steps from a
0.5 rad tilt at rest. Ours is that model as a scene file (written to a temporary folder),
loaded by `diffcam.load_scene` with nothing but the batch size: the default path, so
``coordinates`` is "auto" (reduced here) and `Scene.rollout` compiles by default once the scene
has been stepped enough (``compile=None``; the warm-up run crosses that threshold): for a
reduced world, the step built ahead of time (`physics.ahead_of_time`; the first compiled run
builds its libraries, or loads them from ``DIFFCAM_CACHE_DIR``), the whole rollout one
autograd node (`physics.ahead_of_time.aot_reduced_rollout`). The pendulum-cart scene
(the bundled `pendulum_cart.toml`, which also carries 9 static bodies) is timed the same way for
reference.

Peers, each in the same run: Newton's Featherstone solver and a hand-written Warp kernel as
subprocesses of ``--peers-python`` (their own venv), and MuJoCo's batched C rollout
(`mujoco.rollout`, no gradients) in this process, with 1 and with 2 threads. Ratios are ours
over theirs in state-steps per second, medians against medians (the peers' scripts report
medians); ours' best run is printed beside its median. The machine's speed drifts over
minutes, so the forward+backward at B = 64 is also timed in ``--rounds`` rounds alternating
with the Warp kernel (its script run again each round), and their ratio of medians printed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _record import Recorder, add_record_flag  # noqa: E402

import diffcam  # noqa: E402
import physics  # noqa: E402
from diffcam.scene import SCENES_DIR  # noqa: E402

RECORD = Recorder("default_path")  # benchmarks/results/default_path.jsonl with --record

DT, TILT = 0.01, 0.5

# The peers' cart-pole as a scene file: the hinge at the cart's centre (z = 1 m), the pole's
# centre 0.3 m from it, tilted by TILT about +y (positive tips the pole towards +x).
CARTPOLE_TOML = f"""
[world]
gravity = [0.0, 0.0, -9.81]
timestep = {DT}

[camera]
resolution = [64, 32]
position = [0.0, -3.0, 1.0]
look_at = [0.0, 0.0, 1.0]
fov_y_deg = 40.0

[[bodies]]
name = "cart"
shape = "box"
size = [0.3, 0.2, 0.1]
mass = 1.0
position = [0.0, 0.0, 1.0]
collide = false

[[bodies]]
name = "pole"
shape = "box"
size = [0.02, 0.02, 0.6]
mass = 0.1
position = [{float(0.3 * np.sin(TILT))!r}, 0.0, {float(1.0 + 0.3 * np.cos(TILT))!r}]
quat = [{float(np.cos(TILT / 2))!r}, 0.0, {float(np.sin(TILT / 2))!r}, 0.0]
collide = false

[[joints]]
name = "rail"
type = "slider"
parent = "world"
child = "cart"
anchor = [0.0, 0.0, 1.0]
axis = [1.0, 0.0, 0.0]
motor = {{ type = "force", max = 100.0 }}

[[joints]]
name = "hinge"
type = "hinge"
parent = "cart"
child = "pole"
anchor = [0.0, 0.0, 1.0]
axis = [0.0, 1.0, 0.0]
"""

CARTPOLE_MJCF = f"""
<mujoco>
  <option timestep="{DT}" gravity="0 0 -9.81" integrator="Euler"/>
  <worldbody>
    <body name="cart" pos="0 0 1">
      <joint name="rail" type="slide" axis="1 0 0"/>
      <inertial pos="0 0 0" mass="1" diaginertia="{1 * (0.2**2 + 0.1**2) / 12} {1 * (0.3**2 + 0.1**2) / 12} {1 * (0.3**2 + 0.2**2) / 12}"/>
      <body name="pole" pos="0 0 0">
        <joint name="hinge" type="hinge" axis="0 1 0"/>
        <inertial pos="0 0 0.3" mass="0.1" diaginertia="{0.1 * (0.02**2 + 0.6**2) / 12} {0.1 * (0.02**2 + 0.6**2) / 12} {0.1 * 2 * 0.02**2 / 12}"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor joint="rail" gear="1"/></actuator>
</mujoco>
"""


def emit(record: dict) -> dict:
    return RECORD.emit(record)


def time_runs(run, repeats: int) -> tuple[float, float, float]:
    """(first, best, median) seconds of ``run``: the first call, then ``repeats`` timed ones."""
    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return first, min(times), statistics.median(times)


def ours(scene_file: Path, name: str, batch: int, steps: int, backward: bool, repeats: int):
    """The default scene path: `load_scene` with the batch size only, `Scene.rollout`."""
    scene = diffcam.load_scene(scene_file, batch_size=batch)
    actions = torch.zeros(steps, batch, scene.n_actuators)

    def run():
        a = actions.clone().requires_grad_(backward)
        with torch.set_grad_enabled(backward):
            trajectory = scene.rollout(steps, actions=a)
            final = physics.State(*(t[-1] for t in trajectory.tensors()))
            if backward:
                q, _ = physics.joint_positions(scene.world, final)
                q.sum().backward()

    # Warm-up: the default path compiles once the scene has been stepped enough (Scene.step's
    # ``compile=None``); these runs cross that threshold and pay the compilation.
    start = time.perf_counter()
    warm = 0
    while not scene.compiling and warm < 100:
        run()
        warm += 1
    warm_s = time.perf_counter() - start
    first, best, median = time_runs(run, repeats)
    with torch.no_grad():
        final = scene.rollout(steps, actions=actions)
        q, _ = physics.joint_positions(
            scene.world, physics.State(*(t[-1] for t in final.tensors()))
        )
    return run, emit({
        "bench": "default_scene_path", "scene": name, "mode": "forward+backward" if backward
        else "forward", "B": batch, "steps": steps, "coordinates": scene.world.coordinates,
        "compiled": scene.compiling, "warm_up_runs": warm, "warm_up_s": round(warm_s, 2),
        "first_compiled_run_s": round(first, 2),
        "state_steps_per_s_best": round(batch * steps / best),
        "state_steps_per_s_median": round(batch * steps / median),
        "threads": torch.get_num_threads(),
        "final_q_env0": [round(float(v), 5) for v in q[0]],
    })  # fmt: skip


def mujoco_rollout(batch: int, steps: int, threads: int, repeats: int) -> dict:
    import mujoco
    from mujoco import rollout

    model = mujoco.MjModel.from_xml_string(CARTPOLE_MJCF)
    datas = [mujoco.MjData(model) for _ in range(threads)]
    data = datas[0]
    data.qpos[:] = [0.0, TILT]
    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    state0 = np.zeros(mujoco.mj_stateSize(model, spec))
    mujoco.mj_getState(model, data, state0, spec)
    initial = np.tile(state0, (batch, 1))
    control = np.zeros((batch, steps, model.nu))
    out = np.empty((batch, steps, state0.size))
    with rollout.Rollout(nthread=threads) as runner:

        def run():
            runner.rollout(model, datas, initial, control, state=out)

        first, best, median = time_runs(run, repeats)
    return emit({
        "bench": "mujoco_rollout", "B": batch, "steps": steps, "threads": threads,
        "version": mujoco.__version__,
        "state_steps_per_s_best": round(batch * steps / best),
        "state_steps_per_s_median": round(batch * steps / median),
        "final_q_env0": [round(float(v), 5) for v in out[0, -1, 1:3]],
    })  # fmt: skip


def peer(python: str, script: Path, args: list[str]) -> dict | None:
    try:
        done = subprocess.run(
            [python, str(script), *args], capture_output=True, text=True, timeout=3600
        )
    except (OSError, subprocess.TimeoutExpired) as e:
        return emit({"bench": "peer", "script": script.name, "error": str(e)})
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines:
        return emit({"bench": "peer", "script": script.name, "error": done.stderr[-2000:]})
    return emit({"bench": "peer", "script": script.name, **json.loads(lines[-1])})


def interleaved(run, state_steps: int, repeats: int, rounds: int, python: str, script: Path,
                args: list[str]) -> dict | None:  # fmt: skip
    """Our forward+backward B = 64 and the Warp kernel's in alternating rounds (this
    machine's speed drifts over minutes: a ratio of runs minutes apart carries the drift):
    per round both medians (the Warp kernel's `peer` line each round), and the ratio of the
    medians over rounds."""
    ours_rates, warp_rates = [], []
    for _ in range(rounds):
        _, _, median = time_runs(run, repeats)
        warp = peer(python, script, args)
        if "error" in warp:
            return None
        ours_rates.append(state_steps / median)
        warp_rates.append(warp["B64"]["forward_backward_env_steps_per_s"])
    return emit({
        "bench": "interleaved", "what": "fwd+bwd B=64, ours then the Warp kernel, per round",
        "ours_state_steps_per_s": [round(x) for x in ours_rates],
        "warp_kernel_state_steps_per_s": warp_rates,
        "ratio_per_round": [round(a / b, 3) for a, b in zip(ours_rates, warp_rates, strict=True)],
        "ratio_of_medians": round(statistics.median(ours_rates) / statistics.median(warp_rates), 3),
    })  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--no-peers", action="store_true")
    ap.add_argument("--no-pendulum-cart", action="store_true", help="skip the reference scene")
    ap.add_argument("--peers-python", default="/work/peers_venv/bin/python")
    ap.add_argument("--peers-dir", type=Path, default=Path("/work/shared/peers"))
    ap.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="rounds of ours and the Warp kernel, one after the other (0: none)",
    )
    add_record_flag(ap)
    args = ap.parse_args()
    RECORD.enable(args.record, note=args.note)
    steps, repeats = args.steps, args.repeats

    with tempfile.TemporaryDirectory() as tmp:
        cartpole = Path(tmp) / "cartpole.toml"
        cartpole.write_text(CARTPOLE_TOML)
        run_fb64, fb64 = ours(cartpole, "cartpole", 64, steps, True, repeats)
        _, f64 = ours(cartpole, "cartpole", 64, steps, False, repeats)
        _, f4096 = ours(cartpole, "cartpole", 4096, steps, False, max(3, repeats // 2))
        rounds = None
        if not args.no_peers and args.rounds:
            warp_script = args.peers_dir / "warp_cartpole_kernel.py"
            rounds = interleaved(run_fb64, 64 * steps, repeats, args.rounds, args.peers_python,
                                 warp_script, ["--batch", "64", "--steps", str(steps)])  # fmt: skip
        if not args.no_pendulum_cart:
            path = SCENES_DIR / "pendulum_cart.toml"
            ours(path, "pendulum_cart", 64, steps, True, repeats)
    mj = {t: mujoco_rollout(4096, steps, t, max(3, repeats // 2)) for t in (1, 2)}
    newton = warp = None
    if not args.no_peers:
        newton = peer(args.peers_python, args.peers_dir / "newton_cartpole.py",
                      ["--batch", "64", "--steps", str(steps)])  # fmt: skip
        warp = peer(args.peers_python, args.peers_dir / "warp_cartpole_kernel.py",
                    ["--batch", "64", "4096", "--steps", str(steps)])  # fmt: skip
    # Medians against medians (the peers' scripts report medians); ours' best is printed above.
    ratios: dict = {"bench": "ratios", "ours_median_over_peer_median": {}}
    r = ratios["ours_median_over_peer_median"]
    for t, rec in mj.items():
        r[f"fwd_B4096_vs_mujoco_{t}thread"] = round(
            f4096["state_steps_per_s_median"] / rec["state_steps_per_s_median"], 2
        )
    if newton and "per_step" in newton:
        for mode in ("per_step", "shared"):
            r[f"fwd_bwd_B64_vs_newton_{mode}"] = round(
                fb64["state_steps_per_s_median"]
                / newton[mode]["forward_backward_env_steps_per_s"], 2
            )  # fmt: skip
        r["fwd_B64_vs_newton_per_step"] = round(
            f64["state_steps_per_s_median"] / newton["per_step"]["forward_env_steps_per_s"], 2
        )
    if warp and "B64" in warp:
        r["fwd_bwd_B64_vs_warp_kernel"] = round(
            fb64["state_steps_per_s_median"] / warp["B64"]["forward_backward_env_steps_per_s"], 3
        )
        r["fwd_B64_vs_warp_kernel"] = round(
            f64["state_steps_per_s_median"] / warp["B64"]["forward_env_steps_per_s"], 3
        )
        r["fwd_B4096_vs_warp_kernel"] = round(
            f4096["state_steps_per_s_median"] / warp["B4096"]["forward_env_steps_per_s"], 3
        )
    if rounds:
        r["fwd_bwd_B64_vs_warp_kernel_interleaved"] = rounds["ratio_of_medians"]
    ratios["goals"] = {"fwd_bwd_B64_vs_newton": ">= 10", "fwd_bwd_B64_vs_warp_kernel": ">= 0.5",
                       "fwd_B4096_vs_mujoco": ">= 2"}  # fmt: skip
    emit(ratios)


if __name__ == "__main__":
    main()
