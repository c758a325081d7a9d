"""The default scene path (issue 20): ``coordinates = "auto"`` and compiling by default."""

from __future__ import annotations

import pytest
import torch

import diffcam
import physics
from diffcam.scene import SCENES_DIR
from physics import ahead_of_time, rollouts


def _tree(data: dict) -> dict:
    """The tiny scene without its free ball: a cart-pole that collides with nothing."""
    data["bodies"] = [b for b in data["bodies"] if b["name"] != "ball"]
    return data


def _load(scene_tools, tmp_path, data, name="scene.toml", **kwargs):
    return diffcam.load_scene(scene_tools.write_scene(data, tmp_path, name), **kwargs)


def test_auto_is_the_default_and_picks_reduced_for_a_tree(scene_tools, tmp_path):
    data = _tree(scene_tools.tiny())
    assert "coordinates" not in data["world"]
    assert _load(scene_tools, tmp_path, data).world.coordinates == "reduced"
    data["world"]["coordinates"] = "auto"
    scene = _load(scene_tools, tmp_path, data, "auto.toml")
    assert scene.world.coordinates == "reduced" and scene.world.structure.tree is not None
    assert "reduced coordinates" in scene.summary()


def test_auto_falls_back_to_maximal_for_contacts(scene_tools, tmp_path):
    data = scene_tools.tiny()  # the ball collides with the floor
    scene = _load(scene_tools, tmp_path, data)
    assert scene.world.coordinates == "maximal" and scene.world.structure.tree is None
    state = scene.step(scene.initial_state())
    assert torch.isfinite(state.position).all()


def test_auto_falls_back_to_maximal_for_a_loop_and_a_ball_joint(scene_tools, tmp_path):
    data = _tree(scene_tools.tiny())
    # a second joint on the pole closes a loop (cart - pole - world)
    data["joints"].append({"name": "loop", "type": "hinge", "parent": "world", "child": "pole",
                           "anchor": [0.0, -0.1, 1.0], "axis": [0.0, 1.0, 0.0]})  # fmt: skip
    assert _load(scene_tools, tmp_path, data, "loop.toml").world.coordinates == "maximal"
    data = _tree(scene_tools.tiny())
    data["joints"][1]["type"] = "ball"
    del data["joints"][1]["damping"], data["joints"][1]["axis"]
    assert _load(scene_tools, tmp_path, data, "ball.toml").world.coordinates == "maximal"


def test_explicit_coordinates_are_respected(scene_tools, tmp_path):
    data = _tree(scene_tools.tiny())
    data["world"]["coordinates"] = "maximal"
    assert _load(scene_tools, tmp_path, data, "maximal.toml").world.coordinates == "maximal"
    data["world"]["coordinates"] = "reduced"
    assert _load(scene_tools, tmp_path, data, "reduced.toml").world.coordinates == "reduced"
    data = scene_tools.tiny()
    data["world"]["coordinates"] = "reduced"  # the ball collides: an error, not a fallback
    with pytest.raises(diffcam.SceneError) as err:
        _load(scene_tools, tmp_path, data, "bad.toml")
    assert err.value.key == "world.coordinates"


def test_bundled_scenes_auto_choice():
    chosen = {p.name: diffcam.load_scene(p).world.coordinates for p in SCENES_DIR.glob("*.toml")}
    assert chosen["pendulum_cart.toml"] == "reduced"  # the shipped controllers pass on it
    assert chosen["pendulum.toml"] == "reduced"
    assert chosen["ball_throw.toml"] == "maximal"  # contacts


def test_physics_auto_coordinates():
    def spec(coordinates, joint="hinge"):
        rod = physics.Body("rod", "box", [0.02, 0.02, 1.0], mass=1.0, position=[0, 0, 1.5])
        hinge = physics.Joint("hinge", joint, "world", "rod", anchor=[0, 0, 2], axis=[0, 1, 0])
        return physics.WorldSpec([rod], [hinge], coordinates=coordinates)

    assert physics.WorldSpec([]).coordinates == "maximal"  # the engine's own default is kept
    assert physics.build_world(spec("auto")).coordinates == "reduced"
    assert physics.build_world(spec("auto", "ball")).coordinates == "maximal"
    assert physics.build_world(spec("maximal")).coordinates == "maximal"
    with pytest.raises(physics.ReducedCoordinatesError):
        physics.build_world(spec("reduced", "ball"))


