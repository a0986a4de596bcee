"""Load shapes for ``perfkit bench``: when each request is sent and how long it is.

A :class:`Plan` holds one row per request: ``at_s`` (seconds from the run's start, non-decreasing),
``prompt_tokens`` and ``output_tokens``. The client sends request *i* at ``at_s[i]`` (closed loop:
when one of ``concurrency`` slots is free) and asks for ``output_tokens[i]`` tokens.

* :func:`concurrency_plan`: closed loop, N requests in flight at all times (``at_s`` all zero).
* :func:`rate_plan`: open loop at ``rate`` requests/s. ``poisson``: exponential gaps; ``gamma``:
  gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)), as ``vllm bench serve --burstiness``
  (``vllm/benchmarks/serve.py``, ``get_request``): mean gap 1/rate, coefficient of variation
  1/sqrt(burstiness), so below 1 is burstier than Poisson, above 1 more even; ``constant``: gaps
  of exactly 1/rate. As in vLLM, the gaps are rescaled so the last request is due at (N-1)/rate:
  the offered rate is exactly ``rate`` (for Poisson, the process conditioned on its count).
* :func:`burst_plan`: every request at t=0 (vLLM's ``--request-rate inf``); :func:`with_duration`: before a time.
* :func:`replay_log`: a request log, ``.jsonl``/``.ndjson``/``.json`` (a JSON object a line) or
  ``.csv`` (a header row, names matched case-insensitively with spaces as ``_``; a request a line):

  - time: ``arrival_s`` (seconds from any origin), or ``timestamp``: ISO 8601 text (no zone: UTC)
    or a number whose unit the *first row's* magnitude decides: >= 1e11 epoch milliseconds,
    >= 1e8 epoch seconds (both are March 1973), smaller: milliseconds since the trace's start, the
    Mooncake trace format (kvcache-ai/Mooncake ``mooncake_trace.jsonl``, as ai-dynamo/dynamo
    ``benchmarks/data_generator/README.md`` describes it);
  - ``prompt_tokens`` (or ``input_tokens``, ``input_length``, ``prompt_len``) and
    ``output_tokens`` (or ``completion_tokens``, ``output_length``, ``output_len``).

  Other columns (``hash_ids``, a prompt) are ignored. Arrivals are made relative to the earliest,
  sorted and divided by ``time_scale`` (2: twice as fast). A broken line (not JSON, a missing
  column, a negative, fractional or non-numeric value, a prompt over :data:`MAX_PROMPT_TOKENS` or an
  output over :data:`MAX_OUTPUT_TOKENS`, a time over :data:`MAX_SPAN_S` from the first row's) is a
  :class:`~perfkit.errors.BundleError` naming ``file:line``, unless ``max_bad_lines`` allows skipping it (counted in ``replay["skipped"]``).
* :func:`replay_bundle`: an incident bundle's traffic over its window: a Poisson process following
  the per-minute request rate (``vllm:e2e_request_latency_seconds_count``, else
  ``vllm:request_success_total``, plus the backlog's growth: :func:`_arrivals_per_minute`);
  lengths drawn from the window's ``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens``
  histograms within their buckets so that their mean is the histogram's ``_sum / _count``
  (:mod:`perfkit.loadgen.lengths`), the ``+Inf`` bucket up to twice the largest finite bound
  (``replay["notes"]`` says so when it is used); an engine without them (SGLang without
  ``--collect-tokens-histogram``, trtllm-serve) through its token counters' means
  (:mod:`perfkit.loadgen.bundle_lengths`).
"""

from __future__ import annotations

import csv
import json
import math
from array import array
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from perfkit.core.frames import Window
from perfkit.engine import ops
from perfkit.engine import signals as S
from perfkit.engine.dialects import family
from perfkit.engine.local import LocalEngine
from perfkit.errors import BundleError, ConfigError
from perfkit.loadgen.bundle_lengths import window_lengths
from perfkit.sources.safeio import RefusedFile, open_regular, size_text

SHAPES = ("concurrency", "rate", "burst", "replay")
ARRIVALS = ("poisson", "gamma", "constant")

