"""Per-sample geometry by components (`renderer.geometry`, `renderer.surface`) against the vector forms it
rewrites (`primitives.intersect`, `primitive_silhouettes.silhouette_distance(..., with_hit=True)`,
`primitives.surface_uv`, `renderer.shading.shade_at`): every primitive kind, float64 values and
gradients to the camera centre, the rotation, the sizes, the light and the ray slopes;
float32 and float64 free of NaN; a gradcheck."""

from __future__ import annotations

import pytest
import torch
import torch.autograd.forward_ad as fwad

from diffcam import primitive_silhouettes
from diffcam import primitives as prim
from diffcam.renderer import geometry, surface
from diffcam.renderer.shading import shade_at

KIND_SIZES = {
    prim.PLANE: (1.0, 1.0, 0.0),
    prim.RECT: (0.3, 0.2, 0.0),
    prim.BOX: (0.25, 0.15, 0.2),
    prim.SPHERE: (0.25, 0.0, 0.0),
    prim.CYLINDER: (0.15, 0.3, 0.0),
    prim.CAPSULE: (0.1, 0.3, 0.0),
}
NB, H, W = 3, 14, 18


def _rotation(nb, dtype, generator):
    q, r = torch.linalg.qr(torch.randn(nb, 3, 3, dtype=dtype, generator=generator))
    return q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)


