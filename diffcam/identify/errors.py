"""`IdentifyError`: a fit from a video that cannot start, and what to do about it."""

from __future__ import annotations

__all__ = ["IdentifyError"]


class IdentifyError(ValueError):
    """The video, the scene or the keys do not allow a fit; the message names the input and
    the fix."""
