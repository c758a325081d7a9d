"""A convex hull's faces and edges, found once at build time (numpy, gift wrapping).

The contacts of a hull with a box, another hull, a sphere or a capsule (`physics.contact_hull`)
need its faces (outward normals, vertex loops) and its edges (with the two faces they join).
`polyhedron` finds them from the hull's points by gift wrapping: a first face, then across
each face's edges the next face, the plane through the edge that leaves every point on one
side. A face holds every point within a small tolerance of its plane (coplanar points make one
polygon, not a fan of triangles), and its loop keeps only its corners.

Everything is in the hull's size units (``Body.points``): a point p is at p * size metres, so
a face normal n in size units is the direction n / size in metres (`physics.contact_hull`
applies the size in the step, so that a size gradient moves the faces).
"""

from __future__ import annotations

import dataclasses

import numpy as np

_TOLERANCE = 1e-6  # of the points' extent: coplanar and collinear within this


@dataclasses.dataclass(frozen=True)
class Polyhedron:
    """A convex polyhedron in size units.

    points: (K, 3) its corners.
    normals: (F, 3) unit outward face normals (in size units).
    faces: F loops of corner indices, counter-clockwise about the face's normal.
    edges: (E, 4) corner i, corner j, the face whose loop runs i -> j, the face of j -> i.
    """

    points: np.ndarray
    normals: np.ndarray
    faces: list[list[int]]
    edges: np.ndarray


def _loop(points: np.ndarray, members: np.ndarray, normal: np.ndarray, tol: float) -> list[int]:
    """The corners of the convex polygon of ``members`` (indices into ``points``) on a plane
    with ``normal``, counter-clockwise about it (Andrew's monotone chain, collinear points
    dropped)."""
    helper = np.eye(3)[np.argmin(np.abs(normal))]
    u = np.cross(normal, helper)
    u /= np.linalg.norm(u)
    v = np.cross(normal, u)
    flat = np.stack([points[members] @ u, points[members] @ v], 1)
    order = sorted(range(len(members)), key=lambda k: (flat[k, 0], flat[k, 1]))

    def cross(o, a, b):
        return (flat[a, 0] - flat[o, 0]) * (flat[b, 1] - flat[o, 1]) - (flat[a, 1] - flat[o, 1]) * (
            flat[b, 0] - flat[o, 0]
        )

    def chain(sequence):
        out: list[int] = []
        for k in sequence:
            while len(out) >= 2 and cross(out[-2], out[-1], k) <= tol * tol:
                out.pop()
            out.append(k)
        return out

    lower, upper = chain(order), chain(order[::-1])
    return [int(members[k]) for k in lower[:-1] + upper[:-1]]


def _face(points: np.ndarray, normal: np.ndarray, tol: float) -> tuple[np.ndarray, list[int]]:
    """The face of the supporting plane with ``normal``: its refined normal and its loop."""
    height = points @ normal
    members = np.flatnonzero(height >= height.max() - tol)
    loop = _loop(points, members, normal, tol)
    # Newell's normal of the loop: the best plane through its corners.
    corners = points[loop]
    following = np.roll(corners, -1, 0)
    newell = np.cross(corners, following).sum(0)
    return newell / np.linalg.norm(newell), loop


def _wrap(points: np.ndarray, start: np.ndarray, direction: np.ndarray, normal: np.ndarray,
          tol: float) -> np.ndarray:  # fmt: skip
    """The normal of the supporting plane through the line ``start + s direction`` that the
    supporting plane with ``normal`` (through the same line) turns into about it."""
    direction = direction / np.linalg.norm(direction)
    outward = np.cross(direction, normal)  # in the old plane, away from the old face
    offset = points - start
    x, y = offset @ outward, offset @ normal
    off_line = np.hypot(x, y) > tol
    below = off_line & (y < -tol)
    if not below.any():
        raise ValueError("the points span no volume")
    angle = np.where(below, np.arctan2(y, x), -np.inf)
    best = np.argmax(angle)
    turned = np.cross(direction, offset[best])
    turned /= np.linalg.norm(turned)
    centroid = points.mean(0) - start
    return -turned if turned @ centroid > 0 else turned


def polyhedron(points) -> Polyhedron:
    """The faces and edges of the convex hull of ``points`` (K, 3); K >= 4 points that span a
    volume. Points inside the hull or inside a face are kept in ``points`` but are no corner."""
    points = np.asarray(points, dtype=np.float64)
    extent = float(np.ptp(points, 0).max())
    tol = _TOLERANCE * extent
    # A first face: from a supporting plane that touches one point (a generic direction),
    # turned about a line through what it touches until it touches three points not on a line.
    normal = np.array([-0.8, -0.5, -0.33])
    normal /= np.linalg.norm(normal)
    for _ in range(3):
        height = points @ normal
        members = np.flatnonzero(height >= height.max() - tol)
        start = points[members[0]]
        reach = np.linalg.norm(points[members] - start, axis=1)
        if reach.max() <= tol:  # one point: a line through it, in the plane
            helper = np.eye(3)[np.argmin(np.abs(normal))]
            normal = _wrap(points, start, np.cross(normal, helper), normal, tol)
            continue
        line = points[members[np.argmax(reach)]] - start
        line /= np.linalg.norm(line)
        off = points[members] - start
        if np.linalg.norm(off - np.outer(off @ line, line), axis=1).max() > tol:
            break  # a face
        normal = _wrap(points, start, line, normal, tol)
    normals: list[np.ndarray] = []
    faces: list[list[int]] = []
    known: dict[tuple[int, ...], int] = {}
    owner: dict[tuple[int, int], int] = {}  # directed edge -> the face whose loop has it
    pending = [normal]
    while pending:
        normal, loop = _face(points, pending.pop(), tol)
        key = tuple(sorted(loop))
        if key in known:
            continue
        if len(faces) > 4 * len(points):
            raise ValueError("gift wrapping did not close the hull")
        known[key] = len(faces)
        normals.append(normal)
        faces.append(loop)
        for i, j in zip(loop, loop[1:] + loop[:1], strict=True):
            owner[(i, j)] = known[key]
            if (j, i) not in owner:
                pending.append(_wrap(points, points[i], points[j] - points[i], normal, tol))
    edges = [
        (i, j, face, owner[(j, i)]) for (i, j), face in owner.items() if i < j and (j, i) in owner
    ]
    return Polyhedron(points, np.stack(normals), faces, np.array(edges, dtype=np.int64))
