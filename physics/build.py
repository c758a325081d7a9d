"""`build_world`: a `WorldSpec` checked against the model rules and turned into a `World`.

The builder chooses the formulation: ``spec.coordinates`` "maximal" steps with `physics.step`'s
constraint engine, "reduced" with `physics.articulated` on the joint tree (built here, in the
world's `Structure`, or a `ReducedCoordinatesError` saying why the model does not fit), "auto"
reduced when the model fits and maximal otherwise (``world.coordinates`` says which).
"""

from __future__ import annotations

import math

import torch

from .collision_pairs import contact_candidates
from .inertia import shape_volume
from .math3d import quat_to_matrix, safe_norm, tangent_basis
from .parameters import as_tensor, check_positive, first_device, padded_size
from .posing import JointMotion, pose_joints
from .rules import check_limits, check_model
from .spec import COORDINATES, MOTOR_TYPES, Body, Joint, ModelError, WorldSpec
from .structure import index_structure, reduced_coordinates_fit
from .world import World

Tensor = torch.Tensor

_SIZE_COUNT = {"sphere": 1, "box": 3, "capsule": 2, "cylinder": 2, "plane": 2, "hull": 3}
_JOINT_FIELDS = (
    "parent", "child", "anchor_parent", "anchor_child", "axis_parent", "axis_child", "ref_parent",
    "ref_child", "rest_rotation", "damping", "lower", "upper",
)  # fmt: skip
_MOTOR_FIELDS = ("max", "gain", "max_torque", "max_velocity")


