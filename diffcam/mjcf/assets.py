"""``<asset>``: the materials' colours (geoms may take their colour from a material) and the
meshes (`diffcam.mjcf.meshes`); other assets are noted as ignored."""

from __future__ import annotations

from .context import ConversionContext
from .defaults import class_attrs
from .meshes import read_mesh_asset
from .xmltree import Node


def read_assets(ctx: ConversionContext, node: Node) -> None:
    for child in node.children:
        if child.tag == "material":
            a = class_attrs(ctx, child, None)
            rgba = ctx.floats(child, a, "rgba", (4,), None)
            if "name" in a and rgba is not None:
                ctx.materials[a["name"]] = rgba
            if "texture" in a:
                ctx.note(f"{child.path}: textures are ignored; the material's rgba is used")
        elif child.tag == "mesh":
            read_mesh_asset(ctx, child)
        else:
            ctx.note(
                f"<asset><{child.tag}> entries are ignored (only material colours and meshes "
                "are used)"
            )
