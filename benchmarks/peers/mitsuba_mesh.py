"""Peer script: Mitsuba 3 (llvm_ad_rgb, CPU) rendering one textured, unlit OBJ mesh.

Run by `benchmarks/bench_mesh_mitsuba.py` with the peers' Python (``/work/peers_venv``, where
Mitsuba is installed); the project never imports Mitsuba. Reads a JSON spec (argument 1):

    {"obj": path, "texture": path of a (Ht, Wt, 3) float32 .npy (row 0 = top) or null,
     "color": [r, g, b] when no texture, "to_world": 4x4 world_from_mesh,
     "views": [{"eye", "target", "up", "fov_y_deg"}, ...], "sizes": [[W, H], ...],
     "quality_spp": n, "out_dir": path, "threads": drjit's thread count,
     "timing": {"views": B, "size": [W, H], "repeats": r, "batch_views": [view, ...]} or null,
     "gradient": {"size": [W, H], "spp": n, "seeds": k} or null}

The mesh is an area emitter whose radiance is the texture (``raw``: linear values, as given)
on an opaque black BSDF, so a pixel's value is the texture at the surface it sees: diffcam's
unlit texture colour (``lighting=None``) over a black background. The OBJ's ``vt`` are read
with Mitsuba's default ``flip_tex_coords`` (v = 0 is the image's bottom row, as in diffcam);
face normals (``face_normals``), so emission never depends on interpolated normals.

Writes ``<out_dir>/<size>_<view>.npy``: (H, W, 4) float32 RGBA at ``quality_spp`` samples per
pixel (box filter: alpha is the fraction of the pixel the mesh covers). With ``timing``,
times (medians after two warm-ups, ms) forward+backward of ``mean(image * ramp)`` (ramp =
row/H + col/W), 1 spp:
  - ``texture_fb_ms``: one image, ``prb``, gradient to the texture;
  - ``pose_texture_fb_ms``: one image, ``direct_projective`` (silhouette terms), gradients
    to the mesh's vertex positions (any pose's gradient follows from them) and the texture;
    each call sets the texture and the vertices afresh, as an optimisation step would
    (`Leaves`);
  - ``batch_texture_fb_ms``: the B views in one call (Mitsuba's ``batch`` sensor), ``prb``,
    gradient to the texture (Mitsuba cannot batch vertex positions per view).
With ``gradient``: the gradient of the same loss (first view, ``direct_projective``) to a
translation of the mesh (the sum of its vertices' gradients) and to the texture, averaged over
``seeds`` renders of ``spp`` samples per pixel: ``translation_grad`` and its standard error
``translation_grad_stderr``; the texture's gradient in ``<out_dir>/texture_grad.npy``
(Ht, Wt, 3). Prints one JSON line.
"""

import json
import statistics
import sys
import time
from pathlib import Path

import drjit as dr
import mitsuba as mi
import numpy as np

mi.set_variant("llvm_ad_rgb")
# warnings go to stdout, where the JSON line is read (the one silenced: the projective
# integrator's advice to sample the film's border, for shapes leaving the view; ours stays in)
mi.set_log_level(mi.LogLevel.Error)

BLACK = {"type": "diffuse", "reflectance": {"type": "rgb", "value": [0.0, 0.0, 0.0]}}


def sensor(view, size, pixel_format="rgb"):
    width, height = size
    return {
        "type": "perspective",
        "fov": float(view["fov_y_deg"]),
        "fov_axis": "y",
        "to_world": mi.ScalarTransform4f().look_at(
            origin=view["eye"], target=view["target"], up=view["up"]
        ),
        "film": {"type": "hdrfilm", "width": width, "height": height,
                 "rfilter": {"type": "box"}, "pixel_format": pixel_format},
    }  # fmt: skip


def mesh_dict(spec):
    if spec["texture"] is not None:
        data = mi.TensorXf(np.load(spec["texture"]).astype(np.float32))
        radiance = {"type": "bitmap", "data": data, "raw": True}
    else:
        radiance = {"type": "rgb", "value": spec["color"]}
    return {
        "type": "obj",
        "filename": spec["obj"],
        "face_normals": True,
        "to_world": mi.ScalarTransform4f(np.asarray(spec["to_world"], dtype=np.float64)),
        "bsdf": BLACK,
        "emitter": {"type": "area", "radiance": radiance},
    }


def scene_with(spec, sensor_dict, integrator):
    sensor_dict["sampler"] = {"type": "independent", "sample_count": 1}
    return mi.load_dict({"type": "scene", "integrator": integrator, "sensor": sensor_dict,
                         "mesh": mesh_dict(spec)})  # fmt: skip


def quality_images(spec):
    out = Path(spec["out_dir"])
    for width, height in spec["sizes"]:
        for k, view in enumerate(spec["views"]):
            scene = scene_with(
                spec, sensor(view, (width, height), "rgba"), {"type": "path", "max_depth": 1}
            )
            image = mi.render(scene, spp=spec["quality_spp"], seed=0).numpy()
            np.save(out / f"{width}x{height}_{k}.npy", image.astype(np.float32))


def timed(fn, repeats):
    t0 = time.perf_counter()
    fn()  # traces and JIT-compiles (drjit caches kernels)
    first = time.perf_counter() - t0
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times), first


def ramp(width, height, batch=1):
    r = np.add.outer(np.arange(height) / height, np.tile(np.arange(width) / width, batch))
    return mi.TensorXf(r[..., None].repeat(3, 2).astype(np.float32))


