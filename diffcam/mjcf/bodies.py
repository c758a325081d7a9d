"""The body tree: ``<worldbody>``, ``<body>`` and ``<frame>`` to scene bodies and joints.

A MuJoCo body with several geoms becomes one scene body per geom, the first named after the
MuJoCo body, the others ``<body>_<geom>`` welded to it by fixed joints. A body's joint joins its
first geom's body to its parent's (or to the world); a jointless body is welded to its parent,
or static under ``<worldbody>``; a ``<freejoint/>`` leaves it free.
"""

from __future__ import annotations

import numpy as np

from .camera import record_camera
from .context import ConversionContext, Part
from .defaults import class_attrs
from .geoms import read_geom
from .joints import read_joint
from .mass import check_mass_from_geoms
from .poses import element_pose
from .scene_values import unique_name
from .xmltree import Node

_BODY_CONTENTS = ("geom", "joint", "freejoint", "inertial")  # read by `read_body` itself


def read_worldbody(ctx: ConversionContext, node: Node) -> None:
    for key in node.attrib:
        raise ctx.error(node, f"attribute {key!r} of <worldbody> is not supported")
    read_children(ctx, node, np.eye(3), np.zeros(3), "world", True, None, "world")


def read_children(
    ctx: ConversionContext,
    node: Node,
    rot: np.ndarray,
    pos: np.ndarray,
    parent_part: str,
    static: bool,
    childclass: str | None,
    mjcf_body: str,
) -> None:
    """Geoms of a static frame and the bodies, frames and cameras under ``node``, whose frame is
    (``rot``, ``pos``) in the world; joints of child bodies attach to ``parent_part``."""
    for child in node.children:
        tag = child.tag
        if tag == "body":
            read_body(ctx, child, rot, pos, parent_part, static, childclass)
        elif tag == "frame":
            a = class_attrs(ctx, child, childclass)
            ctx.check_attrs(child, a)
            r, p = element_pose(ctx, child, a)
            read_children(
                ctx, child, rot @ r, rot @ p + pos, parent_part, static,
                child.attrib.get("childclass", childclass), mjcf_body,
            )  # fmt: skip
        elif tag == "geom" and mjcf_body == "world":
            part = read_geom(ctx, child, rot, pos, childclass, static=True, name_hint=None)
            ctx.body_map.setdefault("world", []).append(part.body["name"])
        elif tag == "camera":
            record_camera(ctx, child, rot, pos, childclass, moving=not static)
        elif tag in ("site", "light"):
            ctx.note(f"<{tag}> elements are ignored")
        elif tag in _BODY_CONTENTS and node.tag == "body":
            continue
        elif tag in _BODY_CONTENTS:
            raise ctx.error(child, f"<{tag}> inside a <frame> is not supported")
        else:
            raise ctx.error(child, f"<{tag}> is not supported inside <{node.tag}>")


