"""The pendulum-cart as a control problem: what the bundled ``pendulum_cart`` scene (or any
scene with the same structure) means to a controller, as the swing-up environment
(``diffcam/PendulumCartSwingUp-v0``, `diffcam.envs.SwingUpTask`) defines it.

- `CartPole`: where the cart and the pole are in a scene's state, and the pole's geometry,
  read from the scene file.
- `initial_states`, `states_from_starts`: joint-consistent batched states from
  (x, theta, x_dot, theta_dot); theta is the pole's angle about the hinge axis (+y):
  0 hanging down, pi upright. `StartRanges`, `random_starts`: random starts in ranges.
- `state_features` (`STATE_FEATURES`): what a state-based controller sees;
  `upright_error`: how far the pole is from upright; `step_cost`: the paper's per-step cost
  (Degrave et al. 2019, section 3.4); `pole_direction`: the pole's direction in the world.
- `episode_steps`: an episode's length in physics steps.
- `load_controller` (`Controller`, `SHIPPED`): a trained controller (the package's shipped
  ones by name) with its observer and a rollout, no training code needed.

Not loaded by ``import diffcam``: ``from diffcam import cartpole``. It needs no gymnasium. The
swing-up's training code (its losses, the episodes module, the recipes, evaluation and
writing weights files) lives outside the library, in the repository's ``tasks`` package
(``tasks.swingup``, ``tasks.training``).
"""

from .controller import SHIPPED, Controller, controller_policy, load_controller, observed_scene
from .cost import STATE_FEATURES, pole_direction, state_features, step_cost, upright_error
from .starts import StartRanges, initial_states, random_starts, states_from_starts
from .structure import CartPole, episode_steps

__all__ = [
    "SHIPPED",
    "STATE_FEATURES",
    "CartPole",
    "Controller",
    "StartRanges",
    "episode_steps",
    "initial_states",
    "pole_direction",
    "controller_policy",
    "load_controller",
    "observed_scene",
    "random_starts",
    "state_features",
    "states_from_starts",
    "step_cost",
    "upright_error",
]
