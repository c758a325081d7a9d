"""The performance tables, generated from the benchmarks' results files.

Every ``benchmarks/results/<name>.jsonl`` (the convention of ``benchmarks/_record.py``: a
header line stamping each run with its machine, torch, commit and date, then the run's JSON
lines) becomes a section: each run, newest first, under its stamps, its records as tables
(records with the same keys, in the order they came, make one table). ``TITLES`` gives a
file its heading and says what it measures; a file without an entry still appears, under its
name.

Run alone to print the Markdown: ``python docs/_gen/performance.py``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
if str(ROOT / "benchmarks") not in sys.path:
    sys.path.insert(0, str(ROOT / "benchmarks"))

# name -> (heading, what the benchmark measures); the page lists files in this order
TITLES = {
    "default_path": (
        "The default scene path (`bench_default_path.py`)",
        "`diffcam.load_scene(file, batch_size=B)` then `scene.rollout(300, actions=...)` as it "
        "runs by default, against Newton, a hand-written Warp kernel and MuJoCo's batched C "
        "rollout. State-steps per second (higher is better).",
    ),
    "physics": (
        "The engine's step (`bench_physics.py`)",
        "The cart-pole, float32, 2 threads, state-steps per second: maximal and reduced "
        "coordinates, eager and compiled.",
    ),
    "broadphase": (
        "Contact scenes and the broadphase (`bench_broadphase.py`)",
        "Eager, float32, no grad, one thread, ms per step (lower is better).",
    ),
    "hull": (
        "A convex hull against a box (`bench_hull.py`)",
        "A hull thrown tumbling onto a box: exact contacts against the commit before them (the "
        "box that bounds the hull). Eager, float32, no grad, one thread, ms per step.",
    ),
    "render": (
        "The renderer (`bench_render.py`)",
        "B = 64 images of 288 × 96, 5 textured primitives, 256² textures, gradients to "
        "textures and poses, 2 threads, ms.",
    ),
    "antialias": (
        "Antialiased against hard edges (`bench_antialias.py`)",
        "`Scene.render` of the pendulum-cart with its static layer, 1 thread, ms.",
    ),
    "mesh_mitsuba": (
        "A textured mesh against Mitsuba 3 (`bench_mesh_mitsuba.py`)",
        "The same 5,000-triangle textured torus and pinhole camera in diffcam and Mitsuba 3, "
        "unlit: silhouette IoU and colour error at 288 × 96 and 640 × 480; forward + backward "
        "to pose and texture, B = 64 views in diffcam against Mitsuba per image, 1 thread each.",
    ),
    "mesh_warp": (
        "Mesh ray casting against NVIDIA Warp (`bench_mesh_warp.py`)",
        "The same camera rays and torus: diffcam's BVH traversed with torch ops against "
        "Warp's `wp.mesh_query_ray` kernel, one thread each, ms (lower is better), and their "
        "agreement.",
    ),
    "soft": (
        "Soft edges (`bench_soft.py`)",
        "σ = 1 px soft edges against the hard render of the same scene, B = 64, 288 × 96, ms "
        "of forward + backward, and Mitsuba 3's one-image pose gradient as a peer.",
    ),
    "randomize": (
        "Domain randomisation (`bench_randomize.py`)",
        "A pendulum-cart frame, forward + backward, 1 thread, ms.",
    ),
    "swingup": (
        "A swing-up training iteration (`bench_swingup.py`)",
        "ms per iteration of B episodes of 3 s: wall clock, or (clock CPU) the process's CPU time.",
    ),
    "read_video": (
        "Reading a video (`bench_read_video.py`)",
        "A 25 s 1280 × 720 60 fps clip read at 160 × 90.",
    ),
    "identify_clips": (
        "`diffcam fit` on the realistic clips (`bench_identify_clips.py`)",
        "Each clip fitted from its rough scene file in a fresh process, one thread.",
    ),
    "real_video": (
        "`diffcam fit` against OpenCV + SciPy (`bench_real_video.py`)",
        "A pendulum video, each case in a fresh process, one torch thread.",
    ),
    "fit_gradients": (
        "A gradient fit of a mass and a damping (`bench_fit_gradients.py`)",
        "`fit_scene` with Adam on the pendulum-cart's cart mass and rail damping from 2 s of "
        "rendered frames, the physics eager and on the ahead-of-time step with its VJP to the "
        "world, in one process, one thread (seconds: lower is better).",
    ),
}


def _cell(value) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if value.is_integer() and abs(value) >= 1000:
            return f"{value:,.0f}"
        text = repr(value)
        return text if len(text) <= 9 else f"{value:.4g}"
    if isinstance(value, (list, tuple)):
        return " / ".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return "; ".join(f"{k}: {_cell(v)}" for k, v in value.items())
    return str(value).replace("|", "\\|").replace("\n", " ")


def _tables(records: list[dict]) -> list[str]:
    groups: dict[tuple, list[dict]] = {}
    for record in records:
        groups.setdefault(tuple(record), []).append(record)
    out = []
    for keys, rows in groups.items():
        lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
        for row in rows:
            lines.append("| " + " | ".join(_cell(row.get(k)) for k in keys) + " |")
        out.append("\n".join(lines))
    return out


def _stamp(header: dict) -> str:
    when = str(header.get("date", "undated"))
    if header.get("time"):
        when += f" ({header['time']})"
    parts = [f"**{when}**"]
    if header.get("commit"):
        parts.append(f"commit `{header['commit']}`")
    if header.get("torch"):
        parts.append(f"torch {header['torch']}")
    if header.get("machine"):
        parts.append(header["machine"])
    lines = [" · ".join(parts)]
    if header.get("source"):
        lines.append(f"*{header['source']}*")
    if header.get("command"):
        lines.append(f"`{header['command']}`")
    if header.get("note"):
        lines.append(header["note"])
    return "\n\n".join(lines)


def names(results_dir: Path = RESULTS) -> list[str]:
    """The results files' names, in the page's order."""
    files = [p.stem for p in sorted(results_dir.glob("*.jsonl"))]
    return [n for n in TITLES if n in files] + [n for n in files if n not in TITLES]


def generate(only: str | None = None, results_dir: Path = RESULTS) -> str:
    """Every results file as a section with its heading, or with ``only`` one file's runs
    (under the page's own heading)."""
    from _record import read_results

    order = names(results_dir)
    if only is not None:
        if only not in order:
            raise ValueError(f"no results file benchmarks/results/{only}.jsonl")
        order = [only]
    if not order:
        return "*No results recorded yet: run a benchmark with `--record`.*\n"
    out = []
    for name in order:
        heading, what = TITLES.get(name, (f"`{name}`", ""))
        runs = read_results(results_dir / f"{name}.jsonl")
        if only is None:
            out.append(f"## {heading}\n")
        if what:
            out.append(what + "\n")
        out.append(
            f"From `benchmarks/results/{name}.jsonl`: {len(runs)} "
            f"run{'s' if len(runs) != 1 else ''}, newest first.\n"
        )
        # newest first; runs of one date in the reverse of their order in the file
        dated = sorted(
            enumerate(runs), key=lambda ir: (str(ir[1]["header"].get("date", "")), ir[0])
        )
        for _, run in reversed(dated):
            out.append(_stamp(run["header"]) + "\n")
            for table in _tables(run["records"]):
                out.append(table + "\n")
    return "\n".join(out)


def stamps(results_dir: Path = RESULTS) -> list[dict]:
    """Every header of every results file (for tests)."""
    from _record import read_results

    return [run["header"] for p in sorted(results_dir.glob("*.jsonl")) for run in read_results(p)]


if __name__ == "__main__":
    print(generate())
