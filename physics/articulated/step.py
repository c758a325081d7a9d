"""One timestep in reduced coordinates (see `physics.articulated`), written once.

Velocity Verlet in joint coordinates, limits and servos as bounded impulses. The step is written
on vectors and matrices of an algebra the `Model` names, with the model's structural zeros
(None) skipped, and runs in two forms from this one source:

- `reduced_step`: vectors and matrices held whole ((B, 3) and (B, 3, 3) tensors:
  `physics.articulated.packed`), what runs eagerly;
- `unrolled_step` and `unrolled_vjp`: every component of each vector, matrix entry and
  coordinate its own (B,) tensor (lanes: `physics.articulated.lanes`). Every operation is then
  elementwise over the batch, and a compiler fuses the step into a few loops over the worlds
  (its backward likewise): what `physics.ahead_of_time` builds.
"""

from __future__ import annotations

import dataclasses

import torch

from ..actuators import checked_action
from ..inertia import shape_inertia
from ..state import State
from ..world import World
from .lanes import Mat, Vec, add, cross, dot, negate, scale, spd_inverse
from .packed import PackedMat, PackedVec
from .tree import Tree

Tensor = torch.Tensor

# A bound's target speed is clamped to this (m/s or rad/s, beyond any motion) so that an
# infinite bound stays out of the arithmetic (inf * 0 in a backward pass would be NaN).
FAR = 1e9


@dataclasses.dataclass
class Row:
    """A bounded row on one coordinate: sign q'_column driven to ``target`` (B,) by a
    generalised impulse whose accumulated value stays in [lower, upper] (B,) (N s or N m s)."""

    key: tuple
    column: int
    sign: float
    target: Tensor
    lower: Tensor
    upper: Tensor


#: The world's tensor fields the step reads (`physics.ahead_of_time` passes it only these).
WORLD_FIELDS = (
    "mass", "size", "gravity", "joint_damping", "joint_lower", "joint_upper", "motor_max",
    "motor_gain", "motor_max_torque", "motor_max_velocity", "anchor_parent", "anchor_child",
    "axis_parent", "ref_parent", "ref_child", "rest_rotation",
)  # fmt: skip


@dataclasses.dataclass
class Pose:
    """A configuration's world-frame geometry: per body index its rotation and position (None
    for static bodies), per joint index its axis and anchor (as attached to the parent)."""

    rotation: list[Mat | None]
    position: list[Vec | None]
    axis: list[Vec | None]
    anchor: list[Vec | None]


@dataclasses.dataclass
class Space:
    """The tree's mass properties at one configuration: per dynamic body (``bodies``) and
    coordinate, the linear and angular Jacobian columns (None where zero), and the entries of
    M(q)^-1 (None where zero)."""

    bodies: list[int]
    linear: dict[int, list[Vec | None]]
    angular: dict[int, list[Vec | None]]
    inverse: list[list[Tensor | None]]


@dataclasses.dataclass
class Model:
    """What the step reads of the world: body masses and principal moments, gravity, the joint
    frames, per coordinate its damping and the force motors on it; and the algebra the step's
    vectors and matrices are held in: ``vector`` and ``matrix`` the lanes' `Vec` and `Mat`
    (per-world scalars, what a compiler fuses) or `PackedVec` and `PackedMat` ((B, 3) and
    (B, 3, 3) tensors, what runs eagerly)."""

    world: World
    tree: Tree
    mass: list[Tensor]
    moments: list[Vec | None]
    gravity: Vec
    vector: type = Vec
    matrix: type = Mat


