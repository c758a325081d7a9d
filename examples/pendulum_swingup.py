"""Swing-up of the pendulum-cart from pixels (Degrave et al. 2019, section 3.4): a CNN sees the
last 3 frames of the camera and pushes the cart.

    python examples/pendulum_swingup.py --train --out DIR   # from scratch, one command, minutes
    python examples/pendulum_swingup.py --evaluate --weights DIR/controller.pt   # 90 s, 21 starts
    python examples/pendulum_swingup.py --train --randomize --out DIR   # under every look
    python examples/pendulum_swingup.py --evaluate --randomize --randomize-seed 1   # ... judged so
    python examples/pendulum_swingup.py --evaluate          # the shipped weights
    python examples/pendulum_swingup.py --train --recipe bptt --out DIR   # the paper's way: BPTT
    python examples/pendulum_swingup.py                     # one BPTT phase, settings as options
    python examples/pendulum_swingup.py --state             # the baseline that reads the true state
    torchrun --nproc-per-node 2 examples/pendulum_swingup.py    # one phase, batch over 2 processes
    python examples/pendulum_swingup.py [--train] --quick   # a smoke run of training, seconds
    python examples/pendulum_swingup.py --evaluate --quick  # ... of the evaluation

``--train`` (``--recipe taught``, the default; `tasks.swingup.train_taught`) trains a state
controller by backpropagation through the physics (`TEACHER_RECIPE`), then teaches the CNN to
act as it does on the frames of the states the CNN itself visits (DAgger rounds,
`DaggerConfig`; with ``--randomize`` each rollout under its own `Randomization.moderate()` look,
`RANDOMIZED_DAGGER`), in one process, with one progress bar (stage, loss, ETA). Killed and
started again with the same command, it goes on where it stopped (DIR/teacher/phases/...,
DIR/student/checkpoint.pt, atomic writes). It ends by writing DIR/controller.pt (copy it to
diffcam/data/weights/pendulum_swingup_pixels.pt, or ..._pixels_randomized.pt, to ship it),
teacher.pt, curve.jsonl, learning_curve.png and swingup.mp4 (10 s from the hanging start),
then prints one JSON line. ``--seed`` seeds the initial weights and every draw; ``--out``,
``--scene``, ``--device``, ``--threads``, ``--randomize`` and ``--no-compile-physics`` apply,
the other training options do not (they set up the single-phase run below).

``--train --recipe bptt`` runs every phase of `tasks.swingup.PIXEL_RECIPE` (the gradient of the
paper's loss through the physics, the renderer and the network; frames at 144 x 48, control at
25 Hz), ending with the weights its balance checks judged best, in DIR/phases/<k>-<name>
(``--save-every`` applies). It passed on one seed of two and takes about 25 CPU-minutes;
docs/tutorials/swingup.md has its runs.

Without ``--train`` the example trains one BPTT phase with the options given (the defaults:
the recipe's first phase at full resolution, pooled 2x2), resuming from ``--out``/checkpoint.pt
when there is one (``--no-resume`` refuses to touch an existing run), and ends by writing
policy.pt, learning_curve.png and swingup.mp4 there. ``--init`` starts from earlier weights.

``--quick`` runs the whole path small: training 2 iterations of 2 episodes of 0.5 s (with
``--train``: one such iteration per phase, no balance checks, and 2 DAgger rounds of 4
rollouts of 1 s), eager physics, a checkpoint
after each, into a new temporary folder (its path is in the JSON line; under torchrun give
--out), then the usual 10 s evaluation video; ``--evaluate --quick`` 2 random starts and the hanging one for 5 s.
Options given explicitly override these. Neither trains nor judges a controller.

``--evaluate`` prints a JSON line with success_rate, starts, upright_seconds_min and
training_episodes (see tasks.swingup.evaluate for the definitions); it passes when
success_rate is 1 (21 / 21 starts upright at the end of 90 s) and upright_seconds_min >= 60.

The shipped pixel controllers are ``--train``'s, seed 0, plain and with ``--randomize``;
docs/tutorials/swingup.md has their runs and evaluations. The shipped state baseline:

    python examples/pendulum_swingup.py --state --iterations 290 --batch 16 --lr 1e-2 \
        --control-every 2 --settle-decay 0.98 --settle-from 251
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import diffcam  # noqa: E402
from diffcam.scene import SCENES_DIR, WEIGHTS_DIR  # noqa: E402
from tasks import swingup, training  # noqa: E402

SCENE = SCENES_DIR / "pendulum_cart.toml"
# the defaults of the options that --quick changes (when they are not given): full, quick
QUICK = {
    "iterations": (200, 2),
    "batch": (8, 2),
    "seconds": (swingup.SwingUpConfig.seconds, 0.5),
    "save_every": (5, 1),
    "compile_physics": (True, False),
    "starts": (20, 2),
    "eval_seconds": (90.0, 5.0),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument(
        "--pixels",
        dest="observation",
        action="store_const",
        const="pixels",
        help="train the CNN on rendered frames (default)",
    )
    kind.add_argument(
        "--state",
        dest="observation",
        action="store_const",
        const="state",
        help="train the MLP baseline on the true state",
    )
    parser.set_defaults(observation="pixels")
    parser.add_argument(
        "--out", type=Path, help="run folder (default out/swingup_KIND; quick: a new temp folder)"
    )
    parser.add_argument(
        "--resume",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="continue the run in --out if it has a checkpoint (default)",
    )
    parser.add_argument("--iterations", type=int, help="default 200 (quick 2)")
    parser.add_argument(
        "--batch", type=int, help="episodes per iteration, all ranks (default 8, quick 2)"
    )
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument(
        "--lr-final",
        type=float,
        default=1e-3,
        help="cosine decay of the learning rate to this (default 1e-3; = --lr: constant)",
    )
    parser.add_argument("--clip", type=float, default=1.0, help="gradient L2 norm limit")
    parser.add_argument(
        "--save-every", type=int, help="iterations per checkpoint (default 5, quick 1)"
    )
    parser.add_argument("--seed", type=int, default=0)
    ranges = dataclasses.astuple(swingup.StartRanges())
    parser.add_argument(
        "--start-ranges",
        type=float,
        nargs=4,
        default=list(ranges[:4]),
        metavar=("X", "THETA", "X_DOT", "THETA_DOT"),
        help="half-widths of the uniform random starts (m, rad, m/s, rad/s); "
        "all 0: always the hanging start, where the zero policy gets no gradient",
    )
    parser.add_argument(
        "--upright-share",
        type=float,
        default=0.5,
        help="fraction of each batch started within --upright-theta of upright (default 0.5)",
    )
    parser.add_argument("--upright-theta", type=float, default=0.5, help="rad; see --upright-share")
    parser.add_argument(
        "--curriculum",
        type=int,
        default=0,
        metavar="N",
        help="for the first N iterations draw theta near upright, widening to every angle "
        "(swingup.curriculum_ranges; default 0: none)",
    )
    defaults = swingup.SwingUpConfig()
    parser.add_argument(
        "--seconds",
        type=float,
        help=f"per training episode (default {defaults.seconds}, quick 0.5)",
    )
    parser.add_argument("--control-every", type=int, default=4)
    parser.add_argument("--gradient-decay", type=float, default=0.9)
    parser.add_argument(
        "--settle-decay",
        type=float,
        help="gradient decay from iteration --settle-from on (default: --gradient-decay "
        "throughout): a short horizon finds the swing-up, a longer one settles the balance",
    )
    parser.add_argument("--settle-from", type=int, default=0, help="see --settle-decay")
    parser.add_argument(
        "--observation-gradient",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="let the gradient flow from the observation back into the state (default); "
        "--no-observation-gradient cuts it (tried for settling from hard-edged pixels: no help)",
    )
    parser.add_argument(
        "--bptt-segment",
        type=int,
        default=0,
        help="control steps per checkpointed segment (0: none)",
    )
    parser.add_argument("--edge-softness", type=float, default=defaults.edge_softness)
    parser.add_argument("--speed-weight", type=float, default=defaults.speed_weight)
    parser.add_argument(
        "--target",
        choices=("fixed", "cart"),
        default=defaults.target,
        help="the tip's target: above the rail's centre (default) or above the cart",
    )
    parser.add_argument("--width", type=int, default=defaults.width, help="CNN channels")
    parser.add_argument("--hidden", type=int, default=defaults.hidden)
    parser.add_argument(
        "--downsample",
        type=int,
        default=2,
        help="average each frame over NxN pixel blocks before the CNN (1, 2 or 4)",
    )
    parser.add_argument(
        "--render-downscale",
        type=int,
        default=1,
        help="render the policy's frames at 1/N of the camera's resolution (before --downsample)",
    )
    parser.add_argument(
        "--compile-physics",
        action=argparse.BooleanOptionalAction,
        help="step the physics through torch.compile (default; quick: not)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads per process (default: 1 for BPTT training, fastest with a "
        "process per core; all cores for --train (taught) and --evaluate, one process)",
    )
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--scene", type=Path, default=SCENE)
    parser.add_argument(
        "--init",
        type=Path,
        help="start training from this weights file (policy.pt of an earlier run, same "
        "observation and network); its training episodes are counted in the new total",
    )
    parser.add_argument(
        "--train",
        action="store_true",
        help="train the pixel controller from scratch into --out (--recipe): controller.pt, "
        "curve.jsonl, learning_curve.png, swingup.mp4; resumable",
    )
    parser.add_argument(
        "--recipe",
        choices=("taught", "bptt"),
        default="taught",
        help="--train: 'taught' (default): a state teacher trained through the physics, then "
        "the CNN taught by it on the frames it sees (swingup.imitation); 'bptt': every phase "
        "of swingup.PIXEL_RECIPE, the gradient through the renderer",
    )
    parser.add_argument(
        "--evaluate", action="store_true", help="evaluate --weights instead of training"
    )
    parser.add_argument(
        "--weights",
        type=Path,
        help="default diffcam/data/weights/pendulum_swingup_KIND.pt (with --randomize: the "
        "randomised pixel controller, pendulum_swingup_pixels_randomized.pt)",
    )
    parser.add_argument(
        "--starts", type=int, help="random starts (evaluation; default 20, quick 2)"
    )
    parser.add_argument(
        "--eval-seconds",
        type=float,
        help="simulated seconds per evaluation rollout (default 90: up to 30 s to swing up, "
        "then the 60 s the pole must stay upright; quick 5)",
    )
    parser.add_argument("--video", type=Path, help="evaluation video (default in --out)")
    parser.add_argument(
        "--randomize",
        action="store_true",
        help="domain randomisation (diffcam.randomize.Randomization.moderate(): textures, "
        "light, camera pose and intrinsics, background, colour jitter, sensor noise), drawn "
        "per episode; in training (pixels only) and in --evaluate",
    )
    parser.add_argument(
        "--randomize-seed",
        type=int,
        default=0,
        help="--evaluate --randomize: seed of the evaluation's randomisation (default 0)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run of training or --evaluate (see above)"
    )
    args = parser.parse_args(argv)
    if args.train and args.evaluate:
        parser.error("--train and --evaluate: one at a time")
    if args.train and args.observation != "pixels":
        parser.error("--train runs the pixel recipe; the state baseline trains without it")
    if args.train and args.randomize and args.recipe == "bptt":
        parser.error("--train --randomize: with --recipe taught (the default) only")
    for key, (full, quick) in QUICK.items():
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else full)
    if args.out is None and args.quick:
        if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # each process would make its own
            parser.error("--quick under torchrun: give the run folder, --out DIR")
        args.out = Path(tempfile.mkdtemp(prefix=f"pendulum_swingup_quick_{args.observation}_"))
    args.out = args.out or ROOT / "out" / (
        "swingup_train" if args.train else f"swingup_{args.observation}"
    )
    randomized = "_randomized" if args.randomize and args.observation == "pixels" else ""
    name = f"pendulum_swingup_{args.observation}{randomized}.pt"
    args.weights = args.weights or WEIGHTS_DIR / name
    return args


def config_from(args) -> swingup.SwingUpConfig:
    return swingup.SwingUpConfig(
        observation=args.observation,
        seconds=args.seconds,
        control_every=args.control_every,
        gradient_decay=args.gradient_decay,
        bptt_segment=args.bptt_segment or None,
        edge_softness=args.edge_softness,
        speed_weight=args.speed_weight,
        target=args.target,
        width=args.width,
        hidden=args.hidden,
        downsample=args.downsample,
        render_downscale=args.render_downscale,
        compile_physics=args.compile_physics,
        observation_gradient=args.observation_gradient,
    )


def train(args) -> dict | None:
    dist = training.init_distributed()
    device = dist.device if dist.active else torch.device(args.device)
    config = config_from(args)
    if args.batch % dist.world_size:
        raise ValueError(
            f"--batch {args.batch} must be a multiple of the {dist.world_size} processes"
        )
    scene = diffcam.load_scene(args.scene, batch_size=args.batch // dist.world_size, device=device)
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    policy = swingup.make_policy(config, swingup.motor_limit(scene)).to(device)
    earlier_episodes = 0
    if args.init is not None:
        initial, initial_config, info = swingup.load_policy(args.init, swingup.motor_limit(scene))
        shape = ("observation", "frames", "width", "hidden", "downsample", "render_downscale")
        theirs, ours = ({k: getattr(c, k) for k in shape} for c in (initial_config, config))
        if theirs != ours:
            raise ValueError(f"--init {args.init}: its network is {theirs}, this run's {ours}")
        policy.load_state_dict(initial.state_dict())
        earlier_episodes = int(info.get("training_episodes") or 0)
    episodes = swingup.SwingUpEpisodes(scene, policy, config)
    model, sample_extra = episodes, None
    if args.randomize:
        if config.observation != "pixels":
            raise ValueError("--randomize changes what the camera sees: use it with --pixels")
        from diffcam.randomize import Randomization, RandomizedEpisodes, append_seeds

        randomization = Randomization.moderate()
        model, sample_extra = RandomizedEpisodes(episodes, randomization), append_seeds
    train_config = training.TrainConfig(
        iterations=args.iterations,
        batch_size=args.batch,
        learning_rate=args.lr,
        final_learning_rate=args.lr_final,
        clip_norm=args.clip,
        seed=args.seed,
        save_every=args.save_every,
    )
    ranges = swingup.StartRanges(
        *args.start_ranges, upright_share=args.upright_share, upright_theta=args.upright_theta
    )
    describe = {
        "swingup": dataclasses.asdict(config),
        "scene": args.scene.name,
        "start_ranges": dataclasses.asdict(ranges),
        "curriculum": args.curriculum,
        "init": str(args.init) if args.init else None,
        "settle_decay": args.settle_decay,
        "settle_from": args.settle_from,
    }
    if args.randomize:  # only then: runs without it resume as before
        describe["randomize"] = model.randomization.to_dict()

    def before_iteration(iteration: int) -> None:
        # The gradient-decay schedule: a function of the iteration alone, so resume-safe.
        settling = args.settle_decay is not None and iteration >= args.settle_from
        decay = args.settle_decay if settling else config.gradient_decay
        episodes.config = dataclasses.replace(config, gradient_decay=decay)

    def sample(generator, n, iteration):
        starts = swingup.random_starts(
            n, generator, swingup.curriculum_ranges(ranges, iteration, args.curriculum)
        )
        # --randomize: a per-episode seed column, drawn after the starts
        return starts if sample_extra is None else sample_extra(starts, generator)

    rows = training.train(
        model,
        sample,
        train_config,
        args.out,
        describe=describe,
        resume=args.resume,
        dist=dist,
        title=f"pendulum swing-up ({args.observation})",
        before_iteration=before_iteration,
    )
    dist.close()  # the rest is rank 0's alone
    if not dist.is_main:
        return None
    episodes_seen = earlier_episodes + (rows[-1]["episodes"] if rows else 0)
    weights = swingup.save_policy(
        args.out / "policy.pt", policy, config, training_episodes=episodes_seen
    )
    video = args.out / "swingup.mp4"
    report = swingup.evaluate(args.scene, policy, config, starts=0, seconds=10.0, video=video)
    return {
        "out": str(args.out),
        "iterations": rows[-1]["iteration"] if rows else 0,
        "training_episodes": episodes_seen,
        "loss": rows[-1]["loss"] if rows else None,
        "train_success_rate": rows[-1]["success_rate"] if rows else None,
        "hanging_upright_seconds_10s": report["hanging_upright_seconds"],
        "policy": str(weights),
        "learning_curve": str(args.out / training.LEARNING_CURVE),
        "video": str(video),
    }


def quick_recipe(phases) -> tuple:
    """``phases`` shrunk to a smoke run: one iteration of 2 episodes of 0.5 s each, and no
    balance checks (each rolls 16 starts out for 40 s)."""
    return tuple(
        dataclasses.replace(p, iterations=1, batch=2, seconds=0.5, check_every=0) for p in phases
    )


def quick_dagger() -> swingup.DaggerConfig:
    """The student's rounds shrunk to a smoke run: 2 rounds of 4 rollouts of 1 s, 5 steps."""
    return swingup.DaggerConfig(rounds=2, episodes=4, seconds=1.0, fit_steps=5, minibatch=8)


