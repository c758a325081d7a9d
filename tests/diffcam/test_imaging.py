"""diffcam.imaging: response, lens distortion, compositing over a plate, video statistics.

Conventions first, then agreement with OpenCV (projectPoints, initUndistortRectifyMap,
undistortPoints, remap), gradients (gradcheck in float64, finiteness at the edges), batching,
and the background / foreground estimates on a synthetic video.
"""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest
import torch

from diffcam import imaging as im

pytestmark = pytest.mark.usefixtures("single_thread")

F64 = torch.float64

# A barrel distortion like a phone's main camera (k1, k2, p1, p2, k3).
PHONE = [-0.28, 0.09, 1e-3, -2e-3, -0.01]
# A small camera whose corners reach |xy| ~ 0.75, where PHONE folds over.
W, H, FX, FY, CX, CY = 64, 48, 55.0, 52.0, 33.3, 23.9


def opencv_K(fx=FX, fy=FY, cx=CX, cy=CY) -> np.ndarray:
    """OpenCV's camera matrix: integer pixel centres, so cx, cy are ours minus 0.5."""
    return np.array([[fx, 0.0, cx - 0.5], [0.0, fy, cy - 0.5], [0.0, 0.0, 1.0]])


def smooth_image(b=1, c=3, h=H, w=W, dtype=F64, seed=0) -> torch.Tensor:
    """(b, c, h, w) low-frequency image in [0.1, 0.9] (bilinear kinks stay small)."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(h, dtype=F64), torch.arange(w, dtype=F64), indexing="ij")
    phase = 2 * math.pi * torch.rand(b, c, 2, generator=g, dtype=F64)
    img = 0.5 + 0.2 * torch.sin(xx / 5.0 + phase[..., 0, None, None]) * torch.cos(
        yy / 7.0 + phase[..., 1, None, None]
    )
    img = img + 0.15 * torch.sin((xx + yy) / 9.0)
    return img.to(dtype)


def pixel_centres(h=H, w=W) -> np.ndarray:
    """(h, w, 2) OpenCV pixel coordinates (j, i) of every pixel."""
    jj, ii = np.meshgrid(np.arange(w, dtype=np.float64), np.arange(h, dtype=np.float64))
    return np.stack([jj, ii], axis=-1)


def cv_undistort(points: np.ndarray, K: np.ndarray, D) -> np.ndarray:
    """cv2.undistortPoints run to convergence (its default stops after 5 iterations)."""
    crit = (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 200, 1e-15)
    pts = points.reshape(-1, 1, 2).astype(np.float64)
    return cv2.undistortPoints(pts, K, np.asarray(D, np.float64), criteria=crit).reshape(
        points.shape
    )


# ---------------------------------------------------------------------------- smoke
def test_smoke(dtype):
    img = smooth_image(2, 3, 12, 16, dtype)
    assert im.apply_response(img, 1.1, 0.02, 2.2).shape == img.shape
    assert im.invert_response(img, 1.1, 0.02, 2.2).dtype == dtype
    xy = torch.rand(2, 5, 2, dtype=dtype) - 0.5
    assert im.distort_normalized(xy, PHONE).shape == (2, 5, 2)
    assert im.undistort_normalized(xy, torch.tensor([PHONE, PHONE])).shape == (2, 5, 2)
    out, valid = im.distort_image(img, 14.0, 14.0, 8.0, 6.0, PHONE)
    assert out.shape == img.shape and out.dtype == dtype
    assert valid.shape == (1, 1, 12, 16) and valid.dtype == torch.bool
    cov = torch.rand(2, 1, 12, 16, dtype=dtype)
    assert im.composite_over_plate(img * cov, cov, img[:1], 1.0, 0.01, 2.0).shape == img.shape
    frames = smooth_image(5, 3, 12, 16, dtype)
    plate = im.clean_plate(frames)
    assert plate.shape == (3, 12, 16)
    assert im.noise_level(frames, plate).shape == (3,)
    mask = im.foreground_mask(frames, plate)
    assert mask.shape == (5, 1, 12, 16) and mask.dtype == torch.bool
    assert im.mean_color(frames, torch.ones_like(mask)).shape == (3,)


# ---------------------------------------------------------------------------- conventions
def test_convention_response_identity_at_defaults():
    x = torch.rand(2, 3, 4, 5)
    assert im.apply_response(x) is x
    assert im.invert_response(x) is x
    one, zero = torch.tensor(1.0), torch.tensor(0.0)
    torch.testing.assert_close(im.apply_response(x, one, zero, one), x, rtol=0, atol=1e-7)
    torch.testing.assert_close(im.invert_response(x, one, zero, one), x, rtol=0, atol=1e-7)


def test_convention_response_formula(dtype):
    x = torch.linspace(0.0, 1.0, 101, dtype=dtype).view(1, 1, 1, -1)
    y = im.apply_response(x, 0.9, 0.05, 2.2)
    torch.testing.assert_close(y, 0.05 + 0.9 * x ** (1 / 2.2))
    torch.testing.assert_close(im.invert_response(y, 0.9, 0.05, 2.2), x, atol=1e-5, rtol=0)
    below = torch.tensor([[[[0.0, 0.04]]]], dtype=dtype)  # under the black level
    assert (im.invert_response(below, 0.9, 0.05, 2.2) == 0).all()


def test_convention_zero_distortion_is_identity(dtype):
    img = torch.rand(3, 2, H, W, dtype=dtype)
    zero = torch.zeros(3, 5, dtype=dtype, requires_grad=True)  # per image, still exact
    fx = torch.tensor([FX, 40.0, 70.0], dtype=dtype)
    out, valid = im.distort_image(img, fx, FY, CX, CY, zero)
    assert torch.equal(out, img) and valid.all()
    # With a margin the output is the central crop of the ideal image, exactly.
    out, valid = im.distort_image(img, FX, FY, CX, CY, [0.0] * 5, margin=(2, 3))
    assert torch.equal(out, img[..., 2:-2, 3:-3]) and valid.all()


def test_convention_pixel_centres(dtype):
    img = torch.rand(1, 3, 5, 6, dtype=dtype)
    ii, jj = torch.meshgrid(torch.arange(5.0), torch.arange(6.0), indexing="ij")
    centres = torch.stack([jj + 0.5, ii + 0.5], dim=-1).to(dtype)[None]
    assert torch.equal(im.sample_bilinear(img, centres), img)
    # Halfway between two centres is their mean; a centre off the image is padding.
    between = im.sample_bilinear(img, torch.tensor([[[[2.0, 1.5]]]], dtype=dtype))
    torch.testing.assert_close(between[0, :, 0, 0], 0.5 * (img[0, :, 1, 1] + img[0, :, 1, 2]))
    outside = torch.tensor([[[[-1.0, 1.5]]]], dtype=dtype)
    assert (im.sample_bilinear(img, outside) == 0).all()
    torch.testing.assert_close(
        im.sample_bilinear(img, outside, "border")[0, :, 0, 0], img[0, :, 1, 0]
    )
    # The map of a zero distortion is the pixel centres themselves.
    pos, valid = im.distortion_map(5, 6, 4.0, 4.0, 3.0, 2.5, torch.zeros(5, dtype=dtype))
    assert torch.equal(pos, centres) and valid.all()


def test_convention_coverage_zero_reproduces_plate(dtype):
    g = torch.Generator().manual_seed(1)
    B = 3
    plate = torch.rand(1, 3, 8, 9, generator=g, dtype=dtype)  # some values below the offsets
    coverage = (torch.rand(B, 1, 8, 9, generator=g, dtype=dtype) > 0.5).to(dtype)
    color = torch.rand(B, 3, 8, 9, generator=g, dtype=dtype) * coverage  # premultiplied
    gain = torch.tensor([0.8, 1.0, 1.3], dtype=dtype)
    offset = torch.tensor([0.1, 0.0, 0.05], dtype=dtype)
    gamma = torch.tensor([2.2, 1.0, 1.8], dtype=dtype)
    out = im.composite_over_plate(color, coverage, plate, gain, offset, gamma)
    uncovered = (coverage == 0).expand_as(out)
    atol = 1e-6 if dtype == torch.float32 else 1e-12
    torch.testing.assert_close(out[uncovered], plate.expand_as(out)[uncovered], rtol=0, atol=atol)
    covered = ~uncovered
    full = im.apply_response(color, gain, offset, gamma)
    torch.testing.assert_close(out[covered], full[covered], rtol=0, atol=atol)


# ---------------------------------------------------------------------------- OpenCV
def test_opencv_project_points():
    """distort_normalized + our intrinsics = cv2.projectPoints (OpenCV's pixel = ours - 0.5)."""
    rng = np.random.default_rng(0)
    X = np.concatenate([rng.uniform(-0.7, 0.7, (500, 2)), np.ones((500, 1))], 1)
    X *= rng.uniform(0.5, 5.0, (500, 1))
    ref, _ = cv2.projectPoints(X, np.zeros(3), np.zeros(3), opencv_K(), np.array(PHONE))
    xy = torch.from_numpy(X[:, :2] / X[:, 2:])
    d = im.distort_normalized(xy, torch.tensor(PHONE, dtype=F64))
    ours = torch.stack([FX * d[:, 0] + CX, FY * d[:, 1] + CY], -1).numpy() - 0.5
    np.testing.assert_allclose(ours, ref.reshape(-1, 2), rtol=0, atol=1e-9)


def test_opencv_undistort_rectify_map():
    """The forward model on the pixel grid = cv2.initUndistortRectifyMap (float32 maps)."""
    K = opencv_K()
    mx, my = cv2.initUndistortRectifyMap(K, np.array(PHONE), None, K, (W, H), cv2.CV_32FC1)
    ii, jj = torch.meshgrid(torch.arange(H, dtype=F64), torch.arange(W, dtype=F64), indexing="ij")
    xy = torch.stack([(jj + 0.5 - CX) / FX, (ii + 0.5 - CY) / FY], -1)
    d = im.distort_normalized(xy, PHONE)
    u = (FX * d[..., 0] + CX - 0.5).numpy()
    v = (FY * d[..., 1] + CY - 0.5).numpy()
    np.testing.assert_allclose(u, mx, rtol=0, atol=2e-4)
    np.testing.assert_allclose(v, my, rtol=0, atol=2e-4)


def first_fold(coeffs) -> float:
    """r^2 where r * radial(r) stops increasing (tangential terms ignored); inf if never."""
    k1, k2, _, _, k3 = coeffs
    roots = np.roots([7 * k3, 5 * k2, 3 * k1, 1.0])
    real = [r.real for r in roots if abs(r.imag) < 1e-12 and r.real > 0]
    return min(real, default=math.inf)


FOLDING = [-0.3, -0.1, 1e-3, -2e-3, -0.05]  # folds over at r ~ 0.84, inside this camera's view


@pytest.mark.parametrize(("coeffs", "margin"), [(PHONE, 0), (FOLDING, 30)])
def test_opencv_undistort_points(coeffs, margin):
    """distortion_map = cv2.undistortPoints run to convergence; valid = has an inverse before
    the fold (and inside the ideal image)."""
    ref = cv_undistort(pixel_centres(), opencv_K(), coeffs)  # normalised
    pos, valid = im.distortion_map(
        H, W, FX, FY, CX, CY, torch.tensor(coeffs, dtype=F64), margin=margin
    )
    pos = pos[0].numpy() - margin
    ours = (pos - np.array([CX, CY])) / np.array([FX, FY])
    valid = valid[0, 0].numpy()
    xd = (pixel_centres() + 0.5 - np.array([CX, CY])) / np.array([FX, FY])

    def round_trip_px(p):
        return np.abs(im.distort_normalized(torch.from_numpy(p), coeffs).numpy() - xd).max(-1) * FX

    before_fold = (ref**2).sum(-1) < first_fold(coeffs)
    inside = ((pos >= 0.5) & (pos <= np.array([W, H]) - 0.5)).all(-1) | (margin > 0)
    expected = (round_trip_px(ref) < 1e-9) & before_fold & inside
    assert (valid | ~expected).all()  # OpenCV's converged inverses are all found
    assert (round_trip_px(ours)[valid] < 1e-9).all()  # and nothing else is called valid
    assert ((ours**2).sum(-1)[valid] < first_fold(coeffs)).all()
    assert np.abs(ours - ref).max(-1)[valid & expected].max() * FX < 1e-9
    if coeffs is PHONE:
        assert (valid == inside).all() and 0.7 < valid.mean() < 0.9  # barrel: corners outside
    else:
        assert 0.8 < valid.mean() < 0.95  # the corners are beyond the fold


@pytest.mark.slow
def test_undistort_accuracy_phone_lens():
    """With the default iterations every valid pixel is within 1e-6 px (at 1920 x 1440 with
    fx = 1400, i.e. 1e-6 / 1400 normalised) of the exact inverse; |k1| = 0.3 both ways."""
    scale = 7  # a camera with the same field of view at 1/7 of the resolution keeps this fast
    h, w, f, m = 1440 // scale, 1920 // scale, 1400.0 / scale, 100
    ii, jj = torch.meshgrid(torch.arange(h, dtype=F64), torch.arange(w, dtype=F64), indexing="ij")
    xd = torch.stack([(jj + 0.5 - w / 2) / f, (ii + 0.5 - h / 2) / f], -1)
    for c in ([-0.3, 0.1, 1e-3, -2e-3, -0.02], [0.3, -0.1, -5e-3, 2e-3, 0.05], PHONE):
        pos, valid = im.distortion_map(
            h, w, f, f, w / 2, h / 2, torch.tensor(c, dtype=F64), margin=m
        )
        xu = (pos[0] - m - torch.tensor([w / 2, h / 2], dtype=F64)) / f
        exact = im.undistort_normalized(xd, c, iterations=60)
        valid = valid[0, 0]
        assert valid.float().mean() > 0.95
        assert ((xu - exact).abs().amax(-1)[valid] * 1400).max() < 1e-6
        assert ((im.distort_normalized(xu, c) - xd).abs().amax(-1)[valid] * 1400).max() < 1e-6


def test_opencv_remap_matches_distort_image(dtype):
    """distort_image = cv2.remap of the ideal image with maps from cv2.undistortPoints."""
    K = opencv_K()
    src = cv_undistort(pixel_centres(), K, PHONE)
    mx = (FX * src[..., 0] + CX - 0.5).astype(np.float32)
    my = (FY * src[..., 1] + CY - 0.5).astype(np.float32)
    img = smooth_image(1, 3, H, W, dtype)
    ref = np.stack(
        [cv2.remap(img[0, c].float().numpy(), mx, my, cv2.INTER_LINEAR) for c in range(3)]
    )
    out, valid = im.distort_image(img, FX, FY, CX, CY, PHONE)
    v = valid[0, 0].numpy()
    assert v.mean() > 0.7
    np.testing.assert_allclose(out[0].numpy()[:, v], ref[:, v], rtol=0, atol=2e-5)


# ---------------------------------------------------------------------------- gradients
def _per_image(*values, grad=True):
    return [torch.tensor(v, dtype=F64, requires_grad=grad) for v in values]


def test_gradcheck_response():
    g = torch.Generator().manual_seed(2)
    x = (0.05 + torch.rand(2, 3, 2, 2, generator=g, dtype=F64)).requires_grad_()
    gain, offset, gamma = _per_image([0.9, 1.2], [0.03, 0.0], [2.2, 1.7])
    assert torch.autograd.gradcheck(im.apply_response, (x, gain, offset, gamma))
    y = (0.1 + 0.8 * torch.rand(2, 3, 2, 2, generator=g, dtype=F64)).requires_grad_()
    assert torch.autograd.gradcheck(im.invert_response, (y, gain, offset, gamma))
    s_gain, s_offset, s_gamma = _per_image(1.1, 0.02, 2.4)  # shape () parameters
    assert torch.autograd.gradcheck(im.apply_response, (x, s_gain, s_offset, s_gamma))


def test_gradcheck_distortion_points():
    g = torch.Generator().manual_seed(3)
    xy = (0.8 * torch.rand(2, 6, 2, generator=g, dtype=F64) - 0.4).requires_grad_()
    coeffs = torch.tensor([PHONE, [0.2, -0.1, 2e-3, 1e-3, 0.03]], dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(im.distort_normalized, (xy, coeffs))
    # Implicit-function gradient of the exact inverse vs finite differences of the solve.
    assert torch.autograd.gradcheck(im.undistort_normalized, (xy, coeffs))
    shared = torch.tensor(PHONE, dtype=F64, requires_grad=True)
    assert torch.autograd.gradcheck(im.undistort_normalized, (xy, shared))


@pytest.mark.slow
def test_gradcheck_distort_image():
    img = smooth_image(1, 2, 6, 7).requires_grad_()
    coeffs = torch.tensor([-0.2, 0.05, 2e-3, -1e-3, 0.01], dtype=F64, requires_grad=True)
    fx, fy, cx, cy = _per_image(6.3, 5.9, 3.6, 3.1)

    def f(img, coeffs, fx, fy, cx, cy):
        return im.distort_image(img, fx, fy, cx, cy, coeffs)[0]

    assert torch.autograd.gradcheck(f, (img, coeffs, fx, fy, cx, cy))


def test_gradcheck_composite():
    g = torch.Generator().manual_seed(4)
    coverage = (0.1 + 0.8 * torch.rand(2, 1, 3, 3, generator=g, dtype=F64)).requires_grad_()
    color = (coverage.detach() * torch.rand(2, 3, 3, 3, generator=g, dtype=F64)).requires_grad_()
    plate = (0.2 + 0.7 * torch.rand(1, 3, 3, 3, generator=g, dtype=F64)).requires_grad_()
    gain, offset, gamma = _per_image([0.9, 1.1], [0.05, 0.01], [2.2, 1.5])
    assert torch.autograd.gradcheck(
        im.composite_over_plate, (color, coverage, plate, gain, offset, gamma)
    )


def test_gradients_finite_at_edges(dtype):
    gain, offset, gamma = (
        torch.tensor(v, dtype=dtype, requires_grad=True) for v in (1.1, 0.05, 2.2)
    )
    x = torch.tensor([0.0, 1e-12, 0.5], dtype=dtype, requires_grad=True)
    y = torch.tensor([0.0, 0.05, 0.5], dtype=dtype, requires_grad=True)  # below / at / above offset
    (
        im.apply_response(x, gain, offset, gamma).sum()
        + im.invert_response(y, gain, offset, gamma).sum()
    ).backward()
    for t in (x, y, gain, offset, gamma):
        assert torch.isfinite(t.grad).all()
    # Compositing at coverage 0 and 1 with a plate partly below the black level.
    coverage = torch.tensor([0.0, 1.0], dtype=dtype).view(1, 1, 1, 2).requires_grad_()
    color = torch.tensor([0.0, 0.0], dtype=dtype).view(1, 1, 1, 2).expand(1, 3, 1, 2).clone()
    color.requires_grad_()
    plate = torch.tensor([0.02, 0.0], dtype=dtype).view(1, 1, 1, 2).expand(1, 3, 1, 2).clone()
    plate.requires_grad_()
    im.composite_over_plate(color, coverage, plate, gain, offset, gamma).sum().backward()
    for t in (color, coverage, plate, gain, offset, gamma):
        assert torch.isfinite(t.grad).all()
    # Zero distortion: finite gradients, and the coefficients do get one (fits start there).
    img = smooth_image(1, 3, 12, 16, dtype).requires_grad_()
    coeffs = torch.zeros(5, dtype=dtype, requires_grad=True)
    fx = torch.tensor(14.0, dtype=dtype, requires_grad=True)
    im.distort_image(img, fx, 14.0, 8.0, 6.0, coeffs)[0].square().sum().backward()
    assert torch.isfinite(img.grad).all() and torch.isfinite(coeffs.grad).all()
    assert coeffs.grad[0].abs() > 0 and torch.isfinite(fx.grad)
    xy = torch.zeros(3, 2, dtype=dtype, requires_grad=True)  # the optical axis
    coeffs = torch.zeros(5, dtype=dtype, requires_grad=True)
    im.undistort_normalized(xy, coeffs).sum().backward()
    assert torch.isfinite(xy.grad).all() and torch.isfinite(coeffs.grad).all()


# ---------------------------------------------------------------------------- batching
def test_coefficient_shapes():
    """(4,) means k3 = 0; (B, 5) is per image along xy's first axis, like (B, 1, 5)."""
    xy = torch.rand(2, 7, 2, dtype=F64) - 0.5
    c = torch.tensor([PHONE, [0.1, 0.02, 0.0, 1e-3, 0.0]], dtype=F64)
    for f in (im.distort_normalized, im.undistort_normalized):
        torch.testing.assert_close(f(xy, c), f(xy, c[:, None, :]), rtol=0, atol=0)
        torch.testing.assert_close(f(xy, c[1, :4]), f(xy, c[1]), rtol=0, atol=0)
        torch.testing.assert_close(f(xy, c)[1], f(xy[1], c[1]), rtol=0, atol=0)
    with pytest.raises(ValueError):
        im.distort_normalized(xy, [0.1, 0.2, 0.3])


def test_batch_equals_per_image_calls():
    B = 3
    img = smooth_image(B, 3, 10, 12)
    gain, offset, gamma = _per_image(
        [0.9, 1.0, 1.2], [0.02, 0.0, 0.05], [2.2, 1.0, 1.6], grad=False
    )
    coverage = torch.rand(B, 1, 10, 12, dtype=F64)
    plate = smooth_image(1, 3, 10, 12, seed=5)
    coeffs = torch.tensor([PHONE, [0.0] * 5, [0.2, -0.05, 1e-3, 1e-3, 0.0]], dtype=F64)
    fx = torch.tensor([11.0, 12.0, 13.0], dtype=F64)
    cx = torch.tensor([6.0, 6.2, 5.7], dtype=F64)
    a = im.apply_response(img, gain, offset, gamma)
    i = im.invert_response(img, gain, offset, gamma)
    c = im.composite_over_plate(img * coverage, coverage, plate, gain, offset, gamma)
    d, valid = im.distort_image(img, fx, 11.5, cx, 5.0, coeffs)
    for b in range(B):
        p = (gain[b], offset[b], gamma[b])
        torch.testing.assert_close(a[b : b + 1], im.apply_response(img[b : b + 1], *p))
        torch.testing.assert_close(i[b : b + 1], im.invert_response(img[b : b + 1], *p))
        cb = im.composite_over_plate(
            img[b : b + 1] * coverage[b : b + 1], coverage[b : b + 1], plate, *p
        )
        torch.testing.assert_close(c[b : b + 1], cb)
        db, vb = im.distort_image(img[b : b + 1], fx[b], 11.5, cx[b], 5.0, coeffs[b])
        torch.testing.assert_close(d[b : b + 1], db)
        assert torch.equal(valid[b : b + 1], vb)
    # One image under per-image lenses broadcasts to the batch.
    d1, _ = im.distort_image(img[:1], fx, 11.5, cx, 5.0, coeffs)
    torch.testing.assert_close(
        d1, im.distort_image(img[:1].expand(B, -1, -1, -1), fx, 11.5, cx, 5.0, coeffs)[0]
    )


# ---------------------------------------------------------------------------- video statistics
def synthetic_video(T=30, h=40, w=48, sigma=0.01, seed=0):
    """A smooth background, a disc of radius 5 crossing it, Gaussian noise; returns
    (frames (T, 3, h, w), background (3, h, w), truth masks (T, 1, h, w), disc colour (3,))."""
    g = torch.Generator().manual_seed(seed)
    background = smooth_image(1, 3, h, w, torch.float32, seed)[0]
    colour = torch.tensor([0.95, 0.15, 0.1])
    yy, xx = torch.meshgrid(torch.arange(h) + 0.5, torch.arange(w) + 0.5, indexing="ij")
    t = torch.arange(T, dtype=torch.float32)
    px = w / 2 + 16 * torch.sin(2 * math.pi * t / T)  # one swing back and forth
    py = h / 2 + 6 * torch.cos(2 * math.pi * t / T)
    truth = ((xx - px.view(-1, 1, 1)) ** 2 + (yy - py.view(-1, 1, 1)) ** 2 < 25).unsqueeze(1)
    frames = torch.where(truth, colour.view(1, 3, 1, 1), background)
    frames = (frames + sigma * torch.randn(frames.shape, generator=g)).clamp(0, 1)
    return frames, background, truth, colour


def test_clean_plate_recovers_background():
    frames, background, _, _ = synthetic_video()
    plate = im.clean_plate(frames)
    err = (plate - background).abs()
    assert err.mean() < 0.004 and err.max() < 0.03
    # Row blocks, a frame subset and a list of uint8 frames give the same background.
    torch.testing.assert_close(im.clean_plate(frames, block_elements=500), plate, rtol=0, atol=0)
    frames8 = [(f * 255).round().to(torch.uint8).numpy() for f in frames]
    assert (im.clean_plate(frames8) - plate).abs().max() < 1.0 / 255
    assert (im.clean_plate(frames, max_frames=15) - background).abs().mean() < 0.006


def test_noise_level():
    frames, _, _, _ = synthetic_video(sigma=0.02)
    sigma = im.noise_level(frames, im.clean_plate(frames))
    assert ((sigma - 0.02).abs() < 0.003).all(), sigma


def test_foreground_mask_and_colour():
    frames, background, truth, colour = synthetic_video()
    plate = im.clean_plate(frames)
    mask = im.foreground_mask(frames, plate)
    inter = (mask & truth).flatten(1).sum(1).float()
    union = (mask | truth).flatten(1).sum(1).float()
    assert (inter / union).min() > 0.8
    assert mask.flatten(1).any(1).all()
    torch.testing.assert_close(im.mean_color(frames, mask), colour, rtol=0, atol=0.02)
    # A static noisy frame has no foreground, even at a low fixed threshold with the opening.
    g = torch.Generator().manual_seed(9)
    still = (background + 0.01 * torch.randn((4, *background.shape), generator=g)).clamp(0, 1)
    assert not im.foreground_mask(still, plate).any()
    assert not im.foreground_mask(still, plate, threshold=0.035).any()
    # Dilation grows the mask.
    assert im.foreground_mask(frames, plate, dilation=1).sum() > mask.sum()