MAX_TOKENS = 2**24
"""Largest token count read from a log before it is judged (16.7 M: above the longest context any
model offers, 10 M), so a bigger number is a unit or column mistake, not a request."""
MAX_PROMPT_TOKENS = 2**20
"""Longest prompt sent (1,048,576 tokens): the longest context served in practice (Qwen2.5-1M, Llama 4
Maverick), ~6.7 MB of text built in ~60 ms; 16.7 M tokens was 100 MB and 1 s of event loop each."""
MAX_OUTPUT_TOKENS = 2**18
"""Most output tokens asked of one request (262,144): twice the longest generation limit offered
(128 k). The client keeps ~100 bytes per chunk of a stream, so this bounds a request to ~25 MB."""
MAX_PLAN_REQUESTS = 10_000_000
"""Most requests one plan holds (three arrays: 160 MB at this size): a week at 16 req/s."""
MAX_REPLAY_BYTES = 512 * 2**20
"""Largest request log read: about 5 M lines of a Mooncake trace."""
MAX_REPLAY_REQUESTS = 2_000_000
"""Most requests taken from one replay without ``max_requests``: the published Mooncake and Azure
traces hold tens of thousands to a few hundred thousand per hour."""
MAX_LINE_BYTES = 2**20
"""Longest log line (a Mooncake line of a 1 M-token prompt lists ~2,000 block hashes: ~20 KB)."""
MAX_SPAN_S = 31 * 86400.0
"""Longest time a replay may span: a month of traffic. A trace of over 45 minutes in milliseconds
read as seconds (an ``arrival_s`` column in ms) spans more, so the unit mistake is caught."""
BUNDLE_BIN_S = 60.0
"""Bundle replay rate resolution: one minute holds four 15 s scrapes, the fewest rate() needs."""

_TIME_COLUMNS = ("arrival_s", "timestamp")
_PROMPT_COLUMNS = ("prompt_tokens", "input_tokens", "input_length", "prompt_len")
_OUTPUT_COLUMNS = ("output_tokens", "completion_tokens", "output_length", "output_len")


@dataclass(frozen=True, eq=False)
class Plan:
    """What to send: request *i* is due ``at_s[i]`` s after the start, with ``prompt_tokens[i]``
    prompt tokens, asking for ``output_tokens[i]``. The arrays are read-only copies."""

    at_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    shape: str
    arrival: str | None = None
    rate: float | None = None
    burstiness: float | None = None
    concurrency: int | None = None
    replay: dict[str, Any] | None = None
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ConfigError(f"unknown load shape {self.shape!r} (one of {', '.join(SHAPES)})")
        at = np.array(self.at_s, dtype=np.float64)
        if at.ndim != 1 or (len(at) and (not np.isfinite(at).all() or at[0] < 0 or (np.diff(at) < 0).any())):
            raise ConfigError("plan arrival times must be one list of finite, non-decreasing seconds >= 0")
        object.__setattr__(self, "at_s", at)
        for name, top in (("prompt_tokens", MAX_PROMPT_TOKENS), ("output_tokens", MAX_OUTPUT_TOKENS)):
            raw = np.asarray(getattr(self, name), dtype=np.float64)
            if raw.shape != at.shape or (len(raw) and not (raw.min() >= 1 and raw.max() <= top)):
                raise ConfigError(f"plan {name} must hold one length between 1 and {top:,} per request")
            if (raw != np.floor(raw)).any():
                raise ConfigError(f"plan {name} must be whole numbers of tokens")
            object.__setattr__(self, name, raw.astype(np.int32))
        for arr in (self.at_s, self.prompt_tokens, self.output_tokens):
            arr.setflags(write=False)

    def __len__(self) -> int:
        return len(self.at_s)

    def requested_rate(self) -> float | None:
        """The offered rate in requests/s: ``rate``, or a replay's mean rate; None when closed-loop."""
        if self.shape == "rate":
            return self.rate
        span = float(self.at_s[-1] - self.at_s[0]) if len(self) > 1 else 0.0
        return (len(self) - 1) / span if self.shape == "replay" and span > 0 else None

    def describe(self) -> dict[str, Any]:
        """The ``load`` fields of the result document this plan fills (the client adds
        ``achieved_rate``, ``schedule_lag_ms`` and ``endpoint``)."""
        return {
            "shape": self.shape,
            "concurrency": self.concurrency,
            "rate": self.rate,
            "arrival": self.arrival,
            "burstiness": self.burstiness,
            "prompt_tokens": _constant(self.prompt_tokens),
            "output_tokens": _constant(self.output_tokens),
            "replay": dict(self.replay) if self.replay is not None else None,
            "requested_rate": self.requested_rate(),
            "num_requests": len(self),
        }


