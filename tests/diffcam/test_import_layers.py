"""What an import loads: opt-in utilities stay out of `import diffcam`, the tasks (the
repository's `tasks` package) stay out of the library, and the layers below do not reach up
(physics knows nothing of diffcam; the renderer knows nothing of physics).

Every check runs in a fresh interpreter so that no earlier import leaks into it.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def loaded_after(code: str) -> set[str]:
    """The names in ``sys.modules`` after running ``code`` in a fresh Python process."""
    script = textwrap.dedent(code) + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))\n"
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.strip().splitlines()[-1]))


OPT_IN = {
    "diffcam.cartpole",
    "diffcam.profiling",
    "diffcam.plot",
    "diffcam.allocator",
}


def task_modules(loaded: set[str]) -> set[str]:
    return {m for m in loaded if m == "tasks" or m.startswith("tasks.")}


@pytest.mark.slow
def test_import_diffcam_leaves_out_tasks_and_utilities():
    loaded = loaded_after("import diffcam")
    assert "diffcam" in loaded
    assert not OPT_IN & loaded, f"import diffcam loaded {sorted(OPT_IN & loaded)}"
    assert not task_modules(loaded)


@pytest.mark.slow
def test_the_cartpole_problem_needs_no_task_code_and_no_gymnasium():
    loaded = loaded_after("import diffcam.cartpole")
    assert "diffcam.cartpole" in loaded
    assert not task_modules(loaded)
    assert "gymnasium" not in loaded


@pytest.mark.slow
def test_import_physics_loads_no_diffcam():
    loaded = loaded_after("import physics")
    assert "physics" in loaded
    assert not {m for m in loaded if m == "diffcam" or m.startswith("diffcam.")}


@pytest.mark.slow
def test_renderer_does_not_load_physics():
    # `import diffcam.renderer` runs diffcam/__init__.py first, which loads the scene layer and so
    # physics. The renderer itself must not: import it under a bare `diffcam` package.
    loaded = loaded_after(
        """
        import importlib.util, sys, types
        spec = importlib.util.find_spec("diffcam")
        package = types.ModuleType("diffcam")
        package.__path__ = list(spec.submodule_search_locations)
        sys.modules["diffcam"] = package
        import diffcam.renderer
        """
    )
    assert "diffcam.renderer" in loaded
    assert "physics" not in loaded
    assert not {m for m in loaded if m.startswith("physics.")}


def import_statements(*packages: str):
    """(path relative to the repository, node) of every import statement in ``packages``."""
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    yield path.relative_to(ROOT), node


def test_no_library_module_imports_the_tasks():
    """The library (diffcam, physics) is shipped without `tasks`: none of its modules imports
    it, at the top or inside a function."""
    found = []
    for path, node in import_statements("diffcam", "physics"):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            names = [node.module or ""] if node.level == 0 else []
        if any(n == "tasks" or n.startswith("tasks.") for n in names):
            found.append(f"{path}:{node.lineno}")
    assert not found, found


@pytest.mark.slow
def test_tasks_import_explicitly():
    loaded = loaded_after(
        f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})  # the tasks live in the repository, not the wheel
        from tasks import swingup, training
        """
    )
    assert {"tasks.swingup", "tasks.training", "diffcam.cartpole", "diffcam.plot"} <= loaded


@pytest.mark.slow
def test_no_name_hides_a_submodule():
    """``package.name`` is the submodule ``package/name.py`` wherever both exist (a function
    named like its module would make ``import package.name as m`` give the function)."""
    script = textwrap.dedent(
        """
        import importlib, json, pkgutil, sys
        import diffcam, physics
        for top in (diffcam, physics):
            for info in pkgutil.walk_packages(top.__path__, top.__name__ + "."):
                if not info.name.startswith(("diffcam.data", "diffcam.envs")):
                    importlib.import_module(info.name)
        hidden = []
        for name, module in sorted(sys.modules.items()):
            if name.split(".")[0] in ("diffcam", "physics") and hasattr(module, "__path__"):
                for info in pkgutil.iter_modules(module.__path__):
                    full = name + "." + info.name
                    if full in sys.modules and getattr(module, info.name) is not sys.modules[full]:
                        hidden.append(full)
        print(json.dumps(hidden))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=False, timeout=300
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


PUBLIC_FACES = [
    "diffcam",
    "physics",
    "diffcam.cartpole",
    "diffcam.fit",
    "diffcam.identify",
    "diffcam.imaging",
    "diffcam.video",
    "diffcam.renderer",
    "diffcam.scene",
]


def test_public_faces_declare_all_they_export():
    """Each package's ``__all__`` names exactly its public attributes (its submodules aside)."""
    import __future__

    import importlib
    import types

    for name in PUBLIC_FACES:
        package = importlib.import_module(name)
        public = {
            attr
            for attr, value in vars(package).items()
            if not attr.startswith("_")
            and not (isinstance(value, types.ModuleType) and value.__name__ == f"{name}.{attr}")
            and not isinstance(value, __future__._Feature)
        }
        declared = set(package.__all__)
        assert declared <= set(vars(package)), (name, declared - set(vars(package)))
        assert public <= declared, (name, sorted(public - declared))


def test_physics_keeps_solver_parts_out_of_its_namespace():
    import physics

    for internal in ("joint_frames", "axis_rows", "find_contacts", "quat_to_matrix"):
        assert not hasattr(physics, internal), internal


def test_no_module_imports_a_private_name_of_another():
    """What one module of diffcam, physics or the tasks takes from another has a public name
    there (a package-internal interface); names with a leading underscore stay in their
    module."""
    found = []
    for path, node in import_statements("diffcam", "physics", "tasks"):
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            private = [a.name for a in node.names if a.name.startswith("_")]
            if private:
                found.append(f"{path}:{node.lineno}: {private}")
    assert not found, found
