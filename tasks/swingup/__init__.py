"""The pendulum-cart swing-up task (Degrave et al. 2019, section 3.4), from pixels or from state.

Pieces, each usable on its own. The problem itself is the library's `diffcam.cartpole` (the
swing-up environment's definition), re-exported here:

- `CartPole`: where the cart and the pole are in a scene's state, and the pole's geometry, read
  from the scene file (the bundled ``pendulum_cart`` or any scene with the same structure).
- `initial_states`, `random_starts`: batched starts from (x, theta, x_dot, theta_dot).
  theta is the pole's angle about the hinge axis (+y): 0 hanging down, pi upright.
- `state_features`, `upright_error`, `step_cost`: what the state-based baseline sees, how far
  the pole is from upright, and the paper's per-step cost.

The training side:

- `swingup_loss`: the paper's loss of a trajectory; `BalanceWeights`, `balance_cost`,
  `balance_loss`: the quadratic loss of the recipe's balance phase; `curriculum_ranges`: starts
  that widen from near upright to every angle.
- `upright_stretches`: evaluation metrics from per-step upright errors.
- `SwingUpConfig`, `make_policy`, `SwingUpEpisodes`: one batch of episodes as an ``nn.Module``
  (starts -> loss), so that ``DistributedDataParallel`` can wrap it.
- `evaluate`: long no-grad rollouts from the hanging start and random starts, plus a video;
  `balance_check`: a cheap look of the same kind (`BalanceCheck`), to pick a run's best weights.
- `save_policy`, `load_policy`: the weights file the example ships.
- `Phase`, `PIXEL_RECIPE`, `PIXEL_BASE`, `train_recipe`: a training recipe as a list of
  phases, and the runner that trains it in one go (resumable); `PIXEL_RECIPE` trains the
  pixel controller with every gradient through the renderer (the paper's way).
- `train_taught` (`TEACHER_RECIPE`, `DaggerConfig`, `dagger`): the pixel controller taught by
  a state controller trained through the physics (the example's default ``--train``).
"""

from diffcam.cartpole import (
    STATE_FEATURES,
    CartPole,
    StartRanges,
    initial_states,
    random_starts,
    state_features,
    states_from_starts,
    step_cost,
    upright_error,
)

from .cost import BalanceWeights, balance_cost, balance_loss, swingup_loss, upright_stretches
from .curriculum import curriculum_ranges
from .episodes import SwingUpConfig, SwingUpEpisodes, make_policy, motor_limit
from .evaluation import BalanceCheck, balance_check, evaluate
from .imitation import (
    RANDOMIZED_DAGGER,
    TEACHER_BASE,
    TEACHER_RECIPE,
    DaggerConfig,
    Demonstrations,
    TaughtResult,
    dagger,
    train_taught,
)
from .recipe import PIXEL_BASE, PIXEL_RECIPE, Phase, RecipeResult, train_recipe
from .timing import time_iteration
from .weights import load_policy, save_policy

__all__ = [
    "RANDOMIZED_DAGGER",
    "TEACHER_BASE",
    "TEACHER_RECIPE",
    "DaggerConfig",
    "Demonstrations",
    "TaughtResult",
    "dagger",
    "train_taught",
    "PIXEL_BASE",
    "PIXEL_RECIPE",
    "STATE_FEATURES",
    "BalanceCheck",
    "BalanceWeights",
    "CartPole",
    "Phase",
    "RecipeResult",
    "StartRanges",
    "SwingUpConfig",
    "SwingUpEpisodes",
    "balance_check",
    "balance_cost",
    "balance_loss",
    "evaluate",
    "curriculum_ranges",
    "initial_states",
    "load_policy",
    "make_policy",
    "motor_limit",
    "random_starts",
    "save_policy",
    "states_from_starts",
    "state_features",
    "step_cost",
    "swingup_loss",
    "time_iteration",
    "train_recipe",
    "upright_error",
    "upright_stretches",
]