def train_taught(args) -> dict:
    """--train (--recipe taught): the state teacher, then the pixel student, in one process."""
    import time

    from diffcam.randomize import Randomization

    began, began_cpu = time.perf_counter(), time.process_time()
    device = torch.device(args.device)
    base = dataclasses.replace(swingup.TEACHER_BASE, compile_physics=args.compile_physics)
    phases = quick_recipe(swingup.TEACHER_RECIPE) if args.quick else swingup.TEACHER_RECIPE
    dagger = swingup.RANDOMIZED_DAGGER if args.randomize else swingup.DaggerConfig()
    dagger = quick_dagger() if args.quick else dagger
    randomization = Randomization.moderate() if args.randomize else None
    student, teacher, result = swingup.train_taught(
        lambda batch: diffcam.load_scene(args.scene, batch_size=batch, device=device),
        args.out,
        swingup.motor_limit(diffcam.load_scene(args.scene)),
        seed=args.seed,
        dagger_config=dagger,
        randomization=randomization,
        teacher_phases=phases,
        teacher_base=base,
        describe={"scene": args.scene.name, "init_seed": args.seed},
        device=device,
    )
    info = {
        "training_episodes": result.episodes,
        "recipe": "taught",
        "teacher_recipe": [dataclasses.asdict(p) for p in phases],
        "dagger": dataclasses.asdict(dagger),
        "randomization": None if randomization is None else randomization.to_dict(),
    }
    weights = swingup.save_policy(args.out / "controller.pt", student, result.config, **info)
    swingup.save_policy(
        args.out / "teacher.pt", teacher, result.teacher.config,
        training_episodes=result.teacher.episodes,
    )  # fmt: skip
    rows = [
        *({"stage": "teacher", **r} for r in result.teacher.rows),
        *({"stage": "student", **r} for r in result.rounds),
    ]
    training.atomic_write_text(
        "".join(json.dumps(r) + "\n" for r in rows), args.out / "curve.jsonl"
    )
    training.plot_learning_curve(
        [
            {
                "episodes": result.teacher.episodes + r["round"] * dagger.episodes,
                "loss": r["loss"],
                "student_upright": r["student_upright"],
            }
            for r in result.rounds
        ],
        args.out / training.LEARNING_CURVE,
        "pixel student after each round: squared action error (motor-limit units), "
        "share of its rollouts upright",
    )
    video = args.out / "swingup.mp4"
    report = swingup.evaluate(
        args.scene, student, result.config, starts=0, seconds=10.0, video=video
    )
    checks = [c for c in result.teacher.checks if c["phase"] == result.teacher.checks[-1]["phase"]]
    return {
        "out": str(args.out),
        "recipe": "taught",
        "randomize": bool(args.randomize),
        "training_episodes": result.episodes,
        "teacher_episodes": result.teacher.episodes,
        "teacher_balance_checks": checks if result.teacher.checks else [],
        "rounds": result.rounds,
        "hanging_upright_seconds_10s": report["hanging_upright_seconds"],
        "wall_seconds_this_process": round(time.perf_counter() - began, 1),
        "cpu_seconds_this_process": round(time.process_time() - began_cpu, 1),
        "controller": str(weights),
        "curve": str(args.out / "curve.jsonl"),
        "video": str(video),
    }


