"""The release gate: is a new bench result worse than the history of comparable baselines?

:func:`judge` compares a result with the newest ``N`` comparable baselines (same model, same
``hardware`` label when either has one, same load signature: shape, concurrency, rate, prompt and
output lengths, endpoint), each metric in its own direction: latency (mean, median, p99 of TTFT,
TPOT, ITL, E2EL) and error rate up is bad; throughput (req/s, output and total tok/s) and goodput
attainment down is bad. A metric **regresses** when it is worse than the history's median by
more than its band:

    band = max(max_regression x |median|,  noise,  floor,  resolution)

* ``max_regression`` (10 % for latency, 5 % for throughput): the change that matters.
* ``noise``: what the measurement itself moves, the larger of two measured terms. **within-run
  CI** (from the first baseline on): each run's interval from its per-request records
  (:func:`perfkit.loadgen.records.run_noise`: a percentile's order-statistic interval, exact
  binomial ranks at ``k`` standard errors' coverage, 99.73 % at k = 3; a mean's batch means).
  Requests sent together share the machine's state (a hiccup of a shared 2-core runner delays a
  dozen at once: an identical rerun's p99 TTFT moved +35 %), so the variance is taken between ten
  blocks of requests in send order (Woodruff), leaving fewer independent requests. The term is
  ``hypot(d_new, d_ref)`` (:func:`perfkit.loadgen.records.within_band`). A percentile whose
  interval reaches past the run's largest value is not judged ("too few requests for p99: n=...").
  **history MAD** (from 3 baselines on): ``k x 1.4826 x MAD``, the run-to-run noise one run's
  records cannot show. Without records (an imported result) a mean's noise is the tool's
  ``std / sqrt(n)`` ("tool-reported, no records") and a p99 is judged only against 3 baselines
  ("history only"). The table names each band's noise source.
* ``floor`` (absolute): the load generator's stated accuracy (TTFT, E2EL 2 ms; TPOT, ITL 1 ms,
  2 ms at p99); error rate 1 point; attainment 2 points.
* ``resolution`` (throughputs, attainment): one request crossing each edge of the measured window.

A better value past the band is ``improved``; a metric without a value or history ``no-data``.
The verdict is ``pass`` (exit 0), ``regress`` (exit 1) or ``unusable`` (exit 2: no comparable
history, fewer than ``min_history`` baselines, a run marked invalid unless ``allow_invalid``, a
run that completed no request, or nothing judged: no latency or throughput to compare).
A policy YAML (:mod:`perfkit.loadgen.policy`) may change any of it.

A baseline file of the store that cannot be read or holds no measurement (:mod:`perfkit.loadgen.plausible`:
a negative latency, a rate no network carries, a time in the future ...) is skipped, named with why
(``warn`` and the verdict's ``warnings``), counted in a note and in the verdict's ``skipped``; the
gate judges on the rest, and with none left it says so (``unusable``, exit 2, as with an empty store).
One poisoned file can then neither block every deploy nor pass one.
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from perfkit.core.ratios import MAD_TO_SD
from perfkit.loadgen.policy import DEFAULT_RULES, HIGHER, LOWER, MetricRule, Policy
from perfkit.loadgen.result import counting_step, metric_value, records_path
from perfkit.loadgen.store import (
    Baseline,
    Skipped,
    content_hash,
    effective_labels,
    finite,
    load_signature,
    scan_store,
    stored_records,
)
from perfkit.loadgen.store import read_input as read_result_input

__all__ = [  # the policy's names are read from here too (perfkit.loadgen.policy holds them)
    "DEFAULT_RULES",
    "EXIT",
    "HIGHER",
    "LOWER",
    "MetricRule",
    "Policy",
    "Row",
    "Verdict",
    "differences",
    "gate",
    "judge",
    "metric_value",
]

if TYPE_CHECKING:  # records (pyarrow) is imported when a run's records are read
    from perfkit.loadgen.records import RunNoise

MAD_TO_SIGMA = MAD_TO_SD  # 1.4826 x MAD: the run-to-run noise's SD, robust to one outlier run
STATUS_ORDER = {"regressed": 0, "improved": 1, "pass": 2, "no-data": 3}
MIN_HISTORY_MAD = 3  # baselines from which the history's spread (MAD) estimates noise
P99_MIN_REQUESTS = 1000  # without records: compare's rule (its interval needs 658 independent ones)
EXIT = {"pass": 0, "regress": 1, "unusable": 2}

Warn = Callable[[str], None]


@dataclass(frozen=True)
class Row:
    """One metric's judgement (values in the metric's unit; ``band`` is the allowed worsening)."""

    metric: str
    direction: str
    unit: str
    status: str
    new: float | None
    median: float | None = None
    spread: float | None = None
    band: float | None = None
    band_from: str | None = None
    limit: float | None = None
    change_pct: float | None = None
    n: int = 0
    why: str | None = None
    """Why a metric was not judged: ``too few requests for p99: n=...``, ``no value``, ``no history``."""
    within: float | None = None
    """The within-run term of the band (the runs' intervals combined), when measured."""
    noise_from: str = "none"
    """The noise term's source: ``within-run CI``, ``history MAD``, ``both``, ``history only`` (no
    records), ``tool-reported, no records``, ``none``."""
    noise: float | None = None
    """The band's measured-noise term (``k`` x the larger of the within-run and the history's SD), shown
    beside the band so a reader sees how much of the band the measurement's own noise asks for."""


@dataclass
class Verdict:
    """The gate's answer: ``overall`` pass/regress/unusable, the rows, and why."""

    overall: str
    rows: list[Row] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    result: dict[str, Any] = field(default_factory=dict)
    policy: dict[str, Any] = field(default_factory=dict)
    skipped: list[dict[str, Any]] = field(default_factory=list)
    """The store's files left out (``file``, ``line``, ``why``): unreadable, or no measurement."""

    @property
    def exit_code(self) -> int:
        return EXIT[self.overall]

    @property
    def regressed(self) -> list[Row]:
        return [r for r in self.rows if r.status == "regressed"]

    @property
    def improved(self) -> list[Row]:
        return [r for r in self.rows if r.status == "improved"]

    def headline(self) -> str:
        """One line: the verdict and, for a regression, the metrics that regressed."""
        if self.overall == "unusable":
            return f"unusable: {self.reasons[0] if self.reasons else 'nothing to compare'}"
        against = f"against {len(self.history)} baseline{'s' if len(self.history) != 1 else ''}"
        if self.overall == "regress":
            worst = ", ".join(f"{r.metric} {_change(r)}" for r in self.regressed)
            return f"REGRESSION in {len(self.regressed)} metric{'s' if len(self.regressed) != 1 else ''} {against}: {worst}"
        judged = sum(r.status != "no-data" for r in self.rows)
        better = f", {len(self.improved)} improved" if self.improved else ""
        unjudged = self.unjudged
        skipped = f"; {len(unjudged)} not judged: {', '.join(unjudged)}" if unjudged else ""
        return f"pass: {judged} metrics within their bands{better} {against}{skipped}"

    @property
    def unjudged(self) -> list[str]:
        """The metrics the gate did not judge: no value, no history, too few requests, or disabled."""
        rules = _dict(self.policy.get("metrics")).items()
        off = [str(m) for m, rule in rules if not _dict(rule).get("enabled", True)]
        return [r.metric for r in self.rows if r.status == "no-data"] + off

    def as_dict(self) -> dict[str, Any]:
        """The verdict as the JSON ``perfkit gate --out`` writes (``schema`` ``perfkit.gate/1``)."""
        body = asdict(self)  # a deep copy: reasons, notes, warnings, result, history, policy, rows
        head = {"schema": "perfkit.gate/1", "verdict": body.pop("overall"), "exit_code": self.exit_code}
        rows = body.pop("rows")
        regressed, improved = [r.metric for r in self.regressed], [r.metric for r in self.improved]
        return {
            **head,
            "summary": self.headline(),
            "regressed": regressed,
            "improved": improved,
            **body,
            "metrics": rows,
        }


def differences(
    result: Mapping[str, Any], baseline: Baseline, labels: Mapping[str, str]
) -> list[tuple[str, Any, Any]]:
    """What makes ``baseline`` not comparable with ``result``: ``(field, baseline's, result's)``."""
    diffs: list[tuple[str, Any, Any]] = []
    model = _dict(result.get("meta")).get("model")
    if baseline.model != model:
        diffs.append(("model", baseline.model, model))
    hardware, theirs = labels.get("hardware"), baseline.labels.get("hardware")
    if (hardware is not None or theirs is not None) and hardware != theirs:
        diffs.append(("hardware", theirs, hardware))
    mine, other = load_signature(result), load_signature(baseline.doc)
    for key in [*mine, *(k for k in other if k not in mine)]:
        if not _same(mine.get(key), other.get(key)):
            diffs.append((f"load.{key}", other.get(key), mine.get(key)))
    return diffs


def judge(
    result: Mapping[str, Any],
    history: Sequence[Baseline | Mapping[str, Any]],
    policy: Policy | None = None,
    *,
    allow_invalid: bool = False,
    labels: Mapping[str, str] | None = None,
    records: str | os.PathLike[str] | None = None,
    warn: Warn | None = None,
    skipped: Sequence[Skipped] = (),
) -> Verdict:
    """Judge ``result`` against the comparable baselines among ``history`` (newest ``policy.history``).

    ``labels`` are the result's labels over its ``meta.labels`` (``hardware`` decides comparability).
    ``records`` is the result's per-request records file: its within-run intervals; a stored
    baseline's records are found beside it. Without them the band rests on the history and the
    tool's own figures (see the module's docstring). ``skipped`` are the store's files the history
    was read without (:func:`perfkit.loadgen.store.scan_store`): counted in a note and the verdict.
    """
    policy = policy or Policy()
    own = {**effective_labels(result), **(labels or {})}
    verdict = Verdict(overall="pass", policy=policy.as_dict(), result=_describe_result(result, own))
    verdict.skipped = [s.as_dict() for s in skipped]
    if skipped:
        n = len(skipped)
        verdict.notes.append(
            f"skipped {n} baseline file{'s' if n != 1 else ''} of the store (unreadable or no measurement, "
            f"each named in the warnings); judged on the other {len(history)}"
        )
    _failure_notes(result, verdict)
    validity = _dict(result.get("validity"))
    if validity.get("valid") is False:
        why = "; ".join(str(r) for r in validity.get("reasons") or []) or "no reason given"
        if allow_invalid:
            verdict.notes.append(f"judged although the run is marked invalid: {why}")
        else:
            verdict.reasons.append(f"the run is marked invalid ({why}); judge it anyway with --allow-invalid")
    if result.get("interrupted") is True:
        verdict.notes.append("the run was interrupted: it measured fewer requests than planned")
    if not (finite(result.get("completed")) or 0) > 0:
        failed = int(finite(result.get("failed")) or 0)
        verdict.reasons.append(f"nothing measured: the run completed no request ({failed} failed)")

    digest = content_hash(result)
    candidates: list[Baseline] = []
    for item in history:
        base = item if isinstance(item, Baseline) else Baseline.from_doc(item)
        if base.sha256 == digest:
            verdict.notes.append(f"the result itself is baseline {base.id}; left out of its own history")
            continue
        candidates.append(base)
    comparable = sorted(
        (b for b in candidates if not differences(result, b, own)), key=Baseline.sort_key, reverse=True
    )
    chosen = comparable[: policy.history]
    verdict.history = [
        {"id": b.id, "started": b.started, "added": b.added, "labels": b.labels} for b in chosen
    ]
    if not comparable:
        verdict.reasons.append(_nearest(result, candidates, own, len(skipped)))
    elif len(comparable) < policy.min_history:
        verdict.reasons.append(
            f"{len(comparable)} comparable baseline{'s' if len(comparable) != 1 else ''}, "
            f"the policy needs {policy.min_history} (min_history)"
        )
    if verdict.reasons:
        verdict.overall = "unusable"
        return verdict

    from perfkit.loadgen.records import noise_of

    def say(message: str) -> None:
        verdict.warnings.append(message)
        if warn is not None:
            warn(message)

    noise = {b.id: noise_of(b.doc, stored_records(b, say), f"baseline {b.id}", say) for b in chosen}
    noise[""] = noise_of(result, records, "the result", say)
    for rule in policy.rules:
        if rule.enabled:
            row = _judge_metric(rule, result, chosen, verdict, noise)
            if row is not None:
                verdict.rows.append(row)
    verdict.rows.sort(key=lambda r: STATUS_ORDER[r.status])
    if noise[""] is None:
        verdict.notes.append(
            "no per-request records with the result: its bands rest on the history and the tool's own "
            "figures (a p99 is judged only against 3 baselines or more)"
        )
    verdict.notes.extend(_unjudged_notes(verdict.rows, policy))
    counted = [r for r in verdict.rows if r.status != "no-data" and r.metric not in _NOT_COUNTED]
    if verdict.reasons:
        verdict.overall = "unusable"
    elif verdict.regressed:
        verdict.overall = "regress"
    elif not counted:
        verdict.overall = "unusable"
        verdict.reasons.append(
            "nothing to judge: no latency or throughput has both a new value and a history to compare with"
        )
    return verdict


def gate(
    result_path: str | os.PathLike[str],
    store: str | os.PathLike[str],
    policy: Policy | None = None,
    *,
    allow_invalid: bool = False,
    labels: Mapping[str, str] | None = None,
    warn: Warn | None = None,
    index: int | None = None,
) -> Verdict:
    """Read the result at ``result_path`` and judge it against the baselines of ``store``, with the
    per-request records beside each (the within-run noise).

    Store files that cannot be read or hold no measurement are skipped (each through ``warn``, in
    the verdict's warnings and ``skipped``, counted in a note). Raises
    :class:`~perfkit.errors.PerfkitError` for an unreadable or absurd result, or no store folder.
    """
    result = read_result_input(result_path, index)
    baselines, skipped = scan_store(store)
    if warn is not None:
        for item in skipped:
            warn(str(item))
    rec = records_path(result_path, result)
    verdict = judge(
        result, baselines, policy, allow_invalid=allow_invalid, labels=labels, records=rec, warn=warn,
        skipped=skipped,
    )  # fmt: skip
    verdict.result["file"] = Path(result_path).name
    verdict.warnings[:0] = [str(item) for item in skipped]
    return verdict


# --------------------------------------------------------------------------------------------------


_NOT_COUNTED = ("errors.rate", "goodput.attainment")  # alone they are not a measurement to pass
_THROUGHPUTS = ("requests", "output_tokens", "total_tokens")


def _judge_metric(
    rule: MetricRule,
    result: Mapping[str, Any],
    chosen: list[Baseline],
    verdict: Verdict,
    noise: Mapping[str, RunNoise | None],
) -> Row | None:
    try:
        new = metric_value(result, rule.metric)
    except ValueError as exc:
        verdict.reasons.append(f"the result's {exc}")
        return None
    completed = int(finite(result.get("completed")) or 0)
    no_data = Row(rule.metric, rule.direction, rule.unit, "no-data", new)
    if completed < rule.min_requests:
        return replace(no_data, why=f"too few requests for {rule.metric}: n={completed:,} (the policy's min_requests {rule.min_requests:,})")  # fmt: skip
    values: list[tuple[str, float]] = []
    slo = _dict(result.get("goodput")).get("slo_ms")
    for base in chosen:
        if rule.metric.startswith("goodput.") and _dict(base.doc.get("goodput")).get("slo_ms") != slo:
            verdict.notes.append(f"{rule.metric}: baseline {base.id} judged other SLOs; left out")
            continue
        try:
            value = metric_value(base.doc, rule.metric)
        except ValueError as exc:
            verdict.warnings.append(f"baseline {base.id}: {exc}; left out of {rule.metric}")
            continue
        if value is not None:
            values.append((base.id, value))
    if new is None or not values:
        return replace(no_data, n=len(values), why="no value" if new is None else "no history")
    median = statistics.median(v for _, v in values)
    mad = MAD_TO_SIGMA * statistics.median(abs(v - median) for _, v in values)
    spread = mad if len(values) >= MIN_HISTORY_MAD else None
    sign = 1.0 if rule.direction == LOWER else -1.0
    from perfkit.loadgen.records import within_band

    std = finite(result.get(rule.metric.replace("mean_", "std_", 1)))
    within, source, why = within_band(
        rule.metric, rule.k, sign, new, noise.get(""), [(noise.get(i), v) for i, v in values],
        completed=completed, throughput=rule.resolution in _THROUGHPUTS, p99_min=P99_MIN_REQUESTS,
        reported_se=std / math.sqrt(completed) if std else None,
    )  # fmt: skip
    if why is not None and (spread is None or why.startswith("too few")):
        return replace(no_data, n=len(values), why=why)
    history_term = rule.k * spread if spread is not None else None
    sources = [x for x in (source, "history MAD" if history_term is not None else None) if x]
    noise_from = {("within-run CI", "history MAD"): "both", ("history MAD",): "history only" if noise.get("") is None else "history MAD"}.get(tuple(sources), " + ".join(sources) or "none")  # fmt: skip
    terms = {
        "relative": rule.max_regression * abs(median),
        "noise": max(within or 0.0, history_term or 0.0),
        "floor": rule.floor,
        "resolution": counting_step(rule.resolution, result),
    }
    band_from = max(terms, key=lambda t: terms[t])
    band = terms[band_from]
    if not all(map(math.isfinite, (median, band, median + sign * band, new - median))):
        return replace(no_data, n=len(values), why="the history's values are beyond a float's range")
    worse = sign * (new - median)
    status = "regressed" if worse > band else "improved" if -worse > band else "pass"
    change = (new - median) / abs(median) * 100 if median else None
    change = change if change is not None and math.isfinite(change) else None
    return Row(
        rule.metric, rule.direction, rule.unit, status, new, median, spread, band, band_from,
        median + sign * band, change, len(values), None, within, noise_from,
        terms["noise"] if within is not None or history_term is not None else None,
    )  # fmt: skip


def _unjudged_notes(rows: Sequence[Row], policy: Policy) -> list[str]:
    """``not judged: p99_ttft_ms, p99_itl_ms: too few requests for p99: n=...``, one line per kind of
    reason (its first full text), and the metrics the policy turned off: what a pass did not look at
    is said beside it."""
    kinds: dict[str, tuple[str, list[str]]] = {}
    for row in rows:
        if row.status == "no-data":
            why = row.why or "no value"
            kind = why.split(":")[0]
            kinds.setdefault(kind, (why, []))[1].append(row.metric)
    notes = [f"not judged: {', '.join(metrics)}: {why}" for why, metrics in kinds.values()]
    if off := [r.metric for r in policy.rules if not r.enabled]:
        notes.append(f"not judged: {', '.join(off)}: turned off by the policy ({policy.source})")
    return notes


def _failure_notes(result: Mapping[str, Any], verdict: Verdict) -> None:
    failed = finite(result.get("failed")) or 0
    if failed <= 0:
        return
    sent = failed + (finite(result.get("completed")) or 0)
    kinds = _dict(_dict(result.get("errors")).get("by_kind"))
    by_kind = ", ".join(f"{k} {int(v)}" for k, v in kinds.items() if finite(v))
    verdict.notes.insert(
        0,
        f"the new result has {int(failed)} failed request{'s' if failed != 1 else ''} of {int(sent)} sent "
        f"({failed / sent:.1%}{'; ' + by_kind if by_kind else ''}); its latencies cover completed requests only",
    )


def _nearest(
    result: Mapping[str, Any], candidates: list[Baseline], labels: Mapping[str, str], skipped: int = 0
) -> str:
    """Why nothing is comparable, told by the baselines that differ least from the result."""
    if not candidates and skipped:
        every = "the only file" if skipped == 1 else f"all {skipped} files"
        return (
            f"no usable baseline: {every} of the store {'was' if skipped == 1 else 'were'} skipped "
            "(unreadable or no measurement, each named in the warnings); add a good one with "
            "`perfkit baseline add`"
        )
    if not candidates:
        return "no baseline to compare with: add one with `perfkit baseline add`"
    newest_first = sorted(candidates, key=Baseline.sort_key, reverse=True)
    scored = sorted(((differences(result, b, labels), b) for b in newest_first), key=lambda d: len(d[0]))
    diffs, nearest = scored[0]
    same = sum(1 for d, _ in scored if [x[0] for x in d] == [x[0] for x in diffs])
    what = "; ".join(f"{f} (baselines {_key(b)}, this run {_key(r)})" for f, b, r in diffs[:3])
    more = f" and {len(diffs) - 3} more" if len(diffs) > 3 else ""
    others = f" (like {same - 1} other{'s' if same > 2 else ''})" if same > 1 else ""
    return (
        f"no comparable baseline among {len(candidates)}: the nearest, {nearest.id}{others}, "
        f"differs in {what}{more}"
    )


def _describe_result(result: Mapping[str, Any], labels: Mapping[str, str]) -> dict[str, Any]:
    meta = _dict(result.get("meta"))
    return {
        "model": meta.get("model"),
        "started": meta.get("started"),
        "labels": dict(labels),
        "load": load_signature(result),
        "completed": result.get("completed"),
        "failed": result.get("failed"),
        "error_rate": finite(_dict(result.get("errors")).get("rate")),
        "valid": _dict(result.get("validity")).get("valid"),
        "sha256": content_hash(result),
    }


def _same(a: Any, b: Any) -> bool:
    x, y = finite(a), finite(b)
    if x is not None and y is not None:
        return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12)
    return bool(a == b)


def _change(row: Row) -> str:
    """``+25.0 %``, or ``0 % -> 2 %`` from a zero median (a fraction shown in percent)."""
    if row.change_pct is not None:
        return f"{row.change_pct:+.1f} %"
    scale, unit = (100.0, " %") if row.unit == "frac" else (1.0, f" {row.unit}".rstrip())
    return f"{(row.median or 0) * scale:.3g}{unit} -> {(row.new or 0) * scale:.3g}{unit}"


def _key(key: Any) -> str:
    return "none" if key is None else str(key)[:60]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
