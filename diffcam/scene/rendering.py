"""Rendering helpers of `Scene`: the static bodies' cached layer, and many frames at once.

`static_layer` draws the static bodies once into a layer (image, depth, ids, coverage) that
`Scene.render` draws only the moving bodies over, and keeps it in the scene's one-entry cache
(``scene._layer_cache``) while nothing it depends on changes. `render_states` draws a stack of
states in chunks of frames, with `tiled` cameras and primitives when the worlds of a batch may
differ or only windows of the images are wanted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from .scene import Scene


@dataclass
class StaticLayer:
    """The static bodies drawn once, at the sampling resolution (s = supersample).

    key: what the layer depends on besides the static poses (see `static_layer`);
    sources: the objects named in ``key``; rotation (B'|1, S, 3, 3) and position (B'|1, S, 3):
    the static poses it was drawn at; image (B'|1, 3, sH, sW); depth (B'|1, 1, sH, sW) (m, 0 =
    nothing); object_id (B'|1, H, W) body index at the output pixels, -1 = background.
    """

    key: tuple
    sources: list
    rotation: torch.Tensor
    position: torch.Tensor
    image: torch.Tensor
    depth: torch.Tensor
    object_id: torch.Tensor
    coverage: torch.Tensor  # (B'|1, 1, H, W) the static bodies' coverage at the output pixels


def static_layer(scene: Scene, rot, pos, kwargs) -> StaticLayer | None:
    """The static bodies' layer for this render call, drawn (and kept in
    ``scene._layer_cache``) or taken from the cache; None when there is nothing to split or
    something it depends on requires grad."""
    from ..renderer import render_buffers
    from ..renderer.api import DEFAULT_EDGE_SOFTNESS, edge_profile

    static = scene.static_bodies
    if not static or not scene.dynamic_bodies:
        return None
    transform = kwargs.get("color_transform")
    sources = layer_sources(scene, kwargs["lighting"], kwargs["background"], transform)
    if any(isinstance(x, torch.Tensor) and x.requires_grad for x in sources):
        return None
    s = int(kwargs.get("supersample", 1))
    softness = kwargs.get("edge_softness", DEFAULT_EDGE_SOFTNESS)
    edge_profile(softness)  # a bad value is refused here as in `render`
    # the layer is drawn with ``camera.scaled(s)``: sigma in its samples; antialiased edges
    # stay one sample wide, as `render` draws them when supersampling
    layer_softness = softness if isinstance(softness, str) else float(softness) * s
    key = (
        tuple((id(x), x._version) if isinstance(x, torch.Tensor) else x for x in sources),
        s, softness, bool(kwargs.get("mipmap", False)), rot.dtype, rot.device,
    )  # fmt: skip
    srot, spos = rot[:, static].detach(), pos[:, static].detach()
    if (
        srot.shape[0] > 1
        and not _varies_per_image(scene.camera, kwargs["lighting"], kwargs["background"], transform)
        and bool((srot == srot[:1]).all())
        and bool((spos == spos[:1]).all())
    ):
        srot, spos = srot[:1], spos[:1]  # one layer for the whole batch
    layer = scene._layer_cache
    if (
        layer is not None
        and layer.key == key
        and torch.equal(layer.rotation, srot)
        and torch.equal(layer.position, spos)
    ):
        return layer
    with torch.no_grad():
        out = render_buffers(
            scene.camera.scaled(s) if s > 1 else scene.camera,
            [scene.primitives[i] for i in static], srot, spos,
            **{**kwargs, "supersample": 1, "edge_softness": layer_softness,
               "color_transform": None if transform is None else transform[:, static]},
        )  # fmt: skip
    # body ids at the samples `render_buffers` reports ids of: (s // 2, s // 2) per pixel
    oid = out.object_id[:, s // 2 :: s, s // 2 :: s]
    oid = torch.tensor(static, device=oid.device)[oid.clamp(min=0)].masked_fill_(oid < 0, -1)
    # `sources` is kept so that the ids in `key` cannot be reused by new tensors
    coverage = F.avg_pool2d(out.coverage, s) if s > 1 else out.coverage
    scene._layer_cache = StaticLayer(key, sources, srot, spos, out.image, out.depth, oid, coverage)
    return scene._layer_cache


def draw_subset(draw, camera, primitives: list, drawn: list[int], rot, pos, want_ids, kwargs):
    """``draw`` (`render_buffers` or the like) of the bodies ``drawn`` (indices in state order)
    with their ``primitives``, from the poses of every body (rot (B, N, 3, 3), pos (B, N, 3));
    the object ids map back to body indices when ``want_ids``."""
    if len(drawn) == rot.shape[1]:
        return draw(camera, primitives, rot, pos, **kwargs)
    transform = kwargs.get("color_transform")
    if transform is not None:
        kwargs = {**kwargs, "color_transform": transform[:, drawn]}
    out = draw(camera, primitives, rot[:, drawn], pos[:, drawn], **kwargs)
    if not want_ids:
        return out
    ids = torch.tensor(drawn, device=out.object_id.device)[out.object_id.clamp(min=0)]
    return out._replace(object_id=ids.masked_fill_(out.object_id < 0, -1))


def _varies_per_image(camera, lighting, background, color_transform) -> bool:
    """Whether the camera or an appearance value has a batch axis longer than 1 (a light,
    background colours or colour maps given per image), so that one layer cannot serve the
    whole batch even where the static poses agree."""
    if camera.batch_size > 1:
        return True
    if color_transform is not None and color_transform.shape[0] > 1:
        return True
    if isinstance(background, torch.Tensor) and background.dim() in (2, 4):
        if background.shape[0] > 1:  # colours (B, 3) or images (B, 3, H, W)
            return True
    if lighting is None:
        return False
    for value, single in ((lighting.ambient, 0), (lighting.intensity, 0), (lighting.direction, 1)):
        if isinstance(value, torch.Tensor) and value.dim() > single and value.shape[0] > 1:
            return True
    return False


def layer_sources(scene: Scene, lighting, background, color_transform=None) -> list:
    """Everything besides the static poses that the static layer's pixels depend on:
    tensors (compared by identity and version) and plain values."""
    cam = scene.camera
    items = [cam.fx, cam.fy, cam.cx, cam.cy, cam.rotation, cam.translation]
    items += [cam.width, cam.height, cam.batch_size, background, color_transform]
    if lighting is not None:
        items += [lighting.ambient, lighting.direction, lighting.intensity]
    for i in scene.static_bodies:
        p = scene.primitives[i]
        size = tuple(p.size) if isinstance(p.size, (list, tuple)) else p.size
        items += [p.kind, size, p.texture, p.color, tuple(p.uv_scale), p.wrap]
        body = scene.config.bodies[i]
        items += [body.get("position"), body.get("quat")]  # only for requires_grad
    return [tuple(x) if isinstance(x, list) else x for x in items]


def render_states(scene: Scene, states, frames_per_call: int = 16, window=None, **kwargs):
    """`Scene.render_states`: the frames of ``states`` (M, B, ...) drawn ``frames_per_call``
    at a time, as `RenderBuffers` with two leading axes (M, B, ...)."""
    import physics

    from ..renderer import RenderBuffers, render_buffers

    frames, batch = states.position.shape[:2]
    from ..renderer.api import DEFAULT_EDGE_SOFTNESS

    kwargs.setdefault("lighting", scene.lighting)
    kwargs.setdefault("background", scene.background)
    kwargs.setdefault("edge_softness", DEFAULT_EDGE_SOFTNESS)
    parts = []
    for start in range(0, frames, frames_per_call):
        chunk = [x[start : start + frames_per_call].flatten(0, 1) for x in states.tensors()]
        m = chunk[0].shape[0] // batch
        if batch == 1 and window is None:
            out = scene.render_buffers(physics.State(*chunk), **kwargs)
        else:
            crop = None
            if window is not None:
                origins, size = window
                crop = (origins[start : start + frames_per_call].flatten(0, 1), size)
            camera, primitives = tiled(scene, m, crop)
            per_frame = tiled_per_image(kwargs, batch, m)
            out = draw_subset(
                render_buffers, camera, primitives, scene.drawn_bodies, chunk[1], chunk[0], True,
                per_frame,
            )  # fmt: skip
        parts.append(out)
    return RenderBuffers(
        *(torch.cat(fields, 0).unflatten(0, (frames, batch)) for fields in zip(*parts, strict=True))
    )


def tiled_per_image(kwargs: dict, batch: int, m: int) -> dict:
    """``kwargs`` of a render call for ``batch`` images with its per-image values (a
    ``Lighting``'s, ``color_transform``, a (B, 3) or (B, 3, H, W) ``background``) repeated
    for m frames (m * B images, frame-major)."""
    if batch == 1 or m == 1:
        return kwargs

    def rep(x):
        if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == batch:
            return x.repeat(m, *([1] * (x.dim() - 1)))
        return x

    out = dict(kwargs)
    light = out.get("lighting")
    if light is not None:
        out["lighting"] = type(light)(
            rep(light.ambient),
            light.direction if _dims(light.direction) < 2 else rep(light.direction),
            rep(light.intensity),
        )
    if out.get("color_transform") is not None:
        out["color_transform"] = rep(out["color_transform"])
    if _dims(out.get("background")) in (2, 4):
        out["background"] = rep(out["background"])
    return out


def _dims(x) -> int:
    return x.dim() if isinstance(x, torch.Tensor) else 0


def tiled(scene: Scene, m: int, crop=None):
    """The camera and the drawn bodies' primitives of the scene's batch of B worlds repeated for
    m frames (m * B images, frame-major), each primitive sized by its world's (B, ...) size; ``crop``
    (origins (m * B, 2) rows and columns, (h, w)) makes each image a window of the view."""
    from ..camera import PinholeCamera
    from ..primitives import Primitive

    cam, batch = scene.camera, scene.batch_size

    def tile(x):
        return x.expand(batch, *x.shape[1:]).repeat(m, *([1] * (x.dim() - 1)))

    cx, cy, width, height = tile(cam.cx), tile(cam.cy), cam.width, cam.height
    if crop is not None:
        origins, (height, width) = crop
        cx = cx - origins[:, 1].to(cx.dtype)
        cy = cy - origins[:, 0].to(cy.dtype)
    camera = PinholeCamera(
        tile(cam.fx), tile(cam.fy), cx, cy, width, height,
        tile(cam.rotation), tile(cam.translation),
    )  # fmt: skip
    used = {"sphere": 1, "box": 3, "capsule": 2, "cylinder": 2, "plane": 2}
    primitives = []
    for i in scene.drawn_bodies:
        p = scene.primitives[i]
        if p.kind == "mesh":  # no size; the same object keeps its BVH
            primitives.append(p)
            continue
        size = p.size
        if isinstance(size, torch.Tensor) and size.dim() >= 1 and p.kind != "plane":
            size = tile(scene.world.size[:, i, : used[scene.world.shapes[i]]])
        primitives.append(Primitive(p.kind, size, p.texture, p.color, p.uv_scale, p.wrap))
    return camera, primitives
