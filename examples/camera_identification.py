"""Recover the pendulum-cart camera's pose and focal length from frames of a known motion.

The observed frames are the bundled scene (camera 3.2 m in front of the rail, 37 degree vertical
field of view, 288 x 96) while the rail's force motor pushes the cart so the pole swings. The
fit starts from a wrong camera: its centre 10 cm off, its look-at point 10 cm off (about 1.8
degrees of pan and tilt), rolled by 1 degree, and its field of view 5 % too wide.

Seven numbers are fitted, the camera's degrees of freedom in the scene schema's terms: the
centre ``camera.position`` (m); the look-at point's (x, z) on the rail's plane y = 0 (m; the
point may slide along the line of sight without changing the camera, so it is kept on a plane);
the roll of ``camera.up`` towards +x (degrees); ``camera.fov_y_deg`` (fitted in log units).

Method: Levenberg-Marquardt on the photometric residual, coarse to fine (frames average-pooled
by 8, 4, 2, then full resolution), with the Jacobian of direct image alignment (Lucas-Kanade):
a pixel's change under a camera change is minus the (pooled) image gradient times the motion of
the world point it shows, that point taken from the rendered depth and moved through
`PinholeCamera.project`. The renderer supplies the frames (mip-mapped, 2 x 2 supersampled),
their depth and the projection. Its own autograd derivative is exact, but of the point-sampled
image, which jumps wherever a silhouette crosses a pixel centre (no gradient with hard edges)
and wiggles wherever a minified texture is sampled. Measured on this problem with Adam through
the renderer (`fit_scene`'s loop, pyramid of 3 levels): hard edges, the error grows (26 cm after
60 iterations); hard edges and mip-mapped textures, 5.9 cm (the silhouettes of the pole, cart
and rail stops pull the camera sideways); soft edges (0.7 px) and 2 x 2 supersampling, 5 cm
after 60 iterations and 5 minutes, still creeping. The image gradient sees silhouettes and
textures alike, at the scale of the pyramid level.

The errors reported are the camera centre's (m), the rotation's (the angle of R_fitted^T R_true,
degrees) and the focal length's (fy in pixels, relative).

    python examples/camera_identification.py [--quick]

Prints one JSON line with the errors before and after the fit.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import diffcam  # noqa: E402
from diffcam.scene import SCENES_DIR  # noqa: E402

SCENE = SCENES_DIR / "pendulum_cart.toml"
AIM_PLANE_Y = 0.0  # m: the look-at point is kept on this plane (the rail's)
DTYPE = torch.float64
# 2 x 2 samples per pixel, box-filtered, for the observed and the fitted frames alike (as a
# sensor integrates over its pixels): silhouettes then move in quarter-pixel steps, which the
# full-resolution iterations need to finish the slow direction (one sample per pixel: stuck
# 2.6 cm off)
SUPERSAMPLE = 2
# the seven fitted numbers, in this order, and the scene file's camera in them
NAMES = ("x", "y", "z", "aim_x", "aim_z", "roll_deg", "log_fov")
TRUTH = torch.tensor([0.0, -3.2, 1.2, 0.0, 1.2, 0.0, math.log(37.0)], dtype=DTYPE)
# central-difference steps for the projection's derivative (m, m, deg, log): the projection
# is smooth, so these only need to be small next to the fit's accuracy
STEPS = torch.tensor([1e-4] * 5 + [1e-3, 1e-5], dtype=DTYPE)
# largest change per iteration (m, m, deg, log), a longer step is shortened to it: a trust
# region, so that a coarse level's Gauss-Newton step cannot run far along the nearly flat
# direction of moving the camera back while narrowing the field of view
MAX_STEP = torch.tensor([0.02] * 5 + [0.5, 0.01], dtype=DTYPE)
TOLERANCE = 1e-3  # a level ends when an iteration lowers its loss by less than this fraction
LEVELS = 4  # pyramid levels: pooled by 8, 4, 2, 1
COARSE_ITERATIONS = 6  # at most, at each coarse level
FINAL_ITERATIONS = {False: 30, True: 20}  # at most, at full resolution (quick: True)
FRAMES = {False: 11, True: 6}


def push_sequence(steps: int, dtype: torch.dtype = DTYPE) -> torch.Tensor:
    """(steps, 1) known rail force (N): 30 N to the right, then back, every 10 steps."""
    t = torch.arange(steps, dtype=dtype)
    return (30.0 * (1.0 - 2.0 * (torch.div(t, 10, rounding_mode="floor") % 2)))[:, None]


def camera_overrides(theta: torch.Tensor) -> dict[str, torch.Tensor]:
    """Scene overrides of the camera from the seven numbers ``theta`` (7,), see NAMES."""
    x, y, z, aim_x, aim_z, roll_deg, log_fov = theta.unbind(-1)
    roll = torch.deg2rad(roll_deg)
    zero = torch.zeros_like(x)
    return {
        "camera.position": torch.stack([x, y, z]),
        "camera.look_at": torch.stack([aim_x, zero + AIM_PLANE_Y, aim_z]),
        "camera.up": torch.stack([torch.sin(roll), zero, torch.cos(roll)]),
        "camera.fov_y_deg": torch.exp(log_fov),
    }


def scene_for(theta: torch.Tensor) -> diffcam.Scene:
    return diffcam.load_scene(SCENE, dtype=DTYPE, overrides=camera_overrides(theta))


def perturbed(theta: torch.Tensor, seed: int | None = None) -> torch.Tensor:
    """The starting camera: centre and look-at point 10 cm off, 1 degree of roll, field of
    view 5 % too wide; in fixed directions, or random ones (and signs) for a ``seed``."""
    position = torch.tensor([0.6, -0.5, 0.62], dtype=DTYPE)
    aim, roll, fov = torch.tensor([-0.6, 0.8], dtype=DTYPE), 1.0, 1.05
    if seed is not None:
        g = torch.Generator().manual_seed(seed)
        position, aim = (
            torch.randn(3, generator=g, dtype=DTYPE),
            torch.randn(2, generator=g, dtype=DTYPE),
        )
        signs = torch.randint(0, 2, (2,), generator=g) * 2 - 1
        roll, fov = float(signs[0]), 1.0 + 0.05 * float(signs[1])
    start = theta.clone()
    start[:3] += 0.10 * position / position.norm()
    start[3:5] += 0.10 * aim / aim.norm()
    start[5] += roll
    start[6] += math.log(fov)
    return start


def camera_errors(theta: torch.Tensor, truth: torch.Tensor) -> dict[str, float]:
    """Camera centre error (m), rotation error (degrees) and relative focal-length error."""
    a, b = scene_for(theta).camera, scene_for(truth).camera
    relative = a.rotation[0].transpose(0, 1) @ b.rotation[0]
    cos = ((torch.diagonal(relative).sum() - 1) / 2).clamp(-1, 1)
    return {
        "position_error_m": float((a.translation - b.translation).norm()),
        "rotation_error_deg": math.degrees(float(torch.arccos(cos))),
        "focal_error_rel": float((a.fy / b.fy - 1).abs()),
    }


# --------------------------------------------------------------------------- direct alignment
def render(theta: torch.Tensor, states) -> tuple[torch.Tensor, torch.Tensor]:
    """Frames (T, 3, H, W) and the world points they show (T, H, W, 3) for camera ``theta``.

    Pixels that show the background (no surface) get NaN points.
    """
    scene = scene_for(theta)
    images, points = [], []
    cam = scene.camera
    H, W = cam.height, cam.width
    xs = (torch.arange(W, dtype=DTYPE) + 0.5 - cam.cx) / cam.fx  # (W,) normalised x
    ys = (torch.arange(H, dtype=DTYPE) + 0.5 - cam.cy) / cam.fy  # (H,)
    rays = torch.stack(
        torch.broadcast_tensors(xs[None, :], ys[:, None], torch.ones(H, W, dtype=DTYPE)), -1
    )
    for state in states:
        # hard edges (not the default antialiased ones): mip-mapping needs them, and the
        # supersampling antialiases the images
        buffers = scene.render_buffers(
            state, mipmap=True, supersample=SUPERSAMPLE, edge_softness=0.0
        )
        depth = buffers.depth[0, 0]  # (H, W) camera z (m), 0 on the background
        local = rays * depth[..., None].where(depth[..., None] > 0, torch.nan)
        points.append(local @ cam.rotation[0].T + cam.translation[0])  # world_from_camera
        images.append(buffers.image[0])
    return torch.stack(images), torch.stack(points)


def pool(x: torch.Tensor, k: int) -> torch.Tensor:
    """Average-pool the last two axes of (N, C, H, W) by k (identity for k = 1)."""
    return F.avg_pool2d(x, k) if k > 1 else x


def image_gradient(images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Central differences along x (columns) and y (rows) of (N, C, h, w), in pooled pixels."""
    gx = torch.zeros_like(images)
    gy = torch.zeros_like(images)
    gx[..., 1:-1] = 0.5 * (images[..., 2:] - images[..., :-2])
    gy[..., 1:-1, :] = 0.5 * (images[..., 2:, :] - images[..., :-2, :])
    return gx, gy


