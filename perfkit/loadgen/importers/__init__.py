"""Another load tester's result as a ``perfkit.bench/1`` document.

:func:`detect` names the tool; :func:`convert` gives one document (``index`` picks one benchmark of
a guidellm sweep); :func:`convert_all` gives each benchmark; :func:`read_foreign` reads a file
(bounded; vLLM's ``--append-result`` lines; inference-perf's ``config.yaml`` beside its report).
One module per tool (``vllm``, ``guidellm``, ``inference_perf``, ``aiperf``: AIPerf's JSON and CSV
exports and genai-perf's JSON and CSV); ``_common`` reads the foreign
document with the key path in every message. Errors: :class:`ForeignResultError` (a
:class:`~perfkit.loadgen.result.ResultError`), one line ``file: key.path: what``.

Each tool defines the metrics its own way (``reference/loadtest.md`` §3); they are mapped onto
perfkit's (§6). Every mapping that is not one-to-one is in the document's ``source.notes`` and in
this table; what a tool does not report stays null, and a run with nothing completed has no
latency figures (null, never the 0.0 a tool may write). A figure the tool states (a throughput) is
the document's value as the tool reported it; perfkit's own recomputation of it (totals over the
duration) is kept in ``source.recomputed`` and named in the notes when they differ by over 0.5 %.
A converted document has ``records: null``.
AIPerf's and genai-perf's mapping is in :mod:`perfkit.loadgen.importers.aiperf`.

| perfkit | vLLM ``bench serve --save-result`` | guidellm report, ``benchmarks[i]`` | inference-perf ``*_lifecycle_metrics.json`` |
|---|---|---|---|
| TTFT | ``*_ttft_ms``: first chunk with ``choices``, which may hold no token | ``time_to_first_token_ms`` | ``time_to_first_token`` (s) |
| TPOT (request-weighted) | ``*_tpot_ms`` | ``inter_token_latency_ms`` (the TPOT formula, token-weighted): only if output length CV <= 0.10; ``time_per_output_token_ms`` includes TTFT: not mapped | ``time_per_output_token`` (s); n from the client tokenizer unless ``use_server_output_tokens``; only if (E2EL - TTFT) / (TPOT x (n - 1)) of the means is within 1/1.5..1.5 (before 0.3 every SSE line was timed: 2) |
| ITL (token-weighted) | ``*_itl_ms`` are chunk gaps: used only at one token per chunk (``--save-detailed`` arrays, else no speculative decoding and mean ITL / TPOT < 1.5) | mean only: ``inter_token_latency_ms`` mean = decode time / tokens | ``inter_token_latency`` (s): mean always; distribution only if ``min`` > 0 (no two tokens shared a chunk) |
| ITL (chunk) | ``*_itl_ms`` | - | as ITL when ``min`` > 0 |
| E2EL | ``*_e2el_ms``, else ``latencies`` (s; a failed request's is 0) | ``request_latency`` (s) ends with the response, not the last content chunk | ``request_latency`` (s), same caveat |
| tokens per chunk | ``output_lens`` / (``len(itls)`` + 1), ``--save-detailed`` | ``output_tokens_per_iteration`` | 1 when ITL ``min`` > 0 |
| throughput | as written | ``requests_per_second`` etc. (``successful``, mean) | ``throughput`` (totals / run time) |
| duration | ``duration``, else completed / ``request_throughput`` | ``duration`` | ``benchmark_time_seconds``, else successes / ``requests_per_sec`` (before 0.5) |
| peak output tok/s | ``max_output_tokens_per_s`` counts chunks: kept at one token per chunk | - | - |
| goodput | ``request_goodput`` (benchmark_serving.py: ``request_goodput:``; the SLOs are not saved) | ``slo_attainment`` x judged, SLOs from ``config.slo`` | ``goodput_metrics.good_requests``, SLOs from ``config.yaml`` |
| attainment | met / sent (vLLM judges completed requests) | met / sent (guidellm: over judged requests) | met / sent (inference-perf: over successes) |
| errors | ``errors`` text classified (``--save-detailed``), else ``other`` | errored: ``other``; incomplete: ``cancelled`` | ``failures.by_label``: HTTP code, ``Timeout``, ``Connection Error`` |
| load | ``request_rate``, ``burstiness``, ``max_concurrency`` | ``config.strategy`` | ``load_summary`` (+ ``config.yaml``) |
| model, labels, start | ``model_id``; ``--metadata`` keys; ``benchmark_start_time_unix`` where written | ``config.backend.model`` (0.2-0.4: ``worker.backend_model``); ``config.metadata.labels``; ``start_time`` | ``config.yaml``: ``server.model_name``; no start |
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from perfkit.loadgen.importers._common import MAX_ITEMS, ForeignResultError, Node, clean
from perfkit.loadgen.importers.aiperf import convert_aiperf, is_aiperf, read_csv
from perfkit.loadgen.importers.guidellm import convert_guidellm
from perfkit.loadgen.importers.inference_perf import convert_inference_perf
from perfkit.loadgen.importers.vllm import convert_vllm
from perfkit.sources.safeio import RefusedFile, read_capped
from perfkit.sources.safeyaml import load_yaml

__all__ = [
    "MAX_FILE_BYTES",
    "TOOLS",
    "ForeignResultError",
    "convert",
    "convert_all",
    "detect",
    "read_foreign",
]

TOOLS = ("vllm", "guidellm", "inference-perf", "aiperf")
MAX_FILE_BYTES = 128 * 2**20
"""A ``--save-detailed`` vLLM file of 100k requests is tens of MB; a larger file is refused unread."""
_SPACE = re.compile(r"\s*")


def _skip_space(text: str, pos: int) -> int:
    m = _SPACE.match(text, pos)
    return m.end() if m else pos


def detect(doc: Any) -> str | None:
    """``"vllm"``, ``"guidellm"``, ``"inference-perf"`` or ``"aiperf"`` (AIPerf, genai-perf) for a
    result of that tool, else None (a perfkit document is none of them). A vLLM result is a flat
    object with its numbers (``request_throughput``, ``mean_ttft_ms``), or ``completed`` and
    ``duration``: variants written by forks and scripts may lack some keys."""
    if not isinstance(doc, dict) or "schema" in doc:
        return None
    benches = doc.get("benchmarks")
    if isinstance(benches, list) and benches and isinstance(benches[0], dict) and "metrics" in benches[0]:
        return "guidellm"
    if all(isinstance(doc.get(k), dict) for k in ("successes", "failures", "load_summary")):
        return "inference-perf"
    if is_aiperf(doc):
        return "aiperf"
    numbers = [doc.get(k) for k in ("request_throughput", "mean_ttft_ms")]
    if any(isinstance(v, int | float) and not isinstance(v, bool) for v in numbers) or (
        "completed" in doc and "duration" in doc
    ):
        return "vllm"
    return None


def convert(
    doc: Any, source_name: str, *, index: int | None = None, config: dict[str, Any] | None = None
) -> dict[str, Any]:
    """One ``perfkit.bench/1`` document from another tool's result ``doc`` (read from the file
    ``source_name``). A guidellm report of several benchmarks (a sweep) needs ``index``; an
    inference-perf report takes its run's ``config.yaml`` as ``config`` (model, SLOs, load type).
    Raises :class:`ForeignResultError` naming the file and the key path."""
    tool = _tool(doc, source_name)
    root = Node(doc, "", source_name)
    if tool == "vllm":
        return convert_vllm(root, source_name)
    if tool == "inference-perf":
        return convert_inference_perf(root, source_name, config)
    if tool == "aiperf":
        return convert_aiperf(root, source_name)
    n = len(root.items("benchmarks"))
    if index is None and n > 1:
        root.fail(
            f"{n} benchmarks (a sweep): choose one with index 0..{n - 1} (perfkit's --index)", "benchmarks"
        )
    if index is not None and not 0 <= index < n:
        root.fail(f"no benchmark {index}: the report holds {n} (index 0..{n - 1})", "benchmarks")
    return convert_guidellm(root, source_name, index or 0)


def convert_all(doc: Any, source_name: str, *, config: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every benchmark of ``doc`` as a document (one for vLLM and inference-perf results)."""
    if _tool(doc, source_name) != "guidellm":
        return [convert(doc, source_name, config=config)]
    root = Node(doc, "", source_name)
    return [convert_guidellm(root, source_name, i) for i in range(len(root.items("benchmarks")))]


