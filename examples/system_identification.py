"""Recover the pendulum-cart's physics from 2 s of 288 x 96 video, by gradient descent on pixels.

The cart of the bundled ``pendulum_cart`` scene is pushed by a known force (a sum of two sines). We
record what the camera sees with the scene's true values (50 frames per second, soft edges of
1 px), then start from values off by 50 % and fit through the renderer and the physics
(`diffcam.fit_scene`):

    pole mass      bodies.pole.mass                                 0.2 kg         (start 0.3)
    pole length    hinge to tip: the capsule's size and position    1.0 m          (start 0.5)
    hinge damping  joints.hinge.damping                             0.005 N m s/rad (start 0.0075)
    rail damping   joints.rail.damping (the cart's viscous friction) 0.5 N s/m     (start 0.25)

Three stages (``--optimizer lm``, the default), on a growing horizon. Far from the truth the
pole drawn at half its length overlaps the observed one little; the loss is nearly flat and rough
there, and a local method stalls (Levenberg-Marquardt alone: stuck at the starting length; with
the length right, it brings all four within 0.01 % in 6 evaluations). And over the full 2 s a
wrong mass or damping lets the swing drift out of phase, which makes the loss rough again. So:
(1) L-BFGS with a strong-Wolfe line search on the first ``--warmup`` second, on a 4-level
pyramid (frames average-pooled by 8, 4, 2, 1), whose long trial steps find the length -- the
parameter every frame shows; (2) Levenberg-Marquardt on that second at full resolution, its
Jacobian by forward-mode AD (one batched rollout of 4 worlds per evaluation), for all four
together; (3) Levenberg-Marquardt on the whole 2 s. ``--optimizer adam`` runs Adam on the
pyramid instead (for comparison; from 20 % off on 1 s it had reached only 16 % / 27 % / 19 %
errors on mass and the dampings after 60 iterations).

Measured on this 2-core CPU (torch 2.13, other jobs sharing the machine):

    clean frames         51 evaluations (27 + 12 + 12), 691 s: relative errors mass 5.9e-6,
                         length 6.0e-7, hinge damping 1.3e-5, rail damping 7.7e-6
    CMA-ES, same 691 s   872 evaluations: 4.5e-5, 1.4e-6, 1.0e-4, 6.9e-5
    noise sigma = 0.02   39 evaluations (27 + 8 + 4), 526 s: 2.6e-5, 2.4e-7, 3.3e-4, 6.1e-5

The observed frames are rendered by the same renderer as the fit (no model mismatch), so these
errors say how well the optimiser finds the minimum, not how well the model fits a real camera.

Writes ``observed | fitted | 4 x |difference|`` as a video and the convergence (relative error of
every parameter and the loss, per evaluation) as a PNG, and prints one JSON line of figures.
``--noise 0.02`` adds Gaussian pixel noise to the observed frames; ``--baseline cma`` also runs
CMA-ES (the ``cma`` package) on the same loss for the same wall-clock time.

    python examples/system_identification.py                  # minutes on 2 cores
    python examples/system_identification.py --quick          # a smoke run, under a minute

``--quick`` runs every stage on a short video, small budgets and eager physics (no compilation):
0.5 s of video (stages 1 and 2 on its first 0.3 s), a start 10 % off, a 2-level pyramid, 4
L-BFGS and 3 + 3 Levenberg-Marquardt evaluations; about 40 s on one core. Half a second shows
little of the dampings, so it does not identify them (nor do 4 evaluations let L-BFGS's line
search find a lower point): it checks that the path runs, that the Levenberg-Marquardt fits
lower their loss (``loss_first_best_per_stage`` in the JSON line) and that the pole's length
comes closer. Any option given explicitly overrides the quick value.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # this checkout's diffcam, not another installed one

import diffcam  # noqa: E402
from diffcam.fit import Objective, Runtime, Schedule  # noqa: E402
from diffcam.plot import save_line_plot  # noqa: E402
from diffcam.scene import SCENES_DIR  # noqa: E402

SCENE = SCENES_DIR / "pendulum_cart.toml"
POLE_RADIUS = 0.035  # m, the capsule's radius (known)
HINGE = (0.0, -0.13, 1.2)  # m, the hinge anchor in the world when the cart is at x = 0
TRUTH = {"pole_mass": 0.2, "pole_length": 1.0, "hinge_damping": 0.005, "rail_damping": 0.5}


def to_overrides(values: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Scene overrides from the physical parameters (tensors, SI units).

    The pole hangs from the hinge: its capsule's cylinder is ``length - 2 r`` long and its centre
    ``length / 2`` below the hinge, so the length moves the pole's initial position too.
    """
    length = values["pole_length"]
    size = torch.stack([torch.full_like(length, POLE_RADIUS), length - 2 * POLE_RADIUS])
    hinge = torch.tensor(HINGE, dtype=length.dtype)
    centre = hinge - torch.stack([0 * length, 0 * length, 0.5 * length])
    return {
        "bodies.pole.mass": values["pole_mass"],
        "bodies.pole.size": size,
        "bodies.pole.position": centre,
        "joints.hinge.damping": values["hinge_damping"],
        "joints.rail.damping": values["rail_damping"],
    }


