"""Mass properties of closed meshes against analytic solids and trimesh, their gradients, and
`check_closed`'s errors."""

from __future__ import annotations

import math

import pytest
import torch

from diffcam.mesh import Mesh, MeshError, check_closed, mass_properties
from tests.finite_differences import check_directional


def box_mesh(extents, dtype=torch.float64, centre=(0.0, 0.0, 0.0)) -> Mesh:
    """A closed box of full ``extents`` (m) centred at ``centre``: 8 vertices, 12 outward
    faces."""
    signs = torch.tensor(
        [[x, y, z] for x in (-1, 1) for y in (-1, 1) for z in (-1, 1)], dtype=dtype
    )
    v = 0.5 * signs * torch.tensor(extents, dtype=dtype) + torch.tensor(centre, dtype=dtype)
    quads = [(0, 1, 3, 2), (4, 6, 7, 5), (0, 4, 5, 1), (2, 3, 7, 6), (0, 2, 6, 4), (1, 5, 7, 3)]
    faces = [t for a, b, c, d in quads for t in ((a, b, c), (a, c, d))]
    return Mesh(v, torch.tensor(faces))


def uv_sphere(radius, n_lat=48, n_lon=96, dtype=torch.float64) -> Mesh:
    """A closed latitude-longitude sphere of ``radius`` (m)."""
    verts = [(0.0, 0.0, radius)]
    for i in range(1, n_lat):
        th = math.pi * i / n_lat
        for j in range(n_lon):
            ph = 2 * math.pi * j / n_lon
            verts.append(
                (
                    radius * math.sin(th) * math.cos(ph),
                    radius * math.sin(th) * math.sin(ph),
                    radius * math.cos(th),
                )
            )
    verts.append((0.0, 0.0, -radius))
    south = len(verts) - 1

    def ring(i, j):
        return 1 + (i - 1) * n_lon + j % n_lon

    faces = [(0, ring(1, j), ring(1, j + 1)) for j in range(n_lon)]
    for i in range(1, n_lat - 1):
        for j in range(n_lon):
            a, b, c, d = ring(i, j), ring(i + 1, j), ring(i + 1, j + 1), ring(i, j + 1)
            faces += [(a, b, c), (a, c, d)]
    faces += [(south, ring(n_lat - 1, j + 1), ring(n_lat - 1, j)) for j in range(n_lon)]
    return Mesh(torch.tensor(verts, dtype=dtype), torch.tensor(faces))


def test_box_mass_properties_are_analytic(dtype):
    ext, rho, centre = (1.0, 2.0, 3.0), 2.5, (0.3, -0.2, 0.7)
    props = mass_properties(box_mesh(ext, dtype, centre), density=rho)
    m = rho * 6.0
    assert props.mass.dtype == dtype
    torch.testing.assert_close(props.volume, torch.tensor(6.0, dtype=dtype))
    torch.testing.assert_close(props.mass, torch.tensor(m, dtype=dtype))
    torch.testing.assert_close(props.center, torch.tensor(centre, dtype=dtype))
    x, y, z = ext
    expected = (
        torch.diag(torch.tensor([y * y + z * z, x * x + z * z, x * x + y * y], dtype=dtype))
        * m
        / 12
    )
    torch.testing.assert_close(
        props.inertia, expected, atol=1e-5 if dtype == torch.float32 else 1e-12, rtol=1e-5
    )


def test_sphere_mass_properties_converge_to_analytic():
    r, rho = 0.7, 3.0
    props = mass_properties(uv_sphere(r), density=rho)
    volume = 4 / 3 * math.pi * r**3
    # an inscribed polyhedron: slightly smaller than the sphere, within 0.2 % at 48 x 96
    assert abs(float(props.volume) / volume - 1) < 2e-3
    i_sphere = 0.4 * rho * volume * r * r
    torch.testing.assert_close(
        props.inertia, i_sphere * torch.eye(3, dtype=torch.float64), rtol=4e-3, atol=1e-9
    )
    assert float(props.center.norm()) < 1e-12


def test_mass_properties_match_trimesh():
    trimesh = pytest.importorskip("trimesh")  # the optional 'mesh' extra: an independent reference
    tm = trimesh.creation.torus(major_radius=1.0, minor_radius=0.3)
    tm.apply_transform(trimesh.transformations.random_rotation_matrix(seed=3))
    tm.apply_translation([0.2, -0.4, 1.0])
    tm.density = 1.7
    mesh = Mesh(torch.tensor(tm.vertices), torch.tensor(tm.faces))
    props = mass_properties(mesh, density=1.7)
    torch.testing.assert_close(props.volume, torch.tensor(tm.volume, dtype=torch.float64))
    torch.testing.assert_close(props.center, torch.tensor(tm.center_mass))
    torch.testing.assert_close(props.inertia, torch.tensor(tm.moment_inertia))


def test_mass_properties_gradients_to_vertices_and_density():
    mesh = uv_sphere(0.5, 6, 8)

    def f(v, rho):
        p = mass_properties(Mesh(v, mesh.faces), density=rho, check=False)
        return (
            p.mass
            + (p.inertia * torch.arange(9.0, dtype=v.dtype).view(3, 3)).sum()
            + p.center.sum()
        )

    v = mesh.vertices + 0.01 * torch.randn(
        mesh.vertices.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    check_directional(f, [v, torch.tensor(1.3, dtype=torch.float64)], names=["vertices", "density"])


def test_check_closed_accepts_closed_and_welds_seams():
    check_closed(box_mesh((1, 1, 1)))
    # the same box with every face's own three vertices (as split at texture seams)
    box = box_mesh((1, 1, 1))
    split = Mesh(box.corners().reshape(-1, 3), torch.arange(36).view(12, 3))
    check_closed(split)


def test_check_closed_errors():
    box = box_mesh((1, 1, 1))
    with pytest.raises(MeshError, match="open"):
        check_closed(Mesh(box.vertices, box.faces[:-1]))
    with pytest.raises(MeshError, match="non-manifold"):
        check_closed(
            Mesh(box.vertices, torch.cat([box.faces, box.faces[:1].flip(1), box.faces[:1]]))
        )
    with pytest.raises(MeshError, match="faces inwards"):
        check_closed(Mesh(box.vertices, box.faces.flip(1)))
    flipped = box.faces.clone()
    flipped[0] = flipped[0].flip(0)
    with pytest.raises(MeshError, match="consistently wound"):
        check_closed(Mesh(box.vertices, flipped))
    with pytest.raises(MeshError, match="degenerate"):
        check_closed(Mesh(box.vertices, torch.cat([box.faces, torch.tensor([[0, 0, 1]])])))
    with pytest.raises(MeshError, match="open"):
        mass_properties(Mesh(box.vertices, box.faces[:-1]))
