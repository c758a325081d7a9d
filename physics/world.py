"""`World`: the physical model as batched tensors plus static structure (a plain container).

`physics.build_world` makes one from a `WorldSpec` (see `physics.build`); the formulations
(`physics.step` for maximal coordinates, `physics.articulated` for reduced ones), the joint
geometry, the actuators and the contacts read it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import torch

from .state import State

if TYPE_CHECKING:
    from .articulated.tree import Tree

Tensor = torch.Tensor


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
    box_contact_a: Tensor  # (K,) long
    box_contact_b: Tensor  # (K,) long
    box_segment_box: Tensor  # (Q,) long
    box_segment_other: Tensor  # (Q,) long
    hull_contact_a: Tensor  # (H,) long
    hull_contact_b: Tensor  # (H,) long
    hull_contact_shape_a: Tensor  # (H,) long: polyhedra, see `World.hull_faces`
    hull_contact_shape_b: Tensor  # (H,) long
    hull_segment_hull: Tensor  # (Q,) long
    hull_segment_other: Tensor  # (Q,) long
    hull_segment_shape: Tensor  # (Q,) long
    hull_faces: Tensor  # (G, F, M) long
    hull_face_valid: Tensor  # (G, F) bool
    hull_edges: Tensor  # (G, E, 4) long
    hull_edge_valid: Tensor  # (G, E) bool
    # Corners, faces and edges the polyhedra of each role take (the most of those it names):
    # its tables are cut to these, so that a box facing a 500-point hull is not padded to it.
    hull_extent_a: tuple[int, int, int] = (0, 0, 0)
    hull_extent_b: tuple[int, int, int] = (0, 0, 0)
    hull_extent_segment: tuple[int, int, int] = (0, 0, 0)
    # (H, K) long: per hull-plane pair, the plane candidates of its points (-1 pads a shorter
    # hull); the contacts keep a few of each (`physics.contacts.hull_support`).
    hull_plane_rows: Tensor | None = None
    tree: Tree | None = None  # the joint tree when coordinates == "reduced"


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

    # Contact candidates (static): point-plane, segment-segment, box-box and box-segment pairs.
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
    # Box-box pairs (4 manifold slots each) and box-sphere/capsule pairs (3 slots each); a
    # cylinder takes part as a box (see `physics.collision_pairs._box_half`).
    box_contact_a: list[int]
    box_contact_b: list[int]
    box_map_a: Tensor  # (K, 3, 3) size -> half extents, body a
    box_map_b: Tensor
    box_segment_box: list[int]
    box_segment_other: list[int]  # the sphere or capsule
    box_segment_box_map: Tensor  # (Q, 3, 3) size -> half extents of the box
    box_segment_map: Tensor  # (Q, 3, 3) size -> half axis of the sphere or capsule
    box_segment_radius: Tensor  # (Q, 3) size -> radius
    # Hull-hull and hull-box pairs (4 manifold slots each), hull-sphere/capsule pairs (3 slots
    # each): `physics.contact_hull`. Each pair names its bodies' polyhedra (`physics.polyhedron`,
    # a box the cube of its corners), G of them, in size units, padded to the largest
    # (`physics.collision_pairs._padded_shapes`).
    hull_contact_a: list[int]
    hull_contact_b: list[int]
    hull_contact_shape_a: list[int]  # (H,) polyhedron of body a
    hull_contact_shape_b: list[int]
    hull_segment_hull: list[int]
    hull_segment_other: list[int]  # the sphere or capsule
    hull_segment_shape: list[int]  # (Q,) polyhedron of the hull
    hull_segment_map: Tensor  # (Q, 3, 3) size -> half axis of the sphere or capsule
    hull_segment_radius: Tensor  # (Q, 3) size -> radius
    hull_faces: list  # (G, F, M) corner indices of each face's loop
    hull_face_valid: list  # (G, F) bool
    hull_edges: list  # (G, E, 4) corner i, corner j, the faces of i -> j and of j -> i
    hull_edge_valid: list  # (G, E) bool
    hull_counts: list  # (G, 3) corners, faces, edges of each polyhedron before padding
    hull_points: Tensor  # (G, K, 3) corners in size units
    hull_normals: Tensor  # (G, F, 3) unit outward face normals in size units
    # Set by `build_world` (`physics.structure.index_structure`) once the fields above are.
    structure: Structure | None = dataclasses.field(default=None, repr=False)
    coordinates: str = "maximal"  # or "reduced" (what "auto" chose): see `WorldSpec`
    # Whether the eager step may leave out the contacts that cannot act (`physics.broadphase`).
    broadphase: bool = True

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


def initial_state(world: World) -> State:
    """The state the world was built in: (B, N, ...) tensors."""
    return State(
        position=world.initial_position,
        rotation=world.initial_rotation,
        linear_velocity=world.initial_velocity,
        angular_velocity=world.initial_angular_velocity,
    )


def __getattr__(name: str):
    # `physics.world.build_world` stays importable; the builder imports this module, so it is
    # looked up on first use rather than imported here.
    if name == "build_world":
        from .build import build_world

        return build_world
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: The names of `World`'s tensor fields, in field order.
TENSOR_FIELDS = tuple(f.name for f in dataclasses.fields(World) if f.type in ("Tensor", Tensor))
