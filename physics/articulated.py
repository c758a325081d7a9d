"""Reduced (joint) coordinates for trees of hinges, sliders and welds: ``coordinates = "reduced"``.

When every dynamic body hangs from the world through a chain of hinge, slider and fixed joints
(a cart-pole, a pendulum with a welded bob, an arm) and nothing can touch, the hinges' and
sliders' coordinates q describe the whole state (a fixed joint has none: its child moves with
its parent), and the motion follows Lagrange's equations

    M(q) q'' = sum_b J_b^T (external and velocity-product forces on body b) + motor - damping q',

with J_b (6, n) body b's Jacobian. The step integrates (q, q') by velocity Verlet (half kick,
drift, half kick; second order, like the maximal engine's kick-drift-kick) and rebuilds the body
poses by forward kinematics. The joints are exact (nothing to solve, nothing drifts: they hold
to round-off). Joint limits and the paper's servos are the constraints: impulses on single
coordinates, in joint space, keep the drift from crossing a limit (the coordinate stops at it,
inelastically) and the stored velocity from pointing through one, and drive a servo's
coordinate at its wanted speed with a bounded impulse. Per world this is a few hundred flops
instead of the maximal engine's constraint systems, written without matrix products (sums over
axes of 3, which Inductor unrolls), so a compiled step is one fused C++ kernel forward and one
backward.

The State stays the maximal one (body poses and velocities). Each step reads q from it as
`physics.joint_positions` defines it (zero in the initial configuration) and q' as the joint
velocity closest to the bodies' velocities in kinetic energy (the maximal engine's projection onto
its joints; for a state on the joints, the joints' own velocity), so the two formulations are
interchangeable from one step to the next.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

from .actuators import checked_action, clipped_motor_forces, servo_speeds
from .inertia import body_moments
from .math3d import hinge_angle, spd_inverse
from .spec import ModelError
from .state import State

if TYPE_CHECKING:
    from .world import World

Tensor = torch.Tensor


class ReducedCoordinatesError(ModelError):
    """The model cannot use ``coordinates = "reduced"``: the message names the joint, body or
    actuator in the way and what would make it fit."""


@dataclasses.dataclass(frozen=True)
class Tree:
    """The static shape of an articulated tree.

    order: joint indices, each joint after the joint that moves its parent.
    moved: per joint index, the bodies it moves (its child and the child's descendants).
    coordinate: per joint index, its column of q, None for a fixed joint (it has none).
    coordinate_joints: per column of q (C of them), its joint.
    force_coordinates: per force motor (in ``world.structure.force_actuators`` order), the
        column of q it drives.
    servos: per servo, its action column and the column of q it drives.
    limited: the columns of q whose joints have limits.
    """

    order: tuple[int, ...]
    moved: tuple[tuple[int, ...], ...]
    coordinate: tuple[int | None, ...]
    coordinate_joints: tuple[int, ...]
    force_coordinates: tuple[int, ...]
    servos: tuple[tuple[int, int], ...]
    limited: tuple[int, ...]


def articulated_tree(world: World) -> Tree:
    """The tree of ``world``'s joints, or a `ModelError` saying why reduced coordinates do not
    apply and what would make them apply."""
    why = "coordinates = 'reduced'"
    n = world.n_bodies
    if not world.joint_names:
        raise ReducedCoordinatesError(
            f"world: {why} needs at least one joint; use coordinates = 'maximal'"
        )
    for name, kind in zip(world.joint_names, world.joint_types, strict=True):
        if kind not in ("hinge", "slider", "fixed"):
            raise ReducedCoordinatesError(
                f"joint {name!r}: {why} supports hinge, slider and fixed joints, not {kind!r}; "
                "use coordinates = 'maximal'"
            )
    coordinate_joints = tuple(j for j, kind in enumerate(world.joint_types) if kind != "fixed")
    if not coordinate_joints:
        raise ReducedCoordinatesError(
            f"world: {why} needs a hinge or slider joint (fixed joints alone move nothing); "
            "use coordinates = 'maximal'"
        )
    coordinate = tuple(
        coordinate_joints.index(j) if j in coordinate_joints else None
        for j in range(world.n_joints)
    )
    if world.plane_contact_body or world.segment_contact_a:
        pairs = [
            (world.body_names[a], world.body_names[b])
            for a, b in (
                *zip(world.plane_contact_plane, world.plane_contact_body, strict=True),
                *zip(world.segment_contact_a, world.segment_contact_b, strict=True),
            )
        ]
        raise ReducedCoordinatesError(
            f"bodies {pairs[0][0]!r} and {pairs[0][1]!r} may collide: {why} has no contacts; "
            "set collide = false on one of them or use coordinates = 'maximal'"
        )
    parent_joint: list[int | None] = [None] * n
    for joint, child in enumerate(world.joint_child):
        if parent_joint[child] is not None:
            raise ReducedCoordinatesError(
                f"body {world.body_names[child]!r} is the child of two joints: {why} needs a "
                "tree (one parent joint per body); use coordinates = 'maximal'"
            )
        parent_joint[child] = joint
    for body in range(n):
        if world.is_static[body]:
            if parent_joint[body] is not None:
                raise ReducedCoordinatesError(
                    f"body {world.body_names[body]!r} is static and the child of joint "
                    f"{world.joint_names[parent_joint[body]]!r}: remove the joint or static = true"
                )
            continue
        if parent_joint[body] is None:
            raise ReducedCoordinatesError(
                f"body {world.body_names[body]!r} has no joint: {why} needs every dynamic body "
                "joined to the world or to another body; use coordinates = 'maximal'"
            )
    depth: list[int] = []
    for joint, parent in enumerate(world.joint_parent):
        steps, body = 0, parent
        while body < n:
            if world.is_static[body]:
                raise ReducedCoordinatesError(
                    f"joint {world.joint_names[joint]!r}: {why} needs joints to hang from the "
                    f"world or a dynamic body, not the static body {world.body_names[body]!r}; "
                    'use parent = "world"'
                )
            steps += 1
            if steps > n:
                raise ReducedCoordinatesError(
                    f"joint {world.joint_names[joint]!r} is on a closed loop: {why} needs a "
                    "tree; use coordinates = 'maximal'"
                )
            body = world.joint_parent[parent_joint[body]]
        depth.append(steps)
    order = tuple(sorted(range(len(depth)), key=lambda j: depth[j]))
    moved = []
    for joint in range(len(depth)):
        bodies = []
        for body in range(n):
            walk = body
            while walk < n and parent_joint[walk] is not None:
                if parent_joint[walk] == joint:
                    bodies.append(body)
                    break
                walk = world.joint_parent[parent_joint[walk]]
        moved.append(tuple(bodies))
    return Tree(
        order=order,
        moved=tuple(moved),
        coordinate=coordinate,
        coordinate_joints=coordinate_joints,
        force_coordinates=tuple(
            coordinate[j]
            for j, kind in zip(world.actuator_joint, world.actuator_type, strict=True)
            if kind == "force"
        ),
        servos=tuple(
            (actuator, coordinate[j])
            for actuator, (j, kind) in enumerate(
                zip(world.actuator_joint, world.actuator_type, strict=True)
            )
            if kind == "servo"
        ),
        limited=tuple(c for c, j in enumerate(coordinate_joints) if world.joint_has_limits[j]),
    )


# Small products written as sums over an axis of 3: Inductor unrolls them into the surrounding
# fused loop, where a matrix product would be a library call per product.
def _apply(rotation: Tensor, vector: Tensor) -> Tensor:
    """rotation @ vector: (B, 3, 3), (B, 3) -> (B, 3)."""
    return (rotation * vector[..., None, :]).sum(-1)


def _apply_transposed(rotation: Tensor, vector: Tensor) -> Tensor:
    """rotation^T @ vector: (B, 3, 3), (B, 3) -> (B, 3)."""
    return (rotation * vector[..., :, None]).sum(-2)


def _compose(left: Tensor, right: Tensor) -> Tensor:
    """left @ right for (B, 3, 3) matrices."""
    return (left[..., :, :, None] * right[..., None, :, :]).sum(-2)


def _dot(a: Tensor, b: Tensor) -> Tensor:
    return (a * b).sum(-1)


def _cross(a: Tensor, b: Tensor) -> Tensor:
    return torch.linalg.cross(a, b)


@dataclasses.dataclass
class _Configuration:
    """World-frame geometry of the tree in one configuration (lists indexed by body / joint).

    rotation[b]: (B, 3, 3) and position[b]: (B, 3) of each dynamic body (None for static ones);
    axis[j]: (B, 3) unit joint axis and anchor[j]: (B, 3) joint point, as attached to the parent.
    """

    rotation: list[Tensor | None]
    position: list[Tensor | None]
    axis: list[Tensor]
    anchor: list[Tensor]


def _parent_pose(world: World, config: _Configuration, parent: int):
    """The parent's rotation and position, None for the world frame (identity and origin: the
    products with them are skipped, not computed)."""
    if parent >= world.n_bodies:
        return None, None
    return config.rotation[parent], config.position[parent]


def _attach(rotation: Tensor | None, vector: Tensor) -> Tensor:
    """A parent-frame vector (B, 3) in the world frame."""
    return vector if rotation is None else _apply(rotation, vector)


def _offset(position: Tensor | None, vector: Tensor) -> Tensor:
    return vector if position is None else position + vector


def _read_joints(world: World, tree: Tree, state: State):
    """The state's configuration and its joint coordinates q (B, C) (rad or m), as
    `physics.joint_positions` defines them (zero in the initial configuration)."""
    config = _Configuration(
        rotation=[None if s else state.rotation[:, b] for b, s in enumerate(world.is_static)],
        position=[None if s else state.position[:, b] for b, s in enumerate(world.is_static)],
        axis=[None] * world.n_joints,
        anchor=[None] * world.n_joints,
    )
    q = [None] * len(tree.coordinate_joints)
    for joint in tree.order:
        parent, child = world.joint_parent[joint], world.joint_child[joint]
        parent_rotation, parent_position = _parent_pose(world, config, parent)
        child_rotation, child_position = config.rotation[child], config.position[child]
        axis = _attach(parent_rotation, world.axis_parent[:, joint])
        anchor = _offset(parent_position, _attach(parent_rotation, world.anchor_parent[:, joint]))
        config.axis[joint], config.anchor[joint] = axis, anchor
        kind, column = world.joint_types[joint], tree.coordinate[joint]
        if kind == "hinge":
            parent_ref = _attach(parent_rotation, world.ref_parent[:, joint])
            child_ref = _apply(child_rotation, world.ref_child[:, joint])
            q[column] = hinge_angle(axis, parent_ref, child_ref)
        elif kind == "slider":
            child_anchor = child_position + _apply(child_rotation, world.anchor_child[:, joint])
            q[column] = _dot(axis, child_anchor - anchor)
    return config, torch.stack(q, 1)


def _forward_kinematics(world: World, tree: Tree, q: Tensor) -> _Configuration:
    """Body poses and joint frames at joint coordinates q (B, C), from the initial
    configuration's joint frames."""
    config = _Configuration(
        rotation=[None] * world.n_bodies,
        position=[None] * world.n_bodies,
        axis=[None] * world.n_joints,
        anchor=[None] * world.n_joints,
    )
    for joint in tree.order:
        parent, child = world.joint_parent[joint], world.joint_child[joint]
        parent_rotation, parent_position = _parent_pose(world, config, parent)
        axis = _attach(parent_rotation, world.axis_parent[:, joint])
        anchor = _offset(parent_position, _attach(parent_rotation, world.anchor_parent[:, joint]))
        rest = world.rest_rotation[:, joint]  # the child at q = 0
        if parent_rotation is not None:
            rest = _compose(parent_rotation, rest)
        kind = world.joint_types[joint]
        if kind == "hinge":
            angle = q[:, tree.coordinate[joint]]
            # Rodrigues on each column c of the rest rotation, about the world axis a:
            # c cos + (a x c) sin + a (a . c)(1 - cos).
            cosine, sine = torch.cos(angle)[:, None, None], torch.sin(angle)[:, None, None]
            axis_col = axis[:, :, None]
            rotation = (
                rest * cosine
                + torch.linalg.cross(axis_col.expand_as(rest), rest, dim=1) * sine
                + axis_col * (axis_col * rest).sum(1, keepdim=True) * (1 - cosine)
            )
            point = anchor
        elif kind == "slider":
            rotation = rest
            point = anchor + q[:, tree.coordinate[joint], None] * axis
        else:  # fixed: the rest pose on the parent
            rotation, point = rest, anchor
        config.axis[joint], config.anchor[joint] = axis, anchor
        config.rotation[child] = rotation
        config.position[child] = point - _apply(rotation, world.anchor_child[:, joint])
    return config


