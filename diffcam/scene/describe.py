"""`Scene.summary`: a human-readable description of a loaded scene (what ``diffcam check``
prints)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from .schema import DEFAULT_COLOR, is_number

if TYPE_CHECKING:
    from .scene import Scene


def describe(scene: Scene) -> str:
    """The world, bodies, joints, actuators, camera and textures of ``scene``, one per line."""
    cfg = scene.config
    lines = [f"scene {cfg.file}"]
    w = cfg.world
    lines.append(
        f"  world: gravity {_fmt(w.get('gravity', scene.spec.gravity))}, "
        f"timestep {scene.timestep:g} s, solver_iterations "
        f"{w.get('solver_iterations', scene.spec.solver_iterations)}, "
        f"{scene.world.coordinates} coordinates"
    )
    lines.append(f"  bodies ({len(cfg.bodies)}):")
    for b in cfg.bodies:
        kind = "static" if b.get("static") else (
            f"mass {_fmt(b['mass'])} kg" if "mass" in b else f"density {_fmt(b['density'])}"
        )  # fmt: skip
        look = (
            f"texture {b['texture']}" if "texture" in b
            else f"color {_fmt(b.get('color', DEFAULT_COLOR))}"
        )  # fmt: skip
        shape = (
            f"mesh {b['mesh']} ({b['mesh_body'].mesh.num_faces} triangles)"
            if b["shape"] == "mesh"
            else f"{b['shape']} size {_fmt(b['size'])}"
        )
        lines.append(
            f"    {b['name']}: {shape}, {kind}, "
            f"at {_fmt(b.get('position', [0, 0, 0]))}, "
            + (look if b.get("visible", True) else "not drawn")
        )
    lines.append(f"  joints ({len(cfg.joints)}):")
    for j in cfg.joints:
        extra = ""
        if "limits" in j:
            extra += f", limits {_fmt(j['limits'])}"
        if "motor" in j:
            m = j["motor"]
            extra += f", {m['type']} motor" + (f" max {_fmt(m['max'])}" if "max" in m else "")
        lines.append(
            f"    {j['name']}: {j['type']} {j['parent']} -> {j['child']}"
            + (f" axis {_fmt(j['axis'])}" if "axis" in j else "")
            + extra
        )
    lines.append(f"  actuators ({len(scene.actuator_names)}): {', '.join(scene.actuator_names)}")
    c = cfg.camera
    fov = f"fov_y {_fmt(c['fov_y_deg'])} deg" if "fov_y_deg" in c else f"focal {_fmt(c['focal'])}"
    lines.append(
        f"  camera: {c['resolution'][0]}x{c['resolution'][1]} at {_fmt(c['position'])} "
        f"looking at {_fmt(c['look_at'])}, {fov}"
    )
    lines.append(f"  textures ({len(scene.textures)}):")
    for name, t in scene.textures.items():
        src = cfg.textures[name]
        src = "override" if isinstance(src, torch.Tensor) else src
        lines.append(f"    {name}: {src} ({t.shape[2]}x{t.shape[1]})")
    return "\n".join(lines)


def _fmt(v) -> str:
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu()
        return (
            f"tensor{tuple(v.shape)}"
            if v.numel() > 4
            else str([round(x, 4) for x in v.reshape(-1).tolist()])
        )
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(f"{x:g}" if is_number(x) else str(x) for x in v) + "]"
    if is_number(v):
        return f"{v:g}"
    return str(v)
