"""One semantics, two engines: the local engine against a real Prometheus on the same samples.

A small OpenMetrics bundle (counters with resets, a 3-bucket histogram, gauges with a gap
longer than the 5 min lookback; ~15 s scrapes with jitter and lost scrapes, so extrapolation
takes every branch) is backfilled with ``promtool tsdb create-blocks-from openmetrics``; a
Prometheus started on those blocks answers ``to_promql(expr)``; the local engine answers
``expr`` over the same text parsed by :func:`perfkit.sources.openmetrics.parse_text`. Every
series, every step and every value must agree (values within 1e-9 relative).
"""

from __future__ import annotations

import math
import random
import shutil
import subprocess
from datetime import UTC, datetime

import polars as pl
import pytest
import requests
from servers import require_binary, serving

from perfkit.engine import ops
from perfkit.engine.local import LocalEngine
from perfkit.engine.promql import to_promql
from perfkit.lab.servers import free_port
from perfkit.sources.openmetrics import parse_text

pytestmark = pytest.mark.integration

PROMETHEUS = shutil.which("prometheus") or "/usr/bin/prometheus"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
B = 1_795_996_800  # a multiple of 7200 s, so the whole bundle lands in one 2 h block
SCRAPES = 121  # 0..1800 s at 15 s
REL = 1e-9


# -- the bundle ------------------------------------------------------------------------------


def _scrape_times(salt: int, lost: set[int] = frozenset()) -> list[tuple[int, float]]:
    """(k, seconds) of each kept scrape: 15 s apart, jittered by up to ±1 s (whole ms)."""
    out = []
    for k in range(SCRAPES):
        if k in lost or (k * 31 + salt) % 23 == 0:  # a few lost scrapes everywhere
            continue
        jitter_ms = (k * 7919 + salt * 104_729) % 2001 - 1000
        out.append((k, round(B + 15 * k + jitter_ms / 1000, 3)))
    return out


def bundle_text() -> str:
    rng = random.Random(20261130)
    lines: list[str] = ["# TYPE req counter"]
    for salt, (labels, start, reset_at) in enumerate(
        [
            ('job="api",instance="a"', 3.0, 60),  # starts near zero: durationToZero matters
            ('job="api",instance="b"', 5000.0, 90),
            ('job="batch",instance="c"', 120.0, None),
        ]
    ):
        value = start
        for k, t in _scrape_times(salt):
            if k == reset_at:
                value = float(rng.randint(0, 4))  # a restart: the counter starts again
            else:
                value += rng.randint(0, 40)
            lines.append(f"req_total{{{labels}}} {value!r} {t!r}")

    lines.append("# TYPE lat histogram")
    bounds = ("0.25", "1", "+Inf")
    for salt, instance in enumerate(("a", "b"), start=3):
        cum = [0.0, 0.0, 0.0]
        total = 0.0
        for k, t in _scrape_times(salt):
            idle = 70 <= k <= 95  # no traffic: every bucket rate 0 -> histogram_quantile NaN
            for _ in range(0 if idle else rng.randint(1, 12)):
                v = rng.choice((rng.uniform(0.01, 0.25), rng.uniform(0.25, 1.0), rng.uniform(1.0, 4.0)))
                for i, le in enumerate((0.25, 1.0, math.inf)):
                    if v <= le:
                        cum[i] += 1
                total += v
            for le, c in zip(bounds, cum, strict=True):
                lines.append(f'lat_bucket{{instance="{instance}",le="{le}"}} {c!r} {t!r}')
            lines.append(f'lat_count{{instance="{instance}"}} {cum[-1]!r} {t!r}')
            lines.append(f'lat_sum{{instance="{instance}"}} {total!r} {t!r}')

    # a histogram whose le="1" series alone loses scrapes: at some steps rate() has no value
    # for that bucket, which histogram_quantile must then leave out (not count as 0)
    lines.append("# TYPE part histogram")
    cum = [0.0, 0.0, 0.0]
    flaky = {k for k in range(SCRAPES) if k % 7 in (2, 3)}
    for k, t in _scrape_times(9):
        for _ in range(rng.randint(0, 9)):
            v = rng.uniform(0.0, 2.0)
            for i, le in enumerate((0.5, 1.0, math.inf)):
                if v <= le:
                    cum[i] += 1
        for le, c in zip(("0.5", "1", "+Inf"), cum, strict=True):
            if not (le == "1" and k in flaky):
                lines.append(f'part_bucket{{le="{le}"}} {c!r} {t!r}')

    lines.append("# TYPE queue_depth gauge")
    for salt, instance in enumerate(("a", "b"), start=5):
        lost = set(range(50, 75)) if instance == "b" else set()  # 6+ min silent: lookback runs out
        for _, t in _scrape_times(salt, lost):
            lines.append(f'queue_depth{{instance="{instance}"}} {float(rng.randint(0, 30))!r} {t!r}')
    return "\n".join(lines) + "\n# EOF\n"


