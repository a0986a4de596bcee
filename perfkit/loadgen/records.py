"""Per-request records of a load test, streamed to a Parquet file as they complete.

Every request that was sent has a row, with its error when it failed: percentiles are computed
from these rows and never hide a failure. Rows are buffered a few thousand at a time and written as
row groups, so a 100,000-request run holds one group in memory, not the run.

Columns (times in seconds; offsets from the run's start, on the client's monotonic clock)::

    i               request number in the plan
    scheduled_s     when the plan meant to send it (open loop), or when a slot freed (closed loop)
    sent_s          when it was sent; sent_s - scheduled_s is the schedule lag
    ttft_s          first byte of the first chunk carrying a generated token (NaN: none arrived)
    e2el_s          last chunk carrying a token (NaN: none)
    prompt_tokens   the server's usage.prompt_tokens (-1: not reported)
    output_tokens   the server's usage.completion_tokens, else the client's count (-1: none)
    client_tokens   tokens the client counted in the stream (usage deltas, else one per chunk)
    chunks          content-bearing chunks (SSE events with text)
    gaps_s          the gap before each chunk after the first (list, one per later chunk)
    chunk_tokens    tokens in each chunk after the first (list, same length as gaps_s)
    status          HTTP status (0: no answer)
    error           kind: connect, timeout, http_4xx, http_5xx, malformed, disconnect, stall,
                    cancelled (null: completed)
    detail          one line about the error (bounded)
"""

from __future__ import annotations

import functools
import math
import os
import queue
import statistics
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from perfkit.errors import PerfkitError

SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("scheduled_s", pa.float64()),
        ("sent_s", pa.float64()),
        ("ttft_s", pa.float64()),
        ("e2el_s", pa.float64()),
        ("prompt_tokens", pa.int32()),
        ("output_tokens", pa.int32()),
        ("client_tokens", pa.int32()),
        ("chunks", pa.int32()),
        ("gaps_s", pa.list_(pa.float32())),
        ("chunk_tokens", pa.list_(pa.int32())),
        ("status", pa.int16()),
        ("error", pa.string()),
        ("detail", pa.string()),
    ]
)
ERROR_KINDS = ("connect", "timeout", "http_4xx", "http_5xx", "malformed", "disconnect", "stall", "cancelled")
FLUSH_ROWS = 4096
MAX_DETAIL = 200


@dataclass
class Record:
    i: int
    scheduled_s: float
    sent_s: float = float("nan")
    ttft_s: float = float("nan")
    e2el_s: float = float("nan")
    prompt_tokens: int = -1
    output_tokens: int = -1
    client_tokens: int = 0
    chunks: int = 0
    gaps_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    status: int = 0
    error: str | None = None
    detail: str | None = None

    def fail(self, kind: str, detail: str) -> None:
        """Mark the request failed (the first failure wins: a disconnect after a 500 is the 500)."""
        if self.error is None:
            self.error = kind
            self.detail = " ".join(str(detail).split())[:MAX_DETAIL]