def _constant(arr: np.ndarray) -> int | None:
    """The one value of ``arr`` when all are equal, else None."""
    return int(arr[0]) if len(arr) and int(arr.min()) == int(arr.max()) else None


def _whole(value: Any, what: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or not lo <= value <= hi:
        raise ConfigError(f"{what} must be a whole number from {lo:,} to {hi:,}, got {value!r}")
    return int(value)


def _lengths(n_requests: int, prompt_tokens: int, output_tokens: int) -> tuple[int, np.ndarray, np.ndarray]:
    """The request count and the two constant length arrays of a synthetic plan, checked."""
    n = _whole(n_requests, "number of requests", 1, MAX_PLAN_REQUESTS)
    prompt = _whole(prompt_tokens, "prompt tokens", 1, MAX_PROMPT_TOKENS)
    output = _whole(output_tokens, "output tokens", 1, MAX_OUTPUT_TOKENS)
    return n, np.full(n, prompt, dtype=np.int32), np.full(n, output, dtype=np.int32)


def _positive(value: Any, what: str) -> float:
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{what} must be a number, got {value!r}") from None
    if not (math.isfinite(v) and v > 0):
        raise ConfigError(f"{what} must be a positive finite number, got {value!r}")
    return v


def concurrency_plan(n_requests: int, prompt_tokens: int, output_tokens: int, concurrency: int) -> Plan:
    """Closed loop: ``n_requests`` requests, ``concurrency`` of them in flight at a time."""
    n, prompt, output = _lengths(n_requests, prompt_tokens, output_tokens)
    slots = _whole(concurrency, "concurrency", 1, MAX_PLAN_REQUESTS)
    return Plan(np.zeros(n), prompt, output, "concurrency", concurrency=slots)


def rate_plan(
    n_requests: int,
    rate: float,
    seed: int,
    arrival: str = "poisson",
    burstiness: float = 1.0,
    prompt_tokens: int = 128,
    output_tokens: int = 128,
    concurrency: int | None = None,
) -> Plan:
    """Open loop at ``rate`` requests/s (module docstring); ``concurrency`` optionally caps the
    requests in flight (vLLM's ``--max-concurrency``). The first request is due at t=0."""
    n, prompt, output = _lengths(n_requests, prompt_tokens, output_tokens)
    r = _positive(rate, "rate")
    if arrival not in ARRIVALS:
        raise ConfigError(f"unknown arrival process {arrival!r} (one of {', '.join(ARRIVALS)})")
    k = _positive(burstiness, "burstiness") if arrival == "gamma" else 1.0
    slots = None if concurrency is None else _whole(concurrency, "concurrency", 1, MAX_PLAN_REQUESTS)
    rng = np.random.default_rng(seed)
    if arrival == "constant":
        gaps = np.full(n - 1, 1.0 / r)
    elif arrival == "poisson":
        gaps = rng.exponential(1.0 / r, n - 1)
    else:
        gaps = rng.gamma(k, 1.0 / (r * k), n - 1)
    at = np.concatenate(([0.0], np.cumsum(gaps)))
    if n > 1 and at[-1] > 0:
        at *= ((n - 1) / r) / at[-1]  # offered rate exactly `rate` (module docstring)
    burst = k if arrival != "constant" else None
    return Plan(at, prompt, output, "rate", arrival, r, burst, slots, seed=seed)


def burst_plan(n_requests: int, prompt_tokens: int = 128, output_tokens: int = 128) -> Plan:
    """Every request at t=0, none held back: how the server copes with a thundering herd."""
    n, prompt, output = _lengths(n_requests, prompt_tokens, output_tokens)
    return Plan(np.zeros(n), prompt, output, "burst")


def with_duration(plan: Plan, duration_s: float) -> Plan:
    """``plan`` cut to the arrivals due before ``duration_s``. A closed-loop or burst plan (every
    arrival at 0) keeps all its requests: the client stops it when the duration is up."""
    d = _positive(duration_s, "duration")
    keep = int(np.searchsorted(plan.at_s, d, side="left"))
    if keep == 0:
        raise ConfigError(f"no request of the plan is due within {d:g} s")
    replay = dict(plan.replay, requests=keep) if plan.replay is not None else None
    cut = (plan.at_s[:keep], plan.prompt_tokens[:keep], plan.output_tokens[:keep])
    return replace(plan, at_s=cut[0], prompt_tokens=cut[1], output_tokens=cut[2], replay=replay)


# -- request logs ------------------------------------------------------------------------------


class _Bad(ValueError):
    """One line of a request log is unusable; the message says why."""


def _number(value: Any, column: str) -> float:
    try:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError
        v = float(value)
    except (ValueError, OverflowError):  # OverflowError: an integer past a float's range
        raise _Bad(f"{column} {value!r:.40} is not a number") from None
    if not math.isfinite(v):
        raise _Bad(f"{column} {value!r:.40} is not a finite number")
    return v


def _length(row: dict[str, Any], names: tuple[str, ...], top: int) -> tuple[str, int]:
    column, value = _pick(row, names)
    v = _number(value, column)
    if not 1 <= v <= top or v != int(v):
        why = "negative" if v < 0 else "0" if v == 0 else "over the limit" if v > top else "fractional"
        shown = f"{v:,.0f}" if v == int(v) and abs(v) < 1e15 else f"{v:.6g}"
        raise _Bad(f"{column} is {why} ({shown}); want a whole number of tokens from 1 to {top:,}")
    return column, int(v)


def _pick(row: dict[str, Any], names: tuple[str, ...]) -> tuple[str, Any]:
    for name in names:
        if row.get(name) not in (None, ""):
            return name, row[name]
    raise _Bad(f"no {' or '.join(names)} column")


class _Clock:
    """Turns a row's time column into seconds, in the unit the first row decided (module docstring):
    ``arrival_s``, ``iso``, ``epoch_ms``, ``epoch_s`` or ``offset_ms``."""

    def __init__(self) -> None:
        self.unit: str | None = None
        self.first: float | None = None

    def seconds(self, row: dict[str, Any]) -> float:
        column, value = _pick(row, _TIME_COLUMNS)
        if self.unit is None:
            self.unit = "arrival_s" if column == "arrival_s" else self._unit(value)
        if (column == "arrival_s") != (self.unit == "arrival_s"):
            raise _Bad(f"time is in {column}, unlike the first row's")
        if self.unit == "iso":
            t = _iso(value)
        else:
            t = _number(value, column)
            if t < 0 and self.unit != "arrival_s":
                raise _Bad(f"timestamp is negative ({t:g})")
            t = t / 1000.0 if self.unit in ("epoch_ms", "offset_ms") else t
        self.first = t if self.first is None else self.first
        if abs(t - self.first) > MAX_SPAN_S:
            days = abs(t - self.first) / 86400
            raise _Bad(
                f"{column} is {days:.0f} days from the first row's: a unit mistake?"
                if days < 1e6
                else f"{column} is over a million days from the first row's: a unit mistake?"
            )
        return t

    @staticmethod
    def _unit(value: Any) -> str:
        try:
            v = _number(value, "timestamp")
        except _Bad:
            if isinstance(value, str):
                return "iso"
            raise
        return "epoch_ms" if v >= 1e11 else "epoch_s" if v >= 1e8 else "offset_ms"


def _iso(value: Any) -> float:
    try:
        ts = datetime.fromisoformat(value.strip()) if isinstance(value, str) else None
    except ValueError:
        ts = None
    if ts is None:
        raise _Bad(f"timestamp {value!r:.40} is not ISO 8601 text like the first row's")
    return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).timestamp()


