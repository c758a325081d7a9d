"""MJCF mesh geoms (`diffcam.mjcf.meshes`): ``<asset><mesh file=...>`` + ``<geom type="mesh">``.

tests/data/mjcf/meshes.xml (a skewed frustum, meshes/frustum.obj, scaled, on a free body whose
geom has its own pos and orientation) is compared with MuJoCo itself: mass, centre of mass, the
world inertia tensor, and a 1 s drop onto the floor. Measured (MuJoCo 4.0.0, RK4, dt 2 ms):
mass 3e-8 relative (MuJoCo stores vertices in float32), centre of mass 1e-9 m, inertia tensor
2.5e-9 kg m^2 of 0.03; the free fall agrees to 1e-9 m; at rest after the landing the centre of
mass is 0.11 mm higher than MuJoCo's (its soft contact sinks in; diffcam's rests at the
mesh's exact centre-of-mass height), 1.6 mm apart sideways and 0.11 degrees apart in
orientation (the landing impulses differ: hard contacts against soft constraints).
"""

from __future__ import annotations

import builtins
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import diffcam
from diffcam.mesh import load_mesh, mass_properties
from diffcam.mjcf import MJCFError, import_mjcf, import_mjcf_string, write_scene_file
from diffcam.scene.paths import MESHES_DIR
from physics.inertia import shape_inertia

DATA = Path(__file__).resolve().parents[1] / "data" / "mjcf"
MESHES = DATA / "meshes.xml"
FRUSTUM = DATA / "meshes" / "frustum.obj"
SCALE = [1.2, 1.0, 0.9]  # meshes.xml's scale of the frustum


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _mujoco():
    return pytest.importorskip("mujoco")


def free_mesh_model(mesh: str, geom: str, compiler: str = "") -> str:
    """A model of one free body whose geom ``g`` has the attributes ``geom`` (type="mesh"
    unless they give a type), with ``mesh`` in <asset>."""
    if "type=" not in geom:
        geom = f'type="mesh" {geom}'
    return (
        f"<mujoco><compiler {compiler}/><asset>{mesh}</asset><worldbody>"
        '<body name="b" pos="0 0 1"><freejoint/>'
        f'<geom name="g" {geom}/></body></worldbody></mujoco>'
    )


def world_inertia(scene, name: str) -> np.ndarray:
    """(3, 3) the body's inertia tensor about its centre of mass in world axes (kg m^2)."""
    w = scene.world
    i = scene.body_names.index(name)
    moments = shape_inertia(w.shapes[i], w.mass[0, i], w.size[0, i]).numpy()
    rot = w.initial_rotation[0, i].numpy()
    return rot @ np.diag(moments) @ rot.T


def mujoco_world_inertia(m, d, body: int) -> np.ndarray:
    rot = d.ximat[body].reshape(3, 3)
    return rot @ np.diag(m.body_inertia[body]) @ rot.T


# ------------------------------------------------------------------------------ conversion
def test_mesh_geom_becomes_a_mesh_body_with_the_file_scale_and_geom_pose():
    imported = import_mjcf(MESHES)
    block = {b["name"]: b for b in imported.config["bodies"]}["block"]
    assert block["shape"] == "mesh" and "size" not in block
    assert Path(block["mesh"]) == FRUSTUM.resolve()  # meshdir="meshes", absolute in the scene
    assert block["scale"] == SCALE
    mesh = load_mesh(FRUSTUM, dtype=torch.float64).scaled(SCALE)
    volume = float(mass_properties(mesh).volume)
    assert block["mass"] == pytest.approx(700.0 * volume, rel=1e-11)  # density="700"
    assert block["color"] == [0.7, 0.5, 0.3]  # from the material
    assert any("convex hulls" in n for n in imported.notes)


def test_body_mass_centre_and_inertia_match_mujoco():
    mujoco = _mujoco()
    m = mujoco.MjModel.from_xml_path(str(MESHES))
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    scene = diffcam.load_scene(MESHES, dtype=torch.float64)
    i, b = scene.body_names.index("block"), m.body("block").id
    assert scene.world.mass[0, i].item() == pytest.approx(m.body_mass[b], rel=1e-6)
    # MuJoCo's mesh geom frame is the mesh's centre of mass: the body's state is that pose
    np.testing.assert_allclose(
        scene.world.initial_position[0, i].numpy(), d.geom_xpos[m.geom("block").id], atol=1e-7
    )
    np.testing.assert_allclose(
        world_inertia(scene, "block"), mujoco_world_inertia(m, d, b), rtol=0, atol=1e-7
    )
    # the principal axes are not the file's (the test would not see a wrong rotation else)
    rot = scene.world.initial_rotation[0, i].numpy()
    assert np.abs(np.abs(rot) - np.eye(3)).max() > 0.1


