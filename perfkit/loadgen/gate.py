"""The release gate: is a new bench result worse than the history of comparable baselines?

:func:`judge` compares a result with the newest ``N`` comparable baselines (same model, same
``hardware`` label when either has one, same load signature: shape, concurrency, rate, prompt and
output lengths, endpoint), each metric in its own direction: latency (mean, median, p99 of TTFT,
TPOT, ITL, E2EL) and error rate up is bad; throughput (req/s, output and total tok/s) and goodput
attainment down is bad. A metric **regresses** when it is worse than the history's median by
more than its band:

    band = max(max_regression x |median|,  k x 1.4826 x MAD(history),  floor,  resolution)

* ``max_regression`` (10 % for latency, 5 % for throughput): the change that matters; the only
  term a history of one or two runs supports (their spread says nothing).
* ``k x 1.4826 x MAD`` (k = 3): the noise seen. On a shared 2-core CI runner one build moves from
  run to run by more than 10 %; the band widens to what the history shows. 1.4826 x MAD estimates
  a normal standard deviation that one outlier run cannot inflate.
* ``floor`` (absolute): near zero a relative rule is meaningless (10 % of a 0.4 ms ITL is below
  event-loop jitter). Latency floors are the load generator's stated accuracy (TTFT, E2EL 2 ms;
  TPOT, ITL 1 ms, 2 ms at p99); error rate 1 point (``max_regression`` 0); attainment 2 points
  (binomial noise of a few hundred judged requests).
* ``resolution`` (throughputs, attainment): one request crossing each edge of the measured window
  moves a throughput by 2/duration (times tokens per request for tok/s), attainment by 2/judged;
  short CI runs would otherwise flag the counting step.

A p99 is judged only from ``min_requests`` (1,000) completed requests (:data:`P99_MIN_REQUESTS`).
A better value past the band is ``improved``; a metric without a value or history ``no-data``.
The verdict is ``pass`` (exit 0), ``regress`` (exit 1) or ``unusable`` (exit 2: no comparable
history, fewer than ``min_history`` baselines, or a run marked invalid unless ``allow_invalid``).
A policy YAML (:meth:`Policy.from_file`) may change any of it::

    history: 5            # compare with the newest N comparable baselines
    min_history: 1        # fewer comparable baselines: unusable
    k: 3                  # the spread multiplier of every metric (each may set its own)
    metrics:
      p99_ttft_ms: {max_regression: 15%, floor: 5, min_requests: 500}
      errors.rate: {enabled: false}
      max_output_tokens_per_s: {direction: higher_is_better, max_regression: 0.05}
"""

from __future__ import annotations

import math
import os
import re
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from perfkit.errors import ConfigError
from perfkit.loadgen.store import Baseline, content_hash, effective_labels, finite, iter_store, load_signature
from perfkit.loadgen.store import read_input as read_result_input
from perfkit.sources.safeyaml import load_yaml

LOWER = "lower_is_better"
HIGHER = "higher_is_better"
MAD_TO_SIGMA = 1.4826
"""1.4826 x MAD estimates the standard deviation of normal noise, robust to one outlier run."""
STATUS_ORDER = {"regressed": 0, "improved": 1, "pass": 2, "no-data": 3}
EXIT = {"pass": 0, "regress": 1, "unusable": 2}

Warn = Callable[[str], None]


@dataclass(frozen=True)
class MetricRule:
    """How one metric is judged: its direction, allowed relative regression, floor and k."""

    metric: str
    direction: str
    max_regression: float
    floor: float
    k: float = 3.0
    enabled: bool = True
    min_requests: int = 0
    """Completed requests the new result needs for this metric to be judged (p99: 1,000)."""
    unit: str = ""
    resolution: str | None = None
    """``requests``, ``output_tokens``, ``total_tokens`` (throughputs) or ``judged`` (attainment)."""


P99_MIN_REQUESTS = 1000
"""A p99 of n requests rests on the n/100 slowest; under 1,000 (10 beyond it) its 95 % confidence
interval reaches the sample maximum (at 200 requests, 2 requests: one scheduler hiccup of a
shared runner moved an A/A p99 TTFT by +47 % here), so it is not judged."""

