"""The ball throw of Degrave et al. (2019), section 2.1.1, by gradient descent through the engine.

A ball of 1 m diameter (friction 1.0, restitution 0.5) starts on the ground at (0, 0). Find the
initial linear and angular velocity such that at t = 5 s it rests at (10, 0): position error
under 0.01 m, linear and angular velocity under 0.01 (m/s, rad/s). The loss is backpropagated
through all 500 steps, bounces and friction included: Levenberg-Marquardt with Jacobians
from backpropagation. The paper needed 88 iterations of plain gradient descent.

    python examples/ball_throw.py [--iterations 300] [--video out/ball_throw.mp4]
    python examples/ball_throw.py --quick --video out/ball_throw.mp4   # a smoke run

Prints a progress bar, then one JSON line with the result: the errors, the found throw, and the
loss (sum of the squared residuals, m^2 or (m/s)^2) at the start and at the end.

``--quick`` runs one Levenberg-Marquardt iteration (one differentiable rollout, its 8 backward
passes and the trial steps) with eager physics (no compilation): about 25 s on one core. It
does not reach the target; the loss at the end is below the loss at the start.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
from tqdm import tqdm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import diffcam  # noqa: E402
import physics  # noqa: E402
from diffcam.scene import SCENES_DIR  # noqa: E402

FREE = torch.tensor([1, 1, 0, 1, 1, 1])  # v_x, v_y, (not v_z), w_x, w_y, w_z

# The Jacobian takes 8 backward passes through one graph (retain_graph), which compiled
# backward functions allow only without buffer donation.
import torch._functorch.config  # noqa: E402

torch._functorch.config.donated_buffer = False

TARGET = torch.tensor([10.0, 0.0])
DURATION = 5.0
COMPILE = True


def load(batch_size: int = 1, dtype: torch.dtype = torch.float64) -> diffcam.Scene:
    """The bundled scene with the ball on the ground at the origin."""
    return diffcam.load_scene(
        SCENES_DIR / "ball_throw.toml",
        batch_size=batch_size,
        dtype=dtype,
        overrides={"bodies.ball.position": torch.tensor([0.0, 0.0, 0.5], dtype=dtype)},
    )


def thrown(scene: diffcam.Scene, velocity: torch.Tensor, spin: torch.Tensor) -> physics.State:
    """The scene's initial state with the ball's velocity (m/s) and spin (rad/s), each (3,)."""
    state = scene.initial_state()
    ball = scene.body_names.index("ball")
    mask = torch.zeros_like(state.linear_velocity)
    mask[:, ball] = 1.0
    return state.replace(
        linear_velocity=state.linear_velocity * (1 - mask) + mask * velocity,
        angular_velocity=state.angular_velocity * (1 - mask) + mask * spin,
    )


def final_state(scene: diffcam.Scene, velocity: torch.Tensor, spin: torch.Tensor) -> physics.State:
    steps = round(DURATION / scene.world.timestep)
    state = thrown(scene, velocity, spin)
    return physics.rollout(scene.world, state, steps, compile=COMPILE)[-1]


def errors(state: physics.State) -> tuple[float, float, float]:
    ball = 1
    position = (state.position[0, ball, :2] - TARGET.to(state.position)).norm().item()
    speed = state.linear_velocity[0, ball].norm().item()
    spin = state.angular_velocity[0, ball].norm().item()
    return position, speed, spin


def residuals(scene: diffcam.Scene, params: torch.Tensor) -> tuple[torch.Tensor, physics.State]:
    """The 8 errors at t = 5 s, all in m or m/s: position (x, y) minus the target, the
    velocity, and the spin times the radius (the speed of the ball's surface)."""
    radius = 0.5
    state = final_state(scene, params[:3], params[3:] / radius)
    ball = scene.body_names.index("ball")
    offset = state.position[0, ball, :2] - TARGET.to(params)
    spin = radius * state.angular_velocity[0, ball]
    return torch.cat([offset, state.linear_velocity[0, ball], spin]), state


def optimise(iterations: int, solver_iterations: int, dtype=torch.float64):
    """Levenberg-Marquardt on (v0, r w0), Jacobians by backpropagation through the rollout.

    Starts from a plain forward throw without spin, (3, 0, 3) m/s; the vertical speed is kept
    (see FREE). Each iteration costs one
    differentiable rollout and 8 backward passes (one per residual), plus one plain rollout per
    trial step. Stops as soon as every error is under 0.01.
    """
    radius = 0.5
    scene = load(dtype=dtype)
    scene.world.solver_iterations = scene.world.relax_iterations = solver_iterations
    params = torch.tensor([3.0, 0.0, 3.0, 0.0, 0.0, 0.0], dtype=dtype)
    damping = 1e-2
    history: list[float] = []
    evaluations = backward_passes = 0
    start = time.perf_counter()
    bar = tqdm(range(1, iterations + 1), desc="ball throw (Levenberg-Marquardt)", unit="it")
    for iteration in bar:  # noqa: B007 (read after the loop)
        point = params.clone().requires_grad_(True)
        residual, state = residuals(scene, point)
        evaluations += 1
        loss = residual.square().sum().item()
        history.append(loss)
        position_error, speed, angular = errors(state)
        bar.set_postfix(loss=f"{loss:.2e}", pos=f"{position_error:.4f}", v=f"{speed:.4f}",
                        w=f"{angular:.4f}")  # fmt: skip
        if position_error < 0.01 and speed < 0.01 and angular < 0.01:
            break
        rows = [torch.autograd.grad(residual[k], point, retain_graph=k < 7)[0] for k in range(8)]
        backward_passes += 8
        # The vertical speed only decides at which whole step each bounce lands: its true effect
        # on the end state is a staircase (jumps of about v dt), so its gradient (the smooth
        # part only) misleads every step. It stays at its starting value.
        jacobian = torch.stack(rows) * FREE.to(dtype)  # (8, 6)
        gradient = jacobian.T @ residual.detach()
        curvature = jacobian.T @ jacobian
        # Directions the rollout does not see (a zero Jacobian column, e.g. the throw's
        # vertical speed: a bounce happens at a whole step) get a unit diagonal: they stay put.
        diagonal = curvature.diagonal().clamp_min(1e-6)
        while damping < 1e8:
            step = -torch.linalg.solve(curvature + damping * torch.diag(diagonal), gradient)
            with torch.no_grad():
                trial = residuals(scene, params + step)[0].square().sum().item()
            evaluations += 1
            if trial < loss:
                params = params + step
                damping = max(damping / 3.0, 1e-7)
                break
            damping *= 4.0
    elapsed = time.perf_counter() - start
    with torch.no_grad():
        residual, state = residuals(scene, params)
    position_error, speed, angular = errors(state)
    return {
        "example": "ball_throw",
        "method": "Levenberg-Marquardt, Jacobian by backpropagation through 500 steps",
        "converged": position_error < 0.01 and speed < 0.01 and angular < 0.01,
        "iterations": iteration,
        "rollouts": evaluations,
        "backward_passes": backward_passes,
        "seconds": round(elapsed, 1),
        "position_error_m": position_error,
        "speed_error_m_per_s": speed,
        "spin_error_rad_per_s": angular,
        "initial_loss": history[0],
        "final_loss": residual.square().sum().item(),
        "v0": params[:3].tolist(),
        "w0": (params[3:] / radius).tolist(),
        "solver_iterations": solver_iterations,
        "compiled": COMPILE,
    }, history


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--iterations", type=int, help="Levenberg-Marquardt iterations at most (100; quick 1)"
    )
    parser.add_argument("--solver-iterations", type=int, default=4,
                        help="one ball on a plane needs few (its normal and friction rows decouple)")  # fmt: skip
    parser.add_argument(
        "--video", type=Path, default=None, help="render the found throw to this file"
    )
    parser.add_argument("--eager", action="store_true", help="skip torch.compile (slower per step)")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: one iteration, eager (see above)"
    )
    args = parser.parse_args()
    if args.iterations is None:
        args.iterations = 1 if args.quick else 100
    global COMPILE
    COMPILE = not (args.eager or args.quick)
    result, _ = optimise(args.iterations, args.solver_iterations)
    result["quick"] = args.quick
    if args.video is not None:
        velocity = torch.tensor(result["v0"], dtype=torch.float64)
        spin = torch.tensor(result["w0"], dtype=torch.float64)
        scene = load()
        steps = round(DURATION / scene.world.timestep)
        with torch.no_grad():
            trajectory = physics.rollout(scene.world, thrown(scene, velocity, spin), steps)
            frames = torch.cat([scene.render(trajectory[t]) for t in range(0, steps + 1, 4)])
        diffcam.write_video(args.video, frames, fps=25)
        result["video"] = str(args.video)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