def test_default_path_compiles_after_its_threshold(scene_tools, tmp_path, monkeypatch):
    """Eager until ``compile_after`` state-steps, then compiled; explicit flags win."""
    calls = []

    def fake_compiled_step(dtype):
        def compiled(world, state, action=None):
            calls.append(state.position.shape[0])
            return physics.step(world, state, action)

        return compiled

    monkeypatch.setattr(physics, "compiled_step", fake_compiled_step)
    monkeypatch.setattr(rollouts, "compiled_step", fake_compiled_step)
    monkeypatch.setenv("DIFFCAM_CACHE_DIR", str(tmp_path / "empty"))  # no library on disk
    scene = _load(scene_tools, tmp_path, _tree(scene_tools.tiny()), batch_size=2)
    scene.compile_after = 10
    state = scene.initial_state()
    for _ in range(5):  # 10 state-steps: the threshold is reached by the fifth
        state = scene.step(state)
    assert calls == [] and scene.compiling
    state = scene.step(state)
    assert calls == [2]
    scene.step(state, compile=False)
    assert calls == [2]
    scene.rollout(3)
    assert calls == [2] * 4
    fresh = _load(scene_tools, tmp_path, _tree(scene_tools.tiny()), batch_size=2)
    fresh.compile_after = None  # never by default
    fresh.rollout(50)
    fresh.step(fresh.initial_state(), compile=True)
    assert calls == [2] * 5 and not fresh.compiling


def test_default_path_compiles_sooner_when_the_libraries_are_on_disk(
    scene_tools, tmp_path, monkeypatch
):
    """With the compiled step's libraries on disk (`physics.ahead_of_time.on_disk`), the
    default path compiles after a tenth of ``compile_after``, asking the disk once per batch
    size and grad mode."""
    asked = []

    def on_disk(world, state, action, backward, rollout=False):
        asked.append((state.position.shape[0], backward, action is None))
        return state.position.shape[0] == 4

    monkeypatch.setattr(ahead_of_time, "on_disk", on_disk)
    compiled = []
    for module in (physics, rollouts):
        monkeypatch.setattr(
            module, "compiled_step", lambda dtype: compiled.append(dtype) or physics.step
        )
    scene = _load(scene_tools, tmp_path, _tree(scene_tools.tiny()), batch_size=2)
    scene.compile_after = 100
    for _ in range(6):  # 12 state-steps: past a tenth, but nothing on disk at B = 2
        scene.step(scene.initial_state(), compile=None)
    assert not scene.compiling and asked == [(2, True, False)]
    with torch.no_grad():
        scene.rollout(3)  # asked again for the no-grad libraries
    assert not scene.compiling and asked[-1] == (2, False, False)
    other = _load(scene_tools, tmp_path, _tree(scene_tools.tiny()), "b4.toml", batch_size=4)
    other.compile_after = 100
    for _ in range(2):  # 8 state-steps: below a tenth
        other.step(other.initial_state())
    assert not other.compiling and len(asked) == 2
    other.step(other.initial_state())  # 12: past a tenth, and on disk at B = 4
    assert other.compiling and len(asked) == 3 and compiled == []
    other.step(other.initial_state())
    assert len(compiled) == 1


@pytest.mark.slow
def test_default_path_stays_eager_under_forward_mode_ad(scene_tools, tmp_path, monkeypatch):
    for module in (physics, rollouts):
        monkeypatch.setattr(module, "compiled_step", lambda dtype: pytest.fail("compiled"))
    scene = _load(scene_tools, tmp_path, _tree(scene_tools.tiny()), dtype=torch.float64)
    scene.compile_after = 0
    import torch.autograd.forward_ad as fwad

    with fwad.dual_level():
        state = scene.initial_state()
        velocity = fwad.make_dual(state.linear_velocity, torch.ones_like(state.linear_velocity))
        out = scene.step(state.replace(linear_velocity=velocity))
        assert fwad.unpack_dual(out.position).tangent is not None
