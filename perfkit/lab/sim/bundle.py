"""Write a simulated scenario as an incident bundle (docs/bundle.md)."""

from __future__ import annotations

import csv
import time
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from perfkit.core.frames import iso
from perfkit.lab.sim.engine import Engine
from perfkit.lab.sim.exporters import Recorder
from perfkit.lab.sim.model import ScenarioSpec
from perfkit.lab.sim.series import Series
from perfkit.lab.sim.tellings import LOG_FILE

#: which exporter (and so which metrics/<target>.om file) a family comes from
TARGET_OF = {
    "vllm:": "vllm",
    "sglang:": "sglang",
    "trtllm_": "trtllm",
    "tgi_": "tgi",
    "dynamo_frontend_": "dynamo-frontend",
    "dynamo_component_": "dynamo-worker",
    "nv_": "triton",
    "train_": "train",
    "DCGM_": "dcgm",
    "node_": "node",
}


def _target(family: str) -> str:
    for prefix, target in TARGET_OF.items():
        if family.startswith(prefix):
            return target
    return "other"


def write_metrics(metrics_dir: Path, families: Iterable[Series]) -> int:
    """One OpenMetrics file per exporter (metrics/vllm.om, dcgm.om ...). Returns lines written."""
    by_target: dict[str, list[Series]] = {}
    for series in families:
        by_target.setdefault(_target(series.family), []).append(series)
    return sum(write_openmetrics(metrics_dir / f"{t}.om", fams) for t, fams in sorted(by_target.items()))


