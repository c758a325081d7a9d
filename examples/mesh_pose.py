"""A tumbling object's 6-DoF start (pose, velocity, spin) from a video of it, from its mesh.

    python examples/mesh_pose.py [VIDEO] [--scene SCENE] [--truth TRUTH] [--out side.mp4]
    python examples/mesh_pose.py tests/data/tumble_realistic.mp4 \\
        --truth tests/data/tumble_realistic.json

The scene file (default tests/data/scenes/tumble.toml) is what a user writes: the object as a
mesh (``shape = "mesh"``, its OBJ), the camera roughly, where the object starts and how fast
it flies by eye; its orientation and spin unknown. ``diffcam fit`` (`diffcam.identify`) then
finds the object in every frame, fits its centre's flight to those positions, matches the
mesh's silhouettes to the object's outline to find how it is turned and spinning, learns its
look, and refines all of it on every pixel through the physics (free flight: gravity, the
mesh's inertia). It prints one JSON line: the fitted start, the status and, with ``--truth``,
the errors against the clip's ground truth (position in mm, orientation in degrees, velocity
in mm/s, angular velocity in rad/s).

The same from the command line::

    diffcam fit tests/data/scenes/tumble.toml tests/data/tumble_realistic.mp4 --keys \\
        bodies.block.position bodies.block.velocity bodies.block.quat \\
        bodies.block.angular_velocity
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from diffcam.identify import Settings, identify  # noqa: E402

BODY = "block"
KEYS = [f"bodies.{BODY}.{k}" for k in ("position", "velocity", "quat", "angular_velocity")]


def _rotation(quat) -> torch.Tensor:
    """(3, 3) the rotation of a quaternion [w, x, y, z]."""
    from physics.math3d import quat_to_matrix

    q = torch.as_tensor(quat, dtype=torch.float64)
    return quat_to_matrix(q / q.norm())


def pose_errors(values: dict, truth: dict) -> dict:
    """The fitted start's errors against a truth JSON's (tests/data/tumble_realistic.json):
    position (mm), orientation (degrees, the angle of the turn between them), velocity (mm/s),
    angular velocity (rad/s), each the norm of the difference."""
    physics = truth["physics"]

    def gap(key: str, true: str) -> float:
        fitted = torch.as_tensor(values[f"bodies.{BODY}.{key}"], dtype=torch.float64)
        return float((fitted - torch.as_tensor(physics[true], dtype=torch.float64)).norm())

    turn = _rotation(values[f"bodies.{BODY}.quat"]) @ _rotation(physics["start_quat"]).T
    cos = (float(torch.trace(turn)) - 1.0) / 2.0
    return {
        "position_error_mm": 1000.0 * gap("position", "start_position"),
        "orientation_error_deg": math.degrees(math.acos(max(-1.0, min(1.0, cos)))),
        "velocity_error_mm_s": 1000.0 * gap("velocity", "start_velocity"),
        "angular_velocity_error_rad_s": gap("angular_velocity", "start_angular_velocity"),
    }


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("video", nargs="?", default=str(ROOT / "tests/data/tumble_realistic.mp4"))
    parser.add_argument("--scene", default=str(ROOT / "tests/data/scenes/tumble.toml"))
    parser.add_argument("--truth", default=None, help="a truth JSON (tests/data)")
    parser.add_argument("--width", type=int, default=160, help="working width (pixels)")
    parser.add_argument("--out", default=None, help="side-by-side video (.mp4 or .gif)")
    args = parser.parse_args(argv)

    result = identify(args.scene, args.video, KEYS, settings=Settings(width=args.width))
    report = {
        "status": result.status,
        "explained": round(result.explained, 4),
        "seconds": round(result.seconds, 1),
        "values": result.values,
        "std": result.to_json()["std"],
        "message": result.message,
    }
    if args.truth:
        report.update(pose_errors(result.values, json.loads(Path(args.truth).read_text())))
    if args.out:
        result.write_video(args.out)
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