def _rows(fh: BinaryIO, is_csv: bool) -> Iterator[tuple[int, dict[str, Any] | _Bad]]:
    """(line number, row or what is wrong with it) for each non-blank line (after a CSV's header)."""
    header: list[str] | None = None
    number, at_start, long = 0, True, False  # long: inside a line over the limit
    for raw in iter(lambda: fh.readline(MAX_LINE_BYTES + 1), b""):
        number += at_start
        at_start = raw.endswith(b"\n")
        if long or len(raw) > MAX_LINE_BYTES:
            if not long:
                yield number, _Bad(f"line is over {size_text(MAX_LINE_BYTES)}")
            long = not at_start
            continue
        try:
            text = raw.decode("utf-8")
            if not text.strip():
                continue
            if not is_csv:
                row = json.loads(text)
            elif header is None:
                header = [
                    h.strip().lower().replace(" ", "_") for h in next(csv.reader([text.lstrip("\ufeff")]))
                ]
                continue
            elif len(fields := next(csv.reader([text]))) != len(header):
                row = _Bad(f"{len(fields)} fields, the header has {len(header)}")
            else:
                row = dict(zip(header, fields, strict=True))
        except UnicodeDecodeError:
            row = _Bad("not UTF-8 text")
        except (ValueError, RecursionError, csv.Error) as err:  # ValueError: JSON, an int of 4,301+ digits
            row = _Bad(f"not {'CSV' if is_csv else 'JSON'} ({getattr(err, 'msg', None) or err})")
        yield (
            number,
            row if isinstance(row, dict | _Bad) else _Bad(f"want a JSON object, not {type(row).__name__}"),
        )


