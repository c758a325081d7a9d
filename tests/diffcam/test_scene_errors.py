"""Bad scenes and overrides: one clean `SceneError` naming the file, the key path and what is
accepted; never an exception from inside torch or the physics engine."""

from __future__ import annotations

import copy

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import diffcam
from diffcam.errors import SceneError


def _load(scene_tools, tmp_path, data, **kw):
    path = scene_tools.write_scene(data, tmp_path)
    return diffcam.load_scene(path, **kw), path


def _error(scene_tools, tmp_path, data, **kw) -> SceneError:
    path = scene_tools.write_scene(data, tmp_path)
    with pytest.raises(SceneError) as info:
        diffcam.load_scene(path, **kw)
    err = info.value
    assert str(path) in str(err)
    return err


def test_tiny_scene_is_valid(scene_tools, tmp_path):
    scene, _ = _load(scene_tools, tmp_path, scene_tools.tiny())
    assert scene.actuator_names == ["rail"]


def test_unknown_key_did_you_mean(scene_tools, tmp_path):
    data = scene_tools.tiny()
    data["bodies"][2]["masss"] = data["bodies"][2].pop("mass")
    err = _error(scene_tools, tmp_path, data)
    assert err.key == "bodies.pole.masss"
    assert "did you mean 'mass'" in str(err)
    assert "density" in err.accepted  # lists the accepted keys


def test_unknown_top_level_and_section_keys(scene_tools, tmp_path):
    data = scene_tools.tiny()
    data["camra"] = {}
    err = _error(scene_tools, tmp_path, data)
    assert "did you mean 'camera'" in str(err)
    data = scene_tools.tiny()
    data["world"]["gravty"] = [0.0, 0.0, -1.0]
    err = _error(scene_tools, tmp_path, data)
    assert err.key == "world.gravty" and "gravity" in str(err)


@pytest.mark.parametrize(
    "where, key, value, expect",
    [
        (("bodies", 1), "mass", -1.0, "bodies.cart.mass"),
        (("bodies", 1), "mass", "heavy", "bodies.cart.mass"),
        (("bodies", 1), "size", [0.3, 0.2], "bodies.cart.size"),
        (("bodies", 3), "size", [0.2], "bodies.ball.size"),
        (("bodies", 1), "position", [0.0, 1.0], "bodies.cart.position"),
        (("bodies", 1), "shape", "cube", "bodies.cart.shape"),
        (("bodies", 1), "texture", "woood", "bodies.cart.texture"),
        (("bodies", 1), "static", "yes", "bodies.cart.static"),
        (("bodies", 3), "restitution", 1.5, "bodies.ball.restitution"),
        (("bodies", 3), "quat", [0.0, 0.0, 0.0, 0.0], "bodies.ball.quat"),
        (("joints", 0), "child", "kart", "joints.rail.child"),
        (("joints", 0), "parent", "wrld", "joints.rail.parent"),
        (("joints", 0), "type", "prismatic", "joints.rail.type"),
        (("joints", 0), "axis", [0.0, 0.0, 0.0], "joints.rail.axis"),
        (("joints", 0), "limits", [1.0, -1.0], "joints.rail.limits"),
        (("joints", 0), "motor", {"type": "force", "maxx": 3.0}, "joints.rail.motor.maxx"),
        (("joints", 0), "position", "far", "joints.rail.position"),
        (("joints", 0), "velocity", float("inf"), "joints.rail.velocity"),
        (("camera",), "resolution", [0, 10], "camera.resolution"),
        (("camera",), "fov_y_deg", 200.0, "camera.fov_y_deg"),
        (("camera",), "look_at", [0.0, -3.0, 1.0], "camera.look_at"),
        (("camera",), "background", "skyy", "camera.background"),
        (("world",), "timestep", 0.0, "world.timestep"),
        (("world",), "solver_iterations", 2.5, "world.solver_iterations"),
        (("world",), "gravity", float("nan"), "world.gravity"),
        (("world",), "coordinates", "joint", "world.coordinates"),
    ],
)
def test_bad_values_name_the_key(scene_tools, tmp_path, where, key, value, expect):
    data = scene_tools.tiny()
    table = data[where[0]] if len(where) == 1 else data[where[0]][where[1]]
    table[key] = value
    err = _error(scene_tools, tmp_path, data)
    assert err.key == expect, str(err)
    assert err.accepted or "did you mean" in str(err) or "must" in str(err), str(err)


