"""Scene files: bundled scenes, batching, overrides and their gradients, conventions."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

import diffcam
from diffcam.errors import SceneError
from diffcam.scene import (
    SCENES_DIR,
    TEXTURES_DIR,
    WEIGHTS_DIR,
    bundled_scenes,
    override_paths,
    read_scene_file,
)
from tests.finite_differences import check_directional

BUNDLED = sorted(p.name for p in SCENES_DIR.glob("*.toml"))


def test_bundled_scenes_present():
    for name in ("pendulum_cart.toml", "pendulum.toml", "ball_throw.toml"):
        assert name in BUNDLED
    assert len(BUNDLED) >= 4  # plus at least one contact showcase


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_scene_loads_simulates_renders(name):
    scene = diffcam.load_scene(SCENES_DIR / name, batch_size=2)
    assert scene.body_names == list(scene.world.body_names)
    n = len(scene.body_names)
    state = scene.initial_state()
    assert state.position.shape == (2, n, 3)
    action = None
    if scene.actuator_names:
        action = torch.full((2, len(scene.actuator_names)), 1.0)
    for _ in range(3):
        state = scene.step(state, action)
    assert torch.isfinite(state.position).all()
    img = scene.render(state)
    w, h = scene.camera.width, scene.camera.height
    assert img.shape == (2, 3, h, w)
    assert torch.isfinite(img).all() and img.min() >= 0 and img.max() <= 1
    # not a blank frame: something besides the background is drawn (the bob of a pendulum
    # seen across a room, the model of real videos, covers a few pixels of its frame)
    out = scene.render_buffers(state)
    least = 5e-4 if name == "bob_pendulum.toml" else 0.2
    assert (out.object_id >= 0).float().mean() > least
    assert "camera" in scene.summary()


def test_pendulum_cart_matches_the_paper_setup():
    scene = diffcam.load_scene(SCENES_DIR / "pendulum_cart.toml")
    assert (scene.camera.width, scene.camera.height) == (288, 96)
    assert scene.actuator_names == ["rail"]
    for body in ("cart", "pole", "backdrop", "floor"):
        assert body in scene.body_names
    joints = {j["name"]: j for j in scene.config.joints}
    assert joints["rail"]["type"] == "slider" and joints["rail"]["motor"]["type"] == "force"
    assert joints["hinge"]["type"] == "hinge"


def _pendulum_cart_extremes_visible(scene):
    """Pole tip positions at both rail ends, upright and hanging, are inside the image."""
    pole = scene.config.bodies[scene.body_names.index("pole")]
    hinge = [j for j in scene.config.joints if j["name"] == "hinge"][0]
    anchor = torch.tensor(hinge["anchor"])
    length = 2 * (anchor[2] - torch.tensor(pole["position"][2]))
    lo, hi = [j for j in scene.config.joints if j["name"] == "rail"][0]["limits"]
    pts = []
    for x in (lo, hi):
        for dz in (length, -length):
            pts.append(anchor + torch.tensor([x, 0.0, float(dz)]))
    pix, depth = scene.camera.project_with_depth(torch.stack(pts))
    return pix, depth


def test_pendulum_cart_everything_in_view():
    scene = diffcam.load_scene(SCENES_DIR / "pendulum_cart.toml")
    pix, depth = _pendulum_cart_extremes_visible(scene)
    assert (depth > 0).all()
    assert (pix[..., 0] > 0).all() and (pix[..., 0] < scene.camera.width).all()
    assert (pix[..., 1] > 0).all() and (pix[..., 1] < scene.camera.height).all()


def test_batch_equals_single_loads():
    path = SCENES_DIR / "pendulum_cart.toml"
    masses = [0.1, 0.2, 0.4]
    forces = [[10.0], [-5.0], [25.0]]
    batched = diffcam.load_scene(
        path, batch_size=3, overrides={"bodies.pole.mass": torch.tensor(masses)}
    )
    sb = batched.initial_state()
    act = torch.tensor(forces)
    for _ in range(4):
        sb = batched.step(sb, act)
    img_b = batched.render(sb)
    for k in range(3):
        single = diffcam.load_scene(path, batch_size=1, overrides={"bodies.pole.mass": masses[k]})
        s = single.initial_state()
        for _ in range(4):
            s = single.step(s, act[k : k + 1])
        torch.testing.assert_close(s.position[0], sb.position[k], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(s.rotation[0], sb.rotation[k], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(single.render(s)[0], img_b[k], atol=1e-4, rtol=1e-4)


def test_overrides_receive_gradients_from_pixels():
    path = SCENES_DIR / "pendulum_cart.toml"
    dtype = torch.float64
    params = {
        "bodies.pole.mass": torch.tensor(0.2, dtype=dtype, requires_grad=True),
        "joints.hinge.damping": torch.tensor(0.05, dtype=dtype, requires_grad=True),
        "world.gravity": torch.tensor([0.0, 0.0, -9.81], dtype=dtype, requires_grad=True),
        "camera.fov_y_deg": torch.tensor(37.0, dtype=dtype, requires_grad=True),
        "bodies.cart.mass": torch.tensor(1.0, dtype=dtype, requires_grad=True),
    }
    scene = diffcam.load_scene(path, dtype=dtype, overrides=params)
    state = scene.initial_state()
    action = torch.tensor([[30.0]], dtype=dtype)
    for _ in range(12):
        state = scene.step(state, action)
    img = scene.render(state)
    target = torch.full_like(img, 0.5)
    loss = ((img - target) ** 2).mean()
    grads = torch.autograd.grad(loss, list(params.values()))
    for (key, _), g in zip(params.items(), grads, strict=True):
        assert g is not None, key
        assert torch.isfinite(g).all(), key
        if key == "world.gravity":
            assert g[2].abs() > 0, key  # the pole swings in the x-z plane
        else:
            assert g.abs().sum() > 0, key


def test_texture_override_gets_gradient():
    """The image's gradient to an overridden texture equals the central difference (float64)."""
    path = SCENES_DIR / "pendulum_cart.toml"
    wood = diffcam.load_scene(path, dtype=torch.float64).textures["wood"]
    weights = torch.rand(3, 96, 288, generator=torch.Generator().manual_seed(0)).double()

    def loss(texture):
        scene = diffcam.load_scene(path, dtype=torch.float64, overrides={"textures.wood": texture})
        assert scene.textures["wood"] is texture
        return (scene.render(scene.initial_state())[0] * weights).sum()

    # the image is linear in the texture: a wide step keeps the sum's round-off (80k pixels)
    # out of the difference
    check_directional(loss, [wood.clone()], eps=1e-2, rtol=1e-7, names=["textures.wood"])