def known_forces(steps: int, timestep: float, dtype: torch.dtype) -> torch.Tensor:
    """(steps, 1) cart force in N: two sines, enough to swing the pole within the rail."""
    t = torch.arange(steps, dtype=dtype) * timestep
    return (8.0 * torch.sin(2 * math.pi * 0.7 * t) + 5.0 * torch.sin(2 * math.pi * 1.9 * t + 1.0))[
        :, None
    ]


def relative_errors(values: dict[str, torch.Tensor]) -> dict[str, float]:
    return {k: abs(float(values[k]) / TRUTH[k] - 1.0) for k in TRUTH}


def run_cma(loss_of, start: dict[str, float], seconds: float, sigma: float = 0.3, seed: int = 0):
    """CMA-ES on log-parameters for ``seconds`` of wall-clock; returns (best values, evaluations)."""
    import cma

    names = list(TRUTH)
    x0 = [math.log(start[k]) for k in names]
    es = cma.CMAEvolutionStrategy(x0, sigma, {"seed": seed + 1, "verbose": -9})
    began, evaluations = time.perf_counter(), 0
    while time.perf_counter() - began < seconds and not es.stop():
        candidates = es.ask()
        losses = []
        for x in candidates:
            losses.append(loss_of({k: math.exp(v) for k, v in zip(names, x, strict=True)}))
            evaluations += 1
        es.tell(candidates, losses)
    best = es.result.xbest if es.result.xbest is not None else x0
    return {k: math.exp(v) for k, v in zip(names, best, strict=True)}, evaluations


