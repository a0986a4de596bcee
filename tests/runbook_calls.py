"""The section calls of a shipped runbook, in its order, read from the notebook itself: the one list
the tests that run a runbook's sections in-process share (a section added to the notebook is run by
them too)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import perfkit.app.runbooks.inference as rb
import perfkit.app.runbooks.training as rbt

RUNBOOKS = Path(__file__).resolve().parents[1] / "runbooks"
REPLAYS = ("predicted_fix", "verify_fix")
"""The sections that replay the simulator (tens of seconds the first time): left out unless asked."""
_CALL = re.compile(r"\b(rbt?)\.([a-z_]+)\(ctx\b")
_MODULES = {"rb": rb, "rbt": rbt}


def section_calls(runbook: str, *, replays: bool = False) -> list[tuple[Any, str]]:
    """``(module, function name)`` of every ``rb.x(ctx)`` / ``rbt.x(ctx)`` call in ``runbook``'s code
    cells (``inference_latency``, ``training_step``), in order."""
    cells = json.loads((RUNBOOKS / f"{runbook}.ipynb").read_text(encoding="utf-8"))["cells"]
    source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    calls = [(_MODULES[m], name) for m, name in _CALL.findall(source)]
    assert calls, f"{runbook}: no section calls found"
    return [(m, n) for m, n in calls if replays or n not in REPLAYS]
