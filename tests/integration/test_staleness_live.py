"""Staleness, compared with a Prometheus that scrapes live (so it writes real staleness markers).

A tiny exporter serves a gauge and a counter under ``pod="a"`` for 8 scrapes, then under ``pod="b"``
(the counter starting again from 0: a restart under a new pod) for 8 scrapes, then neither. Prometheus
scrapes it every 100 ms and marks each series stale at the first scrape that lacks it. The raw samples
(what a bundle keeps: ``x[5m]`` never returns markers) go into the local engine; both engines then
answer the same range queries:

* every value Prometheus returns, the local engine returns too;
* the local engine keeps a stopped series at most ``STALE_AFTER_SCRAPES`` intervals after its last
  sample (Prometheus drops it one interval after: the documented tolerance), never longer;
* ``sum(gauge)`` agrees wherever no series is inside that tolerance, and the plain 5-minute lookback
  (``staleness=False``) does not: it sums the stopped pod with its replacement;
* ``sum(rate(counter))`` across the reset and the new pod agrees at every step (range vectors never
  see markers).
"""

from __future__ import annotations

import math
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
import requests
from servers import require_binary, running, wait_until

from perfkit.engine import ops
from perfkit.engine.local import LocalEngine
from perfkit.engine.promql import to_promql
from perfkit.lab.servers import free_port
from perfkit.sources.openmetrics import parse_text

pytestmark = pytest.mark.integration

INTERVAL_S = 0.1
STALE_AFTER_SCRAPES = 2.0  # the documented rule (perfkit.engine.local): "a couple of" intervals, no more
PHASE = 8  # scrapes per pod


class Exporter(BaseHTTPRequestHandler):
    scrapes = 0
    lock = threading.Lock()

    def do_GET(self) -> None:  # noqa: N802 (the http.server API)
        with Exporter.lock:
            n = Exporter.scrapes
            Exporter.scrapes += 1
        lines = ["# TYPE up_marker gauge", f'up_marker{{pod="k"}} {n}']
        if n < 2 * PHASE:
            pod, k = ("a", n) if n < PHASE else ("b", n - PHASE)
            start = 1000 if pod == "a" else 0  # pod b's counter starts again from zero
            lines += [
                "# TYPE g gauge",
                f'g{{pod="{pod}"}} {(10 if pod == "a" else 100) + k}',
                "# TYPE c counter",
                f'c_total{{pod="{pod}"}} {start + 7 * k}',
            ]
        body = ("\n".join(lines) + "\n").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    """(Prometheus URL, raw OpenMetrics text of what it stored) after the exporter ran its three phases."""
    prometheus = require_binary("prometheus")
    root = tmp_path_factory.mktemp("staleness")
    exporter = ThreadingHTTPServer(("127.0.0.1", free_port()), Exporter)
    thread = threading.Thread(target=exporter.serve_forever, daemon=True)
    thread.start()
    port = free_port()
    (root / "prometheus.yml").write_text(
        f"global: {{scrape_interval: {int(INTERVAL_S * 1000)}ms, scrape_timeout: 80ms}}\n"
        "scrape_configs:\n  - job_name: exporter\n"
        f'    static_configs: [{{targets: ["127.0.0.1:{exporter.server_address[1]}"]}}]\n'
    )
    argv = [
        prometheus,
        f"--config.file={root / 'prometheus.yml'}",
        f"--storage.tsdb.path={root / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    url = f"http://127.0.0.1:{port}"
    try:
        with running(argv, root / "prometheus.log") as proc:
            # the last phase: both pods marked stale
            wait_until(
                proc,
                root / "prometheus.log",
                lambda: Exporter.scrapes >= 2 * PHASE + 6,
                timeout_s=30,
                what=f"fewer than {2 * PHASE + 6} scrapes",
            )
            time.sleep(2 * INTERVAL_S)  # the last scrape's samples are committed
            text = _raw_text(url)
            yield url, text
    finally:
        exporter.shutdown()
        exporter.server_close()


def _get(url: str, path: str, params: dict[str, str]) -> list[dict]:
    resp = requests.get(f"{url}/api/v1/{path}", params=params, timeout=10)
    body = resp.json()
    assert resp.status_code == 200 and body["status"] == "success", body
    return body["data"]["result"]


def _raw_text(url: str) -> str:
    """Every stored sample (no staleness markers: a range vector never returns them) as OpenMetrics."""
    now = f"{time.time():.3f}"
    lines = []
    for name, kind in (("g", "gauge"), ("c_total", "counter")):
        lines.append(f"# TYPE {name.removesuffix('_total')} {kind}")
        for item in _get(url, "query", {"query": f"{name}[5m]", "time": now}):
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(item["metric"].items()) if k != "__name__")
            lines += [f"{name}{{{labels}}} {v} {t}" for t, v in item["values"]]
    return "\n".join(lines) + "\n# EOF\n"


def _series(result: list[dict]) -> dict[str, dict[int, float]]:
    """pod (or "" for an aggregate) -> {ts ms: value}."""
    return {
        item["metric"].get("pod", ""): {round(float(t) * 1000): float(v) for t, v in item["values"]}
        for item in result
    }


