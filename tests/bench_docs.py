"""Hand-made ``perfkit.bench/1`` documents with known values (the fields of the shared result
spec), for the store, gate and runbook tests: one builder, so a field added to the format is added once."""

from __future__ import annotations

from typing import Any


def bench_doc(
    *,
    model: str = "llama",
    started: str = "2025-03-01T10:00:00Z",
    ttft: float = 50.0,
    itl: float = 10.0,
    rps: float = 10.0,
    duration: float = 60.0,
    completed: int = 1200,
    failed: int = 0,
    attainment: float | None = 0.98,
    judged: int = 1200,
    concurrency: int | None = 8,
    shape: str = "concurrency",
    rate: float | None = None,
    valid: bool = True,
    labels: dict[str, str] | None = None,
    error_kind: str = "timeout",
    records: str | None = None,
    **fields: Any,
) -> dict[str, Any]:
    """A perfkit.bench/1 document (shared spec) with known values; ``fields`` overrides top-level ones."""
    out_tokens = 64
    doc: dict[str, Any] = {
        "schema": "perfkit.bench/1",
        "completed": completed,
        "failed": failed,
        "duration": duration,
        "total_input_tokens": completed * 128,
        "total_output_tokens": completed * out_tokens,
        "request_throughput": rps,
        "output_throughput": rps * out_tokens,
        "total_token_throughput": rps * (128 + out_tokens),
        "errors": {
            "total": failed,
            "rate": failed / (completed + failed) if completed + failed else 0.0,
            "by_kind": {error_kind: failed} if failed else {},
        },
        "goodput": None
        if attainment is None
        else {
            "slo_ms": {"ttft": 500},
            "attainment": attainment,
            "judged": judged,
            "met": round(attainment * judged),
        },
        "load": {
            "shape": shape,
            "concurrency": concurrency,
            "rate": rate,
            "prompt_tokens": 128,
            "output_tokens": out_tokens,
            "endpoint": "completions",
        },
        "meta": {"model": model, "started": started, "labels": labels or {}},
        "validity": {
            "valid": valid,
            "reasons": [] if valid else ["client overhead 14 % of ITL"],
            "calibration": {"overhead_ttft_ms": 0.3, "overhead_itl_ms": 0.01},
        },
        "records": records,
        "interrupted": False,
    }
    for stat, factor in (("mean", 1.0), ("median", 1.0), ("std", 0.1), ("p99", 1.3)):
        doc[f"{stat}_ttft_ms"] = ttft * factor
        doc[f"{stat}_tpot_ms"] = itl * factor
        doc[f"{stat}_itl_ms"] = itl * factor
        doc[f"{stat}_e2el_ms"] = (ttft + 63 * itl) * factor
    doc.update(fields)
    return doc