def train_recipe(args) -> dict:
    """--train --recipe bptt: every phase of `swingup.PIXEL_RECIPE` from a zero policy, in
    one process."""
    import time

    began, began_cpu = time.perf_counter(), time.process_time()
    device = torch.device(args.device)
    base = dataclasses.replace(swingup.PIXEL_BASE, compile_physics=args.compile_physics)
    phases = quick_recipe(swingup.PIXEL_RECIPE) if args.quick else swingup.PIXEL_RECIPE
    probe = diffcam.load_scene(args.scene)
    torch.manual_seed(args.seed)
    policy = swingup.make_policy(base, swingup.motor_limit(probe)).to(device)
    result = swingup.train_recipe(
        lambda batch: diffcam.load_scene(args.scene, batch_size=batch, device=device),
        policy,
        phases,
        args.out,
        base=base,
        seed=args.seed,
        save_every=args.save_every,
        describe={"scene": args.scene.name, "init_seed": args.seed},
    )
    weights = swingup.save_policy(
        args.out / "controller.pt",
        policy,
        result.config,
        training_episodes=result.episodes,
        recipe=[dataclasses.asdict(p) for p in phases],
    )
    training.plot_learning_curve(
        [
            {k: v for k, v in r.items() if k not in ("phase", "phase_iteration")}
            for r in result.rows
        ],
        args.out / training.LEARNING_CURVE,
        "pendulum swing-up from pixels, every phase",
    )
    video = args.out / "swingup.mp4"
    report = swingup.evaluate(
        args.scene, policy, result.config, starts=0, seconds=10.0, video=video
    )
    last = result.rows[-1]
    return {
        "out": str(args.out),
        "phases": [p.name for p in phases],
        "iterations": last["iteration"],
        "training_episodes": result.episodes,
        "loss": last["loss"],
        "train_success_rate": last["success_rate"],
        "hanging_upright_seconds_10s": report["hanging_upright_seconds"],
        # the balance checks of the last checked phase, the chosen weights' flagged
        "balance_checks": [c for c in result.checks if c["phase"] == result.checks[-1]["phase"]]
        if result.checks
        else [],
        "wall_seconds_this_process": round(time.perf_counter() - began, 1),
        "cpu_seconds_this_process": round(time.process_time() - began_cpu, 1),
        "training_wall_seconds": round(sum(r["wall_seconds"] for r in result.rows), 1),
        "controller": str(weights),
        "curve": str(args.out / swingup.recipe.CURVE),
        "video": str(video),
    }


