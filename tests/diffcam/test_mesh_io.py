"""diffcam.mesh readers: the OBJ reader (corners, polygons, negative indices, errors naming the
file and line), the record's checks, and other formats through trimesh."""

from __future__ import annotations

import pytest
import torch

from diffcam.mesh import Mesh, MeshError, load_mesh, read_obj
from diffcam.mesh.obj import parse_obj

QUAD_OBJ = """# a unit square as one quad, with texture coordinates and a normal
v 0 0 0
v 1 0 0
v 1 1 0
v 0 1 0
vt 0 0
vt 1 0
vt 1 1
vt 0 1
vn 0 0 1
o square
s off
f 1/1/1 2/2/1 3/3/1 4/4/1
"""


def test_obj_quad_is_fan_triangulated_with_corner_uvs_and_normals(dtype):
    mesh = parse_obj(QUAD_OBJ, dtype=dtype)
    assert mesh.vertices.dtype == dtype and mesh.vertices.shape == (4, 3)
    assert mesh.faces.tolist() == [[0, 1, 2], [0, 2, 3]]
    assert mesh.uvs.shape == (2, 3, 2) and mesh.uvs.dtype == dtype
    assert mesh.uvs[1].tolist() == [[0, 0], [1, 1], [0, 1]]
    assert mesh.normals.shape == (2, 3, 3)
    assert torch.equal(mesh.normals, torch.tensor([0.0, 0, 1], dtype=dtype).expand(2, 3, 3))


def test_obj_negative_indices_and_plain_corners():
    text = "v 0 0 0\nv 1 0 0\nv 0 1 0\nf -3 -2 -1\nv 0 0 1\nf 1//  2 4\n".replace("//  ", " ")
    mesh = parse_obj(text)
    assert mesh.faces.tolist() == [[0, 1, 2], [0, 1, 3]]
    assert mesh.uvs is None and mesh.normals is None


def test_obj_v_vn_corners():
    mesh = parse_obj("v 0 0 0\nv 1 0 0\nv 0 1 0\nvn 0 0 1\nf 1//1 2//1 3//-1\n")
    assert mesh.uvs is None and mesh.normals.shape == (1, 3, 3)


def test_obj_file_read(tmp_path):
    path = tmp_path / "square.obj"
    path.write_text(QUAD_OBJ)
    mesh = read_obj(path)
    assert mesh.source == str(path) and mesh.num_faces == 2
    assert load_mesh(path).faces.tolist() == mesh.faces.tolist()


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("v 0 0\n", 1, "'v' needs 3 to 4 numbers"),
        ("v 0 0 0\nv 1 x 0\n", 2, "not a number"),
        ("v 0 0 0\nv 1 0 0\nv 0 1 0\n\nf 1 2 4\n", 5, "v index 4 is out of range"),
        ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2 0\n", 4, "v index 0 is out of range"),
        ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1 2\n", 4, "at least 3 corners"),
        ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1/a 2 3\n", 4, "vt index 'a' is not an integer"),
        ("v 0 0 0\nv 1 0 0\nv 0 1 0\nvt 0 0\nf 1/1 2/1 3/1\nf 1 2 3\n", 6, "no 'vt' index"),
        ("v 0 0 0\nv 1 0 0\nv 0 1 0\nf 1/1/1/1 2 3\n", 4, "v/vt/vn"),
    ],
)
def test_obj_errors_name_file_and_line(tmp_path, text, line, words):
    path = tmp_path / "bad.obj"
    path.write_text(text)
    with pytest.raises(MeshError) as info:
        read_obj(path)
    assert info.value.line == line and info.value.file == str(path)
    assert words in str(info.value) and f"bad.obj:{line}:" in str(info.value)


def test_obj_without_faces_or_file(tmp_path):
    with pytest.raises(MeshError, match="no faces"):
        parse_obj("v 0 0 0\n")
    with pytest.raises(MeshError, match="cannot read"):
        read_obj(tmp_path / "missing.obj")


def test_mesh_record_checks_shapes():
    v = torch.zeros(3, 3)
    with pytest.raises(MeshError, match="face indices"):
        Mesh(v, torch.tensor([[0, 1, 3]]))
    with pytest.raises(MeshError, match="faces must be a long"):
        Mesh(v, torch.tensor([[0.0, 1, 2]]))
    with pytest.raises(MeshError, match="uvs must be"):
        Mesh(v, torch.tensor([[0, 1, 2]]), uvs=torch.zeros(2, 2))


def test_unknown_format_and_trimesh_formats(tmp_path):
    with pytest.raises(MeshError, match="unknown mesh format"):
        load_mesh(tmp_path / "x.dae")
    trimesh = pytest.importorskip("trimesh")  # the optional 'mesh' extra
    box = trimesh.creation.box(extents=[1.0, 2.0, 3.0])
    for suffix in (".stl", ".ply", ".glb"):
        path = tmp_path / f"box{suffix}"
        box.export(path)
        mesh = load_mesh(path, dtype=torch.float64)
        assert mesh.num_faces == 12
        lo, hi = mesh.vertices.amin(0), mesh.vertices.amax(0)
        assert torch.allclose(hi - lo, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))


def test_missing_trimesh_is_a_clear_error(tmp_path, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_trimesh(name, *args, **kwargs):
        if name == "trimesh":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    path = tmp_path / "box.stl"
    path.write_bytes(b"solid x\nendsolid x\n")
    monkeypatch.setattr(builtins, "__import__", no_trimesh)
    with pytest.raises(MeshError, match=r"pip install 'diffcam\[mesh\]'"):
        load_mesh(path)


def test_write_obj_round_trip(tmp_path):
    from diffcam.mesh.obj import write_obj
    from diffcam.mesh.shapes import torus

    mesh = torus(0.5, 0.2, 8, 6, dtype=torch.float64)
    mesh = Mesh(mesh.vertices, mesh.faces, mesh.uvs, mesh.vertex_normals())
    write_obj(mesh, tmp_path / "t.obj", header="a test torus")
    back = read_obj(tmp_path / "t.obj", dtype=torch.float64)
    assert torch.equal(back.faces, mesh.faces)
    torch.testing.assert_close(back.vertices, mesh.vertices, rtol=0, atol=1e-8)
    torch.testing.assert_close(back.uvs, mesh.uvs, rtol=0, atol=1e-8)
    torch.testing.assert_close(back.normals, mesh.corner_normals(), rtol=0, atol=1e-8)


def test_the_bundled_torus_is_the_generated_one():
    from diffcam.mesh.shapes import torus
    from diffcam.scene.paths import MESHES_DIR

    bundled = read_obj(MESHES_DIR / "torus.obj", dtype=torch.float64)
    made = torus(0.5, 0.18, 48, 24, dtype=torch.float64)  # make_meshes.py's
    assert torch.equal(bundled.faces, made.faces)
    torch.testing.assert_close(bundled.vertices, made.vertices, rtol=0, atol=1e-8)
    torch.testing.assert_close(bundled.uvs, made.uvs, rtol=0, atol=1e-8)