class RecordSink:
    """Appends records to ``path`` (Parquet), a row group per :data:`FLUSH_ROWS` records.

    Encoding a row group takes tens of milliseconds; it happens on a writer thread, so the event
    loop that timestamps chunks is not held up by it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".partial", dir=self.path.parent)
        os.close(fd)
        self._tmp = Path(tmp)
        # dictionary pages only for the error columns: on the float lists they held 26 MB and saved nothing
        self._writer = pq.ParquetWriter(
            self._tmp, SCHEMA, compression="zstd", use_dictionary=["error", "detail"]
        )
        self._rows: list[Record] = []
        self._queue: queue.Queue[list[Record] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name="perfkit-records", daemon=True)
        self._thread.start()
        self.count = 0

    def add(self, rec: Record) -> None:
        self._rows.append(rec)
        self.count += 1
        if len(self._rows) >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        if self._rows:
            rows, self._rows = self._rows, []
            self._queue.put(rows)

    def _drain(self) -> None:
        while (rows := self._queue.get()) is not None:
            try:
                self._writer.write_table(_table(rows))
            except BaseException as exc:  # kept for close(), which raises it
                self._error = exc

    def close(self) -> Path:
        """Write what is left and move the file into place (a crash leaves only the ``.partial``)."""
        self.flush()
        self._queue.put(None)
        self._thread.join()
        self._writer.close()
        if self._error is not None:
            raise self._error
        os.replace(self._tmp, self.path)
        return self.path


# Arrays are built from and read into numpy through their buffers: pyarrow's conversions of Python
# lists and its ``to_numpy``/``to_pylist`` import pandas on first use, 45 MB of resident memory that a
# load generator has no use for (the budget is 300 MB for a 100,000-request run).


def _table(rows: list[Record]) -> pa.Table:
    arrays = []
    for name in SCHEMA.names:
        typ = SCHEMA.field(name).type
        values = [getattr(r, name) for r in rows]
        if pa.types.is_list(typ):
            arrays.append(_lists(values, typ))
        elif pa.types.is_string(typ):
            arrays.append(_strings(values))
        else:
            arrays.append(_numbers(np.asarray(values, dtype=typ.to_pandas_dtype())))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _numbers(values: np.ndarray) -> pa.Array:
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), values.size, [None, pa.py_buffer(values)])


def _strings(values: list[str | None]) -> pa.Array:
    encoded = [b"" if v is None else v.encode("utf-8", "replace") for v in values]
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    valid = np.packbits(np.array([v is not None for v in values], dtype=bool), bitorder="little")
    buffers = [pa.py_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(pa.string(), len(values), buffers, null_count=values.count(None))


def _lists(values: list[list], typ: pa.DataType) -> pa.Array:
    """A list column from Python lists, built from one flat numpy array (fast for long lists)."""
    lengths = np.fromiter((len(v) for v in values), dtype=np.int32, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat_type = typ.value_type
    flat = np.fromiter(
        (x for v in values for x in v), dtype=flat_type.to_pandas_dtype(), count=int(offsets[-1])
    )
    return pa.ListArray.from_arrays(_numbers(offsets), _numbers(flat))


def _valid(col: pa.Array) -> np.ndarray | None:
    if not col.null_count:
        return None
    bits = np.frombuffer(col.buffers()[0], dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little")[col.offset : col.offset + len(col)].astype(bool)


def numbers(col: pa.Array) -> np.ndarray:
    """A numeric column as a numpy array (a copy; nulls as NaN)."""
    data = np.frombuffer(col.buffers()[1], dtype=col.type.to_pandas_dtype())
    out = data[col.offset : col.offset + len(col)].copy()
    valid = _valid(col)
    if valid is not None:
        out = out.astype(np.float64)
        out[~valid] = np.nan
    return out


def texts(col: pa.Array) -> list[str | None]:
    """A string column as Python strings (None for nulls)."""
    offsets = np.frombuffer(col.buffers()[1], dtype=np.int32)[col.offset : col.offset + len(col) + 1]
    data = col.buffers()[2]
    raw = b"" if data is None else data.to_pybytes()
    valid = _valid(col)
    return [
        None
        if valid is not None and not valid[i]
        else raw[offsets[i] : offsets[i + 1]].decode("utf-8", "replace")
        for i in range(len(col))
    ]


def flat_list(col: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """A list column's offsets (one more than rows, from 0) and its flat values."""
    offsets = numbers(col.offsets).astype(np.int64)
    values = numbers(col.values)[offsets[0] : offsets[-1]]
    return offsets - offsets[0], values


def read_columns(path: str | os.PathLike[str], columns: list[str]):
    """Iterate the record file's row groups (:data:`FLUSH_ROWS` records each) as record batches of ``columns``.

    One group at a time and without pre-buffering: ``iter_batches`` read ahead and held about 70 MB
    more for a 100,000-request run of 64-token outputs."""
    pf = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    for i in range(pf.metadata.num_row_groups):
        yield from pf.read_row_group(i, columns=columns).to_batches()


# -- within-run noise: each gated metric's confidence interval from the records ---------------------