def evaluate(args) -> dict:
    command = (
        f"python examples/pendulum_swingup.py --{args.observation} --out {args.out}, then "
        f"copy {args.out / 'policy.pt'} to {args.weights}"
    )
    scene = diffcam.load_scene(args.scene)
    policy, config, info = swingup.load_policy(args.weights, swingup.motor_limit(scene), command)
    video = args.video or args.out / f"evaluation_{args.observation}.mp4"
    randomization = None
    if args.randomize:
        from diffcam.randomize import Randomization

        randomization = Randomization.moderate()
    report = swingup.evaluate(
        args.scene,
        policy.to(args.device),
        config,
        starts=args.starts,
        seconds=args.eval_seconds,
        video=video,
        randomization=randomization,
        randomization_seed=args.randomize_seed,
    )
    return {
        **report,
        **({"randomize_seed": args.randomize_seed} if args.randomize else {}),
        "training_episodes": info.get("training_episodes"),
        "video": str(video),
        "weights": str(args.weights),
    }


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads is not None and args.threads < 1:
        print("--threads must be at least 1", file=sys.stderr)
        return 2
    one_process = args.evaluate or (args.train and args.recipe == "taught")
    if args.threads is not None or not one_process:
        torch.set_num_threads(args.threads or 1)
    try:
        if args.evaluate:
            result = evaluate(args)
        else:
            if args.train:
                if int(os.environ.get("WORLD_SIZE", "1")) > 1:
                    raise ValueError("--train runs in one process; start it without torchrun")
                result = train_taught(args) if args.recipe == "taught" else train_recipe(args)
            else:
                result = train(args)
    except (FileNotFoundError, FileExistsError, ValueError) as e:  # the user's to fix: no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    if result is not None:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
