"""PinholeCamera: conventions, OpenCV agreement, rays/project consistency, gradients, batching."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

import diffcam

from ._common import front_camera, rot


def random_camera(B=1, dtype=torch.float64, seed=0, W=32, H=24, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    fx = 20 + 30 * torch.rand(B, generator=g, dtype=dtype)
    fy = 20 + 30 * torch.rand(B, generator=g, dtype=dtype)
    cx = W / 2 + 3 * torch.randn(B, generator=g, dtype=dtype)
    cy = H / 2 + 3 * torch.randn(B, generator=g, dtype=dtype)
    Rs = torch.stack(
        [rot("z", float(a)) @ rot("x", float(b)) for a, b in torch.randn(B, 2, generator=g)]
    ).to(dtype)
    t = torch.randn(B, 3, generator=g, dtype=dtype)
    fx, fy, cx, cy, Rs, t = (x.to(device) for x in (fx, fy, cx, cy, Rs, t))
    return diffcam.PinholeCamera(fx, fy, cx, cy, W, H, Rs, t)


def test_smoke_shapes(dtype, device):
    cam = random_camera(B=3, dtype=dtype, device=device)
    o, d = cam.rays()
    assert o.shape == d.shape == (3, 24, 32, 3) and d.dtype == dtype and d.device == device
    pix, depth = cam.project_with_depth(torch.randn(3, 5, 7, 3, dtype=dtype, device=device))
    assert pix.shape == (3, 5, 7, 2) and depth.shape == (3, 5, 7) and pix.device == device
    torch.testing.assert_close(
        torch.linalg.vector_norm(d, dim=-1), torch.ones(3, 24, 32, dtype=dtype, device=device)
    )


def test_convention_pixel_centres():
    """The ray of pixel (row i, column j) projects to (j + 0.5, i + 0.5)."""
    cam = random_camera(B=2)
    o, d = cam.rays()
    pts = o + 2.7 * d
    pix, depth = cam.project_with_depth(pts)
    jj, ii = torch.meshgrid(torch.arange(32.0), torch.arange(24.0), indexing="xy")
    expect = torch.stack([jj + 0.5, ii + 0.5], -1).to(torch.float64)
    torch.testing.assert_close(pix, expect.expand_as(pix), atol=1e-9, rtol=0)
    assert (depth > 0).all()


def test_convention_centred_principal_point():
    """cx = W / 2 puts the optical axis on the image centre (between pixels for even W)."""
    cam = front_camera(width=40, height=30)
    pix, depth = cam.project_with_depth(torch.tensor([[0.0, 0.0, 0.0]], dtype=torch.float64))
    torch.testing.assert_close(pix[0], torch.tensor([20.0, 15.0], dtype=torch.float64))
    torch.testing.assert_close(depth[0], torch.tensor(3.0, dtype=torch.float64))


def test_convention_axes_look_at():
    """look_at: world +x appears to the right, world +z (up) appears towards row 0."""
    cam = front_camera()
    pts = torch.tensor([[[0.0, 0, 0], [0.5, 0, 0], [0, 0, 0.5]]], dtype=torch.float64)
    pix, _ = cam.project_with_depth(pts)
    assert pix[0, 1, 0] > pix[0, 0, 0] and abs(pix[0, 1, 1] - pix[0, 0, 1]) < 1e-9
    assert pix[0, 2, 1] < pix[0, 0, 1] and abs(pix[0, 2, 0] - pix[0, 0, 0]) < 1e-9


def test_project_matches_opencv():
    """project() equals cv2.projectPoints with K shifted by -0.5 px, to 1e-4 px."""
    cam = random_camera(B=4, seed=3)
    g = torch.Generator().manual_seed(1)
    worst = 0.0
    for b in range(4):
        Rc = cam.rotation[b].numpy()
        tc = cam.translation[b].numpy()
        R_cw = Rc.T
        t_cw = -R_cw @ tc
        # points in front of the camera
        pc = np.random.default_rng(b).uniform([-1, -1, 1], [1, 1, 4], size=(50, 3))
        pw = (Rc @ pc.T).T + tc
        K = np.array(
            [
                [cam.fx[b].item(), 0, cam.cx[b].item() - 0.5],
                [0, cam.fy[b].item(), cam.cy[b].item() - 0.5],
                [0, 0, 1],
            ]
        )
        rvec, _ = cv2.Rodrigues(R_cw)
        ref, _ = cv2.projectPoints(pw, rvec, t_cw, K, None)
        ref = ref.reshape(-1, 2) + 0.5
        pix, depth = cam.project_with_depth(torch.from_numpy(pw)[None].expand(4, -1, -1))
        err = np.abs(pix[b].numpy() - ref).max()
        worst = max(worst, err)
        np.testing.assert_allclose(depth[b].numpy(), pc[:, 2], atol=1e-9)
    del g
    assert worst < 1e-4, worst


def test_from_opencv_matches_cv2():
    """from_opencv(K, rvec=, tvec=) reproduces cv2.projectPoints (integer-centre convention)."""
    K = np.array([[50.0, 0, 15.3], [0, 48.0, 11.7], [0, 0, 1]])
    rvec = np.array([0.1, -0.3, 0.2])
    tvec = np.array([0.2, -0.1, 3.0])
    pts = np.random.default_rng(0).uniform(-0.5, 0.5, size=(20, 3))
    ref, _ = cv2.projectPoints(pts, rvec, tvec, K, None)
    cam = diffcam.PinholeCamera.from_opencv(
        torch.from_numpy(K), 32, 24, rvec=torch.from_numpy(rvec), tvec=torch.from_numpy(tvec)
    )
    pix, _ = cam.project_with_depth(torch.from_numpy(pts)[None])
    np.testing.assert_allclose(pix[0].numpy(), ref.reshape(-1, 2) + 0.5, atol=1e-6)
    # world_from_camera form
    R_cw, _ = cv2.Rodrigues(rvec)
    cam2 = diffcam.PinholeCamera.from_opencv(
        torch.from_numpy(K),
        32,
        24,
        rotation=torch.from_numpy(R_cw.T),
        translation=torch.from_numpy(-R_cw.T @ tvec),
    )
    torch.testing.assert_close(cam2.project_with_depth(torch.from_numpy(pts)[None])[0], pix)


def test_rays_project_inverse(dtype, device):
    """project(o + t d) gives back the pixel centre and depth t * d_z (camera frame)."""
    cam = random_camera(B=2, dtype=dtype, seed=5, device=device)
    o, d = cam.rays(normalize=False)
    t = 0.5 + torch.rand(2, 24, 32, 1, dtype=dtype).to(device)
    pix, depth = cam.project_with_depth(o + t * d)
    jj, ii = torch.meshgrid(torch.arange(32.0), torch.arange(24.0), indexing="xy")
    expect = torch.stack([jj + 0.5, ii + 0.5], -1).to(device=device, dtype=dtype)
    tol = 1e-3 if dtype == torch.float32 else 1e-9
    torch.testing.assert_close(pix, expect.expand_as(pix), atol=tol, rtol=0)
    torch.testing.assert_close(depth, t[..., 0], atol=tol, rtol=0)


def test_fov_constructor():
    cam = diffcam.PinholeCamera.from_fov(torch.tensor(90.0, dtype=torch.float64), 64, 32)
    torch.testing.assert_close(cam.fy, torch.tensor([16.0], dtype=torch.float64))
    torch.testing.assert_close(cam.cx, torch.tensor([32.0], dtype=torch.float64))


def test_batch_consistency():
    cam = random_camera(B=3, seed=7)
    pts = torch.randn(3, 10, 3, dtype=torch.float64) + torch.tensor(
        [0, 0, 0.0], dtype=torch.float64
    )
    pix, depth = cam.project_with_depth(pts)
    for b in range(3):
        single = diffcam.PinholeCamera(
            cam.fx[b], cam.fy[b], cam.cx[b], cam.cy[b], 32, 24, cam.rotation[b], cam.translation[b]
        )
        p1, d1 = single.project_with_depth(pts[b : b + 1])
        torch.testing.assert_close(p1[0], pix[b])
        torch.testing.assert_close(d1[0], depth[b])
        o1, r1 = single.rays()
        torch.testing.assert_close(r1[0], cam.rays()[1][b])


def test_gradcheck_project():
    """d pixels / d (fx, fy, cx, cy, eye) in float64."""
    pts = torch.tensor([[[0.3, 0.2, 0.1], [-0.2, 0.5, -0.3]]], dtype=torch.float64)

    def f(fx, fy, cx, cy, eye):
        cam = diffcam.PinholeCamera.look_at(
            eye,
            torch.zeros(3, dtype=torch.float64),
            torch.tensor([0, 0, 1.0], dtype=torch.float64),
            torch.tensor(40.0, dtype=torch.float64),
            20,
            10,
        )
        cam = diffcam.PinholeCamera(fx, fy, cx, cy, 20, 10, cam.rotation, cam.translation)
        return cam.project_with_depth(pts)

    args = [
        torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (30.0, 31.0, 10.0, 5.0)
    ]
    args.append(torch.tensor([0.1, -3.0, 0.4], dtype=torch.float64, requires_grad=True))
    assert torch.autograd.gradcheck(f, args)


def test_no_nan_grad_point_on_camera_plane():
    cam = front_camera()
    p = torch.tensor([[[0.3, -3.0, 0.2]]], dtype=torch.float64, requires_grad=True)  # depth 0
    pix, _ = cam.project_with_depth(p)
    pix.sum().backward()
    assert torch.isfinite(pix).all() and torch.isfinite(p.grad).all()


def test_convention_project_returns_pixel_coordinates_only():
    # docs/design.md, "Public API": cam.project(points_world) -> (..., 2) continuous pixel coordinates.
    cam = diffcam.PinholeCamera.look_at(
        torch.tensor([0.0, -3.0, 1.0]), torch.tensor([0.0, 0.0, 1.0]), torch.tensor([0.0, 0.0, 1.0]),
        torch.tensor(40.0), 64, 48,
    )  # fmt: skip
    pixels = cam.project(torch.tensor([[[0.0, 0.0, 1.0], [0.1, 0.0, 1.2]]]))
    assert isinstance(pixels, torch.Tensor) and pixels.shape == (1, 2, 2)
    torch.testing.assert_close(pixels[0, 0], torch.tensor([32.0, 24.0]))
    torch.testing.assert_close(
        pixels, cam.project_with_depth(torch.tensor([[[0.0, 0.0, 1.0], [0.1, 0.0, 1.2]]]))[0]
    )


def test_downscaled_camera_projects_to_the_same_place_in_the_smaller_image():
    camera = diffcam.PinholeCamera.look_at(
        torch.tensor([0.3, -4.0, 1.2]), torch.zeros(3), torch.tensor([0.0, 0.0, 1.0]), 40.0, 288, 96
    )
    points = torch.tensor([[[0.0, 0.0, 0.0], [0.7, 0.2, 0.9], [-1.1, 0.5, -0.3]]])
    small = camera.downscaled(2)
    assert (small.width, small.height) == (144, 48)
    torch.testing.assert_close(small.project(points), camera.project(points) / 2)
    assert camera.downscaled(1) is camera
    with pytest.raises(ValueError, match="divisor"):
        camera.downscaled(5)  # 96 is not a multiple of 5


def test_a_render_through_the_downscaled_camera_is_the_pooled_full_render():
    # The same scene through the camera downscaled by 2 and at full resolution averaged over
    # 2 x 2 blocks: the same picture, up to the sampling of edges and textures (a pixel
    # against the average of four samples). Shifting the small camera by one of its pixels
    # makes a larger difference, so the check sees a misplaced image.
    scene = diffcam.load_scene("pendulum_cart", batch_size=1)
    state = scene.initial_state()
    small = scene.view(camera=scene.camera.downscaled(2))
    pooled = torch.nn.functional.avg_pool2d(scene.render(state, edge_softness=0.0), 2)
    image = small.render(state, edge_softness=0.0)
    assert image.shape == pooled.shape == (1, 3, 48, 144)
    c = small.camera
    shifted = small.view(
        camera=diffcam.PinholeCamera(
            c.fx, c.fy, c.cx + 1.0, c.cy, c.width, c.height, c.rotation, c.translation
        )
    ).render(state, edge_softness=0.0)
    error = (image - pooled).abs().mean()
    assert error < 0.015
    assert (shifted - pooled).abs().mean() > 1.3 * error