DEFAULT_RULES: tuple[MetricRule, ...] = (
    *(
        MetricRule(
            f"{stat}_{m}_ms",
            LOWER,
            0.10,
            2.0 if m in ("ttft", "e2el") or stat == "p99" else 1.0,
            min_requests=P99_MIN_REQUESTS if stat == "p99" else 0,
            unit="ms",
        )
        for m in ("ttft", "tpot", "itl", "e2el")
        for stat in ("mean", "median", "p99")
    ),  # fmt: skip
    MetricRule("request_throughput", HIGHER, 0.05, 0.0, unit="req/s", resolution="requests"),
    MetricRule("output_throughput", HIGHER, 0.05, 0.0, unit="tok/s", resolution="output_tokens"),
    MetricRule("total_token_throughput", HIGHER, 0.05, 0.0, unit="tok/s", resolution="total_tokens"),
    MetricRule("goodput.attainment", HIGHER, 0.0, 0.02, unit="frac", resolution="judged"),
    MetricRule("errors.rate", LOWER, 0.0, 0.01, unit="frac"),
)
_RULE_KEYS = ("max_regression", "direction", "floor", "k", "enabled", "min_requests")  # see _RULE_CHECKS
_TOP_KEYS = ("history", "min_history", "k", "metrics")
_METRIC_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.]{0,99}$")


@dataclass(frozen=True)
class Policy:
    """The rules of every metric, how many baselines to compare with and how many are needed."""

    rules: tuple[MetricRule, ...] = DEFAULT_RULES
    history: int = 5
    min_history: int = 1
    source: str = "defaults"

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Policy:
        """The policy in the YAML file ``path``; :class:`~perfkit.errors.ConfigError` ``file: key: problem``."""
        try:
            data = load_yaml(path)
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such policy file") from None
        return cls.from_mapping(data, source=str(path))

    @classmethod
    def from_mapping(cls, data: Any, *, source: str = "<policy>") -> Policy:
        """The policy ``data`` describes (defaults where it says nothing); errors name ``source`` and the key."""
        if data is None:
            return cls(source=source)
        if not isinstance(data, Mapping):
            raise ConfigError(f"{source}: expected a mapping with {', '.join(_TOP_KEYS)}")
        for key in data:
            if key not in _TOP_KEYS:
                raise ConfigError(f"{source}: {_key(key)}: unknown key (known: {', '.join(_TOP_KEYS)})")
        history = _int(data.get("history", 5), f"{source}: history", 1, 1000)
        min_history = _int(data.get("min_history", 1), f"{source}: min_history", 1, 1000)
        if min_history > history:
            raise ConfigError(f"{source}: min_history: {min_history} is more than history ({history})")
        k_all = _number(data["k"], f"{source}: k", 0, 100) if "k" in data else None
        metrics = data.get("metrics") or {}
        if not isinstance(metrics, Mapping):
            raise ConfigError(f"{source}: metrics: expected a mapping of metric name to its rule")
        rules = {r.metric: r if k_all is None else replace(r, k=k_all) for r in DEFAULT_RULES}
        for name, spec in metrics.items():
            where = f"{source}: metrics.{_key(name)}"
            if not isinstance(name, str) or not _METRIC_NAME.match(name):
                raise ConfigError(f"{where}: not a metric name (a result field such as p99_ttft_ms)")
            if not isinstance(spec, Mapping):
                raise ConfigError(f"{where}: expected a mapping with {', '.join(_RULE_KEYS)}")
            for key in spec:
                if key not in _RULE_KEYS:
                    raise ConfigError(f"{where}.{_key(key)}: unknown key (known: {', '.join(_RULE_KEYS)})")
            base = rules.get(name)
            if base is None:
                if "direction" not in spec:
                    raise ConfigError(
                        f"{where}: not gated by default; give its direction ({LOWER} or {HIGHER})"
                    )
                base = MetricRule(name, LOWER, 0.10, 0.0, k=3.0 if k_all is None else k_all)
            changes = {key: _RULE_CHECKS[key](spec[key], f"{where}.{key}") for key in spec}
            rules[name] = replace(base, **changes)
        return cls(rules=tuple(rules.values()), history=history, min_history=min_history, source=source)

    def with_history(self, n: int | None) -> Policy:
        """This policy comparing with the newest ``n`` baselines (``--history``)."""
        if n is None:
            return self
        n = _int(n, "--history", 1, 1000)
        if self.min_history > n:
            raise ConfigError(f"--history {n}: fewer than the policy's min_history ({self.min_history})")
        return replace(self, history=n)

    def as_dict(self) -> dict[str, Any]:
        rules = {r.metric: {k: getattr(r, k) for k in _RULE_KEYS} for r in self.rules}
        return {
            "source": self.source,
            "history": self.history,
            "min_history": self.min_history,
            "metrics": rules,
        }


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
    """Why a metric has no data: ``few requests``, ``no value`` or ``no history``."""


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
        return f"pass: {judged} metrics within their bands{better} {against}"

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