@dataclasses.dataclass
class Lanes:
    """A State as lanes: per body index its position, rotation, linear and angular velocity
    (None: exactly zero). Steps chained on lanes never stack and unbind the state between
    them."""

    position: list[Vec]
    rotation: list[Mat]
    linear: list[Vec | None]
    angular: list[Vec | None]

    @staticmethod
    def of(state: State) -> Lanes:
        return Lanes.of_flat(state_components(state))

    @staticmethod
    def packed(state: State) -> Lanes:
        """A State's bodies as `PackedVec` and `PackedMat` (views of its tensors)."""
        n = state.position.shape[1]
        return Lanes(
            [PackedVec(state.position[:, b]) for b in range(n)],
            [PackedMat(state.rotation[:, b]) for b in range(n)],
            [PackedVec(state.linear_velocity[:, b]) for b in range(n)],
            [PackedVec(state.angular_velocity[:, b]) for b in range(n)],
        )

    def stack_packed(self, batch: int) -> State:
        """The State (B, N, ...), B = ``batch``, of packed bodies (`Lanes.packed`)."""
        like = self.position[0].value
        zero = like.new_zeros(()).expand(batch, 3)

        def stacked(items: list, shape: tuple) -> Tensor:
            parts = [zero if v is None else v.value.expand(batch, *shape) for v in items]
            return torch.stack(parts, 1)

        return State(
            position=stacked(self.position, (3,)),
            rotation=stacked(self.rotation, (3, 3)),
            linear_velocity=stacked(self.linear, (3,)),
            angular_velocity=stacked(self.angular, (3,)),
        )

    @staticmethod
    def of_flat(flat: list[Tensor]) -> Lanes:
        """From a State's components in memory order (`flat`)."""
        n = len(flat) // 18

        def vectors(start: int) -> list[Vec]:
            return [Vec(*flat[start + 3 * b : start + 3 * b + 3]) for b in range(n)]

        rotations = []
        for b in range(n):
            entries = flat[3 * n + 9 * b : 3 * n + 9 * b + 9]  # row-major
            rotations.append(Mat(*(Vec(*entries[j::3]) for j in range(3))))
        return Lanes(vectors(0), rotations, vectors(12 * n), vectors(15 * n))

    def flat(self, batch: int) -> list[Tensor]:
        """The State's components in memory order, each (B,), B = ``batch`` (zeros for None):
        position (N x 3), rotation (N x 3 x 3, row-major), linear, angular velocity."""
        like = self.position[0].x
        zero = like.new_zeros(()).expand(batch)

        def vectors(items):
            return [zero] * 3 if items is None else [items.x, items.y, items.z]

        rotation = [
            getattr(column, axis) for m in self.rotation for axis in "xyz" for column in m.columns()
        ]
        lanes = [
            *(c for v in self.position for c in vectors(v)),
            *rotation,
            *(c for v in self.linear for c in vectors(v)),
            *(c for v in self.angular for c in vectors(v)),
        ]
        return [lane.expand(batch) for lane in lanes]

    def stack(self, batch: int) -> State:
        """The State (B, N, ...), B = ``batch``."""
        return stack_state(self.flat(batch), batch)


def state_components(state: State) -> list[Tensor]:
    """A State's components in memory order, each (B,) (see `Lanes.flat`)."""
    return [lane for t in state.tensors() for lane in t.flatten(1).unbind(1)]


def stack_state(flat: list[Tensor], batch: int) -> State:
    """A State (B, N, ...) from its components in memory order (each (B,); see `Lanes.flat`)."""
    n = len(flat) // 18
    sizes = (3 * n, 9 * n, 3 * n, 3 * n)
    shapes = ((n, 3), (n, 3, 3), (n, 3), (n, 3))
    tensors, start = [], 0
    for size, shape in zip(sizes, shapes, strict=True):
        tensors.append(torch.stack(flat[start : start + size], 1).view(batch, *shape))
        start += size
    return State(*tensors)


def reduced_step(world: World, state: State, action: Tensor | None = None) -> State:
    """One timestep in joint coordinates, same contract as `physics.step`: state (B, N, ...)
    in, the state one timestep later out; action (B, A) or None (zeros). Vectors and matrices
    held whole (the eager form)."""
    model = model_of(world, packed=True)
    lanes = step_lanes(model, Lanes.packed(state), action)
    return lanes.stack_packed(state.position.shape[0])


def unrolled_step(world: World, state: State, action: Tensor | None = None) -> State:
    """One timestep in joint coordinates: `reduced_step`'s contract and arithmetic, on lanes.

    Args:
        world: a world in reduced coordinates (``world.structure.tree`` set).
        state: (B, N, ...) tensors.
        action: (B, A) or None (zeros).
    """
    lanes = step_lanes(model_of(world), Lanes.of(state), action)
    return lanes.stack(state.position.shape[0])


