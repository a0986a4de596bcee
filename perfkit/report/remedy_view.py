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
    """The fix against every SLO (the main table, the one the postmortem shows): observed, the replay as
    it was and its error, the recommended setting's prediction and verdict, and the row's first
    setting's where the search found another; then every setting tried, and the replay's numbers."""
    from perfkit.report.bench_figures import TablesSection

    tried = list(pred.get("tried") or [])
    rec = next((t for t in tried if t["label"] == pred.get("recommended")), None)
    first = tried[0] if tried else None
    shown = [t for t in dict.fromkeys(x["label"] for x in (rec, first) if x)]
    by_label = {t["label"]: t for t in tried}
    slo_cols: dict[str, list[Any]] = {"SLO": [], "observed": [], "replay as it was": [], "replay error": []}
    slos = (rec or first or {}).get("slos") or []
    heads = [(("recommended: " if rec and lab == rec["label"] else "first: ") + lab) for lab in shown]
    for h in heads:
        slo_cols[h] = []
    as_was = {m: v.get("as_was_ms") for m, v in (pred.get("slo_observed") or {}).items()}
    for row in slos:
        slo_cols["SLO"].append(f"{row['label']} ≤ {_ms(row['slo_ms'])}")
        slo_cols["observed"].append(_ms(row["observed_ms"]))
        slo_cols["replay as it was"].append(_ms(as_was.get(row["metric"])))
        err = _num(row.get("replay_error"))
        slo_cols["replay error"].append(None if err is None else f"{err:+.0%}")
        for h, lab in zip(heads, shown, strict=True):
            theirs = next((r for r in by_label[lab].get("slos") or [] if r["metric"] == row["metric"]), None)
            slo_cols[h].append(_cell(theirs))
    main = pl.DataFrame(slo_cols, strict=False) if slos else _metric_table(pred, tried)
    tables = []
    if slos:
        tables.append(("Every setting tried, each SLO predicted (its verdict)", _settings_table(tried)))
        tables.append(
            ("The replay's own numbers: observed, as it was, each setting", _metric_table(pred, tried))
        )
    helps = pred.get("recommended") is not None
    status = "ok" if pred.get("trusted") and helps and pred.get("meets_every_slo") else "warn"
    f = Finding(KEY, TITLE, summary, status=status, data=dict(pred), table=table_from_frame(main), missing=[])
    return TablesSection(f, main, tables=tables)


def _ms(v: Any) -> str:
    x = _num(v)
    if x is None:
        return "–"
    return f"{x / 1e3:.2f} s" if x >= 1000 else f"{x:.0f} ms"


def _cell(row: Mapping[str, Any] | None) -> str:
    if row is None:
        return "–"
    return f"{_ms(row.get('predicted_ms'))} ({str(row['verdict']).replace('_', ' ')})"


def _settings_table(tried: list[Mapping[str, Any]]) -> pl.DataFrame:
    labels = [r["label"] for r in (tried[0].get("slos") or [])] if tried else []
    cols: dict[str, list[Any]] = {"setting": [], "verdict": []} | {lab: [] for lab in labels}
    for t in tried:
        cols["setting"].append(t["label"])
        cols["verdict"].append(t["verdict"])
        mine = {r["label"]: r for r in t.get("slos") or []}
        for lab in labels:
            cols[lab].append(_cell(mine.get(lab)))
    return pl.DataFrame(cols, strict=False)


def _metric_table(pred: Mapping[str, Any], tried: list[Mapping[str, Any]]) -> pl.DataFrame:
    """One row per replay metric: observed, the replay as it was (and its error), each remedy tried."""
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
    return pl.DataFrame(cols, strict=False)
