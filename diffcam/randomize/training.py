"""Randomisation in training: per-episode seeds carried in the batch, and `RandomizedEpisodes`,
which draws each episode's randomisation from its seed."""

from __future__ import annotations

import torch

from .config import Randomization
from .scene import RandomizedScene

__all__ = ["SEED_LIMIT", "RandomizedEpisodes", "append_seeds"]

SEED_LIMIT = 2**24  # seeds ride in a float32 column of the batch: integers below 2^24 are exact


def append_seeds(batch: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``batch`` (n, ...) with a last column of per-episode seeds drawn from ``generator``
    (integers in [0, 2^24), exact in float32), for `RandomizedEpisodes`: the seeds travel
    with the samples, so every process of a distributed run randomises its slice alike and
    a resumed run draws the same episodes."""
    seeds = torch.randint(0, SEED_LIMIT, (batch.shape[0], 1), generator=generator)
    return torch.cat([batch, seeds.to(batch.dtype)], 1)


class RandomizedEpisodes(torch.nn.Module):
    """Wraps a module of episodes that draws through its ``scene`` attribute (e.g.
    `tasks.swingup.SwingUpEpisodes`): each forward takes a batch whose last column
    holds per-episode seeds (`append_seeds`), draws each episode's randomisation from its
    seed (`Randomization.sample_seeded`), runs the wrapped module on the rest of the batch
    with the scene replaced by the `RandomizedScene`, and puts the plain scene back.

    Its parameters are the wrapped module's (``episodes``)."""

    def __init__(self, episodes: torch.nn.Module, randomization: Randomization) -> None:
        super().__init__()
        if not hasattr(episodes, "scene"):
            raise TypeError(
                "RandomizedEpisodes wraps a module with a `scene` attribute that its forward "
                f"draws with; {type(episodes).__name__} has none"
            )
        self.episodes = episodes
        self.randomization = randomization

    def forward(self, batch: torch.Tensor):
        scene = self.episodes.scene
        seeds, rest = batch[:, -1], batch[:, :-1]
        params = self.randomization.sample_seeded(seeds.detach().cpu(), scene.body_names)
        self.episodes.scene = RandomizedScene(scene, params, self.randomization)
        try:
            return self.episodes(rest)
        finally:
            self.episodes.scene = scene
