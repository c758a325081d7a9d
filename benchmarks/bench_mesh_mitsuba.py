"""A textured mesh in diffcam and in Mitsuba 3, side by side in one run (issue 40).

    python benchmarks/bench_mesh_mitsuba.py [--threads 1] [--repeats 5] [--spp 256]
        [--peers-python /work/peers_venv/bin/python] [--save-images DIR] [--record]

Cases (one JSON line each, `benchmarks/results/mesh_mitsuba.jsonl` with ``--record``):

- ``agreement``: the same mesh, texture, pose and pinhole camera rendered by diffcam (default
  antialiased edges, unlit: ``lighting=None``, black background) and by Mitsuba
  (`benchmarks/peers/mitsuba_mesh.py`: the mesh an area emitter of the same texture on a black
  BSDF, ``--spp`` samples per pixel, box filter), at 288 x 96 and 640 x 480. Unlit on both
  sides, so a pixel is the texture at the surface it sees: the comparison is of geometry,
  camera, (u, v) and texture sampling, not of light transport. Reported: the silhouettes' IoU
  (diffcam's coverage > 0.5 against Mitsuba's alpha > 0.5), the mean absolute colour error
  (per channel, values in [0, 1]) over the union of the silhouettes and over the whole image,
  and the mean |coverage - alpha|. Meshes: ``torus5000``, a 5,000-triangle torus with a
  UV-grid texture (red grows with u, green with v, blue checks 8 x 8), tilted and off centre;
  ``frustum``, tests/data/mjcf/meshes/frustum.obj in one colour, an asymmetric solid off
  centre (a mirrored or flipped camera would not overlap it).
- ``gradient``: the gradient of ``mean(image * ramp)`` (below) for the torus's first view to
  a translation of the mesh and to its texture, diffcam's against Mitsuba's
  (``direct_projective``: 16 seeds of 64 samples per pixel, with its standard error): that
  the timings below compare the same computation; diffcam's also with 3 x 3 samples per
  pixel.
- ``timing``: forward+backward of ``mean(image * ramp)`` (ramp = row/H + col/W) at 288 x 96,
  1 sample per pixel. diffcam: B = 64 views (cameras on an arc) of the torus in one call,
  gradients to the pose (rotation and position) and the texture, default antialiased edges
  (so the pose gradient sees silhouettes); also B = 1 (the first view). Mitsuba: one image with gradients to the vertex
  positions and the texture (``direct_projective``: silhouette terms, as diffcam's edges),
  one image with the texture's only (``prb``), and the 64 views in one call (its ``batch``
  sensor; texture only: Mitsuba cannot batch the vertex positions per view). Both on
  ``--threads`` threads (torch's, drjit's). Medians of ``--repeats`` after warm-ups (Mitsuba's
  first call JIT-compiles: reported apart), in ``--rounds`` rounds that take turns (one
  ``timing_round`` line each; ``timing``: the medians over the rounds and their ratios).

Mitsuba runs in the peers' venv as a subprocess; diffcam never imports it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _record import Recorder, add_record_flag  # noqa: E402

import diffcam  # noqa: E402
from diffcam.mesh import Mesh, read_obj, write_obj  # noqa: E402
from diffcam.mesh.shapes import torus  # noqa: E402

RECORD = Recorder("mesh_mitsuba")
PEER = ROOT / "benchmarks" / "peers" / "mitsuba_mesh.py"
SIZES = [(288, 96), (640, 480)]
TIMING_SIZE = (288, 96)
BATCH = 64


@dataclass(frozen=True)
class View:
    """A pinhole camera: eye, target and up (m, world), vertical field of view (degrees)."""

    eye: tuple[float, float, float]
    target: tuple[float, float, float]
    up: tuple[float, float, float]
    fov_y_deg: float

    def camera(self, width: int, height: int) -> diffcam.PinholeCamera:
        return diffcam.PinholeCamera.look_at(
            torch.tensor(self.eye), torch.tensor(self.target), torch.tensor(self.up),
            self.fov_y_deg, width, height,
        )  # fmt: skip

    def as_json(self) -> dict:
        return {"eye": self.eye, "target": self.target, "up": self.up, "fov_y_deg": self.fov_y_deg}


@dataclass(frozen=True)
class Case:
    """A mesh posed in the world: ``rotation`` (3, 3) world_from_mesh, ``position`` (3,) m;
    a texture (3, Ht, Wt) in [0, 1] (rows top to bottom) or one ``color``."""

    name: str
    mesh: Mesh
    texture: torch.Tensor | None
    color: tuple[float, float, float]
    rotation: torch.Tensor
    position: torch.Tensor
    view: View


def rotation_xyz(rx: float, ry: float, rz: float) -> torch.Tensor:
    """(3, 3) rotation by rz about z after ry about y after rx about x (degrees)."""
    cx, sx = math.cos(math.radians(rx)), math.sin(math.radians(rx))
    cy, sy = math.cos(math.radians(ry)), math.sin(math.radians(ry))
    cz, sz = math.cos(math.radians(rz)), math.sin(math.radians(rz))
    x = torch.tensor([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    y = torch.tensor([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    z = torch.tensor([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    return (z @ y @ x).float()


def uv_grid_texture(size: int = 256, cells: int = 8) -> torch.Tensor:
    """(3, size, size) in [0, 1]: red grows with u (left to right), green with v (bottom to
    top), blue checks ``cells`` x ``cells``: any flip or swap of (u, v) changes the colours."""
    centres = (torch.arange(size) + 0.5) / size
    u = centres.view(1, -1).expand(size, size)
    v = centres.flip(0).view(-1, 1).expand(size, size)  # row 0 is the top: v near 1
    check = ((u * cells).floor() + (v * cells).floor()) % 2
    return torch.stack([0.15 + 0.8 * u, 0.15 + 0.8 * v, 0.1 + 0.8 * check])


def cases() -> list[Case]:
    view = View((0.9, -3.4, 1.5), (0.2, 0.0, 0.35), (0.0, 0.0, 1.0), 30.0)
    frustum = read_obj(ROOT / "tests" / "data" / "mjcf" / "meshes" / "frustum.obj").scaled(3.0)
    return [
        Case("torus5000", torus(0.5, 0.18, 50, 50), uv_grid_texture(), (0.0, 0.0, 0.0),
             rotation_xyz(35.0, -15.0, 20.0), torch.tensor([0.55, 0.2, 0.45]), view),
        Case("frustum", frustum, None, (0.9, 0.6, 0.2), rotation_xyz(10.0, 0.0, 35.0),
             torch.tensor([0.4, -0.1, 0.1]), view),
    ]  # fmt: skip


def diffcam_render(
    case: Case, width: int, height: int, supersample: int = 1
) -> diffcam.RenderBuffers:
    prim = diffcam.Primitive("mesh", mesh=case.mesh, texture=case.texture, color=case.color)
    with torch.no_grad():
        return diffcam.render_buffers(
            case.view.camera(width, height), [prim], case.rotation.view(1, 1, 3, 3),
            case.position.view(1, 1, 3), background=torch.zeros(3), lighting=None,
            supersample=supersample,
        )  # fmt: skip


def to_world(case: Case) -> list[list[float]]:
    m = torch.eye(4, dtype=torch.float64)
    m[:3, :3] = case.rotation.double()
    m[:3, 3] = case.position.double()
    return m.tolist()


def arc_views(view: View, count: int) -> list[View]:
    """``count`` views around ``view.target``, the eye turned about z over +-40 degrees."""
    eye, target = np.array(view.eye), np.array(view.target)
    out = []
    for a in np.linspace(-40.0, 40.0, count):
        c, s = math.cos(math.radians(a)), math.sin(math.radians(a))
        d = eye - target
        turned = target + np.array([c * d[0] - s * d[1], s * d[0] + c * d[1], d[2]])
        out.append(View(tuple(float(x) for x in turned), view.target, view.up, view.fov_y_deg))
    return out


def run_peer(python: str, spec: dict, workdir: Path) -> dict:
    path = workdir / "spec.json"
    path.write_text(json.dumps(spec))
    done = subprocess.run([python, str(PEER), str(path)], capture_output=True, text=True,
                          timeout=3600)  # fmt: skip
    lines = done.stdout.strip().splitlines()
    if done.returncode or not lines or "{" not in lines[-1]:
        raise RuntimeError(f"the Mitsuba peer failed:\n{done.stdout[-2000:]}{done.stderr[-3000:]}")
    return json.loads(lines[-1][lines[-1].index("{") :])  # after any terminal colour codes


def agreement(ours: diffcam.RenderBuffers, theirs: np.ndarray) -> dict:
    """IoU of the silhouettes, colour errors and coverage error of diffcam's render against
    Mitsuba's (H, W, 4) RGBA."""
    image = ours.image[0].permute(1, 2, 0).numpy().astype(np.float64)
    coverage = ours.coverage[0, 0].numpy().astype(np.float64)
    rgb, alpha = theirs[..., :3].astype(np.float64), theirs[..., 3].astype(np.float64)
    a, b = coverage > 0.5, alpha > 0.5
    union = a | b
    error = np.abs(image - rgb).mean(-1)  # (H, W) mean over the channels
    return {
        "iou": round(float((a & b).sum() / max(union.sum(), 1)), 4),
        "pixels_ours": int(a.sum()),
        "pixels_mitsuba": int(b.sum()),
        "color_mae_silhouettes": round(float(error[union].mean()), 4),
        "color_mae_image": round(float(error.mean()), 4),
        "coverage_mae": round(float(np.abs(coverage - alpha).mean()), 4),
        # interior: pixels both cover fully, away from edges
        "color_mae_interior": round(float(error[(coverage > 0.999) & (alpha > 0.999)].mean()), 4),
    }


