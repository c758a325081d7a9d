"""The error of a mesh file or of a mesh that cannot be used as asked."""

from __future__ import annotations

__all__ = ["MeshError"]


class MeshError(ValueError):
    """An unreadable mesh file or an unusable mesh.

    Attributes:
        file: the mesh file (str) or None for a mesh made in memory.
        line: the 1-based line of the file (int) or None.
        reason: what is wrong (and, where there is one, the fix).
    """

    def __init__(self, reason: str, *, file=None, line: int | None = None):
        self.file = None if file is None else str(file)
        self.line = line
        self.reason = reason
        head = self.file or ""
        if line is not None:
            head = f"{head}:{line}" if head else f"line {line}"
        super().__init__(f"{head}: {reason}" if head else reason)

    def __reduce__(self):  # keep pickling (multiprocessing, pytest-xdist) working
        return (_rebuild, (self.reason, self.file, self.line))


def _rebuild(reason, file, line):
    return MeshError(reason, file=file, line=line)
