"""Reading an MJCF file into a small element tree that knows each element's XML path and line.

The standard library's expat parser builds `Node`s (ElementTree keeps no line numbers); errors
are `MJCFError`s, a `SceneError` whose key is the element's path inside the file, e.g.
``worldbody/body[cart]/body[pole]/geom[cpole]`` (an element is named by its ``name`` attribute,
else by its index among its parent's children of the same tag, from 0).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from xml.parsers import expat

from ..errors import SceneError

__all__ = ["MJCFError", "Node", "parse_mjcf_text", "read_mjcf_file"]


class MJCFError(SceneError):
    """An MJCF file diffcam cannot import: malformed XML, or an element or attribute diffcam
    does not support. ``key`` is the element's XML path (``worldbody/body[pole]/geom[1]``),
    ``line`` its line in the file (or None)."""

    def __init__(self, reason, *, file=None, key=None, accepted=None, line=None):
        self.line = line
        super().__init__(reason, file=file, key=key, accepted=accepted)

    def _format(self) -> str:
        text = super()._format()
        return text if self.line is None else f"{text} [line {self.line}]"

    def __reduce__(self):
        return (_rebuild, (self.reason, self.file, self.key, self.accepted, self.line))


def _rebuild(reason, file, key, accepted, line):
    return MJCFError(reason, file=file, key=key, accepted=accepted, line=line)


@dataclass(eq=False)
class Node:
    """One XML element: tag, attributes (as written), children, line, parent and path."""

    tag: str
    attrib: dict[str, str]
    line: int
    parent: Node | None = None
    children: list[Node] = field(default_factory=list)
    path: str = ""

    def find_all(self, tag: str) -> list[Node]:
        return [c for c in self.children if c.tag == tag]


def parse_mjcf_text(text: str | bytes, file: str = "<mjcf>") -> Node:
    """Parse MJCF text into a tree of `Node`s rooted at ``<mujoco>`` (paths set)."""
    parser = expat.ParserCreate()
    root: list[Node] = []
    stack: list[Node] = []

    def start(tag, attrib):
        node = Node(tag, dict(attrib), parser.CurrentLineNumber)
        if stack:
            node.parent = stack[-1]
            stack[-1].children.append(node)
        else:
            root.append(node)
        stack.append(node)

    def end(tag):
        stack.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(text, True)
    except expat.ExpatError as e:
        raise MJCFError(
            f"malformed XML: {expat.errors.messages[e.code]} (line {e.lineno}, column "
            f"{e.offset + 1})",
            file=file,
        ) from None
    top = root[0]
    if top.tag != "mujoco":
        raise MJCFError(
            f"the root element is <{top.tag}>, not <mujoco>: not an MJCF file",
            file=file,
            key=top.tag,
            line=top.line,
        )
    _set_paths(top, "")
    return top


def _set_paths(node: Node, prefix: str) -> None:
    counts: dict[str, int] = {}
    for child in node.children:
        index = counts.get(child.tag, 0)
        counts[child.tag] = index + 1
        if not prefix:  # the sections under <mujoco>: worldbody, default, actuator, ...
            child.path = child.tag
        else:
            child.path = f"{prefix}{child.tag}[{child.attrib.get('name') or index}]"
        _set_paths(child, child.path + "/")


def read_mjcf_file(path: str | Path) -> Node:
    """Read and parse an MJCF file (`MJCFError` for a missing, unreadable or malformed file)."""
    p = Path(path)
    if not p.exists():
        raise MJCFError("no such MJCF file", file=str(path))
    if not p.is_file():
        raise MJCFError("not a file", file=str(path))
    try:
        data = p.read_bytes()
    except OSError as e:
        raise MJCFError(f"cannot read the file ({e})", file=str(path)) from None
    return parse_mjcf_text(data, file=str(path))
