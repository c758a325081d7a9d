"""MkDocs hook (``hooks:`` in mkdocs.yml): fills the generated parts of pages at build time.

A page holds a marker line ``<!-- generated: NAME -->``; the build replaces it with the output
of the generator NAME, so nothing generated is committed and nothing goes stale:

* ``scene-reference``: `scene_reference.generate` (the schema's tables, the contact rules,
  the override paths);
* ``mjcf-support``: `mjcf_support.generate` (what the MJCF importer handles, ignores, refuses);
* ``performance``: `performance.generate` (the benchmarks' results files as tables).

An unknown NAME fails the build.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
# the generators, and what they import (diffcam and physics from this checkout, the
# benchmarks' _record); MkDocs restores sys.path after loading a hook, so on_config sets it
PATHS = (HERE, ROOT / "benchmarks", ROOT)


def on_config(config):
    for path in PATHS:
        if str(path) not in sys.path:
            sys.path.insert(0, str(path))
    return config

MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.MULTILINE)


def _generators() -> dict:
    import mjcf_support
    import performance
    import scene_reference

    return {
        "scene-reference": scene_reference.generate,
        "mjcf-support": mjcf_support.generate,
        "performance": performance.generate,
    }


def on_page_markdown(markdown: str, page, config, files) -> str:
    if "<!-- generated: " not in markdown:
        return markdown
    generators = _generators()

    def fill(match: re.Match) -> str:
        name = match.group(1)
        if name not in generators:
            raise ValueError(
                f"{page.file.src_path}: unknown generated section {name!r} "
                f"(known: {', '.join(generators)})"
            )
        return generators[name]()

    return MARKER.sub(fill, markdown)