NOISE_BLOCKS = 10
"""Requests are cut into this many blocks in the order they were sent (at least 20 requests each).
Requests sent together share the machine's state (a scheduler hiccup, another job's burst on a
shared runner delays a dozen at once), so they are not independent samples: each interval's
variance is taken between blocks (Woodruff's interval for a quantile, batch means for a mean),
never from the count of requests alone."""
MIN_BLOCK_REQUESTS = 20
MAX_NOISE_TOKENS = 4_000_000
"""Per-token ITL values read for the intervals: beyond them every s-th request is kept (wider, not narrower)."""
_STAT_Q = {"median": 0.5, "p99": 0.99}


@dataclass(frozen=True)
class Interval:
    """A metric's estimate from the records and its interval (``lo``, ``hi``, same unit: ms or a
    fraction); ``n`` samples, ``n_eff`` of them independent by the between-block variance."""

    est: float
    lo: float
    hi: float
    n: int
    n_eff: float


@dataclass
class RunNoise:
    """The within-run intervals of one run's gated metrics (``mean_ttft_ms``, ``p99_itl_ms``,
    ``errors.rate``, ``goodput.attainment`` ...), at the coverage of ``k`` standard errors; a metric
    whose interval the run cannot bound (too few requests for a tail) is in ``unbounded`` with why."""

    k: float
    blocks: int
    intervals: dict[str, Interval] = field(default_factory=dict)
    unbounded: dict[str, str] = field(default_factory=dict)
    closed_loop: bool = False
    """A closed loop (``--concurrency``): its throughput is concurrency over the mean E2E latency."""


def coverage(k: float) -> float:
    """The two-sided coverage of ``k`` normal standard errors (k = 3: 99.73 %)."""
    return math.erf(k / math.sqrt(2.0))


def binomial_ranks(n: int, q: float, k: float) -> tuple[int, int] | None:
    """The 1-based ranks ``(l, u)`` of the distribution-free interval of the q-quantile of ``n``
    independent values, exact: ``P(B < l) <= a/2`` and ``P(B >= u) <= a/2`` with ``B ~ Bin(n, q)``
    and ``1 - a`` the coverage of ``k`` (Conover, *Practical Nonparametric Statistics*, §3.2);
    None when ``u`` would be past the largest value (the tail needs more values than ``n``)."""
    if n < 1 or not 0.0 < q < 1.0:
        return None
    half = (1.0 - coverage(k)) / 2.0
    sd = math.sqrt(n * q * (1.0 - q))
    lo_k, hi_k = max(0, int(n * q - 12 * sd - 40)), min(n, int(n * q + 12 * sd + 40))
    ks = np.arange(lo_k, hi_k + 1, dtype=np.float64)
    lg = np.vectorize(math.lgamma)
    logpmf = math.lgamma(n + 1) - lg(ks + 1) - lg(n - ks + 1) + ks * math.log(q) + (n - ks) * math.log1p(-q)
    cdf = np.cumsum(np.exp(logpmf))  # the mass below the window is under 1e-30
    below = int(np.searchsorted(cdf, half, side="right"))  # ks[:below] have P(B <= k) <= a/2
    l_rank = lo_k + below  # P(B < l) = P(B <= l - 1) <= a/2
    top = int(np.searchsorted(cdf, 1.0 - half, side="left"))
    if top >= cdf.size:
        return None
    u_rank = lo_k + top + 1  # P(B >= u) = 1 - P(B <= u - 1) <= a/2
    if l_rank < 1 or u_rank > n:
        return None
    return l_rank, u_rank


@functools.lru_cache(maxsize=64)
def student(k: float, df: int) -> float:
    """The multiplier of a standard error estimated with ``df`` degrees of freedom (ten blocks: 9) at
    the coverage of ``k`` normal ones: Student's t quantile (k = 3, df = 9: 4.09), by integrating its
    density (the trapezoid rule on a fine grid: 2.2622 at 95 %, df 9, as the tables)."""
    target = coverage(k) / 2.0
    top = 10.0 * k + 200.0
    x = np.linspace(0.0, top, 400_001)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    density = np.exp(log_c - (df + 1) / 2 * np.log1p(x * x / df))
    step = x[1] - x[0]
    cdf = np.concatenate([[0.0], np.cumsum((density[:-1] + density[1:]) * step / 2)])
    return float(np.interp(target, cdf, x))