def timed(fn, repeats: int) -> tuple[float, float]:
    """(median ms, first call s)."""
    t0 = time.perf_counter()
    fn()
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times), first


def diffcam_timing(
    case: Case, repeats: int, batch: int = BATCH, forward: bool = True, size=TIMING_SIZE
) -> dict:
    """Forward+backward of ``batch`` views of ``case`` at ``size`` (W, H) to the pose and the
    texture (ms), and with ``forward`` the forward alone (no grad)."""
    width, height = size
    views = arc_views(case.view, batch) if batch > 1 else [case.view]
    camera = diffcam.PinholeCamera.look_at(
        torch.tensor([v.eye for v in views]), torch.tensor([v.target for v in views]),
        torch.tensor([v.up for v in views]), case.view.fov_y_deg, width, height,
    )  # fmt: skip
    rows = torch.arange(height).view(-1, 1) / height
    cols = torch.arange(width).view(1, -1) / width
    ramp = (rows + cols).view(1, 1, height, width)
    shape = diffcam.Primitive("mesh", mesh=case.mesh).mesh_shape  # the BVH, built once

    def forward_backward():
        rotation = case.rotation.view(1, 1, 3, 3).clone().requires_grad_(True)
        position = case.position.view(1, 1, 3).clone().requires_grad_(True)
        texture = case.texture.clone().requires_grad_(True)
        prim = diffcam.Primitive("mesh", mesh=case.mesh, texture=texture, mesh_shape=shape)
        image = diffcam.render(camera, [prim], rotation, position, background=torch.zeros(3))
        (image * ramp).mean().backward()
        return rotation.grad, position.grad, texture.grad

    def forward_only():
        prim = diffcam.Primitive("mesh", mesh=case.mesh, texture=case.texture, mesh_shape=shape)
        with torch.no_grad():
            diffcam.render(camera, [prim], case.rotation.view(1, 1, 3, 3),
                           case.position.view(1, 1, 3), background=torch.zeros(3))  # fmt: skip

    fb_ms, fb_first = timed(forward_backward, repeats)
    f_ms = timed(forward_only, repeats)[0] if forward else None
    _, position_grad, texture_grad = forward_backward()
    return {
        "ours_views": batch,
        "ours_forward_ms": None if f_ms is None else round(f_ms, 1),
        "ours_forward_backward_ms": round(fb_ms, 1),
        "ours_forward_backward_ms_per_image": round(fb_ms / batch, 2),
        "ours_first_forward_backward_s": round(fb_first, 2),
        "ours_position_grad": [round(float(x), 6) for x in position_grad.view(-1)],
        "ours_texture_grad_abs_sum": round(float(texture_grad.abs().sum()), 6),
    }


