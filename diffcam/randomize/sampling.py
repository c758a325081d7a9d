"""Per-episode values: `EpisodeParams` and the draw that makes them from a `Randomization`.

The draw is reproducible: the same ``torch.Generator`` state gives the same values, and
every field is drawn in a fixed order whatever the ranges are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING

import torch

from .spec import FIELD_SPECS

if TYPE_CHECKING:
    from .config import Randomization

__all__ = ["EpisodeParams", "draw_episode_params"]


@dataclass(frozen=True)
class EpisodeParams:
    """Per-episode values drawn by `Randomization.sample` (B episodes, N bodies).

    texture_brightness, texture_contrast, texture_saturation, texture_hue: (B, N).
    procedural: (B, N) bool, the body wears `procedural_texture(texture_seed)`.
    texture_seed: (B, N) long.
    ambient_scale, intensity_scale: (B,) factors. light_rotation: (B, 3) rotation vector
        (rad, world frame) applied to the light direction.
    camera_translation: (B, 3) m, world frame, added to the camera centre.
    camera_rotation: (B, 3) rotation vector (rad) in the camera's frame: world_from_camera
        becomes ``R @ exp(skew(camera_rotation))``.
    focal_scale: (B,) factor on fx, fy. principal_point: (B, 2) px added to (cx, cy).
    background_offset: (B, 3). procedural_background: (B,) bool. background_seed: (B,) long.
    brightness, contrast, saturation, hue, noise_std, shot_noise: (B,). noise_seed: (B,) long.
    body_names: the bodies of the N columns.
    """

    texture_brightness: torch.Tensor
    texture_contrast: torch.Tensor
    texture_saturation: torch.Tensor
    texture_hue: torch.Tensor
    procedural: torch.Tensor
    texture_seed: torch.Tensor
    ambient_scale: torch.Tensor
    intensity_scale: torch.Tensor
    light_rotation: torch.Tensor
    camera_translation: torch.Tensor
    camera_rotation: torch.Tensor
    focal_scale: torch.Tensor
    principal_point: torch.Tensor
    background_offset: torch.Tensor
    procedural_background: torch.Tensor
    background_seed: torch.Tensor
    brightness: torch.Tensor
    contrast: torch.Tensor
    saturation: torch.Tensor
    hue: torch.Tensor
    noise_std: torch.Tensor
    shot_noise: torch.Tensor
    noise_seed: torch.Tensor
    body_names: tuple[str, ...] = ()

    @property
    def batch_size(self) -> int:
        """B, the number of episodes."""
        return int(self.noise_seed.shape[0])

    def tensors(self) -> dict[str, torch.Tensor]:
        """Every field but ``body_names``, by name."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "body_names"}

    def __getitem__(self, index) -> EpisodeParams:
        """The episodes ``index`` selects (an int keeps a batch axis of 1)."""
        if isinstance(index, int):
            index = slice(index, index + 1 if index != -1 else None)
        return EpisodeParams(
            **{k: v[index] for k, v in self.tensors().items()}, body_names=self.body_names
        )

    @staticmethod
    def cat(parts: list[EpisodeParams]) -> EpisodeParams:
        """The episodes of ``parts`` (drawn for the same bodies) in one batch."""
        names = {p.body_names for p in parts}
        if len(names) != 1:
            raise ValueError("EpisodeParams.cat: the parts were drawn for different bodies")
        keys = parts[0].tensors()
        return EpisodeParams(
            **{k: torch.cat([getattr(p, k) for p in parts]) for k in keys},
            body_names=parts[0].body_names,
        )

    def equal(self, other: EpisodeParams) -> bool:
        """Whether ``other`` holds the same bodies and exactly the same values."""
        return self.body_names == other.body_names and all(
            torch.equal(a, getattr(other, k)) for k, a in self.tensors().items()
        )


