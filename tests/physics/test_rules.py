"""The model rules (`physics.rules`): what `build_world` rejects, with the key path of the
mistake in the error and in the message; the scene loader checks the same functions
(tests/diffcam/test_scene_errors.py checks that the two layers agree)."""

from __future__ import annotations

import pickle

import pytest

import physics


def _cart(**changes):
    """A cart on a rail (joints[0]) and a pole on a hinge (joints[1]), with ``changes``:
    ``rail__limits=...`` sets a field of the body or joint named before the ``__``."""
    cart = physics.Body("cart", "box", [0.3, 0.2, 0.1], mass=1.0, position=[0, 0, 1])
    pole = physics.Body("pole", "capsule", [0.05, 0.8], mass=0.2, position=[0, 0, 0.5])
    rail = physics.Joint("rail", "slider", "world", "cart", anchor=[0, 0, 1], axis=[1, 0, 0])
    hinge = physics.Joint("hinge", "hinge", "cart", "pole", anchor=[0, 0, 1], axis=[0, 1, 0])
    items = {"cart": cart, "pole": pole, "rail": rail, "hinge": hinge}
    for key, value in changes.items():
        name, field = key.split("__")
        setattr(items[name], field, value)
    return physics.WorldSpec([cart, pole], [rail, hinge])


@pytest.mark.parametrize(
    "changes, key, reason",
    [
        ({"rail__limits": [0.5, 0.5]}, "joints[0].limits", "lower < upper"),
        ({"rail__limits": [1.0, -1.0]}, "joints[0].limits", "lower < upper"),
        ({"cart__static": True, "cart__mass": None}, "joints[0].child", "must be a dynamic body"),
        ({"pole__static": True, "pole__mass": None}, "joints[1].child", "must be a dynamic body"),
        ({"cart__static": True}, "bodies[0].mass", "a static body takes no mass"),
        ({"cart__mass": None}, "bodies[0].mass", "needs a mass"),
        ({"cart__density": 10.0}, "bodies[0].density", "mass or density, not both"),
        ({"pole__name": "cart"}, "bodies[1].name", "duplicate body name 'cart'"),
        ({"hinge__name": "rail"}, "joints[1].name", "duplicate joint name 'rail'"),
        ({"hinge__child": "pol"}, "joints[1].child", "did you mean 'pole'"),
        ({"hinge__parent": "pole"}, "joints[1].child", "the same body"),
        ({"hinge__type": "ball", "hinge__damping": 0.1}, "joints[1].damping", "hinge or slider"),
        ({"hinge__type": "fixed", "hinge__position": 0.1}, "joints[1].position", "not allowed"),
    ],
)
def test_model_rules_name_the_key_path(changes, key, reason):
    with pytest.raises(physics.ModelError) as info:
        physics.build_world(_cart(**changes))
    error = info.value
    assert error.key == key, str(error)
    assert f"(at {key})" in str(error) and reason in str(error), str(error)
    assert error.name in str(error)


def test_a_static_body_can_be_a_parent_and_a_ball_joint_zero_damping():
    post = physics.Body("post", "box", [0.1, 0.1, 0.1], static=True, position=[0, 0, 1])
    bob = physics.Body("bob", "sphere", 0.1, mass=1.0, position=[0.5, 0, 1])
    for kind in ("hinge", "ball"):
        joint = physics.Joint("j", kind, "post", "bob", anchor=[0, 0, 1], axis=[0, 1, 0])
        world = physics.build_world(physics.WorldSpec([post, bob], [joint]))
        assert world.joint_parent == [0] and world.joint_child == [1]


def test_limits_are_checked_per_batch_element():
    import torch

    limits = torch.tensor([[-1.0, 1.0], [0.2, 0.2]])
    with pytest.raises(physics.ModelError, match=r"lower < upper.*\(at joints\[0\]\.limits\)"):
        physics.build_world(_cart(rail__limits=limits), batch_size=2)


def test_model_error_keeps_its_key_through_pickling():
    with pytest.raises(physics.ModelError) as info:
        physics.build_world(_cart(rail__limits=[0.5, 0.5]))
    copy = pickle.loads(pickle.dumps(info.value))
    assert (copy.key, copy.name, copy.reason, str(copy)) == (
        info.value.key, info.value.name, info.value.reason, str(info.value),
    )  # fmt: skip
