"""`World`: the physical model as batched tensors plus static structure; `build_world` makes it."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import torch

from .articulated import Tree, articulated_tree
from .inertia import shape_volume
from .math3d import quat_to_matrix, safe_norm, tangent_basis
from .posing import JointMotion, pose_joints
from .spec import COORDINATES, JOINT_TYPES, MOTOR_TYPES, SHAPES, Body, Joint, ModelError, WorldSpec
from .state import State

Tensor = torch.Tensor

# Static matrices that map a body's padded size [a, b, c] to the body-frame points it collides
# with. Sizes stay tensors (they may require grad), so contact points are computed in the step.
_BOX_CORNERS = [(sx, sy, sz) for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]
_CYLINDER_RIM = 8


def _plane_points(shape: str) -> list[tuple[list[list[float]], list[float]]]:
    """Points (as `size -> point` matrices) and radii (as `size -> radius` rows) a shape touches a
    plane with: a sphere its centre (radius r), a capsule its two end centres (radius r), a box
    its 8 corners, a cylinder 8 points on each rim."""
    if shape == "sphere":
        return [([[0, 0, 0], [0, 0, 0], [0, 0, 0]], [1, 0, 0])]
    if shape == "capsule":
        return [([[0, 0, 0], [0, 0, 0], [0, s * 0.5, 0]], [1, 0, 0]) for s in (-1, 1)]
    if shape == "box":
        return [
            ([[sx * 0.5, 0, 0], [0, sy * 0.5, 0], [0, 0, sz * 0.5]], [0, 0, 0])
            for sx, sy, sz in _BOX_CORNERS
        ]
    if shape == "cylinder":
        points = []
        for s in (-1, 1):
            for k in range(_CYLINDER_RIM):
                angle = 2 * math.pi * k / _CYLINDER_RIM
                points.append(
                    ([[math.cos(angle), 0, 0], [math.sin(angle), 0, 0], [0, s * 0.5, 0]], [0, 0, 0])
                )
        return points
    return []


def _segment(shape: str) -> tuple[list[list[float]], list[float]] | None:
    """Half-segment (`size -> half axis` matrix) and radius row of a sphere or capsule."""
    if shape == "sphere":
        return [[0, 0, 0], [0, 0, 0], [0, 0, 0]], [1, 0, 0]
    if shape == "capsule":
        return [[0, 0, 0], [0, 0, 0], [0, 0.5, 0]], [1, 0, 0]
    return None


@dataclasses.dataclass
class Structure:
    """Index tensors of a world's static structure, made once at build time on its device."""

    dynamic: Tensor  # (N,) bool
    shape_groups: dict[str, Tensor]  # shape -> (n,) long indices of dynamic bodies of that shape
    joint_parent: Tensor  # (J,) long, N for the world
    joint_child: Tensor  # (J,) long
    joint_slider: Tensor  # (J,) bool
    joint_hinge: Tensor  # (J,) bool
    row_joint: Tensor  # (m,) long: the joint of each equality row
    row_slot: Tensor  # (m,) long: 0-2 point slots, 3-5 angular slots
    force_actuators: Tensor  # (F,) long indices into the actions
    force_joints: Tensor  # (F,) long
    servo_actuators: Tensor  # (S,) long
    servo_joints: Tensor  # (S,) long
    servo_position_mode: Tensor  # (S,) bool
    limited_joints: Tensor  # (L,) long
    limit_rows: Tensor  # (2L,) long: each limited joint twice (lower, upper)
    limit_sign: Tensor  # (2L,) float: +1 lower, -1 upper
    plane_contact_plane: Tensor  # (P,) long
    plane_contact_body: Tensor  # (P,) long
    segment_contact_a: Tensor  # (S,) long
    segment_contact_b: Tensor  # (S,) long
    tree: Tree | None = None  # the joint tree when coordinates == "reduced"


_SLOTS = {
    "ball": (0, 1, 2),
    "hinge": (0, 1, 2, 3, 4),
    "slider": (0, 1, 3, 4, 5),
    "fixed": (0, 1, 2, 3, 4, 5),
}