def _inputs(code, dtype, seed=0):
    """Leaves (A, o, h, light, slopes) for NB images of one primitive 3 m in front of the
    camera, with pixels (NB, n) whose rays hit it, graze it and miss it."""
    g = torch.Generator().manual_seed(seed)
    A = _rotation(NB, dtype, g)  # local_from_camera
    centre_cam = torch.tensor([0.1, -0.05, 3.0], dtype=dtype) + 0.1 * torch.randn(
        NB, 3, dtype=dtype, generator=g
    )
    if code == prim.PLANE:  # a ground plane below the camera, its horizon in view
        tilt = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]], dtype=dtype)
        A = (tilt @ _rotation(NB, dtype, g) * 0.05 + tilt).expand(NB, 3, 3)
        A = torch.linalg.qr(A)[0]
        centre_cam = torch.tensor([0.0, 1.0, 3.0], dtype=dtype).expand(NB, 3)
    o = -(A @ centre_cam.unsqueeze(-1)).squeeze(-1)  # the camera centre, local
    h = torch.tensor(KIND_SIZES[code], dtype=dtype).expand(NB, 3).clone()
    light = torch.nn.functional.normalize(torch.randn(NB, 3, dtype=dtype, generator=g), dim=-1)
    dxp = torch.linspace(-0.15, 0.2, W, dtype=dtype).expand(NB, W).clone()
    dyp = torch.linspace(-0.15, 0.12, H, dtype=dtype).expand(NB, H).clone()
    pix = torch.stack([torch.randperm(H * W, generator=g)[: H * W // 2] for _ in range(NB)])
    return A, o, h, light, dxp, dyp, pix


def _components(code, A, o, h, light, dxp, dyp, pix, fx, fy):
    """Outputs of the component forms: (sd, depth, px, py, pz, u, v, shade), hit."""
    d = geometry.local_rays(A, dxp, dyp, pix, W)
    hc = geometry.columns(h)
    g = geometry.soft_geometry(code, geometry.columns(o), d, hc, A, fx, fy)
    u, v = surface.texture_coords(code, g.point, hc)
    shade = surface.shading(code, g.point, d, hc, geometry.columns(light), 0.3, 0.7)
    return (g.sd, g.depth, *g.point, u, v, shade), g.hit


def _vectors(code, A, o, h, light, dxp, dyp, pix, fx, fy):
    """The same from the vector forms of `primitives` and `shading`."""
    rows = pix // W
    sx, sy = dxp.gather(1, pix - rows * W), dyp.gather(1, rows)
    d = torch.stack([A[:, i, 0:1] * sx + (A[:, i, 1:2] * sy + A[:, i, 2:3]) for i in range(3)], -1)
    d = d.unsqueeze(1)  # (NB, 1, n, 3)
    o1, h1, A1 = o.unsqueeze(1), h.unsqueeze(1), A.unsqueeze(1)
    sd, depth, point, hit = primitive_silhouettes.silhouette_distance(
        code, o1, d, h1, A1, fx, fy, 0.5 * (fx + fy), with_hit=True
    )
    hg = h1.unsqueeze(2)
    u, v = prim.surface_uv(code, point, hg)
    planar = code in (prim.PLANE, prim.RECT)
    shade = shade_at(code, point, d, hg, light[:, None, None], 0.3, 0.7, planar)
    outs = (sd, depth, *point.unbind(-1), u, v, shade)
    return tuple(x[:, 0] for x in outs), hit[:, 0]


@pytest.mark.parametrize("code", list(KIND_SIZES))
def test_components_match_vector_forms_values_and_gradients(code):
    dtype = torch.float64
    A, o, h, light, dxp, dyp, pix = _inputs(code, dtype)
    fx = torch.full((NB, 1), 60.0, dtype=dtype)
    fy = torch.full((NB, 1), 55.0, dtype=dtype)
    # the ray slopes too (the camera's intrinsics): gradients to the ray directions
    leaves = [x.clone().requires_grad_() for x in (A, o, h, light, dxp, dyp)]
    comp, hit = _components(code, *leaves, pix, fx, fy)
    vec, hit_ref = _vectors(code, *leaves, pix, fx, fy)
    assert torch.equal(hit, hit_ref)
    assert hit.any() and not hit.all()  # the pixels hit and miss
    finite = vec[0].abs() < 1e20  # sd is -BIG behind the camera; weight those 0
    assert finite.any()
    g = torch.Generator().manual_seed(1)
    weights = [torch.randn(vec[0].shape, dtype=dtype, generator=g) * finite for _ in vec]
    for a, b in zip(comp, vec, strict=True):
        torch.testing.assert_close(a.expand_as(b), b, rtol=1e-10, atol=1e-10)
    grads = torch.autograd.grad(
        sum((w * torch.where(finite, x, 0.0)).sum() for w, x in zip(weights, comp, strict=True)),
        leaves,
        allow_unused=True,
    )
    ref = torch.autograd.grad(
        sum((w * torch.where(finite, x, 0.0)).sum() for w, x in zip(weights, vec, strict=True)),
        leaves,
        allow_unused=True,
    )
    for a, b in zip(grads, ref, strict=True):
        a = torch.zeros_like(leaves[0][..., :1]) if a is None else a
        b = torch.zeros_like(a) if b is None else b
        torch.testing.assert_close(a.expand_as(b), b, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("code", list(KIND_SIZES))
def test_components_have_finite_gradients(code, dtype):
    A, o, h, light, dxp, dyp, pix = _inputs(code, dtype, seed=2)
    fx = torch.full((NB, 1), 60.0, dtype=dtype)
    leaves = [x.clone().requires_grad_() for x in (A, o, h, light, dxp, dyp)]
    comp, _ = _components(code, *leaves, pix, fx, fx)
    sd, depth, *rest = comp
    loss = torch.sigmoid(sd).sum() + sum(x.sum() for x in rest)
    loss = loss + torch.where(depth < 1e20, depth, 0.0).sum()
    for grad in torch.autograd.grad(loss, leaves, allow_unused=True):
        assert grad is None or torch.isfinite(grad).all()


@pytest.mark.parametrize("code", [prim.BOX, prim.CAPSULE, prim.CYLINDER, prim.SPHERE])
def test_components_gradcheck(code):
    """Finite differences of coverage, depth, (u, v) and shading in the camera centre, at
    pixels away from silhouette-kind switches (a small perturbation keeps every choice)."""
    dtype = torch.float64
    A, o, h, light, dxp, dyp, pix = _inputs(code, dtype, seed=3)
    fx = torch.full((NB, 1), 60.0, dtype=dtype)
    pix = pix[:, :12]

    def outputs(o):
        comp, _ = _components(code, A, o, h, light, dxp, dyp, pix, fx, fx)
        sd, depth, *rest = comp
        return (torch.sigmoid(sd), torch.where(depth < 1e20, depth, 0.0), *rest)

    assert torch.autograd.gradcheck(outputs, (o.clone().requires_grad_(),), eps=1e-7, atol=1e-5)


@pytest.mark.parametrize("code", list(KIND_SIZES))
def test_ray_hit_and_two_sided_shading_match_vector_forms(code):
    """`ray_hit` against `primitives.intersect`, and the hard path's shading (normals flipped
    to face the camera for every kind) against `shade_at(..., two_sided=True)`, at the hits:
    float64 values and gradients."""
    dtype = torch.float64
    A, o, h, light, dxp, dyp, pix = _inputs(code, dtype, seed=4)
    leaves = [x.clone().requires_grad_() for x in (A, o, h, light)]
    A_, o_, h_, light_ = leaves
    d = geometry.local_rays(A_, dxp, dyp, pix, W)
    oc, hc = geometry.columns(o_), geometry.columns(h_)
    t, hit = geometry.ray_hit(code, oc, d, hc)
    p = geometry.Vec(*(oi + t * di for oi, di in zip(oc, d, strict=True)))
    shade = surface.shading(code, p, d, hc, geometry.columns(light_), 0.3, 0.7, two_sided=True)
    d3 = torch.stack(torch.broadcast_tensors(*d), -1)
    t_ref, hit_ref = prim.intersect(code, o_.unsqueeze(1), d3, h_.unsqueeze(1))
    p_ref = o_.unsqueeze(1) + t_ref.unsqueeze(-1) * d3
    shade_ref = shade_at(code, p_ref, d3, h_.unsqueeze(1), light_.unsqueeze(1), 0.3, 0.7, True)
    assert torch.equal(hit, hit_ref) and hit.any() and not hit.all()
    torch.testing.assert_close(t, t_ref, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(shade[hit], shade_ref[hit], rtol=1e-10, atol=1e-10)
    w = torch.randn(t.shape, dtype=dtype, generator=torch.Generator().manual_seed(5)) * hit
    loss = (w * (t + shade)).sum()  # the rays are shared with the reference: keep their graph
    grads = torch.autograd.grad(loss, leaves, allow_unused=True, retain_graph=True)
    ref = torch.autograd.grad((w * (t_ref + shade_ref)).sum(), leaves, allow_unused=True)
    for a, b in zip(grads, ref, strict=True):
        if a is None or b is None:
            assert (a is None or not a.any()) and (b is None or not b.any())
            continue
        torch.testing.assert_close(a, b, rtol=1e-8, atol=1e-8)


@pytest.mark.parametrize("code", [prim.RECT, prim.BOX])
@pytest.mark.slow
def test_edge_distance_is_the_references_bit_for_bit_in_float32(code):
    """The fused edge distance (`renderer.edges`) rounds as the reference product does: the
    shipped pixel controller, trained on soft renders, fails a start of its evaluation when
    the silhouette distance changes in its last bits."""
    A, o, h, light, dxp, dyp, pix = _inputs(code, torch.float32)
    fx = fy = torch.full((NB, 1), 300.0)
    d = geometry.local_rays(A, dxp, dyp, pix, W)
    fused = geometry.soft_geometry(code, geometry.columns(o), d, geometry.columns(h), A, fx, fy)
    with fwad.dual_level():  # the reference, recorded op by op, serves forward-mode AD
        dual = fwad.make_dual(o, torch.zeros_like(o))
        reference = geometry.soft_geometry(
            code, geometry.columns(dual), d, geometry.columns(h), A, fx, fy
        )
        sd = fwad.unpack_dual(reference.sd).primal
    assert torch.equal(fused.sd, sd)


def _capsule_apply(capsule, ox, oy, oz, dx, dy, dz, r, hl, fm):
    """`renderer.capsule._CapsuleSoft` with `geometry`'s intersection test as its ``hits``."""
    o, d = geometry.Vec(ox, oy, oz), geometry.Vec(dx, dy, dz)

    def hits(sd):
        return geometry._hit_near_silhouette(prim.CAPSULE, o, d, geometry.Vec(r, hl, hl), sd)

    return capsule._CapsuleSoft.apply(hits, ox, oy, oz, dx, dy, dz, r, hl, fm)


def test_capsule_function_gradcheck():
    """`renderer.capsule`'s hand-written backward against finite differences in every input
    (camera centre, ray directions, radius, half length, focal length), float64, on rays
    that hit the side, hit an end sphere and miss."""
    from diffcam.renderer import capsule

    dtype = torch.float64
    g = torch.Generator().manual_seed(4)
    nb, n = 2, 16
    o = torch.tensor([0.05, -2.0, 0.1], dtype=dtype) + 0.1 * torch.randn(nb, 3, generator=g)
    o = o.to(dtype)
    # aims around the capsule (r 0.1, half length 0.3): across the side, the ends, beside it
    target = torch.rand(nb, n, 3, dtype=dtype, generator=g) * torch.tensor(
        [0.5, 0.2, 1.0], dtype=dtype
    ) - torch.tensor([0.25, 0.1, 0.5], dtype=dtype)
    d = target - o.unsqueeze(1)
    inputs = (
        *(o[:, i : i + 1] for i in range(3)),
        *(d[..., i] for i in range(3)),
        torch.full((nb, 1), 0.1, dtype=dtype),
        torch.full((nb, 1), 0.3, dtype=dtype),
        torch.full((nb, 1), 60.0, dtype=dtype),
    )
    inputs = tuple(x.clone().requires_grad_() for x in inputs)
    _, _, _, _, _, hit = _capsule_apply(capsule, *inputs)
    assert hit.any() and not hit.all()
    zend = inputs[2] + _capsule_apply(capsule, *inputs)[1] * inputs[5]
    assert ((zend.abs() > 0.3) & hit).any() and ((zend.abs() < 0.3) & hit).any()

    def outputs(*xs):
        return _capsule_apply(capsule, *xs)[:5]

    assert torch.autograd.gradcheck(outputs, inputs, eps=1e-7, atol=1e-5)
