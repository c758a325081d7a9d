"""Collisions: one ``collide`` flag per scene body from the geoms' ``contype``/``conaffinity``
bitmasks; ``<contact>`` pairs and excludes are refused."""

from __future__ import annotations

from .context import ConversionContext, Part
from .xmltree import Node


def _can_touch(p: Part, q: Part) -> bool:
    """MuJoCo's bitmask test for whether two geoms may collide."""
    return bool((p.contype & q.conaffinity) or (q.contype & p.conaffinity))


def set_collide_flags(ctx: ConversionContext) -> None:
    """``collide`` per body: whether its contype/conaffinity lets it touch any other geom."""
    if ctx.contact_disabled:
        for p in ctx.parts:
            p.body["collide"] = False
        return
    any_pair_mismatch = False
    for p in ctx.parts:
        partners = [q for q in ctx.parts if q is not p and _can_touch(p, q)]
        p.body["collide"] = bool(partners)
    flagged = [p for p in ctx.parts if p.body["collide"]]
    for i, p in enumerate(flagged):
        for q in flagged[i + 1 :]:
            if not _can_touch(p, q):
                any_pair_mismatch = True
    if any_pair_mismatch:
        ctx.note(
            "contype/conaffinity: some pairs MuJoCo keeps apart may collide in diffcam "
            "(diffcam has one collide flag per body)"
        )
    if flagged:
        ctx.note(
            "contacts: diffcam's contacts are hard (impulses) and use the geometric mean of "
            "friction coefficients (MuJoCo: soft constraints, the maximum); cylinders collide "
            "with planes by their rims and with other shapes as their bounding box"
        )
    if any(p.body["shape"] == "mesh" for p in flagged):
        ctx.note(
            "meshes collide by their convex hulls, as in MuJoCo: exactly with planes, boxes, "
            "spheres, capsules and other meshes, and as the box bounding the hull with cylinders"
        )


def check_contact_sections(ctx: ConversionContext, nodes: list[Node]) -> None:
    """Refuse ``<contact>`` pairs/excludes unless nothing collides (then they are noted)."""
    for contact in nodes:
        if contact.children:
            if any(p.body.get("collide", True) for p in ctx.parts):
                raise ctx.error(
                    contact.children[0],
                    "<contact> pairs and excludes are not supported",
                    "contype / conaffinity bitmasks on the geoms",
                )
            ctx.note("<contact> is ignored: nothing in the model collides")
