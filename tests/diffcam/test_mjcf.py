"""MJCF import (`diffcam.mjcf`, `diffcam.load_scene("model.xml")`).

Conventions are pinned by hand-computed values; the geometry, masses and joint frames of a model
of primitives and the trajectories of Gymnasium's inverted_pendulum.xml and
inverted_double_pendulum.xml (tests/data/mjcf, MIT) are checked against MuJoCo itself (skipped
only when ``mujoco`` cannot be imported; the ``dev`` extra installs it).

Trajectory tolerances are those of tests/physics/test_accuracy.py's cart-pole-vs-ODE test
(cart 0.01 m, angles 0.02 rad). Measured at the files' own timesteps (diffcam's second-order
step against MuJoCo's RK4), before any joint limit is reached: inverted pendulum 1.5e-4 m /
8e-5 rad (zero action) and 3e-5 m / 3.4e-4 rad (constant action); double pendulum with a
gentle push 7e-4 m / 3.3e-3 / 3.8e-3 rad. The double pendulum's violent fall from (0.1, -0.1)
rad differs by 3.1e-3 m / 7.1e-3 / 3.1e-2 rad at dt = 0.01 s (diffcam's discretisation
error: 4.5e-3 rad at dt = 0.005 s, 6e-4 at 0.0025 s), so that case runs at dt = 0.005 s.
"""

from __future__ import annotations

import copy
import math
import tomllib
from pathlib import Path

import numpy as np
import pytest
import torch

import diffcam
import diffcam.mjcf as mjcf
import physics
from diffcam.errors import SceneError
from diffcam.mjcf import MJCFError, import_mjcf, import_mjcf_string
from diffcam.scene import Scene, validate_scene

DATA = Path(__file__).resolve().parents[1] / "data" / "mjcf"
PENDULUM = DATA / "inverted_pendulum.xml"
DOUBLE = DATA / "inverted_double_pendulum.xml"
PRIMITIVES = DATA / "primitives.xml"


@pytest.fixture(autouse=True)
def _one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def model(body: str, *, head: str = "", actuators: str = "") -> str:
    return (
        f'<mujoco model="t">{head}<worldbody>{body}</worldbody>'
        f"<actuator>{actuators}</actuator></mujoco>"
    )


def bodies_by_name(imported) -> dict:
    return {b["name"]: b for b in imported.config["bodies"]}


def joints_by_name(imported) -> dict:
    return {j["name"]: j for j in imported.config.get("joints", [])}


def rotation_of(body: dict) -> np.ndarray:
    from diffcam.mjcf.rotations import quat_to_matrix

    return quat_to_matrix(body.get("quat", [1.0, 0.0, 0.0, 0.0]))


# ------------------------------------------------------------------------------- conventions
def test_convention_box_half_sizes_become_full_extents():
    body = '<body name="b" pos="0 0 1"><freejoint/><geom type="box" size="0.1 0.2 0.3"/></body>'
    b = bodies_by_name(import_mjcf_string(model(body)))["b"]
    assert b["shape"] == "box" and b["size"] == [0.2, 0.4, 0.6]
    assert b["position"] == [0.0, 0.0, 1.0]


def test_convention_sphere_cylinder_capsule_and_plane_sizes():
    body = (
        '<geom name="floor" type="plane" size="2 3 0.1"/>'
        '<body name="s" pos="0 0 1"><freejoint/><geom type="sphere" size="0.25"/></body>'
        '<body name="c" pos="1 0 1"><freejoint/><geom type="cylinder" size="0.1 0.4"/></body>'
        '<body name="k" pos="2 0 1"><freejoint/><geom type="capsule" size="0.05 0.3"/></body>'
    )
    b = bodies_by_name(import_mjcf_string(model(body)))
    assert b["floor"]["size"] == [4.0, 6.0] and b["floor"]["static"] is True
    assert b["s"]["size"] == 0.25
    assert b["c"]["size"] == [0.1, 0.8]  # [radius, full length]
    assert b["k"]["size"] == [0.05, 0.6]  # the cylindrical part's full length, caps excluded


