"""Debug views: tiling, depth / id colourisation, gradient heat maps, point markers."""

from __future__ import annotations

import pytest
import torch

from diffcam import debug


def test_tile_layout_and_values():
    imgs = torch.stack([torch.full((3, 4, 6), float(k) / 5) for k in range(5)])
    out = debug.tile(imgs, ncols=2, pad=1, pad_value=1.0)
    assert out.shape == (3, 3 * 4 + 2, 2 * 6 + 1)
    assert torch.equal(out[:, 0:4, 0:6], imgs[0])
    assert torch.equal(out[:, 0:4, 7:13], imgs[1])
    assert torch.equal(out[:, 10:14, 0:6], imgs[4])
    assert (out[:, 10:14, 7:13] == 1.0).all()  # empty cell
    video = debug.tile(imgs.unsqueeze(0).expand(3, -1, -1, -1, -1), ncols=2, pad=1)
    assert video.shape == (3, *out.shape)


def test_tile_default_is_roughly_wide():
    out = debug.tile(torch.zeros(8, 3, 96, 288))
    assert out.shape[2] > out.shape[1]


def test_colorize_depth_background_and_order():
    depth = torch.tensor([[[[0.0, 1.0, 2.0, 2.6]]]])
    col = debug.colorize_depth(depth, near=1.0, far=3.0)
    assert col.shape == (1, 3, 1, 4)
    assert torch.equal(col[0, :, 0, 0], torch.zeros(3))  # no hit
    # near is red-ish (warm), far is blue-ish (cold)
    assert col[0, 0, 0, 1] > col[0, 2, 0, 1]
    assert col[0, 2, 0, 3] > col[0, 0, 0, 3]
    assert col.min() >= 0 and col.max() <= 1


def test_colorize_ids_distinct_and_background():
    ids = torch.tensor([[[-1, 0, 1, 2, 3, 4, 5, 6, 7, 8]]])
    col = debug.colorize_ids(ids)
    assert col.shape == (1, 3, 1, 10)
    assert torch.equal(col[0, :, 0, 0], torch.zeros(3))
    cols = col[0, :, 0, 1:].T
    dists = torch.cdist(cols, cols) + torch.eye(9) * 10
    assert dists.min() > 0.1


def test_gradient_heatmap_function_equals_grad_and_highlights():
    img = torch.rand(2, 3, 8, 10)
    target = img.clone()
    target[:, :, 2:4, 3:6] = 0.0

    def loss(x):
        return ((x - target) ** 2).sum()

    a = debug.gradient_heatmap(loss, img)
    g = 2 * (img - target)
    b = debug.gradient_heatmap(g, img)
    torch.testing.assert_close(a, b)
    assert a.shape == img.shape and a.min() >= 0 and a.max() <= 1
    # only the region where the loss depends on the pixels is coloured
    plain = debug.gradient_heatmap(torch.zeros_like(img), img)
    change = (a - plain).abs().sum(1)
    assert change[:, 2:4, 3:6].mean() > 0.3
    assert change[:, 5:, :].max() == 0
    signed = debug.gradient_heatmap(g, img, signed=True)
    assert signed.shape == img.shape
    single = debug.gradient_heatmap(loss, img[0:1])
    assert single.shape == (1, 3, 8, 10)


def test_gradient_heatmap_zero_gradient_is_plain():
    img = torch.rand(3, 5, 5)
    out = debug.gradient_heatmap(torch.zeros_like(img), img)
    assert out.shape == (3, 5, 5) and torch.isfinite(out).all()


def test_draw_points():
    img = torch.zeros(1, 3, 20, 20)
    pts = torch.tensor([[[10.5, 5.5], [float("nan"), 3.0]]])
    out = debug.draw_points(img, pts, color=(0.0, 1.0, 0.0), radius=2)
    assert torch.equal(out[0, :, 5, 10], torch.tensor([0.0, 1.0, 0.0]))
    assert out[0, 1].sum() > 0 and (out[0, 1, 15:] == 0).all()
    assert torch.equal(img, torch.zeros_like(img))  # input untouched
    with pytest.raises(ValueError):
        debug.draw_points(img, torch.zeros(2, 3, 2))
