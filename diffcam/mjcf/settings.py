"""``<compiler>`` and ``<option>``: units, inertia and limit conventions, the timestep, gravity
and the enable/disable flags."""

from __future__ import annotations

from .context import ConversionContext
from .supported import COMPILER_ATTRS, IGNORED_OPTION_ATTRS, OPTION_ATTRS
from .xmltree import Node


def read_compiler(ctx: ConversionContext, nodes: list[Node]) -> None:
    for node in nodes:
        a = node.attrib
        for key in a:
            if key not in COMPILER_ATTRS:
                raise ctx.error(node, f"attribute {key!r} of <compiler> is not supported")
        if "angle" in a:
            ctx.degrees = ctx.boolean(node, a, "angle", ("degree", "radian")) == "degree"
        if "eulerseq" in a:
            seq = a["eulerseq"]
            if len(seq) != 3 or any(c not in "xyzXYZ" for c in seq):
                raise ctx.error(node, f'eulerseq="{seq}" is not valid', 'e.g. "xyz", "XYZ", "zyx"')
            ctx.eulerseq = seq
        if "inertiafromgeom" in a:
            ctx.inertiafromgeom = ctx.boolean(node, a, "inertiafromgeom", ("true", "false", "auto"))
        for key in ("meshdir", "assetdir"):
            if key in a:
                setattr(ctx, key, a[key])
        if "strippath" in a:
            ctx.strippath = ctx.boolean(node, a, "strippath") == "true"
        if "autolimits" in a:
            ctx.autolimits = ctx.boolean(node, a, "autolimits") == "true"
        if a.get("coordinate", "local") != "local":
            raise ctx.error(
                node, 'coordinate="global" is not supported (nor by MuJoCo 2.3.3 and later)',
                'coordinate="local"',
            )  # fmt: skip
        if ctx.number(node, a, "settotalmass", -1.0) > 0:
            raise ctx.error(node, "settotalmass is not supported", "geom masses or densities")
        for key in ("boundmass", "boundinertia"):
            if ctx.number(node, a, key, 0.0) > 0:
                ctx.note(f"<compiler {key}> is ignored")
        if a.get("balanceinertia") == "true":
            ctx.note("<compiler balanceinertia> is ignored (geom inertias are valid)")


def read_option(ctx: ConversionContext, nodes: list[Node]) -> None:
    for node in nodes:
        a = node.attrib
        for key in a:
            if key in IGNORED_OPTION_ATTRS:
                ctx.note(f"<option {key}> is ignored (diffcam's solver has its own settings)")
            elif key not in OPTION_ATTRS:
                raise ctx.error(node, f"attribute {key!r} of <option> is not supported")
        ctx.timestep = ctx.number(node, a, "timestep", ctx.timestep)
        if not 0 < ctx.timestep <= 1:
            raise ctx.error(node, f"timestep={ctx.timestep} is out of range", "(0, 1] s")
        ctx.gravity = ctx.floats(node, a, "gravity", (3,), ctx.gravity)
        if "integrator" in a:
            ctx.note(
                f'<option integrator="{a["integrator"]}"> is not used: diffcam integrates '
                "with its own second-order scheme"
            )
        wind = ctx.floats(node, a, "wind", (3,), [0.0, 0.0, 0.0])
        if (
            any(wind)
            or ctx.number(node, a, "density", 0.0)
            or ctx.number(node, a, "viscosity", 0.0)
        ):
            raise ctx.error(
                node, "wind, density and viscosity (fluid forces) are not supported", "0"
            )
        for child in node.children:
            _read_flag(ctx, child)


def _read_flag(ctx: ConversionContext, node: Node) -> None:
    """``<option><flag contact|gravity|limit|damper="disable">``; other flags are noted."""
    if node.tag != "flag":
        raise ctx.error(node, f"<option><{node.tag}> is not supported")
    for key, value in node.attrib.items():
        if value not in ("enable", "disable"):
            raise ctx.error(node, f'{key}="{value}" is not valid', "enable | disable")
        off = value == "disable"
        if key == "contact":
            ctx.contact_disabled = off
        elif key == "gravity":
            ctx.gravity_disabled = off
        elif key == "limit":
            ctx.limits_disabled = off
        elif key == "damper":
            ctx.damping_disabled = off
        else:
            ctx.note(f"<option><flag {key}> is ignored")
