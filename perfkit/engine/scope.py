"""Narrow the evidence to one workload (:mod:`perfkit.core.scope` says which series are kept).

Two ways, one rule:

* :func:`scope_store`: a bundle's samples, filtered once after reading (every distinct label set
  is judged once, then a polars semi-join keeps its samples);
* :class:`ScopedEngine`: a live engine whose every selector gets the scope pushed into PromQL
  (workload families get the matchers; GPU/host families an ``instance=~"..."`` (or host label)
  matcher listing the series on the workload's hosts, found with one query per family).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import polars as pl
import re2

from perfkit.core.frames import MetricStore, Window, select_series
from perfkit.core.scope import HOST_LABELS, Matcher, Scope, ScopeReport, family_rule, host_keys
from perfkit.engine import ops
from perfkit.errors import ConfigError

_NOTHING = (Matcher("instance", "=", "perfkit-scope-matches-no-host"),)


class ScopeMatchesNothing(ConfigError):
    """The scope selects no series of the evidence (a typo, or another fleet's labels)."""


def _labels(frame: pl.DataFrame) -> list[str]:
    return [c for c in frame.columns if c not in ("ts", "value")]


def scope_store(store: MetricStore, scope: Scope) -> tuple[MetricStore, ScopeReport]:
    """The samples of ``scope``'s workload and of the GPUs and hosts it runs on.

    Raises :class:`ScopeMatchesNothing` when the matchers keep no workload series.
    """
    report = ScopeReport(scope)
    rules = {name: family_rule(name, _labels(f), scope) for name, f in store.frames.items() if f.height}
    frames: dict[str, pl.DataFrame] = {}
    hosts: set[str] = set()
    kept_m = seen_m = 0

    def matched(labels: dict[str, object]) -> bool:
        if scope.matches(labels):
            hosts.update(host_keys(labels))
            return True
        return False

    for name, rule in rules.items():
        if rule != "match":
            continue
        frame, kept, seen = select_series(store.frames[name], matched)
        kept_m, seen_m = kept_m + kept, seen_m + seen
        if kept:
            frames[name] = frame
        else:
            report.families_dropped.append(name)
    if scope.matchers and not kept_m:
        raise ScopeMatchesNothing(
            f"scope {scope.promql()} matches no series ({seen_m} workload series carry its labels)"
        )
    wanted = set(scope.hosts) if scope.hosts is not None else hosts
    if not wanted:  # the workload's series name no host (an exporter scraped without target labels)
        report.notes.append(
            "the workload's series carry no instance or host label, so GPU and host series are not "
            "narrowed; give the hosts (--hosts) to narrow them"
        )
        report.matched = (kept_m, seen_m)
        joined = sum(
            store.frames[n].select(_labels(store.frames[n])).n_unique()
            for n, r in rules.items()
            if r == "host"
        )
        report.joined = (joined, joined)
        return MetricStore(
            {**{n: store.frames[n] for n, r in rules.items() if r == "host"}, **frames}, dict(store.types)
        ), report
    kept_j = seen_j = 0

    def on_hosts(labels: dict[str, object]) -> bool:
        keys = host_keys(labels)
        if not keys:  # no host label: cannot be joined, kept and counted
            report.unjoined += 1
        return not keys or bool(keys & wanted)

    for name, rule in rules.items():
        if rule != "host":
            continue
        if not _labels(store.frames[name]):
            report.unjoined += 1
            frames[name] = store.frames[name]
            continue
        frame, kept, seen = select_series(store.frames[name], on_hosts)
        kept_j, seen_j = kept_j + kept, seen_j + seen
        if kept:
            frames[name] = frame
        else:
            report.families_dropped.append(name)
    report.hosts = sorted(wanted)
    report.matched = (kept_m, seen_m)
    report.joined = (kept_j, seen_j)
    return MetricStore(frames, dict(store.types)), report


@dataclass
class _Family:
    rule: str
    host_matcher: Matcher | None = None  # for "host" families: the series on the workload's hosts
    empty: bool = False  # no series of the family is on the workload's hosts


class ScopedEngine:
    """A live engine (Prometheus, VictoriaMetrics) whose queries carry the scope.

    The hosts of the workload come from its series in ``span`` (or ``scope.hosts``); each family's
    rule is found with one query the first time the family is used."""

    def __init__(self, engine: Any, scope: Scope, span: Window) -> None:
        self.inner = engine
        self.scope = scope
        self.span = span
        self.name = engine.name
        self._families: dict[str, _Family] = {}
        self._hosts: set[str] | None = set(scope.hosts) if scope.hosts is not None else None
        self.report = ScopeReport(scope)

    def __getattr__(self, item: str) -> Any:  # queries, dialect, client, metric_names ... of the inner engine
        return getattr(self.inner, item)

    def has(self, metric: str) -> bool:
        if not self.inner.has(metric):
            return False
        return not self._family(metric).empty

    def range(self, expr: ops.Expr, start: datetime, end: datetime, step_s: float) -> pl.DataFrame:
        frame: pl.DataFrame = self.inner.range(self._rewrite(expr), start, end, step_s)
        return frame

    def instant(self, expr: ops.Expr, at: datetime) -> pl.DataFrame:
        frame: pl.DataFrame = self.inner.instant(self._rewrite(expr), at)
        return frame

    def raw(self, metric: str, start: datetime, end: datetime, **kw: Any) -> pl.DataFrame:
        """The stored samples of ``metric`` in scope (what ``perfkit capture --scope`` writes)."""
        sel = ops.Selector(metric).narrowed(*_NOTHING) if self._family(metric).empty else None
        frame: pl.DataFrame = self.inner.raw(
            metric, start, end, selector=sel or self._rewrite(ops.Selector(metric)), **kw
        )
        return frame

    # -- rewriting ----------------------------------------------------------------------------

    def _rewrite(self, expr: ops.Expr) -> ops.Expr:
        if isinstance(expr, ops.Selector):
            family = self._family(expr.metric)
            if family.rule == "match":
                return expr.narrowed(*self.scope.matchers)
            return expr.narrowed(family.host_matcher) if family.host_matcher else expr
        if isinstance(expr, ops.RangeFunction):
            return replace(expr, selector=self._rewrite(expr.selector))  # type: ignore[arg-type]
        if isinstance(expr, ops.Aggregate | ops.HistogramQuantile):
            return replace(expr, expr=self._rewrite(expr.expr))
        if isinstance(expr, ops.Binary):
            return replace(expr, lhs=self._rewrite(expr.lhs), rhs=self._rewrite(expr.rhs))
        return expr

    def _series(self, selector: ops.Selector, by: tuple[str, ...]) -> pl.DataFrame:
        last = ops.over_time("last", selector, self.span.seconds)
        frame: pl.DataFrame = self.inner.instant(ops.aggregate("count", last, *by), self.span.end)
        return frame

    def _family(self, metric: str) -> _Family:
        known = self._families.get(metric)
        if known is not None:
            return known
        rule = "host"
        if self.scope.matchers and family_rule(metric, self.scope.labels, self.scope) == "match":
            carried = self._series(ops.Selector(metric).narrowed(*self.scope.matchers), ())
            rule = "match" if carried.height else "host"
        family = _Family(rule)
        if rule == "host":
            family.host_matcher = self._host_matcher(metric)
            family.empty = family.host_matcher is not None and family.host_matcher.op == "="
        self._families[metric] = family
        return family

    def hosts(self) -> set[str]:
        """The workload's hosts: from ``--hosts``, else from the scoped series of its families."""
        if self._hosts is None:
            from perfkit.engine.signals import COUNTERS, GAUGES, HISTOGRAMS

            hosts: set[str] = set()
            from perfkit.engine.dialects import family

            names = [family(n) for names in (*GAUGES.values(), *COUNTERS.values()) for n in names]
            names += [f"{family(base)}_count" for bases in HISTOGRAMS.values() for base in bases]
            for name in names:
                if family_rule(name, self.scope.labels, self.scope) != "match" or not self.inner.has(name):
                    continue
                sel = ops.Selector(name).narrowed(*self.scope.matchers)
                for row in self._series(sel, ("instance", *HOST_LABELS)).iter_rows(named=True):
                    hosts |= host_keys(row)
            if self.scope.matchers and not hosts:
                raise ScopeMatchesNothing(f"scope {self.scope.promql()} matches no series on the server")
            self._hosts = hosts
            self.report.hosts = sorted(hosts)
        return self._hosts

    def _host_matcher(self, metric: str) -> Matcher | None:
        """``instance=~"a:9400|b:9400"`` (or a host label) for the series of ``metric`` on the
        workload's hosts; None when every series is (or no series can be joined)."""
        wanted = self.hosts()
        if not wanted and self.scope.hosts is None:
            return None
        rows = list(self._series(ops.Selector(metric), ("instance", *HOST_LABELS)).iter_rows(named=True))
        kept = [r for r in rows if host_keys(r) & wanted]
        if len(kept) == len(rows):
            return None
        for label in ("instance", *HOST_LABELS):
            if kept and all(r.get(label) for r in kept):
                values = sorted({str(r[label]) for r in kept})
                return Matcher(label, "=~", "|".join(re2.escape(v) for v in values))
        return _NOTHING[0]
