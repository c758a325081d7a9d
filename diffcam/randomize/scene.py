"""`RandomizedScene`: a scene whose batch elements are drawn with per-episode randomisation.

Element b is drawn as a view of the scene with episode b's jittered or procedural body
textures (and flat colours), its light (``lighting=``) and background (``background=``), and
its camera (pose and intrinsics about the nominal); then its colour jitter and sensor noise
apply to the image (`image_ops`).

Gradients: the randomised values are constants (drawn without grad). Every gradient the
scene's renderer gives (to body poses, through the state; to the nominal camera, light and
textures when they require grad) flows as before, through the randomised render and then
through the image operations.

Cost: a batch whose elements differ in textures, light, background or camera is drawn one
element at a time (the renderer takes one light and one texture per body per call); each
element keeps its own static-scenery layer, drawn once per episode. With only image-space
jitter and noise (or the identity), the batch is drawn in one call, exactly as the scene
draws it.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace

import torch

from .config import Randomization
from .image_ops import color_jitter, sensor_noise, to_grey
from .sampling import EpisodeParams
from .textures import jitter_colors, procedural_texture

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
    textures, light, background and camera, then apply its colour jitter and sensor noise to
    the image. ``camera`` is the randomised (batch B) camera. A state of batch 1 is drawn as
    episode 0 (e.g. a video of the first episode). Sensor noise is drawn per frame from one
    generator per episode, seeded by ``params.noise_seed``; `reset_noise` re-seeds them.
    Keyword arguments ``lighting`` or ``background`` given to a render call replace the
    randomised ones.
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
        self._p = {k: v.to(device) for k, v in params._tensors().items()}
        self._p = {k: v.to(dtype) if v.is_floating_point() else v for k, v in self._p.items()}
        self.camera = self._camera()
        self._views = self._make_views()
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

    def _light(self, b: int):
        base, p = self.base.lighting, self._p
        if base is None:
            return None
        a, i, r = p["ambient_scale"][b], p["intensity_scale"][b], p["light_rotation"][b]
        if a == 1 and i == 1 and not r.any():
            return base
        from ..render import Lighting

        direction = torch.as_tensor(base.direction, dtype=r.dtype, device=r.device)
        direction = _rotvec_to_matrix(r[None])[0] @ direction
        return Lighting(base.ambient * a, direction, base.intensity * i)

    def _background(self, b: int):
        bg, p = self.base.background, self._p
        if bool(p["procedural_background"][b]):
            return procedural_texture(
                int(p["background_seed"][b]), dtype=self.base.dtype, device=self.base.device
            )
        offset = p["background_offset"][b]
        if not offset.any():
            return bg
        shape = (3,) + (1,) * (bg.dim() - 1)
        return (bg + offset.view(shape)).clamp(0.0, 1.0)

    def _primitive(self, b: int, k: int):
        from ..primitives import Primitive

        prim, p = self.base.primitives[k], self._p
        size = prim.size
        if isinstance(size, torch.Tensor) and size.dim() == 2 and size.shape[0] > 1:
            size = size[b : b + 1]
        values = [float(p[f"texture_{n}"][b, k]) for n in ("brightness", "contrast")]
        values += [float(p["texture_saturation"][b, k]), float(p["texture_hue"][b, k])]
        procedural = bool(p["procedural"][b, k])
        if values == [1.0, 1.0, 1.0, 0.0] and not procedural and size is prim.size:
            return prim
        texture, color = prim.texture, prim.color
        if procedural:
            texture = procedural_texture(
                int(p["texture_seed"][b, k]), dtype=self.base.dtype, device=self.base.device
            )
            color = None
        elif texture is not None:
            grey = float(to_grey(texture.detach()).mean())
            texture = jitter_colors(texture, *values, lambda x, g=grey: g)
        else:
            c = torch.as_tensor(
                (0.5, 0.5, 0.5) if color is None else color,
                dtype=self.base.dtype,
                device=self.base.device,
            )
            color = jitter_colors(c, *values, lambda x: to_grey(x).mean())
        return Primitive(prim.kind, size, texture, color, prim.uv_scale, prim.wrap)

    def _make_views(self):
        """One shallow copy of the scene per episode, with its appearance and its own
        static-layer cache; None when every episode looks like the scene (apart from the
        camera, which a batched render takes as it is)."""
        B, N = self.base.batch_size, len(self.base.primitives)
        views, plain = [], True
        for b in range(B):
            prims = [self._primitive(b, k) for k in range(N)]
            light, bg = self._light(b), self._background(b)
            same = (
                all(x is y for x, y in zip(prims, self.base.primitives, strict=True))
                and light is self.base.lighting
                and bg is self.base.background
            )
            plain = plain and same
            view = copy.copy(self.base)
            view.primitives, view.lighting, view.background = prims, light, bg
            view.camera = self._camera_of(b)
            view._layer_cache = None
            views.append(view)
        if plain:
            return None
        return views

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
    def _draw(self, state, buffers: bool, kwargs: dict):
        rot, pos = state.rotation, state.position
        B = self.base.batch_size
        n = rot.shape[0] if rot.dim() == 4 else B
        if n not in (1, B):
            raise ValueError(
                f"RandomizedScene.render: a state of batch {n}; expected {B} (one per episode) "
                "or 1 (drawn as episode 0)"
            )
        if self._views is None:
            if self.camera is self.base.camera and n == B:
                fn = self.base.render_buffers if buffers else self.base.render
                return fn(state, **kwargs), list(range(B))
            view = copy.copy(self.base)
            view.camera = self.camera if n == B else self._camera_of(0)
            view._layer_cache = getattr(self, "_batched_cache", None)
            out = view.render_buffers(state, **kwargs) if buffers else view.render(state, **kwargs)
            self._batched_cache = view._layer_cache
            return out, list(range(n))
        parts = []
        for b in range(n):
            view = self._views[b]
            one = SimpleNamespace(rotation=rot[b : b + 1], position=pos[b : b + 1])
            kw = dict(kwargs)
            kw.setdefault("lighting", view.lighting)
            kw.setdefault("background", view.background)
            parts.append(view.render_buffers(one, **kw) if buffers else view.render(one, **kw))
        if buffers:
            out = type(parts[0])(*(torch.cat(f, 0) for f in zip(*parts, strict=True)))
        else:
            out = torch.cat(parts, 0)
        return out, list(range(n))

    def _image_ops(self, image: torch.Tensor, episodes: list[int]) -> torch.Tensor:
        p = self._p
        idx = torch.tensor(episodes, device=image.device)

        def values(name):
            return p[name].to(image.dtype)[idx] if self._active(name) else None

        image = color_jitter(
            image, values("brightness"), values("contrast"), values("saturation"), values("hue")
        )
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