def diffcam_gradients(case: Case, supersample: int) -> tuple[np.ndarray, torch.Tensor]:
    """The gradients of ``mean(image * ramp)`` (the first view, 288 x 96) to a translation of
    the mesh, (3,), and to its texture, (3, Ht, Wt)."""
    width, height = TIMING_SIZE
    position = case.position.view(1, 1, 3).clone().requires_grad_(True)
    texture = case.texture.clone().requires_grad_(True)
    prim = diffcam.Primitive("mesh", mesh=case.mesh, texture=texture)
    image = diffcam.render(case.view.camera(width, height), [prim], case.rotation.view(1, 1, 3, 3),
                           position, background=torch.zeros(3), supersample=supersample)  # fmt: skip
    rows = torch.arange(height).view(-1, 1) / height
    cols = torch.arange(width).view(1, -1) / width
    (image * (rows + cols)).mean().backward()
    return position.grad.view(3).double().numpy(), texture.grad


def gradient_case(case: Case, spec: dict, workdir: Path, args) -> None:
    """The gradients of ``mean(image * ramp)`` (one view, 288 x 96) to a translation of the
    mesh and to its texture, diffcam's (default antialiased edges) against Mitsuba's
    (``direct_projective``, averaged over seeds)."""
    width, height = TIMING_SIZE
    seeds, spp = 16, 64
    out = workdir / f"{case.name}_gradient"
    out.mkdir()
    spec = {**spec, "sizes": [], "out_dir": str(out),
            "gradient": {"size": [width, height], "spp": spp, "seeds": seeds}}  # fmt: skip
    peer = run_peer(args.peers_python, spec, workdir)
    ours_t, texture_grad = diffcam_gradients(case, 1)
    # one texture sample per pixel: the texture term of the pose gradient is the slope of the
    # point-sampled texture, which a minified checker makes large; 3 x 3 samples average it
    ours_t3, _ = diffcam_gradients(case, 3)
    theirs_t = np.array(peer["translation_grad"])
    stderr = np.array(peer["translation_grad_stderr"])
    ours_tex = texture_grad.permute(1, 2, 0).double().numpy().ravel()
    theirs_tex = np.load(out / "texture_grad.npy").astype(np.float64).ravel()
    cosine = ours_tex @ theirs_tex / (np.linalg.norm(ours_tex) * np.linalg.norm(theirs_tex))
    RECORD.emit({
        "bench": "mesh_mitsuba", "case": "gradient", "mesh": case.name, "W": width, "H": height,
        "mitsuba_spp": spp, "mitsuba_seeds": seeds,
        "ours_translation_grad": [round(float(x), 6) for x in ours_t],
        "ours_supersample3_translation_grad": [round(float(x), 6) for x in ours_t3],
        "mitsuba_translation_grad": [round(float(x), 6) for x in theirs_t],
        "mitsuba_translation_grad_stderr": [round(float(x), 6) for x in stderr],
        "translation_grad_rel_diff": round(
            float(np.linalg.norm(ours_t - theirs_t) / np.linalg.norm(theirs_t)), 4),
        "supersample3_translation_grad_rel_diff": round(
            float(np.linalg.norm(ours_t3 - theirs_t) / np.linalg.norm(theirs_t)), 4),
        "ours_texture_grad_sum": round(float(ours_tex.sum()), 6),
        "mitsuba_texture_grad_sum": round(float(theirs_tex.sum()), 6),
        "texture_grad_cosine": round(float(cosine), 4),
    })  # fmt: skip


