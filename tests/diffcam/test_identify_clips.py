"""`diffcam.identify` (and ``diffcam fit``) on realistic clips from independent generators.

The clips in tests/data come from numpy ray casting and SciPy ODEs that share nothing with
this library (tests/data/README.md): two-coloured, clear and glossy bodies, motion blur, lens
distortion, noise, H.264 or MPEG-4 in AVI with B-frames, a hand in the first frames, a person
walking in, a slow-motion container. Each fit starts from a scene file a user would write
(tests/data/scenes), with the fitted quantities deliberately off, and must land within the
accuracy the project promises, say "good", and give a ± that covers its error.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from diffcam.identify import Settings, identify

DATA = Path(__file__).resolve().parents[1] / "data"
SCENES = DATA / "scenes"

pytestmark = pytest.mark.slow


def _truth(name: str) -> dict:
    return json.loads((DATA / f"{name}_realistic.json").read_text())


def _covers(error: float, std: float, sigmas: float = 4.0) -> bool:
    return abs(error) <= sigmas * std


def _amplitude(theta: float, rate: float, length: float) -> float:
    """A pendulum's swing amplitude (rad) from its angle and rate (point mass, no damping)."""
    return math.acos(max(-1.0, math.cos(theta) - rate**2 * length / (2 * 9.81)))


def test_pendulum_through_the_command(tmp_path):
    truth = _truth("pendulum")["physics"]
    keys = ["joints.pivot.position", "joints.pivot.velocity", "joints.pivot.damping",
            "bodies.bob.position[2]", "camera.position", "camera.look_at", "camera.up"]  # fmt: skip
    out, report = tmp_path / "side.mp4", tmp_path / "fit.json"
    done = subprocess.run(
        [sys.executable, "-m", "diffcam.cli", "fit", str(SCENES / "pendulum.toml"),
         str(DATA / "pendulum_realistic.mp4"), "--keys", *keys, "--out", str(out),
         "--json", str(report), "--quiet"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert json.loads(report.read_text())["values"] == result["values"]
    assert out.stat().st_size > 10_000
    assert result["status"] == "good", result["message"]
    values, std = result["values"], result["std"]
    length = -values["bodies.bob.position[2]"]
    assert abs(length / truth["L"] - 1) < 0.01
    fitted = _amplitude(values["joints.pivot.position"], values["joints.pivot.velocity"], length)
    true = _amplitude(truth["theta0"], truth["theta_dot0"], truth["L"])
    assert abs(fitted / true - 1) < 0.05
    assert abs(values["joints.pivot.damping"] / truth["c"] - 1) < 0.1
    assert _covers(length - truth["L"], std["bodies.bob.position[2]"])


def test_bouncing_ball_restitution_from_a_slow_motion_clip():
    truth = _truth("bounce")
    keys = ["bodies.ball.restitution", "bodies.ball.position[0]", "bodies.ball.position[2]",
            "bodies.ball.velocity[0]", "bodies.ball.velocity[2]", "camera.position",
            "camera.look_at"]  # fmt: skip
    result = identify(
        SCENES / "bounce.toml", DATA / "bounce_realistic.mp4", keys,
        start=truth["scene_start_time"], fps=truth["video"]["capture_fps"],
        settings=Settings(progress=False),
    )  # fmt: skip
    assert result.status == "good", result.message
    error = result.values["bodies.ball.restitution"] - truth["physics"]["restitution"]
    assert abs(error) / truth["physics"]["restitution"] < 0.03
    assert _covers(error, result.std["bodies.ball.restitution"])
    assert result.contacts["ball/floor"]["restitution"] == pytest.approx(
        result.values["bodies.ball.restitution"]
    )


def test_thrown_ball_speed_and_angle_past_a_person_and_a_shadow():
    truth = _truth("throw")["physics"]
    keys = ["bodies.ball.position[0]", "bodies.ball.position[2]", "bodies.ball.velocity[0]",
            "bodies.ball.velocity[2]", "camera.position", "camera.look_at"]  # fmt: skip
    result = identify(
        SCENES / "throw.toml", DATA / "throw_realistic.avi", keys, seconds=1.0,
        settings=Settings(progress=False),
    )  # fmt: skip
    assert result.status == "good", result.message
    vx, vz = result.values["bodies.ball.velocity[0]"], result.values["bodies.ball.velocity[2]"]
    speed, angle = math.hypot(vx, vz), math.degrees(math.atan2(vz, vx))
    assert abs(speed / truth["launch_speed"] - 1) < 0.02
    assert abs(angle - truth["launch_angle_deg"]) < 1.0


def test_block_on_an_incline_friction():
    """Without the systematic re-fits (the other clips run them): in contact, the block's
    rollouts step eagerly, and the three re-fits made this the suite's longest test (404 s
    under load, 165 s without them)."""
    truth = _truth("incline")["physics"]
    keys = ["bodies.block.friction", "bodies.block.position[0]", "bodies.block.position[2]",
            "bodies.block.velocity[0]", "bodies.block.velocity[2]", "camera.position",
            "camera.look_at", "camera.up"]  # fmt: skip
    result = identify(
        SCENES / "incline.toml", DATA / "incline_realistic.mp4", keys, seconds=1.5,
        settings=Settings(progress=False, systematic=False),
    )  # fmt: skip
    assert result.status == "good", result.message
    mu = result.contacts["block/incline"]["friction"]
    assert abs(mu / truth["mu"] - 1) < 0.05


def test_a_slow_motion_clip_read_at_its_file_rate_is_poor_and_says_so():
    """The bounce clip without --fps (its file says 30 fps; it was 120): the fit cannot be
    good, and the message names the rate that makes the motion physical."""
    result = identify(
        SCENES / "bounce.toml", DATA / "bounce_realistic.mp4",
        ["bodies.ball.restitution", "bodies.ball.position[2]", "bodies.ball.velocity[2]"],
        start=1.9, seconds=2.4, settings=Settings(progress=False, systematic=False, pixels="never"),
    )  # fmt: skip
    assert result.status == "poor"
    assert "--fps 120" in result.message
