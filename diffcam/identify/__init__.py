"""A scene's physics from a video of it: `identify`, the engine of ``diffcam fit``.

* `observation`: the video prepared for a fit (working size, times, plate, masks).
* `blobs`: connected foreground regions per frame.
* `keys`: the user's keys as the optimiser's parameters.
* `centres`: the first stage, projected body centres against the blobs.
* `appearance`: each moving body's texture learnt from the frames.
* `run`: `identify`, its stages, scores and uncertainties.
"""

from .errors import IdentifyError
from .observation import Observation, observe
from .run import Identification, Score, Settings, identify

__all__ = ["identify", "Identification", "Settings", "Score", "IdentifyError", "observe",
           "Observation"]  # fmt: skip