def metric_value(doc: Mapping[str, Any], metric: str) -> float | None:
    """The value of ``metric`` (a top-level field or a dotted path: ``goodput.attainment``,
    ``percentiles.ttft_ms.99.9``) in ``doc``; None when absent or null; ValueError when not a number."""
    if metric == "errors.rate":
        return _error_rate(doc)
    value: Any = doc
    parts = metric.split(".")
    while parts and isinstance(value, Mapping):  # the longest key first: "99.9" is one key
        keys = (".".join(parts[:i]) for i in range(len(parts), 0, -1))
        if (key := next((k for k in keys if k in value), None)) is None:
            return None
        value, parts = value[key], parts[key.count(".") + 1 :]
    if parts or value is None:
        return None
    number = finite(value)
    if number is None:
        raise ValueError(f"{metric} is {str(value)[:40]!r}, not a finite number")
    return number


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
) -> Verdict:
    """Judge ``result`` against the comparable baselines among ``history`` (newest ``policy.history``).

    ``labels`` are the result's labels over its ``meta.labels`` (``hardware`` decides comparability).
    """
    policy = policy or Policy()
    own = {**effective_labels(result), **(labels or {})}
    verdict = Verdict(overall="pass", policy=policy.as_dict(), result=_describe_result(result, own))
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
        verdict.reasons.append(_nearest(result, candidates, own))
    elif len(comparable) < policy.min_history:
        verdict.reasons.append(
            f"{len(comparable)} comparable baseline{'s' if len(comparable) != 1 else ''}, "
            f"the policy needs {policy.min_history} (min_history)"
        )
    if verdict.reasons:
        verdict.overall = "unusable"
        return verdict

    for rule in policy.rules:
        if rule.enabled:
            row = _judge_metric(rule, result, chosen, verdict)
            if row is not None:
                verdict.rows.append(row)
    verdict.rows.sort(key=lambda r: STATUS_ORDER[r.status])
    if few := [r.metric for r in verdict.rows if r.why == "few requests"]:
        verdict.notes.append(
            f"not judged: {', '.join(few)}: {result.get('completed')} completed requests are too few for a "
            "tail percentile (the policy's min_requests; a p99 needs 1,000)"
        )
    if verdict.reasons:
        verdict.overall = "unusable"
    elif verdict.regressed:
        verdict.overall = "regress"
    elif all(r.status == "no-data" for r in verdict.rows):
        verdict.overall = "unusable"
        verdict.reasons.append("no metric has both a new value and a history to compare with")
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
    """Read the result at ``result_path`` and judge it against the baselines of ``store``.

    Unreadable store files are skipped (each through ``warn``, and listed in the verdict's warnings).
    Raises :class:`~perfkit.errors.PerfkitError` for an unreadable result or store folder.
    """
    result = read_result_input(result_path, index)
    skipped: list[str] = []
    baselines = iter_store(store, warn=skipped.append)
    if warn is not None:
        for message in skipped:
            warn(message)
    verdict = judge(result, baselines, policy, allow_invalid=allow_invalid, labels=labels)
    verdict.result["file"] = Path(result_path).name
    verdict.warnings[:0] = skipped
    return verdict


# --------------------------------------------------------------------------------------------------