def _structure(world: World) -> Structure:
    device = world.device
    long = {"dtype": torch.long, "device": device}

    def index(values) -> Tensor:
        return torch.tensor(list(values), **long)

    def mask(values) -> Tensor:
        return torch.tensor(list(values), dtype=torch.bool, device=device)

    row_joint, row_slot = [], []
    for joint, kind in enumerate(world.joint_types):
        for slot in _SLOTS[kind]:
            row_joint.append(joint)
            row_slot.append(slot)
    force = [i for i, t in enumerate(world.actuator_type) if t == "force"]
    servo = [i for i, t in enumerate(world.actuator_type) if t == "servo"]
    limited = [i for i, has in enumerate(world.joint_has_limits) if has]
    groups = {}
    for shape in SHAPES:
        members = [i for i, s in enumerate(world.shapes) if s == shape and not world.is_static[i]]
        if members:
            groups[shape] = index(members)
    return Structure(
        dynamic=mask(not s for s in world.is_static),
        shape_groups=groups,
        joint_parent=index(world.joint_parent),
        joint_child=index(world.joint_child),
        joint_slider=mask(t == "slider" for t in world.joint_types),
        joint_hinge=mask(t == "hinge" for t in world.joint_types),
        row_joint=index(row_joint),
        row_slot=index(row_slot),
        force_actuators=index(force),
        force_joints=index(world.actuator_joint[i] for i in force),
        servo_actuators=index(servo),
        servo_joints=index(world.actuator_joint[i] for i in servo),
        servo_position_mode=mask(world.actuator_target[i] == "position" for i in servo),
        limited_joints=index(limited),
        limit_rows=index(limited + limited),
        limit_sign=torch.tensor(
            [1.0] * len(limited) + [-1.0] * len(limited), dtype=world.dtype, device=device
        ),
        plane_contact_plane=index(world.plane_contact_plane),
        plane_contact_body=index(world.plane_contact_body),
        segment_contact_a=index(world.segment_contact_a),
        segment_contact_b=index(world.segment_contact_b),
        tree=articulated_tree(world) if world.coordinates == "reduced" else None,
    )