def test_unknown_body_did_you_mean(scene_tools, tmp_path):
    data = scene_tools.tiny()
    data["joints"][1]["child"] = "pol"
    err = _error(scene_tools, tmp_path, data)
    assert "did you mean 'pole'" in str(err) and "cart" in err.accepted


def test_missing_required_and_mass(scene_tools, tmp_path):
    data = scene_tools.tiny()
    del data["bodies"][1]["mass"]
    err = _error(scene_tools, tmp_path, data)
    assert err.key == "bodies.cart.mass" and "density" in err.accepted
    data = scene_tools.tiny()
    del data["camera"]
    err = _error(scene_tools, tmp_path, data)
    assert err.key == "camera"


def test_duplicate_names_and_static_plane(scene_tools, tmp_path):
    data = scene_tools.tiny()
    data["bodies"][2]["name"] = "cart"
    assert "duplicate" in str(_error(scene_tools, tmp_path, data))
    data = scene_tools.tiny()
    data["bodies"][0]["static"] = False
    data["bodies"][0]["mass"] = 1.0
    assert "plane must be static" in str(_error(scene_tools, tmp_path, data))


def test_missing_files(scene_tools, tmp_path):
    with pytest.raises(SceneError, match="no such scene file"):
        diffcam.load_scene(tmp_path / "nope.toml")
    data = scene_tools.tiny()
    data["textures"]["wood"] = "wod.png"
    err = _error(scene_tools, tmp_path, data)
    assert err.key == "textures.wood" and "wood.png" in str(err)
    (tmp_path / "bad.png").write_text("not an image")
    data["textures"]["wood"] = "bad.png"
    err = _error(scene_tools, tmp_path, data)
    assert "cannot read" in str(err)


def test_invalid_toml(tmp_path):
    path = tmp_path / "broken.toml"
    path.write_text("[world]\ngravity = [0, 0, \n")
    with pytest.raises(SceneError, match="invalid TOML") as info:
        diffcam.load_scene(path)
    assert str(path) in str(info.value)


def test_bad_overrides(scene_tools, tmp_path):
    path = scene_tools.write_scene(scene_tools.tiny(), tmp_path)
    with pytest.raises(SceneError, match="did you mean 'bodies.pole.mass'") as info:
        diffcam.load_scene(path, overrides={"bodies.pole.mas": 1.0})
    assert "bodies.pole." in info.value.accepted
    with pytest.raises(SceneError, match="names nothing"):
        diffcam.load_scene(path, overrides={"bodies.nobody.mass": 1.0})
    with pytest.raises(SceneError, match="does not fit") as info:
        diffcam.load_scene(path, overrides={"world.gravity": torch.zeros(2)})
    assert "(override)" in info.value.key
    with pytest.raises(SceneError, match="out of range"):
        diffcam.load_scene(path, overrides={"bodies.pole.mass": torch.tensor(-1.0)})
    with pytest.raises(SceneError):
        diffcam.load_scene(path, batch_size=3, overrides={"bodies.pole.mass": torch.ones(2)})
    with pytest.raises(SceneError):
        diffcam.load_scene(path, overrides={"textures.wood": torch.ones(4, 8, 8)})
    with pytest.raises(SceneError):
        diffcam.load_scene(path, batch_size=0)


# --------------------------------------------------------------------------- property-based
# Numbers stay moderate (|x| <= 100, or non-finite / absurd values the validator must reject):
# extreme-but-valid geometry (a joint 600 m from its body) is the engine's conditioning
# problem, not a scene-file mistake.
_JUNK = st.one_of(
    st.integers(-3, 3),
    st.floats(-100, 100, width=32),
    st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e30, -1e-30, 1e-9, 0.0]),
    st.booleans(),
    st.text(max_size=6),
    st.sampled_from(["world", "cart", "pole", "ball", "wood", "box", "hinge", "sphere", ""]),
    st.lists(st.floats(-2, 2, width=32), max_size=5),
    st.lists(st.integers(-1, 3), max_size=4),
    st.dictionaries(st.sampled_from(["type", "max", "name", "x"]), st.integers(0, 2), max_size=2),
)


def _paths(node, prefix=()):
    """Every (path) into the nested scene data."""
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


def _mutate(data, path, op, junk, new_key):
    data = copy.deepcopy(data)
    if not path:
        return data
    parent = data
    for p in path[:-1]:
        parent = parent[p]
    last = path[-1]
    if op == "replace":
        parent[last] = junk
    elif op == "delete":
        del parent[last]
    elif op == "add_key" and isinstance(parent[last], dict):
        parent[last][new_key] = junk
    elif op == "duplicate" and isinstance(parent, list):
        parent.append(copy.deepcopy(parent[last]))
    return data


