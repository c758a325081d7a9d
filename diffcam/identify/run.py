"""`identify`: a scene's physics from a video of it, from the user's rough scene file alone.

::

    result = diffcam.identify("my_ball.toml", "ball.mp4",
                              keys=["bodies.ball.restitution", "bodies.ball.position"])
    result.values, result.std, result.status, result.explained

The stages, each kept only if it explains the video better than what came before:

1. **observe**: the video at the working size, its clean plate, noise and foreground masks,
   and the blobs of each mask (`observation`, `blobs`);
2. **centres**: the moving bodies' projected centres fitted to the blobs through the physics
   and the camera (`centres`): cheap, with a wide reach;
3. **orientations** (when a mesh body's orientation, ``bodies.<body>.quat``, is a key): starts
   for its orientation and spin from its mesh's silhouettes matched to its blobs
   (`orientation`), each taken a short pixel stage forward with the look learnt there; the
   one that explains its frames best starts the pixel stage;
4. **pixels**: the plate again without the bodies where the model now puts them; each body's
   texture learnt from the frames (`appearance`); then every pixel of every frame, with a
   silhouette term against the foreground mask (`diffcam.fit_scene`), and the textures learnt
   again at the new pose.

A stage's result is scored by how much of the moving pixels the model explains with the look
learnt at that pose (`Score`): a model that hides or shrinks a body explains none, so the score
cannot be gamed, and a stage that lowers it is reported and undone. At the end the keys' ±
combines the statistical error (the fit's clustered covariance) with what the fit's own
choices move: the values when the physics steps at half the time step, when the frames are
compared at half the resolution, and when only the first half of the video is used.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from ..fit import FitError, Objective, Runtime, Schedule, Silhouettes, fit_scene
from ..fit.keys import make_key
from ..fit.model import VideoModel
from ..formation import ImageModel, crop
from .appearance import estimate_textures, texture_size
from .blobs import find_blobs
from .centres import fit_centres, match_blobs, projected
from .errors import IdentifyError
from .keys import KeySet, make_keyset
from .observation import Observation, moving_mask, observe

__all__ = ["identify", "Identification", "Settings", "Score"]

_EXPOSURE = "image.exposure"
_PIXELS_RADIUS = 3.0  # px: smaller bodies are measured by their blobs' centroids alone
_SCORE_FRAMES = 150  # a score is taken over at most this many frames, spread over the video
_PLATE_FRAMES = 96  # the plate's median, likewise
# A "good" fit explains at least this share of the moving pixels with its learnt look, or its
# silhouettes overlap the bodies' blobs at least this much (IoU): a look finer than the
# texels (a checker on a ball a few pixels across) explains little even where the bodies are
_GOOD_EXPLAINED = 0.3
_GOOD_OVERLAP = 0.4


@dataclasses.dataclass(frozen=True)
class Settings:
    """How `identify` works; the defaults suit a phone video of a few seconds.

    Attributes:
        width: working width in pixels (frames are averaged down to it).
        centre_budget: rollouts for the centre stage.
        iterations: evaluations of the pixel stage (Levenberg-Marquardt Jacobians and trials).
        pixel_frames: at most this many frames, spread over the video, in the pixel stage
            (the physics always runs through the whole video).
        edge_softness: the pixel stage's silhouette softness schedule (px), wide to narrow.
        silhouette_weight: the silhouette term's weight against a colour channel's.
        fit_sizes: also fit a size factor per moving body (when its size is not a key).
        exposure: the shutter time (s) if known; None fits it (a nuisance).
        systematic: re-fit at half the time step, half the resolution and half the video to
            measure what those choices move (adds to the ± and to the time).
        check_iterations: evaluations of each of those re-fits.
        pixels: "auto" (the pixel stage runs when a moving body is at least 3 px in radius
            at the working width, or the centre stage did not come close), "always" or
            "never".
        progress: report the stages on stderr.
    """

    width: int = 160
    centre_budget: int = 30
    iterations: int = 12
    pixel_frames: int = 120
    edge_softness: tuple[float, ...] = (1.0, 0.5)
    silhouette_weight: float = 0.5
    fit_sizes: bool = True
    exposure: float | None = None
    systematic: bool = True
    check_iterations: int = 4
    pixels: str = "auto"
    progress: bool = True


@dataclasses.dataclass(frozen=True)
class Score:
    """How well a model explains the video, with the look learnt at its pose.

    explained: 1 - the squared (robust) residuals in the moving bodies' windows over those of
    the plate alone there (1 = every moving pixel explained; 0 or below = no better than an
    empty scene); overlap: the silhouettes' intersection over union with the foreground mask
    over every frame."""

    explained: float
    overlap: float

    def better_than(self, other: Score) -> bool:
        return self.explained > other.explained


@dataclasses.dataclass
class Identification:
    """What `identify` found.

    Attributes:
        values: key -> its fitted value (a float, or a list for a vector key).
        std: key -> one standard deviation (the statistical and the systematic parts added
            in quadrature; inf for a key the video does not determine).
        statistical, systematic: key -> those two parts.
        status: "good", "poor" (the model explains the video badly: see ``message``) or
            "unidentifiable" (no key can be fitted from this video).
        explained, overlap: the final `Score`'s.
        message: what happened, and for a poor fit the likely reason and fix.
        seconds: wall-clock time of the whole identification.
        stages: per stage, its name, evaluations, seconds, score and whether it was kept.
        nuisance: the fitted values that are not the user's keys (size factors, exposure).
        unidentifiable: keys the video does not determine (left at their start).
        contacts: "<body>/<other>" -> the friction and restitution a contact between them
            has (the geometric mean of the two bodies' frictions, the larger restitution),
            for every body whose friction or restitution is a key, with each body it can
            touch.
        textures: body name -> its learnt (3, Ht, Wt) texture.
        observation: the prepared video.
        parameters: the final internal parameter values (for `render`).
    """

    values: dict
    std: dict
    statistical: dict
    systematic: dict
    status: str
    explained: float
    overlap: float
    message: str
    seconds: float
    stages: list[dict]
    nuisance: dict
    unidentifiable: list[str]
    textures: dict
    observation: Observation = dataclasses.field(repr=False)
    parameters: dict = dataclasses.field(repr=False, default_factory=dict)
    contacts: dict = dataclasses.field(default_factory=dict)
    _context: object = dataclasses.field(repr=False, default=None)

    def to_json(self) -> dict:
        """A JSON-ready summary (what ``diffcam fit`` prints)."""
        obs = self.observation
        return {
            "values": self.values, "std": _finite(self.std), "status": self.status,
            "explained": round(self.explained, 4), "seconds": round(self.seconds, 2),
            "overlap": round(self.overlap, 4),
            "std_statistical": _finite(self.statistical), "std_systematic": _finite(self.systematic),
            "unidentifiable": self.unidentifiable, "nuisance": self.nuisance,
            "contacts": self.contacts,
            "message": self.message, "stages": self.stages,
            "video": {"path": obs.path, "frames": len(obs), "size": list(obs.size),
                      "fps": obs.fps, "start": obs.start,
                      "seconds": round(float(obs.times[-1]) + 1.0 / obs.fps, 4)},
        }  # fmt: skip

    def frames(self, index: slice = slice(None)) -> torch.Tensor:
        """(T', 3, H, W) the fitted model's frames ``index`` (rendered on demand)."""
        return self._context.renderer(self.parameters, self.textures)(index)

    def write_video(self, path, chunk: int = 32):
        """Write observed | fitted | 4 x difference side by side to ``path`` (.mp4 or .gif),
        rendered a chunk of frames at a time (the frames are kept as bytes)."""
        from ..video import write_video

        obs = self.observation
        t, _, h, w = obs.frames.shape
        render = self._context.renderer(self.parameters, self.textures)
        out = torch.empty(t, 3, h, 3 * w, dtype=torch.uint8)
        for start in range(0, t, chunk):
            index = slice(start, min(t, start + chunk))
            seen = obs.frames[index].to(torch.float32)
            model = render(index).to(seen)
            side = torch.cat([seen, model, (model - seen).abs().mul(4)], 3)
            out[index] = side.clamp(0, 1).mul(255).add(0.5).to(torch.uint8)
        return write_video(path, out, fps=obs.fps)


def _finite(d: dict) -> dict:
    """JSON has no infinity: inf becomes None."""

    def clean(v):
        if isinstance(v, list):
            return [clean(x) for x in v]
        return v if math.isfinite(v) else None

    return {k: clean(v) for k, v in d.items()}


class _Log:
    def __init__(self, on: bool):
        self.on = on
        self.start = time.perf_counter()

    def __call__(self, text: str) -> None:
        if self.on:
            print(f"[{time.perf_counter() - self.start:6.1f} s] {text}", file=sys.stderr)


def _scene_at(scene, size: tuple[int, int]):
    """The scene (a path or a `Scene`) at batch 1 and the working size: its resolution set,
    a focal length and principal point in pixels scaled with it."""
    from ..scene import Scene, load_scene

    if not isinstance(scene, Scene):
        scene = load_scene(scene, batch_size=1)
    width, height = size
    w0, h0 = scene.camera.width, scene.camera.height
    if abs(w0 / h0 - width / height) > 0.02 * width / height:
        raise IdentifyError(
            f"{scene.path}: camera.resolution = [{w0}, {h0}] has another aspect ratio than the "
            f"video ({width} x {height} at the working size): give the video camera's "
            f"resolution (e.g. [{round(h0 * width / height)}, {h0}])"
        )
    overrides = {"camera.resolution": (width, height)}
    camera = scene.config.camera
    if "focal" in camera:
        s = width / w0
        overrides["camera.focal"] = torch.as_tensor(camera["focal"], dtype=torch.float64) * s
        pp = camera.get("principal_point", [0.5 * w0, 0.5 * h0])
        overrides["camera.principal_point"] = torch.as_tensor(pp, dtype=torch.float64) * s
    return scene.with_overrides(overrides, batch_size=1)


class _Context:
    """The scene, the video and the keys, and the model pieces every stage shares."""

    def __init__(self, scene, observation: Observation, keyset: KeySet, actions, exposure):
        self.scene = scene
        self.obs = observation
        self.keyset = keyset
        self.actions = actions
        self.bodies = list(scene.dynamic_bodies)
        self.times = observation.times.to(scene.dtype)
        self.exposure = exposure
        self.clean = torch.ones(len(observation), dtype=torch.bool)
        self.body_mask = observation.mask
        self._rollout: tuple = (None, None)  # (the values' signature, their trajectory)

    def match(self, values: dict) -> None:
        """Find each body's blob in each frame at ``values``: the frames where every body has
        a blob of its own (``clean``: no hand, person or other body merged with it) and the
        pixels of those blobs (``body_mask``), which the scores and the silhouette term use
        there instead of everything that moves."""
        _, built = self.built(values, {})
        blobs = find_blobs(self.obs.mask)
        chosen = match_blobs(
            built, self.times, blobs, self.bodies, max(1.0, self.obs.size[0] / 160)
        )
        self.clean = (chosen >= 0).all(1)
        if not bool(self.clean.any()):
            self.clean = torch.ones_like(self.clean)
        self.body_mask = torch.where(
            self.clean[:, None, None, None], blobs.pixels_of(chosen), self.obs.mask
        )

    def to_overrides(self, textures: dict):
        fixed = {f"bodies.{n}.texture": t for n, t in textures.items()}

        def route(values):
            out = {**self.keyset.overrides(values), **fixed}
            if _EXPOSURE in values:
                out[_EXPOSURE] = values[_EXPOSURE]
            return out

        return route

    def image_model(self, values: dict, plate=None, fitted: bool = False) -> ImageModel:
        """The camera's image formation at ``values``: the plate, and the shutter time (the
        fitted one, the known one, or none); ``fitted``: the exposure is a key, so its
        samples are rendered whatever its start."""
        exposure = values.get(_EXPOSURE, self.exposure)
        exposure = float(torch.as_tensor(exposure)) if exposure is not None else 0.0
        return ImageModel(
            plate=self.obs.plate if plate is None else plate, exposure=exposure,
            exposure_samples=3 if exposure > 0 or fitted else 1,
        )  # fmt: skip

    def model(self, values: dict, textures: dict, silhouettes: float = 0.0) -> VideoModel:
        return VideoModel(
            self.scene, self.times, self.actions, self.image_model(values),
            self.to_overrides(textures), silhouette_weight=silhouettes,
        )  # fmt: skip

    def fit_keys(self, values: dict, with_exposure: bool):
        specs = self.keyset.with_initial(values).specs
        if with_exposure:
            top = 1.0 / self.obs.fps
            start = float(values.get(_EXPOSURE, 0.5 * top))
            specs[_EXPOSURE] = {"init": min(max(start, 2e-3 * top), 0.98 * top),
                                "bounds": (1e-3 * top, top)}  # fmt: skip
        return specs

    def built(self, values: dict, textures: dict, silhouettes: float = 0.0):
        """(the `VideoModel`, its build at ``values``): rolled out once per set of values (the
        textures and the silhouette channel change what is drawn, not the motion)."""
        model = self.model(values, textures, silhouettes)
        keys = [make_key(n, s, self.scene.dtype) for n, s in self.fit_keys(values, False).items()]
        current = {k.key: k.value().detach() for k in keys}
        signature = (model.steps, *((n, tuple(v.reshape(-1).tolist()))
                                    for n, v in sorted(current.items())))  # fmt: skip
        with torch.no_grad():
            built = model.build(current, simulate=False)
            if self._rollout[0] != signature:
                self._rollout = (signature, model.build(current).trajectory)
        built.trajectory = self._rollout[1]
        return model, built

    def apparent_radius(self, values: dict) -> torch.Tensor:
        """(D,) each moving body's median apparent radius (px) over the frames at ``values``
        (a disc of its side-on area)."""
        _, built = self.built(values, {})
        _, radius, depth = projected(built, self.times, self.bodies)
        radius = torch.where(depth[0] > 0, radius[0], torch.nan)
        return radius.nanmedian(0).values.nan_to_num(0.0)

    def textures(self, values: dict, softness: float = 0.5) -> dict:
        """Each moving body's texture learnt at ``values``."""
        model, built = self.built(values, {})
        radius = self.apparent_radius(values)
        sizes = [texture_size(self.scene, body, float(radius[d]))
                 for d, body in enumerate(self.bodies)]  # fmt: skip
        return estimate_textures(
            model, built, self.bodies, sizes, self.obs.frames, edge_softness=softness
        )

    def renderer(self, values: dict, textures: dict):
        """A function of a slice of frames -> (T', 3, H, W) the model's frames there (the
        bodies' windows drawn over the plate), the model rolled out once."""
        model, built = self.built(values, textures)
        windows = model.windows(built, len(self.times), 3.0)
        h, w = windows.size

        def render(index: slice) -> torch.Tensor:
            part = windows[index]
            with torch.no_grad():
                drawn = model.frames(built, index, windows=part, edge_softness=0.5)[:, 0]
            out = self.obs.plate.to(drawn)[None].repeat(drawn.shape[0], 1, 1, 1)
            for t, (row, col) in enumerate(part.origins[:, 0].tolist()):
                out[t, :, row : row + h, col : col + w] = drawn[t]
            return out

        return render

    def score(self, values: dict, textures: dict, chunk: int = 32) -> Score:
        """The `Score` of a model at ``values`` wearing ``textures``."""
        from ..fit.objective import robust_residual

        model, built = self.built(values, textures, silhouettes=1.0)
        total = len(self.times)
        windows = model.windows(built, total, 4.0)
        frames, plate, mask = self.obs.frames, self.obs.plate, self.body_mask
        fitted = empty = inter = union = 0.0
        clean = torch.nonzero(self.clean).flatten()
        clean = clean[_spread(len(clean), _SCORE_FRAMES)]
        with torch.no_grad():
            for start in range(0, len(clean), chunk):
                index = clean[start : start + chunk]
                part = windows[index]
                out = model.frames(built, index, windows=part, edge_softness=0.5)[:, 0]
                seen = crop(frames[index], part)[:, 0].to(out)
                back = crop(plate[None].to(out), part)[:, 0]
                m = crop(mask[index].to(out), part)[:, 0, 0]
                fitted += float(
                    robust_residual(out[:, :3] - seen, "charbonnier", 0.1).square().sum()
                )
                empty += float(robust_residual(back - seen, "charbonnier", 0.1).square().sum())
                cover = out[:, 3]
                inter += float(torch.minimum(cover, m).sum())
                union += float(torch.maximum(cover, m).sum())
                union += float(mask[index].sum()) - float(m.sum())  # foreground outside
        explained = 1.0 - fitted / max(empty, 1e-12)
        return Score(explained, inter / max(union, 1e-12))


def _refined_plate(obs: Observation, context: _Context, values: dict) -> Observation:
    """The observation with its plate taken again where the model puts no body: the per-pixel
    median over the frames whose bodies' windows leave the pixel free (a body at rest for half
    the video is in the first plate), and the masks and noise against it."""
    from .. import imaging

    model, built = context.built(values, {})
    index = _spread(len(obs), _PLATE_FRAMES)
    windows = model.windows(built, len(obs), 3.0)[index]
    frames = obs.frames[index]
    t, _, h, w = frames.shape
    free = torch.ones(t, h, w, dtype=torch.bool)
    rows = torch.arange(h)[None, :, None]
    cols = torch.arange(w)[None, None, :]
    origins = windows.origins[:, 0]  # (T, 2)
    wh, ww = windows.size
    across = (rows >= origins[:, 0, None, None]) & (rows < origins[:, 0, None, None] + wh)
    along = (cols >= origins[:, 1, None, None]) & (cols < origins[:, 1, None, None] + ww)
    free &= ~(across & along)
    enough = free.sum(0) >= max(3, t // 10)
    plate = obs.plate.clone()
    step = max(1, (1 << 22) // (t * w * 3))
    for r0 in range(0, h, step):
        block = frames[:, :, r0 : r0 + step].to(torch.float32)
        keep = free[:, None, r0 : r0 + step].expand_as(block)
        median = torch.where(keep, block, torch.nan).nanmedian(0).values
        plate[:, r0 : r0 + step] = torch.where(
            enough[None, r0 : r0 + step], median.to(plate), plate[:, r0 : r0 + step]
        )
    noise = imaging.noise_level(obs.frames, plate)
    return dataclasses.replace(obs, plate=plate, noise=noise, mask=moving_mask(obs.frames, plate))


def _pixel_stage(context: _Context, values: dict, textures: dict, settings: Settings,
                 iterations: int, observation=None, scene=None, horizon=None,
                 growing: bool = False, frames: int | None = None,
                 uncertainty: bool = True):  # fmt: skip
    """`fit_scene` on every pixel (colours and silhouettes) from ``values``, the textures
    fixed; ``growing``: over horizons doubling from half a second (for a start the centre
    stage could not bring close); ``frames``: at most this many frames (default
    ``settings.pixel_frames``); ``uncertainty``: the covariance at the end. Returns its
    `FitResult`."""
    obs = observation or context.obs
    fit_exposure = settings.exposure is None
    index = _spread(len(obs), frames or settings.pixel_frames)
    if horizon is not None:
        index = index[: max(4, len(index) * horizon // len(obs))]
    mask = context.body_mask if observation is None else obs.mask
    frames, mask, times = obs.frames[index], mask[index], context.times[index]
    horizons = None
    if growing:
        end = float(times[-1] - times[0])
        horizons = [h for h in (0.5 * 2.0**k for k in range(12)) if h < end] + [end + 1.0]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit_scene(
            scene or context.scene, frames, context.fit_keys(values, fit_exposure),
            context.actions, times=times,
            image_model=context.image_model(values, plate=obs.plate, fitted=fit_exposure),
            to_overrides=context.to_overrides(textures),
            schedule=Schedule(iterations=iterations, optimizer="lm",
                              edge_softness=settings.edge_softness, horizons=horizons),
            objective=Objective(silhouettes=Silhouettes(mask, settings.silhouette_weight)),
            runtime=Runtime(progress=False, uncertainty=uncertainty),
        )  # fmt: skip


def _centre_stage(context: _Context, values: dict, budget: int, observation=None, scene=None,
                  horizon=None, first_horizon: float = 0.25, slower: float = 1.0):  # fmt: skip
    """The centre stage (`fit_centres`) from ``values`` (the size factors held): returns the
    values it reached and its `CentreFit`. The other arguments change what it sees (for the
    systematic checks; ``slower``: the video's clock runs this many times too slow)."""
    from ..errors import SceneError

    obs = observation or context.obs
    scene = scene or context.scene
    times = (context.times if horizon is None else context.times[:horizon]) / slower
    mask = obs.mask if horizon is None else obs.mask[:horizon]
    keys = [make_key(n, s, scene.dtype) for n, s in context.fit_keys(values, False).items()]
    # the sizes stay the file's here: a blob's area says nothing the positions do not
    free = [k for k in keys if k.key not in context.keyset.sizes.values()]
    model = VideoModel(scene, times, context.actions, None, context.keyset.overrides)
    try:
        fit = fit_centres(model, keys, free, find_blobs(mask), context.bodies, budget=budget,
                          first_horizon=first_horizon)  # fmt: skip
    except (SceneError, FitError) as error:
        raise IdentifyError(f"the centre stage could not run: {error}") from None
    return {k.key: k.value().detach().double() for k in keys}, fit


def _frame_rate_hint(context: _Context, values: dict) -> str | None:
    """For a poor fit: whether the blobs move as the scene's physics does if the video's
    clock is 2, 4 or 8 times too slow (a slow-motion clip stored at a lower rate), from short
    centre stages over the first second of motion; a sentence naming the rate, or None."""
    fps = context.obs.fps

    def error(slower: float) -> float:
        """The centre stage's median distance (px) to the blobs over 1 s of motion."""
        frames = int((context.times <= float(context.times[0]) + slower).sum())
        try:
            fit = _centre_stage(context, values, 12, horizon=max(frames, 8), slower=slower)[1]
        except IdentifyError:
            return math.inf
        return fit.error_px if fit.matched >= 0.5 else math.inf

    as_is = error(1.0)
    best = min((error(f), f) for f in (2.0, 4.0, 8.0))
    if best[0] < 0.5 * as_is:
        return (
            f"the bodies move as the physics says if the video's clock runs {best[1]:g} times "
            f"too slow: a slow-motion clip? pass its capture rate, --fps {fps * best[1]:g}"
        )
    return None


def _spread(count: int, most: int) -> torch.Tensor:
    """Up to ``most`` frame indices spread evenly over ``count`` frames, first and last in."""
    return torch.unique(torch.linspace(0, count - 1, min(count, most)).round().long())


def _values_of(result) -> dict:
    return {k: v.detach().to(torch.float64) for k, v in result.values.items()}


def identify(
    scene,
    video,
    keys: Sequence[str],
    *,
    start: float = 0.0,
    seconds: float | None = None,
    fps: float | None = None,
    actions: torch.Tensor | None = None,
    settings: Settings | None = None,
) -> Identification:
    """Fit a scene's keys to a video of it, starting from the scene file's values.

    Args:
        scene: a scene file (or a loaded `diffcam.Scene`) describing what the video shows,
            roughly: the moving bodies (their shapes, sizes, start), what they collide with
            (mark a floor or wall the video shows ``visible = false``), and the camera. Its
            time 0 is the video's time ``start``.
        video: a video file or a `diffcam.Video`.
        keys: the scene's override paths to fit (``bodies.ball.restitution``,
            ``joints.pivot.damping``, ``camera.position``...), or one component of a vector
            (``bodies.bob.position[2]``).
        start: video time (s) of the scene's time 0.
        seconds: how much of the video to use (s); None = to the end.
        fps: the true frame rate when the container's is wrong (slow motion).
        actions: (steps, n_actuators) known actions per physics step, or None.
        settings: `Settings` (working width, budgets, ...).

    Returns:
        An `Identification`.

    Raises:
        IdentifyError: an unreadable or too short video, a key the scene does not have, a
            scene whose moving bodies are nowhere in view, or a video in which nothing moves.
    """
    from ..errors import SceneError

    settings = settings or Settings()
    log = _Log(settings.progress)
    began = time.perf_counter()
    obs = observe(video, start=start, seconds=seconds, width=settings.width, fps=fps)
    log(f"observe: {len(obs)} frames of {obs.size[0]}x{obs.size[1]} at {obs.fps:g} fps")
    try:
        loaded = _scene_at(scene, obs.size)
    except SceneError as error:
        raise IdentifyError(str(error)) from None
    if not loaded.dynamic_bodies:
        raise IdentifyError(
            f"{loaded.path}: no drawn moving body: the scene must describe the moving bodies "
            "the video shows (static = false, visible = true)"
        )
    keyset = make_keyset(loaded, keys, fit_sizes=settings.fit_sizes)
    context = _Context(loaded, obs, keyset, actions, settings.exposure)
    stages: list[dict] = []
    values = keyset.initial()
    _check_in_view(context, values)

    # 1. centres
    clock = time.perf_counter()
    after_centres, centres = _centre_stage(context, values, settings.centre_budget)
    log(f"centres: {centres.evaluations} rollouts, {centres.matched:.0%} of frames matched, "
        f"{centres.error_px:.2f} px median error ({time.perf_counter() - clock:.1f} s)")  # fmt: skip

    # scores of the start and of the centre stage, each with the look learnt at its pose
    clock = time.perf_counter()
    obs = _refined_plate(obs, context, after_centres)
    context.obs = obs
    context.match(after_centres)
    start_textures = context.textures(values)
    start_score = context.score(values, start_textures)
    stages.append(_stage("start", 0, 0.0, start_score))
    textures = context.textures(after_centres)
    centre_score = context.score(after_centres, textures)
    stages.append(_stage("centres", centres.evaluations, time.perf_counter() - clock + 0,
                         centre_score, matched=centres.matched, error_px=centres.error_px))  # fmt: skip
    best, best_score, best_textures, kept = values, start_score, start_textures, "start"
    if centre_score.better_than(start_score):
        best, best_score, best_textures, kept = after_centres, centre_score, textures, "centres"
    log(f"scores: start explains {start_score.explained:.1%} (overlap {start_score.overlap:.2f}),"
        f" centres {centre_score.explained:.1%} (overlap {centre_score.overlap:.2f})")  # fmt: skip

    # 2. pixels, from the best so far: where the bodies are big enough for their pixels to
    # say more than their blobs' centroids, or the centre stage did not come close
    close = centres.matched >= 0.8 and centres.error_px <= 1.5 * max(1.0, obs.size[0] / 160)
    large = float(context.apparent_radius(best).max()) >= _PIXELS_RADIUS
    notes, result = [], None
    if settings.pixels == "always" or (settings.pixels == "auto" and (large or not close)):
        clock = time.perf_counter()
        # from a centre stage that matched most frames closely the whole video is in reach;
        # else the pixel stage grows its horizon from half a second
        budget = settings.iterations * (1 if close else 2)
        start_from, start_textures = best, best_textures
        turned_keys = [k for k in keyset.keys if k.kind == "rotation"]
        if turned_keys:  # a body's orientation is a key: starts from its silhouettes
            start_from, start_textures, note = _orientation_stage(
                context, best, best_textures, settings, turned_keys[0], stages, log
            )
            notes += [note] if note else []
            clock = time.perf_counter()
        result = _pixel_stage(
            context, start_from, start_textures, settings, budget, growing=not close
        )
        after_pixels = _values_of(result)
        pixel_textures = context.textures(after_pixels)
        pixel_score = context.score(after_pixels, pixel_textures)
        stages.append(_stage("pixels", result.iterations, time.perf_counter() - clock,
                             pixel_score, status=result.status))  # fmt: skip
        log(f"pixels: {result.iterations} evaluations ({result.status}), explains "
            f"{pixel_score.explained:.1%} (overlap {pixel_score.overlap:.2f}) "
            f"({time.perf_counter() - clock:.1f} s)")  # fmt: skip
        if pixel_score.better_than(best_score):
            best, best_score, best_textures = after_pixels, pixel_score, pixel_textures
            kept = "pixels"
        else:
            notes.append(
                f"the pixel stage lowered the explained share from {best_score.explained:.1%} "
                f"to {pixel_score.explained:.1%}: kept the {kept} stage's values"
            )
    elif settings.pixels == "auto":
        notes.append(
            f"no pixel stage: the bodies are under {_PIXELS_RADIUS:g} px in radius at this "
            "width, where their blobs' centroids are the measurement (--width for more)"
        )
    for stage in stages:
        stage["kept"] = stage["name"] == kept

    # 3. the ± : statistical, and what the fit's own choices move
    statistical = {}
    if kept == "pixels" and result is not None and result.covariance is not None:
        statistical = keyset.std(best, result.covariance, result.covariance_keys)
    elif kept == "centres" and centres.covariance is not None:
        statistical = keyset.std(best, centres.covariance, centres.scalars)
    systematic: dict = {}
    base = None
    if kept == "pixels" and result.normal_equations is not None:
        base = (result.normal_equations, result.covariance_keys)
    elif kept == "centres" and centres.equations is not None:
        base = (centres.equations, centres.scalars)
    if settings.systematic and base is not None:
        clock = time.perf_counter()
        other = None
        if kept == "pixels" and _good(centre_score):
            other = after_centres
        elif kept == "centres" and result is not None and _good(pixel_score):
            other = after_pixels
        systematic = _systematic(context, best, best_textures, settings, kept, base, other, log)
        log(f"systematic (the {kept} stage's problem changed 3 ways, and the stages' spread): "
            f"{time.perf_counter() - clock:.1f} s")  # fmt: skip
    # what the video does not determine goes back to the scene file's value, with no ±
    sensitivity = result.sensitivity if kept == "pixels" else centres.sensitivity
    blind = _blind(context, sensitivity)
    best = {**best, **{name: value for name, value in values.items() if name in blind}}
    unidentifiable = _user_unidentifiable(keyset, blind)
    user = keyset.values(best)
    std = {}
    for key, value in user.items():
        s = statistical.get(key, torch.full_like(value, math.inf))
        extra = systematic.get(key, torch.zeros_like(value))
        std[key] = torch.sqrt(s.square() + extra.square())
        if key in unidentifiable:
            std[key] = torch.full_like(value, math.inf)
    contacts = _contacts(loaded, keyset, best)
    status, message = _status(best_score, kept, unidentifiable, keyset, notes, obs, centres)
    if status == "poor" and fps is None:
        hint = _frame_rate_hint(context, values)
        if hint is not None:
            message = f"{message}; {hint}"
    return Identification(
        values=_plain(user), std=_plain(std), statistical=_plain(statistical),
        systematic=_plain(systematic), status=status, explained=best_score.explained,
        overlap=best_score.overlap, message=message, seconds=time.perf_counter() - began,
        stages=stages, nuisance=_nuisance(keyset, best), unidentifiable=unidentifiable,
        textures=best_textures, observation=obs, parameters=best, contacts=contacts,
        _context=context,
    )  # fmt: skip


def _orientation_stage(context: _Context, values: dict, textures: dict, settings: Settings,
                       key, stages: list, log) -> tuple[dict, dict, str | None]:  # fmt: skip
    """The start of the pixel stage when a body's orientation is a key: orientation and spin
    starts from the body's silhouettes (`orientation.orientation_starts`), each with the look
    learnt at it taken a short pixel stage forward (a third of the iterations and frames);
    the values of the one that explains its frames best and the look learnt there (or
    ``values`` and ``textures`` when there are no starts), and a note."""
    from .orientation import orientation_starts

    clock = time.perf_counter()
    body = key.path.split(".")[1]
    index = context.scene.body_names.index(body)
    spec = next(b for b in context.scene.config.bodies if b["name"] == body)
    if spec["shape"] != "mesh":
        return values, textures, None
    starts = orientation_starts(context, values, index)
    if not starts:
        return (
            values,
            textures,
            (
                f"no orientation starts for {body}: too few frames show it whole; the pixel stage "
                "starts from the scene file's orientation"
            ),
        )
    log(f"orientations: {len(starts)} starts from {body}'s silhouettes, overlaps "
        + ", ".join(f"{s.overlap:.2f}" for s in starts)
        + f" ({time.perf_counter() - clock:.1f} s)")  # fmt: skip
    tried = []
    budget = max(2, settings.iterations // 3)
    frames = max(8, min(settings.pixel_frames, len(context.obs)) // 3)
    for n, start in enumerate(starts):
        candidate = _with_orientation(context, values, key, spec, start)
        fit = _pixel_stage(context, candidate, context.textures(candidate), settings, budget,
                           frames=frames, uncertainty=False)  # fmt: skip
        log(f"orientation start {n}: silhouette overlap {start.overlap:.2f}, after "
            f"{fit.iterations} evaluations explains {fit.explained or 0.0:.1%} of its frames")  # fmt: skip
        tried.append((-math.inf if fit.explained is None else fit.explained, n, _values_of(fit)))
    explained, n, after = max(tried, key=lambda t: t[0])
    learnt = context.textures(after)
    score = context.score(after, learnt)
    stages.append(_stage("orientations", len(starts), time.perf_counter() - clock, score,
                         starts=len(starts), chosen=n))  # fmt: skip
    return (
        after,
        learnt,
        (
            f"{body}'s orientation: {len(starts)} starts from its silhouettes, kept start {n} "
            f"(explains {score.explained:.0%})"
        ),
    )


def _with_orientation(context: _Context, values: dict, key, spec: dict, start) -> dict:
    """``values`` with a mesh body's orientation key at ``start`` (its state frame's rotation
    and spin at time 0), its angular velocity (if a whole key) at the start's spin and its
    position (if a whole key) moved so that its centre of mass stays where it was."""
    from physics.math3d import quat_to_matrix

    from .keys import turned
    from .orientation import rotation_log

    body = key.path.split(".")[1]
    keyset = context.keyset
    mesh = spec["mesh_body"]
    axes = torch.as_tensor(mesh.axes, dtype=torch.float64)  # file_from_state
    centre = torch.as_tensor(mesh.center, dtype=torch.float64)  # centre of mass in the file
    base = keyset.base[key.path].double()
    current = quat_to_matrix(turned(base, values[key.params[0]].double()))
    wanted = start.rotation @ axes.T  # world_from_file
    out = dict(values)
    out[key.params[0]] = rotation_log(wanted @ quat_to_matrix(base / base.norm()).T)
    names = {k.name: k for k in keyset.keys}
    spin = names.get(f"bodies.{body}.angular_velocity")
    if spin is not None and spin.kind == "plain" and spin.index is None:
        out[spin.params[0]] = start.angular_velocity.clone()
    position = names.get(f"bodies.{body}.position")
    if position is not None and position.kind == "plain" and position.index is None:
        p = values[position.params[0]].double()
        out[position.params[0]] = p + (current - wanted) @ centre
    return out


def _contacts(scene, keyset: KeySet, values: dict) -> dict:
    """The coefficients of the contacts that a fitted friction or restitution sets: what a
    contact between two bodies has (``physics``' rules: the geometric mean of the frictions,
    the larger restitution)."""
    routed = keyset.overrides(values)
    fitted = {k.path.split(".")[1] for k in keyset.keys
              if k.path.startswith("bodies.") and k.path.split(".")[-1] in ("friction", "restitution")}  # fmt: skip
    bodies = {b["name"]: b for b in scene.config.bodies}
    out = {}
    for name in sorted(fitted):
        if not bodies[name].get("collide", True):
            continue
        for other, spec in bodies.items():
            if other == name or not spec.get("collide", True):
                continue

            def coefficient(body, field):
                path = f"bodies.{body}.{field}"
                return float(routed.get(path, keyset.base[path]))

            out[f"{name}/{other}"] = {
                "friction": math.sqrt(coefficient(name, "friction") * coefficient(other, "friction")),
                "restitution": max(coefficient(name, "restitution"), coefficient(other, "restitution")),
            }  # fmt: skip
    return out


def _stage(name: str, evaluations: int, seconds: float, score: Score, **extra) -> dict:
    return {"name": name, "evaluations": evaluations, "seconds": round(seconds, 2),
            "explained": round(score.explained, 4), "overlap": round(score.overlap, 4),
            **extra}  # fmt: skip


def _plain(values: dict) -> dict:
    """Tensors as floats (one value) or lists (a vector)."""
    out = {}
    for k, v in values.items():
        v = torch.as_tensor(v).detach().to(torch.float64)
        out[k] = float(v) if v.dim() == 0 else v.tolist()
    return out


def _nuisance(keyset: KeySet, values: dict) -> dict:
    out = {f"size_factor.{body}": round(f, 5) for body, f in keyset.nuisance(values).items()}
    if _EXPOSURE in values:
        out["exposure_s"] = float(values[_EXPOSURE])
    return out


def _check_in_view(context: _Context, values: dict) -> None:
    """Raise if no moving body's centre is in the image in any frame at the start."""
    _, built = context.built(values, {})
    centres, _, depth = projected(built, context.times, context.bodies)
    w, h = context.scene.camera.width, context.scene.camera.height
    x, y = centres[0, ..., 0], centres[0, ..., 1]
    inside = (depth[0] > 0) & (x >= 0) & (x <= w) & (y >= 0) & (y <= h)
    if not bool(inside.any()):
        names = ", ".join(context.scene.body_names[i] for i in context.bodies)
        raise IdentifyError(
            f"{context.scene.path}: no moving body ({names}) is in the camera's view in any "
            "frame at the scene's start values: check the camera's position and look_at and "
            "the bodies' start (diffcam render SCENE shows what the camera sees)"
        )


def _named_step(eq, scalars) -> dict[str, torch.Tensor]:
    """The Gauss-Newton step of normal equations over ``scalars`` ((key, flat index) each) as
    key -> {flat index: step}."""
    from ..fit.result import gauss_newton_step

    step = gauss_newton_step(eq)
    out: dict[str, dict[int, torch.Tensor]] = {}
    for value, (key, index) in zip(step, scalars, strict=True):
        out.setdefault(key, {})[index] = value
    return out


def _systematic(context: _Context, values: dict, textures: dict, settings: Settings, kept: str,
                base, other, log) -> dict:  # fmt: skip
    """Per key, the root sum of squares of how far its value moves:

    * when the ``kept`` stage's problem ("centres" or "pixels") is changed at the solution:
      half the time step, half the resolution, the first half of the video. Each move is the
      Gauss-Newton step of the changed problem from the solution less that of the problem
      itself (``base``: its normal equations and their scalars there): one Jacobian per
      change instead of a re-fit;
    * to where that problem's own Gauss-Newton step goes (the optimiser stopped short);
    * to the ``other`` stage's solution (parameter values, or None): two estimators of the
      same keys, from the blobs' centroids and from every pixel, differ by the model's misfit.
    """
    specs = context.fit_keys(values, kept == "pixels" and settings.exposure is None)
    user = context.keyset.values(values)
    shifts: dict[str, list[torch.Tensor]] = {k: [] for k in user}
    obs = context.obs
    checks = {"half time step": {
        "scene": context.scene.with_overrides({"world.timestep": context.scene.timestep / 2})
    }}  # fmt: skip
    half = (obs.size[0] // 2, obs.size[1] // 2)
    if min(half) >= 16:
        frames = F.avg_pool2d(obs.frames[:, :, : 2 * half[1], : 2 * half[0]].to(torch.float32), 2)
        mask = F.avg_pool2d(obs.mask[:, :, : 2 * half[1], : 2 * half[0]].float(), 2) > 0.25
        plate = F.avg_pool2d(obs.plate[None, :, : 2 * half[1], : 2 * half[0]].float(), 2)[0]
        small = dataclasses.replace(obs, frames=frames, mask=mask, plate=plate)
        checks["half resolution"] = {"scene": _scene_at(context.scene, half), "observation": small}
    checks["first half"] = {"horizon": len(obs) // 2}
    standing = _named_step(*base)

    def moved_by(step: dict, less: dict) -> dict:
        """The keys' values moved by ``step`` less ``less`` (key -> {flat index: raw})."""
        moved = dict(values)
        for key_name, parts in step.items():
            key = make_key(key_name, specs[key_name], torch.float64)
            flat = torch.zeros(key.raw.numel(), dtype=torch.float64)
            for index, value in parts.items():
                flat[index] = value - less.get(key_name, {}).get(index, 0.0)
            moved[key_name] = key.value_of(key.raw.detach() + flat.view_as(key.raw))
        return context.keyset.values(moved)

    # where the optimiser stopped short: the rest of the way, linearised
    for k, v in moved_by(standing, {}).items():
        shifts[k].append(v - user[k])
    if other is not None:  # the other stage's answer: the model's misfit shows as their gap
        for k, v in context.keyset.values(other).items():
            shifts[k].append(v - user[k])
    for name, change in checks.items():
        try:
            if kept == "pixels":
                fit = _pixel_stage(context, values, textures, settings, 0, **change)
                changed = (fit.normal_equations, fit.covariance_keys)
            else:
                changed = _centre_stage(context, values, 0, first_horizon=math.inf, **change)[1]
                changed = (changed.equations, changed.scalars)
        except Exception as error:  # noqa: BLE001 - a check that fails adds no figure
            log(f"systematic check {name!r} failed: {error}")
            continue
        if changed[0] is None:
            continue
        for k, v in moved_by(_named_step(*changed), standing).items():
            shifts[k].append(v - user[k])
    return {k: torch.stack(v).square().sum(0).sqrt() if v else torch.zeros_like(user[k])
            for k, v in shifts.items()}  # fmt: skip


def _blind(context: _Context, sensitivity: dict) -> list[str]:
    """The parameters the video does not determine: what the frames say of each (its
    sensitivity squared, the information without priors) is under a hundredth of what its
    prior says (1 / sigma^2 in raw units), or, without a prior, under 1e-6 of the most seen
    parameter's."""
    specs = context.keyset.specs
    top = max([s * s for s in sensitivity.values()] or [0.0])
    blind = []
    for name, value in sensitivity.items():
        prior = specs.get(name, {}).get("prior")
        if prior is not None:
            floor = 0.01 * float((1.0 / torch.as_tensor(prior, dtype=torch.float64) ** 2).sum())
        else:
            floor = 1e-6 * top
        if value * value < floor:
            blind.append(name)
    return blind


def _user_unidentifiable(keyset: KeySet, params: Sequence[str]) -> list[str]:
    blind = set(params)
    return [k.name for k in keyset.keys if any(p in blind for p in k.params)]


def _good(score: Score) -> bool:
    return score.explained >= _GOOD_EXPLAINED or score.overlap >= _GOOD_OVERLAP


def _status(score: Score, kept: str, unidentifiable, keyset: KeySet, notes, obs,
            centres) -> tuple:  # fmt: skip
    """("good" | "poor" | "unidentifiable", the message)."""
    names = [k.name for k in keyset.keys]
    parts = [f"kept the {kept} stage: the model explains {score.explained:.0%} of the moving "
             f"pixels, silhouette overlap {score.overlap:.2f}"]  # fmt: skip
    parts += notes
    if unidentifiable:
        parts.append("the video does not determine " + ", ".join(unidentifiable)
                     + ": left at their start values")  # fmt: skip
    if len(unidentifiable) == len(names):
        return "unidentifiable", "; ".join(parts)
    if _good(score):
        return "good", "; ".join(parts)
    reason = (
        f"poor: under a third of the moving pixels explained and a silhouette overlap under "
        f"{_GOOD_OVERLAP:g}: the model's bodies are not where the video's are"
    )
    if centres.matched < 0.5:
        reason += (
            f" (the centre stage found each body's own blob in only {centres.matched:.0%} of "
            "the frames: the bodies' shapes, sizes or lengths in the scene may not be the "
            "video's, or bodies touch and hide each other)"
        )
    parts.append(
        reason + "; check the scene's start (diffcam render SCENE), that the camera in the "
        "scene sees what the video sees, that static bodies the video shows are visible = "
        f"false, and the frame rate ({obs.fps:g} fps used; a slow-motion clip needs --fps "
        "with its capture rate)"
    )
    return "poor", "; ".join(parts)
