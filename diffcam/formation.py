"""How a real camera's frames come from a simulated scene: the model of a video.

A frame of a real video is not the render of one simulated state. The camera's clock is offset
from the simulation's, the shutter stays open for part of a frame (motion blur), the lens
distorts, the sensor's response curve maps light to pixel values, and behind the simulated
bodies there is a real room that no scene file describes. `ImageModel` holds those parts (each
optional, each differentiable) and `render_video` applies them:

1. frame k shows the times ``times[k] + time_offset + ((j + 1/2) / S - 1/2) * exposure`` for
   its S exposure samples: the exposure is centred on the frame's time, so that the shutter
   time widens the blur without moving the frame in time (a fitted exposure and a fitted
   start do not trade against each other); `physics.states_at` interpolates the trajectory;
2. the scene is rendered at every sample (over black when there is a ``plate``, so the image
   is the bodies' premultiplied colour next to their coverage) and the samples are averaged
   in linear light;
3. the lens distortion warps the average (`imaging.distort_image`);
4. the bodies are blended over the plate in linear light and the response is applied
   (`imaging.composite_over_plate`): pixels no body covers reproduce the plate exactly.
   Without a plate the render's own background is kept and only the response is applied.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from . import imaging

__all__ = [
    "ImageModel",
    "Windows",
    "body_windows",
    "bounding_radius",
    "crop",
    "estimate_color",
    "render_video",
    "sample_times",
]

Param = float | torch.Tensor


@dataclasses.dataclass(frozen=True)
class ImageModel:
    """The parts of a real camera's image formation that a render lacks.

    Attributes:
        plate: (3, H, W) the observed background ("clean plate") in camera-output units at the
            camera's resolution (e.g. `imaging.clean_plate` of the video), or None to keep the
            scene's own background.
        gain, offset, gamma: the response ``offset + gain * x ** (1 / gamma)`` from linear
            radiance x (the scene's colours) to camera output; () or (B,) each.
        distortion: (5,) or (B, 5) OpenCV lens distortion (k1, k2, p1, p2, k3), or None.
        exposure: shutter time (s), () or (B,); 0 is an instantaneous shutter.
        exposure_samples: renders averaged over the exposure (used when exposure is not 0).
        time_offset: simulation time of the video's time 0 (s), () or (B,): frame k shows the
            simulation at ``times[k] + time_offset``, the middle of its exposure.

    Any tensor field may require grad. Per-world (B,) values pair with a scene of batch B.
    """

    plate: torch.Tensor | None = None
    gain: Param = 1.0
    offset: Param = 0.0
    gamma: Param = 1.0
    distortion: torch.Tensor | None = None
    exposure: Param = 0.0
    exposure_samples: int = 1
    time_offset: Param = 0.0

    FITTABLE = ("gain", "offset", "gamma", "distortion", "exposure", "time_offset")

    def replace(self, **changes) -> ImageModel:
        return dataclasses.replace(self, **changes)

    @property
    def samples(self) -> int:
        """Exposure samples actually rendered per frame (1 for an instantaneous shutter)."""
        plain_zero = not isinstance(self.exposure, torch.Tensor) and float(self.exposure) == 0.0
        return 1 if plain_zero else max(1, int(self.exposure_samples))


def _per_world(value: Param, batch: int, like: torch.Tensor) -> torch.Tensor:
    """A () or (B,) parameter as a (B,) tensor of ``like``'s dtype and device."""
    value = torch.as_tensor(value, dtype=like.dtype, device=like.device)
    if value.dim() == 0:
        return value.expand(batch)
    if tuple(value.shape) != (batch,):
        raise ValueError(f"ImageModel: a per-world value must have shape () or ({batch},)")
    return value


def sample_times(times: torch.Tensor, model: ImageModel, batch: int) -> torch.Tensor:
    """Simulation times of every exposure sample: (T, S, B) seconds.

    Args:
        times: (T,) frame timestamps (s) on the video's clock.
        model: the offset, exposure and number of samples.
        batch: B worlds (per-world offsets and exposures).
    """
    offset = _per_world(model.time_offset, batch, times)
    exposure = _per_world(model.exposure, batch, times)
    count = model.samples
    fractions = (torch.arange(count, dtype=times.dtype, device=times.device) + 0.5) / count - 0.5
    return times[:, None, None] + offset + fractions[:, None] * exposure


def _tile(value: Param, batch: int, frames: int, like: torch.Tensor) -> Param:
    """A () or (B,) parameter for (frames * B) frame-major images; plain floats stay floats."""
    if not isinstance(value, torch.Tensor) or value.dim() == 0:
        return value
    return _per_world(value, batch, like).repeat(frames)


@dataclasses.dataclass(frozen=True)
class Windows:
    """Pixel windows of one common size, one per frame and world: origins (T, B, 2) long
    (row, column) of the top-left pixel, size (height, width)."""

    origins: torch.Tensor
    size: tuple[int, int]

    def __getitem__(self, index) -> Windows:
        return Windows(self.origins[index], self.size)


def crop(images: torch.Tensor, windows: Windows) -> torch.Tensor:
    """The windows' pixels of images (T|1, C, H, W): (T, B, C, h, w)."""
    count, batch = windows.origins.shape[:2]
    h, w = windows.size
    rows = windows.origins[..., 0, None] + torch.arange(h, device=images.device)  # (T, B, h)
    cols = windows.origins[..., 1, None] + torch.arange(w, device=images.device)  # (T, B, w)
    frame = (
        torch.arange(count, device=images.device)
        if images.shape[0] > 1
        else torch.zeros(count, dtype=torch.long, device=images.device)
    )
    picked = images[frame[:, None, None, None], :, rows[..., :, None], cols[..., None, :]]
    return picked.permute(0, 1, 4, 2, 3)  # (T, B, h, w, C) -> (T, B, C, h, w)


def bounding_radius(world, primitives=None) -> torch.Tensor:
    """(B, N) radius (m) of a sphere about each body's centre that holds the body (a mesh
    body's: its farthest vertex from its centre of mass, from ``primitives``; the physics'
    stand-in box of a mesh need not hold the mesh)."""
    size = world.size
    radii = []
    for i, shape in enumerate(world.shapes):
        s = size[:, i]
        mesh = getattr(primitives[i], "mesh", None) if primitives is not None else None
        if mesh is not None:
            far = mesh.vertices.detach().norm(dim=-1).max().to(s)
            radii.append(far.expand(s.shape[0]))
        elif shape == "sphere":
            radii.append(s[:, 0])
        elif shape == "capsule":
            radii.append(s[:, 0] + 0.5 * s[:, 1])
        elif shape == "cylinder":
            radii.append(torch.sqrt(s[:, 0] ** 2 + 0.25 * s[:, 1] ** 2))
        else:  # box (a plane is static)
            radii.append(0.5 * s.norm(dim=-1))
    return torch.stack(radii, 1)


def body_windows(scene, trajectory, times, model: ImageModel, margin: float, align: int = 1):
    """Windows that hold every moving body of each frame over its exposure, with ``margin``
    pixels around (the soft silhouettes' reach): outside them the frame is the plate.

    Args:
        scene, trajectory, times, model: as in `render_video`.
        margin: pixels added around each body's projected bounding sphere.
        align: origins and sizes are multiples of this (a pyramid level's pooling).

    Returns:
        `Windows` with origins (T, B, 2); the common size is the largest one needed.
    """
    import physics

    camera = scene.camera
    height, width = camera.height, camera.width
    batch = scene.batch_size
    dynamic = [i for i, static in enumerate(scene.world.is_static) if not static]
    count = times.shape[0]
    device = times.device
    full = Windows(torch.zeros(count, batch, 2, dtype=torch.long, device=device), (height, width))
    if not dynamic:
        return full
    with torch.no_grad():
        when = sample_times(times.detach(), _detached(model), batch)  # (T, S, B)
        samples = when.shape[1]
        tensors = [t.detach() for t in trajectory.tensors()]
        states = physics.states_at(physics.State(*tensors), when.flatten(0, 1), scene.timestep)
        centres = states.position[:, :, dynamic]  # (T*S, B, D, 3)
        points = centres.permute(1, 0, 2, 3).reshape(batch, -1, 3)
        pixels, depth = camera.project_with_depth(points.expand(max(batch, 1), -1, 3))
        if model.distortion is not None:
            pixels = _distort_pixels(pixels, camera, model.distortion)
        focal = torch.maximum(camera.fx, camera.fy).detach().expand(pixels.shape[0])[:, None]
        radius = bounding_radius(scene.world, getattr(scene, "primitives", None)).detach()[
            :, dynamic
        ]  # (B, D)
        radius = radius[:, None, :].expand(-1, count * samples, -1).reshape(batch, -1)
        near = depth <= radius  # the camera is inside or behind the bound: take everything
        reach = focal * radius / depth.clamp_min(1e-9) + margin
        lo = torch.where(near[..., None], torch.zeros_like(pixels), pixels - reach[..., None])
        far = torch.tensor([width, height], dtype=pixels.dtype, device=pixels.device)
        hi = torch.where(near[..., None], far, pixels + reach[..., None])
        lo = lo.view(batch, count, -1, 2).amin(2).clamp(0, None)  # (B, T, 2) as (x, y)
        hi = hi.view(batch, count, -1, 2).amax(2)
        lo = torch.minimum(lo, far)
        hi = torch.minimum(torch.maximum(hi, lo), far)
        extent = (hi.ceil() - lo.floor()).amax((0, 1))
        size = []
        for axis, limit in ((1, height), (0, width)):
            n = int(extent[axis]) + 1
            n = min(limit, -(-n // align) * align)
            size.append(n)
        start = lo.floor().long()
        rows = (start[..., 1].clamp(0, height - size[0]) // align) * align
        cols = (start[..., 0].clamp(0, width - size[1]) // align) * align
        origins = torch.stack([rows, cols], -1).transpose(0, 1).contiguous()  # (T, B, 2)
    return Windows(origins.to(device), (size[0], size[1]))


def _detached(model: ImageModel) -> ImageModel:
    fields = {k: getattr(model, k) for k in ("time_offset", "exposure")}
    return model.replace(
        **{k: v.detach() if isinstance(v, torch.Tensor) else v for k, v in fields.items()}
    )


def _distort_pixels(pixels: torch.Tensor, camera, coeffs) -> torch.Tensor:
    """Ideal pixel positions (B, M, 2) -> where the distorting lens puts them."""
    shape = (-1, 1)
    fx, fy = camera.fx.detach().view(shape), camera.fy.detach().view(shape)
    cx, cy = camera.cx.detach().view(shape), camera.cy.detach().view(shape)
    normal = torch.stack([(pixels[..., 0] - cx) / fx, (pixels[..., 1] - cy) / fy], -1)
    coeffs = torch.as_tensor(coeffs).detach().to(pixels)
    if coeffs.dim() == 2:
        coeffs = coeffs[:, None, :]
    moved = imaging.distort_normalized(normal, coeffs)
    return torch.stack([moved[..., 0] * fx + cx, moved[..., 1] * fy + cy], -1)


def _distortion_reach(camera, coeffs, like: torch.Tensor) -> int:
    """Pixels by which the distortion moves any pixel of the image, at most (rounded up)."""
    with torch.no_grad():
        positions, _ = imaging.distortion_map(
            camera.height, camera.width, camera.fx.detach(), camera.fy.detach(),
            camera.cx.detach(), camera.cy.detach(), torch.as_tensor(coeffs).detach().to(like),
        )  # fmt: skip
        x = torch.arange(camera.width, dtype=like.dtype, device=like.device) + 0.5
        y = torch.arange(camera.height, dtype=like.dtype, device=like.device) + 0.5
        moved = (positions[..., 0] - x).abs().amax() + (positions[..., 1] - y[:, None]).abs().amax()
    return int(math.ceil(float(moved))) + 2


def render_video(
    scene,
    trajectory,
    times: torch.Tensor,
    model: ImageModel | None = None,
    frames_per_call: int = 16,
    with_coverage: bool = False,
    windows: Windows | None = None,
    **render_kwargs,
):
    """The frames a real camera records of a simulated trajectory.

    Args:
        scene: the `diffcam.Scene` (batch B) the trajectory belongs to.
        trajectory: a `physics.State` of (steps + 1, B, N, ...) tensors, step k at k * dt.
        times: (T,) frame timestamps (s), e.g. `Video.times`; keep them (with the offset and
            exposure) inside the trajectory, or within a step of its ends.
        model: the `ImageModel`; None = an ideal camera (the plain renders at ``times``).
        frames_per_call: frames per renderer call (memory and speed only).
        with_coverage: also return the bodies' coverage.
        windows: only these pixels of each frame (`body_windows`); needs a ``plate`` (outside
            the windows the frame is the plate).
        render_kwargs: passed to `Scene.render_states` (``edge_softness``, ``supersample``...);
            the renderer's defaults otherwise (antialiased edges: a fit's gradient sees the
            silhouettes).

    Returns:
        (T, B, 3, H, W) camera output ((T, B, 3, h, w) with windows), differentiable in the
        trajectory, the scene's parameters, ``times`` and every tensor of ``model``; with
        ``with_coverage`` also the (T, B, 1, H, W) coverage of the bodies (averaged over the
        exposure, distorted).
    """
    model = ImageModel() if model is None else model
    if windows is not None and model.plate is None:
        raise ValueError("render_video: windows need a plate (the frame outside them)")
    if model.plate is not None:
        render_kwargs["background"] = times.new_zeros(3)
    frames, covers = [], []
    for start in range(0, times.shape[0], max(1, frames_per_call)):
        index = slice(start, start + max(1, frames_per_call))
        part = None if windows is None else windows[index]
        out, cover = _render_frames(scene, trajectory, times[index], model, part, render_kwargs)
        frames.append(out)
        covers.append(cover)
    out = torch.cat(frames) if len(frames) > 1 else frames[0]
    if not with_coverage:
        return out
    return out, (torch.cat(covers) if len(covers) > 1 else covers[0])


def _render_frames(scene, trajectory, times, model: ImageModel, windows, render_kwargs):
    """`render_video` of a few frames: (T, B, 3, h, w) output and (T, B, 1, h, w) coverage."""
    import physics

    batch = scene.batch_size
    when = sample_times(times, model, batch)  # (T, S, B)
    count, samples = when.shape[:2]
    states = physics.states_at(trajectory, when.flatten(0, 1), scene.timestep)
    render_kwargs = dict(render_kwargs)
    reach = 0
    if windows is not None:
        if model.distortion is not None:
            reach = _distortion_reach(scene.camera, model.distortion, when)
        origins = windows.origins[:, None].expand(count, samples, batch, 2).flatten(0, 1)
        render_kwargs["window"] = (
            origins - reach,
            (windows.size[0] + 2 * reach, windows.size[1] + 2 * reach),
        )
    buffers = scene.render_states(states, frames_per_call=count * samples, **render_kwargs)
    image = buffers.image.unflatten(0, (count, samples)).mean(1).flatten(0, 1)  # (T*B, 3, h, w)
    coverage = buffers.coverage.unflatten(0, (count, samples)).mean(1).flatten(0, 1)
    if model.distortion is not None:
        cam = scene.camera
        intrinsics = [
            _tile(v.expand(batch), batch, count, image) for v in (cam.fx, cam.fy, cam.cx, cam.cy)
        ]
        if windows is not None:  # the window's own principal point
            shift = windows.origins.flatten(0, 1).to(image.dtype)  # (T*B, 2) rows, columns
            intrinsics[2] = intrinsics[2] - shift[:, 1]
            intrinsics[3] = intrinsics[3] - shift[:, 0]
        coeffs = torch.as_tensor(model.distortion, dtype=image.dtype, device=image.device)
        if coeffs.dim() == 2:
            coeffs = coeffs.expand(batch, 5).repeat(count, 1)
        both, _ = imaging.distort_image(
            torch.cat([image, coverage], 1), *intrinsics, coeffs, margin=reach
        )
        image, coverage = both[:, :3], both[:, 3:]
    response = {
        k: _tile(getattr(model, k), batch, count, image) for k in ("gain", "offset", "gamma")
    }
    if model.plate is not None:
        plate = torch.as_tensor(model.plate, dtype=image.dtype, device=image.device)[None]
        if windows is not None:
            plate = crop(plate, windows).flatten(0, 1)
        out = imaging.composite_over_plate(image, coverage, plate, **response)
    else:
        out = imaging.apply_response(image, **response)
    out = out.unflatten(0, (count, batch))
    return out, coverage.unflatten(0, (count, batch))


def estimate_color(
    scene,
    body: str,
    trajectory,
    times: torch.Tensor,
    frames: torch.Tensor,
    model: ImageModel | None = None,
    frames_per_call: int = 16,
    **render_kwargs,
) -> torch.Tensor:
    """The colour of one body that best explains a video, the rest of the model as it is.

    A body's colour multiplies its shading, so the camera's linear output is affine in it:
    ``out = base + colour * unit`` with ``base`` the frame drawn with the body black and
    ``unit`` the body's own light when it is white. The colour is the least-squares solution
    over every pixel of every frame, per channel, in linear light (through the model's
    response); the video is rendered a few frames at a time.

    Args:
        scene: a `diffcam.Scene` made by `load_scene` (batch B); ``body`` must have a colour,
            not a texture.
        body: the body's name in the scene file.
        trajectory: a `physics.State` of (steps + 1, B, N, ...) tensors, as in `render_video`.
        times: (T,) frame timestamps (s).
        frames: (T, 3, H, W) observed frames in [0, 1], at the scene camera's resolution.
        model: the `ImageModel` (a plate behind the bodies, response, blur, ...).
        frames_per_call: frames per renderer call (memory and speed only).
        render_kwargs: passed to `render_video` (e.g. ``edge_softness``).

    Returns:
        (B, 3) colour in [0, 1] (no gradient); 0.5 grey for a body no frame shows.
    """
    model = ImageModel() if model is None else model
    ones = torch.ones(3, dtype=scene.dtype, device=scene.device)
    black = scene.with_overrides({f"bodies.{body}.color": 0.0 * ones})
    white = scene.with_overrides({f"bodies.{body}.color": ones})
    response = {k: getattr(model, k) for k in ("gain", "offset", "gamma")}
    numerator = denominator = 0.0
    with torch.no_grad():
        for start in range(0, times.shape[0], max(1, frames_per_call)):
            part = slice(start, start + max(1, frames_per_call))
            args = (trajectory, times[part], model, frames_per_call)
            lit = [render_video(s, *args, **render_kwargs) for s in (black, white)]
            base, bright = (imaging.invert_response(x, **_as_frames(response, x)) for x in lit)
            unit = bright - base
            seen = frames[part].to(base)[:, None]
            observed = imaging.invert_response(seen, **_as_frames(response, seen))
            numerator = numerator + (unit * (observed - base)).sum((0, 3, 4))
            denominator = denominator + (unit * unit).sum((0, 3, 4))
    color = numerator / torch.as_tensor(denominator).clamp_min(1e-12)
    shown = torch.as_tensor(denominator) > 1e-9
    return torch.where(shown, color, torch.full_like(color, 0.5)).clamp(0, 1)


def _as_frames(response: dict, like: torch.Tensor) -> dict:
    """Response parameters () or (B,) broadcast against (T, B, 3, H, W) frames."""
    out = {}
    for key, value in response.items():
        value = torch.as_tensor(value, dtype=like.dtype, device=like.device)
        out[key] = value.reshape(-1, 1, 1, 1) if value.dim() == 1 else value
    return out
