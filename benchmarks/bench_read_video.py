"""read_video's decode + downscale on a 1280 x 720, 60 fps, 25 s H.264 clip, beside OpenCV.

Prints JSON lines:

* one per case and thread setting: the median wall-clock and CPU seconds of ``--repeats``
  runs (each in a fresh process, the cases alternating within each round), and each run's
  figures:

  - ``read_video_before``: ``diffcam.read_video(clip, size=(160, None))`` as the code was at
    ``--before`` (default: the merge base with ``main``), extracted with ``git archive``;
  - ``read_video``: the same call with this tree's code (``conversion="auto"``);
  - ``read_video_rgb``: this tree with ``conversion="rgb"`` (the reference conversion);
  - ``opencv``: ``cv2.VideoCapture`` reading every frame and ``cv2.resize(...,
    interpolation=cv2.INTER_AREA)`` to 160 x 90, kept as uint8 (BGR, as OpenCV gives it);

  with ``threads`` ``1`` (``torch.set_num_threads(1)``, ``cv2.setNumThreads(1)``,
  ``OMP_NUM_THREADS=1``) or ``default`` (nothing set); FFmpeg's decoder keeps each library's
  own thread setting either way (read_video: frame + slice threads, ``thread_type="AUTO"``;
  OpenCV: ``CAP_PROP_N_THREADS``, reported);
* ``difference``: this tree's frames against the before code's (every 10th frame): max and
  mean absolute difference in [0, 1] units and in 8-bit levels, and whether the times and
  shapes are identical;
* ``machine``: the load average at the start and end, and the other processes using CPU at
  the start (the machine may be shared);
* with ``--breakdown``, ``breakdown`` lines: where the time of the reference conversion goes,
  as cumulative passes over the clip (one torch thread), each adding one step of the
  per-frame work: ``decode`` (PyAV, FFmpeg's frame + slice threads, as read_video sets
  them), ``decode_1_thread`` (one decoding thread), ``+rgb24`` (FFmpeg's conversion of the
  full frame to RGB, ``to_ndarray``), ``+planar`` (torch's (3, h, w) copy of it), ``+float``
  (uint8 to float32 in [0, 1]), ``+area`` (the 8 x 8 area average into the output), and
  ``decode+yuv`` (decoding and the YUV averaging that replaces the four steps).

Usage: python benchmarks/bench_read_video.py [--clip PATH] [--repeats 3] [--frames N]
    [--before REV] [--threads 1,default] [--cases read_video_before,read_video,...]
    [--breakdown]

The clip is made by ``bench_real_video.make_big_clip()`` (minutes); ``--frames N`` reads only
the first N frames (for a quick run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _record import Recorder, add_record_flag

ROOT = Path(__file__).resolve().parents[1]
CLIP = ROOT / "out" / "bench" / "pendulum_720p60_25s.mp4"
CASES = ("read_video_before", "read_video", "read_video_rgb", "opencv")
RECORD = Recorder("read_video")  # benchmarks/results/read_video.jsonl with --record

# Cumulative passes over the clip, in one fresh process: argv = clip, frames, repeats.
BREAKDOWN = r"""
import json, resource, statistics, sys, time
import av, torch, torch.nn.functional as F
from diffcam.video.frames import output_geometry
from diffcam.video.yuv import yuv_plan
torch.set_num_threads(1)
clip, frames, repeats = sys.argv[1], int(sys.argv[2]) or None, int(sys.argv[3])
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def run(step):
    with av.open(clip) as c:
        s = c.streams.video[0]
        s.thread_type = "AUTO"
        if step == "decode_1_thread":
            s.codec_context.thread_count = 1
        out, plan, n = None, None, 0
        for f in c.decode(s):
            if frames is not None and n >= frames:
                break
            if out is None:
                out = torch.empty((frames or s.frames, 3, f.height // 8, f.width // 8))
                geom = output_geometry(clip, (f.width, f.height), None, (f.width // 8, None))
                plan = yuv_plan(f, 0, None, geom, torch.float32)
            if step == "decode+yuv":
                plan.store(f, 0, out[n])
            elif step not in ("decode", "decode_1_thread"):
                x = f.to_ndarray(format="rgb24")
                if step != "+rgb24":
                    x = torch.from_numpy(x).permute(2, 0, 1).contiguous()
                if step in ("+float", "+area"):
                    x = x.to(torch.float32).div_(255.0)
                if step == "+area":
                    out[n] = F.interpolate(x[None], size=out.shape[2:], mode="area")[0]
            n += 1
    return n
for step in ("decode", "decode_1_thread", "+rgb24", "+planar", "+float", "+area", "decode+yuv"):
    walls, cpus = [], []
    for _ in range(repeats):
        c0, t0 = cpu(), time.perf_counter()
        n = run(step)
        walls.append(time.perf_counter() - t0)
        cpus.append(cpu() - c0)
    print(json.dumps({"case": "breakdown", "step": step, "frames": n,
                      "median_seconds": round(statistics.median(walls), 3),
                      "median_cpu_seconds": round(statistics.median(cpus), 3),
                      "runs_seconds": [round(w, 3) for w in walls]}), flush=True)
"""

# One run, in a fresh process: argv = case, clip, frames, threads, save path ("" for none).
CHILD = r"""
import json, os, resource, sys, time
case, clip, frames, threads, save = sys.argv[1:6]
frames = int(frames) or None
if threads == "1":
    import torch
    torch.set_num_threads(1)
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
if case == "opencv":
    import cv2
    import numpy as np
    if threads == "1":
        cv2.setNumThreads(1)
    c0, t0 = cpu(), time.perf_counter()
    cap = cv2.VideoCapture(clip)
    decoder_threads = cap.get(cv2.CAP_PROP_N_THREADS)
    small = []
    while frames is None or len(small) < frames:
        ok, img = cap.read()
        if not ok:
            break
        small.append(cv2.resize(img, (160, 90), interpolation=cv2.INTER_AREA))
    cap.release()
    out = np.stack(small)
    n = len(small)
else:
    import torch
    import diffcam
    kw = {} if case == "read_video_before" else {
        "conversion": "rgb" if case == "read_video_rgb" else "auto"}
    sel = {} if frames is None else {"frames": (0, frames)}
    c0, t0 = cpu(), time.perf_counter()
    v = diffcam.read_video(clip, size=(160, None), **sel, **kw)
    n = len(v)
    if save:
        torch.save({"frames": v.frames[::10].clone(), "times": v.times,
                    "shape": tuple(v.frames.shape)}, save)
wall, cpu_s = time.perf_counter() - t0, cpu() - c0
print(json.dumps({"seconds": wall, "cpu_seconds": cpu_s, "frames": n,
                  "conversion": getattr(locals().get("v"), "conversion", None),
                  "opencv_decoder_threads": locals().get("decoder_threads"),
                  "module": (sys.modules["diffcam"].__file__ if "diffcam" in sys.modules else None)}))
"""


def _before_tree(rev: str, into: Path) -> tuple[Path, str]:
    """This repository's ``diffcam`` package at ``rev``, extracted under ``into``."""
    if rev == "":
        rev = subprocess.run(
            ["git", "merge-base", "HEAD", "main"], cwd=ROOT, capture_output=True, text=True
        ).stdout.strip()
    sha = subprocess.run(
        ["git", "rev-parse", "--short", rev], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout.strip()
    archive = subprocess.run(
        ["git", "archive", sha, "diffcam"], cwd=ROOT, check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into, sha


def _run(case: str, clip: Path, frames: int, threads: str, before: Path, save: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(before if case == "read_video_before" else ROOT)
    if threads == "1":
        env["OMP_NUM_THREADS"] = "1"
    else:
        env.pop("OMP_NUM_THREADS", None)
    res = subprocess.run(
        [sys.executable, "-c", CHILD, case, str(clip), str(frames), threads, save],
        env=env,
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
    )
    if res.returncode:
        raise RuntimeError(f"{case} failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def _busy() -> list[str]:
    """The other processes using CPU now (ps), as 'pcpu command' strings."""
    out = subprocess.run(
        ["ps", "-eo", "pcpu,pid,args", "--sort=-pcpu", "--no-headers"],
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    mine = os.getpid()
    rows = []
    for line in out:
        pcpu, pid, args = line.strip().split(None, 2)
        if float(pcpu) >= 5.0 and int(pid) != mine and "ps -eo" not in args:
            rows.append(f"{pcpu}% {args[:120]}")
    return rows[:6]


def _difference(before: Path, after: Path) -> dict:
    import torch

    a, b = torch.load(before), torch.load(after)
    same = a["shape"] == b["shape"] and torch.equal(a["times"], b["times"])
    d = (a["frames"].double() - b["frames"].double()).abs()
    return {
        "case": "difference",
        "frames_compared": int(d.shape[0]),
        "identical_times_and_shape": bool(same),
        "max_abs": round(float(d.max()), 6),
        "mean_abs": round(float(d.mean()), 7),
        "max_levels": round(float(d.max()) * 255, 3),
        "mean_levels": round(float(d.mean()) * 255, 4),
        "p999_levels": round(float(torch.quantile(d.flatten()[::7].float(), 0.999)) * 255, 3),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clip", type=Path, default=CLIP)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--frames", type=int, default=0, help="first N frames only (0: all)")
    ap.add_argument("--before", default="", help="git revision of the 'before' code")
    ap.add_argument("--threads", default="1,default")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--breakdown", action="store_true", help="also the per-step breakdown")
    add_record_flag(ap)
    args = ap.parse_args(argv)
    RECORD.enable(args.record, note=args.note)
    if not args.clip.exists():
        sys.exit(
            f'{args.clip} is missing: make it with python -c "import sys; sys.path.insert(0, '
            "'benchmarks'); import bench_real_video as b; print(b.make_big_clip())\""
        )
    cases = args.cases.split(",")
    RECORD.emit({"case": "machine", "when": "start", "loadavg": os.getloadavg(), "busy": _busy()})
    with tempfile.TemporaryDirectory() as tmp:
        before, sha = _before_tree(args.before, Path(tmp))
        saved: dict[str, str] = {}
        for threads in args.threads.split(","):
            runs: dict[str, list[dict]] = {c: [] for c in cases}
            for r in range(args.repeats):
                order = cases[r % len(cases) :] + cases[: r % len(cases)]  # alternate
                for case in order:
                    save = ""
                    if case in ("read_video_before", "read_video") and case not in saved:
                        save = saved[case] = str(Path(tmp) / f"{case}.pt")
                    runs[case].append(_run(case, args.clip, args.frames, threads, before, save))
            for case in cases:
                rs = runs[case]
                RECORD.emit(
                    {
                        "case": case,
                        "threads": threads,
                        "before_rev": sha if case == "read_video_before" else None,
                        "frames": rs[0]["frames"],
                        "conversion": rs[0]["conversion"],
                        "opencv_decoder_threads": rs[0]["opencv_decoder_threads"],
                        "median_seconds": round(statistics.median(x["seconds"] for x in rs), 3),
                        "median_cpu_seconds": round(
                            statistics.median(x["cpu_seconds"] for x in rs), 3
                        ),
                        "runs_seconds": [round(x["seconds"], 3) for x in rs],
                        "module": rs[0]["module"],
                    }
                )
        if {"read_video_before", "read_video"} <= saved.keys():
            RECORD.emit(_difference(saved["read_video_before"], saved["read_video"]))
    if args.breakdown:
        env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
        subprocess.run(
            [sys.executable, "-c", BREAKDOWN, str(args.clip), str(args.frames), str(args.repeats)],
            env=env,
            check=True,
            cwd=tempfile.gettempdir(),
        )
    RECORD.emit(
        {"case": "machine", "when": "end", "loadavg": os.getloadavg(), "time": time.ctime()}
    )


if __name__ == "__main__":
    main()