def _base():
    # mirror of conftest.TINY_SCENE (hypothesis strategies cannot take fixtures)
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "_diffcam_scene_conftest", Path(__file__).with_name("conftest.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.TINY_SCENE, mod.to_toml


_TINY, _TO_TOML = _base()


@st.composite
def _mutations(draw):
    data = _TINY
    n = draw(st.integers(1, 3))
    for _ in range(n):
        paths = list(_paths(data))[1:]
        path = draw(st.sampled_from(paths))
        op = draw(st.sampled_from(["replace", "replace", "delete", "add_key", "duplicate"]))
        junk = draw(_JUNK)
        new_key = draw(st.sampled_from(["mass", "size", "colour", "motor", "quat", "zzz"]))
        data = _mutate(data, path, op, junk, new_key)
    return data


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,  # the same examples on every run: CI never flakes
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=_mutations())
@pytest.mark.slow
def test_malformed_scenes_give_only_clean_errors(tmp_path, data):
    path = tmp_path / "fuzz.toml"
    path.write_text(_TO_TOML(data), encoding="utf-8")
    try:
        scene = diffcam.load_scene(path)
    except SceneError as e:
        msg = str(e)
        assert msg.startswith(str(path)), msg
        assert "\n" not in msg
        return
    # accepted: it must then simulate and render
    state = scene.step(scene.initial_state(), None)
    img = scene.render(state)
    assert img.shape[0] == 1


@settings(max_examples=40, deadline=None, derandomize=True)
@given(text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=80))
def test_garbage_text_gives_clean_errors(text):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "garbage.toml"
        path.write_text(text, encoding="utf-8")
        with pytest.raises(SceneError):
            diffcam.load_scene(path)


_OVERRIDE_PATHS = [
    "world.gravity",
    "world.timestep",
    "camera.fov_y_deg",
    "camera.position",
    "camera.focal",
    "light.ambient",
    "textures.wood",
    "bodies.pole.mass",
    "bodies.pole.size",
    "bodies.ball.size",
    "bodies.floor.mass",
    "bodies.cart.quat",
    "joints.hinge.damping",
    "joints.rail.limits",
    "joints.rail.motor.max",
    "joints.rail.motor.gain",
    "bodies.nobody.mass",
    "bodies.pole",
    "world",
    "",
]
_OVERRIDE_VALUES = st.one_of(
    st.floats(-20, 20, width=32),
    st.sampled_from([float("nan"), float("inf"), None, "big", True]),
    st.lists(st.floats(-5, 5, width=32), max_size=4),
    st.lists(st.integers(0, 3), min_size=0, max_size=3).map(
        lambda shape: torch.rand(tuple(shape)) * 4 - 1
    ),
)


@settings(max_examples=120, deadline=None, derandomize=True)
@given(
    overrides=st.dictionaries(
        st.sampled_from(_OVERRIDE_PATHS), _OVERRIDE_VALUES, min_size=1, max_size=3
    ),
    batch=st.integers(1, 3),
)
def test_random_overrides_give_only_clean_errors(overrides, batch):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "scene.toml"
        path.write_text(_TO_TOML(_TINY), encoding="utf-8")
        try:
            scene = diffcam.load_scene(path, batch_size=batch, overrides=overrides)
        except SceneError as e:
            assert str(e).startswith(str(path))
            return
        img = scene.render(scene.step(scene.initial_state(), None))
        assert img.shape[0] == batch


def test_reduced_coordinates_explain_why_not(scene_tools, tmp_path):
    # The tiny scene's ball is a free body that bounces on the floor.
    data = scene_tools.tiny()
    data["world"]["coordinates"] = "reduced"
    err = _error(scene_tools, tmp_path, data)
    assert err.key == "world.coordinates", str(err)
    assert "'floor' and 'ball' may collide" in err.reason, str(err)
    assert "maximal" in err.accepted


def test_joint_start_keys_in_files_and_overrides(scene_tools, tmp_path):
    """`position` / `velocity` of a hinge or slider start it in joint space (read back by
    `physics.joint_positions`); on a fixed or ball joint they are an error naming the key."""
    import physics

    data = scene_tools.tiny()
    data["joints"][0]["position"] = 0.25  # the rail (a slider)
    path = scene_tools.write_scene(data, tmp_path)
    scene = diffcam.load_scene(path, overrides={"joints.rail.velocity": -0.5}, dtype=torch.float64)
    q, q_dot = physics.joint_positions(scene.world, scene.initial_state())
    rail = scene.world.joint_names.index("rail")
    assert abs(float(q[0, rail]) - 0.25) < 1e-9 and abs(float(q_dot[0, rail]) + 0.5) < 1e-9
    fixed = scene_tools.tiny()
    weld = fixed["joints"][1]
    weld.update(type="fixed", position=0.1)
    del weld["damping"], weld["axis"]
    err = _error(scene_tools, tmp_path, fixed)
    assert err.key == "joints.hinge.position" and "not allowed" in str(err), str(err)


