"""The release gate's policy: how each metric is judged, and how many baselines it is judged against.

:class:`Policy` holds one :class:`MetricRule` per metric (:data:`DEFAULT_RULES` unless a policy file
says otherwise) and the history's size; :meth:`Policy.from_file` reads a policy YAML, refusing an
unknown key or a value out of range in one line naming the file and the key
(:mod:`perfkit.loadgen.gate` explains the band each rule sets)::

    history: 5            # compare with the newest N comparable baselines
    min_history: 1        # fewer comparable baselines: unusable
    k: 3                  # the noise multiplier of every metric (each may set its own)
    metrics:
      p99_ttft_ms: {max_regression: 15%, floor: 5, min_requests: 2000}
      errors.rate: {enabled: false}
      max_output_tokens_per_s: {direction: higher_is_better, max_regression: 0.05}
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from perfkit.errors import ConfigError
from perfkit.loadgen.store import finite
from perfkit.sources.safeyaml import load_yaml

LOWER = "lower_is_better"
HIGHER = "higher_is_better"


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
    """Completed requests the new result needs (a policy's; a percentile's interval needs its own)."""
    unit: str = ""
    resolution: str | None = None
    """``requests``, ``output_tokens``, ``total_tokens`` (throughputs) or ``judged`` (attainment)."""


DEFAULT_RULES: tuple[MetricRule, ...] = (
    *(
        MetricRule(
            f"{stat}_{m}_ms",
            LOWER,
            0.10,
            2.0 if m in ("ttft", "e2el") or stat == "p99" else 1.0,
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


def _key(key: Any) -> str:
    return "none" if key is None else str(key)[:60]


def _int(value: Any, where: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ConfigError(f"{where}: expected a whole number from {low} to {high}, found {_key(value)!r}")
    return value


def _number(value: Any, where: str, low: float, high: float) -> float:
    number = finite(value)
    if number is None or not low <= number <= high:
        raise ConfigError(f"{where}: expected a number from {low:g} to {high:g}, found {_key(value)!r}")
    return number


def _one_of(choices: tuple[Any, ...], said: str) -> Callable[[Any, str], Any]:
    def check(value: Any, where: str) -> Any:
        if isinstance(value, bool) is not isinstance(choices[0], bool) or value not in choices:
            raise ConfigError(f"{where}: expected {said}, found {_key(value)!r}")
        return value

    return check


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
    "direction": _one_of((LOWER, HIGHER), f"{LOWER} or {HIGHER}"),
    "max_regression": _fraction,
    "floor": lambda value, where: _number(value, where, 0, 1e12),
    "k": lambda value, where: _number(value, where, 0, 100),
    "enabled": _one_of((True, False), "true or false"),
    "min_requests": lambda value, where: _int(value, where, 0, 10**9),
}