def jacobian(theta, points, rendered, observed, k):
    """(N_res, 7) Jacobian of the pooled residual with respect to ``theta``, and the mask
    (T, 3, h, w) of the pooled pixels it covers (those without background or NaN)."""
    T, H, W, _ = points.shape
    flat = points.reshape(1, -1, 3)
    motion = []  # d(pooled pixel coordinates)/d theta_i, each (T, 2, h, w)
    for i in range(len(NAMES)):
        step = torch.zeros_like(theta)
        step[i] = STEPS[i]
        plus = scene_for(theta + step).camera.project(flat)
        minus = scene_for(theta - step).camera.project(flat)
        d = ((plus - minus) / (2 * STEPS[i])).reshape(T, H, W, 2).permute(0, 3, 1, 2)
        motion.append(pool(d, k) / k)
    # the image content moves with the points: I_new(x + dx) = I(x), so dI = -grad(I) . dx;
    # the gradient of the mean of both images (ESM) converges from further away
    gx, gy = image_gradient(0.5 * (pool(rendered, k) + pool(observed, k)))
    columns = [-(gx * m[:, :1] + gy * m[:, 1:]) for m in motion]  # each (T, 3, h, w)
    J = torch.stack(columns, -1)
    valid = torch.isfinite(J).all(-1)
    valid[..., :1, :] = valid[..., -1:, :] = False  # no central difference on the border
    valid[..., :1] = valid[..., -1:] = False
    return J[valid], valid


