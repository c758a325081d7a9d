"""Domain randomisation for pixel training: per-episode appearance, camera and sensor.

- `Randomization` (`config`): a frozen, validated record of *ranges*, the identity by
  default; `Randomization.moderate()` is a ready-made preset.
- `EpisodeParams` (`sampling`): per-episode (per batch element) values, drawn reproducibly
  by `Randomization.sample(generator, batch, body_names)` from a seeded ``torch.Generator``,
  or per seed by `Randomization.sample_seeded`.
- `RandomizedScene` / `randomize` (`scene`): the scene with each batch element drawn as its
  episode's appearance (textures, light, background, camera), then colour jitter and sensor
  noise on the image. It steps like the scene; everything but drawing is the scene's own.
- `color_jitter` and `sensor_noise` (`image_ops`): the image-space operations on their own
  (`color_jitter_fused`: the jitter as one affine colour map per image, as randomised
  scenes apply it; `jitter_matrix`: that map);
  `procedural_texture` (`textures`): the seeded textures bodies and backgrounds may wear.
- `append_seeds` / `RandomizedEpisodes` (`training`): per-episode seeds carried in the
  training batch, and a wrapper that randomises each episode from its seed.
"""

from .config import Randomization
from .image_ops import color_jitter, color_jitter_fused, jitter_matrix, sensor_noise
from .sampling import EpisodeParams
from .scene import RandomizedScene, randomize
from .spec import Range
from .textures import procedural_texture
from .training import SEED_LIMIT, RandomizedEpisodes, append_seeds

__all__ = [
    "SEED_LIMIT",
    "EpisodeParams",
    "RandomizedEpisodes",
    "Randomization",
    "RandomizedScene",
    "Range",
    "append_seeds",
    "color_jitter",
    "color_jitter_fused",
    "jitter_matrix",
    "procedural_texture",
    "randomize",
    "sensor_noise",
]
