"""Identify a pendulum from a video: its length, damping, start and the camera, with errors.

    python examples/real_pendulum.py VIDEO [--truth tests/data/pendulum_realistic.json]
    python examples/real_pendulum.py tests/data/pendulum_realistic.mp4 --truth \\
        tests/data/pendulum_realistic.json --out out/real_pendulum.mp4

A video of a bob swinging on a string in front of a wall (a phone on a tripod) is all it needs:

1. the video is read at a small size (`diffcam.read_video`, streamed);
2. the room without the pendulum, the clean plate, is the per-pixel median over time
   (`diffcam.imaging.clean_plate`);
3. a first guess from the pixels alone: the bob is the most contrasting blob in each frame;
   a circle through its track gives the pivot and the length in pixels; the swing's period
   gives the length in metres (g is known), the decay of its amplitude the damping, the first
   frames the start, the pixel length and the field of view the camera's distance;
4. the bob's colour is the least-squares colour of the pixels where the guessed model draws
   it (`diffcam.estimate_color`);
5. `diffcam.fit_scene` fits length, damping, start, camera position and roll, bob radius and
   the shutter time to every pixel of every frame through physics (`scenes/bob_pendulum.toml`)
   and rendering over the plate (soft silhouettes from wide to narrow, growing horizons,
   Levenberg-Marquardt on a robust loss, motion blur), then gives each a standard deviation.

Prints one JSON line (with ``--truth``, the errors against the true values too) and writes a
side-by-side video (observed | fitted | difference x 4). The field of view is assumed
(``--fov-deg``): the camera's distance scales with tan(fov / 2); everything else does not
depend on it. ``--start-error 0.5`` starts the length 50 % off (and the damping, start and
camera off in proportion) instead of from the guess, to see how far the fit reaches.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

import diffcam
from diffcam import imaging

ROOT = Path(__file__).resolve().parent.parent
SCENE = ROOT / "scenes" / "bob_pendulum.toml"
G = 9.81


# ----------------------------------------------------------------------------- first guess
def track_bob(frames: torch.Tensor, plate: torch.Tensor, radius: int = 3):
    """Per frame, the centre (x, y) (continuous pixels) of the most contrasting blob and
    whether there is one: (T, 2) float64, (T,) bool."""
    diff = torch.cat([(f - plate).abs().amax(1, keepdim=True) for f in frames.split(64)])
    smooth = F.avg_pool2d(diff, 3, stride=1, padding=1, count_include_pad=False)[:, 0]
    t, h, w = smooth.shape
    noise = float(imaging.noise_level(frames, plate).max())
    peak, where = smooth.flatten(1).max(1)
    found = peak > max(8.0 * noise, 0.05)
    ys, xs = where // w, where % w
    centres = torch.zeros(t, 2, dtype=torch.float64)
    grid_y, grid_x = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    for k in range(t):
        near = ((grid_y - ys[k]).abs() <= radius) & ((grid_x - xs[k]).abs() <= radius)
        weight = torch.where(near & (diff[k, 0] > 0.5 * peak[k]), diff[k, 0], 0.0).double()
        total = weight.sum().clamp_min(1e-12)
        centres[k, 0] = ((grid_x + 0.5) * weight).sum() / total
        centres[k, 1] = ((grid_y + 0.5) * weight).sum() / total
    return centres, found


def fit_circle(points: np.ndarray) -> tuple[np.ndarray, float]:
    """Centre (2,) and radius of the least-squares circle through points (n, 2) (Kasa, then
    Gauss-Newton on the geometric distances)."""
    x, y = points[:, 0], points[:, 1]
    a = np.stack([x, y, np.ones_like(x)], 1)
    d, e, f = np.linalg.lstsq(a, -(x * x + y * y), rcond=None)[0]
    centre = np.array([-d / 2, -e / 2])
    radius = math.sqrt(max(centre @ centre - f, 1e-12))
    for _ in range(20):
        offset = points - centre
        dist = np.linalg.norm(offset, axis=1)
        jac = np.concatenate([-offset / dist[:, None], -np.ones((len(dist), 1))], 1)
        step = np.linalg.lstsq(jac, -(dist - radius), rcond=None)[0]
        centre, radius = centre + step[:2], radius + step[2]
    return centre, float(radius)


def swing_analysis(times: np.ndarray, angle: np.ndarray) -> dict:
    """Period (s), amplitude decay rate (1/s) and mean amplitude (rad) of a damped swing
    sampled at ``times``, from its zero crossings and the peaks between them."""
    sign = np.sign(angle)
    crossings = []
    for k in range(len(angle) - 1):
        if sign[k] != 0 and sign[k] != sign[k + 1]:
            s = angle[k] / (angle[k] - angle[k + 1])
            crossings.append(times[k] + s * (times[k + 1] - times[k]))
    crossings = np.array(crossings)
    if len(crossings) < 3:
        raise SystemExit(
            "real_pendulum: the bob crosses its rest position fewer than 3 times: the video is "
            "too short (or the bob is not found); use a video of at least one full swing"
        )
    period = float(np.mean(crossings[2:] - crossings[:-2]))
    peaks, peak_times = [], []
    for a, b in zip(crossings[:-1], crossings[1:], strict=True):
        inside = (times > a) & (times < b)
        if inside.sum() >= 3:
            k = np.argmax(np.abs(angle[inside]))
            peaks.append(abs(angle[inside][k]))
            peak_times.append(times[inside][k])
    slope = np.polyfit(peak_times, np.log(peaks), 1)[0] if len(peaks) >= 2 else 0.0
    return {"period": period, "decay": max(-float(slope), 1e-4), "amplitude": float(np.mean(peaks))}


def first_guess(video: diffcam.Video, plate: torch.Tensor, fov_deg: float, radius_m: float):
    """Length, decay, start, camera distance, position and roll from the pixels alone."""
    centres, found = track_bob(video.frames, plate)
    times = video.times.numpy()
    points = centres[found].numpy()
    if len(points) < 10:
        raise SystemExit("real_pendulum: no moving bob found in the video (is anything swinging?)")
    centre, radius_px = fit_circle(points)
    phi = np.arctan2(points[:, 0] - centre[0], points[:, 1] - centre[1])  # + to the right
    rest = 0.5 * (phi.max() + phi.min())
    swing = swing_analysis(times[found.numpy()], phi - rest)
    amp = swing["amplitude"]
    # the period grows with the amplitude: T = T0 (1 + A^2/16 + 11 A^4 / 3072)
    small = swing["period"] / (1 + amp**2 / 16 + 11 * amp**4 / 3072)
    effective = G * (small / (2 * math.pi)) ** 2  # I / (m L) = L + 0.4 r^2 / L
    length = 0.5 * (effective + math.sqrt(max(effective**2 - 1.6 * radius_m**2, 0.0)))
    width, height = video.size
    focal = 0.5 * height / math.tan(math.radians(fov_deg) / 2)
    distance = focal * length / radius_px
    # the start: a quadratic through the first frames' angles, at t = 0
    first = np.nonzero(found.numpy())[0][:5]
    coeffs = np.polyfit(times[first], -(phi[: len(first)] - rest), 2)
    return {
        "length": length,
        "decay": swing["decay"],
        "theta0": float(np.polyval(coeffs, 0.0)),
        "theta_dot0": float(np.polyval(np.polyder(coeffs), 0.0)),
        "distance": distance,
        "camera_x": -(centre[0] - width / 2) * distance / focal,
        "camera_z": (centre[1] - height / 2) * distance / focal,
        "roll": float(rest),
        "pivot_px": centre.tolist(),
        "radius_px": radius_px,
        "period": swing["period"],
        "tracked_frames": int(found.sum()),
    }


# ----------------------------------------------------------------------------- the model
def camera_overrides(x, z, distance, roll, yaw=None, pitch=None):
    """The camera `distance` in front of the swing plane, at height z and sideways x, looking
    along +y turned by `yaw` (about z, towards +x) and `pitch` (up) (rad), and turned by `roll`
    (rad) about its axis."""
    zero = 0.0 * x
    yaw = zero if yaw is None else yaw
    pitch = zero if pitch is None else pitch
    forward = torch.stack([torch.sin(yaw) * torch.cos(pitch), torch.cos(yaw) * torch.cos(pitch),
                           torch.sin(pitch)])  # fmt: skip
    position = torch.stack([x, zero - distance, z])
    return {
        "camera.position": position,
        "camera.look_at": position + distance * forward,
        "camera.up": torch.stack([torch.sin(roll), zero, torch.cos(roll)]),
    }


def make_to_overrides(mass: float, color: torch.Tensor, fixed_exposure: float | None = None):
    def to_overrides(v):
        length = v["length"]
        inertia = mass * length**2 + 0.4 * mass * v["radius"] ** 2
        out = {
            "bodies.bob.position": torch.stack([0.0 * length, 0.0 * length, -length]),
            "bodies.bob.size": v["radius"],
            "bodies.bob.color": color,
            "joints.pivot.damping": 2.0 * inertia * v["decay"],
            "joints.pivot.position": v["theta0"],
            "joints.pivot.velocity": v["theta_dot0"],
            "image.exposure": v.get("exposure", fixed_exposure),
        }
        camera = camera_overrides(v["camera_x"], v["camera_z"], v["distance"], v["roll"],
                                  v.get("yaw"), v.get("pitch"))  # fmt: skip
        return {**out, **camera}

    return to_overrides


def keys_from(guess: dict, fps: float, tilt: bool, exposure: float | None) -> dict:
    tilted = {"yaw": {"init": 0.0, "scale": 0.01}, "pitch": {"init": 0.0, "scale": 0.01}}
    shutter = {} if exposure is not None else {
        "exposure": {"init": guess["exposure"], "bounds": (1e-4, 1.0 / fps)}
    }  # fmt: skip
    return {
        **(tilted if tilt else {}),
        **shutter,
        "length": {"init": guess["length"], "positive": True},
        "decay": {"init": guess["decay"], "positive": True},  # 1/s, c / (2 I)
        "theta0": {"init": guess["theta0"], "scale": 0.02},
        "theta_dot0": {"init": guess["theta_dot0"], "scale": 0.05},
        "distance": {"init": guess["distance"], "positive": True},
        "camera_x": {"init": guess["camera_x"], "scale": 0.01},
        "camera_z": {"init": guess["camera_z"], "scale": 0.01},
        "roll": {"init": guess["roll"], "scale": 0.01},
        "radius": {"init": guess["radius"], "bounds": (0.005, 0.2)},
    }


def estimated_color(scene, values, to_overrides, video, model) -> torch.Tensor:
    """The bob's colour that best explains the video where the model at ``values`` draws it
    (`diffcam.estimate_color`: least squares in linear light)."""
    import physics

    routed = to_overrides(values)
    over = {k: v for k, v in routed.items() if not k.startswith("image.")}
    posed = scene.with_overrides(over)
    with torch.no_grad():
        trajectory = physics.rollout(posed.world, posed.initial_state(), _steps(video, scene))
    image = model.replace(exposure=routed["image.exposure"])
    times = video.times.to(scene.dtype)
    color = diffcam.estimate_color(
        posed, "bob", trajectory, times, video.frames, image, edge_softness=0.5
    )
    return color[0]


def _steps(video, scene) -> int:
    return math.ceil((float(video.times[-1]) + 1.0 / video.fps) / scene.timestep) + 1


def measured_period(theta: np.ndarray, times: np.ndarray) -> float:
    """Mean period from the zero crossings of a swing sampled at ``times``."""
    return swing_analysis(times, theta)["period"]


# ----------------------------------------------------------------------------- main
def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("video")
    parser.add_argument("--width", type=int, default=160, help="pixels (height keeps the aspect)")
    parser.add_argument("--seconds", type=float, default=None, help="use the first S seconds")
    parser.add_argument("--fov-deg", type=float, default=38.0, help="vertical field of view")
    parser.add_argument("--bob-mass", type=float, default=0.2, help="kg (scales the damping)")
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--start-error", type=float, default=None,
                        help="start the length this fraction off (e.g. 0.1), not from the guess")  # fmt: skip
    parser.add_argument("--truth", default=None, help="a JSON of true values (tests/data)")
    parser.add_argument("--out", default=None, help="side-by-side video (.mp4 or .gif)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--exposure", type=float, default=None,
                        help="the shutter time (s), if known; else it is fitted")  # fmt: skip
    parser.add_argument("--tilt", action="store_true", help="also fit the camera's pan and tilt")
    parser.add_argument("--softness", type=float, nargs="+", default=[2.0, 1.0, 0.7, 0.5],
                        help="the silhouettes' softness schedule (px)")  # fmt: skip
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()

    seconds = None if args.seconds is None else (0.0, args.seconds)
    try:
        video = diffcam.read_video(args.video, size=(args.width, None), seconds=seconds,
                                   dtype=torch.float32)  # fmt: skip
    except diffcam.VideoError as error:
        raise SystemExit(f"real_pendulum: {error}") from None
    width, height = video.size
    plate = imaging.clean_plate(video.frames)
    guess = first_guess(video, plate, args.fov_deg, radius_m=0.03)
    guess["exposure"] = 0.5 / video.fps if args.exposure is None else args.exposure
    guess["radius"] = 0.03
    scene = diffcam.load_scene(SCENE, overrides={"camera.resolution": (width, height),
                                                 "camera.fov_y_deg": args.fov_deg})  # fmt: skip
    model = diffcam.ImageModel(plate=plate, exposure=guess["exposure"], exposure_samples=4)
    # the bob's colour where the guess (from the video's own pixels) puts it
    keys = keys_from(guess, video.fps, args.tilt, args.exposure)
    values0 = {k: torch.tensor(float(s["init"])) for k, s in keys.items()}
    grey = make_to_overrides(args.bob_mass, torch.full((3,), 0.5), guess["exposure"])
    color = estimated_color(scene, values0, grey, video, model)
    if args.start_error is not None:  # a worse start for the physics and the camera
        e = args.start_error
        guess.update(length=guess["length"] * (1 + e), decay=guess["decay"] * (1 + e),
                     distance=guess["distance"] * (1 + e / 2))  # fmt: skip
        keys = keys_from(guess, video.fps, args.tilt, args.exposure)
    to_overrides = make_to_overrides(args.bob_mass, color, args.exposure)
    duration = float(video.times[-1])
    # growing horizons, each 1.5 times the last: what a stage leaves of the period's error
    # grows into less than the silhouettes' reach over the next
    horizons = [h for h in (1.0 * 1.5**k for k in range(12)) if h < duration] + [duration + 1.0]
    softness = tuple(args.softness) + (args.softness[-1],) * (len(horizons) - len(args.softness))
    result = diffcam.fit_scene(
        scene, video, keys, image_model=model, to_overrides=to_overrides,
        iterations=args.iterations, horizons=horizons, edge_softness=softness,
        progress=sys.stderr.isatty(),
    )  # fmt: skip
    if os.environ.get("REAL_PENDULUM_DEBUG"):
        for i, stage in enumerate(result.stages):
            print("stage", i, stage, file=sys.stderr)
        for k, hist in result.value_history.items():
            print(k, [round(float(v), 4) for v in hist], file=sys.stderr)
        print("history", [f"{h:.3g}" for h in result.history], file=sys.stderr)
    values = {k: float(v) for k, v in result.values.items()}
    std = {k: float(v) for k, v in result.std.items()}

    # what the fit says about the pendulum
    m, length, r = args.bob_mass, values["length"], values["radius"]
    inertia = m * length**2 + 0.4 * m * r**2
    small_period = 2 * math.pi * math.sqrt(inertia / (m * G * length))
    figures = {
        "video": str(args.video), "frames": len(video), "size": [width, height],
        "fov_deg_assumed": args.fov_deg, "start": "guess" if args.start_error is None
        else f"length {args.start_error:+.0%} off",
        "guess": {k: round(guess[k], 5) for k in ("length", "decay", "theta0", "distance", "period")},
        "length_m": length, "length_std": std.get("length"),
        "decay_per_s": values["decay"], "decay_std": std.get("decay"),
        "damping_Nms_per_rad": 2 * inertia * values["decay"],
        "theta0_rad": values["theta0"], "theta0_std": std.get("theta0"),
        "theta_dot0_rad_s": values["theta_dot0"], "theta_dot0_std": std.get("theta_dot0"),
        "small_amplitude_period_s": small_period,
        "camera_distance_m": values["distance"], "camera_distance_std": std.get("distance"),
        "camera_x_m": values["camera_x"], "camera_z_m": values["camera_z"],
        "camera_roll_deg": math.degrees(values["roll"]),
        "camera_roll_std_deg": math.degrees(std.get("roll", math.nan)),
        "bob_radius_m": r, "exposure_s": values.get("exposure", args.exposure), "bob_color": color.tolist(),
        "status": result.status, "explained": result.explained, "message": result.message, "evaluations": result.iterations,
        "out_of_view_frames": {k: len(v) for k, v in result.out_of_view.items()},
        "seconds": round(time.perf_counter() - start, 1),
    }  # fmt: skip
    if args.truth:
        figures.update(compare(json.loads(Path(args.truth).read_text()), values, figures, video))
    if args.out:
        difference = (result.frames - video.frames).abs().mul(4).clamp(0, 1)
        side = torch.cat([video.frames, result.frames, difference], 3)
        diffcam.write_video(args.out, side, fps=video.fps)
        figures["video_out"] = str(args.out)
    print(json.dumps(figures))
    return figures


def compare(truth: dict, values: dict, figures: dict, video) -> dict:
    """Errors against a true pendulum (the JSON the test clip's generator writes)."""
    p = truth["physics"]
    true_period = p["small_amplitude_period"]
    # the model's frames are centred on their exposure: its t = 0 is the true time of the
    # middle of the first frame's exposure
    frames = truth["frames"]
    rel = {
        "length_error": values["length"] / p["L"] - 1,
        "decay_error": values["decay"] / p["gamma"] - 1,
        "period_error": figures["small_amplitude_period_s"] / true_period - 1,
        "theta0_error_rad": values["theta0"] - frames["theta_mid"][0],
        "theta_dot0_error": values["theta_dot0"] - frames["theta_dot_mid"][0],
        "camera_distance_error": values["distance"] / -p.get("camera_y", -2.4) - 1
        if "camera_y" in p
        else values["distance"] / abs(truth["camera"]["position"][1]) - 1,
    }
    within = {
        "length_sigmas": (values["length"] - p["L"]) / figures["length_std"]
        if figures.get("length_std")
        else None,
        "decay_sigmas": (values["decay"] - p["gamma"]) / figures["decay_std"]
        if figures.get("decay_std")
        else None,
    }
    return {"truth": {"L": p["L"], "gamma": p["gamma"], "theta0": p["theta0"],
                      "small_amplitude_period": true_period}, **rel, **within}  # fmt: skip


if __name__ == "__main__":
    main()
