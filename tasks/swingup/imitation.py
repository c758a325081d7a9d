"""The pixel controller taught by a state controller: the recipe `--train` runs by default.

Two stages, one resumable run:

1. **The teacher**: a `StatePolicy` on the true state, trained by backpropagation through
   the differentiable physics (`TEACHER_RECIPE` through `train_recipe`; 230 iterations of
   16 episodes of 3 s, a fraction of a second each on the compiled physics).
2. **The student**: the `PixelPolicy` the task ships, trained to act as the teacher does on
   the states the student itself visits (DAgger: Ross, Gordon and Bagnell, "A Reduction of
   Imitation Learning and Structured Prediction to No-Regret Online Learning", 2011). Each
   round rolls out the current student (and a share of rollouts by the teacher with action
   noise) from random starts while the camera renders what the student sees; every control
   step is labelled with the teacher's action on the true state; the round's frames and
   labels join the data set, and the CNN is fitted to all of it by regression (Adam on the
   squared action error). The first round's rollouts are all the teacher's.

At run time the student sees only the frames. The renderer's gradients are not used here
(the labels are actions, not a loss through the images): its forward pass makes the data;
the physics' gradients train the teacher. `train_recipe` with `PIXEL_RECIPE` is the paper's
way, every gradient through the renderer, kept beside it (docs/tutorials/swingup.md).

Files in the run's folder: ``teacher/`` (the teacher's phases, as `train_recipe` keeps
them), ``student/checkpoint.pt`` (the student's weights,
Adam, the generator, the rounds done and their rows; written atomically after each round)
and ``student/rounds/<k>.pt`` (round k's control states, labels and randomisation seeds;
the frames are rendered again from them on resume: about 3 MB a round, where its frames
would take 130).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

import physics
from diffcam.cartpole import (
    StartRanges,
    random_starts,
    state_features,
    states_from_starts,
    upright_error,
)
from diffcam.policy import policy_rollout

from .. import training
from .episodes import SwingUpConfig, SwingUpEpisodes
from .recipe import PIXEL_BASE, Phase, RecipeResult, train_recipe

TEACHER_DIR = "teacher"
STUDENT_DIR = "student"
ROUNDS_DIR = "rounds"

# The teacher acts at the student's control rate (25 Hz), on the compiled physics.
TEACHER_BASE = SwingUpConfig(
    observation="state", control_every=4, bptt_segment=None, compile_physics=True
)
# A short horizon (alpha 0.9) finds the swing-up and the catch; a longer one (0.98) settles
# the balance; the quadratic balance loss on half of each batch, from starts near upright,
# takes out the limit cycle the paper's distance leaves (docs/tutorials/swingup.md), and the
# phase keeps the weights its balance checks judged best.
TEACHER_RECIPE: tuple[Phase, ...] = (
    Phase("swing", iterations=150, learning_rate=1e-2, final_learning_rate=1e-3,
          gradient_decay=0.9, batch=16),
    Phase("settle", iterations=40, learning_rate=1e-3, final_learning_rate=1e-3,
          gradient_decay=0.98, batch=16),
    Phase("balance", iterations=40, learning_rate=1e-3, final_learning_rate=1e-3,
          gradient_decay=0.98, batch=16, balance_share=0.5, check_every=20,
          starts=StartRanges(upright_share=0.5, upright_theta=0.8, theta_dot=1.5)),
)  # fmt: skip


@dataclasses.dataclass(frozen=True)
class DaggerConfig:
    """The student's rounds.

    rounds: rollouts-then-fit rounds.
    episodes: rollouts per round (one batch).
    seconds: simulated time per rollout (s).
    fit_steps: Adam steps on the whole data set after each round.
    minibatch: frame stacks per Adam step.
    learning_rate: Adam's rate (constant).
    teacher_share: after the first round, the share of each round's rollouts the teacher
        drives (with ``action_noise``), the rest the student; the first round is all teacher.
    action_noise: std of the Gaussian noise on the teacher's actions in its rollouts, in
        units of the motor limit (it shows the student how the teacher recovers).
    starts: the rollouts' start distribution.
    """

    rounds: int = 10
    episodes: int = 32
    seconds: float = 8.0
    fit_steps: int = 300
    minibatch: int = 64
    learning_rate: float = 1e-3
    teacher_share: float = 0.25
    action_noise: float = 0.3
    starts: StartRanges = StartRanges(upright_share=0.25)  # noqa: RUF009 (frozen)

    def __post_init__(self) -> None:
        if self.rounds < 1 or self.episodes < 1 or self.fit_steps < 0 or self.minibatch < 1:
            raise ValueError(
                f"DaggerConfig: rounds, episodes and minibatch must be >= 1 and fit_steps >= 0: "
                f"{self}"
            )
        if not 0.0 <= self.teacher_share <= 1.0:
            raise ValueError(f"DaggerConfig.teacher_share is {self.teacher_share}; use 0 to 1")


# Under domain randomisation (`Randomization.moderate()`) the student has more to learn from
# the same teacher (every look of the scene): twice the rounds.
RANDOMIZED_DAGGER = DaggerConfig(rounds=20)


@dataclasses.dataclass(frozen=True)
class Demonstrations:
    """The data set: what the student saw and what the teacher did there.

    frames: (E, T, 3, H, W) uint8, the rendered frame of each control step of E rollouts
        (in 1/255 steps: within half a step of the float frames the controller sees at run
        time; a quarter of the memory of float32).
    actions: (E, T, A) the teacher's actions in units of the motor limit (in [-1, 1]).
    """

    frames: torch.Tensor
    actions: torch.Tensor

    def stacks(self, episode: torch.Tensor, step: torch.Tensor, frames: int) -> torch.Tensor:
        """(M, 3 * frames, H, W) float frame stacks, oldest first, as `push_frame` makes
        them (the first frame repeated before a rollout's start), for M (episode, step)."""
        steps = [(step - k).clamp(min=0) for k in range(frames - 1, -1, -1)]
        return torch.cat([self.frames[episode, s] for s in steps], 1).float() / 255.0


class _Driver(nn.Module):
    """The rollouts' controller: the teacher (plus noise) on the rows of ``by_teacher``,
    the student elsewhere. Its observation is (frame stack, state features)."""

    def __init__(self, student, teacher, by_teacher, noise, max_action, generator):
        super().__init__()
        self.student, self.teacher = student, teacher
        self.by_teacher, self.noise = by_teacher, noise
        self.max_action, self.generator = max_action, generator
        self.teacher_drives = bool(by_teacher.any())  # once, not a host sync per step

    def forward(self, observation):
        stack, features = observation
        student = self.student(stack)
        if not self.teacher_drives:
            return student
        teacher = self.teacher(features)
        noise = torch.randn(teacher.shape, generator=self.generator, dtype=teacher.dtype)
        noisy = teacher + self.noise * self.max_action * noise.to(teacher.device)
        noisy = noisy.clamp(-self.max_action, self.max_action)
        return torch.where(self.by_teacher[:, None], noisy, student)


def _randomized(scene, randomization, seeds: torch.Tensor | None):
    """``scene`` with each episode's randomisation drawn from its seed (None: as it is)."""
    if randomization is None or seeds is None:
        return scene
    from diffcam.randomize import RandomizedScene

    params = randomization.sample_seeded(seeds, scene.body_names)
    return RandomizedScene(scene, params, randomization)


def _quantized(frames: torch.Tensor) -> torch.Tensor:
    """Frames in [0, 1] (any shape) as uint8."""
    return (frames.clamp(0.0, 1.0) * 255.0).round().to(torch.uint8)


def dagger(
    scene,
    student: nn.Module,
    teacher: nn.Module,
    student_config: SwingUpConfig,
    teacher_config: SwingUpConfig,
    config: DaggerConfig,
    out: str | Path,
    seed: int = 0,
    randomization=None,
    progress: Callable[[str, float | None, int], None] | None = None,
) -> list[dict]:
    """Train ``student`` (in place) to act as ``teacher`` from frames, in DAgger rounds,
    resuming from ``out/checkpoint.pt`` when there is one.

    Args:
        scene: the pendulum-cart `diffcam.Scene` of batch ``config.episodes``.
        student: a `PixelPolicy` (frame stacks -> actions), e.g. `make_policy(student_config)`.
        teacher: a `StatePolicy` of ``teacher_config`` (state features -> actions); not changed.
        student_config, teacher_config: their `SwingUpConfig`; the same ``control_every``.
        config: `DaggerConfig`.
        out: the student's folder (``checkpoint.pt``, ``rounds/<k>.pt``).
        seed: seeds the generator of the starts, the teacher's noise, the randomisation's
            seeds and the minibatches.
        randomization: a `diffcam.randomize.Randomization`: each rollout sees the scene with
            its own randomisation (seeds drawn per round); None: the scene as it is.
        progress: called as ``progress(what, loss, units)`` after each piece of work, ``units``
            done since the last call: a round's rollouts count ``fit_steps // 2`` units
            (about their cost), each Adam step one.

    Returns:
        One dict per round: round, data (frame stacks in the data set), loss (mean squared
        action error over the round's last 20 steps, in motor-limit units), student_upright
        (share of the round's student rollouts within the upright threshold for their last 2 s;
        None in the first round), collect_seconds, fit_seconds.
    """
    if student_config.control_every != teacher_config.control_every:
        raise ValueError(
            f"dagger: the student acts every {student_config.control_every} physics steps, "
            f"the teacher every {teacher_config.control_every}; they must be the same"
        )
    out = Path(out)
    report = progress or (lambda what, loss, units: None)
    episodes = SwingUpEpisodes(scene, student, dataclasses.replace(student_config,
                                                                   compile_physics=False))  # fmt: skip
    steps = student_config.steps(episodes.cartpole.timestep, config.seconds)
    described = {
        "dagger": dataclasses.asdict(config),
        "student": dataclasses.asdict(student_config),
        "randomization": None if randomization is None else randomization.to_dict(),
        "seed": seed,
    }
    optimizer = torch.optim.Adam(student.parameters(), lr=config.learning_rate)
    generator = torch.Generator().manual_seed(seed)
    rows: list[dict] = []
    done = 0
    checkpoint = out / training.CHECKPOINT
    if checkpoint.exists():
        saved = torch.load(checkpoint, map_location="cpu", weights_only=True)
        if saved["described"] != described:
            raise ValueError(
                f"{checkpoint}: a run with other settings ({saved['described']}); this run's: "
                f"{described}. Use another --out, or delete {out} to start again"
            )
        student.load_state_dict(saved["policy"])
        optimizer.load_state_dict(saved["optimizer"])
        generator.set_state(saved["generator"])
        rows, done = saved["rows"], saved["round"]
    store = _Store(config.rounds * config.episodes)
    for k in range(done):  # the finished rounds' frames, rendered again from their states
        kept = torch.load(out / ROUNDS_DIR / f"{k}.pt", map_location="cpu", weights_only=True)
        seen = _randomized(scene, randomization, kept["seeds"])
        states = physics.State(*(t.to(scene.device) for t in kept["states"]))
        store.add(_render_again(episodes, seen, states), kept["actions"])
        report("rollouts (resumed)", None, _round_units(config))
    for k in range(done, config.rounds):
        began = time.perf_counter()
        collected = _collect(episodes, teacher, config, k, generator, randomization, steps)
        training.atomic_save(
            {"states": collected.states, "actions": collected.actions, "seeds": collected.seeds},
            out / ROUNDS_DIR / f"{k}.pt",
        )
        store.add(collected.frames, collected.actions)
        collect_seconds = time.perf_counter() - began
        report(f"round {k + 1}/{config.rounds} rollouts", None, _collect_units(config))

        began = time.perf_counter()
        data = store.data()
        losses = _fit(student, optimizer, data, config, student_config.frames, generator,
                      lambda loss, k=k: report(f"round {k + 1}/{config.rounds} fit", loss, 1))  # fmt: skip
        rows.append(
            {
                "round": k + 1,
                "data": int(data.actions.shape[0] * data.actions.shape[1]),
                "loss": sum(losses[-20:]) / len(losses[-20:]) if losses else None,
                "student_upright": collected.student_upright,
                "collect_seconds": round(collect_seconds, 2),
                "fit_seconds": round(time.perf_counter() - began, 2),
            }
        )
        training.atomic_save(
            {
                "policy": student.state_dict(),
                "optimizer": optimizer.state_dict(),
                "generator": generator.get_state(),
                "round": k + 1,
                "rows": rows,
                "described": described,
            },
            checkpoint,
        )
    student.eval()
    return rows


@dataclasses.dataclass(frozen=True)
class _Collected:
    """One round's rollouts: frames (E, T, 3, H, W) uint8, actions (E, T, A) the teacher's
    labels (motor-limit units), states the control steps' state tensors (T, E, ...) on the
    CPU, seeds (E,) of the randomisation (None: none), student_upright (see `dagger`)."""

    frames: torch.Tensor
    actions: torch.Tensor
    states: list[torch.Tensor]
    seeds: torch.Tensor | None
    student_upright: float | None


def _collect(episodes: SwingUpEpisodes, teacher, config: DaggerConfig, round_index: int,
             generator: torch.Generator, randomization, steps: int) -> _Collected:  # fmt: skip
    """Round ``round_index``'s rollouts from random starts (drawn from ``generator``, then
    the randomisation's seeds), driven by the student and, on a share of them, the teacher."""
    student, scene, g = episodes.policy, episodes.scene, episodes.cartpole
    c = episodes.config
    parameter = next(student.parameters())
    starts = random_starts(config.episodes, generator, config.starts, parameter.dtype)
    seeds = None
    if randomization is not None:
        from diffcam.randomize.training import SEED_LIMIT

        seeds = torch.randint(0, SEED_LIMIT, (config.episodes,), generator=generator)
    share = 1.0 if round_index == 0 else config.teacher_share
    by_teacher = (torch.arange(config.episodes) < round(share * config.episodes)).to(
        parameter.device
    )
    driver = _Driver(student, teacher, by_teacher, config.action_noise, student.max_action,
                     generator)  # fmt: skip
    seen = _randomized(scene, randomization, seeds)
    pixels = episodes.observer(seen)

    def observe(state, memory):
        stack, memory, frame = pixels(state, memory)
        return (stack, state_features(state, g)), memory, frame

    state = states_from_starts(scene, starts.to(parameter.device), g)
    student.eval()
    with torch.no_grad():
        rollout = policy_rollout(seen, driver, observe, steps, state,
                                 control_every=c.control_every, keep_records=True)  # fmt: skip
        control_states = rollout.trajectory[: -1 : c.control_every]
        labels = teacher(state_features(control_states, g)) / student.max_action  # (T, E, A)
        last = upright_error(rollout.trajectory[-round(2.0 / g.timestep) :], g)[:, ~by_teacher]
        upright = (
            None
            if last.shape[1] == 0
            else float((last < c.upright_threshold).all(0).float().mean())
        )
    return _Collected(
        frames=_quantized(rollout.records.transpose(0, 1)).cpu(),
        actions=labels.transpose(0, 1).cpu(),
        # copies: views would save the whole trajectory's storage with them
        states=[
            t.cpu().clone(memory_format=torch.contiguous_format) for t in control_states.tensors()
        ],
        seeds=seeds,
        student_upright=upright,
    )


class _Store:
    """The data set, grown round by round into tensors allocated once for every round's
    rollouts (``capacity``), so that adding a round copies only that round."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.count = capacity, 0
        self.frames = self.actions = None

    def add(self, frames: torch.Tensor, actions: torch.Tensor) -> None:
        """Append (E, T, ...) frames and (E, T, A) actions."""
        if self.frames is None:
            self.frames = frames.new_empty((self.capacity, *frames.shape[1:]))
            self.actions = actions.new_empty((self.capacity, *actions.shape[1:]))
        end = self.count + frames.shape[0]
        self.frames[self.count : end] = frames
        self.actions[self.count : end] = actions
        self.count = end

    def data(self) -> Demonstrations:
        """The rounds so far (views, no copy)."""
        return Demonstrations(self.frames[: self.count], self.actions[: self.count])


def _render_again(episodes: SwingUpEpisodes, scene, control_states: physics.State):
    """(E, T, 3, H, W) uint8: the frames of (T, E, ...) control states, drawn by the
    observer the rollout drew them with, in the same order (a randomised scene's sensor
    noise comes out the same)."""
    observe, memory, drawn = episodes.observer(scene), None, []
    with torch.no_grad():
        for t in range(control_states.position.shape[0]):
            _, memory, frame = observe(control_states[t], memory)
            drawn.append(frame)
    return _quantized(torch.stack(drawn, 1)).cpu()


def _fit(student, optimizer, data: Demonstrations, config: DaggerConfig, frames: int,
         generator: torch.Generator, step_done) -> list[float]:  # fmt: skip
    """``config.fit_steps`` Adam steps of the squared action error on random minibatches of
    ``data``; the losses."""
    parameter = next(student.parameters())
    count, length = data.actions.shape[:2]
    student.train()
    losses = []
    for _ in range(config.fit_steps):
        episode = torch.randint(count, (config.minibatch,), generator=generator)
        step = torch.randint(length, (config.minibatch,), generator=generator)
        stacks = data.stacks(episode, step, frames).to(parameter)
        target = data.actions[episode, step].to(parameter)
        loss = (student(stacks) / student.max_action - target).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(float(loss.detach()))
        step_done(losses[-1])
    student.eval()
    return losses


@dataclasses.dataclass(frozen=True)
class TaughtResult:
    """What `train_taught` returns.

    teacher: the teacher's `RecipeResult` (its rows, config, episodes and balance checks).
    rounds: the student's rows (`dagger`).
    config: the student's `SwingUpConfig` (what the controller is run with).
    episodes: the teacher's training episodes plus the student's rollouts.
    """

    teacher: RecipeResult
    rounds: list[dict]
    config: SwingUpConfig
    episodes: int


def train_taught(
    load_scene,
    out: str | Path,
    max_action: float,
    seed: int = 0,
    student_config: SwingUpConfig = PIXEL_BASE,
    dagger_config: DaggerConfig = DaggerConfig(),  # noqa: B008 (frozen)
    randomization=None,
    teacher_phases: tuple[Phase, ...] = TEACHER_RECIPE,
    teacher_base: SwingUpConfig = TEACHER_BASE,
    progress: bool = True,
    describe: dict | None = None,
    device: torch.device | str | None = None,
) -> tuple[nn.Module, nn.Module, TaughtResult]:
    """Train the teacher, then the student, in ``out`` (resumable: started again with the same
    settings it goes on where it stopped); one tqdm bar over both (stage, loss, ETA).

    Args:
        load_scene: ``load_scene(batch_size)`` -> the pendulum-cart `diffcam.Scene`.
        out: the run's folder (``teacher/``, ``student/``).
        max_action: the motor limit (N), `motor_limit`.
        seed: seeds both networks' initial weights and every generator of the run.
        student_config: the student's settings (`PIXEL_BASE`: 144 x 48 frames, 25 Hz).
        dagger_config: `DaggerConfig`.
        randomization: a `diffcam.randomize.Randomization` for the student's rollouts (the
            teacher reads the state: what it sees does not change).
        teacher_phases, teacher_base: the teacher's recipe and settings.
        progress: show the bar.
        describe: JSON-able settings of the caller, stored with the teacher's checkpoints.
        device: where the networks live (the scenes ``load_scene`` gives must be there too);
            None: the CPU.

    Returns:
        (student, teacher, `TaughtResult`): the trained `PixelPolicy` and `StatePolicy`.
    """
    from tqdm import tqdm

    from .episodes import make_policy

    out = Path(out)
    base = dataclasses.replace(teacher_base, control_every=student_config.control_every)
    torch.manual_seed(seed)
    teacher = make_policy(base, max_action).to(device)
    student = make_policy(student_config, max_action).to(device)
    total = teacher_units(teacher_phases) + student_units(dagger_config)
    with tqdm(total=total, unit="unit", disable=not progress) as bar:
        taught = train_recipe(
            load_scene, teacher, teacher_phases, out / TEACHER_DIR, base=base, seed=seed,
            describe=describe, bar=bar, label="teacher: ",
        )  # fmt: skip
        teacher.eval()

        def report(what: str, loss: float | None, units: int) -> None:
            bar.set_description(f"student: {what}")
            if loss is not None:
                bar.set_postfix(loss=f"{loss:.3g}")
            bar.update(units)

        rows = dagger(
            load_scene(dagger_config.episodes), student, teacher, student_config, taught.config,
            dagger_config, out / STUDENT_DIR, seed=seed, randomization=randomization,
            progress=report,
        )  # fmt: skip
    episodes = taught.episodes + dagger_config.rounds * dagger_config.episodes
    return student, teacher, TaughtResult(taught, rows, student_config, episodes)


def teacher_units(phases=TEACHER_RECIPE) -> int:
    """Progress units of the teacher's training: one per iteration."""
    return sum(p.iterations for p in phases)


def _collect_units(config: DaggerConfig) -> int:
    """Progress units of a round's rollouts: half its fit steps (about their cost)."""
    return config.fit_steps // 2


def _round_units(config: DaggerConfig) -> int:
    """Progress units of a round: its rollouts and its Adam steps."""
    return _collect_units(config) + config.fit_steps


def student_units(config: DaggerConfig) -> int:
    """Progress units of the student's rounds (see `dagger`'s ``progress``)."""
    return config.rounds * _round_units(config)
