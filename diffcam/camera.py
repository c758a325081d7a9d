"""Pinhole camera with OpenCV axes and half-pixel-centre continuous image coordinates.

Conventions (docs/design.md, "Conventions"):

* Camera axes: x right, y down, z forward (OpenCV). ``world_from_camera`` maps camera-frame
  points to the world: ``x_world = R @ x_cam + t``; ``t`` is the camera centre in the world.
* Continuous image coordinates: pixel (row i, column j) covers x in [j, j+1], y in [i, i+1] and
  its ray goes through the pixel centre (j + 0.5, i + 0.5). A centred principal point is
  ``cx = W / 2``. ``from_opencv`` converts an integer-pixel-centre calibration (adds 0.5).
* Batched: every parameter has a leading batch axis of size ``B`` or 1 (shared). The camera's
  batch size is the broadcast of all of them.
"""

from __future__ import annotations

import math

import torch

from ._safe import safe_div, safe_normalize

__all__ = ["PinholeCamera"]


def _as_tensor(x, like: torch.Tensor | None = None) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x
    if like is not None:
        return torch.as_tensor(x, dtype=like.dtype, device=like.device)
    return torch.as_tensor(x, dtype=torch.get_default_dtype())


def _first_tensor(*xs) -> torch.Tensor | None:
    for x in xs:
        if isinstance(x, torch.Tensor):
            return x
    return None