def _local(frame) -> dict[str, dict[int, float]]:
    out: dict[str, dict[int, float]] = {}
    for row in frame.with_columns(frame["ts"].dt.epoch("ms").alias("ms")).iter_rows(named=True):
        out.setdefault(row.get("pod") or "", {})[int(row["ms"])] = row["value"]
    return out


def _span(engine: LocalEngine) -> tuple[int, int, dict[str, np.ndarray]]:
    frame = engine.store.get("g")
    times = {pod: frame.filter(frame["pod"] == pod)["ts"].dt.epoch("ms").to_numpy() for pod in ("a", "b")}
    return int(times["a"][0]), int(times["b"][-1]), times


def _query(url: str, engine: LocalEngine, expr: ops.Expr, start_ms: int, end_ms: int, step_ms: int):
    prom = _series(
        _get(
            url,
            "query_range",
            {
                "query": to_promql(expr),
                "start": f"{start_ms / 1000:.3f}",
                "end": f"{end_ms / 1000:.3f}",
                "step": f"{step_ms / 1000:.3f}",
            },
        )
    )
    at = lambda ms: datetime.fromtimestamp(ms / 1000, UTC)  # noqa: E731
    local = _local(engine.range(expr, at(start_ms), at(end_ms), step_ms / 1000))
    return prom, local


def test_a_stopped_series_goes_stale_as_in_prometheus(live):
    url, text = live
    engine = LocalEngine(parse_text(text, require_eof=True))
    first, last_b, times = _span(engine)
    assert len(times["a"]) >= PHASE - 1 and len(times["b"]) >= PHASE - 1  # both lives were scraped
    interval = float(np.median(np.diff(times["a"])))
    assert interval == pytest.approx(INTERVAL_S * 1000, rel=0.2)
    tolerance = STALE_AFTER_SCRAPES * interval
    step = 25
    prom, local = _query(url, engine, ops.Selector("g"), first, last_b + 2000, step)
    assert set(prom) == {"a", "b"} and set(local) == {"a", "b"}
    for pod in ("a", "b"):
        for ms, v in prom[pod].items():
            assert local[pod].get(ms) == v, f"pod {pod} at {ms}: Prometheus {v}, local {local[pod].get(ms)}"
        extra = sorted(set(local[pod]) - set(prom[pod]))
        end = times[pod][-1]
        # only just after the series' last sample, within the documented tolerance
        assert all(end < ms <= end + tolerance for ms in extra), (pod, extra[:5], end, tolerance)
        assert max(local[pod]) <= end + tolerance
        assert any(
            ms > end + tolerance for ms in range(first, last_b + 2000, step)
        )  # the query looked past it


def test_sums_count_only_live_series_and_the_plain_lookback_does_not(live):
    url, text = live
    engine = LocalEngine(parse_text(text, require_eof=True))
    plain = LocalEngine(parse_text(text, require_eof=True), staleness=False)
    first, last_b, times = _span(engine)
    interval = float(np.median(np.diff(times["a"])))
    end_a = int(times["a"][-1])
    step = 25
    total = ops.sum_by(ops.Selector("g"))
    prom, local = _query(url, engine, total, first, last_b + 2000, step)
    _, lookback = _query(url, plain, total, first, last_b + 2000, step)
    prom, local, lookback = prom.get("", {}), local.get("", {}), lookback.get("", {})
    settled = [
        ms
        for ms in range(first, last_b + 2000, step)
        if not any(end < ms <= end + STALE_AFTER_SCRAPES * interval for end in (end_a, times["b"][-1]))
    ]
    assert len(settled) >= 60
    for ms in settled:
        assert local.get(ms) == prom.get(ms), (
            f"sum(g) at {ms}: Prometheus {prom.get(ms)}, local {local.get(ms)}"
        )
    # the 5-minute lookback adds the stopped pod a to pod b's values for the rest of the query
    after_a = [ms for ms in settled if end_a + STALE_AFTER_SCRAPES * interval < ms <= times["b"][-1]]
    assert after_a and all(lookback[ms] > prom[ms] for ms in after_a)


def test_rates_across_a_reset_and_a_new_pod_agree_everywhere(live):
    url, text = live
    engine = LocalEngine(parse_text(text, require_eof=True))
    first, last_b, _ = _span(engine)
    expr = ops.sum_by(ops.rate(ops.Selector("c_total"), 1.0))
    prom, local = _query(url, engine, expr, first, last_b + 2000, 25)
    prom, local = prom.get("", {}), local.get("", {})
    assert len(prom) >= 60 and prom.keys() == local.keys()
    bad = [(ms, prom[ms], local[ms]) for ms in prom if not math.isclose(prom[ms], local[ms], rel_tol=1e-9)]
    assert not bad, bad[:5]
    # the reset does not read as a negative rate or a jump of 1000: 7 per scrape throughout
    assert max(prom.values()) < 2 * 7 / INTERVAL_S
