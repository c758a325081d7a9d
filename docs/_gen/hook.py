"""MkDocs hook (``hooks:`` in mkdocs.yml): fills the generated parts of pages at build time.

A page holds a marker line ``<!-- generated: NAME -->``; the build replaces it with the output
of the generator NAME, so nothing generated is committed and nothing goes stale:

* ``scene-reference``: `scene_reference.generate` (the schema's tables, the contact rules,
  the override paths);
* ``mjcf-support``: `mjcf_support.generate` (what the MJCF importer handles, ignores, refuses);
* ``cli``: `cli_help.generate` (the help of ``diffcam`` and each subcommand);
* ``performance``: `performance.generate` (the benchmarks' results files as tables);
  ``<!-- generated: performance FILE -->`` renders one file (``benchmarks/results/FILE.jsonl``),
  and a page that renders some files one by one must render them all.

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


MARKER = re.compile(r"^<!-- generated: ([a-z-]+)(?: ([A-Za-z0-9_-]+))? -->$", re.MULTILINE)


def _generators() -> dict:
    import cli_help
    import mjcf_support
    import performance
    import scene_reference

    return {
        "scene-reference": scene_reference.generate,
        "mjcf-support": mjcf_support.generate,
        "performance": performance.generate,
        "cli": cli_help.generate,
    }


def on_page_markdown(markdown: str, page, config, files) -> str:
    if "<!-- generated: " not in markdown:
        return markdown
    generators = _generators()
    rendered: list[str] = []

    def fill(match: re.Match) -> str:
        name, argument = match.group(1), match.group(2)
        if name not in generators:
            raise ValueError(
                f"{page.file.src_path}: unknown generated section {name!r} "
                f"(known: {', '.join(generators)})"
            )
        if argument is None:
            return generators[name]()
        rendered.append(argument)
        return generators[name](argument)

    markdown = MARKER.sub(fill, markdown)
    if rendered:
        import performance

        left = [n for n in performance.names() if n not in rendered]
        if left:
            raise ValueError(
                f"{page.file.src_path}: results files not on the page: {', '.join(left)} "
                "(add <!-- generated: performance NAME --> for each)"
            )
    return markdown