def replay_log(
    path: str | Path, time_scale: float = 1.0, max_requests: int | None = None, max_bad_lines: int = 0
) -> Plan:
    """The arrivals and lengths of a request log (columns in the module docstring).

    ``max_requests`` keeps the first N usable rows of the file (file order, then sorted by time);
    ``max_bad_lines`` broken lines are skipped (and counted) before one raises. Raises
    :class:`~perfkit.errors.BundleError` naming the file (and line) for a missing, refused,
    oversized, empty or broken log, :class:`~perfkit.errors.ConfigError` for bad arguments.
    """
    p = Path(path)
    scale = _positive(time_scale, "time scale")
    cap = (
        MAX_REPLAY_REQUESTS
        if max_requests is None
        else _whole(max_requests, "max_requests", 1, MAX_PLAN_REQUESTS)
    )
    max_bad = _whole(max_bad_lines, "max_bad_lines", 0, MAX_PLAN_REQUESTS)
    ext = p.suffix.lower()
    if ext not in (".jsonl", ".ndjson", ".json", ".csv"):
        raise BundleError("unknown request log format (want .jsonl, .ndjson, .json or .csv)", path=str(p))
    times, prompts, outputs = array("d"), array("i"), array("i")  # 16 bytes a request
    skipped: list[str] = []
    clock, mooncake = _Clock(), ext != ".csv"
    try:
        fh = open_regular(p, max_bytes=MAX_REPLAY_BYTES)
    except RefusedFile as err:
        raise BundleError(f"request log refused: {err.reason}", path=str(p)) from None
    except OSError as err:
        raise BundleError(f"cannot read request log ({err.strerror or err})", path=str(p)) from None
    with fh:
        for number, row in _rows(fh, ext == ".csv"):
            try:
                if isinstance(row, _Bad):
                    raise row
                t = clock.seconds(row)
                pcol, prompt = _length(row, _PROMPT_COLUMNS, MAX_PROMPT_TOKENS)
                ocol, output = _length(row, _OUTPUT_COLUMNS, MAX_OUTPUT_TOKENS)
            except _Bad as bad:
                if len(skipped) >= max_bad:
                    raise BundleError(str(bad), path=str(p), line=number) from None
                skipped.append(f"{p.name}:{number}: {bad}")
                continue
            if len(times) >= cap:
                if max_requests is not None:
                    break
                raise BundleError(f"over {cap:,} requests; pass max_requests", path=str(p), line=number)
            mooncake = mooncake and (pcol, ocol) == ("input_length", "output_length")
            times.append(t)
            prompts.append(prompt)
            outputs.append(output)
    if not times:
        raise BundleError("the request log holds no requests", path=str(p))
    t_arr = np.frombuffer(times, dtype=np.float64)
    order = np.argsort(t_arr, kind="stable")
    fmt = "csv" if ext == ".csv" else "mooncake" if mooncake and clock.unit == "offset_ms" else "jsonl"
    replay: dict[str, Any] = {
        "source": p.name,
        "format": fmt,
        "requests": len(order),
        "time_scale": scale,
        "time_unit": clock.unit,
        "skipped": len(skipped),
    }
    if skipped:
        replay["skipped_examples"] = skipped[:3]
    at = (t_arr[order] - t_arr[order[0]]) / scale
    lengths = [np.frombuffer(a, dtype=np.intc)[order] for a in (prompts, outputs)]
    return Plan(at, lengths[0], lengths[1], "replay", "trace", replay=replay)


