"""Benchmark results kept in the repository: JSON lines under a header, one file per benchmark.

A benchmark run with ``--record`` prints its JSON lines as always and appends them to
``benchmarks/results/<name>.jsonl``, after one header line that stamps the run::

    {"header": true, "machine": "...", "torch": "2.13.0+cpu", "commit": "0f86e03",
     "date": "2026-11-28T10:31:05Z", "command": "benchmarks/bench_soft.py --threads 2"}
    {"bench": "soft", "case": "pendulum_cart", ...}
    {"bench": "soft", "case": "rectangles", ...}

A file holds every recorded run, oldest first. A header may also carry ``"note"`` (the
conditions a reader should know: another job on the machine, ...) and, for figures copied from
an older README rather than measured by a recording run, ``"source": "transcribed from the
README of <commit>"``. The documentation's performance page (``docs/hooks/performance.py``)
renders each run as tables under its stamps, newest first.

Usage in a benchmark::

    from _record import Recorder, add_record_flag

    RECORD = Recorder("soft")             # benchmarks/results/soft.jsonl
    ...
    add_record_flag(parser)
    args = parser.parse_args()
    RECORD.enable(args.record, note=args.note)
    RECORD.emit({"case": ..., "ms": ...})  # printed; appended when enabled
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = ROOT / "benchmarks" / "results"


def machine() -> str:
    """The CPU model, its core count and the OS, e.g. ``"AMD EPYC 7B13, 2 cores, Linux x86_64"``."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} cores, {platform.system()} {platform.machine()}"


def torch_version() -> str:
    """The installed torch's version, without importing it."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("torch")
    except PackageNotFoundError:
        return "not installed"


def commit() -> str:
    """The checkout's short commit, ``+dirty`` when tracked files other than the results differ."""

    def git(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)

    head = git("rev-parse", "--short", "HEAD")
    if head.returncode != 0:
        return "unknown"
    dirty = git("diff", "--quiet", "HEAD", "--", ".", ":(exclude)benchmarks/results")
    return head.stdout.strip() + ("+dirty" if dirty.returncode != 0 else "")


def header(note: str = "", **extra) -> dict:
    """The stamp of a run: machine, torch, commit, date (UTC) and the command."""
    stamp = {
        "header": True,
        "machine": machine(),
        "torch": torch_version(),
        "commit": commit(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
    }
    if note:
        stamp["note"] = note
    stamp.update(extra)
    return stamp


def read_results(path: str | Path) -> list[dict]:
    """The runs of a results file: ``[{"header": {...}, "records": [...]}, ...]``, oldest first.
    Lines before the first header are an error (a file must say where its figures come from)."""
    runs: list[dict] = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        value = json.loads(line)
        if not isinstance(value, dict):
            raise ValueError(f"{path}:{number}: not a JSON object")
        if value.get("header") is True:
            runs.append({"header": value, "records": []})
        elif not runs:
            raise ValueError(f"{path}:{number}: a record before any header line")
        else:
            runs[-1]["records"].append(value)
    return runs


class Recorder:
    """Prints a benchmark's JSON lines; when enabled, also appends them to its results file
    (the header is written with the first line, so a run that fails early leaves no stamp)."""

    def __init__(self, name: str):
        self.name = name
        self.path = RESULTS_DIR / f"{name}.jsonl"
        self.enabled = False
        self.note = ""
        self._started = False

    def enable(self, enabled: bool = True, note: str = "") -> None:
        self.enabled, self.note = bool(enabled), note or ""

    def emit(self, record: dict) -> dict:
        print(json.dumps(record), flush=True)
        if self.enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                if not self._started:
                    f.write(json.dumps(header(self.note)) + "\n")
                    self._started = True
                f.write(json.dumps(record) + "\n")
        return record


def add_record_flag(parser) -> None:
    """``--record`` (append the run to benchmarks/results/<name>.jsonl) and ``--note TEXT``."""
    parser.add_argument(
        "--record",
        action="store_true",
        help="also append this run's lines, under a header (machine, torch, commit, date), to "
        "benchmarks/results/<name>.jsonl (the docs' performance page)",
    )
    parser.add_argument("--note", default="", help="with --record: conditions worth knowing")
