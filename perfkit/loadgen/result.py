"""The result document of a load test (``perfkit.bench/1``): read, check, write.

One JSON file per run. Its top level carries the summary under the names ``vllm bench serve
--save-result`` writes (``completed``, ``mean_ttft_ms``, ``p99_itl_ms``, ``request_throughput`` ...),
so a dashboard or script built for vLLM's files reads perfkit's; perfkit's own fields sit beside
them (``percentiles``, ``goodput``, ``errors``, ``load``, ``meta``, ``validity``, ``server``). The
per-request records are a Parquet file beside it, named in ``records``.

:func:`read_result` also takes another tool's result (vLLM, guidellm, inference-perf) and converts
it (:mod:`perfkit.loadgen.importers`), so ``baseline add`` and ``gate`` take either.
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from perfkit.errors import ResultError
from perfkit.sources.safeio import RefusedFile, read_capped, size_text
from perfkit.sources.safejson import UnsafeJson, check_json_bounds, load_json_bounded

SCHEMA = "perfkit.bench/1"
MAX_RESULT_BYTES = 8 * 1024 * 1024
"""perfkit's own result is a few kilobytes (per-request data is in the Parquet file). A larger file
can only be another tool's (``vllm bench serve --save-detailed`` arrays): the importers read it,
under their own bound."""
MAX_INPUT_BYTES = 128 * 2**20
"""Largest file read as a result: the importers' bound (``vllm bench serve --save-detailed``)."""
MAX_VALUES = 4_000_000
"""JSON values a result file may hold (a detailed vLLM file of 15,000 requests of 256 tokens holds
about 4 million). Memory follows values, not bytes: 4 million two-letter strings, the costliest
value per byte, peaked at 420 MB through ``perfkit gate`` (measured), where a 120 MB file of ``{}``
took 3.2 GB (issue 22 M10); more is refused by a count that builds nothing (260 MB for that file)."""
_OWN_SCHEMA = re.compile(rb'"schema"\s*:\s*"perfkit\.bench/1"')
METRICS = ("ttft", "tpot", "itl", "e2el")
STATS = ("mean", "median", "std", "p99")
COUNTS = ("completed", "failed")
NUMBERS = (
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "max_output_tokens_per_s",
    "request_goodput",
    *(f"{s}_{m}_ms" for m in METRICS for s in STATS),
)
OBJECTS = ("load", "meta", "validity", "errors")


def _number_ok(v: Any) -> bool:
    return v is None or (isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v))


def check(doc: Any, name: str) -> dict[str, Any]:
    """``doc`` as a ``perfkit.bench/1`` document, or :class:`ResultError` naming ``name`` and the key."""
    if not isinstance(doc, dict):
        raise ResultError(f"{name}: expected a JSON object at the top level")
    if doc.get("schema") != SCHEMA:
        raise ResultError(f"{name}: schema: expected {SCHEMA!r}, found {str(doc.get('schema'))[:40]!r}")
    for key in COUNTS:
        v = doc.get(key)
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ResultError(f"{name}: {key}: expected a count, found {str(v)[:40]!r}")
    for key in NUMBERS:
        if not _number_ok(doc.get(key)):
            raise ResultError(
                f"{name}: {key}: expected a finite number or null, found {str(doc[key])[:40]!r}"
            )
    for key in OBJECTS:
        if not isinstance(doc.get(key), dict):
            raise ResultError(f"{name}: {key}: expected an object")
    pct = doc.get("percentiles", {})
    if not isinstance(pct, dict):
        raise ResultError(f"{name}: percentiles: expected an object")
    for metric, by_q in pct.items():
        if not isinstance(by_q, dict) or not all(_number_ok(v) for v in by_q.values()):
            raise ResultError(f"{name}: percentiles.{str(metric)[:40]}: expected numbers by percentile")
    if not isinstance(doc["validity"].get("valid"), bool):
        raise ResultError(f"{name}: validity.valid: expected true or false")
    return doc