# -- Prometheus ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    """(Prometheus base URL, LocalEngine) over the same bundle."""
    require_binary("prometheus")
    require_binary("promtool")
    root = tmp_path_factory.mktemp("prometheus")
    text = bundle_text()
    (root / "bundle.om").write_text(text)
    data = root / "data"
    made = subprocess.run(
        [PROMTOOL, "tsdb", "create-blocks-from", "openmetrics", str(root / "bundle.om"), str(data)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    (root / "prometheus.yml").write_text("global: {scrape_interval: 15s}\nscrape_configs: []\n")
    port = free_port()
    argv = [
        PROMETHEUS,
        f"--config.file={root / 'prometheus.yml'}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=3650d",
    ]
    url = f"http://127.0.0.1:{port}"
    with serving(argv, url, root / "prometheus.log"):
        # promtool's backfill writes no staleness markers: this Prometheus answers instant selectors with
        # the plain 5-minute lookback, which is what the local engine gives without its staleness
        # emulation (tests/integration/test_staleness_live.py compares that emulation with live scrapes)
        yield url, LocalEngine(parse_text(text, require_eof=True), staleness=False)


# -- comparison ------------------------------------------------------------------------------

Key = tuple[frozenset[tuple[str, str]], int]


def _labels(metric: dict[str, str]) -> frozenset[tuple[str, str]]:
    # Prometheus keeps __name__ on plain selectors; frames carry the name outside. An empty
    # label is an absent one in Prometheus.
    return frozenset((k, v) for k, v in metric.items() if k != "__name__" and v not in ("", None))


def _prometheus(url: str, path: str, params: dict[str, str]) -> dict[Key, float]:
    resp = requests.get(f"{url}/api/v1/{path}", params=params, timeout=30)
    body = resp.json()
    assert resp.status_code == 200 and body["status"] == "success", (params, body)
    out: dict[Key, float] = {}
    for item in body["data"]["result"]:
        pairs = item["values"] if "values" in item else [item["value"]]
        for t, v in pairs:
            out[(_labels(item["metric"]), round(float(t) * 1000))] = float(v)
    return out


def _local(frame) -> dict[Key, float]:
    labels = [c for c in frame.columns if c not in ("ts", "value")]
    out: dict[Key, float] = {}
    for row in frame.with_columns(frame["ts"].dt.epoch("ms").alias("ts")).iter_rows(named=True):
        key = (_labels({k: row[k] for k in labels}), int(row["ts"]))
        assert key not in out, f"duplicate local series/step {key}"
        out[key] = row["value"]
    return out


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12)


def _assert_agree(expr: ops.Expr, prom: dict[Key, float], local: dict[Key, float], *, at_least: int) -> None:
    promql = to_promql(expr)
    only_prom = sorted(set(prom) - set(local), key=repr)[:5]
    only_local = sorted(set(local) - set(prom), key=repr)[:5]
    assert not only_prom and not only_local, f"{promql}: only Prometheus {only_prom}; only local {only_local}"
    bad = [(k, prom[k], local[k]) for k in prom if not _same(prom[k], local[k])]
    assert not bad, f"{promql}: {len(bad)} of {len(prom)} values differ, e.g. {bad[:5]}"
    assert len(prom) >= at_least, f"{promql}: only {len(prom)} points; the comparison would prove little"


def _ts(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


REQ, BUCKET = ops.Selector("req_total"), ops.Selector("lat_bucket")
GAUGE = ops.Selector("queue_depth")

RANGE_EXPRESSIONS = [
    ops.rate(REQ, 60),
    ops.rate(REQ, 300),
    ops.increase(REQ, 120),
    ops.increase(REQ.where(instance="a"), 45),
    ops.sum_by(ops.rate(REQ, 60), "job"),
    ops.sum_by(ops.rate(REQ, 60)),
    ops.aggregate("avg", ops.rate(REQ, 120), "job"),
    ops.aggregate("max", ops.rate(REQ, 120), "job"),
    ops.aggregate("min", ops.increase(REQ, 120)),
    ops.aggregate("count", ops.rate(REQ, 120), "job"),
    ops.sum_by(ops.rate(BUCKET, 60), "le"),
    ops.histogram_quantile(0.95, ops.sum_by(ops.rate(BUCKET, 60), "le")),
    ops.histogram_quantile(0.5, ops.sum_by(ops.rate(BUCKET, 120), "le", "instance")),
    ops.histogram_quantile(0.99, ops.sum_by(ops.increase(BUCKET, 300), "le")),
    ops.histogram_quantile(0.9, BUCKET),
    ops.histogram_quantile(0.912345678, ops.sum_by(ops.rate(BUCKET, 60), "le")),  # q in full
    ops.histogram_quantile(0.5, ops.sum_by(ops.rate(ops.Selector("part_bucket"), 30), "le")),
    ops.rate(REQ, 52.5),  # a window in milliseconds: rate(req_total[52500ms])
    ops.over_time("avg", GAUGE, 300),
    ops.over_time("max", GAUGE, 300),
    ops.over_time("min", GAUGE, 120),
    ops.over_time("sum", GAUGE, 120),
    ops.over_time("count", GAUGE, 60),
    ops.over_time("last", GAUGE, 60),
    ops.over_time("avg", ops.Selector("lat_count"), 90),
    GAUGE,
    ops.sum_by(GAUGE),
    ops.ratio(ops.rate(ops.Selector("lat_sum"), 120), ops.rate(ops.Selector("lat_count"), 120)),
    ops.ratio(
        ops.sum_by(ops.rate(ops.Selector("lat_sum"), 300)),
        ops.sum_by(ops.rate(ops.Selector("lat_count"), 300)),
    ),
]


@pytest.mark.parametrize("expr", RANGE_EXPRESSIONS, ids=to_promql)
@pytest.mark.parametrize(
    ("start", "end", "step"),
    [(B, B + 1800, 15), (B + 67.3, B + 1795.9, 20)],  # on the scrape grid, and off it
    ids=["aligned", "misaligned"],
)
def test_range_queries_agree(servers, expr, start, end, step):
    url, engine = servers
    prom = _prometheus(
        url,
        "query_range",
        {"query": to_promql(expr), "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step)},
    )
    local = _local(engine.range(expr, _ts(start), _ts(end), step))
    _assert_agree(expr, prom, local, at_least=20)


INSTANT_EXPRESSIONS = [
    ops.rate(REQ, 60),
    ops.increase(REQ, 1800),  # the whole bundle, across both resets
    ops.histogram_quantile(0.95, ops.sum_by(ops.increase(BUCKET, 1800), "le")),
    ops.over_time("avg", GAUGE, 1800),
    GAUGE,
]
# How far back each instant expression reaches (its range; a bare selector: the 5 min lookback).
INSTANT_REACH_S = [60, 1800, 1800, 1800, 300]


@pytest.mark.parametrize(
    ("expr", "reach_s"),
    list(zip(INSTANT_EXPRESSIONS, INSTANT_REACH_S, strict=True)),
    ids=[to_promql(e) for e in INSTANT_EXPRESSIONS],
)
def test_instant_queries_agree(servers, expr, reach_s):
    url, engine = servers
    # inside the data, at its end, and a while after it (only the lookback is left)
    for at in (B + 601.234, B + 1234.567, B + 1800, B + 1900.5, B + 2150):
        prom = _prometheus(url, "query", {"query": to_promql(expr), "time": f"{at:.3f}"})
        local = _local(engine.instant(expr, _ts(at)))
        # Samples are required wherever the expression still reaches the data (30 s of margin for
        # the scrapes' jitter and lost scrapes); only past its reach may both sides be empty.
        past_end = at - (B + 1800)
        _assert_agree(expr, prom, local, at_least=1 if past_end + 30 < reach_s else 0)


def test_lookback_edge_is_inclusive(servers):
    """A sample exactly 5 min old still answers an instant selector in Prometheus 2.x."""
    url, engine = servers
    b = engine.store.get("queue_depth").filter(pl.col("instance") == "b")
    ts_ms = b["ts"].dt.epoch("ms").to_list()
    before_gap = max(t for t in ts_ms if t < (B + 15 * 50) * 1000)
    for at_ms in (before_gap + 300_000, before_gap + 300_001):
        prom = _prometheus(url, "query", {"query": to_promql(GAUGE), "time": f"{at_ms / 1000:.3f}"})
        local = _local(engine.instant(GAUGE, _ts(at_ms / 1000)))
        _assert_agree(GAUGE, prom, local, at_least=1)
        b_seen = {k for k, _ in prom if ("instance", "b") in k}
        assert bool(b_seen) == (at_ms == before_gap + 300_000)


def test_binary_operator_needs_identical_label_sets(servers):
    """rate by (job, instance) / sum by (job): no one-to-one match, so nothing, in both engines."""
    url, engine = servers
    expr = ops.ratio(ops.rate(REQ, 120), ops.sum_by(ops.rate(REQ, 120), "job"))
    params = {"query": to_promql(expr), "start": str(B), "end": str(B + 1800), "step": "30"}
    prom = _prometheus(url, "query_range", params)
    local = _local(engine.range(expr, _ts(B), _ts(B + 1800), 30))
    assert prom == {} and local == {}


def test_the_bundle_takes_every_branch(servers):
    """Guards against a bundle too tame to prove anything."""
    url, engine = servers
    # a counter reset inside the window: increase over it exceeds last - first
    prom = _prometheus(
        url, "query", {"query": 'increase(req_total{instance="a"}[30m])', "time": str(B + 1800)}
    )
    (total,) = prom.values()
    raw = engine.raw("req_total", _ts(B), _ts(B + 1800)).filter(pl.col("instance") == "a")
    assert total > raw["value"][-1] - raw["value"][0]
    # the idle stretch gives NaN quantiles, and the gauge gap outlives the lookback
    q = _prometheus(
        url,
        "query_range",
        {
            "query": to_promql(ops.histogram_quantile(0.95, ops.sum_by(ops.rate(BUCKET, 60), "le"))),
            "start": str(B),
            "end": str(B + 1800),
            "step": "15",
        },
    )
    assert any(math.isnan(v) for v in q.values()) and any(not math.isnan(v) for v in q.values())
    gauge = _prometheus(
        url,
        "query_range",
        {"query": 'queue_depth{instance="b"}', "start": str(B), "end": str(B + 1800), "step": "15"},
    )
    assert len(gauge) < SCRAPES - 1