def _jacobians(world: World, tree: Tree, config: _Configuration):
    """Each dynamic body's Jacobian: linear and angular velocity per unit q' of each coordinate.

    Returns:
        bodies: the dynamic body indices, in the order of the stacked axis.
        linear, angular: (B, D, 3, C) for the D dynamic bodies (m or rad per unit of q').
    """
    bodies = [b for b in range(world.n_bodies) if not world.is_static[b]]
    zero = torch.zeros_like(config.anchor[0])
    linear_rows, angular_rows = [], []
    for body in bodies:
        linear, angular = [], []
        for joint in tree.coordinate_joints:
            if body not in tree.moved[joint]:
                linear.append(zero)
                angular.append(zero)
            elif world.joint_types[joint] == "hinge":
                axis = config.axis[joint]
                linear.append(_cross(axis, config.position[body] - config.anchor[joint]))
                angular.append(axis)
            else:
                linear.append(config.axis[joint])
                angular.append(zero)
        linear_rows.append(torch.stack(linear, -1))
        angular_rows.append(torch.stack(angular, -1))
    return bodies, torch.stack(linear_rows, 1), torch.stack(angular_rows, 1)


def _velocity_products(world: World, tree: Tree, config: _Configuration, q_dot: Tensor):
    """Body spins at q' (B, C) and the accelerations at q'' = 0 (the velocity-product terms).

    Returns per body index (zero for static bodies): spin, and the bias angular and linear
    accelerations, each (B, 3).
    """
    n = world.n_bodies
    zero = torch.zeros_like(config.anchor[0])
    spin = [zero] * (n + 1)
    angular_bias, linear_bias = [zero] * (n + 1), [zero] * (n + 1)
    for joint in tree.order:
        parent, child = world.joint_parent[joint], world.joint_child[joint]
        axis, anchor = config.axis[joint], config.anchor[joint]
        kind, column = world.joint_types[joint], tree.coordinate[joint]
        parent_position = zero if parent >= n else config.position[parent]
        w_p = spin[min(parent, n)]
        alpha_p, acc_p = angular_bias[min(parent, n)], linear_bias[min(parent, n)]
        lever = config.position[child] - parent_position
        if kind == "hinge":
            rate = q_dot[:, column, None]
            to_anchor, from_anchor = anchor - parent_position, config.position[child] - anchor
            w_c = w_p + rate * axis
            # The axis turns with the parent: d(axis)/dt = w_p x axis.
            alpha_c = alpha_p + rate * _cross(w_p, axis)
            acc_c = (
                acc_p
                + _cross(alpha_p, to_anchor)
                + _cross(w_p, _cross(w_p, to_anchor))
                + _cross(alpha_c, from_anchor)
                + _cross(w_c, _cross(w_c, from_anchor))
            )
        else:  # slider or fixed: the child turns with its parent
            w_c, alpha_c = w_p, alpha_p
            acc_c = acc_p + _cross(alpha_p, lever) + _cross(w_p, _cross(w_p, lever))
            if kind == "slider":  # the Coriolis term of sliding along a turning axis
                acc_c = acc_c + 2.0 * q_dot[:, column, None] * _cross(w_p, axis)
        spin[child] = w_c
        angular_bias[child], linear_bias[child] = alpha_c, acc_c
    return spin[:n], angular_bias[:n], linear_bias[:n]