# -- incident bundles --------------------------------------------------------------------------


def replay_bundle(path: str | Path, time_scale: float = 1.0, seed: int = 0, max_requests: int | None = None,
                  window: Window | None = None) -> Plan:  # fmt: skip
    """The traffic of the incident bundle at ``path`` over its window or ``window`` (module docstring);
    the first ``max_requests`` arrivals (the same as without it). A bundle without the request counter,
    or without both a length histogram and a token counter (:mod:`perfkit.loadgen.bundle_lengths`), is
    a :class:`~perfkit.errors.BundleError` naming the family."""
    from perfkit.sources.bundle import load_bundle  # reads every exporter format: only when replaying

    scale = _positive(time_scale, "time scale")
    cap = None if max_requests is None else _whole(max_requests, "max_requests", 1, MAX_PLAN_REQUESTS)
    names = [b for g in ("e2e", "prompt_tokens", "generation_tokens") for b in S.HISTOGRAMS[g]]
    wanted = {f"{b}_{s}" for b in names for s in ("bucket", "count", "sum")}
    counters = ("request_success", "prompt_tokens_total", "generation_tokens_total")
    wanted |= {
        family(n)
        for n in S.GAUGES["running"] + S.GAUGES["waiting"] + sum((S.COUNTERS[c] for c in counters), ())
    }
    bundle = load_bundle(path, families=wanted)
    engine, where = LocalEngine(bundle.store), str(bundle.path)
    window = window or bundle.incident.window
    if window.seconds <= 0:
        raise BundleError("the incident window is empty", path=str(bundle.path / "incident.yaml"))
    counter, starts, widths, per_bin, notes = _arrivals_per_minute(engine, window, where)
    arrivals_rng, prompt_rng, output_rng = (
        np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3)
    )
    counts = arrivals_rng.poisson(per_bin)
    if cap is None and counts.sum() > MAX_REPLAY_REQUESTS:
        raise ConfigError(f"{where}: the window holds about {per_bin.sum():,.0f} requests; pass max_requests")
    if cap is not None:  # only the minutes that hold the first `cap` arrivals
        counts = counts[: int(np.searchsorted(np.cumsum(counts), cap)) + 1]
    jitter = arrivals_rng.random(int(counts.sum())) * np.repeat(widths[: len(counts)], counts)
    at = np.sort(np.repeat(starts[: len(counts)], counts) + jitter)[:cap]
    if not len(at):
        raise BundleError(f"the draw holds no request (about {per_bin.sum():.1f} expected)", path=where)
    notes.insert(0, f"arrivals: Poisson with the per-minute rate of {counter} (seed {seed})")
    got = window_lengths(
        engine, bundle.logs, window, len(at), (prompt_rng, output_rng), (MAX_PROMPT_TOKENS, MAX_OUTPUT_TOKENS)
    )
    if isinstance(got, str):
        raise BundleError(got, path=where)
    lengths, said = got
    notes += ["lengths: prompt and output drawn independently", *said]
    replay = {
        "source": bundle.path.name,
        "format": "bundle",
        "requests": len(at),
        "time_scale": scale,
        "seed": seed,
        "window": window.as_dict(),
        "window_requests": round(float(per_bin.sum())),
        "notes": notes,
    }
    return Plan((at - at[0]) / scale, lengths[0], lengths[1], "replay", "trace", replay=replay, seed=seed)


