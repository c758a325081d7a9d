"""Reading an element's attribute values, with `MJCFError`s that name the element, and the notes
on what the import ignores or approximates."""

from __future__ import annotations

import math

from .supported import ELEMENT_ATTRS
from .xmltree import MJCFError, Node


class AttributeReader:
    """Typed attribute values of the elements of one MJCF file, and the notes collected."""

    def __init__(self, file: str):
        self.file = file
        self.notes: list[str] = []

    def error(self, node: Node | None, reason: str, accepted: str | None = None) -> MJCFError:
        """The error to raise about ``node`` (None: the model as a whole)."""
        return MJCFError(
            reason,
            file=self.file,
            key=None if node is None else (node.path or node.tag),
            accepted=accepted,
            line=None if node is None else node.line,
        )

    def note(self, text: str) -> None:
        """Record something ignored or approximated (each sentence once)."""
        if text not in self.notes:
            self.notes.append(text)

    def floats(self, node: Node, attrs: dict, key: str, counts=None, default=None):
        """The numbers of attribute ``key`` (a list), or ``default`` when absent."""
        if key not in attrs:
            return default
        text = attrs[key]
        try:
            values = [float(v) for v in text.split()]
        except ValueError:
            raise self.error(node, f'{key}="{text}" is not a list of numbers') from None
        if counts is not None and len(values) not in counts:
            want = " or ".join(str(c) for c in counts)
            raise self.error(node, f'{key}="{text}" has {len(values)} numbers', f"{want} numbers")
        if not all(math.isfinite(v) for v in values):
            raise self.error(node, f'{key}="{text}" is not finite')
        return values

    def number(self, node: Node, attrs: dict, key: str, default: float) -> float:
        values = self.floats(node, attrs, key, (1,), None)
        return default if values is None else values[0]

    def integer(self, node: Node, attrs: dict, key: str, default: int) -> int:
        if key not in attrs:
            return default
        try:
            return int(attrs[key])
        except ValueError:
            raise self.error(node, f'{key}="{attrs[key]}" is not an integer') from None

    def boolean(self, node: Node, attrs: dict, key: str, choices=("true", "false")) -> str | None:
        """The value of a keyword attribute (one of ``choices``), or None when absent."""
        if key not in attrs:
            return None
        value = attrs[key]
        if value not in choices:
            raise self.error(node, f'{key}="{value}" is not valid', " | ".join(choices))
        return value

    def check_attrs(self, node: Node, attrs: dict, tag: str | None = None) -> None:
        """Refuse attributes the importer does not know; note the ignored ones."""
        handled, ignored = ELEMENT_ATTRS[tag or node.tag]
        for key in attrs:
            if key in handled:
                continue
            if key in ignored:
                self.note(f"<{node.tag} {key}=...> is ignored (diffcam has no equivalent)")
                continue
            raise self.error(
                node,
                f'attribute {key}="{attrs[key]}" is not supported on <{node.tag}>',
                ", ".join(sorted(handled)),
            )
