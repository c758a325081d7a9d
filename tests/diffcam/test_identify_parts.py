"""The pieces of `diffcam.identify`: blobs, shadows, keys, textures, the centre stage, errors.

Each against an independent reference where there is one (SciPy's connected components, a
texture rendered by the renderer and recovered by least squares, a trajectory's own
projection), and the failures a user meets, each a clear `IdentifyError`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import ndimage

import diffcam
import physics
from diffcam import imaging
from diffcam.identify import IdentifyError, observe
from diffcam.identify.blobs import component_labels, find_blobs
from diffcam.identify.keys import make_keyset
from diffcam.identify.observation import moving_mask

EIGHT = np.ones((3, 3), dtype=int)


# ----------------------------------------------------------------------------- blobs
def test_components_match_scipy_on_random_masks():
    generator = torch.Generator().manual_seed(0)
    for density in (0.1, 0.3, 0.5):
        mask = torch.rand(4, 23, 37, generator=generator) < density
        labels = component_labels(mask)
        for t in range(mask.shape[0]):
            reference, count = ndimage.label(mask[t].numpy(), structure=EIGHT)
            ours = labels[t].numpy()
            assert (ours >= 0).sum() == (reference > 0).sum()
            assert len(np.unique(ours[ours >= 0])) == count
            # the same partition: each of our labels is one of SciPy's, and vice versa
            for label in np.unique(ours[ours >= 0]):
                assert len(np.unique(reference[ours == label])) == 1


def test_blobs_area_centroid_and_pixels():
    mask = torch.zeros(2, 20, 30, dtype=torch.bool)
    mask[0, 2:5, 3:6] = True  # 9 px, centre (4.5, 3.5) in continuous coordinates
    mask[0, 10:18, 10:12] = True  # 16 px, centre (11, 14)
    mask[0, 0, 29] = True  # one pixel: below min_area
    blobs = find_blobs(mask, min_area=2)
    assert blobs.count.tolist() == [2, 0]
    assert blobs.area[0, :2].tolist() == [16.0, 9.0]  # largest first
    assert blobs.centre[0, 0].tolist() == [11.0, 14.0]
    assert blobs.centre[0, 1].tolist() == [4.5, 3.5]
    chosen = torch.tensor([[1], [-1]])
    pixels = blobs.pixels_of(chosen)
    assert pixels.shape == (2, 1, 20, 30)
    expected = torch.zeros(20, 30, dtype=torch.bool)
    expected[2:5, 3:6] = True  # blob 1 (the one-pixel speck is no blob)
    assert torch.equal(pixels[0, 0], expected)
    assert not bool(pixels[1].any())


# ----------------------------------------------------------------------------- shadows
def _wall(h=24, w=32):
    plate = torch.empty(3, h, w)
    plate[0], plate[1], plate[2] = 0.85, 0.78, 0.66  # a beige wall
    return plate


def test_shadow_mask_is_the_plate_dimmed_not_a_coloured_body():
    plate = _wall()
    frame = plate.clone()
    frame[:, 2:10, 2:12] *= 0.6  # a shadow: the same colour, darker
    frame[:, 14:20, 20:28] = torch.tensor([0.8, 0.2, 0.1])[:, None, None]  # a red body
    frame[:, 2:6, 20:24] = 0.05  # a black body: darker than a shadow gets
    shadow = imaging.shadow_mask(frame[None], plate)[0, 0]
    assert bool(shadow[2:10, 2:12].all())
    assert not bool(shadow[14:20, 20:28].any())
    assert not bool(shadow[2:6, 20:24].any())
    assert not bool(shadow[12:14].any())  # the plain wall


def test_moving_mask_drops_shadow_regions_and_keeps_a_grey_body_with_marks():
    plate = _wall()
    frames = plate[None].repeat(9, 1, 1, 1)
    frames[:, :, 2:8, 2:12] *= 0.6  # a shadow region
    grey = torch.tensor([0.6, 0.58, 0.55])[:, None, None]  # a grey rod, shadow-like colour
    frames[:, :, 15:18, 4:28] = grey
    frames[:, :, 15:18, 10:12] = torch.tensor([0.8, 0.1, 0.1])[:, None, None]  # red marks
    frames[:, :, 15:18, 20:22] = torch.tensor([0.8, 0.1, 0.1])[:, None, None]
    frames[:4] = plate  # the median plate is the wall
    mask = moving_mask(frames, plate)[5, 0]
    assert not bool(mask[2:8, 2:12].any())
    assert float(mask[15:18, 4:28].float().mean()) > 0.8


# ----------------------------------------------------------------------------- keys
def test_keys_parameters_and_their_overrides():
    scene = diffcam.load_scene("bob_pendulum")
    names = ["joints.pivot.damping", "bodies.bob.position[2]", "camera.position",
             "camera.look_at", "camera.up", "bodies.bob.restitution"]  # fmt: skip
    keys = make_keyset(scene, names)
    specs = keys.specs
    assert specs["joints.pivot.damping"]["positive"] is True
    assert specs["bodies.bob.restitution"]["bounds"] == (0.0, 1.0)
    assert {"camera.look_at:pan", "camera.look_at:tilt", "camera.up:roll", "size:bob"} <= set(specs)
    values = keys.initial()
    over = keys.overrides(values)
    # at the start, every override is the file's value
    assert torch.allclose(over["bodies.bob.position"], torch.tensor([0.0, 0.0, -0.85]).double())
    assert torch.allclose(over["camera.look_at"], torch.tensor([0.0, 0.0, -0.5]).double())
    assert torch.allclose(over["camera.up"], torch.tensor([0.0, 0.0, 1.0]).double())
    assert float(over["bodies.bob.size"]) == pytest.approx(0.035)
    # a component key changes its component only; a pan turns the line of sight about z
    moved = dict(values)
    moved["bodies.bob.position[2]"] = torch.tensor(-0.9, dtype=torch.float64)
    moved["camera.look_at:pan"] = torch.tensor(0.1, dtype=torch.float64)
    over = keys.overrides(moved)
    assert over["bodies.bob.position"].tolist() == pytest.approx([0.0, 0.0, -0.9])
    sight = over["camera.look_at"] - over["camera.position"]
    assert math.atan2(float(sight[0]), float(sight[1])) == pytest.approx(0.1)
    assert float(sight.norm()) == pytest.approx(2.5)
    user = keys.values(moved)
    assert float(user["bodies.bob.position[2]"]) == pytest.approx(-0.9)
    assert user["camera.look_at"].shape == (3,)


def test_key_std_propagates_a_covariance_linearly():
    scene = diffcam.load_scene("bob_pendulum")
    keys = make_keyset(scene, ["camera.look_at", "joints.pivot.damping"], fit_sizes=False)
    values = keys.initial()
    scalars = [("camera.look_at:pan", 0), ("camera.look_at:tilt", 0), ("joints.pivot.damping", 0)]
    cov = torch.diag(torch.tensor([1e-4, 4e-4, 1e-8], dtype=torch.float64))
    std = keys.std(values, cov, scalars)
    # the look_at point 2.5 m away moves sideways by 2.5 * pan: x by 2.5 * 0.01 m
    assert float(std["camera.look_at"][0]) == pytest.approx(2.5 * 0.01, rel=1e-6)
    assert float(std["camera.look_at"][2]) == pytest.approx(2.5 * 0.02, rel=1e-6)
    assert float(std["joints.pivot.damping"]) == pytest.approx(1e-4)
    blind = cov.clone()
    blind[2, 2] = math.inf
    assert math.isinf(float(keys.std(values, blind, scalars)["joints.pivot.damping"]))


@pytest.mark.parametrize(
    "name, message",
    [
        ("bodies.bob.restitutoin", "names nothing"),
        ("bodies.bob.position[3]", "component"),
        ("bodies.bob.mass[0]", "is a number"),
    ],
)
def test_bad_keys_are_clear_errors(name, message):
    scene = diffcam.load_scene("bob_pendulum")
    with pytest.raises(IdentifyError, match=message):
        make_keyset(scene, [name])
    with pytest.raises(IdentifyError, match="twice"):
        make_keyset(scene, ["joints.pivot.damping", "joints.pivot.damping"])
    with pytest.raises(IdentifyError, match="at least one key"):
        make_keyset(scene, [])


# ----------------------------------------------------------------------------- observe
def _video(frames: torch.Tensor, fps: float = 30.0) -> diffcam.Video:
    return diffcam.Video.from_frames(frames, fps)


def test_observe_rejects_short_static_and_out_of_range_videos():
    still = torch.full((20, 3, 18, 32), 0.5)
    with pytest.raises(IdentifyError, match="nothing moves"):
        observe(_video(still))
    moving = still.clone()
    for t in range(20):
        moving[t, :, 6:10, t : t + 4] = 1.0
    assert len(observe(_video(moving))) == 20
    with pytest.raises(IdentifyError, match="only 3 frames"):
        observe(_video(moving), start=0.55)
    with pytest.raises(IdentifyError, match="shorten --seconds"):
        observe(_video(moving), seconds=3.0)
    with pytest.raises(IdentifyError, match="fps must be"):
        observe(_video(moving), fps=-1.0)
    # a true frame rate re-times the frames: 4x slow motion
    slow = observe(_video(moving), fps=120.0)
    assert float(slow.times[1]) == pytest.approx(1 / 120)


# ----------------------------------------------------------------------------- whole runs
BALL_SCENE = """
[world]
gravity = [0.0, 0.0, -9.81]
timestep = 0.01