@dataclasses.dataclass
class _JointSpace:
    """The tree's mass properties at one configuration.

    bodies: the dynamic body indices (D of them), in the order of the stacked axis.
    linear, angular: (B, D, 3, C) Jacobians (see `_jacobians`).
    inverse: (B, C, C) inverse of the joint-space mass matrix M(q) (kg, kg m^2, ...).
    """

    bodies: list[int]
    linear: Tensor
    angular: Tensor
    inverse: Tensor


def _inertia_times(rotation: Tensor, moment: Tensor, vector: Tensor) -> Tensor:
    """World-frame inertia R diag(moment) R^T times a (B, 3) vector."""
    return _apply(rotation, moment * _apply_transposed(rotation, vector))


def _joint_space(world: World, tree: Tree, config: _Configuration, moments: Tensor):
    """M(q) = sum_b m_b Jv_b^T Jv_b + Jw_b^T I_b Jw_b and its inverse, with the Jacobians."""
    bodies, linear, angular = _jacobians(world, tree, config)
    mass = world.mass[:, bodies]  # (B, D)
    # The angular Jacobians in the body frames, where the inertia is diagonal.
    angular_local = torch.stack(
        [
            (config.rotation[body][..., :, :, None] * angular[:, k, :, None, :]).sum(-3)
            for k, body in enumerate(bodies)
        ],
        1,
    )  # (B, D, 3, J)
    body_moments = moments[:, bodies, :, None, None]  # (B, D, 3, 1, 1)
    matrix = (mass[:, :, None, None, None] * linear[..., :, None] * linear[..., None, :]).sum(
        (1, 2)
    ) + (body_moments * angular_local[..., :, None] * angular_local[..., None, :]).sum((1, 2))
    return _JointSpace(bodies, linear, angular, spd_inverse(matrix))


