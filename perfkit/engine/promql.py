"""Translate :mod:`perfkit.engine.ops` expressions to PromQL text.

Used to record the query behind every number (provenance) and by the Prometheus backend,
which lets the server aggregate.

>>> from perfkit.engine.ops import Selector, rate, sum_by, histogram_quantile
>>> to_promql(histogram_quantile(0.95, sum_by(rate(Selector("x_bucket"), 60), "le")))
'histogram_quantile(0.95, sum by (le) (rate(x_bucket[1m])))'
"""

from __future__ import annotations

from perfkit.engine.ops import Aggregate, Binary, Expr, HistogramQuantile, RangeFunction, Selector, validate
from perfkit.errors import QueryError


def duration(seconds: float) -> str:
    """PromQL duration literal: 60 → '1m', 90 → '90s', 3600 → '1h', 1.5 → '1500ms'."""
    ms = round(seconds * 1000)
    if ms % 1000:
        return f"{ms}ms"  # the local engine keeps milliseconds; so must the query text
    s = ms // 1000
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size and s % size == 0:
            return f"{s // size}{unit}"
    return f"{s}s"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def selector(sel: Selector) -> str:
    if not sel.matchers and not sel.scoped:
        return sel.metric
    inner = ",".join([*(f'{k}="{_escape(v)}"' for k, v in sel.matchers), *(m.promql() for m in sel.scoped)])
    return f"{sel.metric}{{{inner}}}"


#: Functions renamed per engine so the server computes Prometheus' semantics. VictoriaMetrics'
#: ``increase`` also counts the step from the sample just before the window (one scrape more than
#: Prometheus); its ``increase_prometheus`` does not, which keeps window quantiles equal.
DIALECTS: dict[str, dict[str, str]] = {
    "prometheus": {},
    "victoriametrics": {"increase": "increase_prometheus"},
}


def to_promql(expr: Expr, dialect: str = "prometheus") -> str:
    """PromQL text for ``expr``; ``dialect`` picks function names for engines that extend PromQL."""
    validate(expr)
    return _text(expr, DIALECTS[dialect])


def _text(expr: Expr, names: dict[str, str]) -> str:
    if isinstance(expr, Selector):
        return selector(expr)
    if isinstance(expr, RangeFunction):
        return f"{names.get(expr.fn, expr.fn)}({selector(expr.selector)}[{duration(expr.window_s)}])"
    if isinstance(expr, Aggregate):
        by = f" by ({', '.join(expr.by)})" if expr.by else ""
        return f"{expr.op}{by} ({_text(expr.expr, names)})"
    if isinstance(expr, HistogramQuantile):
        q = repr(float(expr.q))  # shortest text that round-trips (':g' would cut to 6 digits)
        return f"histogram_quantile({q.removesuffix('.0')}, {_text(expr.expr, names)})"
    if isinstance(expr, Binary):
        return f"({_text(expr.lhs, names)}) {expr.op} ({_text(expr.rhs, names)})"
    raise QueryError(f"not an expression: {expr!r}")