def _arrivals_per_minute(
    engine: LocalEngine, window: Window, where: str
) -> tuple[str, np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """(the counter read, each minute's start in s from the window's start, its width in s, the
    requests expected to arrive in it, notes). Minute *i* is [start + 60 i, start + 60 (i+1)), the
    last one cut at the window's end. A server counts requests when they finish, so arrivals are
    completions (the counter's rate() over the minute, scaled so the minutes add up to its
    increase() over the whole window, the steadier number) plus the growth of the requests running
    and waiting: when the server fell behind, its backlog is traffic that arrived too."""
    signal = "e2e" if S.resolve(engine, "e2e").found else "request_success"
    metric = S.resolve(engine, signal).metric
    if metric is None:
        raise BundleError(
            "no vllm:e2e_request_latency_seconds_count or vllm:request_success_total: cannot tell the request rate",
            path=where,
        )
    counter = ops.Selector(f"{metric}_count" if signal == "e2e" else metric)
    n_full = int(window.seconds // BUNDLE_BIN_S)
    edges = [window.start + timedelta(seconds=BUNDLE_BIN_S * i) for i in range(n_full + 1)]
    edges += [window.end] if edges[-1] < window.end else []
    done = _on_edges(engine, ops.sum_by(ops.rate(counter, BUNDLE_BIN_S)), edges)[1:]
    offsets = np.array([(e - window.start).total_seconds() for e in edges])
    widths = np.diff(offsets)
    blind = int(np.isnan(done).sum())
    done = np.nan_to_num(done.clip(0.0), nan=0.0) * widths
    total = engine.instant(ops.sum_by(ops.increase(counter, window.seconds)), window.end)
    if total.height and done.sum() > 0 and math.isfinite(v := float(total["value"][0])):
        done *= max(v, 0.0) / done.sum()
    notes = (
        [f"{blind} of {len(widths)} minutes had no {counter.metric} sample: replayed as silent"]
        if blind
        else []
    )
    backlog = np.zeros(len(edges))
    for g in ("running", "waiting"):
        res = S.resolve(engine, g)
        values = _on_edges(engine, ops.aggregate("sum", res.selector()), edges) if res.found else None
        if values is None or np.isnan(values).any():
            notes.append(f"no {S.GAUGES[g][0]} throughout the window: finished requests stand for arrivals")
            backlog[:] = 0.0
            break
        backlog += values
    per_bin = (done + np.diff(backlog)).clip(0.0)
    if per_bin.sum() < 0.5:
        raise BundleError(f"no requests in the incident window by {counter.metric}", path=where)
    if (per_bin / widths).max() > MAX_PLAN_REQUESTS / BUNDLE_BIN_S:
        raise BundleError(
            f"{counter.metric} implies over {MAX_PLAN_REQUESTS:,} requests a minute", path=where
        )
    return counter.metric, offsets[:-1], widths, per_bin, notes


def _on_edges(engine: LocalEngine, expr: ops.Expr, edges: list[datetime]) -> np.ndarray:
    """``expr`` at each of ``edges`` (a 60 s grid from the first, and maybe a last one off the
    grid); NaN where it has no value."""
    frame = engine.range(expr, edges[0], edges[-1], BUNDLE_BIN_S)
    if edges[-1] not in set(frame["ts"].to_list()):
        frame = frame.vstack(engine.instant(expr, edges[-1]).select(frame.columns))
    found = {ts: v for ts, v in zip(frame["ts"].to_list(), frame["value"].to_list(), strict=True)}
    return np.array([found.get(e, math.nan) for e in edges], dtype=np.float64)