def _solve(space: _JointSpace, generalised: Tensor) -> Tensor:
    """M(q)^-1 times (B, C) generalised forces or momenta."""
    return (space.inverse * generalised[:, None, :]).sum(-1)


def _project_velocity(world, config, moments, space: _JointSpace, state: State) -> Tensor:
    """q' (B, C) whose body velocities are closest to the state's in kinetic energy: the joint
    momenta J^T (m v, I w) through M(q)^-1, as the maximal engine projects onto its joints. For
    a state that satisfies the joints it is the joints' own velocity."""
    momentum, angular_momentum = [], []
    for body in space.bodies:
        momentum.append(world.mass[:, body, None] * state.linear_velocity[:, body])
        angular_momentum.append(
            _inertia_times(config.rotation[body], moments[:, body], state.angular_velocity[:, body])
        )
    generalised = (space.linear * torch.stack(momentum, 1)[..., None]).sum((1, 2)) + (
        space.angular * torch.stack(angular_momentum, 1)[..., None]
    ).sum((1, 2))
    return _solve(space, generalised)


def _acceleration(world, tree, config, moments, space: _JointSpace, q_dot, applied):
    """q'' (B, C) at a configuration and joint velocity q' (B, C), with ``applied`` (B, C)
    generalised motor forces (N or N m)."""
    spin, angular_bias, linear_bias = _velocity_products(world, tree, config, q_dot)
    force, torque = [], []
    for body in space.bodies:
        rotation, moment = config.rotation[body], moments[:, body]
        force.append(world.mass[:, body, None] * (world.gravity - linear_bias[body]))
        torque.append(
            -_inertia_times(rotation, moment, angular_bias[body])
            - _cross(spin[body], _inertia_times(rotation, moment, spin[body]))
        )
    generalised = (
        (space.linear * torch.stack(force, 1)[..., None]).sum((1, 2))
        + (space.angular * torch.stack(torque, 1)[..., None]).sum((1, 2))
        + applied
        - _coordinate_damping(world, tree) * q_dot
    )
    return _solve(space, generalised)


