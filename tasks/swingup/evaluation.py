"""`evaluate`: long no-grad rollouts from the hanging start and random starts, plus a video;
`balance_check`: a cheaper, shorter look of the same kind, to pick a run's best weights."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch
from torch import nn
from tqdm import tqdm

import physics
from diffcam.cartpole import StartRanges, random_starts, states_from_starts, upright_error

from .cost import upright_stretches
from .episodes import SwingUpConfig, SwingUpEpisodes


@dataclasses.dataclass(frozen=True)
class BalanceCheck:
    """What `balance_check` measured (angles in rad, positions in m).

    worst: the largest angle from upright over every start after the settling time: below
        the evaluation's 0.2 rad, every start was up by then and stayed within it; about pi,
        some start was not up (or fell).
    rms: root mean square of the angle over the same states.
    cart_max: the largest |x| of the cart over the same states.
    """

    worst: float
    rms: float
    cart_max: float


def balance_check(
    scene,
    policy: nn.Module,
    config: SwingUpConfig,
    seconds: float = 40.0,
    settle: float = 20.0,
    seed: int = 7,
    ranges: StartRanges = StartRanges(),  # noqa: B008 (frozen)
) -> BalanceCheck:
    """Roll the policy out from one random start per batch element of ``scene`` (by default
    the evaluation's distribution: every angle) and measure how far the pole leans after
    ``settle`` seconds: a cheap stand-in for `evaluate` (8 starts of 40 s against 21 of 90 s)
    that needs both the swing-up (by ``settle``) and a still balance (within 0.2 rad after it),
    to compare a training run's weights. No gradients; eager physics.

    Args:
        scene: the pendulum-cart `diffcam.Scene`; its batch size B is the number of starts.
        policy: the controller (its training mode is left as it was).
        config: its `SwingUpConfig`.
        seconds: simulated time per rollout (s).
        settle: seconds left out at the beginning: the time it has to swing up.
        seed: seeds the starts (`random_starts` within ``ranges``): the same starts each
            call, not the evaluation's (seed 2019).
        ranges: the starts' distribution.

    Returns:
        `BalanceCheck`.
    """
    config = dataclasses.replace(config, compile_physics=False)
    episodes = SwingUpEpisodes(scene, policy, config)
    g = episodes.cartpole
    parameter = next(policy.parameters())
    batch = scene.initial_state().position.shape[0]
    starts = random_starts(batch, torch.Generator().manual_seed(seed), ranges, parameter.dtype)
    state = states_from_starts(scene, starts.to(parameter.device), g)
    was_training = policy.training
    policy.eval()
    try:
        with torch.no_grad():
            trajectory = episodes.rollout(state, config.steps(g.timestep, seconds)).trajectory
    finally:
        policy.train(was_training)
    later = trajectory[round(settle / g.timestep) :]
    error = upright_error(later, g)
    return BalanceCheck(
        worst=float(error.max()),
        rms=float(error.square().mean().sqrt()),
        cart_max=float(later.position[..., g.cart, 0].abs().max()),
    )


def evaluate(
    scene_path: str | Path,
    policy: nn.Module,
    config: SwingUpConfig,
    starts: int = 20,
    seconds: float = 90.0,
    seed: int = 2019,
    ranges: StartRanges = StartRanges(),  # noqa: B008 (frozen)
    video: str | Path | None = None,
    fps: float = 25.0,
    progress: bool = True,
    randomization=None,
    randomization_seed: int = 0,
    hold_seconds: float = 60.0,
) -> dict:
    """Roll the policy out from the hanging start and ``starts`` random ones, all at once.

    No gradients; the rollout runs in chunks of about one second (the controller's memory, e.g.
    the frame stack, is carried over) so a progress bar can follow it and only the per-step
    upright errors and the first start's poses are kept.

    Args:
        scene_path: the pendulum-cart scene file.
        policy: the trained policy (its dtype and device are used).
        config: its `SwingUpConfig` (observation, control rate, frames...); the physics runs
            eager whatever its ``compile_physics``.
        starts: random starts, drawn by `random_starts` from a generator seeded with ``seed``.
        seconds: simulated time per rollout (default 90: up to 30 s to swing up, then the
            60 s the pole must stay upright; `upright_seconds` says how long it did).
        ranges: the random starts' distribution.
        video: if set, write a video of the first (hanging) start there (.mp4 or .gif).
        fps: video frame rate (frames are rendered every round(1 / (fps dt)) steps).
        randomization: optional `diffcam.randomize.Randomization`: each rollout sees the
            scene with its own per-episode randomisation, drawn from a generator seeded with
            ``randomization_seed`` (None, the default: the scene as the file draws it).
        hold_seconds: a start is *held* when it is upright at the end and its longest
            stretch within the threshold lasted at least this long (s).

    Returns:
        dict with ``success_rate`` (fraction of the starts + 1 rollouts upright at the end),
        ``starts`` (starts + 1), ``upright_seconds_min`` / ``_mean`` (`upright_stretches`,
        min / mean over starts), ``hanging_upright_seconds`` (the hanging start's),
        ``swing_up_seconds_max``, ``upright_fraction_mean``, ``held`` (how many rollouts
        were held, see ``hold_seconds``), ``hold_seconds``, ``seconds``, ``threshold_rad``.
    """
    from diffcam import load_scene, write_video

    # Eager physics: a compiled step would first compile for this batch size (minutes); the
    # eager step costs about as much without gradients.
    config = dataclasses.replace(config, compile_physics=False)
    parameter = next(policy.parameters())
    scene = load_scene(
        scene_path, batch_size=starts + 1, device=parameter.device, dtype=parameter.dtype
    )
    if randomization is not None:
        from diffcam.randomize import randomize

        generator = torch.Generator().manual_seed(randomization_seed)
        scene = randomize(scene, randomization, generator)
    episodes = SwingUpEpisodes(scene, policy, config).eval()
    g = episodes.cartpole
    generator = torch.Generator().manual_seed(seed)
    all_starts = torch.cat(
        [
            torch.zeros(1, 4, dtype=parameter.dtype),
            random_starts(starts, generator, ranges, parameter.dtype),
        ]
    ).to(parameter.device)
    total = config.steps(g.timestep, seconds)
    chunk = config.steps(g.timestep, min(1.0, seconds))
    every = max(1, round(1.0 / (fps * g.timestep)))
    state, memory = states_from_starts(scene, all_starts, g), None
    errors, shown = [upright_error(state, g)[None]], [state[None, 0:1]]
    done = 0
    with (
        torch.no_grad(),
        tqdm(total=total, desc="evaluate", unit="step", disable=not progress) as bar,
    ):
        while done < total:
            count = min(chunk, total - done)
            result = episodes.rollout(state, count, memory)
            trajectory, memory = result.trajectory, result.memory
            errors.append(upright_error(trajectory[1:], g))
            for t in range(1, count + 1):
                if (done + t) % every == 0:
                    shown.append(trajectory[t : t + 1, 0:1])
            state = trajectory[-1]
            done += count
            bar.update(count)
    stats = upright_stretches(torch.cat(errors), g.timestep, config.upright_threshold)
    if video is not None:
        with torch.no_grad():
            frames = scene.render_trajectory(physics.State.stack([s[0] for s in shown]))
        write_video(video, frames[:, 0], fps=1.0 / (every * g.timestep))
    upright, reached = stats["upright_seconds"], stats["swing_up_seconds"]
    return {
        "success_rate": float(stats["success"].float().mean()),
        "starts": starts + 1,
        "upright_seconds_min": float(upright.min()),
        "upright_seconds_mean": float(upright.mean()),
        "hanging_upright_seconds": float(upright[0]),
        # None when some start never got upright (JSON has no NaN).
        "swing_up_seconds_max": None if reached.isnan().any() else float(reached.max()),
        "upright_fraction_mean": float(stats["upright_fraction"].mean()),
        "held": int((stats["success"] & (upright >= hold_seconds - 1e-6)).sum()),
        "hold_seconds": hold_seconds,
        "seconds": total * g.timestep,
        "threshold_rad": config.upright_threshold,
    }
