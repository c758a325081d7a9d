"""A geom's shape type, its frame in its body (``pos`` + orientation, or ``fromto``) and its
size: MuJoCo's half-sizes become the scene's full sizes."""

from __future__ import annotations

import numpy as np

from .context import ConversionContext
from .poses import element_pose
from .rotations import z_to_vector
from .xmltree import Node

SHAPES = {"sphere", "box", "capsule", "cylinder", "plane", "mesh"}
INFINITE_PLANE = 20.0  # m: the drawn extent of a MuJoCo plane of size 0 (infinite)

_SIZE_COUNTS = {"sphere": 1, "capsule": 2, "cylinder": 2, "box": 3, "plane": 2}
_SIZE_FORMS = {
    "sphere": '"radius"',
    "capsule": '"radius half-length" or fromto',
    "cylinder": '"radius half-length" or fromto',
    "box": '"x y z" half-sizes',
    "plane": '"x y spacing" half-sizes',
}
_UNSUPPORTED_TYPE_HINTS = {
    "ellipsoid": "use a sphere, box or capsule",
    "hfield": "use a plane",
    "sdf": "use primitive geoms",
}


def geom_shape(ctx: ConversionContext, node: Node, attrs: dict) -> str:
    """The geom's ``type`` if diffcam has the shape (solid, without fluid forces)."""
    gtype = attrs.get("type", "sphere")
    if gtype not in SHAPES:
        hint = _UNSUPPORTED_TYPE_HINTS.get(gtype, "sphere | box | capsule | cylinder | plane")
        raise ctx.error(
            node,
            f'type="{gtype}" is not supported; {hint}',
            "sphere | box | capsule | cylinder | plane | mesh",
        )
    if "mesh" in attrs and gtype != "mesh":
        # MuJoCo fits the primitive to the mesh (its bounding box or inertia box)
        raise ctx.error(
            node,
            f'a {gtype} fitted to a mesh (mesh= on a type="{gtype}" geom) is not supported',
            'type="mesh"',
        )
    if attrs.get("shellinertia") == "true":
        raise ctx.error(node, "shellinertia is not supported", "solid geoms")
    if attrs.get("fluidshape", "none") != "none":
        raise ctx.error(node, "fluid forces (fluidshape) are not supported", 'fluidshape="none"')
    return gtype


def geom_frame_and_size(ctx: ConversionContext, node: Node, attrs: dict, gtype: str):
    """(rotation, position) of the geom in its body's frame and its scene size: box
    ``[2a, 2b, 2c]``, capsule / cylinder ``[r, 2h]`` along z, sphere ``r``, plane ``[2x, 2y]``,
    mesh None (its frame is the mesh file's, placed by the geom's pos and orientation)."""
    if gtype == "mesh":
        if "fromto" in attrs:
            raise ctx.error(node, "fromto on a mesh is not supported", "pos and quat")
        local_rot, local_pos = element_pose(ctx, node, attrs)
        return local_rot, local_pos, None
    size = ctx.floats(node, attrs, "size", (1, 2, 3), [])
    fromto = ctx.floats(node, attrs, "fromto", (6,), None)
    if fromto is not None:
        local_rot, local_pos, scene_size = _fromto_frame_and_size(ctx, node, gtype, size, fromto)
    else:
        local_rot, local_pos = element_pose(ctx, node, attrs)
        scene_size = _scene_size(ctx, node, attrs, gtype, size)
    values = [scene_size] if not isinstance(scene_size, list) else scene_size
    if min(values) < 1e-4:
        raise ctx.error(node, f"size {scene_size} is too small or not positive", ">= 0.0001 m")
    return local_rot, local_pos, scene_size


def _fromto_frame_and_size(ctx: ConversionContext, node: Node, gtype: str, size, fromto):
    """A capsule or cylinder between two points: centred between them, z along the segment."""
    if gtype not in ("capsule", "cylinder"):
        raise ctx.error(node, f"fromto on a {gtype} is not supported", "capsule or cylinder")
    start, end = np.asarray(fromto[:3]), np.asarray(fromto[3:])
    length = float(np.linalg.norm(end - start))
    if length < 1e-9:
        raise ctx.error(node, "fromto: the two points coincide")
    if not size:
        raise ctx.error(node, "a capsule or cylinder needs a radius", 'size="radius"')
    # MuJoCo points the geom's z axis from the second point to the first.
    return z_to_vector(start - end), 0.5 * (start + end), [size[0], length]


def _scene_size(ctx: ConversionContext, node: Node, attrs: dict, gtype: str, size):
    """The scene size of a geom given by ``size`` (MuJoCo's half-sizes)."""
    need = _SIZE_COUNTS[gtype]
    if len(size) < need:
        raise ctx.error(
            node,
            f'a {gtype} needs {need} size numbers, got size="{attrs.get("size", "")}"',
            _SIZE_FORMS[gtype],
        )
    if gtype == "sphere":
        return size[0]
    if gtype in ("capsule", "cylinder"):
        return [size[0], 2.0 * size[1]]
    if gtype == "box":
        return [2.0 * s for s in size[:3]]
    if min(size[:2]) <= 0:
        ctx.note(
            f"{node.path}: an infinite plane is drawn {INFINITE_PLANE:g} m wide "
            "(it collides as an infinite plane)"
        )
    return [2.0 * s if s > 0 else INFINITE_PLANE for s in size[:2]]
