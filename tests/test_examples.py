"""Each example's quick mode, run as a user runs it: ``python examples/X.py --quick ...`` in a
subprocess from the repository root, one torch thread, output into the test's folder. Each
checks the exit status and what the run printed (its JSON line) or wrote (images, videos,
weights, checkpoints). Minutes in all on one core (tens of seconds each): marked ``slow``.

examples/real_pendulum.py runs on the bundled realistic clip (its whole path: 20 s or so).
examples/gym_swingup.py's SAC path
needs Stable-Baselines3, which the ``dev`` extra does not install: that test skips without it;
its ``--algo bptt`` path needs only gymnasium (in ``dev``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

import diffcam

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"

pytestmark = pytest.mark.slow


def run_example(name: str, *args: str, timeout: float = 900) -> tuple[dict, str]:
    """(the last JSON line of stdout, stderr) of ``python examples/<name>.py args`` run from
    the repository root with one thread; fails with the end of stderr on a non-zero exit."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    process = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py"), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert process.returncode == 0, f"{name} exited {process.returncode}:\n{process.stderr[-4000:]}"
    lines = [line for line in process.stdout.splitlines() if line.startswith("{")]
    assert lines, f"{name} printed no JSON line; stdout:\n{process.stdout[-2000:]}"
    return json.loads(lines[-1]), process.stderr


def video_frames(path: Path) -> int:
    assert path.is_file(), path
    return int(diffcam.read_video(path).frames.shape[0])


def test_real_pendulum_on_the_bundled_clip(tmp_path):
    side = tmp_path / "side.mp4"
    report, _ = run_example(
        "real_pendulum", "tests/data/pendulum_realistic.mp4", "--truth",
        "tests/data/pendulum_realistic.json", "--out", str(side),
    )  # fmt: skip
    assert report["status"] == "good", report["message"]
    assert abs(report["length_error"]) < 0.01 and abs(report["amplitude_error"]) < 0.05
    assert abs(report["length_sigmas"]) < 4
    assert video_frames(side) == 360


def test_texture_identification_quick(tmp_path):
    png = tmp_path / "texture.png"
    report, _ = run_example("texture_identification", "--quick", "--out", str(png))
    assert report["frames"] == 21 and report["iterations"] == 40
    assert report["loss_last"] < 0.1 * report["loss_first"]
    # the seen texels come far closer to the truth than the grey start
    assert report["psnr_seen_db"] > report["psnr_grey_seen_db"] + 10
    assert report["unseen_kept_grey"]
    with Image.open(png) as image:  # true | fitted | seen, 64 x 64 texels each, 2-texel gaps, 4x
        assert image.size == ((3 * 64 + 2 * 2) * 4, 64 * 4)


def test_camera_identification_quick():
    report, _ = run_example("camera_identification", "--quick")
    assert report["frames"] == 6
    assert report["position_error_m"] < 0.1 * report["initial_position_error_m"]
    assert report["rotation_error_deg"] < 0.1 * report["initial_rotation_error_deg"]
    assert report["focal_error_rel"] < 0.1 * report["initial_focal_error_rel"]


def test_system_identification_quick(tmp_path):
    report, _ = run_example("system_identification", "--quick", "--out", str(tmp_path))
    assert report["quick"] and report["seconds_of_video"] == 0.5
    assert report["iterations_per_stage"] == [4, 3, 3]
    # the Levenberg-Marquardt fits (stages 2 and 3) lower their loss
    for first, best in report["loss_first_best_per_stage"][1:]:
        assert best < first
    assert report["relative_error"]["pole_length"] < report["start_relative_error"]
    assert video_frames(Path(report["video"])) == report["video_frames"] == 26
    assert Path(report["convergence_png"]).is_file()


def test_ball_throw_quick(tmp_path):
    video = tmp_path / "ball_throw.mp4"
    report, _ = run_example("ball_throw", "--quick", "--video", str(video))
    assert report["quick"] and report["iterations"] == 1 and not report["compiled"]
    assert report["final_loss"] < report["initial_loss"]
    assert video_frames(video) == 500 // 4 + 1  # every 4th of the 500 steps


def test_gym_swingup_bptt_quick(tmp_path):
    weights = tmp_path / "bptt.pt"
    summary, stderr = run_example("gym_swingup", "--algo", "bptt", "--quick", "--out", str(weights))
    assert summary["algo"] == "bptt" and summary["envs"] == 16
    assert summary["training_episodes"] == 32  # 2 iterations of 16 worlds
    assert summary["timesteps"] == 32 * 150  # 3 s episodes, 150 env steps each
    assert 0.0 <= summary["success_rate"] <= 1.0
    logged = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    norms = [entry["grad_norm"] for entry in logged if "iteration" in entry]
    assert len(norms) == 2 and all(n > 0 for n in norms)
    state = torch.load(weights, weights_only=True)
    assert state and all(torch.isfinite(v).all() for v in state.values())


def test_gym_swingup_sac_quick(tmp_path):
    pytest.importorskip("stable_baselines3")  # not in the dev extra
    summary, _ = run_example("gym_swingup", "--quick", "--out", str(tmp_path / "sac"))
    assert summary["algo"] == "sac" and summary["timesteps"] >= 5000
    assert 0.0 <= summary["success_rate"] <= 1.0
    assert (tmp_path / "sac.zip").is_file()


