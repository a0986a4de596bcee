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
import tempfile
from pathlib import Path
from typing import Any

from perfkit.errors import ConfigError
from perfkit.sources.safeio import read_capped

SCHEMA = "perfkit.bench/1"
MAX_RESULT_BYTES = 8 * 1024 * 1024
"""perfkit's own result is a few kilobytes (per-request data is in the Parquet file). A larger file
can only be another tool's (``vllm bench serve --save-detailed`` arrays): the importers read it,
under their own bound."""
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


class ResultError(ConfigError):
    """A result file that cannot be used: names the file and the key."""


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
    ``index`` picks one result of a file holding several: a guidellm sweep, vLLM's --append-result)."""
    p = Path(path)
    doc = None
    try:
        if p.stat().st_size <= MAX_RESULT_BYTES:
            doc = json.loads(read_capped(p, MAX_RESULT_BYTES).decode("utf-8"))
    except OSError as exc:
        raise ResultError(
            f"{p}: cannot read: {getattr(exc, 'reason', None) or exc.strerror or exc}"
        ) from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        pass  # maybe another tool's (JSON lines, a BOM): the importers say what is wrong
    if isinstance(doc, dict) and doc.get("schema") == SCHEMA:
        return check(doc, str(p))
    from perfkit.loadgen.importers import read_foreign

    return check(read_foreign(p, index=index), str(p))


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