def test_non_convex_torus_with_exact_inertia_matches_mujoco_and_legacy_is_noted(tmp_path):
    mujoco = _mujoco()
    shutil.copy(MESHES_DIR / "torus.obj", tmp_path / "torus.obj")
    geom = 'mesh="torus" pos="0.1 0.2 0" euler="20 0 30" density="300"'
    exact = free_mesh_model('<mesh file="torus.obj" scale="0.5 0.5 0.5" inertia="exact"/>', geom)
    path = tmp_path / "torus.xml"
    path.write_text(exact)
    m = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    scene = diffcam.load_scene(path, dtype=torch.float64)
    i = scene.body_names.index("b")
    assert scene.world.mass[0, i].item() == pytest.approx(m.body_mass[1], rel=1e-6)
    np.testing.assert_allclose(scene.world.initial_position[0, i].numpy(), d.xipos[1], atol=1e-7)
    expected = mujoco_world_inertia(m, d, 1)
    np.testing.assert_allclose(world_inertia(scene, "b"), expected, atol=1e-6 * expected.max())
    assert not any("not convex" in n for n in import_mjcf(path).notes)
    # MuJoCo's default inertia="legacy" is not exact for a non-convex mesh: said in a note
    pytest.importorskip("scipy")
    legacy = import_mjcf_string(exact.replace(' inertia="exact"', ""), base_dir=tmp_path)
    assert any("torus" in n and "not convex" in n for n in legacy.notes)


def test_stl_mesh_loads_as_the_obj_one(tmp_path):
    trimesh = pytest.importorskip("trimesh")  # the optional 'mesh' extra reads STL
    mesh = load_mesh(FRUSTUM, dtype=torch.float64)
    tm = trimesh.Trimesh(mesh.vertices.numpy(), mesh.faces.numpy(), process=False)
    tm.export(tmp_path / "frustum.stl")  # STL stores each triangle's corners apart
    geom = 'mesh="frustum" pos="0.1 0 0" density="700"'
    stl = import_mjcf_string(free_mesh_model('<mesh file="frustum.stl"/>', geom), base_dir=tmp_path)
    obj = import_mjcf_string(
        free_mesh_model(f'<mesh file="{FRUSTUM}"/>', geom)  # an absolute file
    )
    a, b = stl.config["bodies"][0], obj.config["bodies"][0]
    assert a["mesh"].endswith("frustum.stl") and a["mass"] == pytest.approx(b["mass"], rel=1e-6)
    sa = diffcam.load_scene(write_scene_file(stl, tmp_path / "stl.toml"), dtype=torch.float64)
    sb = diffcam.load_scene(write_scene_file(obj, tmp_path / "obj.toml"), dtype=torch.float64)
    torch.testing.assert_close(sa.world.initial_position, sb.world.initial_position)
    # the same mass distribution (principal axes may differ in sign)
    np.testing.assert_allclose(world_inertia(sa, "b"), world_inertia(sb, "b"), atol=1e-9)


def test_assetdir_and_strippath_find_the_file(tmp_path):
    (tmp_path / "assets").mkdir()
    shutil.copy(FRUSTUM, tmp_path / "assets" / "f.obj")
    geom = 'mesh="f" density="700"'
    text = free_mesh_model(
        '<mesh file="elsewhere/f.obj"/>', geom, 'assetdir="assets" strippath="true"'
    )
    body = import_mjcf_string(text, base_dir=tmp_path).config["bodies"][0]
    assert Path(body["mesh"]) == (tmp_path / "assets" / "f.obj").resolve()
    assert "scale" not in body


def test_mesh_model_renders_the_block():
    scene = diffcam.load_scene(MESHES, overrides={"camera.resolution": [64, 48]})
    state = scene.initial_state()
    image = scene.render(state)[0]
    u, v = scene.project_bodies(state)[0][scene.body_names.index("block")].round().long()
    assert 0 <= u < 64 and 0 <= v < 48
    # the wood colour (0.7, 0.5, 0.3), lit: red above green above blue at the block's centre
    r, g, b = image[:, v, u].tolist()
    assert r > g > b