@pytest.mark.parametrize("kind", ["pixels", "state"])
def test_pendulum_swingup_quick_training(tmp_path, kind):
    out = tmp_path / "run"
    report, _ = run_example("pendulum_swingup", f"--{kind}", "--quick", "--out", str(out))
    assert report["out"] == str(out)
    assert report["iterations"] == 2 and report["training_episodes"] == 4
    rows = (out / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(row)["iteration"] for row in rows] == [1, 2]
    for name in ("checkpoint.pt", "learning_curve.png"):
        assert (out / name).is_file(), name
    from tasks import swingup

    _, config, info = swingup.load_policy(Path(report["policy"]), 30.0)
    assert config.observation == kind and info["training_episodes"] == 4
    assert video_frames(Path(report["video"])) > 200  # 10 s from the hanging start at 25 fps


@pytest.mark.parametrize("kind, episodes", [("pixels", 4000), ("state", 4640)])
def test_pendulum_swingup_quick_evaluation(tmp_path, kind, episodes):
    report, _ = run_example(
        "pendulum_swingup", f"--{kind}", "--evaluate", "--quick", "--out", str(tmp_path)
    )
    assert report["starts"] == 3 and report["seconds"] == 5.0  # 2 random + the hanging one
    assert 0.0 <= report["success_rate"] <= 1.0
    assert report["training_episodes"] == episodes  # the shipped weights
    assert video_frames(tmp_path / f"evaluation_{kind}.mp4") > 100


def test_pendulum_swingup_one_command_training_then_its_evaluation(tmp_path):
    # --train (the taught recipe) trains the state teacher (quick: one iteration of 2
    # episodes per phase), then the pixel student (2 rounds) into --out; run again, it finds
    # both done and only writes the results again.
    out = tmp_path / "run"
    report, stderr = run_example("pendulum_swingup", "--train", "--quick", "--out", str(out))
    from tasks import swingup

    phases = swingup.TEACHER_RECIPE
    assert report["recipe"] == "taught" and not report["randomize"]
    assert report["teacher_episodes"] == 2 * len(phases)
    assert [r["round"] for r in report["rounds"]] == [1, 2]
    assert report["training_episodes"] == 2 * len(phases) + 2 * 4  # 2 rounds of 4 rollouts
    assert "teacher: phase 1/" in stderr and "student: round 2/2 fit" in stderr
    rows = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
    assert [r["stage"] for r in rows] == ["teacher"] * len(phases) + ["student"] * 2
    _, config, info = swingup.load_policy(out / "controller.pt", 30.0)
    assert config == swingup.PIXEL_BASE and info["recipe"] == "taught"
    _, teacher_config, _ = swingup.load_policy(out / "teacher.pt", 30.0)
    assert teacher_config.observation == "state"
    assert teacher_config.control_every == config.control_every
    assert video_frames(out / "swingup.mp4") > 200  # 10 s from the hanging start at 25 fps
    again, _ = run_example("pendulum_swingup", "--train", "--quick", "--out", str(out))
    assert again["rounds"] == report["rounds"]  # nothing re-run (the times are the saved ones)

    evaluation, _ = run_example(
        "pendulum_swingup", "--evaluate", "--quick", "--weights", str(out / "controller.pt"),
        "--out", str(tmp_path),
    )  # fmt: skip
    assert evaluation["starts"] == 3 and evaluation["training_episodes"] == 2 * len(phases) + 8


def test_pendulum_swingup_one_command_bptt_recipe_then_its_evaluation(tmp_path):
    # --train --recipe bptt runs every phase of PIXEL_RECIPE (quick: one iteration of 2
    # episodes each) into --out; run again, it finds every phase done and only writes the
    # results again.
    out = tmp_path / "run"
    report, stderr = run_example(
        "pendulum_swingup", "--train", "--recipe", "bptt", "--quick", "--out", str(out)
    )
    from tasks import swingup

    names = [p.name for p in swingup.PIXEL_RECIPE]
    assert report["phases"] == names
    assert report["iterations"] == len(names) and report["training_episodes"] == 2 * len(names)
    assert f"phase 1/{len(names)}" in stderr and f"phase {len(names)}/{len(names)}" in stderr
    assert report["balance_checks"] == []  # quick: none (the recipe's tests check them)
    rows = [json.loads(line) for line in (out / "curve.jsonl").read_text().splitlines()]
    assert [r["phase"] for r in rows] == names
    assert [r["episodes"] for r in rows] == [2 * (k + 1) for k in range(len(names))]
    for k, name in enumerate(names):
        assert (out / "phases" / f"{k + 1}-{name}" / "checkpoint.pt").is_file()
    _, config, info = swingup.load_policy(out / "controller.pt", 30.0)
    assert config.render_downscale == swingup.PIXEL_BASE.render_downscale
    assert config.gradient_decay == swingup.PIXEL_RECIPE[-1].gradient_decay
    assert info["training_episodes"] == 2 * len(names) and len(info["recipe"]) == len(names)
    assert video_frames(out / "swingup.mp4") > 200  # 10 s from the hanging start at 25 fps
    again, _ = run_example(
        "pendulum_swingup", "--train", "--recipe", "bptt", "--quick", "--out", str(out)
    )
    assert again["training_episodes"] == report["training_episodes"]
    assert again["training_wall_seconds"] == report["training_wall_seconds"]  # nothing re-run

    evaluation, _ = run_example(
        "pendulum_swingup", "--evaluate", "--quick", "--weights", str(out / "controller.pt"),
        "--out", str(tmp_path),
    )  # fmt: skip
    assert evaluation["starts"] == 3 and evaluation["training_episodes"] == 2 * len(names)
    assert evaluation["weights"] == str(out / "controller.pt")