def write_openmetrics(path: Path, families: list[Series]) -> int:
    """OpenMetrics text, each family's points written time-major, ending in '# EOF'. Returns lines written."""
    lines: list[str] = []
    for series in families:
        family = series.family
        if series.kind == "counter" and family.endswith("_total"):
            family = family[: -len("_total")]
        lines.append(f"# TYPE {family} {series.kind}")
        if series.help:  # an exporter writes no HELP for a metric nobody described (TGI's some)
            lines.append(f"# HELP {family} {series.help}")
        rows: list[tuple[float, int, str]] = []
        for order, (key, points) in enumerate(series.points.items()):
            sample, *labels = key
            label_text = ",".join(f'{k}="{v}"' for k, v in labels)
            head = f"{sample}{{{label_text}}}" if label_text else sample
            rows.extend((t, order, f"{head} {v} {t:.3f}") for t, v in points)
        rows.sort(key=lambda r: (r[0], r[1]))
        lines.extend(r[2] for r in rows)
    lines.append("# EOF")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def _alerts(spec: ScenarioSpec, records: list[tuple]) -> list[dict]:
    """TTFT P95 over the SLO for 5 minutes → an alert fires; it resolves after 5 minutes back under."""
    slo = spec.slo.get("ttft_p95_s")
    if not slo or not records:
        return []
    rec = np.asarray([(r[0] + r[1] + r[2], r[1] + r[2]) for r in records])  # first-token time, ttft(approx)
    events = []
    firing = False
    above = below = 0
    for minute in range(5, int(spec.duration_s // 60)):
        t = minute * 60.0
        sel = rec[(rec[:, 0] > t - 300) & (rec[:, 0] <= t)]
        if sel.size == 0:
            continue
        p95 = float(np.quantile(sel[:, 1], 0.95))
        if p95 > slo:
            above, below = above + 1, 0
        else:
            above, below = 0, below + 1
        if not firing and above >= 5:
            firing = True
            events.append(
                {
                    "ts": spec.at(t),
                    "kind": "alert",
                    "service": spec.service,
                    "version": "",
                    "detail": f"TTFTP95High firing: p95 TTFT {p95:.2f}s > {slo}s for 5m",
                }
            )
        elif firing and below >= 5:
            firing = False
            events.append(
                {
                    "ts": spec.at(t),
                    "kind": "alert",
                    "service": spec.service,
                    "version": "",
                    "detail": "TTFTP95High resolved",
                }
            )
    return events


def compress(spec: ScenarioSpec, duration_s: float) -> ScenarioSpec:
    """The same story in ``duration_s``: windows, deploys, phases and notes scaled in time (for tests)."""
    k = duration_s / spec.duration_s
    return replace(
        spec,
        duration_s=duration_s,
        baseline=(spec.baseline[0] * k, spec.baseline[1] * k),
        window=(spec.window[0] * k, spec.window[1] * k),
        releases=tuple(replace(r, at_s=r.at_s * k) for r in spec.releases),
        phases=tuple(replace(p, start_s=p.start_s * k, end_s=p.end_s * k) for p in spec.phases),
        notes=tuple((at * k, kind, detail) for at, kind, detail in spec.notes),
    )


def generate(spec: ScenarioSpec, out: Path, *, duration_s: float | None = None) -> dict[str, float]:
    """Simulate ``spec`` and write its bundle into ``out``. Returns timing and size facts."""
    if duration_s is not None and duration_s != spec.duration_s:
        spec = compress(spec, duration_s)
    t0 = time.perf_counter()
    rng = np.random.default_rng(spec.seed)
    recorder = Recorder(spec, rng)
    Engine(spec, recorder, rng).run()
    sim_s = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics").mkdir(exist_ok=True)
    (out / "logs").mkdir(exist_ok=True)
    n_lines = write_metrics(out / "metrics", recorder.out.values())
    log_name = {"vllm": "vllm", "sglang": "sglang", **LOG_FILE}.get(spec.dialect, "trtllm-serve")
    for name, entries in {log_name: recorder.logs, **recorder.side_logs}.items():
        logs = sorted(entries, key=lambda x: x[0])
        (out / "logs" / f"{name}.log").write_text(
            "\n".join(line for _, line in logs) + "\n", encoding="utf-8"
        )

    events: list[dict[str, Any]] = [
        {
            "ts": spec.at(0),
            "kind": "note",
            "service": spec.service,
            "version": spec.initial_version,
            "detail": "running since before the window",
        }
    ]
    for rel in spec.releases:
        if not rel.kind:
            continue  # a change nobody announced: it leaves no event
        events.append(
            {
                "ts": spec.at(rel.at_s),
                "kind": rel.kind,
                "service": spec.service,
                "version": rel.version,
                "detail": rel.detail,
            }
        )
    for at_s, kind, detail in spec.notes:
        events.append(
            {"ts": spec.at(at_s), "kind": kind, "service": spec.service, "version": "", "detail": detail}
        )
    events.extend(_alerts(spec, recorder.records))
    events.sort(key=lambda e: e["ts"])
    with (out / "events.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(["ts", "kind", "service", "version", "detail"])
        for e in events:
            writer.writerow([iso(e["ts"]), e["kind"], e["service"], e["version"], e["detail"]])

    incident = {
        "id": f"INC-{spec.start:%Y%m%d}-{spec.id}",
        "title": spec.title,
        "service": spec.service,
        "model": spec.model,
        "window": {
            "start": iso(spec.at(spec.window[0])),
            "end": iso(spec.at(min(spec.window[1], spec.duration_s))),
        },
        "baseline": {"start": iso(spec.at(spec.baseline[0])), "end": iso(spec.at(spec.baseline[1]))},
        "slo": dict(spec.slo),
        "hardware": {"gpu": spec.gpu, "count": spec.gpu_count, "usd_per_gpu_hour": spec.usd_per_gpu_hour},
        "generator": {
            "scenario": spec.id,
            "seed": spec.seed,
            "note": "simulated by perfkit.lab.sim; see perfkit/lab/sim/model.py",
        },
    }
    (out / "incident.yaml").write_text(yaml.safe_dump(incident, sort_keys=False), encoding="utf-8")
    answer = {"scenario": spec.id, "difficulty": spec.difficulty, "brief": spec.brief, **spec.answer}
    (out / "answer.yaml").write_text(
        yaml.safe_dump(answer, sort_keys=False, allow_unicode=True), encoding="utf-8"
    )
    return {
        "simulate_s": sim_s,
        "write_s": time.perf_counter() - t0 - sim_s,
        "lines": n_lines,
        "requests": len(recorder.records),
    }
