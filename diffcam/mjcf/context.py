"""The state one conversion builds up: settings read from ``<compiler>`` and ``<option>``, the
default classes, and the bodies, joints and cameras found so far."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .attributes import AttributeReader
from .xmltree import Node


@dataclass
class Part:
    """A geom on its way to becoming a diffcam body."""

    body: dict  # the scene's body table
    contype: int
    conaffinity: int
    mjcf_body: str  # the MJCF body it belongs to ("world" for a geom of <worldbody>)
    node: Node
    # a mesh: the farthest vertex from the file's origin, the body's position (m)
    mesh_reach: float | None = None


class ConversionContext(AttributeReader):
    """Everything the conversion stages share while converting one MJCF tree."""

    def __init__(self, root: Node, file: str, model_dir: Path):
        super().__init__(file)
        self.root = root
        # the model file's directory: <compiler meshdir / assetdir> are relative to it
        self.model_dir = model_dir
        # <compiler> settings (MuJoCo's defaults until read).
        self.degrees = True
        self.eulerseq = "xyz"
        self.inertiafromgeom = "auto"
        self.autolimits = True
        self.meshdir: str | None = None
        self.assetdir: str | None = None
        self.strippath = False
        # <option> settings.
        self.timestep = 0.002
        self.gravity = [0.0, 0.0, -9.81]
        self.contact_disabled = False
        self.gravity_disabled = False
        self.limits_disabled = False
        self.damping_disabled = False
        # <default> classes: class name -> element tag -> attributes.
        self.defaults: dict[str, dict[str, dict]] = {"main": {}}
        # <asset><material> name -> rgba.
        self.materials: dict[str, list[float]] = {}
        # <asset><mesh> name -> MeshAsset (diffcam.mjcf.meshes)
        self.meshes: dict = {}
        # What the tree converts to.
        self.parts: list[Part] = []
        self.joints: list[dict] = []
        # MJCF hinge/slide/ball joint name -> (node, scene joint type, scene joint table).
        self.joint_nodes: dict[str, tuple[Node, str, dict]] = {}
        self.joint_map: dict[str, str] = {}
        self.body_map: dict[str, list[str]] = {}
        self.used_body_names: set[str] = set()
        self.used_joint_names: set[str] = set()
        # Per <camera>: (node, {"rot", "pos" (world, initial), "attrs"}, on a moving body).
        self.cameras: list[tuple[Node, dict, bool]] = []
        self.free_bodies: list[str] = []
        self.body_counter = 0  # names unnamed MJCF bodies body1, body2, ...

    def angle(self, value: float) -> float:
        """An MJCF angle in radians (``<compiler angle>`` says what it is written in)."""
        return math.radians(value) if self.degrees else value

    def add_joint(self, joint: dict, mjcf_name: str | None) -> None:
        """Append a scene joint, recording which MJCF joint (if any) it came from."""
        self.joints.append(joint)
        if mjcf_name:
            self.joint_map[mjcf_name] = joint["name"]