def _tool(doc: Any, name: str) -> str:
    tool = detect(doc)
    if tool is None:
        keys = (
            ", ".join(clean(str(k))[:30] for k in list(doc)[:8])
            if isinstance(doc, dict)
            else type(doc).__name__
        )
        raise ForeignResultError(
            f"{name}: not a vllm bench serve, guidellm, inference-perf or aiperf result "
            f"(found: {keys or 'nothing'})"
        )
    return tool


def read_foreign(path: str | Path, *, index: int | None = None) -> dict[str, Any]:
    """Read and convert another tool's result file (see :func:`convert`); an AIPerf CSV export
    too. A vLLM file written with
    ``--append-result`` holds one result per line: ``index`` picks one. An inference-perf report's
    ``config.yaml`` beside it is read too (model, SLOs, load type)."""
    p, name = Path(path), str(path)
    try:
        raw = read_capped(p, MAX_FILE_BYTES)
    except RefusedFile as exc:
        raise ForeignResultError(f"{name}: refused: {exc.reason}") from None
    except OSError as exc:
        raise ForeignResultError(f"{name}: cannot read ({exc.strerror or type(exc).__name__})") from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ForeignResultError(f"{name}:{line}: not UTF-8 text") from None
    if text.lstrip().startswith("Metric,"):  # AIPerf's (or genai-perf's) CSV export
        return convert(read_csv(text, name), name)
    docs: list[Any] = []
    pos, decoder = _skip_space(text, 0), json.JSONDecoder()
    try:
        while pos < len(text) and len(docs) <= MAX_ITEMS:
            doc, pos = decoder.raw_decode(text, pos)
            docs.append(doc)
            pos = _skip_space(text, pos)
    except json.JSONDecodeError as exc:
        raise ForeignResultError(f"{name}:{exc.lineno}: not JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise ForeignResultError(f"{name}: not JSON: nested too deeply") from None
    if pos < len(text):
        raise ForeignResultError(f"{name}: more than {MAX_ITEMS} appended results")
    if not docs:
        raise ForeignResultError(f"{name}: empty file")
    if len(docs) > 1:  # vllm bench serve --append-result
        if index is None or not 0 <= index < len(docs):
            raise ForeignResultError(
                f"{name}: {len(docs)} appended results: choose one with index 0..{len(docs) - 1}"
            )
        return convert(docs[index], name)
    config = None
    if detect(docs[0]) == "inference-perf" and (p.parent / "config.yaml").is_file():
        loaded = load_yaml(p.parent / "config.yaml")
        config = loaded if isinstance(loaded, dict) else None
    return convert(docs[0], name, index=index, config=config)
