"""Meshes in the renderer: a box mesh renders as the analytic box, finite-difference
gradients to the pose, the vertices and the texture (hard, antialiased and soft edges),
no-NaN gradients, batch consistency, float32 and float64."""

from __future__ import annotations

import pytest
import torch

import diffcam
from diffcam.mesh.shapes import box, torus
from tests.finite_differences import check_directional

LIGHT = diffcam.Lighting(ambient=0.3, direction=(0.3, -0.5, 1.0), intensity=0.7)


def camera(dtype, width=40, height=30, batch=None):
    eye = torch.tensor([0.7, -3.5, 1.6], dtype=dtype)
    if batch:
        eye = eye + torch.linspace(0, 0.3, batch, dtype=dtype).unsqueeze(1)
    return diffcam.PinholeCamera.look_at(
        eye,
        torch.zeros(3, dtype=dtype),
        torch.tensor([0.0, 0, 1], dtype=dtype),
        40.0,
        width,
        height,
    )


def pose(dtype, angle=0.4, position=(0.1, 0.0, 0.05)):
    c, s = torch.cos(torch.tensor(angle, dtype=dtype)), torch.sin(torch.tensor(angle, dtype=dtype))
    R = torch.stack(
        [
            torch.stack([c, -s, 0 * c]),
            torch.stack([s, c, 0 * c]),
            torch.tensor([0.0, 0, 1], dtype=dtype),
        ]
    )
    return R.view(1, 1, 3, 3), torch.tensor(position, dtype=dtype).view(1, 1, 3)


@pytest.mark.parametrize("edge_softness", [0, "antialias"])
def test_box_mesh_renders_as_the_box(dtype, edge_softness):
    # an independent reference: the analytic box primitive (flat colour, Lambert shading)
    ext = (0.9, 0.6, 0.5)
    cam = camera(dtype)
    R, p = pose(dtype)
    colour = (0.8, 0.3, 0.1)
    mesh = diffcam.Primitive("mesh", mesh=box(ext, dtype), color=colour)
    ref = diffcam.Primitive("box", size=list(ext), color=colour)
    a = diffcam.render_buffers(cam, [mesh], R, p, lighting=LIGHT, edge_softness=edge_softness)
    b = diffcam.render_buffers(cam, [ref], R, p, lighting=LIGHT, edge_softness=edge_softness)
    assert torch.equal(a.object_id, b.object_id)
    fg = b.object_id[:, None] >= 0
    torch.testing.assert_close(a.depth, b.depth, atol=1e-5, rtol=1e-5)
    diff = (a.image - b.image).abs()
    if edge_softness == 0:
        torch.testing.assert_close(a.image, b.image, atol=1e-5, rtol=1e-5)
    else:
        # the box's silhouette distance is to its edges' lines, the mesh's to their
        # segments: they differ only beside the outline's corners
        assert float(diff.amax(1).gt(1e-4).float().mean()) < 0.01
        torch.testing.assert_close(a.coverage[fg], b.coverage[fg])
    assert a.image.dtype == dtype
    if edge_softness == 0:
        return  # a flat colour under hard edges: the image does not depend on the position
    # the gradient of an image loss to the pose (through the edges): the same through both
    weights = torch.rand(a.image.shape, dtype=dtype, generator=torch.Generator().manual_seed(2))
    grads = []
    for prim in (mesh, ref):
        pos = p.clone().requires_grad_(True)
        image = diffcam.render(cam, [prim], R, pos, lighting=LIGHT, edge_softness=edge_softness)
        (image * weights).sum().backward()
        grads.append(pos.grad)
    tol = 1e-3 if dtype == torch.float32 else 1e-7
    torch.testing.assert_close(grads[0], grads[1], rtol=tol, atol=tol)


def scene(dtype, edge_softness, smooth=False, batch=None, width=32, height=24, lit=True):
    """A textured torus posed by (R, p): f(vertices, texture, position) -> image."""
    mesh = torus(0.8, 0.3, 16, 8, dtype=dtype)
    cam = camera(dtype, width, height, batch)
    R, _ = pose(dtype)

    def render(vertices, texture, position):
        m = diffcam.mesh.Mesh(vertices, mesh.faces, mesh.uvs)
        prim = diffcam.Primitive("mesh", mesh=m, texture=texture, smooth=smooth)
        return diffcam.render(
            cam,
            [prim],
            R,
            position.view(1, 1, 3),
            edge_softness=edge_softness,
            lighting=LIGHT if lit else None,
            background=torch.tensor([0.2, 0.5, 0.9], dtype=dtype),
        )

    texture = torch.rand(3, 6, 10, dtype=dtype, generator=torch.Generator().manual_seed(0))
    return render, mesh.vertices, texture, torch.tensor([0.05, 0.02, 0.0], dtype=dtype)


