"""Identification from a pendulum video: accuracy, time and memory, beside a classical baseline.

Prints one JSON line per case, each case in a fresh process (its wall-clock seconds and its
peak resident memory, VmHWM), then a summary line with the ratio of the two times:

* ``diffcam``: `examples/real_pendulum.py` on the clip (`diffcam.identify`, the engine of
  ``diffcam fit``: read at 160 px wide, clean plate, blobs, the centre stage through the
  physics and the camera, the learnt look, the pixel stage where bodies are big enough, the
  ± with its systematic part), with its errors against the clip's truth; with ``--out`` it
  also writes the side-by-side video.
* ``opencv_scipy``: the baseline a user would write without diffcam: OpenCV threshold against
  the median background, the blob centroid per frame, and a SciPy least-squares fit of the
  pendulum ODE (length, decay, start) and a planar camera (pivot pixel, pixels per metre, roll)
  to the centroids, with error bars from the Jacobian.

Clips: the bundled ``tests/data/pendulum_realistic.mp4`` (320 x 180, 30 fps, 12 s), and with
``--big`` a 1280 x 720, 60 fps, 25 s clip made once by ``tests/data/make_realistic_pendulum.py``
into ``out/bench/`` (slow to make: minutes).

Usage: python benchmarks/bench_real_video.py [--big] [--out] [--threads T]
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
BUNDLED = ROOT / "tests" / "data" / "pendulum_realistic.mp4"
BIG = ROOT / "out" / "bench" / "pendulum_720p60_25s.mp4"
RECORD = Recorder("real_video")  # benchmarks/results/real_video.jsonl with --record


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM) in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return math.nan


def make_big_clip() -> Path:
    if BIG.exists():
        return BIG
    sys.path.insert(0, str(ROOT / "tests" / "data"))
    from make_realistic_pendulum import make_clip

    BIG.parent.mkdir(parents=True, exist_ok=True)
    make_clip(BIG, width=1280, height=720, fps=60.0, seconds=25.0, supersample=1, subframes=4,
              truth_path=BIG.with_suffix(".json"))  # fmt: skip
    return BIG


def run_diffcam(clip: Path, threads: int, out: bool) -> dict:
    """The example in this process (call it in a fresh one for a clean memory figure)."""
    import importlib.util

    import torch

    torch.set_num_threads(threads)
    spec = importlib.util.spec_from_file_location(
        "real_pendulum", ROOT / "examples" / "real_pendulum.py"
    )
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    start = time.perf_counter()
    argv = [str(clip), "--truth", str(clip.with_suffix(".json"))]
    if out:
        argv += ["--out", str(ROOT / "out" / "bench" / f"{clip.stem}_side.mp4")]
    figures = example.main(argv)
    keep = ("length_error", "amplitude_error", "damping_error", "period_error", "length_sigmas",
            "status", "explained")  # fmt: skip
    return {"case": "diffcam", "clip": clip.name, "out": out,
            "seconds": round(time.perf_counter() - start, 1),
            "peak_rss_mb": round(peak_rss_mb(), 1), **{k: figures.get(k) for k in keep}}  # fmt: skip


def run_baseline(clip: Path) -> dict:
    """OpenCV threshold + SciPy ODE fit on the blob centroids."""
    import cv2
    import numpy as np
    from scipy.integrate import solve_ivp
    from scipy.optimize import least_squares

    start = time.perf_counter()
    capture = cv2.VideoCapture(str(clip))
    fps = capture.get(cv2.CAP_PROP_FPS)
    frames = []
    while True:
        ok, frame = capture.read()
        if not ok:
            break
        frames.append(cv2.resize(frame, (160, 90), interpolation=cv2.INTER_AREA))
    video = np.stack(frames).astype(np.float32) / 255
    background = np.median(video[:: max(1, len(video) // 64)], 0)
    times, points = [], []
    for k, frame in enumerate(video):
        diff = np.abs(frame - background).max(-1)
        mask = (diff > 0.12).astype(np.uint8)
        count, labels, stats, centroids = cv2.connectedComponentsWithStats(mask)
        if count < 2:
            continue
        best = 1 + int(np.argmax([diff[labels == i].sum() for i in range(1, count)]))
        times.append(k / fps + 0.5 / 60)
        points.append(centroids[best] + 0.5)  # pixel centres at +0.5
    times, points = np.array(times), np.array(points)

    def model(p):
        length, decay, theta0, rate, u0, v0, scale, roll = p
        inertia_per_mass = length**2

        def rhs(_, y):
            return [y[1], -9.81 * length / inertia_per_mass * math.sin(y[0]) - 2 * decay * y[1]]

        sol = solve_ivp(rhs, (0, times[-1]), [theta0, rate], t_eval=times, rtol=1e-8, atol=1e-10)
        theta = sol.y[0]
        x, y = -length * np.sin(theta), length * np.cos(theta)  # metres, y down the image
        c, s = math.cos(roll), math.sin(roll)
        return np.stack([u0 + scale * (c * x - s * y), v0 + scale * (s * x + c * y)], 1)

    guess = [0.8, 0.02, 0.4, 0.0, 80.0, 15.0, 50.0, 0.0]
    fit = least_squares(lambda p: (model(p) - points).ravel(), guess, x_scale="jac")
    dof = max(1, fit.fun.size - len(guess))
    cov = np.linalg.pinv(fit.jac.T @ fit.jac) * (fit.fun @ fit.fun) / dof
    std = np.sqrt(np.diag(cov))
    truth = json.loads(clip.with_suffix(".json").read_text())["physics"]
    return {"case": "opencv_scipy", "clip": clip.name, "frames": len(video),
            "seconds": round(time.perf_counter() - start, 1),
            "length_error": fit.x[0] / truth["L"] - 1, "length_sigmas": (fit.x[0] - truth["L"]) / std[0],
            "decay_error": fit.x[1] / truth["gamma"] - 1, "theta0_error_rad": fit.x[2] - truth["theta0"],
            "peak_rss_mb": round(peak_rss_mb(), 1)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--big", action="store_true", help="also the 1280x720 60 fps 25 s clip")
    parser.add_argument("--out", action="store_true", help="diffcam also writes its video")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--case", default=None, help=argparse.SUPPRESS)  # one case, in-process
    parser.add_argument("--clip", default=None, help=argparse.SUPPRESS)
    add_record_flag(parser)
    args = parser.parse_args()
    RECORD.enable(args.record and not args.case, note=args.note)
    if args.case:
        clip = Path(args.clip)
        result = (
            run_diffcam(clip, args.threads, args.out)
            if args.case == "diffcam"
            else run_baseline(clip)
        )
        print(json.dumps(result), flush=True)
        return
    clips = [BUNDLED] + ([make_big_clip()] if args.big else [])
    for clip in clips:
        seconds = {}
        for case in ("opencv_scipy", "diffcam"):
            command = [sys.executable, __file__, "--case", case, "--clip", str(clip),
                       "--threads", str(args.threads)] + (["--out"] if args.out else [])  # fmt: skip
            done = subprocess.run(command, check=True, capture_output=True, text=True,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})  # fmt: skip
            line = done.stdout.strip().splitlines()[-1]
            seconds[case] = RECORD.emit(json.loads(line))["seconds"]
        RECORD.emit({"case": "summary", "clip": clip.name,
                     "diffcam_over_opencv_scipy": round(seconds["diffcam"] / seconds["opencv_scipy"], 2)})  # fmt: skip


if __name__ == "__main__":
    main()
