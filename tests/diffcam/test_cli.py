"""The diffcam command: render and check, clean errors without tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import imageio.v3 as iio
import pytest

from diffcam.cli import main, make_policy
from diffcam.scene import SCENES_DIR, load_scene

DATA = Path(__file__).resolve().parents[1] / "data"


def test_check_prints_summary(capsys):
    assert main(["check", str(SCENES_DIR / "pendulum_cart.toml")]) == 0
    out = capsys.readouterr().out
    for word in ("bodies", "joints", "actuators", "camera", "textures", "cart", "288x96"):
        assert word in out


def test_render_gif_frame_count(tmp_path, capsys):
    out = tmp_path / "p.gif"
    args = ["render", str(SCENES_DIR / "pendulum.toml"), "--seconds", "0.3", "--fps", "10"]
    args += ["--out", str(out), "--quiet", "--policy", "sine", "--supersample", "1"]
    assert main(args) == 0
    frames = iio.imread(out, index=None)
    scene = load_scene(SCENES_DIR / "pendulum.toml")
    assert frames.shape[:3] == (3, scene.camera.height, scene.camera.width)
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("view", ["all", "ids", "depth", "centres", "tiled"])
def test_render_views_batch(tmp_path, view):
    out = tmp_path / f"{view}.mp4"
    args = ["render", str(SCENES_DIR / "ball_throw.toml"), "--seconds", "0.1", "--fps", "20"]
    args += ["--out", str(out), "--quiet", "--batch", "2", "--view", view, "--policy", "random"]
    args += ["--supersample", "1"]
    assert main(args) == 0
    assert out.exists() and [p.name for p in tmp_path.iterdir()] == [out.name]


def test_policies_shapes():
    scene = load_scene(SCENES_DIR / "pendulum_cart.toml", batch_size=3)
    state = scene.initial_state()
    assert make_policy(scene, "zero") is None
    for kind in ("random", "sine"):
        a = make_policy(scene, kind)(state, 5)
        assert a.shape == (3, 1) and a.abs().max() <= 30.0 + 1e-4


def test_bad_scene_exit_code_and_message(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[camera]\nresolution = [8, 8]\n[[bodies]]\nname = "x"\nshap = "box"\n')
    assert main(["check", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("diffcam: error:") and str(bad) in err and "Traceback" not in err
    assert main(["render", str(tmp_path / "missing.toml"), "--quiet"]) == 2
    assert "no such scene file" in capsys.readouterr().err
    args = ["render", str(SCENES_DIR / "pendulum.toml"), "--out", str(tmp_path / "x.avi")]
    assert main(args) == 2
    assert main(["render", str(SCENES_DIR / "pendulum.toml"), "--seconds", "-1"]) == 2


def test_bundled_scene_names_from_any_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the README's main job names the scene, from anywhere
    assert main(["check", "pendulum_cart"]) == 0
    assert "288x96" in capsys.readouterr().out
    args = ["render", "pendulum", "--seconds", "0.2", "--fps", "10", "--quiet"]
    assert main(args + ["--supersample", "1"]) == 0
    assert "wrote pendulum.mp4 (2 frames" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["pendulum.mp4"]
    assert main(["render", "pendulm", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("diffcam: error: pendulm: no such scene file, nor a bundled scene")
    assert "did you mean 'pendulum'?" in err and "pendulum_cart, tumble" in err
    assert main(["check", "scenes/pendulum_cart.toml"]) == 2
    assert "loaded by its name, 'pendulum_cart'" in capsys.readouterr().err


@pytest.mark.slow
def test_console_script_no_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[world]\ngravity = 3\n")
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "diffcam.cli", "check", str(bad)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "diffcam: error:" in proc.stderr


def test_non_finite_simulation_is_a_clean_error():
    import torch

    from diffcam.cli import render_frames
    from diffcam.errors import SceneError

    scene = load_scene(SCENES_DIR / "pendulum.toml")

    def nan_policy(state, t):
        return torch.full((1, 1), float("nan"))

    with pytest.raises(SceneError, match="non-finite at step 1"):
        render_frames(scene, 0.2, 10, policy=nan_policy, supersample=1, progress=False)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--keys", "bodies.bob.restitutoin"], "names nothing this scene can fit"),
        (["--keys", "joints.pivot.damping", "--seconds", "40"], "shorten --seconds"),
        (["--keys", "joints.pivot.damping", "--start", "11.9"], "only 3 frames"),
        (["--keys", "joints.pivot.damping", "--fps", "0"], "fps must be"),
        (["--keys", "joints.pivot.damping", "--out", "x.avi"], "--out must end in .mp4"),
    ],
)
@pytest.mark.slow
def test_fit_bad_input_is_one_line_and_status_2(args, message, capsys):
    """``diffcam fit`` with bad options or a video that does not hold what is asked: one
    ``diffcam: error:`` line that names the problem, exit status 2, no traceback."""
    code = main(["fit", str(DATA / "scenes" / "pendulum.toml"),
                 str(DATA / "pendulum_realistic.mp4"), "--quiet", *args])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.startswith("diffcam: error:") and message in err and "Traceback" not in err


@pytest.mark.slow
def test_fit_missing_video_and_camera_looking_away(tmp_path, capsys):
    code = main(["fit", str(DATA / "scenes" / "pendulum.toml"), str(tmp_path / "none.mp4"),
                 "--keys", "joints.pivot.damping", "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "none.mp4" in err
    away = tmp_path / "away.toml"
    text = (DATA / "scenes" / "pendulum.toml").read_text()
    away.write_text(text.replace("look_at = [0.0, 0.0, -0.5]", "look_at = [0.0, -9.0, -0.5]"))
    code = main(["fit", str(away), str(DATA / "pendulum_realistic.mp4"),
                 "--keys", "joints.pivot.damping", "--quiet"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "no moving body (bob) is in the camera's view" in err
