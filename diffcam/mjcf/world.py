"""The scene's ``[world]``: gravity, timestep, and which engine applies (``coordinates``)."""

from __future__ import annotations

from .context import ConversionContext
from .scene_values import clean


def world_table(ctx: ConversionContext) -> dict:
    gravity = [0.0, 0.0, 0.0] if ctx.gravity_disabled else ctx.gravity
    world = {"gravity": clean(gravity), "timestep": ctx.timestep}
    world["coordinates"] = "reduced" if reduced_coordinates_apply(ctx) else "maximal"
    return world


def reduced_coordinates_apply(ctx: ConversionContext) -> bool:
    """Whether the joints form a tree of hinges, sliders and welds with nothing that can
    touch (physics.articulated's conditions), so the exact joint-space engine applies, as in
    MuJoCo."""
    if ctx.free_bodies or not ctx.joints:
        return False
    if any(j["type"] == "ball" for j in ctx.joints):
        return False
    if not any(j["type"] in ("hinge", "slider") for j in ctx.joints):
        return False
    jointed = {frozenset((j["parent"], j["child"])) for j in ctx.joints}
    segments = ("sphere", "capsule")
    bodies = [p.body for p in ctx.parts if p.body.get("collide")]
    for i, b in enumerate(bodies):
        for c in bodies[i + 1 :]:
            if b.get("static") and c.get("static"):
                continue
            if frozenset((b["name"], c["name"])) in jointed:
                continue
            planes = (b["shape"] == "plane") + (c["shape"] == "plane")
            if planes == 1 or (b["shape"] in segments and c["shape"] in segments):
                return False
    return True
