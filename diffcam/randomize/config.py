"""`Randomization`: the frozen, validated record of per-episode randomisation ranges.

The defaults are the identity (every range collapsed onto "no change"); construction checks
every field against `spec.FIELD_SPECS` and raises a ValueError that names the field, its
meaning and a valid example. `Randomization.sample` draws `EpisodeParams` (see `sampling`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, fields

import torch

from .sampling import EpisodeParams, draw_episode_params
from .spec import FIELD_SPECS, Range

__all__ = ["Randomization"]


@dataclass(frozen=True)
class Randomization:
    """Ranges of a per-episode domain randomisation; the defaults change nothing.

    A ``(lo, hi)`` range is drawn uniformly per episode (``(v, v)``: always v). A "max" m
    is drawn uniformly in [-m, m] per axis. Identity values in brackets.

    Body textures (each body on its own; a body of one colour gets its colour jittered):
        texture_brightness, texture_contrast, texture_saturation: factors ((1, 1)), as
            torchvision's adjust_* on the texture (contrast about the texture's mean grey),
            drawn as one affine colour map per body and episode (clamped once, at the end).
        texture_hue: shift in turns, within [-0.5, 0.5] ((0, 0)); a YIQ chroma rotation.
        procedural_textures: probability (0) that a body wears a procedural texture
            (`procedural_texture`: stripes, checks or blobs of two random colours) instead.
        bodies: names of the bodies whose textures are randomised (None: every body).
    Light (the scene's ``[light]``; an unlit scene ignores these):
        ambient_scale, intensity_scale: factors ((1, 1)).
        light_direction_deg: the light direction tilts by up to this (0), about a random axis.
    Camera (about the file's camera):
        camera_translation: metres (0), per world axis.
        camera_rotation_deg: degrees (0), about each camera axis (pan, tilt, roll).
        focal_scale: factor on fx and fy ((1, 1)).
        principal_point_px: pixels (0), added to cx and cy.
    Background (the camera's ``background``: a colour or a texture; in a scene whose
    backdrop is a body, that body's texture is the background that shows):
        background_offset: added to each channel (0), clamped to [0, 1].
        procedural_background: probability (0) of a procedural texture instead.
    Image (after rendering, per episode; `color_jitter_fused`: the four composed into one
    affine colour map per image, clamped to [0, 1] once, at the end):
        brightness, contrast, saturation: factors ((1, 1)), torchvision's formulas.
        hue: shift in turns ((0, 0)).
        noise_std: std of Gaussian read noise per pixel ((0, 0)).
        shot_noise: Poisson-like noise, variance ``shot_noise * pixel`` ((0, 0)); e.g. 1/1000
            is a sensor with 1000 photo-electrons at full scale.
    """

    texture_brightness: Range = (1.0, 1.0)
    texture_contrast: Range = (1.0, 1.0)
    texture_saturation: Range = (1.0, 1.0)
    texture_hue: Range = (0.0, 0.0)
    procedural_textures: float = 0.0
    bodies: tuple[str, ...] | None = None
    ambient_scale: Range = (1.0, 1.0)
    intensity_scale: Range = (1.0, 1.0)
    light_direction_deg: float = 0.0
    camera_translation: float = 0.0
    camera_rotation_deg: float = 0.0
    focal_scale: Range = (1.0, 1.0)
    principal_point_px: float = 0.0
    background_offset: float = 0.0
    procedural_background: float = 0.0
    brightness: Range = (1.0, 1.0)
    contrast: Range = (1.0, 1.0)
    saturation: Range = (1.0, 1.0)
    hue: Range = (0.0, 0.0)
    noise_std: Range = (0.0, 0.0)
    shot_noise: Range = (0.0, 0.0)

    def __post_init__(self) -> None:
        for name, (kind, *_) in FIELD_SPECS.items():
            value = getattr(self, name)
            checked = (
                _checked_range(name, value) if kind == "range" else _checked_number(name, value)
            )
            object.__setattr__(self, name, checked)
        if self.bodies is not None:
            if isinstance(self.bodies, str) or not all(isinstance(b, str) for b in self.bodies):
                raise ValueError(
                    f"Randomization.bodies = {self.bodies!r}: expected None (every body) or a "
                    "tuple of body names, e.g. bodies=('cart', 'pole')"
                )
            object.__setattr__(self, "bodies", tuple(self.bodies))

    # ------------------------------------------------------------------ presets
    @classmethod
    def moderate(cls, **changes) -> Randomization:
        """A preset for pixel training on ``pendulum_cart.toml``: jitter that keeps every
        body recognisable (textures +-20 %, hue +-0.05 turn, light +-20-30 % and 20 deg, the
        camera +-3 cm, +-1 deg, +-3 % focal, +-2 px, image +-10 %, light sensor noise);
        ``changes`` replace fields."""
        preset = cls(
            texture_brightness=(0.8, 1.2),
            texture_contrast=(0.8, 1.2),
            texture_saturation=(0.7, 1.3),
            texture_hue=(-0.05, 0.05),
            ambient_scale=(0.8, 1.2),
            intensity_scale=(0.7, 1.3),
            light_direction_deg=20.0,
            camera_translation=0.03,
            camera_rotation_deg=1.0,
            focal_scale=(0.97, 1.03),
            principal_point_px=2.0,
            background_offset=0.1,
            brightness=(0.9, 1.1),
            contrast=(0.9, 1.1),
            saturation=(0.9, 1.1),
            hue=(-0.02, 0.02),
            noise_std=(0.0, 0.02),
            shot_noise=(0.0, 0.001),
        )
        return dataclasses.replace(preset, **changes)

    def is_identity(self, name: str | None = None) -> bool:
        """Whether field ``name`` (default: every field) changes nothing."""
        if name is None:
            return all(self.is_identity(n) for n in FIELD_SPECS)
        kind, identity = FIELD_SPECS[name][:2]
        value = getattr(self, name)
        return value == (identity, identity) if kind == "range" else value == identity

    # ------------------------------------------------------------------ sampling
    def sample(
        self,
        generator: torch.Generator,
        batch: int,
        body_names: list[str] | tuple[str, ...] = (),
    ) -> EpisodeParams:
        """Per-episode values for ``batch`` episodes, drawn from ``generator`` (CPU).

        ``body_names``: the scene's bodies in state order (``scene.body_names``), for the
        per-body texture values (without them, none are drawn and textures stay as they are).
        Every field is drawn whether or not it is the identity, so the draws of one field do
        not depend on the others' ranges. Float64 on the CPU; `RandomizedScene` converts.
        """
        return draw_episode_params(self, generator, batch, body_names)

    def sample_seeded(self, seeds, body_names=()) -> EpisodeParams:
        """One episode per seed, each from its own generator: episode i depends on
        ``seeds[i]`` alone (not on its place in the batch, nor on how a batch is split
        between processes). ``seeds``: ints or a 1-D tensor of integer values."""
        values = [int(s) for s in torch.as_tensor(seeds).reshape(-1).tolist()]
        if not values:
            raise ValueError("Randomization.sample_seeded: need at least one seed")
        parts = [self.sample(torch.Generator().manual_seed(s), 1, body_names) for s in values]
        return EpisodeParams.cat(parts)

    def to_dict(self) -> dict:
        """JSON-able fields (for checkpoints and logs)."""
        return {
            f.name: list(v) if isinstance(v := getattr(self, f.name), tuple) else v
            for f in fields(self)
        }


def _checked_range(name: str, value) -> Range:
    """Field ``name``'s ``value`` as a (lo, hi) tuple of floats; ValueError (naming the field,
    its meaning and an example) unless it is two finite numbers, lo <= hi, within bounds."""
    _kind, _identity, low, high, meaning = FIELD_SPECS[name]
    where = f"Randomization.{name} = {value!r} ({meaning})"
    if (
        not isinstance(value, (tuple, list))
        or len(value) != 2
        or not all(_is_number(v) for v in value)
    ):
        raise ValueError(
            f"{where}: expected a range (lo, hi) of two numbers, e.g. {name}=({_example(name)})"
        )
    lo, hi = float(value[0]), float(value[1])
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise ValueError(f"{where}: the ends must be finite numbers")
    if lo > hi:
        raise ValueError(f"{where}: lo > hi; write {name}=({hi!r}, {lo!r})")
    if lo < low or hi > high:
        raise ValueError(
            f"{where}: must lie within [{low}, {high}]; e.g. {name}=({_example(name)})"
        )
    return (lo, hi)


def _checked_number(name: str, value) -> float:
    """Field ``name``'s ``value`` (a "max" or a "prob") as a float; ValueError (naming the
    field, its meaning and an example) unless it is one finite number within bounds."""
    kind, _identity, low, high, meaning = FIELD_SPECS[name]
    where = f"Randomization.{name} = {value!r} ({meaning})"
    if not _is_number(value) or not math.isfinite(float(value)):
        raise ValueError(f"{where}: expected one finite number")
    if not low <= float(value) <= high:
        what = "a probability in [0, 1]" if kind == "prob" else f"in [{low}, {high}]"
        hint = " (a maximum: it is drawn in [-m, m])" if kind == "max" and value < 0 else ""
        raise ValueError(f"{where}: must be {what}{hint}; e.g. {name}={_example(name)}")
    return float(value)


def _is_number(v) -> bool:
    """A real number (int or float, not bool)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _example(name: str) -> str:
    """A valid value of field ``name``, as source text for error messages."""
    kind, identity, low, high = FIELD_SPECS[name][:4]
    if kind == "prob":
        return "0.25"
    if kind == "max":
        return "0.05" if name in ("camera_translation", "background_offset") else "2.0"
    if low == -0.5:
        return "-0.05, 0.05"
    return f"{max(low, 0.8 * identity)!r}, {1.2 * identity!r}" if identity else "0.0, 0.02"