def unrolled_vjp(
    world: World,
    state: State,
    action: Tensor | None,
    grads: State,
    world_fields: tuple[str, ...] = (),
) -> tuple[Tensor, ...]:
    """The step's vector-Jacobian product taken with respect to the state's components: the
    gradients of the state's 4 tensors and of the action (if given) from the gradients
    ``grads`` of the next state's (a State of (B, N, ...) tensors). With ``world_fields``
    (names of the world's tensor fields, `WORLD_FIELDS`), the gradients of those fields come
    first, each of its field's shape (a field shared by the batch sums its worlds')."""
    batch = state.position.shape[0]
    components = state_components(state)
    n_world = len(world_fields)
    model = None if n_world else model_of(world)

    def step(*free: Tensor) -> tuple[Tensor, ...]:
        stepped = model
        if stepped is None:
            fields = dict(zip(world_fields, free[:n_world], strict=True))
            stepped = model_of(dataclasses.replace(world, **fields))
        lanes = Lanes.of_flat(list(free[n_world : n_world + len(components)]))
        action_in = free[n_world + len(components)] if action is not None else None
        return tuple(step_lanes(stepped, lanes, action_in).flat(batch))

    fields = [getattr(world, name) for name in world_fields]
    primals = fields + components + ([] if action is None else [action])
    _, pull = torch.func.vjp(step, *primals)
    pulled = pull(tuple(state_components(grads)))
    state_part = pulled[n_world:]
    return (
        *pulled[:n_world],
        *stack_state(list(state_part[: len(components)]), batch).tensors(),
        *state_part[len(components) :],
    )


@dataclasses.dataclass
class Joints:
    """A configuration in joint coordinates: q (rad or m) and q' (rad/s or m/s), one (B,) per
    column of q, with its `Pose` and `Space`."""

    q: list[Tensor]
    q_dot: list[Tensor]
    pose: Pose
    space: Space


def step_lanes(model: Model, lanes: Lanes, action: Tensor | None) -> Lanes:
    """`unrolled_step` from lanes to lanes (``action`` (B, A) or None)."""
    return lanes_at(model, joint_step(model, joints_of(model, lanes), action), lanes)


def joints_of(model: Model, lanes: Lanes) -> Joints:
    """The joint coordinates a state reads as (`physics.joint_positions`), the joint velocity
    closest to its body velocities, and its pose (as the state has it) and space."""
    pose, q = _read_joints(model, lanes)
    space = _joint_space(model, pose)
    return Joints(q, _project_velocity(model, space, lanes), pose, space)


def joints_at(model: Model, q: list[Tensor], q_dot: list[Tensor]) -> Joints:
    """Joint coordinates and velocities (one (B,) per column) with their pose and space."""
    pose = _forward_kinematics(model, q)
    return Joints(q, q_dot, pose, _joint_space(model, pose))


def joint_step(model: Model, joints: Joints, action: Tensor | None) -> Joints:
    """One timestep from joint coordinates: velocity Verlet, limits and servos as bounded
    impulses (`unrolled_step`'s arithmetic). The new q is as integrated (a hinge's angle may
    leave (-pi, pi]: `wrapped` reads it back as a state would)."""
    world = model.world
    dt = world.timestep
    q, q_dot, space = joints.q, joints.q_dot, joints.space
    # As in the maximal engine, a world without actuators ignores the action.
    action = checked_action(world, action if world.actuator_names else None, q[0])
    applied = _motor_forces(model, action)
    q_ddot = _acceleration(model, joints.pose, space, q_dot, applied)
    q_dot = [v + 0.5 * dt * a for v, a in zip(q_dot, q_ddot, strict=True)]
    servos = _servo_rows(model, q, action)
    rows = servos + _limit_rows(model, q)
    impulses = {}
    if rows:
        q_dot, impulses = _solve_rows(model, space, rows, q_dot, {})
    predicted = [v + 0.5 * dt * a for v, a in zip(q_dot, q_ddot, strict=True)]
    q = [c + dt * v for c, v in zip(q, q_dot, strict=True)]
    pose = _forward_kinematics(model, q)
    space = _joint_space(model, pose)
    q_ddot = _acceleration(model, pose, space, predicted, applied)
    q_dot = [v + 0.5 * dt * a for v, a in zip(q_dot, q_ddot, strict=True)]
    if rows:
        servo_impulses = {row.key: impulses[row.key] for row in servos}
        rows = servos + _limit_rows(model, q)
        q_dot, _ = _solve_rows(model, space, rows, q_dot, servo_impulses)
    return Joints(q, q_dot, pose, space)


