"""Masses from the geoms (``mass``, else ``density`` times the volume, as MuJoCo's
``inertiafromgeom``; a mesh's volume is in `diffcam.mjcf.meshes`); explicit inertias are
refused."""

from __future__ import annotations

import math

from .context import ConversionContext
from .scene_values import clean
from .xmltree import Node


def check_mass_from_geoms(ctx: ConversionContext, body_node: Node) -> None:
    """Refuse a body whose mass distribution does not come from its geoms: an ``<inertial>``
    that MuJoCo would use, or ``<compiler inertiafromgeom="false">``."""
    for c in body_node.children:
        if c.tag == "inertial":
            if ctx.inertiafromgeom == "true":
                ctx.note('<inertial> is ignored (compiler inertiafromgeom="true")')
            else:
                raise ctx.error(
                    c,
                    "explicit <inertial> is not supported: diffcam derives a body's mass "
                    "distribution from its shape (uniform density)",
                    'geom mass/density without <inertial>, or <compiler inertiafromgeom="true">',
                )
    if ctx.inertiafromgeom == "false":
        raise ctx.error(
            body_node, 'compiler inertiafromgeom="false" is not supported',
            'inertiafromgeom="auto" or "true" (masses from the geoms)',
        )  # fmt: skip


def geom_mass(ctx: ConversionContext, node: Node, attrs: dict, volume: float) -> float:
    """kg of the geom of a moving body of ``volume`` (m^3)."""
    if "mass" in attrs:
        mass = ctx.number(node, attrs, "mass", 0.0)
        if mass <= 0:
            raise ctx.error(node, f"mass={mass}: a geom of a moving body needs a mass", "> 0")
        return mass
    density = ctx.number(node, attrs, "density", 1000.0)
    if density <= 0:
        raise ctx.error(node, f"density={density}: a geom of a moving body needs a mass", "> 0")
    # The mass itself (not the density), so that ``bodies.<name>.mass`` overrides.
    return clean(density * volume)


def shape_volume(shape: str, size) -> float:
    """m^3 of a shape of the scene's size (as MuJoCo's inertiafromgeom computes it)."""
    if shape == "sphere":
        return 4.0 / 3.0 * math.pi * size**3
    if shape == "box":
        return size[0] * size[1] * size[2]
    cylinder = math.pi * size[0] ** 2 * size[1]
    return cylinder + (4.0 / 3.0 * math.pi * size[0] ** 3 if shape == "capsule" else 0.0)