TEXTURE, VERTICES = "mesh.emitter.radiance.data", "mesh.vertex_positions"


class Leaves:
    """The parameters a step differentiates, set afresh before each render, as an optimisation
    step sets them: the texture, and the vertex positions (a pose moves them; Mitsuba rebuilds
    its BVH). Setting the texture every time is also needed: ``direct_projective`` propagates
    no texture gradient after its first backward pass otherwise (the texture's gradient stayed
    at the first call's value, while ``prb``'s changed with the seed)."""

    def __init__(self, params, with_vertices):
        self.params = params
        self.texture = params[TEXTURE].numpy().copy()
        self.vertices = params[VERTICES].numpy().copy() if with_vertices else None

    def set(self):
        self.params[TEXTURE] = mi.TensorXf(self.texture)
        dr.enable_grad(self.params[TEXTURE])
        if self.vertices is not None:
            self.params[VERTICES] = mi.Float(self.vertices)
            dr.enable_grad(self.params[VERTICES])
        self.params.update()

    def grads(self):
        keys = [TEXTURE] + ([VERTICES] if self.vertices is not None else [])
        return [dr.grad(self.params[key]) for key in keys]


def time_one(spec, integrator, with_vertices, repeats):
    width, height = spec["timing"]["size"]
    scene = scene_with(spec, sensor(spec["views"][0], (width, height)), integrator)
    leaves = Leaves(mi.traverse(scene), with_vertices)
    weight = ramp(width, height)

    def forward_backward():
        leaves.set()
        image = mi.render(scene, leaves.params, spp=1, seed=0)
        dr.backward(dr.mean(image * weight, axis=None))
        grads = leaves.grads()
        dr.eval(grads)
        dr.sync_thread()
        return grads

    ms, first = timed(forward_backward, repeats)
    grads = forward_backward()
    return ms, first, [float(np.abs(g.numpy()).sum()) for g in grads]


def time_batch(spec, repeats):
    width, height = spec["timing"]["size"]
    batch = spec["timing"]["views"]
    views = spec["timing"]["batch_views"]
    sensor_dict = {"type": "batch", "film": {"type": "hdrfilm", "width": width * batch,
                                             "height": height, "rfilter": {"type": "box"}}}  # fmt: skip
    sensor_dict.update({f"view{i}": sensor(v, (width, height)) for i, v in enumerate(views)})
    scene = scene_with(spec, sensor_dict, {"type": "prb", "max_depth": 1})
    leaves = Leaves(mi.traverse(scene), False)
    weight = ramp(width, height, batch)

    def forward_backward():
        leaves.set()
        image = mi.render(scene, leaves.params, spp=1, seed=0)
        dr.backward(dr.mean(image * weight, axis=None))
        grad = leaves.grads()
        dr.eval(grad)
        dr.sync_thread()

    return timed(forward_backward, repeats)


def gradients(spec):
    width, height = spec["gradient"]["size"]
    projective = {"type": "direct_projective", "max_depth": 1, "sppi": 0}
    scene = scene_with(spec, sensor(spec["views"][0], (width, height)), projective)
    leaves = Leaves(mi.traverse(scene), True)
    weight = ramp(width, height)
    translations, textures = [], []
    for seed in range(spec["gradient"]["seeds"]):
        leaves.set()
        image = mi.render(scene, leaves.params, spp=spec["gradient"]["spp"], seed=seed)
        dr.backward(dr.mean(image * weight, axis=None))
        texture, vertices = (g.numpy() for g in leaves.grads())
        translations.append(vertices.reshape(-1, 3).sum(0, dtype=np.float64))
        textures.append(texture.astype(np.float64))
    t = np.array(translations)
    np.save(Path(spec["out_dir"]) / "texture_grad.npy", np.mean(textures, 0).astype(np.float32))
    return {"translation_grad": t.mean(0).tolist(),
            "translation_grad_stderr": (t.std(0, ddof=1) / np.sqrt(len(t))).tolist()}  # fmt: skip


def main():
    spec = json.loads(Path(sys.argv[1]).read_text())
    dr.set_thread_count(spec["threads"])
    t0 = time.perf_counter()
    out = {"peer": "mitsuba", "version": mi.__version__, "variant": mi.variant(),
           "threads": dr.thread_count(), "quality_spp": spec["quality_spp"]}  # fmt: skip
    quality_images(spec)
    out["quality_s"] = round(time.perf_counter() - t0, 1)
    timing = spec.get("timing")
    if timing:
        repeats = timing["repeats"]
        ms, first, _ = time_one(spec, {"type": "prb", "max_depth": 1}, False, repeats)
        out.update(texture_fb_ms=round(ms, 1), texture_fb_first_s=round(first, 2))
        projective = {"type": "direct_projective", "max_depth": 1, "sppi": 0}
        ms, first, sums = time_one(spec, projective, True, repeats)
        out.update(pose_texture_fb_ms=round(ms, 1), pose_texture_fb_first_s=round(first, 2),
                   vertex_grad_abs_sum=sums[1])  # fmt: skip
        ms, first = time_batch(spec, repeats)
        out.update(batch_texture_fb_ms=round(ms, 1), batch_texture_fb_first_s=round(first, 2))
    if spec.get("gradient"):
        out.update(gradients(spec))
    out["total_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
