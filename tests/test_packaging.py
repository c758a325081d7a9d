"""The built wheel holds the package data: the bundled scenes, textures and controller weights
(``.ci/check_wheel`` installs it in a fresh virtual environment and runs it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from diffcam.scene import SCENES_DIR, TEXTURES_DIR, WEIGHTS_DIR
from diffcam.scene.paths import MESHES_DIR

ROOT = Path(__file__).resolve().parents[1]


def _copy_of_the_repository(dest: Path) -> Path:
    """The files of the checkout (tracked, or new and not ignored) copied to ``dest``: an
    in-tree build would reuse build/lib, whose stale copies can hide a missing declaration."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode()  # fmt: skip
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():  # (a tracked file deleted in the work tree is not)
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    return dest


@pytest.mark.slow
def test_the_wheel_holds_the_scenes_textures_and_weights(tmp_path):
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs the git checkout")
    src = _copy_of_the_repository(tmp_path / "src")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", ".", "--no-deps", "-w", str(tmp_path / "dist")],
        cwd=src, check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = (tmp_path / "dist").glob("diffcam-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        expected = {
            SCENES_DIR: sorted(SCENES_DIR.glob("*.toml")),
            TEXTURES_DIR: sorted(TEXTURES_DIR.glob("*.png")),
            WEIGHTS_DIR: sorted(WEIGHTS_DIR.glob("*.pt")),
            MESHES_DIR: sorted(MESHES_DIR.glob("*.obj")),
        }
        assert len(expected[SCENES_DIR]) >= 6 and len(expected[TEXTURES_DIR]) >= 9
        assert len(expected[WEIGHTS_DIR]) == 3 and len(expected[MESHES_DIR]) >= 1
        for folder, files in expected.items():
            for file in files:
                name = f"diffcam/data/{folder.name}/{file.name}"
                assert name in names, f"{name} is not in {wheel.name}"
                assert z.read(name) == file.read_bytes(), name
    # the two packages and their metadata, nothing else (no tests, examples or benchmarks)
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"diffcam", "physics"}