def test_convention_capsule_fromto_gives_centre_length_and_axis():
    body = (
        '<body name="arm" pos="1 0 0"><joint type="hinge" axis="0 1 0"/>'
        '<geom type="capsule" size="0.05" fromto="0 0 0 0.3 0 0.4"/></body>'
    )
    imported = import_mjcf_string(model(body))
    b = bodies_by_name(imported)["arm"]
    assert b["size"] == pytest.approx([0.05, 0.5])
    assert b["position"] == pytest.approx([1.15, 0.0, 0.2])
    # MuJoCo's convention: the geom's z axis points from the second point to the first.
    np.testing.assert_allclose(rotation_of(b)[:, 2], [-0.6, 0.0, -0.8], atol=1e-12)
    # The hinge sits at the body origin, not at the capsule's centre.
    assert joints_by_name(imported)["arm_joint"]["anchor"] == [1.0, 0.0, 0.0]


def test_convention_euler_in_degrees_by_default_and_radians_on_request():
    body = '<body name="b" euler="0 90 0"><freejoint/><geom type="box" size="0.1 0.1 0.1"/></body>'
    deg = bodies_by_name(import_mjcf_string(model(body)))["b"]
    rad_text = model(body.replace("0 90 0", f"0 {math.pi / 2!r} 0"))
    rad = bodies_by_name(import_mjcf_string(rad_text.replace(
        '<mujoco model="t">', '<mujoco model="t"><compiler angle="radian"/>')))["b"]  # fmt: skip
    expected = [math.cos(math.pi / 4), 0.0, math.sin(math.pi / 4), 0.0]  # 90 deg about +y
    assert deg["quat"] == pytest.approx(expected, abs=1e-9)
    assert rad["quat"] == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize("seq", ["xyz", "XYZ", "zyx", "ZxY"])
def test_convention_eulerseq_lowercase_moving_uppercase_fixed_axes(seq):
    from scipy.spatial.transform import Rotation

    angles = [30.0, -50.0, 70.0]
    text = model(
        f'<body name="b" euler="{angles[0]} {angles[1]} {angles[2]}"><freejoint/>'
        '<geom type="box" size="0.1 0.2 0.3"/></body>',
        head=f'<compiler eulerseq="{seq}"/>',
    )
    b = bodies_by_name(import_mjcf_string(text))["b"]
    # scipy's case convention is the opposite of MuJoCo's (uppercase = intrinsic there).
    if seq.islower() or seq.isupper():
        expected = Rotation.from_euler(seq.swapcase(), angles, degrees=True).as_matrix()
    else:  # mixed: compose by hand, moving axes post-multiplied, fixed ones pre-multiplied
        expected = np.eye(3)
        for letter, angle in zip(seq, angles, strict=True):
            step = Rotation.from_euler(letter.lower(), angle, degrees=True).as_matrix()
            expected = expected @ step if letter.islower() else step @ expected
    np.testing.assert_allclose(rotation_of(b), expected, atol=1e-9)


def test_convention_nested_body_poses_and_joint_axes_in_world():
    body = (
        '<body name="a" pos="0 0 2" axisangle="0 0 1 90"><joint name="j1" type="slide" '
        'axis="1 0 0"/><geom type="sphere" size="0.1"/>'
        '<body name="b" pos="1 0 0"><joint name="j2" axis="0 1 0" pos="0 0 0.5"/>'
        '<geom type="sphere" size="0.1"/></body></body>'
    )
    imported = import_mjcf_string(model(body))
    b, j = bodies_by_name(imported), joints_by_name(imported)
    assert b["b"]["position"] == pytest.approx([0.0, 1.0, 2.0])
    assert j["j1"]["type"] == "slider" and j["j1"]["axis"] == pytest.approx([0.0, 1.0, 0.0])
    assert j["j2"]["parent"] == "a" and j["j2"]["child"] == "b"
    assert j["j2"]["anchor"] == pytest.approx([0.0, 1.0, 2.5])
    assert j["j2"]["axis"] == pytest.approx([-1.0, 0.0, 0.0])


