"""The bundled realistic pendulum clip (tests/data) agrees with its ground-truth JSON.

Checks the file (frame count, size, fps), the physics (re-integrated here with SciPy), the camera
(projection against cv2.projectPoints) and the pixels: a bob tracked by thresholding the
difference to the median frame follows the projected true bob centre. Also checks that the
generator is deterministic for a seed. Nothing here uses diffcam's renderer.
"""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import cv2
import imageio_ffmpeg
import numpy as np
import pytest
from scipy.integrate import solve_ivp

DATA = Path(__file__).resolve().parents[1] / "data"
CLIP = DATA / "pendulum_realistic.mp4"
TRUTH = DATA / "pendulum_realistic.json"


@pytest.fixture(scope="module")
def truth() -> dict:
    return json.loads(TRUTH.read_text())


@pytest.fixture(scope="module")
def clip():
    """Decoded frames (T, H, W, 3) uint8 and ffmpeg's metadata."""
    gen = imageio_ffmpeg.read_frames(str(CLIP))
    meta = next(gen)
    w, h = meta["size"]
    frames = np.stack([np.frombuffer(f, np.uint8).reshape(h, w, 3) for f in gen])
    return frames, meta


def _project(cam: dict, points: np.ndarray) -> np.ndarray:
    """World points (N, 3) -> pixels (N, 2) with the JSON camera (half-pixel centres)."""
    rot = np.asarray(cam["world_from_camera_rotation"])
    pc = (points - np.asarray(cam["position"])) @ rot
    x, y = pc[:, 0] / pc[:, 2], pc[:, 1] / pc[:, 2]
    d = cam["distortion"]
    r2 = x * x + y * y
    rad = 1 + r2 * (d["k1"] + r2 * (d["k2"] + r2 * d["k3"]))
    xd = x * rad + 2 * d["p1"] * x * y + d["p2"] * (r2 + 2 * x * x)
    yd = y * rad + d["p1"] * (r2 + 2 * y * y) + 2 * d["p2"] * x * y
    return np.stack([cam["fx"] * xd + cam["cx"], cam["fy"] * yd + cam["cy"]], axis=1)


def _bob_centres(length: float, theta) -> np.ndarray:
    theta = np.asarray(theta)
    return length * np.stack([-np.sin(theta), np.zeros_like(theta), -np.cos(theta)], axis=1)


def test_clip_file(clip, truth):
    frames, meta = clip
    assert CLIP.stat().st_size < 1_000_000
    assert frames.shape == (360, 180, 320, 3)
    assert truth["video"]["n_frames"] == 360
    assert truth["camera"]["resolution"] == [320, 180]
    assert meta["fps"] == pytest.approx(truth["video"]["fps"])
    assert len(truth["frames"]["theta_mid"]) == 360


def test_physics_truth(truth):
    p, f = truth["physics"], truth["frames"]
    m, length, g, c = p["m"], p["L"], p["g"], p["c"]
    ax, _, az = p["semi_axes"]
    inertia = m * length**2 + m * (ax**2 + az**2) / 5
    assert p["I"] == pytest.approx(inertia, rel=1e-12)
    assert p["gamma"] == pytest.approx(c / (2 * inertia), rel=1e-12)
    assert p["small_amplitude_period"] == pytest.approx(
        2 * math.pi * math.sqrt(inertia / (m * g * length)), rel=1e-12
    )

    def rhs(_t, s):
        return [s[1], (-m * g * length * math.sin(s[0]) - c * s[1]) / inertia]

    t_mid, t_start = np.asarray(f["t_mid"]), np.asarray(f["t_start"])
    sol = solve_ivp(
        rhs,
        (0, t_mid[-1]),
        [p["theta0"], p["theta_dot0"]],
        method="DOP853",
        rtol=1e-11,
        atol=1e-12,
        dense_output=True,
    )
    np.testing.assert_allclose(sol.sol(t_mid)[0], f["theta_mid"], atol=1e-8)
    np.testing.assert_allclose(sol.sol(t_mid)[1], f["theta_dot_mid"], atol=1e-8)
    np.testing.assert_allclose(sol.sol(t_start)[0], f["theta_start"], atol=1e-8)
    np.testing.assert_allclose(t_mid - t_start, truth["video"]["exposure_time"] / 2, atol=1e-12)

    # the first period from downward zero crossings, to the sampling resolution
    t = np.arange(0, 6, 1e-4)
    th = sol.sol(t)[0]
    k = np.nonzero((th[:-1] > 0) & (th[1:] <= 0))[0]
    assert t[k[1]] - t[k[0]] == pytest.approx(p["first_period"], abs=2e-4)
    # amplitude decays by roughly 30 % over the clip
    first, last = np.abs(f["theta_mid"][:60]).max(), np.abs(f["theta_mid"][-60:]).max()
    assert 0.6 < last / first < 0.85


