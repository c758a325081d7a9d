"""The eager path tests each primitive only inside a pixel window around its projection (and
capsules / cylinders exactly only near their axis): it must find the same nearest hits as
testing every pixel exactly, whatever the poses."""

from __future__ import annotations

import torch

import diffcam
from diffcam.primitives import intersect
from diffcam.renderer import nearest

from ._common import axis_angle, front_camera


def test_windows_find_every_hit(dtype, monkeypatch):
    g = torch.Generator().manual_seed(0)
    cam = front_camera(width=40, height=30, dtype=dtype, eye=(0.0, -3.0, 0.5), fov=50.0)
    prims = [
        diffcam.Primitive("plane", None),
        diffcam.Primitive("rectangle", [1.0, 0.6]),
        diffcam.Primitive("box", [0.5, 0.3, 0.4]),
        diffcam.Primitive("sphere", 0.3),
        diffcam.Primitive("capsule", [0.1, 0.8]),
        diffcam.Primitive("cylinder", [0.2, 0.5]),
        diffcam.Primitive("box", [3.0, 0.1, 0.1]),  # long and thin: often partly off-screen
    ]
    B, K = 24, len(prims)
    rot = axis_angle(2.0 * torch.randn(B, K, 3, generator=g, dtype=dtype))
    pos = 1.5 * torch.randn(B, K, 3, generator=g, dtype=dtype)
    rot[:, 0], pos[:, 0] = torch.eye(3, dtype=dtype), torch.tensor([0.0, 0.0, -1.0], dtype=dtype)
    pos[0, 2] = torch.tensor([0.0, -2.9, 0.5], dtype=dtype)  # the box straddles the camera
    pos[1, 3] = torch.tensor([0.0, -4.0, 0.5], dtype=dtype)  # the sphere is behind it
    pos[2, 4] = torch.tensor([0.0, -3.0, 0.5], dtype=dtype)  # the camera inside the capsule
    eager = diffcam.render_buffers(cam, prims, rot, pos)
    chunked = diffcam.render_buffers(cam, prims, rot, pos, max_chunk_elements=700)
    # every primitive tested at every pixel, exactly
    B_, H, W = eager.object_id.shape
    zero = torch.zeros(B_, dtype=torch.long)
    monkeypatch.setattr(nearest, "pixel_windows", lambda *a: (zero, zero, H, W))
    monkeypatch.setattr(nearest, "_intersect_culled", intersect)
    every = diffcam.render_buffers(cam, prims, rot, pos)
    for k in range(K):  # every primitive wins pixels somewhere
        assert (eager.object_id == k).any()
    assert torch.equal(eager.object_id, every.object_id)
    assert torch.equal(eager.object_id, chunked.object_id)
    torch.testing.assert_close(eager.image, chunked.image, rtol=0, atol=0)
