"""The import rule of docs/architecture.md, checked on every module (imports inside functions too).

Each layer may import only the layers listed for it; ``perfkit.errors`` and the top-level
``perfkit`` package (its version) are open to all. Inside ``app`` each room may import only the
rooms listed for it (:data:`APP_ROOMS`), and nowhere may two modules import each other, directly or
round a loop.
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

#: the rooms of ``app`` -> the rooms each may import (besides itself): commands import the rest;
#: runbooks, drills and what-if stand on the runner and never import a command; a runbook may run a
#: what-if (the inference runbook's predicted fix), never the other way
APP_ROOMS = {
    "runner": set(),
    "runbooks": {"runner", "whatif"},
    "drills": {"runner"},
    "whatif": {"runner"},
    "cli": {"runner", "runbooks", "drills", "whatif"},
}
MAX_MODULES = 12  # modules at any one level of app


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


def room_violations(package: Path) -> list[str]:
    """Imports between the rooms of ``app`` (``package/app/<room>/``) that break :data:`APP_ROOMS`."""
    bad = []
    for path in sorted((package / "app").rglob("*.py")):
        rel = path.relative_to(package)
        if len(rel.parts) < 3:
            continue
        room = rel.parts[1]
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found = _imports(tree) + [
            (node.lineno, f"perfkit.app.{a.name}")
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module == "perfkit.app"
            for a in node.names
        ]
        for line, module in sorted(found):
            parts = module.split(".")
            if parts[:2] != ["perfkit", "app"] or len(parts) < 3 or parts[2] == room:
                continue
            if parts[2] not in APP_ROOMS.get(room, set()):
                bad.append(
                    f"perfkit/{rel}:{line}: app/{room} imports {module} (app/{parts[2]} is not below it)"
                )
    return bad


def _import_graph(package: Path) -> dict[str, set[str]]:
    """Module -> the perfkit modules it imports (at any depth, lazy tables too); ``from a import b``
    counts as importing ``a.b`` when that is a module, and a name that is no module as its package."""
    modules = {}
    for path in sorted(package.rglob("*.py")):
        parts = ("perfkit", *path.relative_to(package).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        targets = {m for _, m in _imports(tree) if not m.startswith(".")}
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and (node.module or "").startswith("perfkit")
            ):
                targets.discard(node.module)  # re-added below when a name is no module of it
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    targets.add(full if full in modules else str(node.module))
        graph[name] = set()
        for module in targets:
            while module and module not in modules:
                module = module.rpartition(".")[0]
            if module and module != name:
                graph[name].add(module)
    return graph


def import_circles(package: Path) -> list[list[str]]:
    """Every group of modules that import each other, directly or round a longer loop (the strongly
    connected components of more than one module, Tarjan's algorithm), each sorted."""
    graph = _import_graph(package)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(circles)


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
        "_NAMES = {'x': 'perfkit.app.cli.main'}\n"  # upward, through a lazy table
    )
    found = violations(tmp_path)
    assert [v.split(":")[1] for v in found] == ["3", "4", "5", "6"], found


def test_app_rooms_import_one_way():
    assert room_violations(PACKAGE) == []


def test_app_holds_its_rooms_each_small():
    """``app`` is rooms only (each with its purpose in docs/architecture.md); no level of it holds
    more than :data:`MAX_MODULES` modules."""
    app = PACKAGE / "app"
    assert sorted(p.name for p in app.glob("*.py")) == ["__init__.py"]
    rooms = sorted(p.name for p in app.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert rooms == sorted(APP_ROOMS)
    architecture = (PACKAGE.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    for room in rooms:
        assert f"| `app/{room}/` |" in architecture, f"docs/architecture.md says nothing of app/{room}/"
        modules = [p for p in (app / room).glob("*.py") if p.name != "__init__.py"]
        assert len(modules) <= MAX_MODULES, f"app/{room}: {len(modules)} modules; split it"


def test_room_rule_catches_a_runbook_importing_a_command(tmp_path):
    (tmp_path / "app" / "runbooks").mkdir(parents=True)
    (tmp_path / "app" / "runbooks" / "bad.py").write_text(
        "from perfkit.app.runner.run import execute\n"  # allowed
        "def f():\n"
        "    from perfkit.app.cli.main import cli\n"  # a runbook importing a command
        "from perfkit.app import cli\n"  # the same, through the package
    )
    found = room_violations(tmp_path)
    assert [v.split(":")[1] for v in found] == ["3", "4"], found


def test_no_module_imports_its_importer():
    """No import circle anywhere in perfkit, inside one folder or across, lazy imports included: a
    circle means neither module can be read, tested or moved without the other."""
    assert import_circles(PACKAGE) == []


def test_the_circle_check_finds_lazy_and_longer_circles(tmp_path):
    (tmp_path / "lab").mkdir()
    (tmp_path / "lab" / "__init__.py").write_text("")
    (tmp_path / "lab" / "a.py").write_text("def f():\n    from perfkit.lab.b import g\n")  # lazy
    (tmp_path / "lab" / "b.py").write_text("from perfkit.lab import a\n")  # through the package
    (tmp_path / "lab" / "c.py").write_text("from perfkit.lab.d import x\n")  # a loop of three
    (tmp_path / "lab" / "d.py").write_text("if False:\n    import perfkit.lab.e\n")
    (tmp_path / "lab" / "e.py").write_text("_NAMES = {'y': 'perfkit.lab.c'}\n")
    (tmp_path / "lab" / "f.py").write_text("from perfkit.lab.a import f\n")  # imports a circle: not in it
    assert import_circles(tmp_path) == [
        ["perfkit.lab.a", "perfkit.lab.b"],
        ["perfkit.lab.c", "perfkit.lab.d", "perfkit.lab.e"],
    ]


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
