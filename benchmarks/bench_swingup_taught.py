"""Where the taught swing-up recipe's time goes (`tasks.swingup.train_taught`, the default
``--train``): a teacher iteration (state BPTT on the compiled physics), a DAgger round's
rollouts (render / student CNN / teacher / physics and the rest) and its fit (one Adam step
on a minibatch of frame stacks), in CPU time on one thread, with the recipe's settings.
Prints one JSON line per part; ``whole_run_cpu_s`` multiplies them out to the recipe's
iterations, rounds and steps (not counting the balance checks or the physics libraries'
first build). Not part of the test suite.

    python benchmarks/bench_swingup_taught.py [--threads 1] [--randomize] [--record [--note TEXT]]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _record import Recorder, add_record_flag  # noqa: E402

import diffcam  # noqa: E402
from diffcam.cartpole import random_starts, state_features, states_from_starts  # noqa: E402
from diffcam.policy import policy_rollout  # noqa: E402
from tasks import swingup  # noqa: E402

RECORD = Recorder("swingup_taught")


class Timed:
    """Adds the CPU time of each call of ``function`` to ``self.seconds``."""

    def __init__(self, function) -> None:
        self.function, self.seconds = function, 0.0

    def __call__(self, *args):
        began = time.process_time()
        try:
            return self.function(*args)
        finally:
            self.seconds += time.process_time() - began


def teacher_iteration(repeats: int) -> dict:
    """CPU ms of one teacher iteration (16 episodes of 3 s, forward and backward)."""
    phase = swingup.TEACHER_RECIPE[0]
    config = phase.config(swingup.TEACHER_BASE)
    scene = diffcam.load_scene("pendulum_cart", batch_size=phase.batch)
    torch.manual_seed(0)
    policy = swingup.make_policy(config, swingup.motor_limit(scene))
    torch.nn.init.normal_(policy.output.weight, std=0.1)
    episodes = swingup.SwingUpEpisodes(scene, policy, config)
    starts = random_starts(phase.batch, torch.Generator().manual_seed(0), phase.starts)
    times = []
    for k in range(repeats + 2):  # two warm-ups: the compiled physics' libraries load
        began = time.process_time()
        loss, _ = episodes(starts)
        loss.backward()
        if k >= 2:
            times.append(time.process_time() - began)
    return {"part": "teacher_iteration", "cpu_ms": round(1e3 * sorted(times)[len(times) // 2], 1)}


def dagger_round(randomize: bool) -> dict:
    """CPU seconds of one round's rollouts (the recipe's 32 rollouts of 8 s), split."""
    dagger = swingup.DaggerConfig()
    config = dataclasses.replace(swingup.PIXEL_BASE, compile_physics=False)
    scene = diffcam.load_scene("pendulum_cart", batch_size=dagger.episodes)
    torch.manual_seed(0)
    student = swingup.make_policy(config, swingup.motor_limit(scene)).eval()
    teacher = swingup.make_policy(swingup.TEACHER_BASE, swingup.motor_limit(scene)).eval()
    episodes = swingup.SwingUpEpisodes(scene, student, config)
    g = episodes.cartpole
    seen = scene
    if randomize:
        from diffcam.randomize import Randomization, RandomizedScene

        randomization = Randomization.moderate()
        seeds = torch.arange(dagger.episodes)
        params = randomization.sample_seeded(seeds, scene.body_names)
        seen = RandomizedScene(scene, params, randomization)
    render = Timed(episodes.observer(seen))
    act, label = Timed(student), Timed(teacher)

    def observe(state, memory):
        stack, memory, frame = render(state, memory)
        return (stack, state_features(state, g)), memory, frame

    def driver(observation):
        stack, features = observation
        label(features)
        return act(stack)

    starts = random_starts(dagger.episodes, torch.Generator().manual_seed(0), dagger.starts)
    state = states_from_starts(scene, starts, g)
    steps = config.steps(g.timestep, dagger.seconds)
    began, wall = time.process_time(), time.perf_counter()
    with torch.no_grad():
        policy_rollout(seen, driver, observe, steps, state, config.control_every,
                       keep_records=True)  # fmt: skip
    total = time.process_time() - began
    parts = {"render": render.seconds, "student_cnn": act.seconds, "teacher": label.seconds}
    return {
        "part": "dagger_rollouts",
        "randomize": randomize,
        "rollouts": dagger.episodes,
        "seconds_each": dagger.seconds,
        "cpu_s": round(total, 2),
        **{f"{k}_cpu_s": round(v, 2) for k, v in parts.items()},
        "physics_and_rest_cpu_s": round(total - sum(parts.values()), 2),
        "wall_s": round(time.perf_counter() - wall, 2),
    }


def fit_step(repeats: int) -> dict:
    """CPU ms of one Adam step on a minibatch of the recipe's size (stacks gathered from a
    data set of frames, the CNN forward and backward, Adam)."""
    dagger = swingup.DaggerConfig()
    config = swingup.PIXEL_BASE
    torch.manual_seed(0)
    student = swingup.make_policy(config, 30.0)
    frames = torch.randint(0, 256, (dagger.episodes, 200, 3, 48, 144), dtype=torch.uint8)
    data = swingup.Demonstrations(frames, torch.zeros(dagger.episodes, 200, 1))
    optimizer = torch.optim.Adam(student.parameters(), lr=dagger.learning_rate)
    generator = torch.Generator().manual_seed(0)
    gather, step = [], []
    for k in range(repeats + 3):
        began = time.process_time()
        episode = torch.randint(dagger.episodes, (dagger.minibatch,), generator=generator)
        index = torch.randint(200, (dagger.minibatch,), generator=generator)
        stacks = data.stacks(episode, index, config.frames)
        middle = time.process_time()
        loss = (student(stacks) / student.max_action - data.actions[episode, index]).square()
        optimizer.zero_grad()
        loss.mean().backward()
        optimizer.step()
        if k >= 3:
            gather.append(middle - began)
            step.append(time.process_time() - middle)
    median = sorted(range(repeats), key=lambda i: gather[i] + step[i])[repeats // 2]
    return {
        "part": "fit_step",
        "minibatch": dagger.minibatch,
        "cpu_ms": round(1e3 * (gather[median] + step[median]), 1),
        "gather_cpu_ms": round(1e3 * gather[median], 1),
        "cnn_and_adam_cpu_ms": round(1e3 * step[median], 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--randomize", action="store_true", help="also the randomised rollouts")
    parser.add_argument("--repeats", type=int, default=20)
    add_record_flag(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    RECORD.enable(args.record, note=args.note)
    teacher = teacher_iteration(max(3, args.repeats // 4))
    RECORD.emit({"bench": "swingup_taught", "threads": args.threads, **teacher})
    fit = fit_step(args.repeats)
    RECORD.emit({"bench": "swingup_taught", "threads": args.threads, **fit})
    iterations = sum(p.iterations for p in swingup.TEACHER_RECIPE)
    for randomize in (False, True) if args.randomize else (False,):
        dagger = swingup.RANDOMIZED_DAGGER if randomize else swingup.DaggerConfig()
        rollouts = dagger_round(randomize)
        RECORD.emit({"bench": "swingup_taught", "threads": args.threads, **rollouts})
        whole = iterations * teacher["cpu_ms"] / 1e3 + dagger.rounds * (
            rollouts["cpu_s"] + dagger.fit_steps * fit["cpu_ms"] / 1e3
        )
        RECORD.emit(
            {
                "bench": "swingup_taught",
                "threads": args.threads,
                "part": "whole_run_estimate",
                "randomize": randomize,
                "teacher_iterations": iterations,
                "rounds": dagger.rounds,
                "fit_steps_per_round": dagger.fit_steps,
                "whole_run_cpu_s": round(whole, 1),
            }
        )


if __name__ == "__main__":
    main()