@dataclasses.dataclass
class World:
    """A batch of B worlds with the same structure and possibly different parameters.

    Static structure (plain Python, or index tensors that never change):
        body_names, shapes, is_static: per body, in state order (N bodies).
        joint_names, joint_types, joint_parent, joint_child: per joint (J joints); a parent of
            index N is the world.
        actuator_names, actuator_joint, actuator_type: per motor (A actuators), in action order.
        timestep (s), solver_iterations, relax_iterations, restitution_threshold (m/s),
        contact_slop (m), penetration_recovery (fraction per step), joint_position_iterations
        (quasi-Newton corrections per step that put the joints back on their constraints).

    Parameters (tensors, batch first; any may carry a gradient):
        mass (B, N) kg (1 for static bodies, unused), size (B, N, 3) padded size (m),
        friction, restitution (B, N), gravity (B, 3) m/s^2,
        joint_damping (B, J), joint_lower, joint_upper (B, J) (±inf without limits),
        motor_max, motor_gain, motor_max_torque, motor_max_velocity (B, A),
        joint frames from the initial configuration: anchor_parent, anchor_child (B, J, 3)
        in the parent / child body frame; axis_parent (B, J, 3), ref_parent (B, J, 3) (a unit
        vector normal to the axis), ref_child (B, J, 3), rest_rotation (B, J, 3, 3) = R_p^T R_c.
        initial state: position (B, N, 3), rotation (B, N, 3, 3), velocity, angular_velocity.
    """

    body_names: list[str]
    shapes: list[str]
    is_static: list[bool]
    joint_names: list[str]
    joint_types: list[str]
    joint_parent: list[int]
    joint_child: list[int]
    actuator_names: list[str]
    actuator_joint: list[int]
    actuator_type: list[str]
    actuator_target: list[str]
    joint_has_limits: list[bool]
    timestep: float
    solver_iterations: int
    relax_iterations: int
    restitution_threshold: float
    contact_slop: float
    penetration_recovery: float
    joint_position_iterations: int

    mass: Tensor
    size: Tensor
    friction: Tensor
    restitution: Tensor
    gravity: Tensor
    joint_damping: Tensor
    joint_lower: Tensor
    joint_upper: Tensor
    motor_max: Tensor
    motor_gain: Tensor
    motor_max_torque: Tensor
    motor_max_velocity: Tensor
    anchor_parent: Tensor
    anchor_child: Tensor
    axis_parent: Tensor
    axis_child: Tensor
    ref_parent: Tensor
    ref_child: Tensor
    rest_rotation: Tensor
    initial_position: Tensor
    initial_rotation: Tensor
    initial_velocity: Tensor
    initial_angular_velocity: Tensor

    # Contact candidates (static): point-plane and segment-segment pairs.
    plane_contact_plane: list[int]
    plane_contact_body: list[int]
    plane_contact_point_map: Tensor  # (P, 3, 3) size -> body-frame point
    plane_contact_radius_map: Tensor  # (P, 3) size -> radius
    segment_contact_a: list[int]
    segment_contact_b: list[int]
    segment_map_a: Tensor  # (S, 3, 3) size -> half axis, body a
    segment_map_b: Tensor
    segment_radius_a: Tensor  # (S, 3)
    segment_radius_b: Tensor
    structure: Structure | None = dataclasses.field(default=None, repr=False)
    coordinates: str = "maximal"  # or "reduced": see `WorldSpec`

    def __post_init__(self) -> None:
        if self.structure is None:
            self.structure = _structure(self)

    @property
    def n_bodies(self) -> int:
        return len(self.body_names)

    @property
    def n_joints(self) -> int:
        return len(self.joint_names)

    @property
    def n_actuators(self) -> int:
        return len(self.actuator_names)

    @property
    def batch_size(self) -> int:
        return self.mass.shape[0]

    @property
    def dtype(self) -> torch.dtype:
        return self.mass.dtype

    @property
    def device(self) -> torch.device:
        return self.mass.device

    def body_index(self, name: str) -> int:
        return self.body_names.index(name)


def _as_tensor(value, shape: tuple[int, ...], batch: int, what: str, dtype, device) -> Tensor:
    """A number, list or tensor -> tensor (B, *shape); a tensor keeps its graph."""
    if isinstance(value, Tensor):
        tensor = value.to(dtype=dtype, device=device)
    else:
        try:
            tensor = torch.as_tensor(value, dtype=dtype, device=device)
        except (TypeError, ValueError) as error:
            raise ModelError(
                f"{what}: expected a number or a list of numbers, got {value!r}"
            ) from error
    if tuple(tensor.shape) == shape:
        return tensor.expand(batch, *shape)
    if tuple(tensor.shape) == (batch, *shape):
        return tensor
    if tensor.dim() == 0 and len(shape) == 1:
        raise ModelError(f"{what}: expected {shape[0]} numbers, got one number")
    raise ModelError(
        f"{what}: expected shape {list(shape)} (or [{batch}, ...] with one value per batch "
        f"element), got {list(tensor.shape)}"
    )


def _padded_size(body: Body, batch: int, dtype, device) -> Tensor:
    """The body's size as (B, 3): sphere [r, 0, 0], box [x, y, z], capsule/cylinder [r, L, 0]."""
    what = f"body {body.name!r}: size"
    count = {"sphere": (), "box": (3,), "capsule": (2,), "cylinder": (2,), "plane": (2,)}[
        body.shape
    ]
    value = body.size
    if body.shape == "sphere":
        if isinstance(value, Tensor) and tuple(value.shape) == (1,):
            value = value.reshape(())
        elif isinstance(value, Sequence):
            raise ModelError(f"{what}: a sphere's size is its radius, one number (size = 0.1)")
    size = _as_tensor(value, count, batch, what, dtype, device)
    if count == ():
        size = size[:, None]
    padding = torch.zeros(batch, 3 - size.shape[1], dtype=dtype, device=device)
    return torch.cat([size, padding], 1)