def test_default_classes_nested_childclass_and_class_override():
    text = """
    <mujoco>
      <default>
        <geom type="box" size="0.1 0.1 0.1" rgba="1 0 0 1"/>
        <joint damping="0.5"/>
        <default class="limb">
          <geom type="capsule" size="0.02 0.2" rgba="0 1 0 1"/>
          <joint range="-30 30"/>
          <default class="tip">
            <geom rgba="0 0 1 1" density="3000"/>
          </default>
        </default>
      </default>
      <worldbody>
        <body name="plain"><freejoint/><geom/></body>
        <body name="arm" pos="0 0 1" childclass="limb">
          <joint name="shoulder" axis="0 1 0"/>
          <geom/>
          <body name="tip" pos="0 0 -0.4"><joint name="wrist" axis="0 1 0" damping="0"/>
            <geom class="tip"/></body>
        </body>
      </worldbody>
    </mujoco>"""
    imported = import_mjcf_string(text)
    b, j = bodies_by_name(imported), joints_by_name(imported)
    assert b["plain"]["shape"] == "box" and b["plain"]["color"] == [1.0, 0.0, 0.0]
    assert b["arm"]["shape"] == "capsule" and b["arm"]["size"] == [0.02, 0.4]
    assert b["arm"]["color"] == [0.0, 1.0, 0.0]
    volume = math.pi * 0.02**2 * 0.4 + 4.0 / 3.0 * math.pi * 0.02**3
    assert b["arm"]["mass"] == pytest.approx(1000.0 * volume, rel=1e-11)
    # class="tip" inherits from limb (shape, size) and main, and overrides colour and density.
    assert b["tip"]["shape"] == "capsule" and b["tip"]["color"] == [0.0, 0.0, 1.0]
    assert b["tip"]["mass"] == pytest.approx(3000.0 * volume, rel=1e-11)
    assert j["shoulder"]["damping"] == 0.5
    assert j["shoulder"]["limits"] == pytest.approx([-math.pi / 6, math.pi / 6])
    assert "damping" not in j["wrist"]  # its own damping="0" beats the class
    assert j["wrist"]["limits"] == pytest.approx([-math.pi / 6, math.pi / 6])


def test_multi_geom_body_becomes_welded_parts_and_motor_maps_gear_and_ctrlrange():
    imported = import_mjcf(PRIMITIVES)
    b, j = bodies_by_name(imported), joints_by_name(imported)
    assert imported.bodies["base"] == ["base", "base_knob"]
    assert j["base_knob_weld"] == {
        "name": "base_knob_weld", "type": "fixed", "parent": "base", "child": "base_knob",
        "anchor": b["base_knob"]["position"],
    }  # fmt: skip
    assert j["elbow"]["motor"] == {"type": "force", "max": 10.0}  # gear 5 * ctrlrange 2
    assert j["shoulder"]["motor"] == {"type": "force", "max": 8.0}  # forcerange beats 10 * 1
    assert [a["gear"] for a in imported.actuators] == [5.0, -10.0]
    assert b["floor"]["color"] == [0.6, 0.6, 0.65]  # from the material
    assert imported.config["world"] == {
        "gravity": [0.0, 0.0, -9.81], "timestep": 0.005, "coordinates": "maximal",
    }  # fmt: skip
    cam = imported.config["camera"]
    assert cam["resolution"] == [64, 48] and cam["fov_y_deg"] == 40.0
    assert cam["position"] == [0.0, -4.0, 0.5]
    look = np.subtract(cam["look_at"], cam["position"])
    np.testing.assert_allclose(look, np.array([0.0, 1.0, -0.2]) / math.hypot(1.0, 0.2), atol=1e-9)


def test_scene_actuators_follow_mujoco_actuator_order():
    scene = diffcam.load_scene(PRIMITIVES)
    assert scene.actuator_names == ["elbow", "shoulder"]  # m_elbow, m_shoulder


def test_pendulum_models_import_as_reduced_coordinate_trees():
    for path, joints in ((PENDULUM, ["slider", "hinge"]), (DOUBLE, ["slider", "hinge", "hinge2"])):
        scene = diffcam.load_scene(path)
        assert scene.world.coordinates == "reduced"
        assert scene.world.joint_names == joints
        assert scene.actuator_names == ["slider"]
    imported = import_mjcf(PENDULUM)
    j = joints_by_name(imported)
    assert j["hinge"]["limits"] == pytest.approx([-math.pi / 2, math.pi / 2])  # range in degrees
    assert j["slider"]["motor"] == {"type": "force", "max": 300.0}
    assert j["slider"]["damping"] == 1.0 and j["hinge"]["damping"] == 1.0
    assert imported.actuators == [{"name": "slide", "joint": "slider", "gear": 100.0}]