[camera]
resolution = [96, 54]
position = [0.0, -3.0, 1.0]
look_at = [0.0, 0.0, 1.0]
fov_y_deg = 40.0
background = [0.8, 0.75, 0.7]

[[bodies]]
name = "floor"
shape = "plane"
size = [4.0, 4.0]
static = true
restitution = 0.0
visible = false

[[bodies]]
name = "ball"
shape = "sphere"
size = 0.15
mass = 0.1
position = [-0.6, 0.0, 0.6]
velocity = [VX, 0.0, VZ]
texture = "look"
restitution = E

[textures]
look = "checker.png"
"""


def _ball_scene(tmp_path, vx: float, vz: float, restitution: float, name: str):
    path = tmp_path / f"{name}.toml"
    text = (
        BALL_SCENE.replace("VX", repr(vx)).replace("VZ", repr(vz)).replace("E", repr(restitution))
    )
    path.write_text(text)
    return path


def _ball_video(tmp_path) -> diffcam.Video:
    """1.2 s of a textured ball thrown and bouncing, drawn over a wall with some clutter and
    sensor noise (the scene's renderer: a consistency check of the machinery, not of the
    method, which tests/diffcam/test_identify_clips.py checks on independent footage)."""
    scene = diffcam.load_scene(_ball_scene(tmp_path, 1.1, 2.0, 0.6, "truth"))
    trajectory = scene.rollout(120, compile=False)
    generator = torch.Generator().manual_seed(0)
    wall = 0.7 + 0.1 * torch.rand(3, 54, 96, generator=generator)
    wall[:, 5:15, 10:30] = torch.tensor([0.2, 0.4, 0.7])[:, None, None]  # a picture
    frames = []
    for t in range(0, 121, 2):  # 50 fps
        state = physics.State(*(x[t] for x in trajectory.tensors()))
        frame = scene.render(state, background=wall[None])[0]
        frames.append(frame + 0.01 * torch.randn(frame.shape, generator=generator))
    return diffcam.Video.from_frames(torch.stack(frames).clamp(0, 1), 50.0)


@pytest.mark.slow
def test_identify_recovers_a_bounce_from_its_own_render(tmp_path):
    from diffcam.identify import Settings, identify

    video = _ball_video(tmp_path)
    rough = _ball_scene(tmp_path, 0.9, 2.3, 0.4, "rough")
    keys = ["bodies.ball.velocity[0]", "bodies.ball.velocity[2]", "bodies.ball.restitution"]
    result = identify(rough, video, keys, settings=Settings(width=96, progress=False))
    assert result.status == "good", result.message
    assert result.values["bodies.ball.velocity[0]"] == pytest.approx(1.1, abs=0.03)
    assert result.values["bodies.ball.velocity[2]"] == pytest.approx(2.0, abs=0.05)
    assert result.values["bodies.ball.restitution"] == pytest.approx(0.6, abs=0.03)
    assert all(math.isfinite(s) and s > 0 for s in result.std.values())
    kept = [s for s in result.stages if s["kept"]]
    assert len(kept) == 1 and kept[0]["explained"] >= max(s["explained"] for s in result.stages)
    assert result.contacts["ball/floor"]["restitution"] == pytest.approx(
        result.values["bodies.ball.restitution"]
    )


def test_identify_says_when_no_body_is_in_view(tmp_path):
    from diffcam.identify import Settings, identify

    video = _ball_video(tmp_path)
    away = _ball_scene(tmp_path, 1.1, 2.0, 0.6, "away")
    away.write_text(
        away.read_text().replace("look_at = [0.0, 0.0, 1.0]", "look_at = [0.0, -6.0, 1.0]")
    )
    with pytest.raises(IdentifyError, match="no moving body .*ball.* is in the camera's view"):
        identify(away, video, ["bodies.ball.restitution"], settings=Settings(progress=False))


@pytest.mark.slow
def test_identify_names_the_keys_the_video_cannot_determine(tmp_path):
    from diffcam.identify import Settings, identify

    video = _ball_video(tmp_path)
    rough = _ball_scene(tmp_path, 1.0, 2.1, 0.5, "mass")
    keys = ["bodies.ball.velocity[0]", "bodies.ball.mass"]  # a falling mass is any mass
    result = identify(rough, video, keys, settings=Settings(progress=False, systematic=False))
    assert result.unidentifiable == ["bodies.ball.mass"]
    assert math.isinf(result.std["bodies.ball.mass"])
    assert result.values["bodies.ball.mass"] == pytest.approx(0.1)  # left at its start
    assert "does not determine bodies.ball.mass" in result.message
    assert math.isfinite(result.std["bodies.ball.velocity[0]"])


def test_a_body_orientation_key_is_a_turn_from_the_file_orientation():
    from physics.math3d import axis_angle_to_matrix, quat_to_matrix

    scene = diffcam.load_scene("mesh_tumble")
    keys = make_keyset(scene, ["bodies.torus.quat", "bodies.torus.angular_velocity"])
    specs = keys.specs
    assert specs["bodies.torus.quat"]["init"] == [0.0, 0.0, 0.0]
    assert "size:torus" not in specs  # a mesh's shape is the file's: no size factor
    file_quat = torch.tensor([0.9238795, 0.3826834, 0.0, 0.0], dtype=torch.float64)
    values = keys.initial()
    assert torch.allclose(keys.overrides(values)["bodies.torus.quat"], file_quat, atol=1e-7)
    # a rotation vector turns the file's orientation in the world frame
    turn = torch.tensor([0.0, 0.0, 0.3], dtype=torch.float64, requires_grad=True)
    quat = keys.values({**values, "bodies.torus.quat": turn})["bodies.torus.quat"]
    expected = axis_angle_to_matrix(turn.detach()) @ quat_to_matrix(file_quat)
    assert torch.allclose(quat_to_matrix(quat.detach()), expected, atol=1e-7)
    # smooth at the file's orientation: finite derivatives, half the turn per component
    zero = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    quat = keys.overrides({**values, "bodies.torus.quat": zero})["bodies.torus.quat"]
    (grad,) = torch.autograd.grad(quat[1], zero)
    assert torch.isfinite(grad).all() and float(grad[0]) == pytest.approx(0.5 * 0.9238795)
    with pytest.raises(IdentifyError, match="fitted whole"):
        make_keyset(scene, ["bodies.torus.quat[1]"])


def test_a_mesh_body_bounds_and_side_area_come_from_its_mesh():
    from diffcam.formation import bounding_radius
    from diffcam.identify.centres import _side_area

    scene = diffcam.load_scene("mesh_tumble")
    torus = scene.body_names.index("torus")
    radius = bounding_radius(scene.world, scene.primitives)[0, torus]
    assert float(radius) == pytest.approx(0.68, rel=1e-3)  # its rim, not its stand-in box's
    assert float(_side_area(scene.world)[0, torus]) > 0.1  # not a plane's drawn extent


def test_silhouettes_and_rotation_logs():
    from diffcam.identify.orientation import rotation_exp, rotation_log, rotation_set, silhouettes

    # a square of two triangles (x, y in [1, 3]) covers the 4 pixel centres inside it
    square = torch.tensor([[[1.0, 1.0], [3.0, 1.0], [3.0, 3.0], [1.0, 3.0]]])
    faces = torch.tensor([[0, 1, 2], [0, 2, 3]])
    yy, xx = torch.meshgrid(torch.arange(5.0), torch.arange(5.0), indexing="ij")
    pixels = torch.stack([xx.flatten() + 0.5, yy.flatten() + 0.5], -1)
    cover = silhouettes(square, faces, pixels)[0].view(5, 5)
    assert cover.sum() == 4 and bool(cover[1:3, 1:3].all())
    # the log inverts the exponential, up to a turn of pi (either sign there)
    rotations = rotation_set(64)
    assert torch.allclose(rotations @ rotations.transpose(-1, -2), torch.eye(3).double(), atol=1e-9)
    assert torch.allclose(rotation_exp(rotation_log(rotations)), rotations, atol=1e-6)
    near_pi = (
        torch.tensor([[0.0, math.pi - 1e-8, 0.0], [0.6, 0.0, 0.8]]).double()
        * torch.tensor([[1.0], [math.pi]]).double()
    )
    assert torch.allclose(
        rotation_exp(rotation_log(rotation_exp(near_pi))), rotation_exp(near_pi), atol=1e-6
    )


def test_an_orientation_start_becomes_the_file_frame_keys():
    """A start in the physics state's frame (the mesh's principal axes) sets the file-frame
    orientation key, the spin, and a position that keeps the centre of mass in place."""
    import types

    from diffcam.identify.orientation import OrientationStart
    from diffcam.identify.run import _with_orientation
    from physics.math3d import axis_angle_to_matrix, quat_to_matrix

    # the L block's principal axes are not its mesh file's axes
    scene = diffcam.load_scene(Path(__file__).parents[1] / "data" / "scenes" / "tumble.toml")
    names = ["bodies.block.position", "bodies.block.quat", "bodies.block.angular_velocity"]
    keys = make_keyset(scene, names)
    spec = next(b for b in scene.config.bodies if b["name"] == "block")
    axes = torch.as_tensor(spec["mesh_body"].axes, dtype=torch.float64)
    state = axis_angle_to_matrix(torch.tensor([0.3, -1.2, 2.0], dtype=torch.float64))
    spin = torch.tensor([1.0, 2.0, -3.0], dtype=torch.float64)
    context = types.SimpleNamespace(keyset=keys)
    values = _with_orientation(context, keys.initial(), keys.keys[1], spec,
                               OrientationStart(state, spin, 1.0))  # fmt: skip
    user = keys.values(values)
    assert not torch.allclose(axes, torch.eye(3, dtype=torch.float64), atol=0.1)
    assert torch.allclose(quat_to_matrix(user["bodies.block.quat"]) @ axes, state, atol=1e-6)
    assert torch.allclose(user["bodies.block.angular_velocity"], spin)
    # the block's centre of mass is its file's origin: the position stays
    start = torch.tensor([-0.72, 0.03, 0.63], dtype=torch.float64)
    assert torch.allclose(user["bodies.block.position"], start, atol=1e-6)