def _coordinate_damping(world: World, tree: Tree) -> Tensor:
    """The hinges' and sliders' damping (B, C) (N s/m or N m s/rad)."""
    if len(tree.coordinate_joints) == world.n_joints:
        return world.joint_damping
    return torch.stack([world.joint_damping[:, j] for j in tree.coordinate_joints], 1)


def _motor_forces(world: World, tree: Tree, action: Tensor, like: Tensor) -> Tensor:
    """Clipped force-motor actions (B, A) as generalised forces (B, C); ``like``: (B, C)."""
    columns = [torch.zeros_like(like[:, 0])] * len(tree.coordinate_joints)
    if tree.force_coordinates:
        forces = clipped_motor_forces(world, action)
        for force, column in enumerate(tree.force_coordinates):
            columns[column] = columns[column] + forces[:, force]
    return torch.stack(columns, 1)


# A bound's target speed is clamped to this (m/s or rad/s, beyond any motion) so that an
# infinite bound stays out of the arithmetic (inf * 0 in a backward pass would be NaN).
_FAR = 1e9


@dataclasses.dataclass
class _Row:
    """A bounded row on one coordinate: sign q'_column driven to ``target`` (B,) by a
    generalised impulse whose accumulated value stays in [lower, upper] (B,) (N s or N m s)."""

    key: tuple
    column: int
    sign: float
    target: Tensor
    lower: Tensor
    upper: Tensor


