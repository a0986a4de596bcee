"""The metric operations analyses need, defined once.

An expression tree of small frozen dataclasses. Two engines evaluate it: the local engine
(:mod:`perfkit.engine.local`, polars/numpy over a bundle's samples) and, through
:func:`perfkit.engine.promql.to_promql`, any Prometheus-compatible server. Semantics are
Prometheus 2.x's: ``rate``/``increase`` extrapolate and correct counter resets,
``histogram_quantile`` interpolates linearly inside the bucket, instant selectors look back 5 min.

>>> from perfkit.engine.ops import Selector, rate, sum_by, histogram_quantile
>>> q = histogram_quantile(0.95, sum_by(rate(Selector("vllm:time_to_first_token_seconds_bucket"), 60), "le"))
"""

from __future__ import annotations

from dataclasses import dataclass

from perfkit.core.scope import Matcher

LOOKBACK_S = 300.0  # Prometheus' default lookback delta for instant selectors

RANGE_FUNCTIONS = (
    "rate",
    "increase",
    "avg_over_time",
    "max_over_time",
    "min_over_time",
    "sum_over_time",
    "count_over_time",
    "last_over_time",
)
AGGREGATIONS = ("sum", "avg", "max", "min", "count")
BINARY_OPS = ("+", "-", "*", "/")


@dataclass(frozen=True)
class Selector:
    """An instant vector selector: ``metric{label="value", ...}``: equality ``matchers``, plus the
    ``scoped`` matchers (any of ``= != =~ !~``) a workload scope adds (:mod:`perfkit.core.scope`)."""

    metric: str
    matchers: tuple[tuple[str, str], ...] = ()
    scoped: tuple[Matcher, ...] = ()

    def where(self, **labels: str) -> Selector:
        return Selector(self.metric, tuple(sorted({**dict(self.matchers), **labels}.items())), self.scoped)

    def narrowed(self, *matchers: Matcher) -> Selector:
        """This selector with scope matchers added."""
        return Selector(self.metric, self.matchers, (*self.scoped, *matchers))


@dataclass(frozen=True)
class RangeFunction:
    """``fn(selector[window])`` evaluated at each step."""

    fn: str
    selector: Selector
    window_s: float


@dataclass(frozen=True)
class Aggregate:
    """``op by (labels) (expr)``."""

    op: str
    expr: Expr
    by: tuple[str, ...] = ()


@dataclass(frozen=True)
class HistogramQuantile:
    """``histogram_quantile(q, expr)``; ``expr`` must keep the ``le`` label."""

    q: float
    expr: Expr


@dataclass(frozen=True)
class Binary:
    """``lhs op rhs`` with one-to-one matching on identical label sets."""

    op: str
    lhs: Expr
    rhs: Expr


Expr = Selector | RangeFunction | Aggregate | HistogramQuantile | Binary


def rate(selector: Selector, window_s: float) -> RangeFunction:
    return RangeFunction("rate", selector, window_s)


def increase(selector: Selector, window_s: float) -> RangeFunction:
    return RangeFunction("increase", selector, window_s)


def over_time(fn: str, selector: Selector, window_s: float) -> RangeFunction:
    return RangeFunction(f"{fn}_over_time", selector, window_s)


def sum_by(expr: Expr, *labels: str) -> Aggregate:
    return Aggregate("sum", expr, tuple(labels))


def aggregate(op: str, expr: Expr, *labels: str) -> Aggregate:
    return Aggregate(op, expr, tuple(labels))


def histogram_quantile(q: float, expr: Expr) -> HistogramQuantile:
    return HistogramQuantile(q, expr)


def ratio(lhs: Expr, rhs: Expr) -> Binary:
    return Binary("/", lhs, rhs)


def validate(expr: Expr) -> None:
    """Raise QueryError for an expression no engine should try."""
    from perfkit.errors import QueryError

    if isinstance(expr, RangeFunction):
        if expr.fn not in RANGE_FUNCTIONS:
            raise QueryError(f"unknown range function {expr.fn!r}")
        if not expr.window_s > 0:
            raise QueryError(f"range window must be positive, got {expr.window_s}")
    elif isinstance(expr, Aggregate):
        if expr.op not in AGGREGATIONS:
            raise QueryError(f"unknown aggregation {expr.op!r}")
        validate(expr.expr)
    elif isinstance(expr, HistogramQuantile):
        validate(expr.expr)
    elif isinstance(expr, Binary):
        if expr.op not in BINARY_OPS:
            raise QueryError(f"unknown operator {expr.op!r}")
        validate(expr.lhs)
        validate(expr.rhs)