# the defaults of the options that --quick changes (when they are not given): full, quick
DEFAULTS = {
    "seconds": (2.0, 0.5),
    "warmup": (1.0, 0.3),
    "off": (0.5, 0.1),
    "pyramid": (4, 2),
    "coarse_iterations": (24, 4),
    "lm_iterations": (12, 3),
    "iterations": (200, 20),
}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, help="video length (s; default 2, quick 0.5)")
    parser.add_argument("--iterations", type=int, help="Adam's iterations (default 200, quick 20)")
    parser.add_argument(
        "--coarse-iterations", type=int, help="L-BFGS evaluations of stage 1 (default 24, quick 4)"
    )
    parser.add_argument(
        "--lm-iterations",
        type=int,
        help="Levenberg-Marquardt evaluations, stages 2, 3 (default 12, quick 3)",
    )
    parser.add_argument(
        "--warmup", type=float, help="seconds of video of stages 1 and 2 (default 1, quick 0.3)"
    )
    parser.add_argument(
        "--optimizer", choices=["lm", "adam"], default="lm", help="see diffcam.fit_scene"
    )
    parser.add_argument("--lr", type=float, help="Adam: step in log units (default 0.05)")
    parser.add_argument(
        "--pyramid", type=int, help="coarse-to-fine levels, stage 1 / Adam (default 4, quick 2)"
    )
    parser.add_argument("--noise", type=float, default=0.0, help="pixel noise sigma")
    parser.add_argument(
        "--frame-every", type=int, default=2, help="physics steps per video frame (2: 50 fps)"
    )
    parser.add_argument(
        "--eager", action="store_true", help="do not torch.compile the physics (quick: always)"
    )
    parser.add_argument(
        "--soft",
        type=float,
        default=1.0,
        help="edge softness (px): silhouette gradients; the pole's sideways swing is invisible "
        "to hard-edged gradients (its stripes run across it)",
    )
    parser.add_argument(
        "--off", type=float, help="relative error of the starting values (default 0.5, quick 0.1)"
    )
    parser.add_argument("--baseline", choices=["none", "cma"], default="none")
    parser.add_argument("--float64", action="store_true")
    parser.add_argument(
        "--tolerance", type=float, default=0.0, help="stop when the loss stops changing"
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run: see the docstring")
    parser.add_argument(
        "--out", type=Path, default=ROOT / "out" / "system_identification", help="output folder"
    )
    args = parser.parse_args(argv)
    for name, (full, quick) in DEFAULTS.items():
        if getattr(args, name) is None:
            setattr(args, name, quick if args.quick else full)
    args.eager = args.eager or args.quick  # compiling the step takes longer than the whole run
    dtype = torch.float64 if args.float64 else torch.float32
    torch.manual_seed(0)

    scene = diffcam.load_scene(SCENE, dtype=dtype)
    steps = round(args.seconds / scene.world.timestep)
    actions = known_forces(steps, scene.world.timestep, dtype)
    truth = {k: torch.tensor(v, dtype=dtype) for k, v in TRUTH.items()}
    with torch.no_grad():
        clean = diffcam.render_rollout(
            SCENE, to_overrides(truth), actions[:, None], steps, dtype=dtype,
            frame_every=args.frame_every, edge_softness=args.soft,
        )  # fmt: skip
    observed = clean + args.noise * torch.randn_like(clean) if args.noise > 0 else clean

    # alternate the sign of the error, and keep the pole length within the picture
    start = {k: v * (1 + (args.off if k in ("pole_mass", "hinge_damping") else -args.off))
             for k, v in TRUTH.items()}  # fmt: skip
    keys = {k: {"init": v, "positive": True} for k, v in start.items()}
    common = dict(dtype=dtype, to_overrides=to_overrides, frame_every=args.frame_every)
    objective = Objective(loss="l2")  # Gaussian pixel noise, no model mismatch
    schedule = Schedule(edge_softness=args.soft)
    if args.optimizer == "adam":
        result = diffcam.fit_scene(
            SCENE, observed, keys, actions, objective=objective,
            schedule=schedule.replace(iterations=args.iterations, lr=args.lr,
                                      pyramid_levels=args.pyramid, tolerance=0.0),
            runtime=Runtime(compile_physics=not args.eager), **common,
        )  # fmt: skip
        stages = [result]
    else:
        # Far from the truth the pole drawn at the wrong length overlaps the observed one
        # little, and a local method (Levenberg-Marquardt) stalls; over a long horizon the
        # wrong swing drifts away from the observed one too. So a growing horizon: on the
        # first --warmup seconds, L-BFGS's long line searches on blurred frames (a pyramid)
        # find the length, the parameter every frame shows; then Levenberg-Marquardt fits all
        # four, on the warm-up and then on the whole video.
        warm = min(
            len(observed), round(args.warmup / (scene.world.timestep * args.frame_every)) + 1
        )
        warm_steps = (warm - 1) * args.frame_every
        coarse = diffcam.fit_scene(
            SCENE, observed[:warm], keys, actions[:warm_steps], objective=objective,
            schedule=schedule.replace(iterations=args.coarse_iterations, optimizer="lbfgs",
                                      pyramid_levels=args.pyramid),
            runtime=Runtime(compile_physics=not args.eager, uncertainty=False), **common,
        )  # fmt: skip
        keys = {k: {"init": coarse.values[k], "positive": True} for k in keys}
        lm = schedule.replace(iterations=args.lm_iterations, optimizer="lm", tolerance=1e-3)
        short = diffcam.fit_scene(
            SCENE, observed[:warm], keys, actions[:warm_steps], objective=objective,
            schedule=lm, runtime=Runtime(uncertainty=warm == len(observed)), **common,
        )  # fmt: skip
        stages = [coarse, short]
        if warm < len(observed):
            keys = {k: {"init": short.values[k], "positive": True} for k in keys}
            fine = diffcam.fit_scene(
                SCENE, observed, keys, actions, objective=objective, schedule=lm, **common
            )
            stages.append(fine)
    result = stages[-1]
    history = [h for stage in stages for h in stage.history]
    value_history = {k: [v for stage in stages for v in stage.value_history[k]] for k in TRUTH}
    seconds = sum(stage.seconds for stage in stages)

    errors = relative_errors(result.values)
    figures = {
        "noise": args.noise,
        "seconds_of_video": args.seconds,
        "video_frames": int(observed.shape[0]),
        "optimizer": args.optimizer,
        "iterations": len(history),
        "iterations_per_stage": [stage.iterations for stage in stages],
        "seconds_per_stage": [round(stage.seconds, 1) for stage in stages],
        "wall_clock_s": round(seconds, 1),
        "fitted": {k: float(v) for k, v in result.values.items()},
        "relative_error": errors,
        "max_relative_error": max(errors.values()),
        "final_loss": history[-1] if history else None,
        # each fit's loss at its start and its lowest (its own frames, pyramid level, softness)
        "loss_first_best_per_stage": [
            [stage.history[0], min(stage.history)] if stage.history else None for stage in stages
        ],
        "start_relative_error": args.off,
        "quick": args.quick,
        "video": str(args.out / "observed_fitted_difference.mp4"),
        "convergence_png": str(args.out / "convergence.png"),
    }

    args.out.mkdir(parents=True, exist_ok=True)
    diff = (4.0 * (result.frames - clean).abs()).clamp(0, 1)
    diffcam.write_video(
        args.out / "observed_fitted_difference.mp4",
        torch.cat([observed.clamp(0, 1), result.frames, diff], dim=3),
        fps=round(1 / (scene.world.timestep * args.frame_every)),  # real time
    )
    xlabel = "Adam iteration" if args.optimizer == "adam" else (
        "evaluation (1: L-BFGS on the pyramid; 2, 3: Levenberg-Marquardt)"
    )  # fmt: skip
    curves = {k: [abs(float(v) / TRUTH[k] - 1.0) for v in value_history[k]] for k in TRUTH}
    curves["loss / first loss (at its pyramid level)"] = [h / history[0] for h in history]
    save_line_plot(
        args.out / "convergence.png", curves, log_y=True, xlabel=xlabel,
        title=f"system identification from pixels (noise {args.noise}): relative error",
    )  # fmt: skip

    if args.baseline == "cma":

        def loss_of(values: dict[str, float]) -> float:
            tensors = {k: torch.tensor(v, dtype=dtype) for k, v in values.items()}
            with torch.no_grad():
                frames = diffcam.render_rollout(
                    SCENE, to_overrides(tensors), actions[:, None], steps, dtype=dtype,
                    frame_every=args.frame_every, compile_physics=not args.eager,
                    edge_softness=args.soft,
                )  # fmt: skip
            return float(((frames - observed) ** 2).mean())

        best, evaluations = run_cma(loss_of, start, seconds=seconds)
        cma_errors = relative_errors({k: torch.tensor(v) for k, v in best.items()})
        figures["cma"] = {
            "wall_clock_s": round(seconds, 1),
            "evaluations": evaluations,
            "relative_error": cma_errors,
            "max_relative_error": max(cma_errors.values()),
        }
    print(json.dumps(figures))
    return figures


if __name__ == "__main__":
    main()
