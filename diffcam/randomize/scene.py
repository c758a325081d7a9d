"""`RandomizedScene`: a scene whose batch elements are drawn with per-episode randomisation.

Element b is drawn as a view of the scene with episode b's body colours (an affine colour
map per body, the renderer's ``color_transform``) or procedural textures, its light and
background, and its camera (pose and intrinsics about the nominal); then its colour jitter
and sensor noise apply to the image (`image_ops`).

Gradients: the randomised values are constants (drawn without grad). Every gradient the
scene's renderer gives (to body poses, through the state; to the nominal camera, light and
textures when they require grad) flows as before, through the randomised render and then
through the image operations.

Cost: the whole batch is one render call (per-image camera, light, background and colour
maps), over one static-scenery layer per randomised scene, drawn once. Only episodes in
which a body wears a procedural texture (``procedural_textures > 0``) are drawn one at a
time, since the renderer takes one texture per body per call.
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import torch

from .config import Randomization
from .image_ops import color_jitter_fused, jitter_matrix, sensor_noise, to_grey
from .sampling import EpisodeParams
from .textures import procedural_texture

__all__ = ["RandomizedScene", "randomize"]


class RandomizedScene:
    """A `diffcam.Scene` whose batch elements are drawn with per-episode randomisation.

    Args:
        scene: the scene (batch B).
        params: `EpisodeParams` of B episodes (``Randomization.sample(g, B, scene.body_names)``).
        randomization: the `Randomization` the values came from: which operations are the
            identity (skipped, so the identity reproduces the scene's render exactly).
            Default: decided from the values.

    Everything but drawing is the scene's (``step``, ``initial_state``, ``world``, ...).
    ``render``, ``render_buffers`` and ``render_trajectory`` draw element b with episode b's
    body colours, light, background and camera, then apply its colour jitter and sensor
    noise to the image. ``camera`` is the randomised (batch B) camera, ``lighting`` the
    per-episode light and ``color_transform`` the bodies' per-episode colour maps. A state
    of batch 1 is drawn as episode 0 (e.g. a video of the first episode). Sensor noise is
    drawn per frame from one generator per episode, seeded by ``params.noise_seed``;
    `reset_noise` re-seeds them.
    Keyword arguments ``lighting``, ``background`` or ``color_transform`` given to a render
    call replace the randomised ones.
    """

    def __init__(self, scene, params: EpisodeParams, randomization: Randomization | None = None):
        if params.batch_size != scene.batch_size:
            raise ValueError(
                f"RandomizedScene: {params.batch_size} episodes for a scene of batch "
                f"{scene.batch_size}; sample batch={scene.batch_size}"
            )
        if params.body_names and tuple(params.body_names) != tuple(scene.body_names):
            raise ValueError(
                "RandomizedScene: the values were drawn for bodies "
                f"{list(params.body_names)}, the scene has {scene.body_names}; sample with "
                "body_names=scene.body_names"
            )
        self.base = scene
        self.params = params
        self.randomization = randomization
        dtype, device = scene.dtype, scene.device
        self._p = {k: v.to(device) for k, v in params.tensors().items()}
        self._p = {k: v.to(dtype) if v.is_floating_point() else v for k, v in self._p.items()}
        self.camera = self._camera()
        self._make_views()
        self.reset_noise()

    # ------------------------------------------------------------------ delegation
    def __getattr__(self, name):
        if name == "base":  # not set yet (e.g. during unpickling)
            raise AttributeError(name)
        return getattr(self.base, name)

    def render_states(self, *args, **kwargs):
        raise NotImplementedError(
            "RandomizedScene.render_states is not randomised; use render / render_trajectory, "
            "or the plain scene (RandomizedScene.base)"
        )

    def __repr__(self) -> str:
        return f"RandomizedScene({self.base!r})"

    def downscaled(self, factor: int) -> RandomizedScene:
        """The same episodes seen through the nominal camera `downscaled` by ``factor``
        (`diffcam.PinholeCamera.downscaled`: about 1 / factor^2 of the pixels to draw): the
        same poses, focal scales, colours, light and noise seeds; the principal-point offsets
        (pixels) are divided by ``factor`` with the camera. A new scene with its own noise
        generators and static-layer cache."""
        factor = int(factor)
        if factor == 1:
            return self
        base = self.base.view(camera=self.base.camera.downscaled(factor))
        params = dataclasses.replace(
            self.params, principal_point=self.params.principal_point / factor
        )
        return RandomizedScene(base, params, self.randomization)

    # ------------------------------------------------------------------ set-up
    def _active(self, name: str) -> bool:
        """Whether ``name``'s operation can change anything."""
        if self.randomization is not None:
            return not self.randomization.is_identity(name)
        p = self._p
        values = {
            "brightness": (p["brightness"], 1.0),
            "contrast": (p["contrast"], 1.0),
            "saturation": (p["saturation"], 1.0),
            "hue": (p["hue"], 0.0),
            "noise_std": (p["noise_std"], 0.0),
            "shot_noise": (p["shot_noise"], 0.0),
        }
        value, identity = values[name]
        return bool((value != identity).any())

    def _camera(self):
        from ..camera import PinholeCamera

        cam, p = self.base.camera, self._p
        if not (
            p["camera_translation"].any()
            or p["camera_rotation"].any()
            or (p["focal_scale"] != 1).any()
            or p["principal_point"].any()
        ):
            return cam
        B = self.base.batch_size
        fx = cam.fx.expand(B) * p["focal_scale"]
        fy = cam.fy.expand(B) * p["focal_scale"]
        cx = cam.cx.expand(B) + p["principal_point"][:, 0]
        cy = cam.cy.expand(B) + p["principal_point"][:, 1]
        rot = cam.rotation.expand(B, 3, 3) @ _rotvec_to_matrix(p["camera_rotation"])
        trans = cam.translation.expand(B, 3) + p["camera_translation"]
        return PinholeCamera(fx, fy, cx, cy, cam.width, cam.height, rot, trans)

    def _lighting(self):
        """One light per episode (ambient, intensity (B,), direction (B, 3)), or the scene's
        own when no episode changes it (None: unlit)."""
        base, p = self.base.lighting, self._p
        if base is None:
            return None
        a, i, r = p["ambient_scale"], p["intensity_scale"], p["light_rotation"]
        if bool((a == 1).all() and (i == 1).all()) and not bool(r.any()):
            return base
        from ..renderer import Lighting

        dtype, device = r.dtype, r.device
        direction = torch.as_tensor(base.direction, dtype=dtype, device=device).reshape(3, 1)
        direction = (_rotvec_to_matrix(r) @ direction).squeeze(-1)
        ambient = torch.as_tensor(base.ambient, dtype=dtype, device=device) * a
        intensity = torch.as_tensor(base.intensity, dtype=dtype, device=device) * i
        return Lighting(ambient, direction, intensity)

    def _color_transform(self) -> torch.Tensor | None:
        """(B, N, 3, 4) affine colour map per episode and body (`diffcam.render`'s
        ``color_transform``): `color_jitter`'s brightness, contrast (about the brightened
        texture's mean grey; a flat colour's own grey), saturation and YIQ hue rotation on
        the texture, with one clamp at the end instead of one after each; None when every
        map is the identity. A body in a procedural texture keeps the identity (its colours
        are drawn already)."""
        p = self._p
        values = [p[f"texture_{n}"] for n in ("brightness", "contrast", "saturation", "hue")]
        bright, contrast, sat, hue = values
        if not (
            bool((bright != 1).any())
            or bool((contrast != 1).any())
            or bool((sat != 1).any())
            or bool(hue.any())
        ):
            return None
        B, N = bright.shape
        dtype, device = bright.dtype, bright.device
        # contrast: towards the brightened texture's mean grey (a constant per episode and
        # body), or towards a flat colour's own grey (linear in the colour)
        grey = torch.stack([self._mean_grey(k, dtype, device) for k in range(N)])  # (N,)
        textured = jitter_matrix(bright, contrast, sat, hue, grey.expand(B, N))
        flat = jitter_matrix(bright, contrast, sat, hue)
        is_flat = torch.tensor(
            [self.base.primitives[k].texture is None for k in range(N)], device=device
        )
        transform = torch.where(is_flat.view(1, N, 1, 1), flat, textured)
        eye = torch.eye(3, dtype=dtype, device=device)
        identity = torch.cat([eye, torch.zeros(3, 1, dtype=dtype, device=device)], -1)
        procedural = p["procedural"].view(B, N, 1, 1)
        return torch.where(procedural, identity, transform)

    def _mean_grey(self, k: int, dtype, device) -> torch.Tensor:
        """The mean grey () of body k's texture (0 for a flat colour, unused)."""
        texture = self.base.primitives[k].texture
        if texture is None:
            return torch.zeros((), dtype=dtype, device=device)
        return to_grey(texture.detach().to(dtype=dtype, device=device)).mean()

    def _background_for(self, height: int, width: int):
        """The background for a render of height x width samples: the scene's, colours per
        episode (B, 3), or per-episode images (B, 3, height, width) for a texture background
        with offsets or procedural backgrounds."""
        from ..renderer.background import background_image

        bg, p = self.base.background, self._p
        offset, procedural = p["background_offset"], p["procedural_background"]
        if not bool(offset.any()) and not bool(procedural.any()):
            return bg
        dtype, device = self.base.dtype, self.base.device
        key = (height, width)
        if self._background_cache is not None and self._background_cache[0] == key:
            return self._background_cache[1]
        bg = torch.as_tensor(bg, dtype=dtype, device=device)
        if bg.dim() == 1 and not bool(procedural.any()):
            out = (bg.view(1, 3) + offset).clamp(0.0, 1.0)  # (B, 3)
        else:  # the file's background once, offset per episode; generated ones replace it
            image = background_image(bg, height, width, dtype, device)
            out = (image + offset.view(-1, 3, 1, 1)).clamp(0.0, 1.0)
            for b in procedural.nonzero().view(-1).tolist():
                texture = procedural_texture(
                    int(p["background_seed"][b]), dtype=dtype, device=device
                )
                out[b] = background_image(texture, height, width, dtype, device)[0]
        self._background_cache = (key, out)
        return out

    def _procedural_primitives(self, b: int):
        """The scene's primitives with episode b's procedural textures (None: none)."""
        from ..primitives import Primitive

        p = self._p
        if not bool(p["procedural"][b].any()):
            return None
        prims = []
        for k, prim in enumerate(self.base.primitives):
            if bool(p["procedural"][b, k]):
                texture = procedural_texture(
                    int(p["texture_seed"][b, k]), dtype=self.base.dtype, device=self.base.device
                )
                prim = Primitive(prim.kind, prim.size, texture, None, prim.uv_scale, prim.wrap)
            prims.append(prim)
        return prims

    def _make_views(self):
        """The batched view (the scene with the randomised camera and its own static-layer
        cache), and per-episode views for the episodes with procedural body textures."""
        self._lights = self._lighting()
        self._transform = self._color_transform()
        self._background_cache = None
        self._arguments = {}
        self._batched = self.base.view(camera=self.camera)
        self._episode_views = {}
        for b in range(self.base.batch_size):
            prims = self._procedural_primitives(b)
            if prims is not None:
                self._episode_views[b] = self.base.view(self._camera_of(b), prims)
        # a state of batch 1 is drawn as episode 0, through a view of its own (and its cache)
        self._first_view = self._episode_views.get(0, self.base).view(self._camera_of(0))

    @property
    def lighting(self):
        """The light of every episode: a `diffcam.Lighting` with per-episode values
        (ambient, intensity (B,), direction (B, 3)), or the scene's when none changes it."""
        return self._lights

    @property
    def color_transform(self) -> torch.Tensor | None:
        """(B, N, 3, 4) the bodies' colour maps per episode (None: the identity)."""
        return self._transform

    def _camera_of(self, b: int):
        from ..camera import PinholeCamera

        cam = self.camera
        if cam.batch_size == 1:
            return cam

        def pick(x):
            return x[b : b + 1] if x.shape[0] > 1 else x

        return PinholeCamera(
            pick(cam.fx), pick(cam.fy), pick(cam.cx), pick(cam.cy), cam.width, cam.height,
            pick(cam.rotation), pick(cam.translation),
        )  # fmt: skip

    def reset_noise(self) -> None:
        """Re-seed the per-episode noise generators (the next frame's noise is the first)."""
        self._noise = [torch.Generator().manual_seed(int(s)) for s in self._p["noise_seed"].cpu()]

    # ------------------------------------------------------------------ drawing
    def _episode_arguments(self, episodes: slice, s: int) -> dict:
        """Render arguments (lighting, background, color_transform) of ``episodes`` at
        supersampling s; the same objects at every call (the scene's static layer is cached
        by the identity of the tensors it is drawn with)."""
        key = (episodes.start, episodes.stop, s)
        if key not in self._arguments:
            self._arguments[key] = self._make_arguments(episodes, s)
        return self._arguments[key]

    def _make_arguments(self, episodes: slice, s: int) -> dict:
        cam = self.base.camera

        def pick(x):
            every = episodes == slice(None)
            if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == self.batch_size:
                return x if every else x[episodes]
            return x

        light = self._lights
        if light is not None and light is not self.base.lighting:
            light = type(light)(pick(light.ambient), pick(light.direction), pick(light.intensity))
        background = self._background_for(cam.height * s, cam.width * s)
        if isinstance(background, torch.Tensor) and background.dim() in (2, 4):
            background = pick(background)
        transform = None if self._transform is None else pick(self._transform)
        return {"lighting": light, "background": background, "color_transform": transform}

    def _draw(self, state, buffers: bool, kwargs: dict):
        rot, pos = state.rotation, state.position
        B = self.base.batch_size
        n = rot.shape[0] if rot.dim() == 4 else B
        if n not in (1, B):
            raise ValueError(
                f"RandomizedScene.render: a state of batch {n}; expected {B} (one per episode) "
                "or 1 (drawn as episode 0)"
            )
        s = int(kwargs.get("supersample", 1))
        if n == 1:
            view = self._first_view
            kw = {**self._episode_arguments(slice(0, 1), s), **kwargs}
            out = view.render_buffers(state, **kw) if buffers else view.render(state, **kw)
            return out, [0]
        kw = {**self._episode_arguments(slice(None), s), **kwargs}
        batched = self._batched
        out = batched.render_buffers(state, **kw) if buffers else batched.render(state, **kw)
        for b, view in self._episode_views.items():  # procedural textures: one at a time
            one = SimpleNamespace(rotation=rot[b : b + 1], position=pos[b : b + 1])
            kb = {**self._episode_arguments(slice(b, b + 1), s), **kwargs}
            part = view.render_buffers(one, **kb) if buffers else view.render(one, **kb)
            if buffers:
                out = type(out)(*(_put(f, b, x) for f, x in zip(out, part, strict=True)))
            else:
                out = _put(out, b, part)
        return out, list(range(n))

    def _image_ops(self, image: torch.Tensor, episodes: list[int]) -> torch.Tensor:
        p = self._p
        idx = torch.tensor(episodes, device=image.device)

        def values(name):
            return p[name].to(image.dtype)[idx] if self._active(name) else None

        jitter = [values(n) for n in ("brightness", "contrast", "saturation", "hue")]
        if any(v is not None for v in jitter):
            identity = (1.0, 1.0, 1.0, 0.0)
            jitter = [i if v is None else v for v, i in zip(jitter, identity, strict=True)]
            image = color_jitter_fused(image, *jitter)
        if self._active("noise_std") or self._active("shot_noise"):
            shape = image.shape[1:]
            eps = torch.stack(
                [torch.randn(shape, generator=self._noise[b], dtype=image.dtype) for b in episodes]
            ).to(image.device)
            image = sensor_noise(image, p["noise_std"][idx], p["shot_noise"][idx], eps)
        return image

    def render(self, state, **kwargs) -> torch.Tensor:
        """`Scene.render` with each episode's randomisation: (B, 3, H, W)."""
        image, episodes = self._draw(state, False, kwargs)
        return self._image_ops(image, episodes)

    def render_buffers(self, state, **kwargs):
        """`Scene.render_buffers` with each episode's randomisation (image ops on the image)."""
        out, episodes = self._draw(state, True, kwargs)
        return out._replace(image=self._image_ops(out.image, episodes))

    def render_trajectory(self, trajectory, every: int = 1, **kwargs) -> torch.Tensor:
        """`Scene.render_trajectory` with each episode's randomisation: (T', B, 3, H, W)."""
        if trajectory.position.dim() != 4:
            raise ValueError(
                "render_trajectory expects a trajectory with position (T, B, N, 3), got "
                f"{tuple(trajectory.position.shape)}"
            )
        frames = []
        for t in range(0, trajectory.position.shape[0], every):
            one = SimpleNamespace(rotation=trajectory.rotation[t], position=trajectory.position[t])
            frames.append(self.render(one, **kwargs))
        return torch.stack(frames)


def randomize(scene, randomization: Randomization, generator: torch.Generator) -> RandomizedScene:
    """``RandomizedScene(scene, randomization.sample(generator, B, scene.body_names))``."""
    params = randomization.sample(generator, scene.batch_size, scene.body_names)
    return RandomizedScene(scene, params, randomization)


def _put(batch: torch.Tensor | None, b: int, one: torch.Tensor | None):
    """``batch`` with element b replaced by ``one`` (1, ...), out of place (autograd)."""
    if batch is None:
        return None
    return torch.cat([batch[:b], one, batch[b + 1 :]], 0)


def _rotvec_to_matrix(rotvec: torch.Tensor) -> torch.Tensor:
    """(B, 3, 3) rotation matrices from rotation vectors (B, 3) (Rodrigues)."""
    angle = torch.linalg.vector_norm(rotvec, dim=-1, keepdim=True)
    axis = rotvec / angle.clamp(min=1e-30)
    x, y, z = axis.unbind(-1)
    zero = torch.zeros_like(x)
    k = torch.stack(
        [torch.stack([zero, -z, y], -1), torch.stack([z, zero, -x], -1),
         torch.stack([-y, x, zero], -1)], -2,
    )  # fmt: skip
    s, c = torch.sin(angle).unsqueeze(-1), torch.cos(angle).unsqueeze(-1)
    eye = torch.eye(3, dtype=rotvec.dtype, device=rotvec.device).expand_as(k)
    return eye + s * k + (1 - c) * (k @ k)