def _limit_rows(world: World, tree: Tree, q: Tensor) -> list[_Row]:
    """One-sided rows keeping each limited coordinate's speed in [(lower - q) / dt,
    (upper - q) / dt] (q: (B, C)): a drift of dt then ends at the limit at most, and an impact
    is inelastic (the coordinate stops at its limit)."""
    rows = []
    for column in tree.limited:
        joint = tree.coordinate_joints[column]
        for sign, bound in ((1.0, world.joint_lower), (-1.0, world.joint_upper)):
            target = sign * ((bound[:, joint] - q[:, column]) / world.timestep).clamp(-_FAR, _FAR)
            zero = torch.zeros_like(target)
            rows.append(_Row(("limit", column, sign), column, sign, target, zero, zero + _FAR))
    return rows


def _servo_rows(world: World, tree: Tree, q: Tensor, action: Tensor) -> list[_Row]:
    """The paper's servos (`servo_speeds`, as in the maximal engine), one row each.
    q: (B, C); action: (B, A)."""
    if not tree.servos:
        return []
    wanted, bound = servo_speeds(world, action, torch.stack([q[:, c] for _, c in tree.servos], 1))
    return [
        _Row(("servo", actuator), column, 1.0, wanted[:, k], -bound[:, k], bound[:, k])
        for k, (actuator, column) in enumerate(tree.servos)
    ]


def _solve_rows(world: World, space: _JointSpace, rows: list[_Row], q_dot: Tensor, start: dict):
    """q' (B, C) after the rows' impulses, and the accumulated impulses (by row key).

    The impulses act in joint space: a generalised impulse e_c lambda changes q' by
    M^-1 e_c lambda. Projected Gauss-Seidel over the rows, each impulse accumulated and clamped
    to its bounds, warm-started from ``start`` (whose effect is already in q'):
    ``world.solver_iterations`` sweeps, one when a row is alone or the rows are one
    coordinate's two limits (they cannot both push): one sweep is then exact.
    """
    accumulated = dict(start)
    single = len(rows) == 1 or (
        len({row.column for row in rows}) == 1 and all(row.key[0] == "limit" for row in rows)
    )
    for _ in range(1 if single else world.solver_iterations):
        for row in rows:
            response = space.inverse[:, :, row.column]  # (B, C): q' change per unit impulse
            old = accumulated.get(row.key, torch.zeros_like(row.target))
            change = (row.target - row.sign * q_dot[:, row.column]) / response[:, row.column]
            new = torch.minimum(torch.maximum(old + change, row.lower), row.upper)
            q_dot = q_dot + (row.sign * (new - old))[:, None] * response
            accumulated[row.key] = new
    return q_dot, accumulated


