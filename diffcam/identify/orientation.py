"""A mesh body's start orientation and spin from its silhouettes: the orientation stage's
automatic starts, for a body whose orientation (``bodies.<body>.quat``) is a key.

The centre stage places the body's centre along the video; it says nothing of how the body is
turned. Here its mesh's silhouette is matched to its blob in a few frames of the first part of
the video, with nothing but geometry (no texture, no shading):

1. in each of those frames, every rotation of a fixed, evenly spread set (`rotation_set`)
   is drawn as a silhouette (the mesh's triangles filled, `silhouettes`), the blob moved so
   that its centroid is the silhouette's, and scored by its overlap with the blob (intersection over union);
2. pairs of frames ``Delta t`` apart propose a spin: a rotation among the best in the first and
   one among the best in the second give a constant angular velocity (world frame) and the
   orientation at time 0 (``R(t) = exp(t w) R0``, free flight's motion over a short time);
3. each proposal is scored by its mean overlap over all the frames, and the best ones are
   refined by a shrinking random search; the distinct best few are returned.

A silhouette does not tell a body from its mirror image turned to show the same outline, so
the answer is several starts: the pixel stage runs from each, and the one that explains the
video best is kept (`diffcam.identify.identify`).
"""

from __future__ import annotations

import dataclasses
import math

import torch

__all__ = [
    "OrientationStart",
    "orientation_starts",
    "rotation_exp",
    "rotation_log",
    "rotation_set",
    "silhouettes",
]

_SET = 4096  # rotations in the set matched per frame
_FRAMES = 7  # frames matched
_SPAN = 0.3  # s: the frames lie in the first this much of the video (a constant spin's reach)
_BEST = 12  # per frame, the best rotations that pairs of frames combine
_CHUNK = 256  # silhouettes rasterised at once


@dataclasses.dataclass(frozen=True)
class OrientationStart:
    """One start: ``rotation`` (3, 3) world_from_body of the body's state frame at time 0,
    ``angular_velocity`` (3,) rad/s (world frame), ``overlap`` the mean intersection over
    union of its silhouettes with the blobs in the matched frames."""

    rotation: torch.Tensor
    angular_velocity: torch.Tensor
    overlap: float


def rotation_set(count: int, seed: int = 0) -> torch.Tensor:
    """(count, 3, 3) float64 rotations spread uniformly over all rotations (uniform random
    unit quaternions from a fixed seed: the same set every run)."""
    from physics.math3d import quat_to_matrix

    generator = torch.Generator().manual_seed(seed)
    q = torch.randn(count, 4, generator=generator, dtype=torch.float64)
    return quat_to_matrix(q / q.norm(dim=-1, keepdim=True))


def rotation_exp(rotation_vector: torch.Tensor) -> torch.Tensor:
    """(..., 3, 3) the rotations of rotation vectors (..., 3) (rad)."""
    from physics.math3d import axis_angle_to_matrix

    return axis_angle_to_matrix(rotation_vector)


def rotation_log(rotation: torch.Tensor) -> torch.Tensor:
    """(..., 3) the rotation vectors (rad, angle in [0, pi]) of rotations (..., 3, 3)."""
    cos = ((rotation.diagonal(dim1=-2, dim2=-1).sum(-1) - 1) / 2).clamp(-1.0, 1.0)
    angle = torch.acos(cos)
    skew = torch.stack(
        [
            rotation[..., 2, 1] - rotation[..., 1, 2],
            rotation[..., 0, 2] - rotation[..., 2, 0],
            rotation[..., 1, 0] - rotation[..., 0, 1],
        ],
        -1,
    )
    sin = torch.sin(angle)
    small = sin.abs() < 1e-6
    axis = skew / torch.where(small, torch.ones_like(sin), 2 * sin)[..., None]
    # near pi the skew part vanishes: the axis is the column of R + I with the largest norm
    plus = rotation + torch.eye(3, dtype=rotation.dtype)
    column = plus.norm(dim=-2).argmax(-1)
    near_pi = torch.gather(plus, -1, column[..., None, None].expand(*column.shape, 3, 1))[..., 0]
    near_pi = near_pi / near_pi.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    axis = torch.where((small & (cos < 0))[..., None], near_pi, axis)
    return axis * torch.where(small & (cos > 0), torch.zeros_like(angle), angle)[..., None]


