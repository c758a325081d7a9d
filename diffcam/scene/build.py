"""Building a `Scene`'s parts from a `SceneConfig`: textures, the physics world, the camera,
the light and each body's `Primitive`.

``tensor`` in each function converts a config value (a number, a list or a tensor override)
to a tensor on the scene's device and dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch

from ..errors import SceneError
from .assets import load_texture, resolve_texture
from .schema import DEFAULT_COLOR
from .validate import SceneConfig, scene_key

ToTensor = Callable[[Any], torch.Tensor]


def _tensors_converted(values: Mapping[str, Any], tensor: ToTensor) -> dict:
    """``values`` with its tensors moved to the scene's device and dtype (the rest as is)."""
    return {k: (tensor(v) if isinstance(v, torch.Tensor) else v) for k, v in values.items()}


def load_textures(config: SceneConfig, tensor: ToTensor, device, dtype) -> dict:
    """name -> (3, Ht, Wt) tensor: the tensor overrides, and the PNG files read."""
    textures: dict[str, torch.Tensor] = {}
    for name, value in config.textures.items():
        if isinstance(value, torch.Tensor):
            textures[name] = tensor(value)
        else:
            file = resolve_texture(name, value, config)
            try:
                textures[name] = load_texture(file, device=device, dtype=dtype)
            except (OSError, ValueError) as e:
                raise SceneError(
                    f"cannot read {str(file)!r} as an image ({e})",
                    file=config.file,
                    key=f"textures.{name}",
                    accepted="a PNG (or any image Pillow reads)",
                ) from None
    return textures


def build_world(config: SceneConfig, tensor: ToTensor, batch_size: int, device, dtype):
    """The `physics.WorldSpec` of the bodies and joints, and the `physics.World` built from it
    (returned as (world, spec))."""
    import physics

    bodies = []
    for b in config.bodies:
        if b["shape"] == "mesh":  # the engine's stand-in for a mesh body (scene.meshes)
            from .meshes import physics_standin

            bodies.append(physics.Body(**_tensors_converted(physics_standin(b, tensor), tensor)))
            continue
        kw = {k: b[k] for k in b if k not in ("texture", "color", "uv_scale", "visible")}
        bodies.append(physics.Body(**_tensors_converted(kw, tensor)))
    joints = []
    for j in config.joints:
        kw = _tensors_converted(j, tensor)
        if "motor" in kw:
            kw["motor"] = physics.Motor(**_tensors_converted(kw["motor"], tensor))
        joints.append(physics.Joint(**kw))
    wkw = _tensors_converted(config.world, tensor)
    # A scene without ``coordinates`` steps in reduced coordinates when its model allows them.
    wkw.setdefault("coordinates", "auto")
    spec = physics.WorldSpec(bodies=bodies, joints=joints, **wkw)
    try:
        world = physics.build_world(spec, batch_size=batch_size, device=device, dtype=dtype)
    except physics.ReducedCoordinatesError as e:
        raise SceneError(
            f"this model cannot use reduced coordinates: {e}",
            file=config.file,
            key="world.coordinates",
            accepted='"auto" (the default: reduced when the model allows it) or "maximal", or '
            "change the model as the reason says",
        ) from None
    except physics.ModelError as e:
        key = scene_key(e)
        if key is None:
            raise SceneError(f"invalid model: {e}", file=config.file) from None
        raise SceneError(e.reason, file=config.file, key=key, accepted=e.accepted) from None
    return world, spec


def build_camera(cam: dict, tensor: ToTensor):
    """The `PinholeCamera` of the ``[camera]`` table (fov_y_deg, or focal and principal point)."""
    from ..camera import PinholeCamera

    width, height = cam["resolution"]
    up = cam.get("up", [0.0, 0.0, 1.0])
    if "fov_y_deg" in cam:
        return PinholeCamera.look_at(
            tensor(cam["position"]), tensor(cam["look_at"]), tensor(up),
            tensor(cam["fov_y_deg"]), width, height,
        )  # fmt: skip
    posed = PinholeCamera.look_at(
        tensor(cam["position"]), tensor(cam["look_at"]), tensor(up),
        tensor(40.0), width, height,
    )  # fmt: skip
    focal = tensor(cam["focal"])
    pp = tensor(cam.get("principal_point", [0.5 * width, 0.5 * height]))
    return PinholeCamera(
        focal[..., 0], focal[..., 1], pp[..., 0], pp[..., 1], width, height,
        posed.rotation, posed.translation,
    )  # fmt: skip


def build_lighting(light: dict | None, tensor: ToTensor):
    """The `Lighting` of the ``[light]`` table, or None (unlit) without one."""
    if light is None:
        return None
    from ..renderer import Lighting

    return Lighting(**_tensors_converted(light, tensor))


def build_primitives(bodies: list[dict], textures: dict, tensor: ToTensor) -> list:
    """What each body looks like: a `Primitive` per body, in state order."""
    from ..primitives import Primitive

    primitives = []
    for b in bodies:
        tex = textures[b["texture"]] if "texture" in b else None
        color = None if tex is not None else tensor(b.get("color", DEFAULT_COLOR))
        if b["shape"] == "mesh":  # the mesh in the body's frame (scene.meshes)
            from ..mesh import Mesh

            m = b["mesh_body"].mesh
            mesh = Mesh(
                tensor(m.vertices),
                m.faces,
                None if m.uvs is None else tensor(m.uvs),
                None if m.normals is None else tensor(m.normals),
                m.source,
            )
            primitives.append(
                Primitive(
                    "mesh",
                    texture=tex,
                    color=color,
                    uv_scale=tuple(b.get("uv_scale", (1.0, 1.0))),
                    mesh=mesh,
                    smooth=b.get("smooth", False),
                )
            )
            continue
        size = b["size"]
        size = tensor(size) if isinstance(size, torch.Tensor) else size
        primitives.append(
            Primitive(
                b["shape"],
                size,
                texture=tex,
                color=color,
                uv_scale=tuple(b.get("uv_scale", (1.0, 1.0))),
            )
        )
    return primitives