def min_requests(q: float, k: float) -> int:
    """The fewest independent values whose q-quantile interval stays below the largest value."""
    return math.ceil(math.log((1.0 - coverage(k)) / 2.0) / math.log(q))


def run_noise(
    path: str | os.PathLike[str], *, k: float = 3.0, slo_ms: dict[str, float] | None = None
) -> RunNoise:
    """The within-run intervals of the run whose records are at ``path`` (the result's
    ``RESULT.requests.parquet``); ``slo_ms`` (the result's ``goodput.slo_ms``) for the attainment."""
    cols = ["sent_s", "ttft_s", "e2el_s", "output_tokens", "gaps_s", "chunk_tokens", "error"]
    rows = pq.ParquetFile(path).metadata.num_rows
    parts: dict[str, list[np.ndarray]] = {
        c: [] for c in ("sent", "ttft", "e2el", "out", "ok", "owner", "itl", "w")
    }
    total_tokens = 0
    keep_every = 1
    seen = 0
    for batch in read_columns(path, cols):
        d = {c: batch.column(c) for c in cols}
        ok = np.array([e is None for e in texts(d["error"])], dtype=bool)
        ttft = numbers(d["ttft_s"])
        ok &= ~np.isnan(ttft)
        offsets, gaps = flat_list(d["gaps_s"])
        toks = np.maximum(flat_list(d["chunk_tokens"])[1].astype(np.int64), 1)
        total_tokens += int(toks.size)
        if seen == 0 and rows and toks.size and len(ok):  # tokens per request from the first group
            keep_every = max(1, math.ceil(rows * toks.size / len(ok) / MAX_NOISE_TOKENS))
        index = np.arange(seen, seen + len(ok))
        seen += len(ok)
        lengths = np.diff(offsets)
        owner = np.repeat(index, lengths)
        kept = np.repeat(ok & (index % keep_every == 0), lengths)
        parts["sent"].append(numbers(d["sent_s"]))
        parts["ttft"].append(ttft * 1000.0)
        parts["e2el"].append(numbers(d["e2el_s"]) * 1000.0)
        parts["out"].append(numbers(d["output_tokens"]).astype(np.float64))
        parts["ok"].append(ok)
        parts["owner"].append(owner[kept])
        parts["itl"].append(gaps.astype(np.float64)[kept] / toks[kept] * 1000.0)
        parts["w"].append(toks[kept].astype(np.float64))
    cat = {name: np.concatenate(p) if p else np.zeros(0) for name, p in parts.items()}
    ok = cat["ok"].astype(bool)
    n_sent = ok.size
    blocks = min(NOISE_BLOCKS, n_sent // MIN_BLOCK_REQUESTS)
    noise = RunNoise(k=k, blocks=blocks)
    if n_sent == 0:
        return noise
    sent = np.where(np.isnan(cat["sent"]), np.inf, cat["sent"])
    block_of = np.empty(n_sent, dtype=np.int64)  # each request's block, in the order they were sent
    block_of[np.argsort(sent, kind="stable")] = np.arange(n_sent) * max(blocks, 1) // n_sent
    ttft, e2el, out = cat["ttft"], cat["e2el"], cat["out"]
    multi = ok & (out > 1)
    tpot = np.where(multi, (e2el - ttft) / np.maximum(out - 1, 1), np.nan)
    per_request = {"ttft": (ttft, ok), "tpot": (tpot, multi), "e2el": (e2el, ok)}
    for metric, (values, mask) in per_request.items():
        _intervals(noise, metric, values[mask], np.ones(int(mask.sum())), block_of[mask])
    owners = cat["owner"].astype(np.int64)
    _intervals(noise, "itl", cat["itl"], cat["w"], block_of[owners] if owners.size else owners)
    _proportion(noise, "errors.rate", (~ok).astype(np.float64), block_of)
    if slo_ms:
        met = ok.copy()
        for key, values in (("ttft", ttft), ("e2el", e2el), ("tpot", tpot)):
            if key in slo_ms:
                met &= ~(~np.isnan(values) & (values > float(slo_ms[key])))
        _proportion(noise, "goodput.attainment", met.astype(np.float64), block_of)
    return noise


def noise_of(
    doc: Mapping[str, Any], records: str | os.PathLike[str] | None, who: str, warn: Callable[[str], None]
) -> RunNoise | None:
    """:func:`run_noise` of the run ``doc`` (its SLOs, its load's shape) from ``records``; None when
    there are none, and with a warning naming ``who`` when they cannot be read."""
    if records is None or not Path(records).is_file():
        return None
    goodput: Mapping[str, Any] = doc["goodput"] if isinstance(doc.get("goodput"), Mapping) else {}
    slo: Mapping[str, Any] = goodput["slo_ms"] if isinstance(goodput.get("slo_ms"), Mapping) else {}
    limits = {str(k): float(v) for k, v in slo.items() if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)}  # fmt: skip
    try:
        noise = run_noise(records, slo_ms=limits or None)
    except (OSError, ValueError, pa.ArrowException, PerfkitError) as exc:
        warn(
            f"{who}: its records {Path(records).name} were not read ({str(exc)[:120]}); its within-run noise is unknown"
        )
        return None
    load: Mapping[str, Any] = doc["load"] if isinstance(doc.get("load"), Mapping) else {}
    noise.closed_loop = load.get("shape") == "concurrency"
    return noise


