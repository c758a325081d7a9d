"""MJCF (MuJoCo's XML) to a diffcam scene: the conversion rules.

A diffcam body has one shape and its centre of mass at the shape's centre, so:

- each ``<geom>`` becomes a diffcam body posed where MuJoCo puts the geom in the model's
  initial configuration (qpos = 0). A MuJoCo body with several geoms becomes one diffcam body
  per geom, the first named after the MuJoCo body, the others ``<body>_<geom>`` welded to it by
  fixed joints: the same rigid mass distribution as MuJoCo's ``inertiafromgeom``.
- sizes: MuJoCo's half-sizes become the scene's full sizes (box ``size="a b c"`` ->
  ``[2a, 2b, 2c]``; capsule / cylinder ``size="r h"`` (half-length h) or ``fromto`` ->
  ``[r, 2h]`` along body z; sphere ``size="r"`` -> ``r``; plane ``size="x y spacing"`` ->
  drawn extent ``[2x, 2y]``).
- meshes: a ``type="mesh"`` geom becomes a ``shape = "mesh"`` body of the asset's file
  (absolute path, found through ``<compiler meshdir / assetdir>``) and ``scale``, posed by the
  geom's pos and orientation; the scene moves its frame to the mesh's centre of mass and
  principal axes, as MuJoCo does, and it collides by its convex hull, as in MuJoCo
  (`diffcam.mjcf.meshes`).
- masses: geom ``mass``, else ``density`` (default 1000) times the volume.
- a body's ``<joint>`` (hinge, slide, ball) joins its first geom's body to its parent's first
  geom's body (or to the world); a jointless body is welded to its parent (fixed joint), or
  static under ``<worldbody>``; ``<freejoint/>`` leaves the body free. Anchors and axes are
  given in world coordinates, as the scene schema wants.
- ``<motor joint= gear= ctrlrange=>`` becomes a force motor on its joint whose action is the
  force itself: ``action = gear * ctrl``, clipped to ``gear * ctrlrange`` (see `MJCFImport`).
- ``<option timestep gravity>``, ``<camera>`` (else a default camera looking at the model),
  ``rgba`` and material colours, ``contype``/``conaffinity`` (-> ``collide``), the first
  ``friction`` coefficient, geom ``mass`` / ``density``, joint ``range`` / ``limited`` /
  ``damping`` and ``<default>`` classes (nested, ``class``, ``childclass``) are honoured.

Elements that do not change the dynamics (sites, lights, sensors, keyframes, visual settings,
solver tuning) are ignored and listed in `MJCFImport.notes`. Anything else that diffcam cannot
represent raises `MJCFError` naming the element's XML path.

This module assembles the scene; each stage has its own module: `settings` (``<compiler>``,
``<option>``), `defaults` (``<default>`` classes), `assets` (material colours and `meshes`),
`bodies` (the body tree), `geoms` / `geom_sizes` / `mass` / `meshes` (a geom to a scene body), `joints`, `actuators`,
`contacts`, `camera` (camera and light) and `world`; `supported` lists what is handled, ignored
or refused, and `context` holds the state the stages share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .actuators import order_motors, read_actuators
from .assets import read_assets
from .bodies import read_worldbody
from .camera import camera_table, light_table
from .contacts import check_contact_sections, set_collide_flags
from .context import ConversionContext
from .defaults import read_default_class
from .settings import read_compiler, read_option
from .supported import IGNORED_TOP_LEVEL, TOP_LEVEL_ELEMENTS, UNSUPPORTED_TOP_LEVEL
from .world import world_table
from .xmltree import Node

__all__ = ["MJCFImport", "convert_mjcf"]


@dataclass
class MJCFImport:
    """An imported MJCF model.

    Attributes:
        config: the scene as the dict a TOML scene file parses to (docs/reference/scene-file.md); give
            it to `diffcam.scene.validate_scene` or write it with `diffcam.mjcf.to_toml`.
        notes: what was ignored or approximated, one sentence each.
        actuators: per MJCF actuator, in MuJoCo's ``ctrl`` order: ``{"name", "joint", "gear"}``;
            the scene's action column of ``joint`` is the force ``gear * ctrl``. The scene's
            actuators (``scene.actuator_names``, named after their joints) are in this order.
        bodies: MJCF body name -> the diffcam bodies of its geoms (first: the one its joint
            moves).
        joints: MJCF joint name -> diffcam joint name (names are made valid and unique).
        geoms: MJCF geom name (its XML path if unnamed) -> the diffcam body it became.
    """

    file: str
    config: dict
    notes: list[str] = field(default_factory=list)
    actuators: list[dict] = field(default_factory=list)
    bodies: dict[str, list[str]] = field(default_factory=dict)
    joints: dict[str, str] = field(default_factory=dict)
    geoms: dict[str, str] = field(default_factory=dict)


def convert_mjcf(root: Node, file: str, model_dir: Path) -> MJCFImport:
    """The scene of a parsed MJCF tree (see the module docstring for the rules); mesh files
    are found relative to ``model_dir`` (the model file's directory)."""
    ctx = ConversionContext(root, file, model_dir)
    _check_top_level(ctx, root)
    read_compiler(ctx, root.find_all("compiler"))
    read_option(ctx, root.find_all("option"))
    for d in root.find_all("default"):
        read_default_class(ctx, d, None)
    for asset in root.find_all("asset"):
        read_assets(ctx, asset)
    for wb in root.find_all("worldbody"):
        read_worldbody(ctx, wb)
    if not ctx.parts:
        raise ctx.error(
            None, "the model has no geoms: diffcam needs at least one shape to simulate"
        )
    actuators = []
    for act in root.find_all("actuator"):
        actuators += read_actuators(ctx, act)
    order_motors(ctx, actuators)
    set_collide_flags(ctx)
    check_contact_sections(ctx, root.find_all("contact"))
    config = {
        "world": world_table(ctx),
        "camera": camera_table(ctx),
        "light": light_table(),
        "bodies": [p.body for p in ctx.parts],
    }
    if ctx.joints:
        config["joints"] = ctx.joints
    return MJCFImport(
        file=file,
        config=config,
        notes=ctx.notes,
        actuators=actuators,
        bodies=ctx.body_map,
        joints=ctx.joint_map,
        geoms={p.node.attrib.get("name") or p.node.path: p.body["name"] for p in ctx.parts},
    )


def _check_top_level(ctx: ConversionContext, root: Node) -> None:
    """Refuse ``<mujoco>`` attributes and sections diffcam cannot represent; note the ignored
    sections."""
    for key in root.attrib:
        if key != "model":
            raise ctx.error(root, f"attribute {key!r} of <mujoco> is not supported")
    for child in root.children:
        if child.tag in UNSUPPORTED_TOP_LEVEL:
            raise ctx.error(
                child,
                f"<{child.tag}> is not supported: diffcam has no {UNSUPPORTED_TOP_LEVEL[child.tag]}",
            )
        if child.tag not in TOP_LEVEL_ELEMENTS:
            raise ctx.error(child, f"unknown or unsupported element <{child.tag}>")
        if child.tag in IGNORED_TOP_LEVEL and (child.children or child.attrib):
            ctx.note(f"<{child.tag}> is ignored: {IGNORED_TOP_LEVEL[child.tag]}")
