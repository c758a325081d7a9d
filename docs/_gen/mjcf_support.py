"""The MJCF support table, generated from the importer's own lists and messages.

What is handled, ignored and refused comes from `diffcam.mjcf.supported` (sections, attributes
per element, ``<compiler>`` and ``<option>`` attributes, motor transmissions), the geom and
joint types from `diffcam.mjcf.geom_sizes` and `diffcam.mjcf.joints`, and the list of
refusals from the ``MJCFError`` messages in the importer's source (every ``ctx.error(node,
"... not supported ...")`` call, read with `ast`), so a new refusal appears here by itself.

Run alone to print the Markdown: ``python docs/_gen/mjcf_support.py``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _codes(names) -> str:
    return ", ".join(f"`{n}`" for n in sorted(names)) or "—"


def _html(text: str) -> str:
    """Text for a Markdown table cell: pipes escaped, tags shown as text."""
    return text.replace("|", "\\|").replace("<", "&lt;")


def _message(node: ast.expr) -> str | None:
    """A message argument as text, f-string fields shown as ``…``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            else:
                parts.append("…")
        return "".join(parts)
    return None


def refusals() -> list[tuple[str, str, str]]:
    """(module, message, accepted) of every error call in diffcam/mjcf whose message says
    something is not supported or that diffcam has no such thing."""
    out = []
    for path in sorted((ROOT / "diffcam" / "mjcf").glob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for call in ast.walk(tree):
            if not (
                isinstance(call, ast.Call)
                and isinstance(call.func, ast.Attribute)
                and call.func.attr == "error"
                and len(call.args) >= 2
            ):
                continue
            message = _message(call.args[1])
            if message is None or not ("not supported" in message or "diffcam has no" in message):
                continue
            accepted = _message(call.args[2]) if len(call.args) >= 3 else None
            out.append((path.stem, message, accepted or ""))
    return out


def generate() -> str:
    from diffcam.mjcf import geom_sizes, joints, supported

    out = []
    handled_sections = sorted(supported.TOP_LEVEL_ELEMENTS - set(supported.IGNORED_TOP_LEVEL))
    out.append("## Sections of `<mujoco>`\n")
    out.append("| section | support |\n|---|---|")
    for tag in handled_sections:
        out.append(f"| `<{tag}>` | converted |")
    for tag, what in sorted(supported.IGNORED_TOP_LEVEL.items()):
        out.append(f"| `<{tag}>` | ignored, with a note: {_html(what)} |")
    for tag, what in sorted(supported.UNSUPPORTED_TOP_LEVEL.items()):
        out.append(f"| `<{tag}>` | **refused**: {_html(what)} |")
    out.append(
        "\nAny other element is refused as unknown. An ignored element is listed in "
        "`MJCFImport.notes` and as a comment at the top of `diffcam import-mjcf`'s output.\n"
    )

    out.append("## Geom types and joint types\n")
    hints = geom_sizes._UNSUPPORTED_TYPE_HINTS
    out.append("| kind | converted | refused (with the hint the error gives) |\n|---|---|---|")
    out.append(
        f"| `<geom type>` | {_codes(geom_sizes.SHAPES)} | "
        + "; ".join(f"`{t}`: {hint}" for t, hint in sorted(hints.items()))
        + " |"
    )
    kinds = ", ".join(
        f"`{mj}` → `{scene}`" for mj, scene in sorted(joints._SCENE_JOINT_TYPES.items())
    )
    out.append(
        f"| `<joint type>` | {kinds}; `<freejoint/>` leaves the body free; a body without a "
        "joint is welded to its parent (a `fixed` joint), or static under `<worldbody>` | "
        "any other type |"
    )
    out.append(
        "| `<actuator>` | `<motor>` on a hinge or slide joint → a force motor, action = "
        "`gear × ctrl` | other actuators; motors on a "
        + ", ".join(f"`{t}`" for t in supported.NON_JOINT_TARGETS)
        + "; motors on a ball joint |"
    )

    out.append("\n## Attributes per element\n")
    out.append(
        "*Read* attributes are converted, or read to refuse a value diffcam cannot represent "
        "(a non-zero `armature`, say: see the refusals below). *Ignored* ones are solver "
        "tuning or cosmetic. An attribute in neither list is refused.\n"
    )
    out.append("| element | read | ignored |\n|---|---|---|")
    for tag, (handled, ignored) in supported.ELEMENT_ATTRS.items():
        out.append(f"| `<{tag}>` | {_codes(handled)} | {_codes(ignored)} |")
    out.append(f"| `<compiler>` | {_codes(supported.COMPILER_ATTRS)} | — |")
    out.append(
        f"| `<option>` | {_codes(supported.OPTION_ATTRS)} | "
        f"{_codes(supported.IGNORED_OPTION_ATTRS)} |"
    )

    out.append("\n## Refused, with the importer's message\n")
    out.append(
        "Each of these raises `MJCFError` (a `diffcam.SceneError`) naming the element's XML "
        "path and line; `…` stands for the part the message fills in.\n"
    )
    out.append("| module | message | accepted |\n|---|---|---|")
    for module, message, accepted in refusals():
        message, accepted = _html(message), _html(accepted)
        out.append(f"| `{module}` | {message} | {accepted} |")
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    print(generate())
