"""How the predicted fix looks (:func:`perfkit.app.whatif.remedy.predict`): the observed incident, the
replay of it as it was, and each remedy tried, metric by metric, with the replay's own error."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import polars as pl

from perfkit.core.findings import Finding, table_from_frame
from perfkit.report.sections import Section

KEY, TITLE = "predicted_fix", "The fix, predicted by a calibrated replay"
LABELS = {
    "ttft_p50_ms": "TTFT p50 (ms)",
    "ttft_p95_ms": "TTFT p95 (ms)",
    "tpot_p50_ms": "TPOT p50 (ms)",
    "tpot_p95_ms": "TPOT p95 (ms)",
    "output_throughput": "output tok/s",
    "goodput": "goodput (req/s within the SLOs)",
    "usd_per_million_tokens": "$ per million output tokens",
}


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) else None


def not_run_section(why: str, status: str = "missing") -> Section:
    """The section when nothing is replayed (no bundle, nothing confirmed, turned off): says why."""
    return Section(
        Finding(KEY, TITLE, why, status=status, missing=[f"{KEY}: {why}"] if status == "missing" else [])
    )


def predicted_fix_section(pred: Mapping[str, Any], summary: str) -> Section:
    """One row per metric: observed, the replay as it was (and its error), each remedy tried."""
    tried = list(pred.get("tried") or [])
    cols: dict[str, list[Any]] = {"metric": [], "observed": [], "replay as it was": [], "replay error": []}
    heads = [f"{t['label']} ({t['verdict']})" for t in tried]
    for h in heads:
        cols[h] = []
    for metric, label in LABELS.items():
        cols["metric"].append(label)
        cols["observed"].append(_num(pred["observed"].get(metric)))
        cols["replay as it was"].append(_num(pred["as_was"].get(metric)))
        err = _num(pred["replay_error"].get(metric))
        cols["replay error"].append(None if err is None else f"{err:+.0%}")
        for h, t in zip(heads, tried, strict=True):
            cols[h].append(_num((t.get("predicted") or {}).get(metric)))
    table = pl.DataFrame(cols, strict=False)
    helps = any(t["verdict"] == "helps" for t in tried)
    status = "ok" if pred.get("trusted") and helps else "warn"
    f = Finding(KEY, TITLE, summary, status=status, data=dict(pred), table=table_from_frame(table),
                missing=[])  # fmt: skip
    return Section(f, table)
