"""A Wavefront OBJ reader in plain Python: ``v``, ``vt``, ``vn`` and ``f`` statements (corners
as ``v``, ``v/vt``, ``v//vn`` or ``v/vt/vn``; 1-based or negative, relative indices); polygons
are fan-triangulated. Other statements (``o``, ``g``, ``s``, ``usemtl``, ``mtllib``, ``l``,
...) are ignored. Errors name the file and the line."""

from __future__ import annotations

from pathlib import Path

import torch

from .errors import MeshError
from .record import Mesh

__all__ = ["read_obj", "parse_obj", "write_obj"]


def read_obj(path, dtype=torch.float32) -> Mesh:
    """The `Mesh` of an OBJ file ``path``: vertices (V, 3) in the file's units, corner-level
    uvs (F, 3, 2) when every face gives ``vt`` indices and normals (F, 3, 3) when every face
    gives ``vn`` ones (else None). A `MeshError` names the file and line of a problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        raise MeshError(f"cannot read the mesh file: {err.strerror or err}", file=path) from None
    return parse_obj(text, source=str(path), dtype=dtype)


def parse_obj(text: str, source: str | None = None, dtype=torch.float32) -> Mesh:
    """`read_obj` of the OBJ text ``text`` (``source`` names it in errors)."""
    positions, texcoords, normals = [], [], []
    corners = []  # per triangle: three (v, vt, vn) index triples (0-based; -1 when absent)
    lines = []  # the line each triangle comes from
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        words = line.split()
        tag, args = words[0], words[1:]
        if tag == "v":
            positions.append(_floats(args, 3, "v", source, number, at_most=4)[:3])
        elif tag == "vt":
            texcoords.append(_floats(args, 2, "vt", source, number, at_most=3)[:2])
        elif tag == "vn":
            normals.append(_floats(args, 3, "vn", source, number))
        elif tag == "f":
            if len(args) < 3:
                raise MeshError(
                    f"a face needs at least 3 corners, got {len(args)}", file=source, line=number
                )
            refs = [
                _corner(a, (len(positions), len(texcoords), len(normals)), source, number)
                for a in args
            ]
            for i in range(1, len(refs) - 1):  # fan: (0, i, i + 1)
                corners.append((refs[0], refs[i], refs[i + 1]))
                lines.append(number)
    if not positions:
        raise MeshError("no vertices ('v' lines) in the OBJ file", file=source)
    if not corners:
        raise MeshError("no faces ('f' lines) in the OBJ file", file=source)
    idx = torch.tensor(corners, dtype=torch.long)  # (F, 3, 3): corner, (v, vt, vn)
    faces = idx[:, :, 0].contiguous()
    uvs = _corner_attribute(idx[:, :, 1], texcoords, "vt", lines, source, dtype)
    nrm = _corner_attribute(idx[:, :, 2], normals, "vn", lines, source, dtype)
    return Mesh(torch.tensor(positions, dtype=dtype), faces, uvs, nrm, source)


def _floats(args, n, tag, source, number, at_most=None):
    at_most = at_most or n
    if not n <= len(args) <= at_most:
        want = str(n) if at_most == n else f"{n} to {at_most}"
        raise MeshError(
            f"'{tag}' needs {want} numbers, got {len(args)}: {' '.join(args)!r}",
            file=source,
            line=number,
        )
    try:
        return [float(a) for a in args]
    except ValueError:
        raise MeshError(
            f"'{tag}' has a value that is not a number: {' '.join(args)!r}",
            file=source,
            line=number,
        ) from None


def _corner(word, counts, source, number):
    """(v, vt, vn) 0-based indices of a face corner ``word`` (-1: absent), the counts of
    v, vt and vn read so far resolving negative (relative) indices."""
    parts = word.split("/")
    if len(parts) > 3 or parts[0] == "":
        raise MeshError(
            f"a face corner must be v, v/vt, v//vn or v/vt/vn, got {word!r}",
            file=source,
            line=number,
        )
    out = []
    for i, name in enumerate(("v", "vt", "vn")):
        s = parts[i] if i < len(parts) else ""
        if s == "":
            out.append(-1)
            continue
        try:
            k = int(s)
        except ValueError:
            raise MeshError(
                f"face corner {word!r}: {name} index {s!r} is not an integer",
                file=source,
                line=number,
            ) from None
        n = counts[i]
        j = k - 1 if k > 0 else n + k  # 1-based, or relative to the end (-1: the last)
        if k == 0 or not 0 <= j < n:
            raise MeshError(
                f"face corner {word!r}: {name} index {k} is out of range ({n} '{name}' lines "
                "so far; indices are 1-based, or negative from the last)",
                file=source,
                line=number,
            )
        out.append(j)
    return tuple(out)


def _corner_attribute(idx, values, tag, lines, source, dtype):
    """(F, 3, width) per-corner values of ``values`` at ``idx`` (F, 3), or None when no face
    refers to any; a `MeshError` when only some faces do."""
    given = idx >= 0
    if not bool(given.any()):
        return None
    if not bool(given.all()):
        f = int((~given).any(1).nonzero()[0, 0])
        raise MeshError(
            f"this face has no '{tag}' index but others have: give every face's corners "
            f"'{tag}' indices or none",
            file=source,
            line=lines[f],
        )
    return torch.tensor(values, dtype=dtype)[idx]


def write_obj(mesh: Mesh, path, header: str = "") -> None:
    """Write ``mesh`` as an OBJ file: ``v`` lines, ``vt`` lines for its uvs (per corner or
    per vertex), ``vn`` lines for its normals, and one ``f`` line per triangle; ``header``
    becomes ``#`` comment lines at the top. `read_obj` reads it back."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    lines += [f"v {x:.9g} {y:.9g} {z:.9g}" for x, y, z in mesh.vertices.tolist()]
    F = mesh.num_faces
    refs = [[[str(int(v) + 1)] for v in face] for face in mesh.faces.tolist()]
    for attr, tag in ((mesh.uvs, "vt"), (mesh.normals, "vn")):
        if attr is None:
            for face in refs:
                for corner in face:
                    corner.append("")
            continue
        if attr.dim() == 3:  # per corner: each distinct value once
            uniq, inverse = torch.unique(attr.reshape(F * 3, -1), dim=0, return_inverse=True)
            values = uniq.tolist()
            index = inverse.view(F, 3).tolist()
        else:
            values = attr.tolist()
            index = mesh.faces.tolist()
        lines += [f"{tag} " + " ".join(f"{x:.9g}" for x in row) for row in values]
        for f, face in enumerate(refs):
            for c, corner in enumerate(face):
                corner.append(str(index[f][c] + 1))
    for face in refs:
        words = []
        for v, vt, vn in face:
            words.append(v + (f"/{vt}" if vt or vn else "") + (f"/{vn}" if vn else ""))
        lines.append("f " + " ".join(words))
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