def _judge_metric(
    rule: MetricRule, result: Mapping[str, Any], chosen: list[Baseline], verdict: Verdict
) -> Row | None:
    try:
        new = metric_value(result, rule.metric)
    except ValueError as exc:
        verdict.reasons.append(f"the result's {exc}")
        return None
    if (finite(result.get("completed")) or 0) < rule.min_requests:
        return Row(rule.metric, rule.direction, rule.unit, "no-data", new, why="few requests")
    values = []
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
            values.append(value)
    if new is None or not values:
        why = "no value" if new is None else "no history"
        return Row(rule.metric, rule.direction, rule.unit, "no-data", new, n=len(values), why=why)
    median = statistics.median(values)
    spread = MAD_TO_SIGMA * statistics.median(abs(v - median) for v in values)
    terms = {
        "relative": rule.max_regression * abs(median),
        "spread": rule.k * spread,
        "floor": rule.floor,
        "resolution": _resolution(rule.resolution, result),
    }
    band_from = max(terms, key=lambda t: terms[t])
    band = terms[band_from]
    sign = 1.0 if rule.direction == LOWER else -1.0
    worse = sign * (new - median)
    status = "regressed" if worse > band else "improved" if -worse > band else "pass"
    change = (new - median) / abs(median) * 100 if median else None
    return Row(
        rule.metric, rule.direction, rule.unit, status, new, median, spread, band, band_from,
        median + sign * band, change, len(values),
    )  # fmt: skip


def _resolution(kind: str | None, doc: Mapping[str, Any]) -> float:
    """The counting step of a throughput (two requests over the window) or of attainment (two requests)."""
    if kind is None:
        return 0.0
    if kind == "judged":
        judged = finite(_dict(doc.get("goodput")).get("judged"))
        return 2.0 / judged if judged else 0.0
    duration, completed = finite(doc.get("duration")), finite(doc.get("completed"))
    if not duration or not completed:
        return 0.0
    per_request = 1.0
    if kind in ("output_tokens", "total_tokens"):
        tokens = finite(doc.get("total_output_tokens")) or 0.0
        if kind == "total_tokens":
            tokens += finite(doc.get("total_input_tokens")) or 0.0
        per_request = tokens / completed
    return 2.0 * per_request / duration


def _error_rate(doc: Mapping[str, Any]) -> float | None:
    rate = _dict(doc.get("errors")).get("rate")
    if rate is not None:
        number = finite(rate)
        if number is None or not 0 <= number <= 1:
            raise ValueError(f"errors.rate is {str(rate)[:40]!r}, not a fraction")
        return number
    completed, failed = finite(doc.get("completed")), finite(doc.get("failed"))
    if completed is None or failed is None or completed + failed <= 0:
        return None
    return failed / (completed + failed)


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


def _nearest(result: Mapping[str, Any], candidates: list[Baseline], labels: Mapping[str, str]) -> str:
    """Why nothing is comparable, told by the baselines that differ least from the result."""
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


def _int(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{where}: expected a whole number from {low} to {high}, found {_key(value)!r}")
    return value


def _number(value: Any, where: str, low: float, high: float) -> float:
    number = finite(value)
    if number is None or not low <= number <= high:
        raise ConfigError(f"{where}: expected a number from {low:g} to {high:g}, found {_key(value)!r}")
    return number


def _direction(value: Any, where: str) -> str:
    if value not in (LOWER, HIGHER):
        raise ConfigError(f"{where}: expected {LOWER} or {HIGHER}, found {_key(value)!r}")
    return str(value)


def _bool(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: expected true or false, found {_key(value)!r}")
    return value


def _fraction(value: Any, where: str) -> float:
    """``0.1`` or ``"10%"`` as 0.1 (a relative regression: 0 to 10, i.e. up to 1000 %)."""
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            number = float(value.strip()[:-1])
        except ValueError:
            raise ConfigError(
                f"{where}: expected a fraction (0.1) or a percentage ('10%'), found {_key(value)!r}"
            ) from None
        return _number(number / 100, where, 0, 10)
    return _number(value, where, 0, 10)


_RULE_CHECKS: dict[str, Callable[[Any, str], Any]] = {
    "direction": _direction,
    "max_regression": _fraction,
    "floor": lambda value, where: _number(value, where, 0, 1e12),
    "k": lambda value, where: _number(value, where, 0, 100),
    "enabled": _bool,
    "min_requests": lambda value, where: _int(value, where, 0, 10**9),
}
