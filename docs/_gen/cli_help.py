"""The command line's reference, generated from `diffcam.cli.build_parser`: the help of the
``diffcam`` command and of each subcommand, as ``diffcam ... --help`` prints it.

Run alone to print the Markdown: ``python docs/_gen/cli_help.py``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def generate() -> str:
    from diffcam.cli import build_parser

    os.environ.setdefault("COLUMNS", "100")  # argparse wraps at the terminal's width
    parser = build_parser()
    parser.prog = "diffcam"
    out = ["## `diffcam`\n", "```text\n" + parser.format_help().rstrip() + "\n```\n"]
    subparsers = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for action in subparsers:
        for name, sub in action.choices.items():
            out.append(f"## `diffcam {name}`\n")
            out.append("```text\n" + sub.format_help().rstrip() + "\n```\n")
    return "\n".join(out)


if __name__ == "__main__":
    print(generate())