def load_average() -> float:
    return round(os.getloadavg()[0], 2)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3, help="timing rounds, in turn")
    parser.add_argument("--spp", type=int, default=256, help="Mitsuba's samples per pixel")
    parser.add_argument("--peers-python", default="/work/peers_venv/bin/python")
    parser.add_argument("--save-images", type=Path, default=None)
    parser.add_argument("--no-timing", action="store_true", help="the agreement cases only")
    parser.add_argument("--only-timing", action="store_true", help="the timing rounds only")
    parser.add_argument("--timing-sizes", default="288x96",
                        help="image sizes of the timing rounds, e.g. 288x96,640x480")  # fmt: skip
    add_record_flag(parser)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    RECORD.enable(args.record, note=args.note)
    with tempfile.TemporaryDirectory(prefix="bench-mesh-mitsuba-") as tmp:
        workdir = Path(tmp)
        sizes = [tuple(int(n) for n in s.split("x")) for s in args.timing_sizes.split(",")]
        for case in cases():
            spec = peer_spec(case, workdir, args)
            if args.only_timing:
                if case.texture is not None:
                    for size in sizes:
                        timing_rounds(case, spec, workdir, args, size)
                continue
            run_peer(args.peers_python, spec, workdir)
            for width, height in SIZES:
                theirs = np.load(Path(spec["out_dir"]) / f"{width}x{height}_0.npy")
                ours = diffcam_render(case, width, height)
                if args.save_images is not None:
                    save_pair(args.save_images, f"{case.name}_{width}x{height}", ours, theirs)
                # diffcam samples the texture at the pixel centre, Mitsuba averages it over the
                # pixel: 4 x 4 supersampling shows how much of the error that is
                ss4 = agreement(diffcam_render(case, width, height, supersample=4), theirs)
                RECORD.emit({
                    "bench": "mesh_mitsuba", "case": "agreement", "mesh": case.name,
                    "triangles": case.mesh.num_faces, "W": width, "H": height,
                    "mitsuba_spp": args.spp, **agreement(ours, theirs),
                    "supersample4_iou": ss4["iou"],
                    "supersample4_color_mae_silhouettes": ss4["color_mae_silhouettes"],
                })  # fmt: skip
            if case.texture is not None:
                gradient_case(case, spec, workdir, args)
            if case.texture is not None and not args.no_timing:
                for size in sizes:
                    timing_rounds(case, spec, workdir, args, size)


