"""Model description: plain dataclasses that say what a world contains.

A spec is what a user (or the scene loader) writes; `physics.build_world` turns a list of specs
into a `World` of batched tensors. Every number may be a Python number, a list, or a tensor that
requires grad. A tensor may carry a leading batch axis of size B (one value per world in the
batch); otherwise it is shared by the whole batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SHAPES = ("sphere", "box", "capsule", "cylinder", "plane", "hull")
JOINT_TYPES = ("hinge", "slider", "ball", "fixed")
MOTOR_TYPES = ("force", "servo")
COORDINATES = ("maximal", "reduced", "auto")

Number = Any  # float | Sequence[float] | torch.Tensor


class ModelError(ValueError):
    """An invalid model: the message names the body or joint, the field and what is accepted.

    The model rules (`physics.rules`) also say where the mistake is, so that a loader can name
    it in its own terms (the scene loader says ``joints.rail.limits`` in the file):

    Attributes:
        reason: what is wrong.
        accepted: what would be accepted, or None.
        section: "bodies", "joints" or "world", or None when the error is about no one item.
        index: the body's or joint's position in its list of the `WorldSpec`, or None.
        name: the body's or joint's name, or None.
        field: the key of the item that is wrong ("limits", "child", "static"), or None.
    """

    def __init__(
        self,
        reason: str,
        *,
        accepted: str | None = None,
        section: str | None = None,
        index: int | None = None,
        name: str | None = None,
        field: str | None = None,
    ):
        self.reason = reason
        self.accepted = accepted
        self.section = section
        self.index = index
        self.name = name
        self.field = field
        super().__init__(self._format())

    @property
    def key(self) -> str | None:
        """The key path in the `WorldSpec`: ``joints[2].limits``, ``bodies[0].static``, or None."""
        if self.section is None:
            return None
        item = self.section if self.index is None else f"{self.section}[{self.index}]"
        return item if self.field is None else f"{item}.{self.field}"

    def _format(self) -> str:
        message = self.reason
        if self.key is not None:
            kind = {"bodies": "body", "joints": "joint"}.get(self.section, self.section)
            if self.name is not None:
                message = f"{kind} {self.name!r}: {message}"
            message += f" (at {self.key})"
        if self.accepted:
            message += f" (accepted: {self.accepted})"
        return message

    def __reduce__(self):  # pickling (multiprocessing) passes the keywords back
        keywords = {k: getattr(self, k) for k in ("accepted", "section", "index", "name", "field")}
        return (_rebuild_model_error, (type(self), self.reason, keywords))


def _rebuild_model_error(kind: type, reason: str, keywords: dict) -> ModelError:
    return kind(reason, **keywords)


@dataclass
class Body:
    """A rigid body.

    Attributes:
        name: unique name.
        shape: one of "sphere", "box", "capsule", "cylinder", "plane", "hull".
        size: sphere: radius (m, a number); box: full extents [x, y, z] (m);
            capsule / cylinder: [radius, length] (m), the axis along body z (a capsule's length is
            that of its cylindrical part, caps excluded); plane: [x, y] extent (m) that is drawn;
            it collides as an infinite plane whose normal is body +z; hull: [x, y, z] (m), the
            full extents of the box with the hull's principal moments per kilogram (its
            inertia is that box's), the body frame at the centre of mass along the principal
            axes.
        points: hull only, (K, 3) body-frame points in units of ``size`` (a point p is at
            p * size metres, per axis), K >= 4: the vertices of the convex hull it collides
            with. They scale with the size (a gradient to the size moves them). The hull
            collides exactly against planes (by these points), boxes, spheres, capsules and
            other hulls (by its faces and edges, `physics.contact_hull`); against a cylinder,
            as the box that bounds them.
        mass: kg. Or give ``density`` (kg/m^3). Not needed when ``static``.
        static: a fixed body (floor, wall): infinite mass, never moves.
        position: world position of the centre of mass (m), shape (3,).
        rotation: world_from_body rotation, (3, 3). Or give ``quat`` [w, x, y, z].
        velocity, angular_velocity: initial world-frame velocities (m/s, rad/s), (3,).
        friction: Coulomb coefficient; a contact uses the geometric mean of both bodies'.
        restitution: coefficient in [0, 1]; a contact uses the larger of both bodies'.
        collide: whether the body takes part in contacts.
    """

    name: str
    shape: str
    size: Number
    mass: Number | None = None
    density: Number | None = None
    static: bool = False
    position: Number = (0.0, 0.0, 0.0)
    rotation: Number | None = None
    quat: Number | None = None
    velocity: Number = (0.0, 0.0, 0.0)
    angular_velocity: Number = (0.0, 0.0, 0.0)
    friction: Number = 0.5
    restitution: Number = 0.0
    collide: bool = True
    points: Number | None = None


@dataclass
class Motor:
    """An actuator on a hinge or slider joint: one action column.

    type "force": the action is the force (N, slider) or torque (N m, hinge), clipped to ±max.
    type "servo": the paper's servo. The action is a target position (m or rad) when
    ``target == "position"``: the servo asks for the joint velocity
    ``clip(gain * (target - q), ±max_velocity)`` and may use at most ``max_torque`` to get it.
    With ``target == "velocity"`` the action is the target velocity itself (clipped likewise).
    """

    type: str = "force"
    max: Number = float("inf")
    gain: Number = 10.0
    max_torque: Number = 10.0
    max_velocity: Number = 10.0
    target: str = "position"


@dataclass
class Joint:
    """A joint between a parent (a body name or "world") and a child body.

    Attributes:
        anchor: world coordinates (m) of the joint in the initial configuration, (3,).
        axis: world direction of the hinge or slider axis in the initial configuration, (3,).
            The joint coordinate q is measured from the initial configuration: the hinge angle
            (rad, right-handed about the axis) or the slider displacement (m, along the axis).
        limits: optional [lower, upper] on q (m or rad).
        damping: viscous damping on q (N s/m or N m s/rad).
        motor: optional `Motor`.
        position: optional initial q (m or rad; hinges and sliders): the world starts with
            the child's subtree moved this far from the configuration the bodies are drawn
            in (which stays the joint's zero). See `physics.posing`.
        velocity: optional initial q' (m/s or rad/s; hinges and sliders), added to the
            subtree's body velocities.
    """

    name: str
    type: str
    parent: str
    child: str
    anchor: Number = (0.0, 0.0, 0.0)
    axis: Number = (0.0, 0.0, 1.0)
    limits: Number | None = None
    damping: Number = 0.0
    motor: Motor | None = None
    position: Number | None = None
    velocity: Number | None = None


@dataclass
class WorldSpec:
    """Everything `build_world` needs.

    ``coordinates``: "maximal" (every body's pose and velocity integrated, joints and contacts
    as constraints: the general engine) or "reduced" (joint coordinates; only for trees of
    hinge, slider and fixed joints, with any motors and limits, and nothing that collides;
    exact joints and several times faster: see `physics.articulated`), or "auto": reduced when
    the model is such a tree, else maximal (the built world's ``coordinates`` says which).
    Scene files default to "auto"; a `WorldSpec` to "maximal".

    ``broadphase``: whether the eager step on the CPU leaves out the contact candidates that
    cannot act in the step (`physics.broadphase`): the same results, to round-off, faster;
    False keeps every candidate's rows in the solve, as compiled steps always do.
    """

    bodies: list[Body]
    joints: list[Joint] = field(default_factory=list)
    gravity: Number = (0.0, 0.0, -9.81)
    timestep: float = 0.01
    solver_iterations: int = 20
    coordinates: str = "maximal"
    broadphase: bool = True