def wrapped(model: Model, q: list[Tensor]) -> list[Tensor]:
    """Joint coordinates as a state reads them back (`joints_of`): hinge angles in
    (-pi, pi], slider offsets as they are."""
    world, joints = model.world, model.tree.coordinate_joints
    return [
        torch.atan2(torch.sin(c), torch.cos(c)) if world.joint_types[j] == "hinge" else c
        for c, j in zip(q, joints, strict=True)
    ]


def body_components(model: Model, joints: Joints) -> list[Tensor]:
    """The moving bodies' state components at a configuration, each (B,): per body in
    ``joints.space.bodies`` its position (3), rotation (9, row-major), linear and angular
    velocity (3 each), in that order (as `Lanes.flat` lays out each body's)."""
    pose, space, out = joints.pose, joints.space, []
    like = joints.q[0]
    for b in space.bodies:
        rotation = pose.rotation[b]
        out += [pose.position[b].x, pose.position[b].y, pose.position[b].z]
        out += [getattr(c, axis) for axis in "xyz" for c in rotation.columns()]
        for v in _body_velocities(space, b, joints.q_dot):
            out += [torch.zeros_like(like)] * 3 if v is None else [v.x, v.y, v.z]
    return [c.expand_as(like) for c in out]


def _body_velocities(space: Space, body: int, q_dot: list[Tensor]):
    """A moving body's linear and angular velocity J q' (None where exactly zero)."""
    return tuple(
        add(*(scale(j, v) for j, v in zip(columns[body], q_dot, strict=True)))
        for columns in (space.linear, space.angular)
    )


def model_of(world: World, packed: bool = False) -> Model:
    """The world's `Model` (its tree set: reduced coordinates), on lanes or ``packed``."""
    tree = world.structure.tree
    vector = PackedVec if packed else Vec
    moments: list[Vec | None] = [None] * world.n_bodies
    for body, (shape, static) in enumerate(zip(world.shapes, world.is_static, strict=True)):
        if not static:
            moments[body] = vector.of(
                shape_inertia(shape, world.mass[:, body], world.size[:, body])
            )
    return Model(
        world=world,
        tree=tree,
        mass=[world.mass[:, b] for b in range(world.n_bodies)],
        moments=moments,
        gravity=vector.of(world.gravity),
        vector=vector,
        matrix=PackedMat if packed else Mat,
    )


def _attach(rotation: Mat | None, vector: Vec) -> Vec:
    """A parent-frame vector in the world frame (the world's frame: as it is)."""
    return vector if rotation is None else rotation.apply(vector)


def _joint_frame(model: Model, pose: Pose, joint: int):
    """The parent's rotation (None for the world) and the joint's world axis and anchor."""
    world = model.world
    parent = world.joint_parent[joint]
    rotation = None if parent >= world.n_bodies else pose.rotation[parent]
    position = None if parent >= world.n_bodies else pose.position[parent]
    axis = _attach(rotation, model.vector.of(world.axis_parent[:, joint]))
    anchor = _attach(rotation, model.vector.of(world.anchor_parent[:, joint]))
    return rotation, axis, anchor if position is None else position + anchor