class PinholeCamera:
    """A batched, differentiable pinhole camera.

    Args:
        fx, fy: focal lengths in pixels, tensors of shape () or (B,) (may require grad).
        cx, cy: principal point in continuous pixel coordinates (pixel centres at +0.5),
            shape () or (B,).
        width, height: resolution in pixels (Python ints, shared by the batch).
        world_from_camera_rotation: (3, 3) or (B, 3, 3) rotation, camera axes -> world.
        world_from_camera_translation: (3,) or (B, 3) camera centre in world coordinates (m).

    All tensors are stored with a leading batch axis (size B or 1); ``batch_size`` is their
    broadcast. dtype and device follow ``fx``.
    """

    def __init__(
        self,
        fx,
        fy,
        cx,
        cy,
        width: int,
        height: int,
        world_from_camera_rotation=None,
        world_from_camera_translation=None,
    ):
        ref = _first_tensor(
            fx, fy, cx, cy, world_from_camera_rotation, world_from_camera_translation
        )
        fx, fy, cx, cy = (_as_tensor(v, ref) for v in (fx, fy, cx, cy))
        if ref is None:
            ref = fx
        if world_from_camera_rotation is None:
            world_from_camera_rotation = torch.eye(3, dtype=ref.dtype, device=ref.device)
        if world_from_camera_translation is None:
            world_from_camera_translation = torch.zeros(3, dtype=ref.dtype, device=ref.device)
        R = _as_tensor(world_from_camera_rotation, ref)
        t = _as_tensor(world_from_camera_translation, ref)
        self.fx = fx.reshape(-1)
        self.fy = fy.reshape(-1)
        self.cx = cx.reshape(-1)
        self.cy = cy.reshape(-1)
        self.rotation = R.reshape(-1, 3, 3)
        self.translation = t.reshape(-1, 3)
        self.width = int(width)
        self.height = int(height)
        sizes = {
            v.shape[0]
            for v in (self.fx, self.fy, self.cx, self.cy, self.rotation, self.translation)
        }
        sizes.discard(1)
        if len(sizes) > 1:
            raise ValueError(f"PinholeCamera: inconsistent batch sizes {sorted(sizes)}")
        self.batch_size = sizes.pop() if sizes else 1

    # ------------------------------------------------------------------ constructors
    @classmethod
    def from_fov(
        cls,
        fov_y_deg,
        width: int,
        height: int,
        world_from_camera_rotation=None,
        world_from_camera_translation=None,
    ) -> PinholeCamera:
        """Square pixels, centred principal point, vertical field of view ``fov_y_deg``.

        Args:
            fov_y_deg: () or (B,) vertical field of view in degrees (may require grad).
            width, height: resolution in pixels.
            world_from_camera_rotation: (3, 3) or (B, 3, 3); identity if None.
            world_from_camera_translation: (3,) or (B, 3) camera centre (m); origin if None.
        """
        ref = _first_tensor(fov_y_deg, world_from_camera_rotation, world_from_camera_translation)
        fov = _as_tensor(fov_y_deg, ref)
        fy = (0.5 * height) / torch.tan(fov * (math.pi / 360.0))
        cx = torch.full_like(fy, 0.5 * width)
        cy = torch.full_like(fy, 0.5 * height)
        return cls(
            fy, fy, cx, cy, width, height, world_from_camera_rotation, world_from_camera_translation
        )

    @classmethod
    def look_at(cls, eye, target, up, fov_y_deg, width: int, height: int) -> PinholeCamera:
        """Camera at ``eye`` looking at ``target`` with ``up`` pointing up in the image.

        Args:
            eye, target, up: (3,) or (B, 3) world points / direction (m).
            fov_y_deg: () or (B,) vertical field of view in degrees.
            width, height: resolution in pixels.
        """
        ref = _first_tensor(eye, target, up, fov_y_deg)
        eye, target, up = (_as_tensor(v, ref) for v in (eye, target, up))
        forward = safe_normalize(target - eye)  # camera +z
        right = safe_normalize(torch.linalg.cross(forward, up.expand_as(forward)))  # camera +x
        down = torch.linalg.cross(forward, right)  # camera +y (right-handed: x = y cross z)
        R = torch.stack([right, down, forward], dim=-1)  # columns are camera axes in world
        return cls.from_fov(fov_y_deg, width, height, R, eye)

    @classmethod
    def from_opencv(
        cls,
        K,
        width: int,
        height: int,
        rotation=None,
        translation=None,
        *,
        rvec=None,
        tvec=None,
    ) -> PinholeCamera:
        """From an OpenCV calibration (integer pixel centres: adds 0.5 to cx and cy).

        Args:
            K: (3, 3) or (B, 3, 3) intrinsic matrix in OpenCV's convention.
            width, height: resolution in pixels.
            rotation, translation: ``world_from_camera`` (3, 3)/(B, 3, 3) and (3,)/(B, 3), as in
                the main constructor. Identity/origin if None.
            rvec, tvec: alternatively OpenCV's extrinsics (``camera_from_world``, as returned by
                ``cv2.solvePnP`` and used by ``cv2.projectPoints``): Rodrigues vector (3,)/(B, 3)
                and translation (3,)/(B, 3). Mutually exclusive with rotation/translation.
        """
        K = _as_tensor(K)
        fx, fy = K[..., 0, 0], K[..., 1, 1]
        cx, cy = K[..., 0, 2] + 0.5, K[..., 1, 2] + 0.5
        if rvec is not None or tvec is not None:
            if rotation is not None or translation is not None:
                raise ValueError("from_opencv: give rotation/translation or rvec/tvec, not both")
            rvec = _as_tensor(rvec if rvec is not None else [0.0, 0.0, 0.0], K)
            tvec = _as_tensor(tvec if tvec is not None else [0.0, 0.0, 0.0], K)
            R_cw = _rodrigues(rvec)
            rotation = R_cw.transpose(-1, -2)
            translation = -(rotation @ tvec.unsqueeze(-1)).squeeze(-1)
        return cls(fx, fy, cx, cy, width, height, rotation, translation)

    # ------------------------------------------------------------------ properties
    @property
    def dtype(self) -> torch.dtype:
        return self.fx.dtype

    @property
    def device(self) -> torch.device:
        return self.fx.device

    @property
    def K(self) -> torch.Tensor:
        """(B|1, 3, 3) intrinsic matrix in this library's half-pixel convention."""
        n = max(v.shape[0] for v in (self.fx, self.fy, self.cx, self.cy))
        z = torch.zeros(n, dtype=self.dtype, device=self.device)
        o = torch.ones_like(z)
        fx, fy, cx, cy = (v.expand(n) for v in (self.fx, self.fy, self.cx, self.cy))
        return torch.stack([fx, z, cx, z, fy, cy, z, z, o], dim=-1).reshape(n, 3, 3)

    @property
    def camera_from_world(self) -> tuple[torch.Tensor, torch.Tensor]:
        """``(R, t)`` with ``x_cam = R @ x_world + t``; shapes (B|1, 3, 3), (B|1, 3)."""
        Rt = self.rotation.transpose(-1, -2)
        return Rt, -(Rt @ self.translation.unsqueeze(-1)).squeeze(-1)

    def scaled(self, s: int) -> PinholeCamera:
        """The same camera at ``s`` times the resolution (used for s x s supersampling)."""
        return PinholeCamera(
            self.fx * s,
            self.fy * s,
            self.cx * s,
            self.cy * s,
            self.width * s,
            self.height * s,
            self.rotation,
            self.translation,
        )

    def downscaled(self, factor: int) -> PinholeCamera:
        """The same camera at 1 / ``factor`` of the resolution: each of its pixels covers a
        ``factor`` x ``factor`` block of this camera's, so a render through it approximates
        the average of those blocks (``avg_pool2d(image, factor)``) at about 1 / factor^2 of the
        cost. Focal lengths and principal point are divided by ``factor`` (pixel centres at
        +0.5: a block's centre maps to the new pixel's centre). Width and height must be
        multiples of ``factor``."""
        factor = int(factor)
        if factor < 1 or self.width % factor or self.height % factor:
            raise ValueError(
                f"PinholeCamera.downscaled: factor {factor} must be a positive divisor of the "
                f"resolution {self.width} x {self.height}"
            )
        if factor == 1:
            return self
        return PinholeCamera(
            self.fx / factor,
            self.fy / factor,
            self.cx / factor,
            self.cy / factor,
            self.width // factor,
            self.height // factor,
            self.rotation,
            self.translation,
        )

    # ------------------------------------------------------------------ rays / projection
    def pixel_grid(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Pixel-centre coordinates: x (W,) = j + 0.5 and y (H,) = i + 0.5."""
        x = torch.arange(self.width, dtype=self.dtype, device=self.device) + 0.5
        y = torch.arange(self.height, dtype=self.dtype, device=self.device) + 0.5
        return x, y

    def camera_directions(self) -> torch.Tensor:
        """(B|1, H, W, 3) camera-frame ray directions with z = 1 (so ray parameter = depth)."""
        x, y = self.pixel_grid()
        dx = (x.view(1, 1, -1) - self.cx.view(-1, 1, 1)) / self.fx.view(-1, 1, 1)
        dy = (y.view(1, -1, 1) - self.cy.view(-1, 1, 1)) / self.fy.view(-1, 1, 1)
        n = max(dx.shape[0], dy.shape[0])
        dx = dx.expand(n, self.height, self.width)
        dy = dy.expand(n, self.height, self.width)
        return torch.stack([dx, dy, torch.ones_like(dx)], dim=-1)

    def rays(self, normalize: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """World-frame rays through every pixel centre.

        Returns:
            origins: (B|1, H, W, 3) camera centre, repeated (m).
            directions: (B|1, H, W, 3) world-frame directions; unit length if ``normalize``,
                otherwise scaled so that the ray parameter equals camera depth (z_cam = 1).
        """
        d_cam = self.camera_directions()
        if normalize:
            d_cam = d_cam / torch.linalg.vector_norm(d_cam, dim=-1, keepdim=True)
        R = self.rotation.view(-1, 1, 1, 3, 3)
        d = (R @ d_cam.unsqueeze(-1)).squeeze(-1)
        o = self.translation.view(-1, 1, 1, 3).expand_as(d)
        return o, d

    def world_to_camera(self, points: torch.Tensor) -> torch.Tensor:
        """Points (B|1, ..., 3) world -> camera frame (B, ..., 3)."""
        nb = points.dim() - 2
        R = self.rotation.view(self.rotation.shape[0], *([1] * nb), 3, 3)
        t = self.translation.view(self.translation.shape[0], *([1] * nb), 3)
        return ((points - t).unsqueeze(-2) @ R).squeeze(-2)  # R^T (p - t) as row-vector product

    def project(self, points: torch.Tensor) -> torch.Tensor:
        """Continuous pixel coordinates (B, ..., 2) of world points (B|1, ..., 3): the
        contract's ``cam.project(points_world)``. See `project_with_depth`."""
        return self.project_with_depth(points)[0]

    def project_with_depth(self, points: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Project world points to continuous pixel coordinates, with their depth.

        Args:
            points: (B|1, ..., 3) world points (m); the leading axis broadcasts with the camera.

        Returns:
            pixels: (B, ..., 2) continuous coordinates (x = column, y = row); a point on the ray
                of pixel (i, j) projects to (j + 0.5, i + 0.5).
            depth: (B, ...) depth along the camera z axis (m); points behind the camera have
                depth <= 0 and their pixel coordinates are meaningless (finite, not NaN).
        """
        if points.dim() < 2:
            points = points.unsqueeze(0)
        pc = self.world_to_camera(points)
        nb = points.dim() - 2
        shape = (-1, *([1] * nb))
        z = pc[..., 2]
        u = safe_div(pc[..., 0], z) * self.fx.view(shape) + self.cx.view(shape)
        v = safe_div(pc[..., 1], z) * self.fy.view(shape) + self.cy.view(shape)
        return torch.stack([u, v], dim=-1), z

    def __repr__(self) -> str:
        return (
            f"PinholeCamera(batch={self.batch_size}, {self.width}x{self.height}, "
            f"dtype={self.dtype}, device={self.device})"
        )


def _rodrigues(rvec: torch.Tensor) -> torch.Tensor:
    """Rodrigues vector (..., 3) -> rotation matrix (..., 3, 3) (OpenCV's ``cv2.Rodrigues``)."""
    theta2 = (rvec * rvec).sum(-1, keepdim=True)
    small = theta2 < 1e-12
    theta2_s = torch.where(small, torch.ones_like(theta2), theta2)
    theta = torch.sqrt(theta2_s)
    a = torch.where(small, 1.0 - theta2 / 6.0, torch.sin(theta) / theta)
    b = torch.where(small, 0.5 - theta2 / 24.0, (1.0 - torch.cos(theta)) / theta2_s)
    x, y, z = rvec.unbind(-1)
    zero = torch.zeros_like(x)
    Kx = torch.stack([zero, -z, y, z, zero, -x, -y, x, zero], dim=-1).reshape(*x.shape, 3, 3)
    eye = torch.eye(3, dtype=rvec.dtype, device=rvec.device)
    return eye + a.unsqueeze(-1) * Kx + b.unsqueeze(-1) * (Kx @ Kx)
