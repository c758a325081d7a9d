"""A batched, differentiable 3D rigid-body engine in plain PyTorch.

world = physics.build_world(physics.WorldSpec(bodies=[...], joints=[...]), batch_size=B)
state = physics.initial_state(world)
state = physics.step(world, state, action)
trajectory = physics.rollout(world, state, steps, policy=..., checkpoint_every=k)
"""

from .articulated import ReducedCoordinatesError
from .build import build_world
from .contacts import find_contacts
from .interpolate import states_at
from .joints import JointFrames, axis_rows, joint_frames, joint_positions
from .math3d import quat_to_matrix
from .rollouts import (
    SimulationError,
    assert_finite,
    compiled_step,
    decay_gradient,
    decay_state_gradient,
    mark_batch_dynamic,
    rollout,
)
from .spec import Body, Joint, ModelError, Motor, WorldSpec
from .state import State
from .stepping import step
from .world import World, initial_state

__all__ = [
    "JointFrames",
    "axis_rows",
    "joint_frames",
    "Body",
    "Joint",
    "ModelError",
    "Motor",
    "ReducedCoordinatesError",
    "SimulationError",
    "State",
    "World",
    "WorldSpec",
    "assert_finite",
    "build_world",
    "compiled_step",
    "mark_batch_dynamic",
    "decay_gradient",
    "decay_state_gradient",
    "find_contacts",
    "initial_state",
    "joint_positions",
    "quat_to_matrix",
    "rollout",
    "states_at",
    "step",
]
