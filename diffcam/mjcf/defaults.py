"""``<default>`` classes: reading them (nested classes inherit their parent's) and resolving an
element's attributes through ``class`` / ``childclass``."""

from __future__ import annotations

from .context import ConversionContext
from .supported import ELEMENT_ATTRS
from .xmltree import Node


def read_default_class(ctx: ConversionContext, node: Node, parent: str | None) -> None:
    """Record a ``<default>`` (``parent`` None: the top-level one, class ``main``) and the
    classes nested in it."""
    name = node.attrib.get("class", "main" if parent is None else None)
    if name is None:
        raise ctx.error(node, "a nested <default> needs a class name", 'class="..."')
    for key in node.attrib:
        if key != "class":
            raise ctx.error(node, f"attribute {key!r} of <default> is not supported")
    if parent is not None and name in ctx.defaults:
        raise ctx.error(node, f"default class {name!r} is defined twice")
    table = {tag: dict(attrs) for tag, attrs in ctx.defaults.get(parent or "main", {}).items()}
    if parent is None:
        table = ctx.defaults["main"]
    ctx.defaults[name] = table
    for child in node.children:
        if child.tag == "default":
            read_default_class(ctx, child, name)
            continue
        # <general> defaults apply to the actuators, of which diffcam reads <motor>.
        tag = "motor" if child.tag == "general" else child.tag
        if tag in ELEMENT_ATTRS:
            ctx.check_attrs(child, child.attrib, tag)
        table.setdefault(tag, {}).update(child.attrib)


def class_attrs(
    ctx: ConversionContext, node: Node, childclass: str | None, tag: str | None = None
) -> dict:
    """An element's attributes: its default class's (``class``, else the enclosing
    ``childclass``, else main), overridden by its own."""
    cls = node.attrib.get("class") or childclass or "main"
    if cls not in ctx.defaults:
        raise ctx.error(node, f"unknown default class {cls!r}", ", ".join(ctx.defaults) or "none")
    merged = dict(ctx.defaults[cls].get(tag or node.tag, {}))
    merged.update(node.attrib)
    merged.pop("class", None)
    return merged
