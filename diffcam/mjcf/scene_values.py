"""How values are written into the scene dict: rounded plain floats and valid unique names."""

from __future__ import annotations

import re

import numpy as np

_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def clean(values):
    """Plain floats, rounded to 12 significant digits (no 6.1e-17 noise in the TOML)."""
    if isinstance(values, (int, float, np.floating)):
        v = float(f"{float(values):.12g}")
        return 0.0 if v == 0 else v
    return [clean(v) for v in values]


def unique_name(wanted: str, used: set[str], fallback: str) -> str:
    """A valid scene name from ``wanted`` (``fallback`` if empty), not ``world`` and not in
    ``used`` (a ``_2``, ``_3``, ... suffix); it is added to ``used``."""
    name = re.sub(r"[^A-Za-z0-9_\-]", "_", wanted) if wanted else fallback
    if not _NAME_RE.match(name):
        name = "_" + name
    if name == "world":
        name = "world_"
    base, k = name, 1
    while name in used:
        k += 1
        name = f"{base}_{k}"
    used.add(name)
    return name