def silhouettes(points: torch.Tensor, faces: torch.Tensor, pixels: torch.Tensor) -> torch.Tensor:
    """Which pixel centres each posed mesh covers.

    Args:
        points: (N, V, 2) the mesh's vertices projected (continuous pixels x, y), N poses.
        faces: (F, 3) long the triangles.
        pixels: (P, 2) the pixel centres (x, y).

    Returns:
        (N, P) bool: the centre lies in one of the triangles (either winding: the union of the
        triangles is the outline of a closed mesh).
    """
    corners = points[:, faces]  # (N, F, 3, 2)
    a, b, c = corners.unbind(2)
    area = (b - a)[..., 0] * (c - a)[..., 1] - (b - a)[..., 1] * (c - a)[..., 0]  # (N, F)
    p = pixels[None, None]  # (1, 1, P, 2)

    def side(u, v):  # (N, F, P): which side of edge u -> v each pixel is on
        u, v = u[:, :, None], v[:, :, None]
        return (v - u)[..., 0] * (p - u)[..., 1] - (v - u)[..., 1] * (p - u)[..., 0]

    e0, e1, e2 = side(a, b), side(b, c), side(c, a)
    inside = ((e0 >= 0) & (e1 >= 0) & (e2 >= 0)) | ((e0 <= 0) & (e1 <= 0) & (e2 <= 0))
    inside &= (area.abs() > 1e-9)[..., None]  # a triangle seen edge-on covers nothing
    return inside.any(1)


@dataclasses.dataclass
class _Frame:
    """One matched frame: its time (s), the body's centre (3,) there (m), the window's pixel
    centres (P, 2) float32 (x, y) and their rows and columns in the window (P,) long each,
    the blob in the window (h, w) bool and the blob's centroid (2,) (x, y)."""

    time: float
    centre: torch.Tensor
    pixels: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    blob: torch.Tensor
    centroid: torch.Tensor


class _Matcher:
    """Silhouettes of the body's mesh at given rotations in the matched frames, scored against
    the blobs there."""

    def __init__(self, camera, vertices: torch.Tensor, faces: torch.Tensor, frames: list[_Frame]):
        self.camera, self.vertices, self.faces, self.frames = camera, vertices, faces, frames

    def _project(self, frame: _Frame, rotations: torch.Tensor) -> torch.Tensor:
        """(N, V, 2) float32 the mesh's vertices in pixels at ``rotations`` (N, 3, 3) in
        ``frame``."""
        world = frame.centre + torch.einsum("nij,vj->nvi", rotations, self.vertices)
        pixels, _ = self.camera.project_with_depth(world.reshape(1, -1, 3).to(self.camera.dtype))
        return pixels.reshape(*world.shape[:2], 2).float()

    def overlap(self, index: int, rotations: torch.Tensor) -> torch.Tensor:
        """(N,) the intersection over union in frame ``index`` of the silhouettes at
        ``rotations`` (N, 3, 3) with the blob moved so that its centroid is each
        silhouette's (by whole pixels)."""
        frame = self.frames[index]
        h, w = frame.blob.shape
        rows, cols = frame.rows, frame.cols  # (P,) each: the window's pixels
        blob = frame.blob.float()
        out = []
        for start in range(0, rotations.shape[0], _CHUNK):
            points = self._project(frame, rotations[start : start + _CHUNK])
            cover = silhouettes(points, self.faces, frame.pixels).float()  # (n, P)
            count = cover.sum(1)
            centroid = (cover @ frame.pixels) / count.clamp_min(1.0)[:, None]
            shift = torch.where(count[:, None] > 0, frame.centroid - centroid, 0.0).round().long()
            r = rows[None] + shift[:, 1:]  # the blob's pixel under each silhouette pixel
            c = cols[None] + shift[:, :1]
            inside = (r >= 0) & (r < h) & (c >= 0) & (c < w)
            under = blob[r.clamp(0, h - 1), c.clamp(0, w - 1)] * inside
            inter = (cover * under).sum(1)
            union = count + blob.sum() - inter
            out.append((inter / union.clamp_min(1.0)).double())
        return torch.cat(out)

    def mean_overlap(self, start: torch.Tensor, spin: torch.Tensor) -> torch.Tensor:
        """(N,) the mean overlap over the frames of rotations ``start`` (N, 3, 3) at time 0
        turning at ``spin`` (N, 3) rad/s: ``R(t) = exp(t w) R0``."""
        total = torch.zeros(start.shape[0], dtype=torch.float64)
        for index, frame in enumerate(self.frames):
            total += self.overlap(index, rotation_exp(spin * frame.time) @ start)
        return total / len(self.frames)