def _read_joints(model: Model, lanes: Lanes) -> tuple[Pose, list[Tensor]]:
    """The state's configuration and its joint coordinates (rad or m), one (B,) per column,
    as `physics.joint_positions` defines them."""
    world, tree = model.world, model.tree
    pose = Pose(
        rotation=[None if s else lanes.rotation[b] for b, s in enumerate(world.is_static)],
        position=[None if s else lanes.position[b] for b, s in enumerate(world.is_static)],
        axis=[None] * world.n_joints,
        anchor=[None] * world.n_joints,
    )  # fmt: skip
    q: list[Tensor | None] = [None] * len(tree.coordinate_joints)
    for joint in tree.order:
        parent_rotation, axis, anchor = _joint_frame(model, pose, joint)
        pose.axis[joint], pose.anchor[joint] = axis, anchor
        child = world.joint_child[joint]
        kind, column = world.joint_types[joint], tree.coordinate[joint]
        if kind == "hinge":
            parent_ref = _attach(parent_rotation, model.vector.of(world.ref_parent[:, joint]))
            child_ref = pose.rotation[child].apply(model.vector.of(world.ref_child[:, joint]))
            sine = axis.dot(parent_ref.cross(child_ref))
            q[column] = torch.atan2(sine, parent_ref.dot(child_ref))
        elif kind == "slider":
            child_anchor = pose.position[child] + pose.rotation[child].apply(
                model.vector.of(world.anchor_child[:, joint])
            )
            q[column] = axis.dot(child_anchor - anchor)
    return pose, q


def _forward_kinematics(model: Model, q: list[Tensor]) -> Pose:
    """Body poses and joint frames at joint coordinates q (one (B,) per column)."""
    world, tree = model.world, model.tree
    pose = Pose(
        rotation=[None] * world.n_bodies,
        position=[None] * world.n_bodies,
        axis=[None] * world.n_joints,
        anchor=[None] * world.n_joints,
    )
    for joint in tree.order:
        parent_rotation, axis, anchor = _joint_frame(model, pose, joint)
        rest = model.matrix.of(world.rest_rotation[:, joint])  # the child at q = 0
        if parent_rotation is not None:
            rest = parent_rotation.compose(rest)
        kind = world.joint_types[joint]
        point = anchor
        if kind == "hinge":
            angle = q[tree.coordinate[joint]]
            cosine, sine = torch.cos(angle), torch.sin(angle)
            # Rodrigues on each column c of the rest rotation: c cos + (a x c) sin
            # + a (a . c)(1 - cos).
            rotation = model.matrix.from_columns(
                *(
                    c.scale(cosine) + axis.cross(c).scale(sine) + axis.scale(axis.dot(c) * (1 - cosine))
                    for c in rest.columns()
                )
            )  # fmt: skip
        else:
            rotation = rest
            if kind == "slider":
                point = anchor + axis.scale(q[tree.coordinate[joint]])
        child = world.joint_child[joint]
        pose.axis[joint], pose.anchor[joint] = axis, anchor
        pose.rotation[child] = rotation
        pose.position[child] = point - rotation.apply(model.vector.of(world.anchor_child[:, joint]))
    return pose


def _joint_space(model: Model, pose: Pose) -> Space:
    """The Jacobians and M(q)^-1, M = sum_b m_b Jv_b^T Jv_b + Jw_b^T I_b Jw_b."""
    world, tree = model.world, model.tree
    bodies = [b for b in range(world.n_bodies) if not world.is_static[b]]
    linear: dict[int, list[Vec | None]] = {}
    angular: dict[int, list[Vec | None]] = {}
    for body in bodies:
        linear[body], angular[body] = [], []
        for joint in tree.coordinate_joints:
            if body not in tree.moved[joint]:
                linear[body].append(None)
                angular[body].append(None)
            elif world.joint_types[joint] == "hinge":
                axis = pose.axis[joint]
                linear[body].append(axis.cross(pose.position[body] - pose.anchor[joint]))
                angular[body].append(axis)
            else:
                linear[body].append(pose.axis[joint])
                angular[body].append(None)
    # The angular columns in the body frames, where the inertia is diagonal.
    local = {
        b: [None if w is None else pose.rotation[b].apply_transposed(w) for w in angular[b]]
        for b in bodies
    }
    size = len(tree.coordinate_joints)
    matrix: list[list[Tensor | None]] = [[None] * size for _ in range(size)]
    for i in range(size):
        for j in range(i, size):
            terms = []
            for b in bodies:
                product = dot(linear[b][i], linear[b][j])
                terms.append(None if product is None else model.mass[b] * product)
                if local[b][i] is not None and local[b][j] is not None:
                    terms.append(local[b][i].times(model.moments[b]).dot(local[b][j]))
            matrix[i][j] = matrix[j][i] = add(*terms)
    return Space(bodies, linear, angular, spd_inverse(matrix))


