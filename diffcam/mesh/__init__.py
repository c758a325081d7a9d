"""Triangle meshes: the `Mesh` record, readers (OBJ in plain Python, other formats through
the optional ``trimesh``), closedness checks and mass properties of closed meshes, and ray
casting (a BVH built once per mesh, traversed batched over rays; NVIDIA Warp's kernel where
warp-lang is installed; and a brute-force reference).

Modules, one job each: ``record`` (the `Mesh`), ``obj`` (the OBJ reader and writer), ``formats``
(`load_mesh`: a file of any supported format), ``topology`` (`check_closed`), ``mass``
(`mass_properties`), ``triangles`` (the watertight ray-triangle test), ``bvh`` (`build_bvh`,
`BVH`), ``raycast`` (`cast_rays`, `cast_rays_brute_force`), ``warp_rays`` (`WarpMesh`,
`ray_caster`: which caster a render takes), ``hull`` (`support_points`: the
convex hull's vertices a body collides with), ``shapes`` (a textured torus and a box made in
code).
"""

from .bvh import BVH, build_bvh, refit
from .errors import MeshError
from .formats import load_mesh
from .hull import support_points
from .mass import MassProperties, mass_properties
from .obj import read_obj, write_obj
from .raycast import RayCast, cast_rays, cast_rays_brute_force
from .record import Mesh
from .topology import check_closed
from .warp_rays import WarpMesh, ray_caster

__all__ = [
    "BVH",
    "RayCast",
    "build_bvh",
    "refit",
    "cast_rays",
    "cast_rays_brute_force",
    "Mesh",
    "MeshError",
    "MassProperties",
    "check_closed",
    "load_mesh",
    "mass_properties",
    "read_obj",
    "ray_caster",
    "support_points",
    "WarpMesh",
    "write_obj",
]
