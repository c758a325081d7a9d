"""A batched, differentiable 3D rigid-body engine in plain PyTorch.

world = physics.build_world(physics.WorldSpec(bodies=[...], joints=[...]), batch_size=B)
state = physics.initial_state(world)
state = physics.step(world, state, action)
trajectory = physics.rollout(world, state, steps, policy=..., checkpoint_every=k)
print(physics.explain(world, state, steps=steps, actions=actions, compile=True))  # which path, why

The names below are the engine's public face. The solver's parts stay in their modules
(`physics.joints`: joint frames and rows; `physics.contacts`: `find_contacts`; `physics.math3d`;
`physics.rollouts`: `assert_finite`, `mark_batch_dynamic`; `physics.stepping`,
`physics.articulated`...), importable from there but free to change.
"""

from .articulated import ReducedCoordinatesError
from .build import build_world
from .dispatch import Route, Tier, explain, last_route
from .interpolate import states_at
from .joints import joint_positions
from .notices import Fallback, fallbacks
from .rollouts import (
    SimulationError,
    compiled_step,
    decay_gradient,
    decay_state_gradient,
    rollout,
)
from .spec import Body, Joint, ModelError, Motor, WorldSpec
from .state import State
from .stepping import step
from .world import World, initial_state

__all__ = [
    # describing and building a world
    "Body",
    "Joint",
    "Motor",
    "WorldSpec",
    "build_world",
    "World",
    # simulating it
    "State",
    "initial_state",
    "step",
    "compiled_step",
    "rollout",
    "states_at",
    "joint_positions",
    # which path a call runs: eager, torch.compile or ahead of time
    "explain",
    "last_route",
    "fallbacks",
    "Route",
    "Tier",
    "Fallback",
    # backpropagation through time
    "decay_gradient",
    "decay_state_gradient",
    # errors
    "ModelError",
    "SimulationError",
    "ReducedCoordinatesError",
]