def _block_sums(values: np.ndarray, blocks_of: np.ndarray, blocks: int) -> np.ndarray:
    return np.bincount(blocks_of, weights=values, minlength=blocks)[:blocks]


def _between_blocks_se(y: np.ndarray, t: np.ndarray, ratio: float) -> float:
    """The standard error of the ratio ``sum(y) / sum(t)`` from block sums (linearised, cluster-robust)."""
    b = y.size
    return math.sqrt(b / (b - 1) * float(((y - ratio * t) ** 2).sum())) / float(t.sum())


def _intervals(
    noise: RunNoise, metric: str, values: np.ndarray, weights: np.ndarray, block_of: np.ndarray
) -> None:
    """The mean's (batch means) and the median's and p99's (Woodruff: the binomial interval at the
    effective count the between-block variance leaves) intervals of weighted values."""
    good = np.isfinite(values)
    values, weights, block_of = values[good], weights[good], block_of[good]
    n, b = int(values.size), noise.blocks
    if n == 0:
        return
    order = np.argsort(values, kind="stable")
    xs, cw = values[order], np.cumsum(weights[order])
    total = float(cw[-1])

    def quantile(level: float) -> float:
        return float(xs[min(n - 1, int(np.searchsorted(cw, level * total, side="left")))])

    mean = float((values * weights).sum() / total)
    if b >= 3:
        t = _block_sums(weights, block_of, b)
        se = _between_blocks_se(_block_sums(values * weights, block_of, b), t, mean)
        noise.intervals[f"mean_{metric}_ms"] = Interval(
            mean, mean - student(noise.k, b - 1) * se, mean + student(noise.k, b - 1) * se, n, float(b)
        )
    for stat, q in _STAT_Q.items():
        name = f"{stat}_{metric}_ms"
        est = quantile(q)
        deff = 1.0
        if b >= 3:
            below = _block_sums(weights * (values <= est), block_of, b)
            se_f = _between_blocks_se(below, _block_sums(weights, block_of, b), float(below.sum() / total))
            inflate = student(noise.k, b - 1) / noise.k  # se_f rests on b blocks: Student's t
            deff = max(1.0, (inflate * se_f) ** 2 / (q * (1 - q) / n))
        n_eff = n / deff
        ranks = binomial_ranks(int(n_eff), q, noise.k)
        if ranks is None:
            need = min_requests(q, noise.k)
            shared = (
                f", about {n_eff:,.0f} independent: those sent together share the machine's state"
                if deff > 1.05
                else ""
            )
            noise.unbounded[name] = (
                f"too few requests for {stat}: n={n:,}{shared}; its {coverage(noise.k):.2%} interval needs {need:,}"
            )
            continue
        lo, hi = ranks
        m = int(n_eff)
        noise.intervals[name] = Interval(est, quantile((lo - 0.5) / m), quantile((hi - 0.5) / m), n, n_eff)


