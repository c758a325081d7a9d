"""The ``diffcam`` command.

    diffcam render SCENE [--seconds S] [--fps N] [--out FILE.mp4|FILE.gif]
                         [--policy zero|random|sine] [--batch B] [--view rgb|depth|ids|tiled|all]
    diffcam check SCENE
    diffcam fit SCENE VIDEO --keys KEY [KEY ...] [--start S] [--seconds D] [--width W]
                [--fps F] [--out FILE.mp4] [--json FILE]

SCENE is a scene file or the name of a bundled scene (``pendulum_cart``; see
`diffcam.scene.bundled_scenes`). ``render`` simulates the scene, renders a frame every 1/fps
seconds and writes a video (with a progress bar). ``check`` validates a scene and prints a
summary. ``fit`` fits keys of a scene to a video of it (`diffcam.identify`) and prints one JSON
line. A mistake in the scene file or the options prints one ``diffcam: error: ...`` line and
exits with status 2, without a traceback.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from pathlib import Path

import torch

from .errors import SceneError
from .fit import FitError
from .identify import IdentifyError
from .scene.paths import bundled_scenes
from .video import VideoError

__all__ = ["main", "make_policy", "render_frames"]

VIEWS = ("rgb", "depth", "ids", "tiled", "all", "centres")
POLICIES = ("zero", "random", "sine")


# --------------------------------------------------------------------------- policies
def _action_scale(scene) -> torch.Tensor:
    """(A,) a sensible action amplitude per actuator: a force motor's max (or 1), a servo's
    half range of its joint limits (or 1 rad / 1 m)."""
    joints = {j["name"]: j for j in scene.config.joints}
    scales = []
    for name in scene.actuator_names:
        j = joints.get(name, {})
        m = j.get("motor", {})
        s = 1.0
        if m.get("type", "force") == "force":
            mx = m.get("max", math.inf)
            mx = float(mx.detach().reshape(-1)[0]) if isinstance(mx, torch.Tensor) else mx
            s = mx if math.isfinite(mx) else 1.0
        elif "limits" in j and not isinstance(j["limits"], torch.Tensor):
            lo, hi = j["limits"]
            s = 0.5 * (hi - lo)
        scales.append(s)
    return torch.tensor(scales, dtype=scene.dtype, device=scene.device)


def make_policy(scene, kind: str, seed: int = 0):
    """A policy ``policy(state, t) -> action (B, A)`` or None, for ``--policy``.

    zero: no action. random: a fresh uniform action in [-scale, scale] every step (one draw per
    batch element). sine: ``scale * sin(2 pi f t + phase)`` with f = 0.5 Hz and a different
    phase per batch element and actuator. The scale is a force motor's ``max`` (or 1), or a
    servo's half range of its limits.
    """
    if kind not in POLICIES:
        raise ValueError(f"unknown policy {kind!r}")
    n_act = scene.n_actuators
    if kind == "zero" or n_act == 0:
        return None
    scale = _action_scale(scene)
    b = scene.batch_size
    gen = torch.Generator(device="cpu").manual_seed(seed)
    dt = scene.timestep
    if kind == "random":

        def policy(state, t):
            u = torch.rand(b, n_act, generator=gen, dtype=scene.dtype) * 2 - 1
            return u.to(scene.device) * scale

        return policy
    phase = (torch.rand(b, n_act, generator=gen, dtype=scene.dtype) * 2 * math.pi).to(scene.device)
    if b == 1:
        phase = torch.zeros_like(phase)

    def policy(state, t):
        return scale * torch.sin(2 * math.pi * 0.5 * t * dt + phase)

    return policy


# --------------------------------------------------------------------------- frames
def _view_frame(scene, state, view: str, supersample: int, mipmap: bool) -> torch.Tensor:
    """One video frame (3, H', W') for a state of batch B."""
    from . import debug

    # Hard edges on purpose (not the renderer's antialiased default): a video wants no
    # gradient, supersampling already antialiases its edges, mip-mapping needs hard edges,
    # and the hard render is the fastest.
    out = scene.render_buffers(state, supersample=supersample, mipmap=mipmap, edge_softness=0.0)
    n = len(scene.body_names)
    if view in ("rgb", "tiled"):
        imgs = out.image
    elif view == "depth":
        imgs = debug.colorize_depth(out.depth)
    elif view == "ids":
        imgs = debug.colorize_ids(out.object_id, n=n)
    elif view == "centres":
        imgs = debug.draw_points(out.image, scene.project_bodies(state))
    elif view == "all":
        rows = [
            out.image,
            debug.colorize_depth(out.depth),
            debug.colorize_ids(out.object_id, n=n),
        ]
        # each batch element gets one row: rgb | depth | ids
        imgs = torch.stack(rows, dim=1).reshape(-1, *out.image.shape[1:])
        return debug.tile(imgs, ncols=3)
    else:
        raise ValueError(f"unknown view {view!r}")
    if imgs.shape[0] == 1:
        return imgs[0]
    return debug.tile(imgs)


@torch.no_grad()
def render_frames(
    scene,
    seconds: float,
    fps: float,
    policy=None,
    view: str = "rgb",
    supersample: int = 2,
    mipmap: bool = True,
    progress: bool = True,
) -> torch.Tensor:
    """Simulate ``seconds`` and return (T, 3, H', W') frames, T = round(seconds * fps).

    Frame k shows the state at time k / fps (to the nearest physics step). The physics runs at
    the scene's timestep; if 1/fps is not a multiple of it, frames are taken at the nearest
    step (so the video's time is off by less than half a timestep per frame).
    """
    from tqdm.auto import tqdm

    n_frames = max(1, round(seconds * fps))
    dt = scene.timestep
    frame_steps = [round(k / (fps * dt)) for k in range(n_frames)]
    total = frame_steps[-1]
    state = scene.initial_state()
    frames = []
    bar = tqdm(total=total + n_frames, desc="simulate + render", unit="step", disable=not progress)
    step = 0
    for k, target in enumerate(frame_steps):
        while step < target:
            action = policy(state, step) if policy is not None else None
            try:
                state = scene.step(state, action)
            except torch.linalg.LinAlgError as e:
                bar.close()
                raise SceneError(
                    f"the physics solver failed at step {step + 1} (t = {(step + 1) * dt:.3f} s): "
                    f"{e}",
                    file=scene.path,
                ) from None
            step += 1
            bar.update(1)
            _check_finite(scene, state, step, bar)
        frames.append(_view_frame(scene, state, view, supersample, mipmap).cpu())
        bar.update(1)
        bar.set_postfix(frame=f"{k + 1}/{n_frames}")
    bar.close()
    return torch.stack(frames)


def _check_finite(scene, state, step: int, bar) -> None:
    """Stop with a clean message (naming the body) when the state is no longer finite."""
    ok = torch.isfinite(state.linear_velocity).all(-1) & torch.isfinite(state.position).all(-1)
    if bool(ok.all()):
        return
    bar.close()
    bad = (~ok).nonzero()[0].tolist()  # (batch, body)
    raise SceneError(
        f"the simulation became non-finite at step {step} (t = {step * scene.timestep:.3f} s), "
        f"body {scene.body_names[bad[1]]!r} of batch element {bad[0]}; try a smaller timestep, "
        "more solver_iterations or gentler actions",
        file=scene.path,
    )


# --------------------------------------------------------------------------- commands
def _cmd_check(args) -> int:
    from .scene import load_scene

    scene = load_scene(args.scene, batch_size=1)
    print(scene.summary())
    state = scene.initial_state()
    pix = scene.project_bodies(state)[0]
    w, h = scene.camera.width, scene.camera.height
    outside = [
        name
        for name, (x, y) in zip(scene.body_names, pix.tolist(), strict=True)
        if not (0 <= x <= w and 0 <= y <= h)
    ]
    if outside:
        print(f"  note: body centres outside the initial view: {', '.join(outside)}")
    print("ok")
    return 0


def _cmd_render(args) -> int:
    from .scene import load_scene
    from .video import write_video

    if not (args.seconds > 0 and math.isfinite(args.seconds)):
        raise SceneError(f"--seconds must be a positive number, got {args.seconds}")
    if not (args.fps > 0 and math.isfinite(args.fps)):
        raise SceneError(f"--fps must be a positive number, got {args.fps}")
    if args.batch < 1:
        raise SceneError(f"--batch must be at least 1, got {args.batch}")
    if args.supersample < 1:
        raise SceneError(f"--supersample must be at least 1, got {args.supersample}")
    out = Path(args.out) if args.out else Path(Path(args.scene).stem + ".mp4")
    if out.suffix.lower() not in (".mp4", ".gif"):
        raise SceneError(f"--out must end in .mp4 or .gif, got {str(out)!r}")
    if args.threads is not None and args.threads < 1:
        raise SceneError(f"--threads must be at least 1, got {args.threads}")
    dtype = torch.float64 if args.float64 else torch.float32
    scene = load_scene(args.scene, batch_size=args.batch, dtype=dtype)
    policy = make_policy(scene, args.policy, seed=args.seed)
    # Small frames render fastest on one thread; more threads mostly spin (and thrash on a
    # busy machine). Large frames use torch's default.
    work = scene.camera.width * scene.camera.height * args.supersample**2 * args.batch
    threads = args.threads or (1 if work < 1_000_000 else torch.get_num_threads())
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    t0 = time.perf_counter()
    try:
        frames = render_frames(
            scene,
            args.seconds,
            args.fps,
            policy=policy,
            view=args.view,
            supersample=args.supersample,
            mipmap=not args.no_mipmap,
            progress=not args.quiet,
        )
    finally:
        torch.set_num_threads(previous)
    write_video(out, frames, fps=args.fps)
    took = time.perf_counter() - t0
    t, _, h, w = frames.shape
    print(f"wrote {out} ({t} frames, {w}x{h}, {args.fps:g} fps) in {took:.1f} s")
    return 0


def _cmd_import_mjcf(args) -> int:
    from .mjcf import import_mjcf, write_scene_file

    imported = import_mjcf(args.model)
    out = Path(args.out) if args.out else Path(args.model).with_suffix(".toml")
    write_scene_file(imported, out)
    for note in imported.notes:
        print(f"note: {note}")
    config = imported.config
    print(
        f"wrote {out} ({len(config['bodies'])} bodies, {len(config.get('joints', []))} joints, "
        f"{len(imported.actuators)} actuators)"
    )
    return 0


def _cmd_fit(args) -> int:
    import json

    from .identify import Settings, identify

    if args.threads is not None:
        if args.threads < 1:
            raise SceneError(f"--threads must be at least 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    if args.width < 16:
        raise SceneError(f"--width must be at least 16 pixels, got {args.width}")
    if args.out and Path(args.out).suffix.lower() not in (".mp4", ".gif"):
        raise SceneError(f"--out must end in .mp4 or .gif, got {args.out!r}")
    settings = Settings(
        width=args.width, iterations=args.iterations, exposure=args.exposure,
        systematic=not args.no_systematic, progress=not args.quiet,
    )  # fmt: skip
    result = identify(
        args.scene, args.video, args.keys, start=args.start, seconds=args.seconds, fps=args.fps,
        settings=settings,
    )  # fmt: skip
    summary = result.to_json()
    if args.out:
        result.write_video(args.out)
        summary["video_out"] = str(args.out)
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary))
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="diffcam",
        description="Simulate and render diffcam scenes: TOML files, or a bundled scene by "
        "its name (" + ", ".join(bundled_scenes()) + ").",
    )
    sub = p.add_subparsers(dest="command", metavar="{render,check,fit,import-mjcf}")
    r = sub.add_parser("render", help="simulate a scene and write a video")
    r.add_argument("scene", help="a scene file, or a bundled scene's name, e.g. pendulum_cart")
    r.add_argument("--seconds", type=float, default=3.0, help="simulated time (default 3)")
    r.add_argument("--fps", type=float, default=30.0, help="video frame rate (default 30)")
    r.add_argument("--out", help="output .mp4 or .gif (default: <scene name>.mp4 here)")
    r.add_argument("--policy", choices=POLICIES, default="sine", help="actions (default sine)")
    r.add_argument("--batch", type=int, default=1, help="worlds simulated side by side")
    r.add_argument(
        "--view",
        choices=VIEWS,
        default="rgb",
        help="rgb (batch elements tiled when --batch > 1), depth, ids (object ids), tiled, "
        "all (rgb | depth | ids), centres (projected body centres)",
    )
    r.add_argument("--supersample", type=int, default=2, help="s x s samples per pixel")
    r.add_argument("--no-mipmap", action="store_true", help="sample textures without mipmaps")
    r.add_argument("--seed", type=int, default=0, help="seed of the random / sine policy")
    r.add_argument("--float64", action="store_true", help="simulate in double precision")
    r.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads (default: 1 for small frames, else torch's default)",
    )
    r.add_argument("--quiet", action="store_true", help="no progress bar")
    r.set_defaults(func=_cmd_render)
    c = sub.add_parser("check", help="validate a scene and print a summary")
    c.add_argument("scene", help="a scene file, or a bundled scene's name")
    c.set_defaults(func=_cmd_check)
    f = sub.add_parser(
        "fit",
        help="fit a scene's keys (physics, start, camera) to a video of it",
        description="Fit the keys of a scene (its override paths: bodies.<b>.restitution, "
        "joints.<j>.damping, camera.position, bodies.<b>.position[2], ...) to a video that "
        "shows it, from the scene file's rough values. The last line printed is one JSON "
        "object: values, std, status, explained, seconds.",
    )
    f.add_argument(
        "scene", help="a scene file (or a bundled scene's name) describing what the video shows"
    )
    f.add_argument("video", help="the video file (MP4, MOV, AVI, MKV, ...)")
    f.add_argument("--keys", nargs="+", required=True, metavar="KEY", help="keys to fit")
    f.add_argument("--start", type=float, default=0.0,
                   help="video time (s) of the scene's time 0 (default 0)")  # fmt: skip
    f.add_argument("--seconds", type=float, default=None,
                   help="how much of the video to use from --start (default: to the end)")  # fmt: skip
    f.add_argument("--width", type=int, default=160,
                   help="working width in pixels (default 160)")  # fmt: skip
    f.add_argument("--fps", type=float, default=None,
                   help="the true frame rate, when the file's is wrong (slow motion)")  # fmt: skip
    f.add_argument("--exposure", type=float, default=None,
                   help="the shutter time (s), if known (default: fitted)")  # fmt: skip
    f.add_argument("--iterations", type=int, default=12,
                   help="evaluations of the pixel stage (default 12)")  # fmt: skip
    f.add_argument("--no-systematic", action="store_true",
                   help="skip the re-fits that measure what the fit's choices move")  # fmt: skip
    f.add_argument("--out", help="write observed | fitted | difference to this .mp4 or .gif")
    f.add_argument("--json", help="also write the result to this JSON file")
    f.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    f.add_argument("--quiet", action="store_true", help="no progress on stderr")
    f.set_defaults(func=_cmd_fit)
    m = sub.add_parser("import-mjcf", help="convert a MuJoCo MJCF model (.xml) to a scene file")
    m.add_argument("model", help="an MJCF file made of primitive geoms")
    m.add_argument("-o", "--out", help="the scene file to write (default: MODEL with .toml)")
    m.set_defaults(func=_cmd_import_mjcf)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``diffcam`` console script; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help()
        return 2
    try:
        return args.func(args)
    except (SceneError, IdentifyError, VideoError, FitError) as e:
        print(f"diffcam: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("diffcam: interrupted", file=sys.stderr)
        return 130
    except OSError as e:  # e.g. the output folder is not writable
        print(f"diffcam: error: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - physics.ModelError / SimulationError and the like
        name = type(e).__name__
        if name in ("ModelError", "SimulationError"):
            print(f"diffcam: error: {e}", file=sys.stderr)
            return 2
        if os.environ.get("DIFFCAM_DEBUG"):
            raise
        print(
            f"diffcam: internal error: {name}: {e} (set DIFFCAM_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