def draw_episode_params(
    randomization: Randomization,
    generator: torch.Generator,
    batch: int,
    body_names: list[str] | tuple[str, ...] = (),
) -> EpisodeParams:
    """`Randomization.sample`: ``batch`` episodes' values drawn from ``generator`` (CPU).

    ``body_names``: the scene's bodies in state order, for the per-body texture values.
    Every field is drawn whether or not it is the identity, in a fixed order, so the draws
    of one field do not depend on the others' ranges. Float64 tensors on the CPU.
    """
    _check_sample_args(randomization, generator, batch, body_names)
    B, N = int(batch), len(body_names)
    f64 = torch.float64

    def uniform(shape, lo, hi):
        u = torch.rand(shape, generator=generator, dtype=f64)
        return lo + (hi - lo) * u

    def draw(name, shape=()):
        kind = FIELD_SPECS[name][0]
        value = getattr(randomization, name)
        if kind == "range":
            return uniform((B, *shape), *value)
        return uniform((B, *shape), -value, value)  # "max"

    def seeds(shape):
        return torch.randint(0, 2**31 - 1, shape, generator=generator)

    selected = torch.tensor(
        [randomization.bodies is None or name in randomization.bodies for name in body_names],
        dtype=torch.bool,
    )
    procedural = (
        torch.rand((B, N), generator=generator, dtype=f64) < randomization.procedural_textures
    )
    tilt = randomization.light_direction_deg
    axis = torch.randn((B, 3), generator=generator, dtype=f64)
    axis = axis / torch.linalg.vector_norm(axis, dim=-1, keepdim=True).clamp(min=1e-12)
    angle = uniform((B,), 0.0, math.radians(tilt))
    return EpisodeParams(
        texture_brightness=torch.where(selected, draw("texture_brightness", (N,)), 1.0),
        texture_contrast=torch.where(selected, draw("texture_contrast", (N,)), 1.0),
        texture_saturation=torch.where(selected, draw("texture_saturation", (N,)), 1.0),
        texture_hue=torch.where(selected, draw("texture_hue", (N,)), 0.0),
        procedural=procedural & selected,
        texture_seed=seeds((B, N)),
        ambient_scale=draw("ambient_scale"),
        intensity_scale=draw("intensity_scale"),
        light_rotation=axis * angle.unsqueeze(-1),
        camera_translation=draw("camera_translation", (3,)),
        camera_rotation=torch.deg2rad(draw("camera_rotation_deg", (3,))),
        focal_scale=draw("focal_scale"),
        principal_point=draw("principal_point_px", (2,)),
        background_offset=draw("background_offset", (3,)),
        procedural_background=(
            torch.rand((B,), generator=generator, dtype=f64) < randomization.procedural_background
        ),
        background_seed=seeds((B,)),
        brightness=draw("brightness"),
        contrast=draw("contrast"),
        saturation=draw("saturation"),
        hue=draw("hue"),
        noise_std=draw("noise_std"),
        shot_noise=draw("shot_noise"),
        noise_seed=seeds((B,)),
        body_names=tuple(body_names),
    )


def _check_sample_args(randomization, generator, batch, body_names) -> None:
    """TypeError / ValueError for a bad generator, a batch below 1, or
    ``randomization.bodies`` naming bodies not in ``body_names``."""
    if not isinstance(generator, torch.Generator):
        raise TypeError(
            f"Randomization.sample: generator must be a torch.Generator, got "
            f"{type(generator).__name__} (e.g. torch.Generator().manual_seed(0))"
        )
    if int(batch) < 1:
        raise ValueError(f"Randomization.sample: batch must be at least 1, got {batch}")
    if randomization.bodies is not None:
        unknown = sorted(set(randomization.bodies) - set(body_names))
        if unknown:
            raise ValueError(
                f"Randomization.bodies names {unknown}, not bodies of the scene "
                f"({list(body_names)}); pass body_names=scene.body_names, or fix the names"
            )