def reduced_step(world: World, state: State, action: Tensor | None = None) -> State:
    """One timestep in joint coordinates (see the module docstring); same contract as
    `physics.step`: state (B, N, ...) in, the state one timestep later out."""
    tree = world.structure.tree
    dt = world.timestep
    config, q = _read_joints(world, tree, state)
    moments = body_moments(world.mass, world.size, world.structure.shape_groups)
    space = _joint_space(world, tree, config, moments)
    q_dot = _project_velocity(world, config, moments, space, state)
    # As in the maximal engine, a world without actuators ignores the action.
    action = checked_action(world, action if world.actuator_names else None, q)
    applied = _motor_forces(world, tree, action, q)
    # Velocity Verlet: half kick at the start, drift, half kick at the end configuration. The
    # end kick's velocity-dependent terms (Coriolis, centripetal, damping) take the end velocity
    # predicted by a whole Euler kick, q' + dt q'': off by O(dt^2), so the step stays second
    # order (at the half-step velocity it would be first order: 30x the error on the double
    # pendulum at 0.5 s).
    q_ddot = _acceleration(world, tree, config, moments, space, q_dot, applied)
    q_dot = q_dot + 0.5 * dt * q_ddot
    # Servos and limits act on the velocity of the drift (the drift stops at the limits) and
    # again on the stored velocity (which then does not point through a limit). The servos'
    # second solve continues their accumulated impulses (at most max_torque dt per step, as in
    # the maximal engine's relax pass); the limits' starts afresh.
    servos = _servo_rows(world, tree, q, action)
    rows = servos + _limit_rows(world, tree, q)
    impulses = {}
    if rows:
        q_dot, impulses = _solve_rows(world, space, rows, q_dot, {})
    predicted = q_dot + 0.5 * dt * q_ddot
    q = q + dt * q_dot
    config = _forward_kinematics(world, tree, q)
    space = _joint_space(world, tree, config, moments)
    q_dot = q_dot + 0.5 * dt * _acceleration(
        world, tree, config, moments, space, predicted, applied
    )
    if rows:
        servo_impulses = {row.key: impulses[row.key] for row in servos}
        rows = servos + _limit_rows(world, tree, q)
        q_dot, _ = _solve_rows(world, space, rows, q_dot, servo_impulses)
    bodies, linear, angular = space.bodies, space.linear, space.angular
    linear_velocity = (linear * q_dot[:, None, None, :]).sum(-1)  # (B, D, 3)
    angular_velocity = (angular * q_dot[:, None, None, :]).sum(-1)
    if len(bodies) == world.n_bodies:
        return State(
            position=torch.stack(config.position, 1),
            rotation=torch.stack(config.rotation, 1),
            linear_velocity=linear_velocity,
            angular_velocity=angular_velocity,
        )
    # Static bodies keep their state.
    slot = {body: k for k, body in enumerate(bodies)}

    def merge(moving, kept):
        return torch.stack(
            [moving[slot[b]] if b in slot else kept[:, b] for b in range(world.n_bodies)], 1
        )

    return State(
        position=merge([config.position[b] for b in bodies], state.position),
        rotation=merge([config.rotation[b] for b in bodies], state.rotation),
        linear_velocity=merge(linear_velocity.unbind(1), state.linear_velocity),
        angular_velocity=merge(angular_velocity.unbind(1), state.angular_velocity),
    )


__all__ = ["ReducedCoordinatesError", "Tree", "articulated_tree", "reduced_step"]
