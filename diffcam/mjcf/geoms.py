"""One ``<geom>`` to one scene body: its shape and size (a mesh: its file and scale), world pose,
mass, colour, friction and contact bitmasks."""

from __future__ import annotations

import numpy as np

from .context import ConversionContext, Part
from .defaults import class_attrs
from .geom_sizes import geom_frame_and_size, geom_shape
from .mass import geom_mass, shape_volume
from .meshes import geom_mesh_asset, mesh_volume
from .rotations import matrix_to_quat
from .scene_values import clean, unique_name
from .xmltree import Node

DEFAULT_RGBA = (0.5, 0.5, 0.5, 1.0)  # MuJoCo's geom rgba when none is given


def read_geom(
    ctx: ConversionContext,
    node: Node,
    rot: np.ndarray,
    pos: np.ndarray,
    childclass: str | None,
    static: bool,
    name_hint: str | None,
) -> Part:
    """The scene body of a geom whose body frame is (``rot``, ``pos``) in the world, named
    ``name_hint`` if given (else after the geom); it is appended to ``ctx.parts``."""
    a = class_attrs(ctx, node, childclass)
    ctx.check_attrs(node, a)
    gtype = geom_shape(ctx, node, a)
    local_rot, local_pos, scene_size = geom_frame_and_size(ctx, node, a, gtype)
    if gtype == "plane" and not static:
        raise ctx.error(
            node,
            "a plane must belong to <worldbody> or a static body",
            "a box for a moving slab",
        )
    world_rot = rot @ local_rot
    world_pos = rot @ local_pos + pos
    name = unique_name(
        name_hint or a.get("name") or "", ctx.used_body_names, f"geom{len(ctx.parts)}"
    )
    body: dict = {"name": name, "shape": gtype}
    if gtype == "mesh":
        # the file's frame is posed like a primitive's; the scene re-centres the body at the
        # mesh's centre of mass along its principal axes, as MuJoCo does (diffcam.mjcf.meshes)
        asset = geom_mesh_asset(ctx, node, a)
        body["mesh"] = str(asset.path)
        if asset.scale != [1.0, 1.0, 1.0]:
            scale = clean(asset.scale)
            body["scale"] = scale[0] if len(set(scale)) == 1 else scale
    else:
        body["size"] = clean(scene_size)
    if static:
        body["static"] = True
    elif gtype == "mesh":  # checks that the mesh is closed, as its inertia needs
        body["mass"] = geom_mass(ctx, node, a, mesh_volume(ctx, node, asset))
    else:
        body["mass"] = geom_mass(ctx, node, a, shape_volume(gtype, scene_size))
    body["position"] = clean(world_pos)
    quat = matrix_to_quat(world_rot)
    if not np.allclose(quat, [1.0, 0.0, 0.0, 0.0], atol=1e-12):
        body["quat"] = clean(quat)
    body["color"] = _geom_color(ctx, node, a)
    friction = ctx.floats(node, a, "friction", (1, 2, 3), [1.0])
    body["friction"] = friction[0]
    part = Part(
        body=body,
        contype=ctx.integer(node, a, "contype", 1),
        conaffinity=ctx.integer(node, a, "conaffinity", 1),
        mjcf_body="world" if name_hint is None else name_hint,
        node=node,
        mesh_reach=None if gtype != "mesh" else float(asset.mesh.vertices.norm(dim=1).max()),
    )
    ctx.parts.append(part)
    return part


def _geom_color(ctx: ConversionContext, node: Node, attrs: dict) -> list[float]:
    """RGB in [0, 1] from the geom's ``rgba`` or its material's (alpha is noted, not drawn)."""
    # MuJoCo: a geom's rgba (its own or its class's) wins over its material's unless it is
    # the internal default.
    rgba = ctx.floats(node, attrs, "rgba", (4,), None)
    if (rgba is None or tuple(rgba) == DEFAULT_RGBA) and attrs.get("material") is not None:
        if attrs["material"] not in ctx.materials:
            ctx.note(f"{node.path}: material {attrs['material']!r} has no rgba; grey is used")
        rgba = ctx.materials.get(attrs["material"])
    rgba = rgba or list(DEFAULT_RGBA)
    color = clean([min(max(c, 0.0), 1.0) for c in rgba[:3]])
    if rgba[3] < 1.0:
        ctx.note(f"{node.path}: transparency (rgba alpha) is not rendered")
    return color
