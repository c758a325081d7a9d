"""The documentation runs: the README's and the docs pages' Python snippets execute, the site
builds with ``mkdocs build --strict``, and its generated parts come from the code.

Snippets: every fenced ```python block of README.md and docs/**/*.md runs, each in a fresh
namespace, the blocks of one page in one process, from a scratch folder that has the
repository's ``tests/`` (the clips the snippets read) and an ``out/`` folder. A block right
after a ``<!-- skip -->`` line never runs (for code that needs what a test cannot have); one
after ``<!-- slow -->`` runs in the slow test (a fit of a video: seconds).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^(?:<!-- (skip|slow) -->\n)?```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)

# runs the blocks given as JSON on stdin, each in a fresh namespace; names the failing one
_RUNNER = """
import json, sys, traceback
blocks = json.load(sys.stdin)
for name, code in blocks:
    try:
        exec(compile(code, name, "exec"), {"__name__": "__main__"})
    except BaseException:
        traceback.print_exc()
        print(f"SNIPPET FAILED: {name}", file=sys.stderr)
        sys.exit(1)
    print(f"SNIPPET RAN: {name}")
"""


def snippets(page: Path) -> list[tuple[str, str, str]]:
    """(name, mark, code) of each ```python block of ``page``; mark is "", "skip" or "slow"."""
    text = page.read_text(encoding="utf-8")
    out = []
    for match in _FENCE.finditer(text):
        line = text.count("\n", 0, match.start(2))
        name = f"{page.relative_to(ROOT)}:{line}"
        out.append((name, match.group(1) or "", match.group(2)))
    return out


def _run(blocks: list[tuple[str, str]], tmp_path: Path) -> list[str]:
    """Runs ``blocks`` (name, code) in one process in ``tmp_path``; the names of those that ran."""
    (tmp_path / "tests").symlink_to(ROOT / "tests", target_is_directory=True)
    (tmp_path / "out").mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        "OMP_NUM_THREADS": "1",
    }
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER],
        input=json.dumps(blocks),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return [line.removeprefix("SNIPPET RAN: ") for line in done.stdout.splitlines()
            if line.startswith("SNIPPET RAN: ")]  # fmt: skip


def test_snippets_are_found():
    found = {p.relative_to(ROOT).as_posix(): snippets(p) for p in PAGES}
    assert len(found["README.md"]) == 3  # render, physics alone, fit a video
    assert sum(len(s) for s in found.values()) >= 10
    # every python block is seen by the pattern (none silently skipped by a bad fence)
    for page in PAGES:
        assert page.read_text(encoding="utf-8").count("```python\n") == len(snippets(page)), page


@pytest.mark.slow
def test_snippets_run(tmp_path):
    """Every unmarked block of every page, in one process (one torch import): about 12 s."""
    blocks = [(n, code) for p in PAGES for n, mark, code in snippets(p) if mark == ""]
    assert blocks
    assert _run(blocks, tmp_path) == [name for name, _ in blocks]


@pytest.mark.slow
def test_slow_snippets_run(tmp_path):
    """The blocks marked slow: the video fits (about 5 s each)."""
    blocks = [(n, code) for p in PAGES for n, mark, code in snippets(p) if mark == "slow"]
    assert blocks
    assert _run(blocks, tmp_path) == [name for name, _ in blocks]


def _load(name: str, path: Path):
    sys.path.insert(0, str(path.parent))
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(path.parent))


def test_scene_reference_lists_every_schema_key():
    from diffcam.scene import schema

    page = _load("scene_reference", ROOT / "docs" / "_gen" / "scene_reference.py").generate()
    for fields in (
        schema.WORLD_FIELDS,
        schema.CAMERA_FIELDS,
        schema.LIGHT_FIELDS,
        schema.BODY_FIELDS,
        schema.JOINT_FIELDS,
        schema.MOTOR_FIELDS,
    ):
        for key, field in fields.items():
            assert f"| `{key}` |" in page, key
            if field is not None and key != "size":
                assert field.accepted.replace("|", "\\|") in page, key
    assert "geometric mean" in page and "larger" in page and "0.2 m/s" in page
    assert "bodies.<body>.restitution" in page and "`visible`" in page


def test_results_files_have_stamped_headers(tmp_path):
    record = _load("_record", ROOT / "benchmarks" / "_record.py")
    files = sorted((ROOT / "benchmarks" / "results").glob("*.jsonl"))
    assert files
    for path in files:
        runs = record.read_results(path)
        assert runs, path
        for run in runs:
            for key in ("machine", "torch", "commit", "date"):
                assert run["header"].get(key), (path, key)
            assert run["records"], path
    # the convention round trip: a header with the first line, then the records
    recorder = record.Recorder("x")
    recorder.path = tmp_path / "x.jsonl"
    recorder.enable(True, note="test")
    recorder.emit({"a": 1})
    recorder.emit({"a": 2})
    (run,) = record.read_results(recorder.path)
    assert run["header"]["note"] == "test" and run["records"] == [{"a": 1}, {"a": 2}]


@pytest.mark.slow
def test_mkdocs_build_strict(tmp_path):
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module)
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    scene = (site / "reference" / "scene-file" / "index.html").read_text(encoding="utf-8")
    assert "geometric mean" in scene and "solver_iterations" in scene
    performance = (site / "performance" / "index.html").read_text(encoding="utf-8")
    assert "transcribed from the README" in performance
    mjcf = (site / "reference" / "mjcf-support" / "index.html").read_text(encoding="utf-8")
    assert "freejoint" in mjcf
    for page in site.rglob("*.html"):
        assert "<!-- generated:" not in page.read_text(encoding="utf-8"), page


def test_readme_keeps_the_set_up_commands():
    """CI and .ci/run rely on these two lines, word for word."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    main_job = (
        "pip install torch==2.13.0 && pip install . && diffcam render pendulum_cart "
        "--seconds 4 --policy sine --out out/pendulum_cart.mp4"
    )
    tests = (
        'pip install torch==2.13.0 && pip install -e ".[dev,mesh,warp]" && OMP_NUM_THREADS=1 python -m '
        "pytest -q -p no:cacheprovider -n 2 tests"
    )
    assert f"\n{main_job}\n" in readme and f"\n{tests}\n" in readme
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert tests.split(" && ")[-1] in ci
    # .ci/run installs what the README's test command installs (the same extras)
    assert tests.split(" && ")[1].removeprefix("pip install ") in ci
