"""`diffcam fit` on every realistic test clip: accuracy against the truth, time and memory.

Prints one JSON line per clip, each fit in a fresh process (``diffcam fit`` as a user runs it,
from the rough scene file in tests/data/scenes), with the errors of the quantities a user
wants from that clip, the status, the wall-clock seconds and the peak resident memory:

* pendulum: length and swing amplitude (and the damping);
* bounce (120 fps stored as 30 fps, a hand at the start): the restitution;
* throw (AVI with B-frames, a person walking in, the ball's shadow): launch speed and angle;
* incline: the block's friction coefficient on the plank (the contact's, geometric mean);
* double pendulum (first second): the start angles;
* tumble (a mesh: an L-shaped block in free flight): its 6-DoF start from the automatic
  start, position (mm), orientation (degrees), velocity (mm/s) and spin (rad/s) errors.

Usage: python benchmarks/bench_identify_clips.py [--clip NAME ...] [--threads T]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

from _record import Recorder, add_record_flag

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
RECORD = Recorder("identify_clips")  # benchmarks/results/identify_clips.jsonl with --record

CLIPS = {
    "pendulum": {
        "video": "pendulum_realistic.mp4",
        "keys": ["joints.pivot.position", "joints.pivot.velocity", "joints.pivot.damping",
                 "bodies.bob.position[2]", "camera.position", "camera.look_at", "camera.up"],
        "args": [],
    },
    "bounce": {
        "video": "bounce_realistic.mp4",
        "keys": ["bodies.ball.restitution", "bodies.ball.position[0]", "bodies.ball.position[2]",
                 "bodies.ball.velocity[0]", "bodies.ball.velocity[2]", "camera.position",
                 "camera.look_at"],
        "args": ["--start", "0.475", "--fps", "120"],
    },
    "throw": {
        "video": "throw_realistic.avi",
        "keys": ["bodies.ball.position[0]", "bodies.ball.position[2]", "bodies.ball.velocity[0]",
                 "bodies.ball.velocity[2]", "camera.position", "camera.look_at"],
        "args": ["--seconds", "1.0"],
    },
    "incline": {
        "video": "incline_realistic.mp4",
        "keys": ["bodies.block.friction", "bodies.block.position[0]", "bodies.block.position[2]",
                 "bodies.block.velocity[0]", "bodies.block.velocity[2]", "camera.position",
                 "camera.look_at", "camera.up"],
        "args": ["--seconds", "1.5"],
    },
    "double_pendulum": {
        "video": "double_pendulum_realistic.mp4",
        "keys": ["joints.pivot.position", "joints.pivot.velocity", "joints.elbow.position",
                 "joints.elbow.velocity", "camera.position", "camera.look_at"],
        "args": ["--seconds", "1.0"],
    },
    "tumble": {
        "video": "tumble_realistic.mp4",
        "keys": ["bodies.block.position", "bodies.block.velocity", "bodies.block.quat",
                 "bodies.block.angular_velocity"],
        "args": [],
    },
}  # fmt: skip


def _amplitude(theta: float, rate: float, length: float) -> float:
    return math.acos(max(-1.0, math.cos(theta) - rate**2 * length / (2 * 9.81)))


def errors(name: str, result: dict) -> dict:
    """The errors against the clip's truth of what a user fits it for."""
    truth = json.loads((DATA / f"{name}_realistic.json").read_text())
    physics, v = truth["physics"], result["values"]
    if name == "pendulum":
        length = -v["bodies.bob.position[2]"]
        amp = _amplitude(v["joints.pivot.position"], v["joints.pivot.velocity"], length)
        true_amp = _amplitude(physics["theta0"], physics["theta_dot0"], physics["L"])
        return {"length_error": length / physics["L"] - 1,
                "length_sigmas": (length - physics["L"]) / result["std"]["bodies.bob.position[2]"],
                "amplitude_error": amp / true_amp - 1,
                "damping_error": v["joints.pivot.damping"] / physics["c"] - 1}  # fmt: skip
    if name == "bounce":
        e, true = v["bodies.ball.restitution"], physics["restitution"]
        return {"restitution": e, "restitution_error": e / true - 1,
                "restitution_sigmas": (e - true) / result["std"]["bodies.ball.restitution"]}  # fmt: skip
    if name == "throw":
        vx, vz = v["bodies.ball.velocity[0]"], v["bodies.ball.velocity[2]"]
        return {"speed_error": math.hypot(vx, vz) / physics["launch_speed"] - 1,
                "angle_error_deg": math.degrees(math.atan2(vz, vx)) - physics["launch_angle_deg"]}  # fmt: skip
    if name == "incline":
        mu = result["contacts"]["block/incline"]["friction"]
        return {"mu": mu, "mu_error": mu / physics["mu"] - 1}
    if name == "tumble":
        sys.path.insert(0, str(ROOT / "examples"))
        from mesh_pose import pose_errors

        return {k: round(e, 3) for k, e in pose_errors(v, truth).items()}
    return {
        "theta1_error_rad": v["joints.pivot.position"] - physics["theta1_0"],
        "q2_error_rad": v["joints.elbow.position"] - physics["q2_0"],
    }


# the command in a fresh process, then that process's peak resident memory (VmHWM, MB)
_CHILD = """
import sys
from pathlib import Path
from diffcam.cli import main
code = main(sys.argv[1:])
peak = [l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmHWM")]
print("peak_rss_mb", int(peak[0].split()[1]) / 1024 if peak else -1, file=sys.stderr)
sys.exit(code)
"""


def run(name: str, threads: int) -> dict:
    clip = CLIPS[name]
    command = [sys.executable, "-c", _CHILD, "fit", str(DATA / "scenes" / f"{name}.toml"),
               str(DATA / clip["video"]), "--keys", *clip["keys"], *clip["args"], "--quiet",
               "--threads", str(threads)]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": str(threads)})  # fmt: skip
    seconds = time.perf_counter() - start
    peak = [float(line.split()[1]) for line in done.stderr.splitlines()
            if line.startswith("peak_rss_mb")]  # fmt: skip
    if done.returncode != 0:
        return {"clip": name, "error": done.stderr.strip().splitlines()[-2:]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {"clip": name, "status": result["status"], "explained": result["explained"],
            "fit_seconds": result["seconds"], "seconds": round(seconds, 1),
            "peak_rss_mb": peak[0] if peak else None, **errors(name, result)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clip", nargs="*", default=list(CLIPS), choices=list(CLIPS))
    parser.add_argument("--threads", type=int, default=1)
    add_record_flag(parser)
    args = parser.parse_args()
    RECORD.enable(args.record, note=args.note)
    for name in args.clip:
        RECORD.emit(run(name, args.threads))


if __name__ == "__main__":
    main()