def read_body(
    ctx: ConversionContext,
    node: Node,
    parent_rot: np.ndarray,
    parent_pos: np.ndarray,
    parent_part: str,
    parent_static: bool,
    childclass: str | None,
) -> None:
    """A ``<body>`` posed in its parent's frame (``parent_rot``, ``parent_pos``), then its
    children."""
    a = dict(node.attrib)
    ctx.check_attrs(node, a)
    if a.get("mocap") == "true":
        raise ctx.error(node, "mocap bodies are not supported")
    if ctx.number(node, a, "gravcomp", 0.0) != 0.0:
        raise ctx.error(node, "gravcomp is not supported", "0")
    childclass = a.get("childclass", childclass)
    if childclass is not None and childclass not in ctx.defaults:
        raise ctx.error(node, f"unknown default class {childclass!r}")
    r, p = element_pose(ctx, node, a)
    rot, pos = parent_rot @ r, parent_rot @ p + parent_pos
    ctx.body_counter += 1
    mjcf_name = a.get("name") or f"body{ctx.body_counter}"
    geoms = [c for c in node.children if c.tag == "geom"]
    check_mass_from_geoms(ctx, node)
    joint_node, jattrs, jtype = _body_joint(
        ctx, node, mjcf_name, childclass, parent_part, parent_static
    )
    static = parent_static and joint_node is None
    if not geoms:
        if joint_node is not None:
            raise ctx.error(
                node,
                f"body {mjcf_name!r} has a joint but no geom: a moving diffcam body needs a "
                "shape (its mass and inertia come from it)",
                "a sphere, box, capsule or cylinder geom in the body",
            )
        # A bare frame: its children hang from the parent directly.
        read_children(ctx, node, rot, pos, parent_part, static, childclass, mjcf_name)
        return
    parts = []
    for i, g in enumerate(geoms):
        hint = mjcf_name if i == 0 else f"{mjcf_name}_{g.attrib.get('name') or f'geom{i}'}"
        parts.append(read_geom(ctx, g, rot, pos, childclass, static=static, name_hint=hint))
    ctx.body_map[mjcf_name] = [p.body["name"] for p in parts]
    primary = parts[0].body["name"]
    if not static:
        check_welded_parts(ctx, parts)
        _weld_parts(ctx, parts)
        if joint_node is not None and jtype != "free":
            read_joint(
                ctx, joint_node, jattrs, jtype, rot, pos, parent_part, primary, parent_static
            )
        elif joint_node is None:
            ctx.add_joint(
                {"name": unique_name(f"{primary}_weld", ctx.used_joint_names, "weld"),
                 "type": "fixed", "parent": parent_part, "child": primary,
                 "anchor": parts[0].body["position"]},
                None,
            )  # fmt: skip
        else:
            ctx.free_bodies.append(primary)
            if joint_node.attrib.get("name"):
                ctx.joint_map[joint_node.attrib["name"]] = "(free)"
    # Joints of children attach to this body's first part (static bodies: the world).
    read_children(
        ctx, node, rot, pos, "world" if static else primary, static, childclass, mjcf_name
    )


def _body_joint(
    ctx: ConversionContext,
    node: Node,
    mjcf_name: str,
    childclass: str | None,
    parent_part: str,
    parent_static: bool,
) -> tuple[Node | None, dict | None, str | None]:
    """(node, attributes, MJCF type) of the body's one joint (``free`` for a freejoint), or
    (None, None, None) for a jointless body."""
    joints = [c for c in node.children if c.tag in ("joint", "freejoint")]
    if len(joints) > 1:
        raise ctx.error(
            joints[1],
            f"body {mjcf_name!r} has {len(joints)} joints: diffcam joins a body to its "
            "parent with one joint",
            "one hinge, slide or ball joint per body (or a freejoint)",
        )
    if not joints:
        return None, None, None
    joint_node = joints[0]
    jattrs = class_attrs(ctx, joint_node, childclass, "joint")
    if joint_node.tag == "freejoint":
        ctx.check_attrs(joint_node, joint_node.attrib)
        jtype = "free"
    else:
        ctx.check_attrs(joint_node, jattrs)
        jtype = jattrs.get("type", "hinge")
    if jtype == "free":
        if parent_part != "world" or not parent_static:
            raise ctx.error(joint_node, "a free joint is only allowed on a body of <worldbody>")
    elif jtype not in ("hinge", "slide", "ball"):
        raise ctx.error(
            joint_node,
            f'joint type="{jtype}" is not supported',
            "hinge | slide | ball | free",
        )
    return joint_node, jattrs, jtype


def _weld_parts(ctx: ConversionContext, parts: list[Part]) -> None:
    """Fixed joints from a moving body's first part to its other parts."""
    primary = parts[0].body["name"]
    for part in parts[1:]:
        ctx.add_joint(
            {"name": unique_name(f"{part.body['name']}_weld", ctx.used_joint_names, "weld"),
             "type": "fixed", "parent": primary, "child": part.body["name"],
             "anchor": part.body["position"]},
            None,
        )  # fmt: skip


def check_welded_parts(ctx: ConversionContext, parts: list[Part]) -> None:
    """Refuse a moving body with more than one sphere/capsule geom that collides: its parts
    would collide with each other, which MuJoCo excludes within a body."""
    touching = [
        p
        for p in parts
        if (p.contype or p.conaffinity) and p.body["shape"] in ("sphere", "capsule")
    ]
    if len(touching) > 1:
        raise ctx.error(
            touching[1].node,
            "this body's geoms would collide with each other: diffcam makes each geom of a "
            "multi-geom body its own body welded to the first, and sphere/capsule parts of "
            "one body are not excluded from colliding",
            'contype="0" conaffinity="0" on all but one sphere/capsule geom of the body',
        )