def _frames(context, values: dict, body: int) -> list[_Frame]:
    """Up to ``_FRAMES`` clean frames in the first ``_SPAN`` s where the body's blob is whole
    in the picture, with its window (the blob's bounding box and a margin)."""
    import physics

    _, built = context.built(values, {})
    times = context.times
    with torch.no_grad():
        states = physics.states_at(built.trajectory, times, built.scene.timestep)
    centres = states.position[:, 0, body].double()  # (T, 3)
    mask = context.body_mask[:, 0]  # (T, H, W) bool
    h, w = mask.shape[-2:]
    usable = []
    for k in range(len(times)):
        if float(times[k] - times[0]) > _SPAN or not bool(context.clean[k]):
            continue
        rows, cols = torch.nonzero(mask[k], as_tuple=True)
        if len(rows) < 12 or rows.min() == 0 or cols.min() == 0:
            continue
        if rows.max() == h - 1 or cols.max() == w - 1:
            continue
        usable.append((k, rows, cols))
    pick = torch.linspace(0, len(usable) - 1, min(_FRAMES, len(usable))).round().long()
    frames = []
    for i in pick.unique().tolist():
        k, rows, cols = usable[i]
        margin = 4
        r0, r1 = max(0, int(rows.min()) - margin), min(h, int(rows.max()) + margin + 1)
        c0, c1 = max(0, int(cols.min()) - margin), min(w, int(cols.max()) + margin + 1)
        yy, xx = torch.meshgrid(torch.arange(r1 - r0), torch.arange(c1 - c0), indexing="ij")
        yy, xx = yy.flatten(), xx.flatten()
        pixels = torch.stack([xx + c0 + 0.5, yy + r0 + 0.5], -1).float()
        blob = mask[k, r0:r1, c0:c1]
        centroid = pixels[blob.flatten()].mean(0)
        frames.append(
            _Frame(float(times[k] - times[0]), centres[k], pixels, yy, xx, blob, centroid)
        )
    return frames


def orientation_starts(context, values: dict, body: int, count: int = 3) -> list[OrientationStart]:
    """The best ``count`` distinct (orientation, spin) starts of the mesh body ``body`` (its
    state index) at the centre stage's ``values`` (see the module docstring), best first; an
    empty list when too few frames show the body's blob whole."""
    primitive = context.scene.primitives[body]
    vertices = primitive.mesh.vertices.detach().double()  # (V, 3) in the state's body frame
    faces = primitive.mesh.faces
    frames = _frames(context, values, body)
    if len(frames) < 3:
        return []
    matcher = _Matcher(context.scene.camera, vertices, faces, frames)
    candidates = rotation_set(_SET)
    with torch.no_grad():
        scores = torch.stack([matcher.overlap(i, candidates) for i in range(len(frames))])
        best = scores.topk(_BEST, dim=1).indices  # (K, _BEST)
        # proposals from frames two apart: a spin from a best rotation in each
        starts, spins = [], []
        for a in range(len(frames) - 2):
            b = a + 2
            ra, rb = candidates[best[a]], candidates[best[b]]  # (_BEST, 3, 3)
            turn = rb[None] @ ra[:, None].transpose(-1, -2)  # (_BEST, _BEST, 3, 3)
            spin = rotation_log(turn) / (frames[b].time - frames[a].time)
            start = rotation_exp(-spin * frames[a].time) @ ra[:, None]
            starts.append(start.reshape(-1, 3, 3))
            spins.append(spin.reshape(-1, 3))
        starts, spins = torch.cat(starts), torch.cat(spins)
        scored = matcher.mean_overlap(starts, spins)
        order = scored.argsort(descending=True)
        refined = []
        for i in order[: 2 * count].tolist():
            refined.append(_refine(matcher, starts[i], spins[i], float(scored[i])))
    refined.sort(key=lambda s: -s.overlap)
    chosen: list[OrientationStart] = []
    for s in refined:  # distinct: another orientation (> 20 degrees) or spin (> 2 rad/s)
        if all(
            float(rotation_log(s.rotation @ c.rotation.T).norm()) > math.radians(20.0)
            or float((s.angular_velocity - c.angular_velocity).norm()) > 2.0
            for c in chosen
        ):
            chosen.append(s)
    return chosen[:count]


def _refine(matcher: _Matcher, start, spin, overlap: float, rounds: int = 6,
            samples: int = 24) -> OrientationStart:  # fmt: skip
    """A shrinking random search around (``start``, ``spin``) for a better mean overlap:
    turns of 8 degrees and spins of 1.5 rad/s at first, halved every two rounds."""
    generator = torch.Generator().manual_seed(1)
    turn, change = math.radians(8.0), 1.5
    for r in range(rounds):
        scale = 0.5 ** (r // 2)
        dr = torch.randn(samples, 3, generator=generator, dtype=torch.float64) * turn * scale
        dw = torch.randn(samples, 3, generator=generator, dtype=torch.float64) * change * scale
        starts = rotation_exp(dr) @ start
        spins = spin + dw
        scores = matcher.mean_overlap(starts, spins)
        i = int(scores.argmax())
        if float(scores[i]) > overlap:
            start, spin, overlap = starts[i], spins[i], float(scores[i])
    return OrientationStart(start, spin, overlap)