# ------------------------------------------------------------------------------ against MuJoCo
@pytest.mark.slow
def test_drop_onto_the_floor_matches_mujoco():
    mujoco = _mujoco()
    m = mujoco.MjModel.from_xml_path(str(MESHES))
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4  # exact free fall, like diffcam's step
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    body, geom = m.body("block").id, m.geom("block").id
    steps = 500  # 1 s: falls 0.25 m, lands at 0.22 s, rests by 0.4 s
    com_mj, rot_mj, touching = [], [], []
    for _ in range(steps + 1):
        com_mj.append(d.xipos[body].copy())
        rot_mj.append(d.geom_xmat[geom].reshape(3, 3).copy())
        touching.append(d.ncon > 0)
        mujoco.mj_step(m, d)
    scene = diffcam.load_scene(MESHES, dtype=torch.float64)
    i = scene.body_names.index("block")
    trajectory = scene.rollout(steps)
    com_dc = np.stack([trajectory[k].position[0, i].numpy() for k in range(steps + 1)])
    rot_dc = np.stack([trajectory[k].rotation[0, i].numpy() for k in range(steps + 1)])
    first = int(np.argmax(touching))
    assert 0.15 < first * m.opt.timestep < 0.3
    np.testing.assert_allclose(com_dc[:first], np.array(com_mj)[:first], atol=1e-7)
    # at rest: on the bottom face, the centre of mass at its height above that face
    mesh = load_mesh(FRUSTUM, dtype=torch.float64).scaled(SCALE)
    rest_height = float(mass_properties(mesh).center[2])
    assert com_dc[-1, 2] == pytest.approx(rest_height, abs=1e-4)
    assert abs(com_dc[-1, 2] - com_mj[-1][2]) < 5e-4  # MuJoCo's soft contact sinks 0.1 mm
    assert np.linalg.norm(com_dc[-1, :2] - com_mj[-1][:2]) < 5e-3
    # orientation change since the start, diffcam's against MuJoCo's (axes' order aside)
    turn_dc = rot_dc[-1] @ rot_dc[0].T
    turn_mj = rot_mj[-1] @ rot_mj[0].T
    angle = np.degrees(np.arccos(np.clip((np.trace(turn_dc @ turn_mj.T) - 1) / 2, -1, 1)))
    assert angle < 0.5
    tilt_mj = np.degrees(np.arccos(np.clip((np.trace(turn_mj) - 1) / 2, -1, 1)))
    assert tilt_mj > 3.0  # it did turn on landing: the comparison sees rotations


# ------------------------------------------------------------------------------ errors
GEOM = 'mesh="m" density="700"'
ERRORS = {
    "inline vertices": (
        '<mesh name="m" vertex="0 0 0 1 0 0 0 1 0 0 0 1"/>', GEOM, "asset/mesh[m]",
        "inline mesh data (vertex) is not supported",
    ),
    "builtin": (
        '<mesh name="m" builtin="sphere" params="3"/>', GEOM, "asset/mesh[m]",
        "builtin (procedural) meshes are not supported",
    ),
    "shell inertia": (
        '<mesh name="m" file="f.obj" inertia="shell"/>', GEOM, "asset/mesh[m]",
        'inertia="shell" is not supported',
    ),
    "mirrored": (
        '<mesh name="m" file="f.obj" scale="-1 1 1"/>', GEOM, "asset/mesh[m]",
        "mirrored or flattened meshes are not supported",
    ),
    "missing file": (
        '<mesh name="m" file="nope.obj"/>', GEOM, "asset/mesh[m]", "nope.obj' not found",
    ),
    "msh file": (
        '<mesh name="m" file="part.msh"/>', GEOM, "asset/mesh[m]", ".msh files are not supported",
    ),
    "fitted primitive": (
        '<mesh name="m" file="f.obj"/>', 'type="box" mesh="m"', "worldbody/body[b]/geom[g]",
        'a box fitted to a mesh (mesh= on a type="box" geom) is not supported',
    ),
    "no mesh name": (
        '<mesh name="m" file="f.obj"/>', 'density="700"', "worldbody/body[b]/geom[g]",
        'a type="mesh" geom needs mesh="..."',
    ),
    "open mesh": (
        '<mesh name="m" file="open.obj"/>', GEOM, "worldbody/body[b]/geom[g]",
        "a moving mesh body's mass and inertia come from a closed mesh",
    ),
    "fromto": (
        '<mesh name="m" file="f.obj"/>', GEOM + ' fromto="0 0 0 0 0 1"',
        "worldbody/body[b]/geom[g]", "fromto on a mesh is not supported",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(ERRORS))
def test_mesh_errors_name_the_element(case, tmp_path):
    shutil.copy(FRUSTUM, tmp_path / "f.obj")
    (tmp_path / "open.obj").write_text("v 0 0 0\nv 1 0 0\nv 0 1 0\nv 0 0 1\nf 1 3 2\nf 1 2 4\n")
    mesh, geom, key, reason = ERRORS[case]
    text = free_mesh_model(mesh, geom)
    with pytest.raises(MJCFError) as info:
        import_mjcf_string(text, file="model.xml", base_dir=tmp_path)
    assert info.value.key == key, str(info.value)
    assert reason in info.value.reason, str(info.value)


def test_stl_without_trimesh_names_the_file_and_the_fix(tmp_path, monkeypatch):
    (tmp_path / "part.stl").write_bytes(b"solid x\nendsolid x\n")
    real_import = builtins.__import__

    def no_trimesh(name, *args, **kwargs):
        if name == "trimesh":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_trimesh)
    text = free_mesh_model('<mesh name="m" file="part.stl"/>', GEOM)
    with pytest.raises(MJCFError) as info:
        import_mjcf_string(text, file="model.xml", base_dir=tmp_path)
    assert info.value.key == "asset/mesh[m]"
    assert "part.stl" in str(info.value) and "pip install 'diffcam[mesh]'" in str(info.value)
