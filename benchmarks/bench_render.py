"""Renderer speed and memory: B = 64 images of 288 x 96 (the Degrave et al. camera).

Prints one JSON line per case:
    {"bench", "B", "H", "W", "prims", "forward_ms", "fwd_bwd_ms", "mpix_per_s", "peak_mem_mb", ...}

Cases (gradients to textures and poses in every fwd_bwd):
  diffcam_rect5           diffcam eager (default backend), 5 textured rectangles, 256^2 textures
  diffcam_rect5_compile   the same with backend="compile" (the compiled planar fast path with
                          its hand-written backward); compile time excluded
  diffcam_mixed5          diffcam eager, plane + box + sphere + capsule + cylinder, textured
  diffcam_mixed5_compile  the same with backend="compile" (not planar: the eager reference
                          path)
  diffcam_soft5           diffcam_rect5 with edge_softness = 1 px (eager)
  plain_rect5             benchmarks/plain_reference_render.py on the diffcam_rect5 scene
                          (also reports how far its image is from diffcam's)
  pendulum_cart_b{B}_{cached|uncached}
                          ``Scene.render`` of the bundled pendulum_cart.toml (7 bodies: 5 static,
                          cart and pole moving; 288 x 96, lit) at B = 1, 16 and 201 (201 = a
                          2-s video at 100 Hz batched over time: the frames of a rollout), with
                          the Scene's cached static layer or without it (``static_cache=False``);
                          ``--backend`` picks the renderer backend. Its fwd_bwd back-propagates
                          a fixed random image gradient (no loss) to the poses of all bodies.

Times are medians (and minima, ``*_min_ms``: the steadier figure on a shared machine) over
``--repeats`` runs after ``--warmup`` runs; ``mpix_per_s`` counts output pixels (B * H * W) per
second of forward+backward. ``*_cpu_ms`` is process CPU time (all
threads), a steadier figure than wall-clock on a shared machine (equal to wall-clock for
``--threads 1`` on an idle one). Peak memory: each case runs in its own
subprocess and reports ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` after the runs minus the
value before the first render (scene already built), i.e. the peak resident-set growth caused by
rendering (tracemalloc does not see torch's allocations). ``page_faults_per_repeat``: minor page
faults per timed repeat (forward + forward/backward); ``--keep-freed-memory`` runs with
``diffcam.allocator.keep_freed_memory()``, which removes them.

Usage: python benchmarks/bench_render.py [--case NAME] [--repeats N] [--threads T] [--backend B]
    [--keep-freed-memory]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

B, H, W, TEX = 64, 96, 288, 256
CASES = [
    "diffcam_rect5",
    "diffcam_rect5_compile",
    "diffcam_mixed5",
    "diffcam_mixed5_compile",
    "diffcam_soft5",
    "plain_rect5",
] + [f"pendulum_cart_b{b}_{m}" for b in (1, 16, 201) for m in ("cached", "uncached")]


def _rot_z(a):
    c, s = math.cos(a), math.sin(a)
    return torch.tensor([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


def _rot_x(a):
    c, s = math.cos(a), math.sin(a)
    return torch.tensor([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def scene(kind: str):
    """Camera (shared), K primitives, per-batch poses (requires grad), textures (requires grad)."""
    import diffcam

    g = torch.Generator().manual_seed(0)
    cam = diffcam.PinholeCamera.look_at(
        torch.tensor([0.0, -2.5, 1.0]),
        torch.tensor([0.0, 0.0, 1.0]),
        torch.tensor([0.0, 0.0, 1.0]),
        torch.tensor(30.0),
        W,
        H,
    )
    textures = [torch.rand(3, TEX, TEX, generator=g).requires_grad_() for _ in range(5)]
    upright = _rot_x(math.pi / 2)  # body +z -> world -y (faces the camera), body +y -> world +z
    if kind == "rect":
        sizes = [[6.0, 4.0], [6.0, 3.0], [0.4, 0.3], [0.1, 0.8], [0.3, 0.3]]
        prims = [
            diffcam.Primitive("rectangle", s, texture=t)
            for s, t in zip(sizes, textures, strict=True)
        ]
        base_R = [torch.eye(3), upright, upright, upright, upright]
        base_p = [[0, 0, 0.0], [0, 1.5, 1.0], [0, 0, 0.8], [0.1, -0.1, 1.2], [-0.5, -0.2, 0.7]]
    else:
        prims = [
            diffcam.Primitive("plane", None, texture=textures[0]),
            diffcam.Primitive("box", [0.4, 0.2, 0.15], texture=textures[1]),
            diffcam.Primitive("sphere", 0.15, texture=textures[2]),
            diffcam.Primitive("capsule", [0.04, 0.6], texture=textures[3]),
            diffcam.Primitive("cylinder", [0.12, 0.3], texture=textures[4]),
        ]
        base_R = [torch.eye(3)] * 5
        base_p = [[0, 0, 0.0], [0, 0, 0.8], [0.6, 0.2, 1.1], [0.05, -0.1, 1.2], [-0.6, 0, 1.0]]
    K = len(prims)
    ang = 0.3 * (torch.rand(B, K, generator=g) - 0.5)
    R = torch.stack(
        [torch.stack([base_R[k] @ _rot_z(float(a)) for k, a in enumerate(row)]) for row in ang]
    )
    R[:, 0] = base_R[0]
    p = torch.tensor(base_p).expand(B, K, 3) + 0.1 * (torch.rand(B, K, 3, generator=g) - 0.5)
    p[:, 0] = torch.tensor(base_p[0])
    return cam, prims, R.requires_grad_(), p.clone().requires_grad_(), textures


def pendulum_cart(batch: int, cached: bool, backend: str = "eager", edge_softness: float = 0.0):
    """``Scene.render`` of the pendulum-cart at ``batch`` frames of a 2-s rollout -> (forward,
    backward given the image, leaves, info)."""
    import diffcam
    from diffcam.scene import SCENES_DIR

    scene = diffcam.load_scene(SCENES_DIR / "pendulum_cart.toml", batch_size=1)
    steps = 200
    force = 20.0 * torch.sin(2 * math.pi * 0.8 * 0.01 * torch.arange(steps)).view(steps, 1, 1)
    with torch.no_grad():
        traj = scene.rollout(steps, actions=force)
    frames = torch.linspace(0, steps, batch).round().long() if batch > 1 else torch.tensor([100])
    state = traj[frames, 0]  # time as the batch axis
    rot = state.rotation.clone().requires_grad_()
    pos = state.position.clone().requires_grad_()
    posed = state.replace(rotation=rot, position=pos)
    grad = torch.rand(batch, 3, scene.camera.height, scene.camera.width)

    def fwd():
        return scene.render(
            posed, static_cache=cached, backend=backend, edge_softness=edge_softness
        )

    def bwd(img):
        img.backward(grad)

    info = {"H": scene.camera.height, "W": scene.camera.width, "prims": len(scene.primitives)}
    moving = sum(not static for static in scene.world.is_static)
    info.update(moving=moving, static_cache=cached, backend=backend)
    return fwd, bwd, [rot, pos], info


def run_case(case: str, repeats: int, warmup: int, backend: str = "eager") -> dict:
    import diffcam

    extra = {"B": B, "H": H, "W": W}
    if case.startswith("pendulum_cart"):
        batch, mode = case.split("_")[2:]
        fwd, bwd, leaves, info = pendulum_cart(int(batch[1:]), mode == "cached", backend)
        extra = {"B": int(batch[1:]), **info}
        return _timed(case, fwd, bwd, leaves, repeats, warmup, extra)
    kind = "mixed" if "mixed" in case else "rect"
    backend = "compile" if case.endswith("_compile") else "eager"
    cam, prims, R, p, textures = scene(kind)
    bg = torch.tensor([0.9, 0.9, 0.9])
    soft = 1.0 if case == "diffcam_soft5" else 0.0
    extra.update(prims=len(prims), texture=TEX)
    if case == "plain_rect5":
        from plain_reference_render import plain_render

        half = torch.tensor([[s / 2 for s in pr.size] for pr in prims])
        fx, fy, cx, cy = (v.expand(B) for v in (cam.fx, cam.fy, cam.cx, cam.cy))
        Rc, tc = cam.rotation.expand(B, 3, 3), cam.translation.expand(B, 3)

        def fwd():
            return plain_render(fx, fy, cx, cy, Rc, tc, H, W, R, p, half, textures, bg)

        with torch.no_grad():
            ref = diffcam.render(cam, prims, R, p, background=bg, edge_softness=0.0)
            diff = (fwd() - ref).abs().amax(1)
            extra["max_abs_diff_vs_diffcam"] = round(float(diff.max()), 4)
            # edge pixels may flip hit/miss between two float32 implementations
            extra["frac_pixels_diff_gt_1e-2"] = round(float((diff > 1e-2).float().mean()), 5)
            extra["median_abs_diff"] = float(diff.median())
    else:

        def fwd():
            return diffcam.render(
                cam, prims, R, p, background=bg, edge_softness=soft, backend=backend
            )

    def bwd(img):
        img.square().mean().backward()

    result = _timed(case, fwd, bwd, [R, p, *textures], repeats, warmup, extra)
    result["vs_mitsuba_86ms"] = round(result["fwd_bwd_ms"] / 86.0, 3)
    return result


def _page_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _timed(case, fwd, bwd, leaves, repeats, warmup, extra) -> dict:
    """Time ``fwd()`` without autograd and ``bwd(fwd())``, clearing the leaves' gradients."""

    def fwd_bwd():
        bwd(fwd())
        for x in leaves:
            x.grad = None

    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    fwd_bwd()  # first call: torch.compile compiles here (reported, not timed below)
    with torch.no_grad():
        fwd()
    first_call_s = round(time.perf_counter() - t0, 1)
    tf, tb, cf, cb = [], [], [], []
    faults = 0
    for i in range(warmup + repeats):
        if i == warmup:
            faults = _page_faults()
        t0, c0 = time.perf_counter(), time.process_time()
        with torch.no_grad():
            fwd()
        t1, c1 = time.perf_counter(), time.process_time()
        fwd_bwd()
        t2, c2 = time.perf_counter(), time.process_time()
        if i >= warmup:
            tf.append(1e3 * (t1 - t0))
            tb.append(1e3 * (t2 - t1))
            cf.append(1e3 * (c1 - c0))
            cb.append(1e3 * (c2 - c1))
    faults = (_page_faults() - faults) / repeats
    rss1 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    fb = statistics.median(tb)
    n_pix = extra["B"] * extra["H"] * extra["W"]
    return {
        "bench": case,
        **extra,
        "forward_ms": round(statistics.median(tf), 2),
        "fwd_bwd_ms": round(fb, 2),
        "forward_min_ms": round(min(tf), 2),
        "fwd_bwd_min_ms": round(min(tb), 2),
        "mpix_per_s": round(n_pix / (fb * 1e3), 2),
        "forward_cpu_ms": round(statistics.median(cf), 2),
        "fwd_bwd_cpu_ms": round(statistics.median(cb), 2),
        "peak_mem_mb": round((rss1 - rss0) / 1024, 1),
        "page_faults_per_repeat": round(faults),
        "threads": torch.get_num_threads(),
        "first_call_s": first_call_s,
    }


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--case", choices=CASES)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--backend", default="eager", help="renderer backend of pendulum_cart_*")
    ap.add_argument(
        "--keep-freed-memory",
        action="store_true",
        help="call diffcam.allocator.keep_freed_memory() first (no page faults on reuse)",
    )
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    if a.keep_freed_memory:
        from diffcam.allocator import keep_freed_memory

        keep_freed_memory()
    if a.case:
        print(json.dumps(run_case(a.case, a.repeats, a.warmup, a.backend)), flush=True)
        return
    for case in CASES:  # one subprocess each, so that max-RSS is per case
        cmd = [sys.executable, __file__, "--case", case, "--repeats", str(a.repeats)]
        cmd += ["--warmup", str(a.warmup), "--backend", a.backend]
        cmd += ["--threads", str(a.threads)] if a.threads else []
        cmd += ["--keep-freed-memory"] if a.keep_freed_memory else []
        subprocess.run(cmd, check=True)


if __name__ == "__main__":
    main()
