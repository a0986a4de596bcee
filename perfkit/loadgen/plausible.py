"""What a load-test result can physically hold: a document outside these bounds is no measurement.

The baseline store is plain files in a repository anyone with write access can change, and a result
file comes from another tool or another machine. JSON-level hostility (NaN, 400-digit integers,
nesting, size) is refused by :mod:`perfkit.sources.safejson` and the schema by
:func:`perfkit.loadgen.result.check`; what is left is a well-formed number that no run can produce: a
negative latency, a latency longer than any run, a throughput no network carries, a share above 1,
a start in the future. One such baseline moves the history's median: a latency of -1e9 ms made an
unchanged run "regress" (exit 1), a TTFT of 5e-324 ms made its change a percentage beyond a float's
range and the verdict unwritable (exit 2, every deploy blocked).

:func:`implausible` names the first such value (and how many more there are), or returns None. Each
bound below is set far outside what a real run produces, with the physical reason beside it: it
rejects only what cannot be a measurement, never a slow or a fast run.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

MAX_RUN_S = 7 * 86_400.0
"""The longest run a result may describe: a week. ``perfkit bench`` stops sending after at most a day
(``--duration`` and ``--timeout`` are capped at 86,400 s) and another tool's run over a whole data set
lasts hours; no request outlives its run, so no latency is longer either. A week is a unit slip
(nanoseconds written as milliseconds) or a poisoned file, not a slow server."""
MAX_LATENCY_MS = MAX_RUN_S * 1000.0
MIN_NONZERO_MS = 1e-9
"""A picosecond, in ms. Request latencies are differences of clock readings that tick in nanoseconds
(``time.perf_counter``), and nothing a GPU does takes less than a clock cycle (about 0.5 ns): a
non-zero latency, or a share of one gap spread over the tokens of one chunk, a thousand times below a
tick is no measurement. Zero stays allowed: tools write 0 for "none" (vLLM's TPOT of one-token outputs)."""
MIN_NONZERO_S = MIN_NONZERO_MS / 1000.0
MAX_REQUESTS_PER_S = 1e9
"""Requests a second one client can see completed. Each is at least an HTTP request and a response of
a few hundred bytes; the fastest link a client has, 400 Gb/s (50 GB/s), carries some 10^8 of them a
second. Ten times that is no load test."""
MAX_TOKENS_PER_S = 1e11
"""Tokens a second (output or prompt) one client can send or receive: each is at least a byte of text
on the wire, and 400 Gb/s is 5 x 10^10 bytes a second. Twice that is no load test."""
MIN_NONZERO_RATE = 1.0 / MAX_RUN_S
"""The slowest non-zero rate: one request (or token) over the longest run."""
MAX_CLOCK_SKEW = timedelta(days=1)
"""How far in the future a start time may lie: clocks of the machine that ran the test and of the one
that judges it differ by seconds, a wrong time zone by hours; a start later than a day from now is a
file written to stay "newest" in the history forever."""

METRICS = ("ttft", "tpot", "itl", "e2el")
LATENCIES = tuple(f"{s}_{m}_ms" for m in METRICS for s in ("mean", "median", "std", "p99"))
REQUEST_RATES = ("request_throughput", "request_goodput")
TOKEN_RATES = ("output_throughput", "total_token_throughput", "max_output_tokens_per_s")
LOAD_NUMBERS = ("concurrency", "rate", "burstiness", "prompt_tokens", "output_tokens")
LOAD_TEXTS = ("shape", "arrival", "endpoint")
_SHOWN = 3  # problems named in the message before "and N more"


def implausible(doc: Mapping[str, Any], *, now: datetime | None = None) -> str | None:
    """Why ``doc`` (a ``perfkit.bench/1`` document) cannot be a measurement, in one line; None when
    every value it holds is within the bounds above. ``now``: the time a start is judged against."""
    found: list[str] = []
    extra = 0
    for problem in _problems(doc, now or datetime.now(UTC)):
        if len(found) < _SHOWN:
            found.append(problem)
        else:
            extra += 1
    if not found:
        return None
    return "; ".join(found) + (f" (and {extra} more)" if extra else "")


def _problems(doc: Mapping[str, Any], now: datetime) -> Iterator[str]:
    for key in LATENCIES:
        yield from _latency(key, doc.get(key))
    pct = doc.get("percentiles")
    if isinstance(pct, Mapping):
        for metric, by_q in pct.items():
            if str(metric).endswith("_ms") and isinstance(by_q, Mapping):
                for q, value in by_q.items():
                    yield from _latency(f"percentiles.{_name(metric)}.{_name(q)}", value)
    yield from _bounded(
        "duration",
        doc.get("duration"),
        "s",
        (MIN_NONZERO_S, _TICK),
        (MAX_RUN_S, "longer than a week, no load test runs that long"),
    )
    for key in REQUEST_RATES:
        yield from _rate(key, doc.get(key), "req/s", MAX_REQUESTS_PER_S)
    for key in TOKEN_RATES:
        yield from _rate(key, doc.get(key), "tok/s", MAX_TOKENS_PER_S)
    for key in ("completed", "failed"):
        yield from _count(key, doc.get(key), MAX_REQUESTS_PER_S * MAX_RUN_S)
    for key in ("total_input_tokens", "total_output_tokens"):
        yield from _count(key, doc.get(key), MAX_TOKENS_PER_S * MAX_RUN_S)
    yield from _fraction("errors.rate", _obj(doc.get("errors")).get("rate"))
    yield from _goodput(doc.get("goodput"))
    yield from _meta(doc.get("meta"), now)
    block = doc.get("baseline")
    if isinstance(block, Mapping):
        yield from _when("baseline.added", block.get("added"), now)
    load = doc.get("load")
    if isinstance(load, Mapping):
        for key in LOAD_NUMBERS:
            yield from _bounded(f"load.{key}", load.get(key), "", (0.0, ""), (math.inf, ""))
        for key in LOAD_TEXTS:
            yield from _text(f"load.{key}", load.get(key))


_TICK = "below a tick of any clock that times a request"


def _latency(where: str, value: Any) -> Iterator[str]:
    yield from _bounded(where, value, "ms", (MIN_NONZERO_MS, _TICK), (MAX_LATENCY_MS, "longer than a week, and no request outlives its run"))  # fmt: skip


def _rate(where: str, value: Any, unit: str, high: float) -> Iterator[str]:
    low = (MIN_NONZERO_RATE, "less than one in a week-long run")
    yield from _bounded(where, value, unit, low, (high, "more than a 400 Gb/s link carries"))


def _bounded(
    where: str, value: Any, unit: str, low: tuple[float, str], high: tuple[float, str]
) -> Iterator[str]:
    """A number or null; when a number: finite, not negative, 0 or at least ``low``, at most ``high``
    (each bound with the reason a value beyond it is no measurement)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        yield f"{where} is {_type(value)}, not a number"
        return
    number = float(value)
    unit = f" {unit}" if unit else ""
    shown = f"{where} is {number:.6g}{unit}"
    if not math.isfinite(number):
        yield f"{shown}, not a finite number"
    elif number < 0:
        yield f"{shown}: it cannot be negative"
    elif 0 < number < low[0]:
        yield f"{shown}, under {low[0]:.3g}{unit}: {low[1]}"
    elif number > high[0]:
        yield f"{shown}, over {high[0]:.3g}{unit}: {high[1]}"


def _count(where: str, value: Any, high: float) -> Iterator[str]:
    if value is None:
        return
    whole = isinstance(value, int) or (
        isinstance(value, float) and math.isfinite(value) and value.is_integer()
    )
    if isinstance(value, bool) or not whole:
        yield f"{where} is {_shown(value)}, not a whole number"
        return
    yield from _bounded(where, value, "", (0.0, ""), (high, "more than a week-long run could count"))


def _fraction(where: str, value: Any) -> Iterator[str]:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0.0 <= value <= 1.0:
        yield f"{where} is {_shown(value)}, not a share from 0 to 1"


def _goodput(goodput: Any) -> Iterator[str]:
    if goodput is None:
        return
    if not isinstance(goodput, Mapping):
        yield f"goodput is {_type(goodput)}, not an object or null"
        return
    yield from _fraction("goodput.attainment", goodput.get("attainment"))
    for key in ("judged", "met"):
        yield from _count(f"goodput.{key}", goodput.get(key), MAX_REQUESTS_PER_S * MAX_RUN_S)
    yield from _rate("goodput.requests_per_s", goodput.get("requests_per_s"), "req/s", MAX_REQUESTS_PER_S)
    slo = goodput.get("slo_ms")
    if slo is not None and not isinstance(slo, Mapping):
        yield f"goodput.slo_ms is {_type(slo)}, not an object"
    elif isinstance(slo, Mapping):
        for key, value in slo.items():
            yield from _latency(f"goodput.slo_ms.{_name(key)}", value)


def _meta(meta: Any, now: datetime) -> Iterator[str]:
    if not isinstance(meta, Mapping):
        return  # the schema check requires the object
    yield from _text("meta.model", meta.get("model"))
    labels = meta.get("labels")
    if labels is not None and not isinstance(labels, Mapping):
        yield f"meta.labels is {_type(labels)}, not an object"
    yield from _when("meta.started", meta.get("started"), now)


def _when(where: str, value: Any, now: datetime) -> Iterator[str]:
    """A time as text (or null) that is not in the future (beyond :data:`MAX_CLOCK_SKEW`)."""
    if value is None:
        return
    if not isinstance(value, str):
        yield f"{where} is {_type(value)}, not a time as text"
        return
    text = value.strip()
    try:
        when = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith("Z") else text) if len(text) <= 64 else None  # fmt: skip
    except ValueError:
        when = None
    if when is None:
        return  # not a time perfkit reads: it orders nothing, and the file says what it says
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    if when > now + MAX_CLOCK_SKEW:
        yield f"{where} {_shown(text)} is in the future: no run has started yet then"


def _text(where: str, value: Any) -> Iterator[str]:
    if value is not None and not isinstance(value, str):
        yield f"{where} is {_type(value)}, not text"


def _type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "text", bool: "true or false", int: "a number", float: "a number"}  # fmt: skip
    return names.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    text = f"{value:.6g}" if isinstance(value, float) else str(value)
    text = " ".join(text.split())
    return repr(text[:40] + "..." if len(text) > 40 else text) if isinstance(value, str) else text[:40]


def _name(key: Any) -> str:
    text = " ".join(str(key).split())
    return text if len(text) <= 40 else text[:37] + "..."


def _obj(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