def test_camera_matches_opencv_and_frames_the_swing(truth):
    cam, f = truth["camera"], truth["frames"]
    w, h = cam["resolution"]
    rot = np.asarray(cam["world_from_camera_rotation"])
    np.testing.assert_allclose(rot.T @ rot, np.eye(3), atol=1e-12)
    assert np.linalg.det(rot) == pytest.approx(1.0)
    centres = _bob_centres(truth["physics"]["L"], f["theta_mid"])
    px = _project(cam, centres)
    np.testing.assert_allclose(px, f["bob_centre_px_mid"], atol=1e-9)

    # OpenCV's integer-pixel-centre convention is ours minus 0.5
    k_cv = np.array([[cam["fx"], 0, cam["cx"] - 0.5], [0, cam["fy"], cam["cy"] - 0.5], [0, 0, 1]])
    rvec, _ = cv2.Rodrigues(rot.T)
    tvec = -rot.T @ np.asarray(cam["position"])
    d = cam["distortion"]
    dist = np.array([d["k1"], d["k2"], d["p1"], d["p2"], d["k3"]])
    px_cv, _ = cv2.projectPoints(centres, rvec, tvec, k_cv, dist)
    np.testing.assert_allclose(px_cv.reshape(-1, 2) + 0.5, px, atol=1e-6)

    # pivot in the upper part, the whole swing inside the frame with margin
    assert truth["pivot_px"][1] < 0.3 * h
    assert px[:, 0].min() > 0.2 * w and px[:, 0].max() < 0.8 * w
    assert px[:, 1].max() < 0.8 * h


def test_bob_blob_follows_the_truth(clip, truth):
    frames = clip[0]
    background = np.round(np.median(frames[::3], axis=0)).astype(np.int16)
    h, w = background.shape[:2]
    jj, ii = np.meshgrid(np.arange(w) + 0.5, np.arange(h) + 0.5)
    centroids = []
    for frame in frames:
        # the bob; not the faint shadow, the string, noise or compression artefacts
        mask = np.abs(frame - background).max(axis=-1) > 40
        assert 20 < mask.sum() < 150
        centroids.append([jj[mask].mean(), ii[mask].mean()])
    centroids = np.asarray(centroids)

    err_mid = np.linalg.norm(centroids - truth["frames"]["bob_centre_px_mid"], axis=1)
    assert err_mid.max() < 1.5
    assert err_mid.mean() < 0.4
    # the blob is where the bob is at mid-exposure, not at the frame's start time
    start = _project(
        truth["camera"], _bob_centres(truth["physics"]["L"], truth["frames"]["theta_start"])
    )
    err_start = np.linalg.norm(centroids - start, axis=1)
    assert err_start.mean() > 1.5 * err_mid.mean()


@pytest.mark.slow
def test_generator_is_deterministic(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "make_realistic_pendulum", DATA / "make_realistic_pendulum.py"
    )
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    kw = {"width": 64, "height": 36, "fps": 30, "seconds": 1.0}
    t1 = gen.make_clip(tmp_path / "a.mp4", seed=3, **kw)
    t2 = gen.make_clip(tmp_path / "b.mp4", seed=3, **kw)
    t3 = gen.make_clip(tmp_path / "c.mp4", seed=4, **kw)
    a, b, c = ((tmp_path / n).read_bytes() for n in ("a.mp4", "b.mp4", "c.mp4"))
    assert a == b
    assert t1 == t2
    assert a != c  # the seed changes textures and noise ...
    assert t3["frames"] == t1["frames"]  # ... not the motion