def _inertia_times(rotation: Mat, moments: Vec, vector: Vec | None) -> Vec | None:
    """World-frame inertia R diag(moments) R^T times a vector."""
    if vector is None:
        return None
    return rotation.apply(rotation.apply_transposed(vector).times(moments))


def _generalised(space: Space, force: dict[int, Vec | None], torque: dict[int, Vec | None]):
    """J^T (force, torque): one (B,) or None per coordinate."""
    size = len(space.inverse)
    return [
        add(
            *(dot(space.linear[b][c], force[b]) for b in space.bodies),
            *(dot(space.angular[b][c], torque[b]) for b in space.bodies),
        )
        for c in range(size)
    ]


def _solve(space: Space, generalised: list[Tensor | None], like: Tensor) -> list[Tensor]:
    """M^-1 times generalised forces or momenta (None entries zero); zeros shaped ``like``."""
    out = []
    for row in space.inverse:
        terms = [
            m * g for m, g in zip(row, generalised, strict=True) if m is not None and g is not None
        ]
        out.append(add(*terms) if terms else torch.zeros_like(like))
    return out


def _project_velocity(model: Model, space: Space, lanes: Lanes) -> list[Tensor]:
    """q' whose body velocities are closest to the lanes' in kinetic energy."""
    momentum = {b: scale(lanes.linear[b], model.mass[b]) for b in space.bodies}
    angular = {
        b: _inertia_times(lanes.rotation[b], model.moments[b], lanes.angular[b])
        for b in space.bodies
    }
    like = lanes.position[space.bodies[0]].x
    return _solve(space, _generalised(space, momentum, angular), like)


def _velocity_products(model: Model, pose: Pose, q_dot: list[Tensor]):
    """Body spins and the accelerations at q'' = 0, per body index (None where zero)."""
    world, tree = model.world, model.tree
    n = world.n_bodies
    spin: list[Vec | None] = [None] * (n + 1)
    angular_bias: list[Vec | None] = [None] * (n + 1)
    linear_bias: list[Vec | None] = [None] * (n + 1)
    for joint in tree.order:
        parent, child = min(world.joint_parent[joint], n), world.joint_child[joint]
        axis, anchor = pose.axis[joint], pose.anchor[joint]
        kind, column = world.joint_types[joint], tree.coordinate[joint]
        parent_position = None if parent == n else pose.position[parent]
        w_p, alpha_p, acc_p = spin[parent], angular_bias[parent], linear_bias[parent]
        position = pose.position[child]
        if kind == "hinge":
            to_anchor = anchor if parent_position is None else anchor - parent_position
            from_anchor = position - anchor
            w_c = add(w_p, axis.scale(q_dot[column]))
            alpha_c = add(alpha_p, scale(cross(w_p, axis), q_dot[column]))
            acc_c = add(
                acc_p,
                cross(alpha_p, to_anchor),
                cross(w_p, cross(w_p, to_anchor)),
                cross(alpha_c, from_anchor),
                cross(w_c, cross(w_c, from_anchor)),
            )
        else:  # slider or fixed: the child turns with its parent
            lever = position if parent_position is None else position - parent_position
            w_c, alpha_c = w_p, alpha_p
            acc_c = add(acc_p, cross(alpha_p, lever), cross(w_p, cross(w_p, lever)))
            if kind == "slider":  # the Coriolis term of sliding along a turning axis
                acc_c = add(acc_c, scale(cross(w_p, axis), 2.0 * q_dot[column]))
        spin[child], angular_bias[child], linear_bias[child] = w_c, alpha_c, acc_c
    return spin, angular_bias, linear_bias