def peer_spec(case: Case, workdir: Path, args) -> dict:
    """The Mitsuba peer's spec for ``case``: its OBJ and texture written to ``workdir``, the
    agreement images asked for (no timing)."""
    obj = workdir / f"{case.name}.obj"
    write_obj(case.mesh, obj)
    texture = None
    if case.texture is not None:
        texture = str(workdir / f"{case.name}_texture.npy")
        np.save(texture, case.texture.permute(1, 2, 0).numpy().astype(np.float32))
    out = workdir / case.name
    out.mkdir()
    return {
        "obj": str(obj), "texture": texture, "color": list(case.color),
        "to_world": to_world(case), "views": [case.view.as_json()],
        "sizes": [list(s) for s in SIZES], "quality_spp": args.spp,
        "out_dir": str(out), "timing": None, "threads": args.threads,
    }  # fmt: skip


def timing_rounds(case: Case, spec: dict, workdir: Path, args, size=TIMING_SIZE) -> None:
    """diffcam's and Mitsuba's timings at ``size`` (W, H) in turn, ``args.rounds`` times (this
    machine's speed drifts over minutes, and other jobs share it): one line per round, then the
    medians over the rounds and their ratio."""
    timing = {"views": BATCH, "size": list(size), "repeats": args.repeats,
              "batch_views": [v.as_json() for v in arc_views(case.view, BATCH)]}  # fmt: skip
    spec = {**spec, "sizes": [], "timing": timing}  # no agreement images this time
    rounds = []
    for k in range(args.rounds):
        load_start = load_average()
        ours = diffcam_timing(case, args.repeats, forward=k == 0, size=size)
        ours_one = diffcam_timing(case, args.repeats, batch=1, forward=False, size=size)
        peer = run_peer(args.peers_python, spec, workdir)
        per_image = peer["pose_texture_fb_ms"]
        rounds.append(RECORD.emit({
            "bench": "mesh_mitsuba", "case": "timing_round", "round": k, "mesh": case.name,
            "triangles": case.mesh.num_faces, "W": size[0], "H": size[1],
            "threads": args.threads, **ours,
            "ours_b1_forward_backward_ms": ours_one["ours_forward_backward_ms"],
            "mitsuba_pose_texture_fb_ms_per_image": per_image,
            "mitsuba_texture_fb_ms_per_image": peer["texture_fb_ms"],
            "mitsuba_batch64_texture_fb_ms": peer["batch_texture_fb_ms"],
            "mitsuba_first_calls_s": [peer["texture_fb_first_s"], peer["pose_texture_fb_first_s"],
                                      peer["batch_texture_fb_first_s"]],
            "mitsuba_version": peer["version"], "mitsuba_variant": peer["variant"],
            "mitsuba_threads": peer["threads"], "load_average": [load_start, load_average()],
        }))  # fmt: skip

    def median(key):
        return round(statistics.median(r[key] for r in rounds), 1)

    ours_ms = median("ours_forward_backward_ms")
    mitsuba_ms = median("mitsuba_pose_texture_fb_ms_per_image")
    batch_ms = median("mitsuba_batch64_texture_fb_ms")
    RECORD.emit({
        "bench": "mesh_mitsuba", "case": "timing", "rounds": args.rounds, "mesh": case.name,
        "W": size[0], "H": size[1], "ours_b64_forward_backward_ms": ours_ms,
        "ours_b1_forward_backward_ms": median("ours_b1_forward_backward_ms"),
        "mitsuba_pose_texture_fb_ms_per_image": mitsuba_ms,
        "mitsuba_pose_texture_fb_ms_x64": round(64 * mitsuba_ms, 1),
        "mitsuba_texture_fb_ms_per_image": median("mitsuba_texture_fb_ms_per_image"),
        "mitsuba_batch64_texture_fb_ms": batch_ms,
        "ratio_ours_b64_to_mitsuba_pose_texture_x64": round(ours_ms / (64 * mitsuba_ms), 2),
        "ratio_ours_b64_to_mitsuba_batch64_texture": round(ours_ms / batch_ms, 2),
    })  # fmt: skip


def save_pair(folder: Path, name: str, ours: diffcam.RenderBuffers, theirs: np.ndarray) -> None:
    """diffcam's image above Mitsuba's, as a PNG (for looking at the differences)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    a = ours.image[0].permute(1, 2, 0).numpy()
    b = np.clip(theirs[..., :3], 0.0, 1.0)
    both = np.concatenate([a, b], 0)
    Image.fromarray((255 * both).round().astype(np.uint8)).save(folder / f"{name}.png")


if __name__ == "__main__":
    main()
