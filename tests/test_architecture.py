"""The import rule of docs/architecture.md, checked on every module (imports inside functions too).

Each layer may import only the layers listed for it; ``perfkit.errors`` and the top-level
``perfkit`` package (its version) are open to all.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "perfkit"

#: layer -> the layers it may import (besides itself)
ALLOWED = {
    "core": set(),
    "engine": {"core"},
    "sources": {"core", "engine"},
    "lab": {"core", "engine", "sources"},
    "loadgen": {"core", "engine", "sources"},
    "analyses": {"core", "engine"},
    "traces": {"core", "engine"},
    "triage": {"core", "engine", "sources", "analyses", "traces"},
    "report": {"core", "engine", "analyses", "triage", "traces"},
    "app": {"core", "engine", "sources", "lab", "loadgen", "analyses", "traces", "triage", "report"},
}
TOP_LEVEL = {"__init__.py", "__main__.py", "errors.py", "py.typed"}
MAX_LINES = 600


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    """Every perfkit module ``tree`` imports: import statements (at any depth, also inside
    functions), ``from perfkit import x``, relative imports (reported as such: the package uses
    none, so a reader always sees the layer), and the module strings of a lazy ``_NAMES`` table."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level > 0:
            found.append((node.lineno, "." * node.level + (node.module or "")))
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "perfkit":
                found.extend((node.lineno, f"perfkit.{a.name}") for a in node.names)
            elif node.module.startswith("perfkit."):
                found.append((node.lineno, node.module))
        elif isinstance(node, ast.Import):
            found.extend((node.lineno, a.name) for a in node.names if a.name.startswith("perfkit."))
        elif (
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", "") == "_NAMES" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            found.extend(
                (v.lineno, v.value)
                for v in node.value.values
                if isinstance(v, ast.Constant) and isinstance(v.value, str)
            )
    return sorted(found)


def violations(package: Path) -> list[str]:
    """Imports in ``package`` (a perfkit tree) that break the rule, as ``path:line: why``."""
    bad = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if len(rel.parts) < 2:
            continue
        layer = rel.parts[0]
        for line, module in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if module.startswith("."):
                bad.append(
                    f"perfkit/{rel}:{line}: relative import {module} (name the layer: perfkit.<layer>...)"
                )
                continue
            target = _layer(module)
            if target is None or target == layer:
                if target is None and module.split(".")[1] not in ("errors", "__version__"):
                    bad.append(f"perfkit/{rel}:{line}: imports {module}, which is in no layer")
                continue
            if target not in ALLOWED.get(layer, set()):
                bad.append(f"perfkit/{rel}:{line}: {layer} imports {module} ({target} is not below {layer})")
    return bad


def _layer(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ALLOWED else None


def test_top_level_holds_only_the_entry_points_and_the_errors():
    stray = sorted(p.name for p in PACKAGE.iterdir() if p.is_file() and p.name not in TOP_LEVEL)
    assert stray == [], "put these in a layer folder (docs/architecture.md)"
    folders = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert folders == sorted(ALLOWED)


def test_imports_run_one_way():
    assert violations(PACKAGE) == []


def test_the_rule_catches_upward_relative_and_lazy_imports(tmp_path):
    """The checker itself can fail: a tree with each kind of violation is flagged, line by line."""
    (tmp_path / "analyses").mkdir()
    (tmp_path / "analyses" / "bad.py").write_text(
        "from perfkit.engine import ops\n"  # allowed
        "def f():\n"
        "    from perfkit.report.markdown import md_escape\n"  # upward, inside a function
        "from perfkit import triage\n"  # upward, through the package
        "from . import other\n"  # relative
        "_NAMES = {'x': 'perfkit.app.cli'}\n"  # upward, through a lazy table
    )
    found = violations(tmp_path)
    assert [v.split(":")[1] for v in found] == ["3", "4", "5", "6"], found


def test_no_module_is_over_600_lines():
    big = [
        f"perfkit/{p.relative_to(PACKAGE)}: {n} lines"
        for p in sorted(PACKAGE.rglob("*.py"))
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]
    assert big == [], "split it by concern (docs/architecture.md)"


def test_every_package_declares_a_public_api_that_resolves():
    import importlib

    for layer in sorted(ALLOWED):
        package = importlib.import_module(f"perfkit.{layer}")
        names = getattr(package, "__all__", None)
        assert names, f"perfkit.{layer} declares no __all__"
        for name in names:
            assert getattr(package, name) is not None, f"perfkit.{layer}.{name}"