def _acceleration(model, pose, space: Space, q_dot, applied) -> list[Tensor]:
    """q'' at a configuration and joint velocity, with ``applied`` generalised motor forces
    (one (B,) or None per coordinate)."""
    world, tree = model.world, model.tree
    spin, angular_bias, linear_bias = _velocity_products(model, pose, q_dot)
    force, torque = {}, {}
    for b in space.bodies:
        gravity = model.gravity if linear_bias[b] is None else model.gravity - linear_bias[b]
        force[b] = gravity.scale(model.mass[b])
        rotation, moments = pose.rotation[b], model.moments[b]
        torque[b] = add(
            negate(_inertia_times(rotation, moments, angular_bias[b])),
            negate(cross(spin[b], _inertia_times(rotation, moments, spin[b]))),
        )
    generalised = _generalised(space, force, torque)
    for c, joint in enumerate(tree.coordinate_joints):
        generalised[c] = add(generalised[c], applied[c], -world.joint_damping[:, joint] * q_dot[c])
    return _solve(space, generalised, q_dot[0])


def _motor_forces(model: Model, action: Tensor | None) -> list[Tensor | None]:
    """Clipped force-motor actions as generalised forces, one (B,) or None per coordinate."""
    world, tree = model.world, model.tree
    applied: list[Tensor | None] = [None] * len(tree.coordinate_joints)
    forces = [a for a, kind in enumerate(world.actuator_type) if kind == "force"]
    for actuator, column in zip(forces, tree.force_coordinates, strict=True):
        limit = world.motor_max[:, actuator]
        force = torch.minimum(torch.maximum(action[:, actuator], -limit), limit)
        applied[column] = add(applied[column], force)
    return applied


def _limit_rows(model: Model, q: list[Tensor]) -> list[Row]:
    world, tree = model.world, model.tree
    rows = []
    for column in tree.limited:
        joint = tree.coordinate_joints[column]
        for sign, bound in ((1.0, world.joint_lower), (-1.0, world.joint_upper)):
            target = sign * ((bound[:, joint] - q[column]) / world.timestep).clamp(-FAR, FAR)
            rows.append(Row(("limit", column, sign), column, sign, target, 0.0, FAR))
    return rows


def _servo_rows(model: Model, q: list[Tensor], action: Tensor | None) -> list[Row]:
    """The paper's servos, as `physics.actuators.servo_speeds`, one row each."""
    world = model.world
    rows = []
    for actuator, column in model.tree.servos:
        target = action[:, actuator]
        if world.actuator_target[actuator] == "position":
            target = world.motor_gain[:, actuator] * (target - q[column])
        speed = world.motor_max_velocity[:, actuator]
        wanted = torch.minimum(torch.maximum(target, -speed), speed)
        bound = world.motor_max_torque[:, actuator] * world.timestep
        rows.append(Row(("servo", actuator), column, 1.0, wanted, -bound, bound))
    return rows


def _solve_rows(model: Model, space: Space, rows: list[Row], q_dot: list[Tensor], start: dict):
    """q' after the rows' impulses and the accumulated impulses, by projected Gauss-Seidel
    on the accumulated impulses."""
    accumulated = dict(start)
    single = len(rows) == 1 or (
        len({row.column for row in rows}) == 1 and all(row.key[0] == "limit" for row in rows)
    )
    for _ in range(1 if single else model.world.solver_iterations):
        for row in rows:
            response = [space.inverse[c][row.column] for c in range(len(q_dot))]
            old = accumulated.get(row.key)
            change = (row.target - row.sign * q_dot[row.column]) / response[row.column]
            new = change if old is None else old + change
            new = torch.clamp(new, row.lower, row.upper)
            step = row.sign * (new if old is None else new - old)
            q_dot = [v if r is None else v + step * r for v, r in zip(q_dot, response, strict=True)]
            accumulated[row.key] = new
    return q_dot, accumulated


def lanes_at(model: Model, joints: Joints, lanes: Lanes) -> Lanes:
    """The state at ``joints``: the moving bodies' poses and velocities J q', static bodies
    as they are in ``lanes``."""
    out = Lanes(list(lanes.position), list(lanes.rotation), list(lanes.linear), list(lanes.angular))
    for b in joints.space.bodies:
        out.position[b], out.rotation[b] = joints.pose.position[b], joints.pose.rotation[b]
        out.linear[b], out.angular[b] = _body_velocities(joints.space, b, joints.q_dot)
    return out
