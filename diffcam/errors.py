"""User-facing errors of the scene layer.

A `SceneError` is what a user's mistake in a scene file (or in the overrides given to
`diffcam.load_scene`) turns into: one message naming the file, the key path and what would be
accepted, e.g.::

    scenes/my.toml: bodies.pole.masss: unknown key; did you mean 'mass'?
    (accepted: name, shape, size, mass, density, ...)

The command line prints these messages (no traceback) and exits with status 2.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

__all__ = ["SceneError", "did_you_mean"]


class SceneError(ValueError):
    """An invalid scene file, override or texture.

    Attributes:
        file: the scene file (str) or None.
        key: the key path inside it (``"bodies.pole.mass"``) or None for the whole file.
        reason: what is wrong.
        accepted: what would be accepted (or None).
    """

    def __init__(
        self,
        reason: str,
        *,
        file: str | None = None,
        key: str | None = None,
        accepted: str | None = None,
    ):
        self.file = None if file is None else str(file)
        self.key = key
        self.reason = reason
        self.accepted = accepted
        super().__init__(self._format())

    def _format(self) -> str:
        parts = [p for p in (self.file, self.key) if p]
        head = ": ".join(parts)
        msg = f"{head}: {self.reason}" if head else self.reason
        if self.accepted:
            msg += f" (accepted: {self.accepted})"
        return msg

    def __reduce__(self):  # keep pickling (multiprocessing, pytest-xdist) working
        return (
            _rebuild,
            (self.reason, self.file, self.key, self.accepted),
        )


def _rebuild(reason, file, key, accepted):
    return SceneError(reason, file=file, key=key, accepted=accepted)


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """``"; did you mean 'x'?"`` for the closest of ``choices`` to ``word``, or ``""``."""
    if not isinstance(word, str):
        return ""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""