def _proportion(noise: RunNoise, name: str, flags: np.ndarray, block_of: np.ndarray) -> None:
    """A share of the requests sent (failed, met every SLO) and its between-blocks interval."""
    n, b = int(flags.size), noise.blocks
    if n == 0 or b < 3:
        return
    p = float(flags.mean())
    sizes = _block_sums(np.ones(n), block_of, b)
    between = _between_blocks_se(_block_sums(flags, block_of, b), sizes, p)
    se = max(between, math.sqrt(max(p * (1 - p), 0.25 / n) / n))  # never below the binomial's
    t = student(noise.k, b - 1)
    noise.intervals[name] = Interval(p, max(0.0, p - t * se), min(1.0, p + t * se), n, float(b))


def within_band(
    metric: str,
    k: float,
    sign: float,
    new: float,
    mine: RunNoise | None,
    refs: list[tuple[RunNoise | None, float]],
    *,
    completed: int,
    throughput: bool = False,
    reported_se: float | None = None,
    p99_min: int = 1000,
) -> tuple[float | None, str | None, str | None]:
    """The within-run term of ``metric``'s gate band, its source, and why it is not judged (or None).

    ``d_new``: how far the new value may lie on the bad side of its truth (the other end of its
    interval; ``sign`` +1 when lower is better); ``d_ref``: how far the history's may lie on the good
    side (the median of the baselines' own, shrunk as the median of H runs is); the term is
    ``hypot(d_new, d_ref)``, each at ``k``. A side without records is stood in for by the other's. A
    closed-loop throughput moves by its mean E2E latency's fraction (Little's law). A mean with no
    records on either side: the tool's reported ``std / sqrt(n)`` for both ("tool-reported"). A p99
    without records is judged only from ``p99_min`` requests (more than the 658 independent ones its
    interval needs: without records nothing says how many are independent) and 3 baselines."""
    stat = metric.split("_", 1)[0]
    if mine is not None and metric in mine.unbounded:
        return None, None, mine.unbounded[metric]
    if mine is None and stat == "p99":
        need = max(p99_min, min_requests(_STAT_Q[stat], k))
        if completed < need:
            return (
                None,
                None,
                f"too few requests for p99: n={completed:,}; without records a p99 needs {need:,}",
            )
        if len(refs) < 3:
            return (
                None,
                None,
                "no records: the noise of a p99 is unknown (it needs the records or 3 baselines)",
            )

    def half(noise: RunNoise | None, value: float, bad: bool) -> float | None:
        if noise is None:
            return None
        upper = (sign > 0) != bad  # the end of the interval on the side that matters
        if (iv := noise.intervals.get(metric)) is not None:
            return (iv.hi - iv.est) if upper else (iv.est - iv.lo)
        e2el = noise.intervals.get("mean_e2el_ms")
        if throughput and noise.closed_loop and e2el is not None and e2el.est > 0:
            return abs(value) * ((e2el.est - e2el.lo) if bad else (e2el.hi - e2el.est)) / e2el.est
        return None

    d_new = half(mine, new, True)
    d_refs = [d for noise, v in refs if (d := half(noise, v, False)) is not None]
    d_ref = statistics.median(d_refs) * (1.2533 if len(d_refs) >= 3 else 1.0) / math.sqrt(len(d_refs)) if d_refs else None  # fmt: skip
    if d_new is not None or d_ref is not None:
        a = d_new if d_new is not None else d_ref
        b = d_ref if d_ref is not None else d_new
        return math.hypot(a or 0.0, b or 0.0), "within-run CI", None
    if stat == "mean" and reported_se is not None:
        return k * math.sqrt(2.0) * reported_se, "tool-reported, no records", None
    return None, None, None