def read_result(path: str | os.PathLike[str], *, index: int | None = None) -> dict[str, Any]:
    """A result file: perfkit's own, or another tool's converted (``source`` says from what;
    ``index`` picks one result of a file holding several: a guidellm sweep, vLLM's --append-result).

    Read within bounds (:mod:`perfkit.sources.safejson`): a UTF-8 byte-order mark is accepted; a
    document nested too deep, holding too many values (:data:`MAX_VALUES`) or an integer beyond 64
    bits is refused, naming the file and the key, whoever wrote it. perfkit's own result must be
    strict JSON (it is written with ``allow_nan=False``): ``NaN`` anywhere in it is refused."""
    p = Path(path)
    name = str(p)
    try:
        raw = read_capped(p, MAX_INPUT_BYTES)
    except RefusedFile as exc:
        raise ResultError(f"{p}: refused: {exc.reason}") from None
    except OSError as exc:
        raise ResultError(f"{p}: cannot read: {exc.strerror or type(exc).__name__}") from None
    try:
        check_json_bounds(raw, source=name, max_values=MAX_VALUES)
    except UnsafeJson as exc:
        raise ResultError(str(exc)) from None
    doc: Any = None
    own = _OWN_SCHEMA.search(raw) is not None
    if own and len(raw) > MAX_RESULT_BYTES:
        raise ResultError(
            f"{p}: a perfkit result of {size_text(len(raw))}, over the {size_text(MAX_RESULT_BYTES)} "
            "one can be (the per-request data belongs in the records file)"
        )
    if own or len(raw) <= MAX_RESULT_BYTES:
        try:
            doc = load_json_bounded(raw, source=name, max_values=MAX_VALUES)
        except UnsafeJson as exc:
            if own:  # perfkit's own, broken: say what is wrong (NaN is not in a result perfkit wrote)
                raise ResultError(str(exc)) from None
            # another tool's: JSON lines (vLLM's --append-result), NaN: the importers read those
    if isinstance(doc, dict) and doc.get("schema") == SCHEMA:
        return check(doc, name)
    del doc, raw
    from perfkit.loadgen.importers import read_foreign

    return check(read_foreign(p, index=index), name)


def records_path(result_path: str | os.PathLike[str], doc: dict[str, Any]) -> Path | None:
    """The Parquet file of per-request records beside a result, if it names one (a bare file name)."""
    name = doc.get("records")
    if not isinstance(name, str) or not name or Path(name).name != name:
        return None
    return Path(result_path).parent / name


def write_json(doc: dict[str, Any], path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Write ``doc`` atomically (a temporary file renamed into place); an existing file is kept
    unless ``overwrite``: a result is somebody's measurement."""
    p = Path(path)
    if p.exists() and not overwrite:
        raise ResultError(f"{p}: exists; choose another name (perfkit does not overwrite a result)")
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1, sort_keys=False, allow_nan=False)
            fh.write("\n")
        if not overwrite and p.exists():
            raise ResultError(f"{p}: appeared while writing; kept it, the new result is not written")
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p


# -- reading a metric of a result (the gate, the runbook) ---------------------------------------------


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
    number = _finite(value)
    if number is None:
        raise ValueError(f"{metric} is {str(value)[:40]!r}, not a finite number")
    return number


def _error_rate(doc: Mapping[str, Any]) -> float | None:
    rate = _obj(doc.get("errors")).get("rate")
    if rate is not None:
        number = _finite(rate)
        if number is None or not 0 <= number <= 1:
            raise ValueError(f"errors.rate is {str(rate)[:40]!r}, not a fraction")
        return number
    completed, failed = _finite(doc.get("completed")), _finite(doc.get("failed"))
    if completed is None or failed is None or completed + failed <= 0:
        return None
    return failed / (completed + failed)


def counting_step(kind: str | None, doc: Mapping[str, Any]) -> float:
    """The counting step of a throughput (one request crossing each edge of the measured window: two
    requests over the duration, times tokens per request for tok/s) or of attainment (two of judged)."""
    if kind is None:
        return 0.0
    if kind == "judged":
        judged = _finite(_obj(doc.get("goodput")).get("judged"))
        return 2.0 / judged if judged else 0.0
    duration, completed = _finite(doc.get("duration")), _finite(doc.get("completed"))
    if not duration or not completed:
        return 0.0
    per_request = 1.0
    if kind in ("output_tokens", "total_tokens"):
        tokens = _finite(doc.get("total_output_tokens")) or 0.0
        if kind == "total_tokens":
            tokens += _finite(doc.get("total_input_tokens")) or 0.0
        per_request = tokens / completed
    return 2.0 * per_request / duration


def _finite(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}