def _check_positive(
    tensor: Tensor, what: str, allow_zero: bool = False, allow_inf: bool = False
) -> None:
    # One host sync at build time (never inside a step) to give a clear model error.
    bad = (tensor < 0) if allow_zero else (tensor <= 0)
    finite = ~torch.isnan(tensor) if allow_inf else torch.isfinite(tensor)
    if not finite.all() or bad.any():
        sign = "non-negative" if allow_zero else "positive"
        raise ModelError(f"{what}: must be finite and {sign}, got {tensor.detach().cpu().tolist()}")


def build_world(
    spec: WorldSpec,
    batch_size: int = 1,
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
) -> World:
    """Build a batched `World` from a `WorldSpec`.

    Args:
        spec: bodies, joints, gravity (m/s^2), timestep (s), solver iterations.
        batch_size: B, the number of worlds simulated side by side.
        device: where the tensors live; None follows the first tensor in the spec, else CPU.
        dtype: floating dtype of every parameter and state tensor.

    Raises:
        ModelError: an invalid model, with the body or joint, the field and what is accepted.
    """
    if device is None:
        device = _first_device(spec)
    batch = int(batch_size)
    if batch < 1:
        raise ModelError(f"batch_size must be a positive integer, got {batch_size!r}")
    kw = {"dtype": dtype, "device": device}

    bodies = list(spec.bodies)
    if not bodies:
        raise ModelError("a world needs at least one body")
    names = [b.name for b in bodies]
    for body in bodies:
        if names.count(body.name) > 1:
            raise ModelError(
                f"body {body.name!r}: the name is used twice; body names must be unique"
            )
        if body.name == "world":
            raise ModelError('body "world": the name "world" is reserved for the fixed world frame')
        if body.shape not in SHAPES:
            raise ModelError(
                f"body {body.name!r}: shape {body.shape!r} is unknown; use one of {', '.join(SHAPES)}"
            )
        if body.shape == "plane" and not body.static:
            raise ModelError(f"body {body.name!r}: a plane must be static (static = true)")

    n = len(bodies)
    is_static = [bool(b.static) for b in bodies]
    sizes, masses, positions, rotations, velocities, spins, frictions, restitutions = (
        [] for _ in range(8)
    )
    for body in bodies:
        size = _padded_size(body, batch, dtype, device)
        used = {"sphere": 1, "box": 3, "capsule": 2, "cylinder": 2, "plane": 2}[body.shape]
        _check_positive(size[:, :used], f"body {body.name!r}: size")
        sizes.append(size)
        if body.static:
            mass = torch.ones(batch, **kw)
        elif body.mass is not None and body.density is not None:
            raise ModelError(f"body {body.name!r}: give mass or density, not both")
        elif body.mass is not None:
            mass = _as_tensor(body.mass, (), batch, f"body {body.name!r}: mass", dtype, device)
            _check_positive(mass, f"body {body.name!r}: mass (kg)")
        elif body.density is not None:
            density = _as_tensor(
                body.density, (), batch, f"body {body.name!r}: density", dtype, device
            )
            _check_positive(density, f"body {body.name!r}: density (kg/m^3)")
            mass = density * shape_volume(body.shape, size)
        else:
            raise ModelError(
                f"body {body.name!r}: needs a mass (kg) or a density (kg/m^3), or static = true"
            )
        masses.append(mass)
        positions.append(
            _as_tensor(body.position, (3,), batch, f"body {body.name!r}: position", dtype, device)
        )
        if body.rotation is not None and body.quat is not None:
            raise ModelError(f"body {body.name!r}: give rotation or quat, not both")
        if body.quat is not None:
            quat = _as_tensor(body.quat, (4,), batch, f"body {body.name!r}: quat", dtype, device)
            if (safe_norm(quat.detach()) < 1e-9).any():
                raise ModelError(f"body {body.name!r}: quat has zero length; use [w, x, y, z]")
            rotation = quat_to_matrix(quat)
        elif body.rotation is not None:
            rotation = _as_tensor(
                body.rotation, (3, 3), batch, f"body {body.name!r}: rotation", dtype, device
            )
        else:
            rotation = torch.eye(3, **kw).expand(batch, 3, 3)
        rotations.append(rotation)
        velocities.append(
            _as_tensor(body.velocity, (3,), batch, f"body {body.name!r}: velocity", dtype, device)
        )
        spins.append(
            _as_tensor(
                body.angular_velocity,
                (3,),
                batch,
                f"body {body.name!r}: angular_velocity",
                dtype,
                device,
            )
        )
        friction = _as_tensor(
            body.friction, (), batch, f"body {body.name!r}: friction", dtype, device
        )
        _check_positive(friction, f"body {body.name!r}: friction", allow_zero=True)
        frictions.append(friction)
        restitution = _as_tensor(
            body.restitution, (), batch, f"body {body.name!r}: restitution", dtype, device
        )
        _check_positive(restitution, f"body {body.name!r}: restitution", allow_zero=True)
        restitutions.append(restitution)

    position = torch.stack(positions, 1)
    rotation = torch.stack(rotations, 1)
    static_mask = torch.tensor(is_static, device=device)[None, :, None]
    zero3 = torch.zeros((), **kw)
    velocity = torch.where(static_mask, zero3, torch.stack(velocities, 1))
    spin = torch.where(static_mask, zero3, torch.stack(spins, 1))

    # Joints.
    world_frame_position = torch.zeros(batch, 3, **kw)
    world_frame_rotation = torch.eye(3, **kw).expand(batch, 3, 3)
    joint_fields: dict[str, list] = {k: [] for k in (
        "parent", "child", "anchor_parent", "anchor_child", "axis_parent", "axis_child", "ref_parent",
        "ref_child", "rest_rotation", "damping", "lower", "upper",
    )}  # fmt: skip
    actuators: list[tuple[str, int, object]] = []
    motions: list[JointMotion] = []
    joint_names = [j.name for j in spec.joints]
    for index, joint in enumerate(spec.joints):
        where = f"joint {joint.name!r}"
        if joint_names.count(joint.name) > 1:
            raise ModelError(f"{where}: the name is used twice; joint names must be unique")
        if joint.type not in JOINT_TYPES:
            raise ModelError(
                f"{where}: type {joint.type!r} is unknown; use one of {', '.join(JOINT_TYPES)}"
            )
        for role in ("parent", "child"):
            other = getattr(joint, role)
            if other != "world" and other not in names:
                raise ModelError(
                    f"{where}: {role} {other!r} is not a body; bodies are {', '.join(names)}"
                    + (' or "world"' if role == "parent" else "")
                )
        if joint.child == "world":
            raise ModelError(f'{where}: the child cannot be "world"; swap parent and child')
        if joint.child == joint.parent:
            raise ModelError(f"{where}: parent and child are the same body {joint.child!r}")
        child = names.index(joint.child)
        parent = n if joint.parent == "world" else names.index(joint.parent)
        if is_static[child] and (parent == n or is_static[parent]):
            raise ModelError(f"{where}: joins two fixed bodies; one of them must be dynamic")
        anchor = _as_tensor(joint.anchor, (3,), batch, f"{where}: anchor", dtype, device)
        axis = _as_tensor(joint.axis, (3,), batch, f"{where}: axis", dtype, device)
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
        joint_fields["parent"].append(parent)
        joint_fields["child"].append(child)
        joint_fields["anchor_parent"].append((to_parent @ (anchor - p_parent)[..., None])[..., 0])
        joint_fields["anchor_child"].append((to_child @ (anchor - p_child)[..., None])[..., 0])
        joint_fields["axis_parent"].append(axis_parent)
        joint_fields["axis_child"].append((to_child @ axis[..., None])[..., 0])
        joint_fields["ref_parent"].append(ref_parent)
        joint_fields["ref_child"].append((to_child @ ref_world[..., None])[..., 0])
        joint_fields["rest_rotation"].append(to_parent @ r_child)
        damping = _as_tensor(joint.damping, (), batch, f"{where}: damping", dtype, device)
        if joint.type not in ("hinge", "slider") and (damping.detach() != 0).any():
            raise ModelError(f"{where}: damping needs a hinge or slider joint, not {joint.type!r}")
        _check_positive(damping, f"{where}: damping", allow_zero=True)
        joint_fields["damping"].append(damping)
        if joint.limits is not None:
            if joint.type not in ("hinge", "slider"):
                raise ModelError(
                    f"{where}: limits need a hinge or slider joint, not {joint.type!r}"
                )
            limits = _as_tensor(joint.limits, (2,), batch, f"{where}: limits", dtype, device)
            if not (limits[:, 0].detach() < limits[:, 1].detach()).all():
                raise ModelError(f"{where}: limits must be [lower, upper] with lower < upper")
            joint_fields["lower"].append(limits[:, 0])
            joint_fields["upper"].append(limits[:, 1])
        else:
            joint_fields["lower"].append(torch.full((batch,), -math.inf, **kw))
            joint_fields["upper"].append(torch.full((batch,), math.inf, **kw))
        start = {}
        for key in ("position", "velocity"):
            value = getattr(joint, key)
            if value is None:
                continue
            if joint.type not in ("hinge", "slider"):
                raise ModelError(
                    f"{where}: an initial {key} needs a hinge or slider joint, not {joint.type!r}"
                )
            start[key] = _as_tensor(value, (), batch, f"{where}: {key}", dtype, device)
            if not torch.isfinite(start[key].detach()).all():
                raise ModelError(f"{where}: {key} must be finite, got {value!r}")
        if start:
            motions.append(
                JointMotion(
                    joint.name, joint.type, parent, child,
                    joint_fields["anchor_parent"][-1], axis_parent,
                    start.get("position"), start.get("velocity"),
                )
            )  # fmt: skip
        if joint.motor is not None:
            if joint.type not in ("hinge", "slider"):
                raise ModelError(
                    f"{where}: a motor needs a hinge or slider joint, not {joint.type!r}"
                )
            if joint.motor.type not in MOTOR_TYPES:
                raise ModelError(
                    f"{where}: motor type {joint.motor.type!r} is unknown; use force or servo"
                )
            if joint.motor.target not in ("position", "velocity"):
                raise ModelError(f"{where}: motor target must be position or velocity")
            actuators.append((joint.name, index, joint.motor))

    def joint_stack(key: str, tail: tuple[int, ...]) -> Tensor:
        if spec.joints:
            return torch.stack(joint_fields[key], 1)
        return torch.zeros(batch, 0, *tail, **kw)

    motor_values: dict[str, list[Tensor]] = {
        k: [] for k in ("max", "gain", "max_torque", "max_velocity")
    }
    for name, _, motor in actuators:
        for key in motor_values:
            value = _as_tensor(
                getattr(motor, key), (), batch, f"joint {name!r}: motor.{key}", dtype, device
            )
            _check_positive(value, f"joint {name!r}: motor.{key}", allow_inf=key == "max")
            motor_values[key].append(value)

    def motor_stack(key: str) -> Tensor:
        if actuators:
            return torch.stack(motor_values[key], 1)
        return torch.zeros(batch, 0, **kw)

    if spec.coordinates not in COORDINATES:
        raise ModelError(
            f"world: coordinates must be one of {', '.join(COORDINATES)}, got {spec.coordinates!r}"
        )
    if motions:
        position, rotation, velocity, spin = pose_joints(
            position, rotation, velocity, spin, motions,
            joint_fields["parent"], joint_fields["child"],
        )  # fmt: skip
    contacts = _contact_candidates(bodies, spec.joints, dtype, device)
    world = World(
        body_names=names,
        shapes=[b.shape for b in bodies],
        is_static=is_static,
        joint_names=joint_names,
        joint_types=[j.type for j in spec.joints],
        joint_parent=joint_fields["parent"],
        joint_child=joint_fields["child"],
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
        mass=torch.stack(masses, 1),
        size=torch.stack(sizes, 1),
        friction=torch.stack(frictions, 1),
        restitution=torch.stack(restitutions, 1),
        gravity=_as_tensor(spec.gravity, (3,), batch, "world: gravity", dtype, device),
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
    )
    if not (spec.timestep > 0 and math.isfinite(spec.timestep)):
        raise ModelError(
            f"world: timestep must be a positive number of seconds, got {spec.timestep!r}"
        )
    if int(spec.solver_iterations) < 1:
        raise ModelError("world: solver_iterations must be at least 1")
    return world


