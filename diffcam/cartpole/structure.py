"""`CartPole`: where the cart and the pole are in a scene's state, and the pole's geometry,
read from the scene file; `episode_steps`: an episode's length in physics steps."""

from __future__ import annotations

import dataclasses

import torch

from physics.math3d import quat_to_matrix

from ..errors import SceneError


def as_floats(value) -> list[float]:
    """A number, list or tensor as a flat list of Python floats."""
    return torch.as_tensor(value, dtype=torch.float64).flatten().tolist()


@dataclasses.dataclass(frozen=True)
class CartPole:
    """The pendulum-cart's layout in a scene, read from its file.

    Attributes:
        cart, pole: body indices in the state.
        hinge_in_cart: (3,) the hinge anchor in the cart's frame (m).
        hanging_in_pole: (3,) unit vector from the hinge to the pole's centre, pole frame.
        centre_distance: hinge to pole centre (m).
        tip_distance: hinge to the far end of the pole (m).
        timestep: physics timestep (s).
        upright_tip: (3,) world position (m) of the tip of an upright pole on the cart at its
            file position (normally the rail's centre): the fixed target of the loss.
    """

    cart: int
    pole: int
    hinge_in_cart: tuple[float, float, float]
    hanging_in_pole: tuple[float, float, float]
    centre_distance: float
    tip_distance: float
    timestep: float
    upright_tip: tuple[float, float, float]

    @classmethod
    def from_scene(cls, scene) -> CartPole:
        """Read the layout from ``scene`` (a `diffcam.Scene`).

        Raises `SceneError` naming the file and key if the scene is not a pendulum-cart: bodies
        "cart" and "pole", a slider "rail" (world -> cart) along +x with a motor, a hinge
        "hinge" (cart -> pole) about +y, and the pole hanging straight down in the file.
        """
        file = scene.path

        def fail(key: str, reason: str, accepted: str) -> SceneError:
            return SceneError(reason, file=file, key=key, accepted=accepted)

        for name in ("cart", "pole"):
            if name not in scene.body_names:
                raise fail(
                    "bodies",
                    f"no body named {name!r}",
                    "a cart-pole scene such as the bundled "
                    "pendulum_cart, with bodies 'cart' and 'pole'",
                )
        joints = {j["name"]: j for j in scene.config.joints}
        expected = {
            "rail": ("slider", "world", "cart", [1.0, 0.0, 0.0]),
            "hinge": ("hinge", "cart", "pole", [0.0, 1.0, 0.0]),
        }
        for name, (kind, parent, child, axis) in expected.items():
            joint = joints.get(name)
            if joint is None:
                raise fail(
                    "joints",
                    f"no joint named {name!r}",
                    f"a {kind} joint {name!r} from {parent!r} to {child!r}",
                )
            if (joint["type"], joint["parent"], joint["child"]) != (kind, parent, child):
                raise fail(
                    f"joints.{name}",
                    "unexpected joint type or bodies",
                    f"type = {kind!r}, parent = {parent!r}, child = {child!r}",
                )
            if max(abs(a - b) for a, b in zip(as_floats(joint["axis"]), axis, strict=True)) > 1e-9:
                raise fail(
                    f"joints.{name}.axis", f"axis {as_floats(joint['axis'])}", f"axis = {axis}"
                )
        if "motor" not in joints["rail"]:
            raise fail("joints.rail.motor", "the rail has no motor", "a force motor")

        cart, pole = scene.body_names.index("cart"), scene.body_names.index("pole")
        anchor = torch.tensor(as_floats(joints["hinge"]["anchor"]), dtype=torch.float64)
        # The file's poses, in float64 (the scene's state may be float32).
        bodies = {b["name"]: b for b in scene.config.bodies}
        cart_p, cart_r, pole_p, pole_r = (
            torch.tensor(as_floats(bodies[name].get(key, default)), dtype=torch.float64)
            for name in ("cart", "pole")
            for key, default in (("position", [0.0] * 3), ("quat", [1.0, 0.0, 0.0, 0.0]))
        )
        cart_r, pole_r = quat_to_matrix(cart_r), quat_to_matrix(pole_r)
        arm = pole_p - anchor
        centre_distance = float(arm.norm())
        if centre_distance < 1e-6 or float((arm / centre_distance)[2]) > -1 + 1e-6:
            raise fail(
                "bodies.pole.position",
                "the pole does not hang straight down from the "
                f"hinge anchor {anchor.tolist()} (its centre is at {pole_p.tolist()})",
                "a pole centre directly below the hinge: theta = 0 is hanging",
            )
        hanging = pole_r.T @ (arm / centre_distance)
        body = bodies["pole"]
        size = as_floats(body["size"])
        if body["shape"] in ("capsule", "cylinder") and abs(abs(float(hanging[2])) - 1) < 1e-6:
            half = size[1] / 2 + (size[0] if body["shape"] == "capsule" else 0.0)
        elif body["shape"] == "box" and abs(abs(float(hanging[2])) - 1) < 1e-6:
            half = size[2] / 2
        else:
            raise fail(
                "bodies.pole",
                f"a {body['shape']} pole whose hanging direction in its "
                f"frame is {hanging.tolist()}",
                "a capsule, cylinder or box pole along its body z axis",
            )
        return cls(
            cart=cart,
            pole=pole,
            hinge_in_cart=tuple((cart_r.T @ (anchor - cart_p)).tolist()),
            hanging_in_pole=tuple(hanging.tolist()),
            centre_distance=centre_distance,
            tip_distance=centre_distance + half,
            timestep=float(scene.timestep),
            upright_tip=tuple(
                (anchor + anchor.new_tensor([0.0, 0.0, centre_distance + half])).tolist()
            ),
        )


def episode_steps(timestep: float, seconds: float, control_every: int) -> int:
    """Physics steps for ``seconds`` of simulated time at ``timestep`` (s), rounded to whole
    control steps of ``control_every`` physics steps (at least one)."""
    control_steps = max(1, round(seconds / (timestep * control_every)))
    return control_steps * control_every