@pytest.mark.parametrize("edge_softness, smooth", [("antialias", False), (1.0, True), (0, True)])
def test_gradients_match_finite_differences(edge_softness, smooth):
    dtype = torch.float64
    render, vertices, texture, position = scene(dtype, edge_softness, smooth)
    weights = torch.rand(1, 3, 24, 32, dtype=dtype, generator=torch.Generator().manual_seed(1))

    def loss(v, t, p):
        return (render(v, t, p) * weights).sum()

    # steps well below a pixel's worth of motion: the antialiased ramp and the winning
    # triangles stay put between the two evaluations
    check_directional(
        loss, [vertices, texture, position], eps=1e-7, rtol=2e-4, atol=1e-8,
        names=["vertices", "texture", "position"],
    )  # fmt: skip


def test_gradients_are_finite_and_reach_everything(dtype):
    render, vertices, texture, position = scene(dtype, "antialias")
    leaves = [x.clone().requires_grad_(True) for x in (vertices, texture, position)]
    render(*leaves).square().sum().backward()
    for x in leaves:
        assert torch.isfinite(x.grad).all()
        assert float(x.grad.abs().sum()) > 0


@pytest.mark.parametrize("edge_softness", [0, "antialias", 1.0])
def test_batch_equals_single_images(dtype, edge_softness):
    mesh = diffcam.Primitive(
        "mesh", mesh=torus(0.8, 0.3, 16, 8, dtype=dtype), color=(0.9, 0.8, 0.1)
    )
    ball = diffcam.Primitive("sphere", size=0.3, color=(0.1, 0.2, 0.9))
    cam = camera(dtype, 32, 24, batch=2)
    R = torch.eye(3, dtype=dtype).expand(2, 2, 3, 3)
    p = torch.tensor([[[0, 0, 0], [0.9, 0.3, 0.2]], [[0.1, 0, 0.1], [0.0, -0.2, 0.1]]], dtype=dtype)
    both = diffcam.render_buffers(
        cam, [mesh, ball], R, p, lighting=LIGHT, edge_softness=edge_softness
    )
    for b in range(2):
        cam_b = camera(dtype, 32, 24, batch=2)
        cam_b = diffcam.PinholeCamera.look_at(
            torch.tensor([0.7, -3.5, 1.6], dtype=dtype) + 0.3 * b,
            torch.zeros(3, dtype=dtype), torch.tensor([0.0, 0, 1], dtype=dtype), 40.0, 32, 24,
        )  # fmt: skip
        one = diffcam.render_buffers(
            cam_b,
            [mesh, ball],
            R[b : b + 1],
            p[b : b + 1],
            lighting=LIGHT,
            edge_softness=edge_softness,
        )
        torch.testing.assert_close(both.image[b : b + 1], one.image)
        assert torch.equal(both.object_id[b : b + 1], one.object_id)
    # the sphere in front of and behind the torus: both show
    ids = set(both.object_id.unique().tolist())
    assert {0, 1} <= ids


def test_textured_mesh_needs_uvs():
    m = box((1.0, 1.0, 1.0))
    with pytest.raises(ValueError, match="texture coordinates"):
        diffcam.Primitive("mesh", mesh=m, texture=torch.rand(3, 4, 4))
    with pytest.raises(ValueError, match="needs a mesh"):
        diffcam.Primitive("mesh")


