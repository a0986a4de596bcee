"""Read an executed runbook notebook back: findings, parameters, timings and cell errors.

The notebook is the immutable record of an investigation; the postmortem is rebuilt from it
without re-querying any source::

    nb = read_executed_notebook("out/inc-42/inference_latency.ipynb")
    nb.findings["baseline"].summary          # 'p95 TTFT 3.4 s vs 0.41 s in the baseline (8.3x)'
    redact_parameters(nb.parameters)          # secrets shown as '[redacted]'

Nothing here renders; :mod:`perfkit.report.render` does.
"""

from __future__ import annotations

import ast
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import perfkit
from perfkit.core.findings import Finding, findings_from_notebook
from perfkit.core.scrub import secret_values
from perfkit.core.secrets import (  # noqa: F401  (re-exported for report users)
    REDACTED,
    is_secret_name,
    looks_like_secret,
    redact_parameters,
    redact_text,
)
from perfkit.errors import ConfigError


@dataclass(frozen=True)
class CellDuration:
    """How long one code cell ran, in seconds (papermill's ``cell.metadata.papermill.duration``)."""

    index: int  # 0-based cell index in the notebook
    duration_s: float
    label: str  # "cell 7 · Baseline vs now" (section heading, never the cell's source)


@dataclass(frozen=True)
class CellProblem:
    """An error output of one cell (``output_type == "error"``)."""

    index: int
    ename: str
    evalue: str
    label: str


@dataclass
class ExecutedNotebook:
    """Everything the postmortem needs from an executed notebook.

    ``parameters`` holds the raw values (they may contain a secret someone passed by mistake):
    show them only through :meth:`redacted_parameters`.
    """

    path: Path
    findings: dict[str, Finding]
    parameters: dict[str, Any] = field(repr=False)
    cell_durations: list[CellDuration]
    problems: list[CellProblem]
    runbook: str
    runbook_version: str
    perfkit_version: str
    sha256: str
    executed_start: str | None = None
    executed_end: str | None = None

    def redacted_parameters(self) -> dict[str, Any]:
        """The parameters with secret names and secret-looking values replaced by ``[redacted]``."""
        return redact_parameters(self.parameters)

    def secret_values(self) -> list[str]:
        """Raw parameter values that redaction hides (to scrub them from any rendered text)."""
        return secret_values(self.parameters)

    @property
    def total_duration_s(self) -> float:
        """Sum of the per-cell durations, in seconds (0.0 when the notebook has no timings)."""
        return sum(c.duration_s for c in self.cell_durations)


def read_executed_notebook(path: str | Path) -> ExecutedNotebook:
    """Read an executed ``.ipynb`` and return an :class:`ExecutedNotebook`.

    Raises :class:`~perfkit.errors.ConfigError` (one line, naming the file) when the file is
    missing, is not notebook JSON, or carries a malformed finding.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise ConfigError(f"{path}: cannot read notebook: {err.strerror or err}") from None
    try:
        nb = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        reason = str(err).splitlines()[0]
        raise ConfigError(f"{path}: not a notebook (invalid JSON: {reason})") from None
    if not isinstance(nb, dict) or not isinstance(nb.get("cells"), list):
        raise ConfigError(f"{path}: not a notebook (no 'cells' list)")
    try:
        findings = findings_from_notebook(nb)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ConfigError(
            f"{path}: malformed perfkit finding in notebook: {type(err).__name__}: {err}"
        ) from None

    metadata = _sub(nb, "metadata")
    papermill = _sub(metadata, "papermill")
    perfkit_meta = _sub(metadata, "perfkit")
    cells = [c for c in nb["cells"] if isinstance(c, dict)]
    labels = _cell_labels(cells)
    return ExecutedNotebook(
        path=path,
        findings=findings,
        parameters=notebook_parameters(cells, papermill),
        cell_durations=_durations(cells, labels),
        problems=_problems(cells, labels),
        runbook=str(perfkit_meta.get("runbook") or path.stem),
        runbook_version=str(perfkit_meta.get("runbook_version") or "unknown"),
        perfkit_version=perfkit.__version__,
        sha256=hashlib.sha256(raw).hexdigest(),
        executed_start=_str_or_none(papermill.get("start_time")),
        executed_end=_str_or_none(papermill.get("end_time")),
    )


def notebook_parameters(cells: list[dict[str, Any]], papermill: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters a notebook ran with: the ``parameters`` cell's defaults, overridden by any
    ``injected-parameters`` cell, overridden by ``metadata.papermill.parameters``.

    Only ``name = literal`` assignments are read (``ast.literal_eval``); anything else is skipped.
    """
    params: dict[str, Any] = {}
    for tag in ("parameters", "injected-parameters"):
        for cell in cells:
            if cell.get("cell_type") == "code" and tag in _tags(cell):
                params.update(_literal_assignments(_source(cell)))
    recorded = papermill.get("parameters")
    if isinstance(recorded, dict):
        params.update({str(k): v for k, v in recorded.items()})
    return params


def _literal_assignments(source: str) -> dict[str, Any]:
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return {}
    found: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        try:
            literal = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                found[target.id] = literal
    return found


def _sub(mapping: Mapping[str, Any], key: str) -> dict[str, Any]:
    """``mapping[key]`` when it is a dict, else ``{}``."""
    value = mapping.get(key)
    return value if isinstance(value, dict) else {}


def _source(cell: Mapping[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def _tags(cell: Mapping[str, Any]) -> list[str]:
    meta = _sub(cell, "metadata")
    tags = meta.get("tags") or []
    return [str(t) for t in tags] if isinstance(tags, list) else []


def _cell_labels(cells: list[dict[str, Any]]) -> list[str]:
    """A label per cell from its tags or the nearest markdown heading above it (never its code)."""
    labels: list[str] = []
    heading = ""
    for i, cell in enumerate(cells):
        if cell.get("cell_type") == "markdown":
            for line in _source(cell).splitlines():
                if line.lstrip().startswith("#"):
                    heading = line.strip().lstrip("#").strip()[:80]
                    break
        tags = [t for t in _tags(cell) if t in ("parameters", "injected-parameters")]
        where = f"[{tags[0]}]" if tags else heading
        labels.append(f"cell {i}" + (f" · {where}" if where else ""))
    return labels


def _durations(cells: list[dict[str, Any]], labels: list[str]) -> list[CellDuration]:
    out: list[CellDuration] = []
    for i, cell in enumerate(cells):
        meta = _sub(cell, "metadata")
        pm = _sub(meta, "papermill")
        duration = pm.get("duration")
        if isinstance(duration, int | float) and not isinstance(duration, bool) and duration >= 0:
            out.append(CellDuration(index=i, duration_s=float(duration), label=labels[i]))
    return out


def _problems(cells: list[dict[str, Any]], labels: list[str]) -> list[CellProblem]:
    out: list[CellProblem] = []
    for i, cell in enumerate(cells):
        for output in cell.get("outputs") or []:
            if isinstance(output, dict) and output.get("output_type") == "error":
                out.append(
                    CellProblem(
                        index=i,
                        ename=str(output.get("ename") or "Error"),
                        evalue=str(output.get("evalue") or ""),
                        label=labels[i],
                    )
                )
    return out


def _str_or_none(value: Any) -> str | None:
    return None if value in (None, "") else str(value)
