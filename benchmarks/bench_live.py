"""Live sources (issue 3): pushdown vs pulling raw buckets, and a runbook live vs from the bundle.

1. 24 h of p95 TTFT by model at 15 s resolution from a real Prometheus (same server, same run):
   the server computes histogram_quantile (pushdown) vs perfkit pulls every raw bucket sample and
   computes locally. Prints both times and the ratio.
2. The inference runbook against a live Prometheus loaded with a bundle vs against the same bundle
   on disk (papermill, kernel start included). Prints both times and the ratio.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import T0, ttft_om  # noqa: E402

from perfkit.app.runner.run import execute  # noqa: E402
from perfkit.engine import ops  # noqa: E402
from perfkit.engine.local import LocalEngine  # noqa: E402
from perfkit.lab.servers import start  # noqa: E402
from perfkit.sources.http import HttpConfig  # noqa: E402
from perfkit.sources.prometheus import PrometheusClient, PrometheusEngine  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
METRIC = "vllm:time_to_first_token_seconds_bucket"


def pushdown_vs_pull(work: Path) -> None:
    cache = Path(__file__).resolve().parent / ".cache" / "ttft_24h_4models.om"
    if not cache.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(ttft_om(hours=24, models=4, seed=11))
    bundle = work / "bundle24h"
    (bundle / "metrics").mkdir(parents=True)
    shutil.copy(cache, bundle / "metrics" / "ttft.om")
    server = start("prometheus", bundle, work / "prom24h")
    try:
        t_start = datetime.fromtimestamp(T0 + 600, UTC)
        t_end = datetime.fromtimestamp(T0 + 24 * 3600 - 15, UTC)
        expr = ops.histogram_quantile(
            0.95, ops.sum_by(ops.rate(ops.Selector(METRIC), 60), "le", "model_name")
        )
        engine = PrometheusEngine(
            PrometheusClient(HttpConfig(server.url)), start=t_start, end=t_end, dialect="prometheus"
        )
        t = time.perf_counter()
        pushed = engine.range(expr, t_start, t_end, 15)
        push_s = time.perf_counter() - t
        t = time.perf_counter()
        raw = engine.raw(METRIC, datetime.fromtimestamp(T0, UTC), t_end)
        from perfkit.core.frames import MetricStore

        local = LocalEngine(MetricStore({METRIC: raw}, {METRIC: "histogram"})).range(expr, t_start, t_end, 15)
        pull_s = time.perf_counter() - t
        assert pushed.height == local.height, (pushed.height, local.height)
        print(f"24 h p95 TTFT by model at 15 s ({pushed.height:,} points, {raw.height:,} raw bucket samples)")
        print(f"  pushdown (server computes)     {push_s:6.2f} s")
        print(
            f"  pull raw buckets + local       {pull_s:6.2f} s   ratio {pull_s / push_s:5.1f}x (pull / pushdown)"
        )
    finally:
        server.stop()


def live_vs_bundle(work: Path) -> None:
    bundle = REPO / "data" / "scenarios" / "release-regression"
    server = start("prometheus", bundle, work / "prom-rr")
    try:
        window = {
            "start": "2026-11-18T13:50:00Z",
            "end": "2026-11-18T14:35:00Z",
            "baseline_start": "2026-11-18T13:05:00Z",
            "baseline_end": "2026-11-18T13:45:00Z",
        }
        t = time.perf_counter()
        execute(
            "inference_latency",
            work / "live",
            {"bundle": "", "prometheus_url": server.url, "deploys": str(bundle / "events.csv"), **window},
        )
        live_s = time.perf_counter() - t
        t = time.perf_counter()
        execute("inference_latency", work / "disk", {"bundle": str(bundle)})
        disk_s = time.perf_counter() - t
        print("inference runbook, release-regression (papermill, kernel start and render included)")
        print(f"  against the bundle on disk      {disk_s:6.2f} s")
        print(
            f"  against live Prometheus         {live_s:6.2f} s   ratio {live_s / disk_s:5.2f}x (live / disk)"
        )
    finally:
        server.stop()


def main() -> None:
    work = Path(tempfile.mkdtemp(prefix="perfkit-bench-live-"))
    try:
        pushdown_vs_pull(work)
        live_vs_bundle(work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