def test_projected_body_centres_land_on_the_bodies():
    for name in ("tumble.toml", "ball_throw.toml", "pendulum.toml"):
        path = SCENES_DIR / name
        if not path.exists():
            continue
        scene = diffcam.load_scene(path)
        state = scene.initial_state()
        ids = scene.render_buffers(state).object_id[0]
        pix = scene.project_bodies(state)[0]
        checked = 0
        for k, b in enumerate(scene.config.bodies):
            if b.get("static"):
                continue
            x, y = pix[k].tolist()
            if not (0 <= x < scene.camera.width and 0 <= y < scene.camera.height):
                continue
            assert ids[int(y), int(x)].item() == k, (name, b["name"])
            checked += 1
        assert checked >= 1, name


def test_convention_quat_wxyz_and_state_order(scene_tools, tmp_path):
    data = scene_tools.tiny()
    s = math.sqrt(0.5)
    data["bodies"][3]["quat"] = [s, 0.0, 0.0, s]  # 90 degrees about z, [w, x, y, z]
    path = scene_tools.write_scene(data, tmp_path)
    scene = diffcam.load_scene(path)
    assert scene.body_names == ["floor", "cart", "pole", "ball"]
    r = scene.initial_state().rotation[0, 3]
    expected = torch.tensor([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    torch.testing.assert_close(r, expected, atol=1e-6, rtol=0)


def test_convention_camera_looks_at_target(scene_tools, tmp_path):
    path = scene_tools.write_scene(scene_tools.tiny(), tmp_path)
    scene = diffcam.load_scene(path)
    pix, depth = scene.camera.project_with_depth(torch.tensor([[0.0, 0.0, 1.0]]))
    torch.testing.assert_close(pix.reshape(2), torch.tensor([12.0, 6.0]), atol=1e-4, rtol=0)
    assert depth.item() == pytest.approx(3.0)


def test_focal_and_principal_point(scene_tools, tmp_path):
    data = scene_tools.tiny()
    del data["camera"]["fov_y_deg"]
    data["camera"]["focal"] = [20.0, 22.0]
    data["camera"]["principal_point"] = [11.0, 7.0]
    scene = diffcam.load_scene(scene_tools.write_scene(data, tmp_path))
    K = scene.camera.K[0]
    torch.testing.assert_close(
        K, torch.tensor([[20.0, 0.0, 11.0], [0.0, 22.0, 7.0], [0.0, 0.0, 1.0]])
    )


def test_float64_and_override_paths(scene_tools, tmp_path):
    path = scene_tools.write_scene(scene_tools.tiny(), tmp_path)
    scene = diffcam.load_scene(path, dtype=torch.float64, batch_size=2)
    st = scene.rollout(3, policy=lambda s, t: torch.ones(2, 1, dtype=torch.float64))
    assert st.position.shape == (4, 2, 4, 3) and st.position.dtype == torch.float64
    assert scene.render(scene.initial_state()).dtype == torch.float64
    paths = override_paths(read_scene_file(path))
    for p in ("world.gravity", "camera.fov_y_deg", "bodies.pole.mass", "joints.hinge.damping"):
        assert p in paths
    assert "joints.rail.motor.max" in paths


def test_per_batch_override_changes_only_its_element(scene_tools, tmp_path):
    path = scene_tools.write_scene(scene_tools.tiny(), tmp_path)
    g = torch.tensor([[0.0, 0.0, -9.81], [0.0, 0.0, -1.0]])
    scene = diffcam.load_scene(path, batch_size=2, overrides={"world.gravity": g})
    st = scene.rollout(5).position[-1]
    ball = scene.body_names.index("ball")
    assert st[0, ball, 2] < st[1, ball, 2] < 0.5


def test_scene_paths_relative_to_cwd_and_absolute(monkeypatch):
    monkeypatch.chdir(Path(SCENES_DIR).parent)
    scene = diffcam.load_scene("scenes/pendulum.toml")
    assert scene.path == "scenes/pendulum.toml"


@pytest.mark.parametrize("name", bundled_scenes())
def test_every_bundled_scene_loads_by_name_from_any_folder(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no scene files here: the name is the package's scene
    scene = diffcam.load_scene(name)
    assert scene.path == str(SCENES_DIR / f"{name}.toml")
    assert read_scene_file(name) == read_scene_file(SCENES_DIR / f"{name}.toml")
    # its textures are the bundled ones
    textures = read_scene_file(name).get("textures", {})
    for key, file in textures.items():
        bundled = diffcam.scene.load_texture(TEXTURES_DIR / file)
        assert torch.equal(scene.textures[key], bundled)


def test_bundled_scenes_are_the_package_data():
    assert bundled_scenes() == [Path(n).stem for n in BUNDLED]
    assert "pendulum_cart" in bundled_scenes()
    assert SCENES_DIR.parent == TEXTURES_DIR.parent == WEIGHTS_DIR.parent
    assert SCENES_DIR.parent == Path(diffcam.__file__).parent / "data"


def test_an_unknown_scene_name_lists_the_bundled_ones(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SceneError) as info:
        diffcam.load_scene("pendulum_crat")
    message = str(info.value)
    assert message.startswith("pendulum_crat: no such scene file, nor a bundled scene")
    assert "did you mean 'pendulum_cart'?" in message
    assert "a bundled scene: " + ", ".join(bundled_scenes()) in message
    # a path to a missing file with a bundled scene's stem (the old scenes/... commands)
    with pytest.raises(SceneError, match="loaded by its name, 'pendulum_cart'"):
        diffcam.load_scene("scenes/pendulum_cart.toml")
    with pytest.raises(SceneError, match=r"no such scene file \(accepted: a scene file"):
        diffcam.load_scene(tmp_path / "elsewhere" / "mine.toml")


def test_a_file_of_the_name_wins_over_the_bundled_scene(scene_tools, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scene_tools.write_scene(scene_tools.tiny(), tmp_path, name="pendulum")  # no suffix
    scene = diffcam.load_scene("pendulum")
    assert scene.path == "pendulum" and (scene.camera.width, scene.camera.height) == (24, 12)
    # a folder of a bundled scene's name is not a scene file: the name still loads the scene
    (tmp_path / "pendulum_cart").mkdir()
    assert diffcam.load_scene("pendulum_cart").path == str(SCENES_DIR / "pendulum_cart.toml")
    with pytest.raises(SceneError, match="not a file"):
        diffcam.load_scene(tmp_path / "pendulum_cart")


def test_textures_resolve_next_to_the_scene_file_first(scene_tools, tmp_path):
    from PIL import Image

    path = scene_tools.write_scene(scene_tools.tiny(), tmp_path)  # [textures] wood = "wood.png"
    bundled = diffcam.load_scene(path).textures["wood"]
    assert torch.equal(bundled, diffcam.scene.load_texture(TEXTURES_DIR / "wood.png"))
    Image.new("RGB", (4, 2), (255, 0, 0)).save(tmp_path / "wood.png")
    local = diffcam.load_scene(path).textures["wood"]
    assert local.shape == (3, 2, 4) and torch.equal(local[0], torch.ones(2, 4))


def test_background_texture_and_light_override(scene_tools, tmp_path):
    data = scene_tools.tiny()
    data["camera"]["background"] = "wood"
    path = scene_tools.write_scene(data, tmp_path)
    scene = diffcam.load_scene(path, overrides={"light.ambient": torch.tensor(0.3)})
    assert scene.background.shape[0] == 3 and scene.background.dim() == 3

    def loss(ambient):
        scene = diffcam.load_scene(path, dtype=torch.float64, overrides={"light.ambient": ambient})
        return scene.render(scene.initial_state()).mean()

    (grad,) = check_directional(loss, [torch.tensor(0.3, dtype=torch.float64)], names=["ambient"])
    assert grad > 0  # more ambient light, a brighter image


def test_soft_edges_carry_pose_gradients(scene_tools, tmp_path):
    path = scene_tools.write_scene(scene_tools.tiny(), tmp_path)

    def loss(position):
        scene = diffcam.load_scene(path, dtype=torch.float64,
                                   overrides={"bodies.ball.position": position})  # fmt: skip
        img = scene.render(scene.initial_state(), edge_softness=1.0)
        return (img * torch.linspace(0, 1, img.shape[-1], dtype=img.dtype)).sum()

    check_directional(loss, [torch.tensor([0.5, 0.0, 0.8], dtype=torch.float64)], rtol=1e-5,
                      names=["bodies.ball.position"])  # fmt: skip


def test_structural_keys_take_numbers_only(scene_tools, tmp_path):
    path = scene_tools.write_scene(scene_tools.tiny(), tmp_path)
    scene = diffcam.load_scene(path, overrides={"world.timestep": 0.005})
    assert scene.timestep == 0.005
    with pytest.raises(diffcam.SceneError, match="structural"):
        diffcam.load_scene(
            path, overrides={"world.timestep": torch.tensor(0.01, requires_grad=True)}
        )


def _reduced_ready(data: dict) -> dict:
    """The tiny scene without what reduced coordinates exclude: the free ball bouncing on the
    floor. (The rail keeps its limits.)"""
    data["bodies"] = [b for b in data["bodies"] if b["name"] != "ball"]
    return data


def test_reduced_coordinates_from_the_scene_file(scene_tools, tmp_path):
    data = _reduced_ready(scene_tools.tiny())
    data["world"]["coordinates"] = "maximal"  # the default, "auto", would choose reduced here
    maximal = diffcam.load_scene(scene_tools.write_scene(data, tmp_path, "maximal.toml"))
    data["world"]["coordinates"] = "reduced"
    reduced = diffcam.load_scene(scene_tools.write_scene(data, tmp_path, "reduced.toml"))
    assert maximal.world.coordinates == "maximal" and reduced.world.coordinates == "reduced"
    assert "reduced coordinates" in reduced.summary()

    def push(state, t):
        return torch.full((1, 1), 5.0 * math.sin(0.1 * t))

    # The same motion either way (the formulations differ by their integrators' O(dt^2)).
    a, b = maximal.rollout(100, policy=push), reduced.rollout(100, policy=push)
    assert (a.position - b.position).abs().max() < 1e-3
    assert (b.position[-1] - b.position[0]).abs().max() > 0.05  # it moved
    torch.testing.assert_close(
        maximal.render(maximal.initial_state()), reduced.render(reduced.initial_state())
    )


def test_render_trajectory(scene_tools, tmp_path):
    path = scene_tools.write_scene(scene_tools.tiny(), tmp_path)
    scene = diffcam.load_scene(path, batch_size=2)
    traj = scene.rollout(4)
    frames = scene.render_trajectory(traj, every=2)
    assert frames.shape == (3, 2, 3, 12, 24)
    last = type(traj)(*(x[4] for x in traj.tensors()))
    torch.testing.assert_close(frames[-1], scene.render(last))


def test_invisible_body_collides_but_is_not_drawn(scene_tools, tmp_path):
    """``visible = false``: a floor the video's background shows stops a falling ball (its
    contact acts) but no pixel of any render, soft or hard, shows it; ids keep body indices."""
    data = {
        "world": {"gravity": [0.0, 0.0, -9.81], "timestep": 0.01},
        "camera": {"resolution": [32, 24], "position": [0.0, -3.0, 0.5],
                   "look_at": [0.0, 0.0, 0.3], "fov_y_deg": 40.0, "background": [0.2, 0.3, 0.4]},
        "bodies": [
            {"name": "floor", "shape": "plane", "size": [4.0, 4.0], "static": True,
             "color": [0.9, 0.9, 0.9], "visible": False},
            {"name": "ball", "shape": "sphere", "size": 0.1, "mass": 1.0,
             "position": [0.0, 0.0, 0.5], "color": [1.0, 0.0, 0.0]},
        ],
    }  # fmt: skip
    path = scene_tools.write_scene(data, tmp_path, "invisible.toml")
    scene = diffcam.load_scene(path, batch_size=2)
    trajectory = scene.rollout(150, compile=False)
    assert float(trajectory.position[-1, 0, 1, 2]) == pytest.approx(0.1, abs=0.01)  # resting
    state = scene.initial_state()
    out = scene.render_buffers(state)
    assert set(out.object_id.unique().tolist()) == {-1, 1}
    background = torch.tensor([0.2, 0.3, 0.4]).view(3, 1)
    floor_rows = out.image[0, :, -4:].flatten(1)  # below the horizon: the floor if drawn
    assert torch.allclose(floor_rows, background.expand_as(floor_rows))
    soft = scene.render(state, edge_softness=1.0)
    assert torch.allclose(soft[0, :, -4:].flatten(1), background.expand_as(floor_rows))
    frames = scene.render_states(trajectory, frames_per_call=8)
    assert set(frames.object_id.unique().tolist()) <= {-1, 1}
    assert "not drawn" in scene.summary()


def test_body_texture_override_replaces_its_colour(scene_tools, tmp_path):
    """``bodies.<name>.texture`` takes a (3, Ht, Wt) tensor (with a gradient) in place of the
    file's colour, and a declared texture's name."""
    path = scene_tools.write_scene(scene_tools.TINY_SCENE, tmp_path, "tiny.toml")
    texture = torch.full((3, 4, 8), 0.25, dtype=torch.float64)
    scene = diffcam.load_scene(path, overrides={"bodies.ball.texture": texture})
    ball = scene.body_names.index("ball")
    assert scene.primitives[ball].color is None

    def loss(texture):
        scene = diffcam.load_scene(path, dtype=torch.float64,
                                   overrides={"bodies.ball.texture": texture})  # fmt: skip
        img = scene.render(scene.initial_state(), edge_softness=0.5)
        return (img * torch.linspace(0, 1, img.shape[-1], dtype=img.dtype)).sum()

    # linear in the texture: a wide step keeps the sum's round-off out of the difference
    check_directional(loss, [texture], eps=1e-2, rtol=1e-7, names=["bodies.ball.texture"])
    named = diffcam.load_scene(path, overrides={"bodies.ball.texture": "wood"})
    assert named.primitives[ball].texture.shape[0] == 3
