"""``perfkit capture``: freeze the evidence of an incident window (and its baseline) into a bundle.

Metrics are read raw from a Prometheus-compatible server (range-vector queries, in chunks) and
written as OpenMetrics that ``promtool tsdb create-blocks-from openmetrics`` accepts: one
contiguous block per family, time-major points, seconds timestamps, ``# EOF``. Metric types are
not stored with backfilled or remote-written data, so they are inferred from the names the
exporters use (``*_total`` counters; ``*_bucket``/``*_count``/``*_sum`` histograms; the rest gauges).

Nothing written carries a credential: the server URL is recorded without ``user:password@``, and
every text field of incident.yaml and events.csv goes through :func:`record_safe`.
"""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import polars as pl
import yaml

from perfkit.core.frames import Window, iso
from perfkit.core.incident import Incident
from perfkit.core.secrets import redact_text, strip_userinfo
from perfkit.errors import ConfigError

#: the serving engines' families (vLLM, SGLang, TensorRT-LLM, Dynamo's frontend, TGI: docs/engines.md),
#: GPUs, hosts and training jobs
DEFAULT_MATCH = (
    r"^(vllm:|sglang:|trtllm_|trtllm:|dynamo_frontend_|tgi_|DCGM_|node_cpu_seconds_total"
    r"|node_network_(receive|transmit)_bytes_total|train_)"
)
LOOKBACK = timedelta(minutes=5)


def _fmt(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v)) if v != int(v) or abs(v) >= 1e15 else str(int(v))


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def families(names: list[str]) -> dict[str, tuple[str, list[str]]]:
    """Group sample names into families: {family: (type, [sample names])}."""
    out: dict[str, tuple[str, list[str]]] = {}
    names_set = set(names)
    for name in sorted(names):
        if name.endswith("_created"):
            continue
        for suffix in ("_bucket", "_count", "_sum"):
            base = name[: -len(suffix)] if name.endswith(suffix) else None
            if base and f"{base}_bucket" in names_set:
                out.setdefault(base, ("histogram", []))[1].append(name)
                break
        else:
            if name.endswith("_total"):
                out[name[: -len("_total")]] = ("counter", [name])
            else:
                out[name] = ("gauge", [name])
    return out


def write_openmetrics(path: Path, frames: dict[str, pl.DataFrame]) -> int:
    """Write sample frames (by sample name) as OpenMetrics; returns the number of samples written."""
    fams = families(list(frames))
    n = 0
    with path.open("w", encoding="utf-8") as fh:
        for family, (kind, samples) in fams.items():
            fh.write(f"# TYPE {family} {kind}\n")
            rows: list[tuple[int, int, str]] = []
            for order, sample in enumerate(samples):
                frame = frames[sample]
                labels = [c for c in frame.columns if c not in ("ts", "value")]
                cols = [frame[c].to_list() for c in labels]
                ts = frame["ts"].cast(pl.Int64).to_list()
                vals = frame["value"].to_list()
                for i in range(frame.height):
                    pairs = ",".join(f'{k}="{_esc(c[i])}"' for k, c in zip(labels, cols, strict=True) if c[i])
                    head = f"{sample}{{{pairs}}}" if pairs else sample
                    rows.append((ts[i], order, f"{head} {_fmt(vals[i])} {ts[i] / 1000:.3f}"))
            rows.sort(key=lambda r: (r[0], r[1]))
            fh.writelines(r[2] + "\n" for r in rows)
            n += len(rows)
        fh.write("# EOF\n")
    return n


def record_safe(value: Any) -> Any:
    """``value`` (nested dicts, lists, strings) fit to be written into a bundle: URLs lose their
    ``user:password@`` and credential-looking text (bearer headers, known token prefixes) becomes
    ``[redacted]``."""
    if isinstance(value, str):
        return redact_text(strip_userinfo(value))
    if isinstance(value, dict):
        return {k: record_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [record_safe(v) for v in value]
    return value


def capture(
    engine: Any,
    incident: Incident,
    out: Path,
    *,
    match: str = DEFAULT_MATCH,
    logs: list[Path] | None = None,
    events: pl.DataFrame | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Write ``out`` as a bundle: incident.yaml, metrics/captured.om, logs/, events.csv. Returns facts."""
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"{out}: not empty; capture writes a new bundle")
    baseline = incident.baseline
    span = Window(
        min(baseline.start, incident.window.start) if baseline else incident.window.start, incident.window.end
    )
    pattern = re.compile(match)
    names = [n for n in engine.metric_names() if pattern.search(n)]
    if not names:
        raise ConfigError(f"no metric in {iso(span.start)} → {iso(span.end)} matches {match!r}")
    (out / "metrics").mkdir(parents=True, exist_ok=True)
    frames: dict[str, pl.DataFrame] = {}
    for i, name in enumerate(names, start=1):
        if progress:
            progress(f"{i}/{len(names)} {name}")
        frame = engine.raw(name, span.start - LOOKBACK, span.end)
        if frame.height:
            frames[name] = frame
    n = write_openmetrics(out / "metrics" / "captured.om", frames)
    n_logs = 0
    if logs:
        (out / "logs").mkdir(exist_ok=True)
        for p in logs:
            shutil.copy2(p, out / "logs" / p.name)
            n_logs += 1
    if events is not None and events.height:
        from perfkit.sources.events import write_events

        write_events(out / "events.csv", [record_safe(dict(r)) for r in events.iter_rows(named=True)])
    from perfkit.sources import nvml

    snap = nvml.snapshot()
    if snap.available:  # captured on a GPU host: freeze the GPUs' state too
        snap.write(out)
    doc = incident.as_dict()
    source = str(getattr(getattr(engine, "client", None), "url", "?"))
    doc["captured"] = {"from": source, "metrics": len(frames), "samples": n}
    doc = record_safe(doc)
    (out / "incident.yaml").write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return {
        "metrics": len(frames),
        "samples": n,
        "logs": n_logs,
        "events": 0 if events is None else events.height,
    }