def _contact_candidates(bodies: list[Body], joints: Sequence[Joint], dtype, device) -> dict:
    """Every pair of bodies that may touch, as static index lists and size->geometry maps.

    Bodies joined by a joint never collide with each other; two static bodies never do.
    Supported: sphere/capsule/box/cylinder against planes; sphere and capsule against each other.
    """
    jointed = {frozenset((j.parent, j.child)) for j in joints}
    plane_plane, plane_body, point_maps, radius_maps = [], [], [], []
    seg_a, seg_b, seg_map_a, seg_map_b, seg_rad_a, seg_rad_b = [], [], [], [], [], []
    for i, first in enumerate(bodies):
        for j, second in enumerate(bodies):
            if j <= i or not (first.collide and second.collide):
                continue
            if (first.static and second.static) or frozenset((first.name, second.name)) in jointed:
                continue
            pair = [(i, first), (j, second)]
            planes = [(k, b) for k, b in pair if b.shape == "plane"]
            if len(planes) == 1:
                (plane_index, _), (body_index, body) = (
                    planes[0],
                    next(p for p in pair if p[1].shape != "plane"),
                )
                for point_map, radius_map in _plane_points(body.shape):
                    plane_plane.append(plane_index)
                    plane_body.append(body_index)
                    point_maps.append(point_map)
                    radius_maps.append(radius_map)
                continue
            segment_first, segment_second = _segment(first.shape), _segment(second.shape)
            if segment_first is not None and segment_second is not None:
                seg_a.append(i)
                seg_b.append(j)
                seg_map_a.append(segment_first[0])
                seg_rad_a.append(segment_first[1])
                seg_map_b.append(segment_second[0])
                seg_rad_b.append(segment_second[1])

    def tensor(rows: list, tail: tuple[int, ...]) -> Tensor:
        return torch.tensor(rows, dtype=dtype, device=device).reshape(len(rows), *tail)

    return {
        "plane_contact_plane": plane_plane,
        "plane_contact_body": plane_body,
        "plane_contact_point_map": tensor(point_maps, (3, 3)),
        "plane_contact_radius_map": tensor(radius_maps, (3,)),
        "segment_contact_a": seg_a,
        "segment_contact_b": seg_b,
        "segment_map_a": tensor(seg_map_a, (3, 3)),
        "segment_map_b": tensor(seg_map_b, (3, 3)),
        "segment_radius_a": tensor(seg_rad_a, (3,)),
        "segment_radius_b": tensor(seg_rad_b, (3,)),
    }


def _first_device(spec: WorldSpec) -> torch.device:
    for body in spec.bodies:
        for value in (getattr(body, f.name) for f in dataclasses.fields(body)):
            if isinstance(value, Tensor):
                return value.device
    for joint in spec.joints:
        for value in (joint.anchor, joint.axis, joint.damping, joint.limits):
            if isinstance(value, Tensor):
                return value.device
    if isinstance(spec.gravity, Tensor):
        return spec.gravity.device
    return torch.device("cpu")


def initial_state(world: World) -> State:
    """The state the world was built in: (B, N, ...) tensors."""
    return State(
        position=world.initial_position,
        rotation=world.initial_rotation,
        linear_velocity=world.initial_velocity,
        angular_velocity=world.initial_angular_velocity,
    )