def align(theta, states, observed, levels, iterations, final_iterations, log=None):
    """Levenberg-Marquardt on the pooled photometric residual, coarse to fine.

    ``iterations`` at each coarse level, ``final_iterations`` at full resolution: the coarse
    levels bring the camera into the basin, but their blocks that straddle two depths (the rail
    before the backdrop) do not move as one, which biases them; only the full resolution pins
    the slow direction (forward and back along the line of sight against the field of view).
    Returns the fitted ``theta`` (7,) and the number of iterations (Jacobian evaluations).
    """
    rendered, points = render(theta, states)
    count = 0
    for level in range(levels - 1, -1, -1):
        k = 2**level
        damping = 1e-3
        for _ in range(iterations if level else final_iterations):
            J, valid = jacobian(theta, points, rendered, observed, k)
            r = (pool(rendered, k) - pool(observed, k))[valid]
            loss = float((r * r).mean())
            A, b = J.T @ J, J.T @ r
            count += 1
            while damping <= 1e4:  # raise the damping until a step lowers the loss
                step = torch.linalg.solve(A + damping * torch.diag(torch.diagonal(A)), b)
                candidate = theta - step / max(1.0, float((step / MAX_STEP).abs().max()))
                new_rendered, new_points = render(candidate, states)
                new_r = (pool(new_rendered, k) - pool(observed, k))[valid]
                new_loss = float((new_r * new_r).mean())
                if new_loss < loss:
                    break
                damping *= 10.0
            else:
                break  # no step lowers the loss: this level has converged
            theta, rendered, points = candidate, new_rendered, new_points
            damping = max(damping / 10.0, 1e-6)
            if log is not None:
                log(level, count, new_loss, theta)
            if new_loss > (1.0 - TOLERANCE) * loss:
                break  # converged to within TOLERANCE of the loss
    return theta, count


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer frames and iterations")
    parser.add_argument("--seed", type=int, help="random directions of the start's errors")
    parser.add_argument("--verbose", action="store_true", help="print each iteration's errors")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: busy box)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    n_frames = FRAMES[args.quick]

    start_time = time.perf_counter()
    truth_scene = scene_for(TRUTH)
    actions = push_sequence(n_frames - 1)
    trajectory = truth_scene.rollout(n_frames - 1, actions=actions[:, None, :])
    states = [trajectory[t] for t in range(n_frames)]
    with torch.no_grad():
        observed, _ = render(TRUTH, states)
        start = perturbed(TRUTH, args.seed)

        def log(level, count, loss, theta):
            errors = camera_errors(theta, TRUTH)
            print(level, count, f"{loss:.3e}", {k: round(v, 5) for k, v in errors.items()})

        fitted, count = align(
            start,
            states,
            observed,
            LEVELS,
            COARSE_ITERATIONS,
            FINAL_ITERATIONS[args.quick],
            log if args.verbose else None,
        )
    before, after = camera_errors(start, TRUTH), camera_errors(fitted, TRUTH)
    report = {
        "example": "camera_identification",
        "frames": n_frames,
        "seed": args.seed,
        "iterations": count,
        "pyramid_levels": LEVELS,
        "seconds": round(time.perf_counter() - start_time, 1),
        **{f"initial_{k}": round(v, 6) for k, v in before.items()},
        **{k: round(v, 6) for k, v in after.items()},
        "fitted": dict(zip(NAMES, [round(v, 5) for v in fitted.tolist()], strict=True)),
    }
    print(json.dumps(report))
    return report


if __name__ == "__main__":
    main()