def test_bvh_and_brute_force_render_the_same(dtype):
    mesh = torus(0.8, 0.3, 24, 12, dtype=dtype)
    texture = torch.rand(3, 6, 10, dtype=dtype, generator=torch.Generator().manual_seed(0))
    cam = camera(dtype, 40, 30)
    R, p = pose(dtype)
    out = []
    for ray_casting in ("bvh", "brute_force"):
        tex = texture.clone().requires_grad_(True)
        pos = p.clone().requires_grad_(True)
        prim = diffcam.Primitive("mesh", mesh=mesh, texture=tex, ray_casting=ray_casting)
        buffers = diffcam.render_buffers(cam, [prim], R, pos, lighting=LIGHT)
        buffers.image.square().sum().backward()
        out.append((buffers.image.detach(), buffers.object_id, tex.grad, pos.grad))
    for a, b in zip(*out, strict=True):
        assert torch.equal(a, b)
    with pytest.raises(ValueError, match="ray_casting"):
        diffcam.Primitive("mesh", mesh=mesh, ray_casting="octree")


def test_a_shared_mesh_shape_follows_new_vertices():
    # a MeshShape built for the first vertices, reused for moved ones: the render (and the
    # vertex gradient) is that of the moved mesh
    dtype = torch.float64
    mesh = torus(0.8, 0.3, 16, 8, dtype=dtype)
    cam = camera(dtype)
    R, p = pose(dtype)
    shape = diffcam.Primitive("mesh", mesh=mesh).mesh_shape
    moved = mesh.vertices * torch.tensor([1.2, 0.9, 1.1], dtype=dtype)
    leaf = moved.clone().requires_grad_(True)
    new = diffcam.Primitive("mesh", mesh=diffcam.mesh.Mesh(leaf, mesh.faces), mesh_shape=shape)
    fresh = diffcam.Primitive("mesh", mesh=diffcam.mesh.Mesh(moved, mesh.faces))
    a = diffcam.render(cam, [new], R, p, lighting=LIGHT)
    b = diffcam.render(cam, [fresh], R, p, lighting=LIGHT)
    assert torch.equal(a.detach(), b)
    a.sum().backward()
    assert leaf.grad is not None and float(leaf.grad.abs().sum()) > 0
    with pytest.raises(ValueError, match="other faces"):
        diffcam.Primitive("mesh", mesh=box((1.0, 1.0, 1.0), dtype), mesh_shape=shape)


def test_recomputed_backward_of_large_renders_is_the_same():
    # a small max_chunk_elements makes the soft samples recompute their graph in the
    # backward (checkpoint): the same image and gradients
    out = []
    for max_chunk in (1 << 23, 1 << 8):
        render, vertices, texture, position = scene(torch.float64, "antialias")
        leaves = [x.clone().requires_grad_(True) for x in (vertices, texture)]
        mesh = torus(0.8, 0.3, 16, 8, dtype=torch.float64)
        prim = diffcam.Primitive(
            "mesh", mesh=diffcam.mesh.Mesh(leaves[0], mesh.faces, mesh.uvs), texture=leaves[1]
        )
        R, _ = pose(torch.float64)
        image = diffcam.render(
            camera(torch.float64, 32, 24), [prim], R, position.view(1, 1, 3),
            lighting=LIGHT, max_chunk_elements=max_chunk,
        )  # fmt: skip
        image.square().sum().backward()
        out.append((image.detach(), leaves[0].grad, leaves[1].grad))
    for a, b in zip(*out, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("edge_softness", [0, "antialias", 0.5])
def test_no_nan_gradients_edge_on(dtype, edge_softness):
    # a box mesh seen exactly edge-on to two faces (rays in their planes), with the camera's
    # rays through its vertices and edges: finite values and gradients
    mesh = box((1.0, 1.0, 1.0), dtype)
    vertices = mesh.vertices.clone().requires_grad_(True)
    prim = diffcam.Primitive("mesh", mesh=diffcam.mesh.Mesh(vertices, mesh.faces), smooth=True)
    cam = diffcam.PinholeCamera.look_at(
        torch.tensor([0.5, -4.0, 0.5], dtype=dtype), torch.tensor([0.5, 0.0, 0.5], dtype=dtype),
        torch.tensor([0.0, 0.0, 1.0], dtype=dtype), 30.0, 16, 16,
    )  # fmt: skip
    position = torch.zeros(1, 1, 3, dtype=dtype, requires_grad=True)
    image = diffcam.render(
        cam, [prim], torch.eye(3, dtype=dtype).view(1, 1, 3, 3), position, lighting=LIGHT,
        edge_softness=edge_softness,
    )  # fmt: skip
    assert torch.isfinite(image).all()
    image.square().sum().backward()
    assert torch.isfinite(vertices.grad).all() and torch.isfinite(position.grad).all()
