"""BPTT through the Gymnasium env ``diffcam/PendulumCartSwingUp-v0``: the ``--algo bptt`` path
of ``examples/gym_swingup.py`` (run it from there; this module holds the training loop).

    python examples/gym_swingup.py --algo bptt            # until success (or 3072 episodes)
    python examples/gym_swingup.py --algo bptt --quick    # a smoke run

A small MLP (`diffcam.policy.StatePolicy`: two tanh layers of 64 and a linear skip from the
features, zero output at the start) reads the same scaled state features as SAC's policy and
outputs an action in [-1, 1], scaled to the rail motor's force as for SAC. Every iteration runs
one 3 s episode in each of ``--envs`` (16) worlds through the env's differentiable step
(`SceneVectorEnv.step_tensors`), takes the loss as minus the mean of the env's own reward (then
exactly the paper's loss, ``tasks.swingup.swingup_loss``) and backpropagates through the whole episode
(policy, physics, observation) into the MLP; one Adam step per iteration.

What the recipe of docs/tutorials/swingup.md asks for, as the env allows it:

- gradient decay alpha per physics step (0.9: a short horizon; with 0.99 BPTT stalls on a
  swinging plateau), then 0.98 from training episode 2,048 on (``--settle-decay``,
  ``--settle-from``): the short horizon leaves the balance in a limit cycle, a longer one
  settles it (the state baseline's: 0.98 after 250 iterations; here the budget is
  192). The env holds each action for ``control_every`` (2) physics steps inside one
  `step_tensors` call, so the decay is applied once per env step, as alpha^2 on the state
  before it is observed and stepped (`physics.decay_state_gradient`): a gradient from k env
  steps later arrives scaled by alpha^(2k) on every path (physics, and observation -> policy ->
  action). The held action's second physics step is not decayed separately (the env steps
  both at once); the env has no public setter for its state, so the decayed state goes back
  in through ``reset_tensors(options={"state": ...})`` (it keeps the graph).
- half of each batch started within 0.5 rad of upright (``cartpole.StartRanges(upright_share=
  0.5)``, an argument of `make_swingup_vector_env`): the catch is practised from the start.
  The evaluation keeps the env's default starts (every angle), as for SAC.
- Adam, learning rate 1e-2 falling to 1e-3 (cosine over the budget), gradient norm clipped to 1.
- the training worlds step compiled from the first step (``--compile-physics``, default): the
  default scene path steps eagerly for its first 500,000 state-steps, about 100 iterations at
  20 s each on the loaded CPU here, against about 5 s compiled. The first compiled forward and
  backward took 8 minutes with Inductor's cache cold, about a minute warm (loaded machine).

Training episodes = iterations x worlds; timesteps = episodes x env steps per episode (150).
Measured (figures in examples/gym_swingup.py's docstring): no seed reached a 0.9 success rate
within 3,072 episodes; the best was 0.78 (seed 0, defaults).
"""

from __future__ import annotations

import json
import math
import sys
import time

import numpy as np


class BPTTPolicy:
    """The MLP with SB3's ``predict`` signature, so the SAC example's `evaluate` runs it."""

    def __init__(self, hidden: int = 64) -> None:
        from diffcam.policy import StatePolicy

        # inputs: the 5 features already scaled by the example's FEATURE_SCALE
        self.net = StatePolicy(5, 1, max_action=1.0, hidden=hidden)

    def predict(self, observation, deterministic: bool = True):
        import torch

        with torch.no_grad():
            action = self.net(torch.as_tensor(observation, dtype=torch.float32))
        return action.numpy(), None


def train(args, judge, feature_scale: np.ndarray) -> tuple[list[dict], dict | None, float]:
    """BPTT until the evaluation's success rate reaches ``args.target`` or ``args.episodes``
    training episodes are spent; ``judge`` is gym_swingup's (the evaluation SAC gets too).
    Returns (the evaluations, the first at the target or None, the start time)."""
    import torch

    import diffcam.envs
    import physics
    from diffcam import cartpole

    torch.manual_seed(args.seed)
    ranges = cartpole.StartRanges(upright_share=args.upright_share)
    envs = diffcam.envs.make_swingup_vector_env(
        num_envs=args.envs, seconds=args.seconds, ranges=ranges, autoreset_mode="disabled"
    )
    if args.compile_physics:
        # the default path would step eagerly for the first 500,000 state-steps (about 100
        # iterations); compiled, an iteration's forward and backward take a fraction of that
        envs.scene.compile_after = 0
    envs.reset(seed=args.seed)  # seeds the env's starts; every iteration draws fresh ones
    control_every = envs.task.control_every
    high = torch.as_tensor(envs.single_action_space.high)
    scale = torch.as_tensor(feature_scale)
    model = BPTTPolicy(args.hidden)
    optimizer = torch.optim.Adam(model.net.parameters(), lr=args.lr)
    iterations = max(1, args.episodes // args.envs)
    every = max(1, args.eval_every // args.envs)  # iterations between evaluations

    begin = time.perf_counter()
    history, reached = [], None
    for iteration in range(1, iterations + 1):
        # cosine decay of the learning rate over the budget
        progress = (iteration - 1) / max(1, iterations - 1)
        lr = args.lr_final + 0.5 * (args.lr - args.lr_final) * (1 + math.cos(math.pi * progress))
        for group in optimizer.param_groups:
            group["lr"] = lr
        decay = args.gradient_decay
        if args.settle_decay is not None and (iteration - 1) * args.envs >= args.settle_from:
            decay = args.settle_decay

        envs.reset_tensors()  # 16 fresh random starts (half near upright)
        rewards = []
        for _ in range(envs.max_episode_steps):
            # alpha per physics step: alpha^control_every on the state before each env step
            state = physics.decay_state_gradient(envs.state, decay**control_every)
            obs, _ = envs.reset_tensors(options={"state": state})
            action = model.net(obs * scale) * high
            obs, reward, *_ = envs.step_tensors(action)
            rewards.append(reward)
        loss = -torch.stack(rewards).mean()  # = tasks.swingup.swingup_loss of the episodes
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.net.parameters(), args.clip)
        optimizer.step()
        envs.detach()
        episodes = iteration * args.envs
        print(
            json.dumps(
                {
                    "iteration": iteration,
                    "loss": round(float(loss.detach()), 4),
                    "grad_norm": round(float(grad_norm), 3),
                    "final_upright_error_median": round(
                        float(cartpole.upright_error(envs.state, envs.task.cartpole).median()), 3
                    ),
                    "seconds": round(time.perf_counter() - begin, 1),
                }
            ),
            file=sys.stderr,
            flush=True,
        )
        if iteration % every and iteration != iterations:
            continue
        reached = judge(model, args, history, episodes * envs.max_episode_steps, episodes, begin)
        if reached is not None:
            break
    if args.out is not None:
        torch.save(model.net.state_dict(), args.out)
    return history, reached, begin


if __name__ == "__main__":
    from gym_swingup import main

    main(["--algo", "bptt", *sys.argv[1:]])