def test_camera_resolution_can_be_overridden(scene_tools, tmp_path):
    path = scene_tools.write_scene(scene_tools.tiny(), tmp_path)
    scene = diffcam.load_scene(path, overrides={"camera.resolution": (40, 30)})
    assert (scene.camera.width, scene.camera.height) == (40, 30)
    with pytest.raises(SceneError, match="camera.resolution"):
        diffcam.load_scene(path, overrides={"camera.resolution": (40.5, 30)})


def _physics_spec(data):
    """The `physics.WorldSpec` of a scene's data, made without the scene loader's checks."""
    import physics

    drawn = ("texture", "color", "uv_scale")
    bodies = [
        physics.Body(**{k: v for k, v in b.items() if k not in drawn}) for b in data["bodies"]
    ]
    joints = []
    for j in data.get("joints", []):
        j = dict(j)
        if "motor" in j:
            j["motor"] = physics.Motor(**j["motor"])
        joints.append(physics.Joint(**j))
    return physics.WorldSpec(bodies, joints, **data.get("world", {}))


def _set(data, section, index, **changes):
    for key, value in changes.items():
        if value is None:
            data[section][index].pop(key, None)
        else:
            data[section][index][key] = value
    return data


@pytest.mark.parametrize(
    "section, index, changes, key, reason",
    [
        ("joints", 0, {"limits": [0.5, 0.5]}, "joints.rail.limits", "lower < upper"),
        ("joints", 0, {"limits": [1.0, -1.0]}, "joints.rail.limits", "lower < upper"),
        ("bodies", 1, {"static": True, "mass": None}, "joints.rail.child", "a dynamic body"),
        ("bodies", 1, {"static": True}, "bodies.cart.mass", "a static body takes no mass"),
        ("bodies", 0, {"static": False, "mass": 1.0}, "bodies.floor.static", "must be static"),
        ("bodies", 2, {"name": "cart"}, "bodies[2].name", "duplicate body name"),
        ("joints", 1, {"type": "ball"}, "joints.hinge.damping", "not allowed on a ball joint"),
        ("joints", 1, {"child": "pol"}, "joints.hinge.child", "did you mean 'pole'"),
    ],
)
def test_scene_loader_and_physics_apply_the_same_model_rules(
    scene_tools, tmp_path, section, index, changes, key, reason
):
    import physics
    from diffcam.scene.validate import scene_key

    data = _set(scene_tools.tiny(), section, index, **changes)
    err = _error(scene_tools, tmp_path, data)
    assert err.key == key and reason in err.reason, str(err)
    with pytest.raises(physics.ModelError) as info:
        physics.build_world(_physics_spec(data))
    assert scene_key(info.value) == key and info.value.reason == err.reason, str(info.value)
    assert info.value.key in str(info.value)  # joints[0].limits, bodies[1].mass, ...


def test_equal_limits_from_an_override_name_the_key(scene_tools, tmp_path):
    path = scene_tools.write_scene(scene_tools.tiny(), tmp_path)
    with pytest.raises(SceneError) as info:
        diffcam.load_scene(path, overrides={"joints.rail.limits": torch.tensor([0.3, 0.3])})
    assert info.value.key.startswith("joints.rail.limits") and "lower < upper" in str(info.value)


@pytest.mark.parametrize(
    "section, index, changes",
    [
        ("joints", 0, {"parent": "floor"}),  # a static parent is a fixed frame like the world
        ("joints", 1, {"type": "ball", "damping": 0.0}),  # zero damping on any joint
        ("bodies", 0, {"velocity": [0.0, 0.0, 0.0]}),  # a static body at rest
    ],
)
def test_scene_loader_and_physics_accept_the_same_models(
    scene_tools, tmp_path, section, index, changes
):
    import physics

    data = _set(scene_tools.tiny(), section, index, **changes)
    scene, _ = _load(scene_tools, tmp_path, data)
    world = physics.build_world(_physics_spec(data))
    assert world.joint_types == scene.world.joint_types
