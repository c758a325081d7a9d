"""A pendulum's length, damping and swing from a video of it, with errors: `diffcam.identify`.

    python examples/real_pendulum.py VIDEO [--length 0.8] [--distance 2.5] [--out side.mp4]
    python examples/real_pendulum.py tests/data/pendulum_realistic.mp4 \\
        --truth tests/data/pendulum_realistic.json

What a user knows before a fit goes into a scene file: the bob on a string hanging from a
hook (the bundled `bob_pendulum` scene), its length measured roughly (``--length``), the phone
about ``--distance`` metres away at the bob's height, its field of view (``--fov-deg``). The
fit (`diffcam.identify`, the engine of ``diffcam fit``) then finds where the bob is in every
frame, fits the pendulum and the camera to those positions through the physics, learns the
bob's look, and refines on the pixels where they say more. The example prints one JSON line:
the fitted keys with their ±, what they mean for the pendulum (length, small-swing period,
amplitude, damping), and with ``--truth`` the errors against the clip's ground truth.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import diffcam  # noqa: E402
from diffcam.identify import Settings, identify  # noqa: E402
from diffcam.scene import SCENES_DIR  # noqa: E402

G = 9.81
KEYS = ["joints.pivot.position", "joints.pivot.velocity", "joints.pivot.damping",
        "bodies.bob.position[2]", "camera.position", "camera.look_at", "camera.up"]  # fmt: skip


def rough_scene(length: float, distance: float, fov_deg: float, size, folder: Path) -> Path:
    """The bundled pendulum scene with the user's rough length, camera distance and field of
    view, at the video's aspect ratio."""
    text = (SCENES_DIR / "bob_pendulum.toml").read_text()
    lines = []
    for line in text.splitlines():
        key = line.split("=")[0].strip()
        if key == "resolution":
            line = f"resolution = [{size[0]}, {size[1]}]"
        elif key == "position" and "-2.5" in line:  # the camera, at the bob's height
            line = f"position = [0.0, {-distance}, {-length}]"
        elif key == "look_at":
            line = f"look_at = [0.0, 0.0, {-length}]"
        elif key == "fov_y_deg":
            line = f"fov_y_deg = {fov_deg}"
        elif key == "position" and "-0.85" in line:  # the bob
            line = f"position = [0.0, 0.0, {-length}]"
        lines.append(line)
    path = folder / "pendulum.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def amplitude(theta: float, rate: float, length: float) -> float:
    """The swing amplitude (rad) of a point mass from its angle and rate (no damping)."""
    return math.acos(max(-1.0, math.cos(theta) - rate**2 * length / (2 * G)))


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("video")
    parser.add_argument("--length", type=float, default=0.8, help="rough length (m)")
    parser.add_argument("--distance", type=float, default=2.5, help="rough camera distance (m)")
    parser.add_argument("--fov-deg", type=float, default=38.0, help="vertical field of view")
    parser.add_argument("--bob-mass", type=float, default=0.2, help="kg (scales the damping)")
    parser.add_argument("--width", type=int, default=160, help="working width (pixels)")
    parser.add_argument("--seconds", type=float, default=None, help="use the first S seconds")
    parser.add_argument("--truth", default=None, help="a JSON of true values (tests/data)")
    parser.add_argument("--out", default=None, help="side-by-side video (.mp4 or .gif)")
    args = parser.parse_args(argv)

    probe = diffcam.read_video(args.video, size=(args.width, None), frames=(0, 1))
    with tempfile.TemporaryDirectory() as folder:
        scene = rough_scene(args.length, args.distance, args.fov_deg, probe.size, Path(folder))
        scene_text = scene.read_text().replace("mass = 0.2", f"mass = {args.bob_mass}")
        scene.write_text(scene_text)
        result = identify(scene, args.video, KEYS, seconds=args.seconds,
                          settings=Settings(width=args.width, progress=sys.stderr.isatty()))  # fmt: skip
    values, std = result.values, result.std
    length = -values["bodies.bob.position[2]"]
    radius = 0.035 * result.nuisance.get("size_factor.bob", 1.0)
    inertia = args.bob_mass * (length**2 + 0.4 * radius**2)
    figures = {
        "video": args.video, "status": result.status, "explained": result.explained,
        "message": result.message, "seconds": round(result.seconds, 1),
        "length_m": length, "length_std": std["bodies.bob.position[2]"],
        "small_amplitude_period_s": 2 * math.pi * math.sqrt(inertia / (args.bob_mass * G * length)),
        "amplitude_rad": amplitude(values["joints.pivot.position"],
                                   values["joints.pivot.velocity"], length),
        "theta0_rad": values["joints.pivot.position"], "theta0_std": std["joints.pivot.position"],
        "theta_dot0_rad_s": values["joints.pivot.velocity"],
        "damping_Nms_per_rad": values["joints.pivot.damping"],
        "damping_std": std["joints.pivot.damping"],
        "decay_per_s": values["joints.pivot.damping"] / (2 * inertia),
        "camera_position_m": values["camera.position"],
    }  # fmt: skip
    if args.truth:
        figures.update(compare(json.loads(Path(args.truth).read_text()), figures))
    if args.out:
        result.write_video(args.out)
        figures["video_out"] = str(args.out)
    print(json.dumps(figures))
    return figures


def compare(truth: dict, figures: dict) -> dict:
    """Errors against a true pendulum (the JSON the test clip's generator writes)."""
    p = truth["physics"]
    true_amplitude = amplitude(p["theta0"], p["theta_dot0"], p["L"])
    return {
        "truth": {"L": p["L"], "c": p["c"], "amplitude": true_amplitude,
                  "small_amplitude_period": p["small_amplitude_period"]},
        "length_error": figures["length_m"] / p["L"] - 1,
        "length_sigmas": (figures["length_m"] - p["L"]) / max(figures["length_std"], 1e-12),
        "amplitude_error": figures["amplitude_rad"] / true_amplitude - 1,
        "damping_error": figures["damping_Nms_per_rad"] / p["c"] - 1,
        "period_error": figures["small_amplitude_period_s"] / p["small_amplitude_period"] - 1,
    }  # fmt: skip


if __name__ == "__main__":
    main()