def build_world(
    spec: WorldSpec,
    batch_size: int = 1,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> World:
    """Build a batched `World` from a `WorldSpec`.

    Args:
        spec: bodies, joints, gravity (m/s^2), timestep (s), solver iterations, coordinates.
        batch_size: B, the number of worlds simulated side by side.
        device: where the tensors live; None follows the first tensor in the spec, else CPU.
        dtype: floating dtype of every parameter and state tensor.

    Raises:
        ModelError: an invalid model, with the body or joint, the field and what is accepted
            (a broken model rule of `physics.rules` also carries its key path).
    """
    if device is None:
        device = first_device(spec)
    batch = int(batch_size)
    if batch < 1:
        raise ModelError(f"batch_size must be a positive integer, got {batch_size!r}")
    kw = {"dtype": dtype, "device": device}
    if not spec.bodies:
        raise ModelError("a world needs at least one body")
    check_model(spec)

    bodies = list(spec.bodies)
    is_static = [bool(b.static) for b in bodies]
    body = _body_tensors(bodies, batch, dtype, device)
    position = torch.stack(body["position"], 1)
    rotation = torch.stack(body["rotation"], 1)
    static_mask = torch.tensor(is_static, device=device)[None, :, None]
    zero3 = torch.zeros((), **kw)
    velocity = torch.where(static_mask, zero3, torch.stack(body["velocity"], 1))
    spin = torch.where(static_mask, zero3, torch.stack(body["angular_velocity"], 1))

    joint, actuators, motions = _joint_tensors(spec, position, rotation, batch, dtype, device)

    def joint_stack(key: str, tail: tuple[int, ...]) -> Tensor:
        if spec.joints:
            return torch.stack(joint[key], 1)
        return torch.zeros(batch, 0, *tail, **kw)

    motor = _motor_tensors(actuators, batch, dtype, device)

    def motor_stack(key: str) -> Tensor:
        if actuators:
            return torch.stack(motor[key], 1)
        return torch.zeros(batch, 0, **kw)

    if spec.coordinates not in COORDINATES:
        raise ModelError(
            f"world: coordinates must be one of {', '.join(COORDINATES)}, got {spec.coordinates!r}"
        )
    if motions:
        position, rotation, velocity, spin = pose_joints(
            position, rotation, velocity, spin, motions, joint["parent"], joint["child"]
        )
    contacts = contact_candidates(bodies, spec.joints, dtype, device)
    world = World(
        body_names=[b.name for b in bodies],
        shapes=[b.shape for b in bodies],
        is_static=is_static,
        joint_names=[j.name for j in spec.joints],
        joint_types=[j.type for j in spec.joints],
        joint_parent=joint["parent"],
        joint_child=joint["child"],
        actuator_names=[a[0] for a in actuators],
        actuator_joint=[a[1] for a in actuators],
        actuator_type=[a[2].type for a in actuators],
        actuator_target=[a[2].target for a in actuators],
        joint_has_limits=[j.limits is not None for j in spec.joints],
        timestep=float(spec.timestep),
        solver_iterations=int(spec.solver_iterations),
        relax_iterations=int(spec.solver_iterations),
        restitution_threshold=0.2,
        contact_slop=0.005,
        penetration_recovery=0.2,
        joint_position_iterations=1,
        mass=torch.stack(body["mass"], 1),
        size=torch.stack(body["size"], 1),
        friction=torch.stack(body["friction"], 1),
        restitution=torch.stack(body["restitution"], 1),
        gravity=as_tensor(spec.gravity, (3,), batch, "world: gravity", dtype, device),
        joint_damping=joint_stack("damping", ()),
        joint_lower=joint_stack("lower", ()),
        joint_upper=joint_stack("upper", ()),
        motor_max=motor_stack("max"),
        motor_gain=motor_stack("gain"),
        motor_max_torque=motor_stack("max_torque"),
        motor_max_velocity=motor_stack("max_velocity"),
        anchor_parent=joint_stack("anchor_parent", (3,)),
        anchor_child=joint_stack("anchor_child", (3,)),
        axis_parent=joint_stack("axis_parent", (3,)),
        axis_child=joint_stack("axis_child", (3,)),
        ref_parent=joint_stack("ref_parent", (3,)),
        ref_child=joint_stack("ref_child", (3,)),
        rest_rotation=joint_stack("rest_rotation", (3, 3)),
        initial_position=position,
        initial_rotation=rotation,
        initial_velocity=velocity,
        initial_angular_velocity=spin,
        **contacts,
        coordinates=spec.coordinates,
        broadphase=bool(spec.broadphase),
    )
    if spec.coordinates == "auto":
        world.coordinates = "reduced" if reduced_coordinates_fit(world) else "maximal"
    world.structure = index_structure(world)
    if not (spec.timestep > 0 and math.isfinite(spec.timestep)):
        raise ModelError(
            f"world: timestep must be a positive number of seconds, got {spec.timestep!r}"
        )
    if int(spec.solver_iterations) < 1:
        raise ModelError("world: solver_iterations must be at least 1")
    return world


def _body_tensors(bodies: list[Body], batch: int, dtype, device) -> dict[str, list[Tensor]]:
    """Per body (in order): size, mass, position, rotation, velocity, angular_velocity, friction
    and restitution as (B, ...) tensors; a static body's mass is 1 (unused)."""
    kw = {"dtype": dtype, "device": device}
    out: dict[str, list[Tensor]] = {
        k: []
        for k in (
            "size", "mass", "position", "rotation", "velocity", "angular_velocity", "friction",
            "restitution",
        )
    }  # fmt: skip
    for body in bodies:
        where = f"body {body.name!r}"
        size = padded_size(body, batch, dtype, device)
        check_positive(size[:, : _SIZE_COUNT[body.shape]], f"{where}: size")
        out["size"].append(size)
        if body.static:
            mass = torch.ones(batch, **kw)
        elif body.mass is not None:
            mass = as_tensor(body.mass, (), batch, f"{where}: mass", dtype, device)
            check_positive(mass, f"{where}: mass (kg)")
        else:
            density = as_tensor(body.density, (), batch, f"{where}: density", dtype, device)
            check_positive(density, f"{where}: density (kg/m^3)")
            mass = density * shape_volume(body.shape, size)
        out["mass"].append(mass)
        out["position"].append(
            as_tensor(body.position, (3,), batch, f"{where}: position", dtype, device)
        )
        if body.rotation is not None and body.quat is not None:
            raise ModelError(f"{where}: give rotation or quat, not both")
        if body.quat is not None:
            quat = as_tensor(body.quat, (4,), batch, f"{where}: quat", dtype, device)
            if (safe_norm(quat.detach()) < 1e-9).any():
                raise ModelError(f"{where}: quat has zero length; use [w, x, y, z]")
            rotation = quat_to_matrix(quat)
        elif body.rotation is not None:
            rotation = as_tensor(body.rotation, (3, 3), batch, f"{where}: rotation", dtype, device)
        else:
            rotation = torch.eye(3, **kw).expand(batch, 3, 3)
        out["rotation"].append(rotation)
        for key in ("velocity", "angular_velocity"):
            out[key].append(
                as_tensor(getattr(body, key), (3,), batch, f"{where}: {key}", dtype, device)
            )
        for key in ("friction", "restitution"):
            value = as_tensor(getattr(body, key), (), batch, f"{where}: {key}", dtype, device)
            check_positive(value, f"{where}: {key}", allow_zero=True)
            out[key].append(value)
    return out


def _joint_tensors(spec: WorldSpec, position: Tensor, rotation: Tensor, batch: int, dtype, device):
    """Each joint's frames in its parent and child from the bodies' initial poses (position
    (B, N, 3), rotation (B, N, 3, 3)), its damping and limits.

    Returns:
        fields: name -> per-joint list (``_JOINT_FIELDS``): parent and child indices (N for the
            world), and (B, ...) tensors.
        actuators: (joint name, joint index, `Motor`) per motor, in action order.
        motions: the joints' initial positions and velocities, for `pose_joints`.
    """
    kw = {"dtype": dtype, "device": device}
    names = [b.name for b in spec.bodies]
    n = len(names)
    world_frame_position = torch.zeros(batch, 3, **kw)
    world_frame_rotation = torch.eye(3, **kw).expand(batch, 3, 3)
    fields: dict[str, list] = {k: [] for k in _JOINT_FIELDS}
    actuators: list[tuple[str, int, object]] = []
    motions: list[JointMotion] = []
    for index, joint in enumerate(spec.joints):
        where = f"joint {joint.name!r}"
        child = names.index(joint.child)
        parent = n if joint.parent == "world" else names.index(joint.parent)
        anchor = as_tensor(joint.anchor, (3,), batch, f"{where}: anchor", dtype, device)
        axis = as_tensor(joint.axis, (3,), batch, f"{where}: axis", dtype, device)
        axis_length = safe_norm(axis)
        if (axis_length.detach() < 1e-9).any():
            raise ModelError(f"{where}: axis has zero length; give a direction such as [0, 1, 0]")
        axis = axis / axis_length[:, None]
        p_parent = world_frame_position if parent == n else position[:, parent]
        r_parent = world_frame_rotation if parent == n else rotation[:, parent]
        p_child, r_child = position[:, child], rotation[:, child]
        to_parent = r_parent.transpose(-1, -2)
        to_child = r_child.transpose(-1, -2)
        axis_parent = (to_parent @ axis[..., None])[..., 0]
        ref_parent, _ = tangent_basis(axis_parent)
        ref_world = (r_parent @ ref_parent[..., None])[..., 0]
        fields["parent"].append(parent)
        fields["child"].append(child)
        fields["anchor_parent"].append((to_parent @ (anchor - p_parent)[..., None])[..., 0])
        fields["anchor_child"].append((to_child @ (anchor - p_child)[..., None])[..., 0])
        fields["axis_parent"].append(axis_parent)
        fields["axis_child"].append((to_child @ axis[..., None])[..., 0])
        fields["ref_parent"].append(ref_parent)
        fields["ref_child"].append((to_child @ ref_world[..., None])[..., 0])
        fields["rest_rotation"].append(to_parent @ r_child)
        damping = as_tensor(joint.damping, (), batch, f"{where}: damping", dtype, device)
        check_positive(damping, f"{where}: damping", allow_zero=True)
        fields["damping"].append(damping)
        if joint.limits is not None:
            limits = as_tensor(joint.limits, (2,), batch, f"{where}: limits", dtype, device)
            check_limits(index, joint.name, limits)  # again in the world's dtype
            fields["lower"].append(limits[:, 0])
            fields["upper"].append(limits[:, 1])
        else:
            fields["lower"].append(torch.full((batch,), -math.inf, **kw))
            fields["upper"].append(torch.full((batch,), math.inf, **kw))
        motion = _joint_motion(joint, parent, child, fields["anchor_parent"][-1], axis_parent,
                               batch, dtype, device)  # fmt: skip
        if motion is not None:
            motions.append(motion)
        if joint.motor is not None:
            if joint.motor.type not in MOTOR_TYPES:
                raise ModelError(
                    f"{where}: motor type {joint.motor.type!r} is unknown; use force or servo"
                )
            if joint.motor.target not in ("position", "velocity"):
                raise ModelError(f"{where}: motor target must be position or velocity")
            actuators.append((joint.name, index, joint.motor))
    return fields, actuators, motions


def _joint_motion(
    joint: Joint, parent: int, child: int, anchor_parent, axis_parent, batch: int, dtype, device
) -> JointMotion | None:
    """The joint's initial position and velocity for `pose_joints`, None when it has neither."""
    start = {}
    for key in ("position", "velocity"):
        value = getattr(joint, key)
        if value is None:
            continue
        start[key] = as_tensor(value, (), batch, f"joint {joint.name!r}: {key}", dtype, device)
        if not torch.isfinite(start[key].detach()).all():
            raise ModelError(f"joint {joint.name!r}: {key} must be finite, got {value!r}")
    if not start:
        return None
    return JointMotion(
        joint.name, joint.type, parent, child, anchor_parent, axis_parent,
        start.get("position"), start.get("velocity"),
    )  # fmt: skip


def _motor_tensors(actuators: list, batch: int, dtype, device) -> dict[str, list[Tensor]]:
    """Per motor (in action order): max, gain, max_torque, max_velocity as (B,) tensors."""
    values: dict[str, list[Tensor]] = {k: [] for k in _MOTOR_FIELDS}
    for name, _, motor in actuators:
        for key in values:
            value = as_tensor(
                getattr(motor, key), (), batch, f"joint {name!r}: motor.{key}", dtype, device
            )
            check_positive(value, f"joint {name!r}: motor.{key}", allow_inf=key == "max")
            values[key].append(value)
    return values