def test_default_camera_sees_the_model():
    scene = diffcam.load_scene(DOUBLE, overrides={"camera.resolution": [64, 48]})
    centres = scene.project_bodies(scene.initial_state())[0]
    for name in ("cart", "pole", "pole2"):
        u, v = centres[scene.body_names.index(name)].tolist()
        assert 0 < u < 64 and 0 < v < 48
    image = scene.render(scene.initial_state())
    assert image.shape == (1, 3, 48, 64) and torch.isfinite(image).all()


def test_toml_round_trip_loads_the_same_scene(tmp_path):
    imported = import_mjcf(PRIMITIVES)
    out = mjcf.write_scene_file(imported, tmp_path / "primitives.toml")
    assert tomllib.loads(out.read_text()) == imported.config
    a = diffcam.load_scene(PRIMITIVES, dtype=torch.float64)
    b = diffcam.load_scene(out, dtype=torch.float64)
    assert a.body_names == b.body_names and a.actuator_names == b.actuator_names
    torch.testing.assert_close(a.world.initial_position, b.world.initial_position)
    torch.testing.assert_close(a.world.mass, b.world.mass)


def test_cli_import_mjcf_writes_a_loadable_scene(tmp_path, capsys):
    from diffcam.cli import main

    out = tmp_path / "pendulum.toml"
    assert main(["import-mjcf", str(PENDULUM), "-o", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    assert diffcam.load_scene(out).actuator_names == ["slider"]
    assert main(["import-mjcf", str(tmp_path / "missing.xml")]) == 2


def test_overrides_work_on_xml_scenes():
    m = torch.tensor(2.0, requires_grad=True)
    scene = diffcam.load_scene(
        PENDULUM, dtype=torch.float64, overrides={"bodies.pole.mass": m,
                                                  "joints.hinge.position": 0.2},
    )  # fmt: skip
    state = scene.step(scene.initial_state(), torch.zeros(1, 1, dtype=torch.float64))
    state.position[0, scene.body_names.index("pole"), 0].backward()
    assert m.grad is not None and torch.isfinite(m.grad)


# ------------------------------------------------------------------------------- errors
ERRORS = {
    "unknown mesh": (
        model('<body name="pole"><joint/><geom type="sphere" size="0.1"/>'
              '<geom type="mesh" mesh="m"/></body>'),  # fmt: skip
        "worldbody/body[pole]/geom[1]", "mesh 'm' is not an <asset><mesh>",
    ),
    "ellipsoid": (
        model('<body name="e"><joint/><geom name="egg" type="ellipsoid" size="1 2 3"/></body>'),
        "worldbody/body[e]/geom[egg]", 'type="ellipsoid" is not supported',
    ),
    "tendon": (
        '<mujoco><worldbody/><tendon><fixed name="t"/></tendon></mujoco>',
        "tendon", "<tendon> is not supported",
    ),
    "equality": (
        '<mujoco><worldbody/><equality><weld body1="a"/></equality></mujoco>',
        "equality", "<equality> is not supported",
    ),
    "two joints": (
        model('<body name="b"><joint name="x" type="slide"/><joint name="y" type="slide"/>'
              '<geom size="0.1"/></body>'),  # fmt: skip
        "worldbody/body[b]/joint[y]", "has 2 joints",
    ),
    "armature": (
        model('<body name="b"><joint name="j" armature="0.1"/><geom size="0.1"/></body>'),
        "worldbody/body[b]/joint[j]", "armature=0.1 is not supported",
    ),
    "stiffness": (
        model('<body name="b"><joint name="j" stiffness="3"/><geom size="0.1"/></body>'),
        "worldbody/body[b]/joint[j]", "stiffness=3 is not supported",
    ),
    "inertial": (
        model('<body name="b"><joint/><inertial pos="0 0 0" mass="1" diaginertia="1 1 1"/>'
              '<geom size="0.1"/></body>'),  # fmt: skip
        "worldbody/body[b]/inertial[0]", "explicit <inertial> is not supported",
    ),
    "unknown attribute": (
        model('<body name="b"><freejoint/><geom name="g" sizee="0.1"/></body>'),
        "worldbody/body[b]/geom[g]", 'attribute sizee="0.1" is not supported',
    ),
    "asymmetric ctrlrange": (
        model('<body name="b"><joint name="j"/><geom size="0.1"/></body>',
              actuators='<motor name="m" joint="j" ctrlrange="-1 2"/>'),  # fmt: skip
        "actuator/motor[m]", "not symmetric about 0",
    ),
    "position actuator": (
        model('<body name="b"><joint name="j"/><geom size="0.1"/></body>',
              actuators='<position name="p" joint="j" kp="10"/>'),  # fmt: skip
        "actuator/position[p]", "<position> actuators are not supported",
    ),
    "motor on unknown joint": (
        model('<body name="b"><joint name="j"/><geom size="0.1"/></body>',
              actuators='<motor name="m" joint="jj"/>'),  # fmt: skip
        "actuator/motor[m]", "joint 'jj' is not a hinge or slide joint",
    ),
    "unknown class": (
        model('<body name="b"><freejoint/><geom class="nope" size="0.1"/></body>'),
        "worldbody/body[b]/geom[0]", "unknown default class 'nope'",
    ),
    "joint without geom": (
        model('<body name="b"><joint/></body>'),
        "worldbody/body[b]", "has a joint but no geom",
    ),
    "moving plane": (
        model('<body name="b"><freejoint/><geom type="plane" size="1 1 1"/></body>'),
        "worldbody/body[b]/geom[0]", "a plane must belong to <worldbody>",
    ),
    "box without size": (
        model('<body name="b"><freejoint/><geom type="box" size="0.1"/></body>'),
        "worldbody/body[b]/geom[0]", "a box needs 3 size numbers",
    ),
    "bad number": (
        model('<body name="b" pos="0 zero 0"><freejoint/><geom size="0.1"/></body>'),
        "worldbody/body[b]", 'pos="0 zero 0" is not a list of numbers',
    ),
    "not mujoco": ("<robot name='r'/>", "robot", "not an MJCF file"),
    "free joint below a body": (
        model('<body name="a"><joint/><geom size="0.1"/><body name="b"><freejoint/>'
              '<geom size="0.1"/></body></body>'),  # fmt: skip
        "worldbody/body[a]/body[b]/freejoint[0]", "only allowed on a body of <worldbody>",
    ),
}  # fmt: skip


@pytest.mark.parametrize("case", list(ERRORS))
def test_unsupported_elements_raise_with_their_xml_path(case):
    text, key, reason = ERRORS[case]
    with pytest.raises(MJCFError) as info:
        import_mjcf_string(text, file="model.xml")
    error = info.value
    assert isinstance(error, SceneError)
    assert error.key == key, str(error)
    assert reason in error.reason, str(error)
    assert str(error).startswith(f"model.xml: {key}: ")
    assert error.line is not None and error.line >= 1


def test_malformed_xml_is_a_scene_error_with_its_line(tmp_path):
    path = tmp_path / "broken.xml"
    path.write_text('<mujoco>\n  <worldbody>\n    <body name="a">\n  </worldbody>\n</mujoco>\n')
    with pytest.raises(SceneError, match=r"broken\.xml: malformed XML: mismatched tag \(line 4"):
        diffcam.load_scene(path)


def test_missing_xml_file_is_a_scene_error(tmp_path):
    with pytest.raises(SceneError, match="no such MJCF file"):
        diffcam.load_scene(tmp_path / "nope.xml")


def test_ignored_elements_are_noted_not_errors():
    text = model(
        '<light pos="0 0 3"/><body name="b"><freejoint/><geom size="0.1" condim="1"/>'
        '<site name="s"/></body>',
        head='<size njmax="10"/><visual><global offwidth="100"/></visual>',
    )
    notes = " | ".join(import_mjcf_string(text).notes)
    for word in ("<size>", "<visual>", "<light>", "<site>", "condim"):
        assert word in notes


# ------------------------------------------------------------------------------- against MuJoCo
def _mujoco():
    return pytest.importorskip("mujoco")


def test_geometry_masses_and_joint_frames_match_mujoco():
    mujoco = _mujoco()
    m = mujoco.MjModel.from_xml_path(str(PRIMITIVES))
    d = mujoco.MjData(m)
    mujoco.mj_forward(m, d)
    imported = import_mjcf(PRIMITIVES)
    scene = diffcam.load_scene(PRIMITIVES, dtype=torch.float64)
    world = scene.world
    body_mass = {}
    for g in range(m.ngeom):
        i = scene.body_names.index(imported.geoms[m.geom(g).name])
        np.testing.assert_allclose(world.initial_position[0, i].numpy(), d.geom_xpos[g], atol=1e-9)
        np.testing.assert_allclose(
            world.initial_rotation[0, i].numpy(), d.geom_xmat[g].reshape(3, 3), atol=1e-9
        )
        if not world.is_static[i]:
            b = int(m.geom_bodyid[g])
            body_mass[b] = body_mass.get(b, 0.0) + world.mass[0, i].item()
    for b, mass in body_mass.items():
        assert mass == pytest.approx(m.body_mass[b], rel=1e-9)
    # single-geom bodies: principal moments of inertia (diffcam's shape inertia vs MuJoCo's)
    from physics.inertia import shape_inertia

    for name in ("fore", "hand", "ball"):
        i = scene.body_names.index(name)
        moments = shape_inertia(world.shapes[i], world.mass[0, i], world.size[0, i]).numpy()
        np.testing.assert_allclose(
            np.sort(moments), np.sort(m.body_inertia[m.body(name).id]), rtol=1e-9
        )
    for jn in ("shoulder", "elbow", "wrist", "socket"):
        j = joints_by_name(imported)[imported.joints[jn]]
        mj = m.joint(jn).id
        np.testing.assert_allclose(j["anchor"], d.xanchor[mj], atol=1e-9)
        if "axis" in j:
            np.testing.assert_allclose(j["axis"], d.xaxis[mj], atol=1e-9)


def _mujoco_run(path, q0, ctrl, seconds):
    mujoco = _mujoco()
    m = mujoco.MjModel.from_xml_path(str(path))
    d = mujoco.MjData(m)
    d.qpos[:] = q0
    d.ctrl[:] = ctrl
    steps = int(round(seconds / m.opt.timestep))
    q = [d.qpos.copy()]
    for _ in range(steps):
        mujoco.mj_step(m, d)
        q.append(d.qpos.copy())
    names = [m.joint(j).name for j in range(m.njnt)]
    return np.arange(steps + 1) * m.opt.timestep, np.array(q), names


def _diffcam_run(path, names, q0, ctrl, seconds, timestep=None):
    imported = import_mjcf(path)
    config = copy.deepcopy(imported.config)
    if timestep is not None:
        config["world"]["timestep"] = timestep
    for joint in config["joints"]:
        if joint["name"] in names:
            joint["position"] = float(q0[names.index(joint["name"])])
    scene = Scene(validate_scene(config, file=str(path)), 1, None, torch.float64)
    steps = int(round(seconds / scene.world.timestep))
    action = torch.tensor(
        [[a["gear"] * c for a, c in zip(imported.actuators, ctrl, strict=True)]],
        dtype=torch.float64,
    )
    trajectory = scene.rollout(steps, policy=lambda state, t: action)
    columns = [scene.world.joint_names.index(n) for n in names]
    q = np.stack(
        [
            physics.joint_positions(scene.world, trajectory[k])[0][0].numpy()
            for k in range(steps + 1)
        ]
    )[:, columns]
    return np.arange(steps + 1) * scene.world.timestep, q


def _errors(path, q0, ctrl, seconds, timestep=None, limit=None):
    """Max |diffcam - MuJoCo| per joint (hinge differences wrapped), over the times before any
    hinge of MuJoCo's trajectory comes within 1e-3 rad of ``limit``."""
    t, q_mj, names = _mujoco_run(path, q0, ctrl, seconds)
    t_dc, q_dc = _diffcam_run(path, names, q0, ctrl, seconds, timestep)
    every = int(round(t[1] / t_dc[1]))
    q_dc = q_dc[::every]
    assert q_dc.shape == q_mj.shape
    diff = q_dc - q_mj
    diff[:, 1:] = np.angle(np.exp(1j * diff[:, 1:]))  # hinges: angles modulo 2 pi
    n = len(t)
    if limit is not None:
        hit = np.abs(q_mj[:, 1:]).max(1) >= limit - 1e-3
        n = int(np.argmax(hit)) if hit.any() else n
    return np.abs(diff[:n]).max(0), t[n - 1], q_mj, q_dc


@pytest.mark.parametrize(
    "q0, ctrl, tolerance",
    [([0.0, 0.1], [0.0], (0.01, 0.02)), ([0.0, -0.2], [-0.3], (0.01, 0.02))],
)
def test_inverted_pendulum_matches_mujoco(q0, ctrl, tolerance):
    err, until, q_mj, q_dc = _errors(PENDULUM, q0, ctrl, 1.0, limit=math.pi / 2)
    assert until > 0.7  # the comparison covers most of the second
    assert err[0] < tolerance[0] and err[1] < tolerance[1], err
    assert np.ptp(q_mj[:, 1]) > 0.3  # the pole really fell


def test_inverted_pendulum_limit_is_hard_in_diffcam_soft_in_mujoco():
    # After the pole reaches its +-90 degree stop (t = 0.76 s), MuJoCo's soft limit (default
    # solref 0.02 s) lets it overshoot by 0.075 rad and spring back; diffcam's stop is inelastic.
    err, _, q_mj, q_dc = _errors(PENDULUM, [0.0, 0.1], [0.0], 1.0)
    assert np.abs(q_dc[:, 1]).max() <= math.pi / 2 + 1e-6
    assert 0.0 < np.abs(q_mj[:, 1]).max() - math.pi / 2 < 0.1
    assert err[1] < 0.1 and abs(q_dc[-1, 1] - q_mj[-1, 1]) < 0.01


@pytest.mark.parametrize(
    "q0, ctrl, timestep",
    [([0.0, 0.05, 0.0], [0.05], None), ([0.0, 0.1, -0.1], [0.0], 0.005)],
)
def test_inverted_double_pendulum_matches_mujoco(q0, ctrl, timestep):
    err, until, q_mj, _ = _errors(DOUBLE, q0, ctrl, 1.0, timestep=timestep)
    assert until == pytest.approx(1.0)
    assert err[0] < 0.01 and (err[1:] < 0.02).all(), err
    assert np.ptp(q_mj[:, 2]) > 0.2


def test_primitives_model_with_ball_joint_and_weld_matches_mujoco():
    # The maximal-coordinate engine (a ball joint and a welded part), 0.5 s of motion.
    mujoco = _mujoco()
    m = mujoco.MjModel.from_xml_path(str(PRIMITIVES))
    m.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    d = mujoco.MjData(m)
    ctrl = [0.1, -0.3]
    d.ctrl[:] = ctrl
    names = ["shoulder", "elbow", "wrist"]
    steps = 100
    q_mj = []
    for _ in range(steps + 1):
        q_mj.append([d.qpos[m.jnt_qposadr[m.joint(n).id]] for n in names])
        mujoco.mj_step(m, d)
    imported = import_mjcf(PRIMITIVES)
    scene = diffcam.load_scene(PRIMITIVES, dtype=torch.float64)
    action = torch.tensor(
        [[a["gear"] * c for a, c in zip(imported.actuators, ctrl, strict=True)]],
        dtype=torch.float64,
    )
    trajectory = scene.rollout(steps, policy=lambda state, t: action)
    columns = [scene.world.joint_names.index(n) for n in names]
    q_dc = np.stack(
        [
            physics.joint_positions(scene.world, trajectory[k])[0][0].numpy()
            for k in range(steps + 1)
        ]
    )[:, columns]
    err = np.abs(q_dc - np.array(q_mj)).max(0)
    assert err[0] < 0.02 and err[1] < 0.02 and err[2] < 0.01, err
    assert np.ptp(np.array(q_mj)[:, 0]) > 0.3
