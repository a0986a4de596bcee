"""Check runbooks as committed: kernel python3, a `parameters` cell, outputs stripped.

Run as ``python -m perfkit.app.runner.check_notebooks runbooks``; exits 1 naming each offending file.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def problems(path: Path) -> list[str]:
    nb = json.loads(path.read_text(encoding="utf-8"))
    found: list[str] = []
    if nb.get("metadata", {}).get("kernelspec", {}).get("name") != "python3":
        found.append("kernelspec is not python3")
    cells = nb.get("cells", [])
    if not any("parameters" in c.get("metadata", {}).get("tags", []) for c in cells):
        found.append("no cell tagged 'parameters'")
    for i, cell in enumerate(cells):
        if cell.get("cell_type") == "code" and (cell.get("outputs") or cell.get("execution_count")):
            found.append(f"cell {i} has outputs or an execution count (strip them)")
    return found


def main(argv: list[str]) -> int:
    root = Path(argv[0] if argv else "runbooks")
    bad = 0
    for path in sorted(root.glob("*.ipynb")):
        for problem in problems(path):
            print(f"{path}: {problem}")
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
