"""Workload scope: matchers as PromQL reads them, the host join, and scoping a store."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import polars as pl
import pytest

from perfkit.core.frames import TS_DTYPE, MetricStore
from perfkit.core.scope import Matcher, host_keys, host_of_instance, parse_scope
from perfkit.engine import ops
from perfkit.engine.local import LocalEngine
from perfkit.engine.promql import to_promql
from perfkit.engine.scope import ScopeMatchesNothing, scope_store
from perfkit.errors import ConfigError

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def frame(rows: list[dict[str, str]], value: float = 1.0) -> pl.DataFrame:
    """One sample per series at T0 (labels from ``rows``)."""
    data = [{**r, "ts": T0, "value": value} for r in rows]
    labels = sorted({k for r in rows for k in r})
    schema = {**dict.fromkeys(labels, pl.Utf8), "ts": TS_DTYPE, "value": pl.Float64}
    return pl.DataFrame(data, schema=schema)


def fleet() -> MetricStore:
    """Two models on two hosts each, their GPUs and hosts, and a node nobody serves on."""
    running = frame(
        [
            {"model_name": "llama-70b", "instance": "gpu-01:8000"},
            {"model_name": "llama-70b", "instance": "gpu-02:8000"},
            {"model_name": "qwen-7b", "instance": "gpu-03:8000"},
            {"model_name": "qwen-7b", "instance": "gpu-04:8000"},
        ]
    )
    dcgm = frame(
        [
            {"Hostname": f"gpu-0{h}", "gpu": str(g), "instance": "10.0.0.9:9400"}
            for h in (1, 2, 3, 4, 5)
            for g in (0, 1)
        ]
    )
    node = frame([{"instance": f"gpu-0{h}:9100", "cpu": "0", "mode": "idle"} for h in (1, 2, 3, 4, 5)])
    info = frame([{"instance": f"gpu-0{h}:8000", "block_size": "16"} for h in (1, 3)])
    return MetricStore(
        {
            "vllm:num_requests_running": running,
            "DCGM_FI_DEV_GPU_UTIL": dcgm,
            "node_cpu_seconds_total": node,
            "vllm:cache_config_info": info,
        }
    )


def test_parse_reads_every_operator_and_escapes():
    s = parse_scope(r'{model_name="meta-llama/Llama-3.1-70B-Instruct", pod=~"vllm-.*",ns!="dev",x!~"a\"b"}')
    assert [(m.label, m.op, m.value) for m in s.matchers] == [
        ("model_name", "=", "meta-llama/Llama-3.1-70B-Instruct"),
        ("pod", "=~", "vllm-.*"),
        ("ns", "!=", "dev"),
        ("x", "!~", 'a"b'),
    ]
    assert (
        s.promql() == r'{model_name="meta-llama/Llama-3.1-70B-Instruct",pod=~"vllm-.*",ns!="dev",x!~"a\"b"}'
    )
    assert parse_scope('job="train"').promql() == '{job="train"}'  # braces optional
    assert not parse_scope("")


@pytest.mark.parametrize(
    "text",
    [
        '{model_name="x"',
        "{model_name=x}",
        '{model_name="x" job="y"}',
        '{pod=~"("}',
        '{a!="x"}',
        "{" + "a" * 3000 + "}",
    ],
)
def test_bad_scopes_are_one_line_errors(text):
    with pytest.raises(ConfigError) as err:
        parse_scope(text)
    assert "\n" not in str(err.value)


def test_regex_is_fully_anchored_and_linear_on_hostile_patterns():
    m = Matcher("pod", "=~", "vllm-.*")
    assert m.matches({"pod": "vllm-0"}) and not m.matches({"pod": "my-vllm-0"})
    evil = Matcher("pod", "=~", "(a+)+$")  # catastrophic for a backtracking engine
    started = time.perf_counter()
    assert not evil.matches({"pod": "a" * 16_000 + "b"})
    assert time.perf_counter() - started < 1.0
    assert Matcher("x", "!=", "a").matches({})  # an absent label reads as ""


def test_host_join_reads_instance_and_host_labels():
    assert host_of_instance("gpu-07:9400") == "gpu-07"
    assert host_of_instance("[fe80::1]:8000") == "fe80::1"
    assert host_of_instance("fe80::1") == "fe80::1"
    assert host_keys({"instance": "10.0.0.9:9400", "Hostname": "gpu-01"}) == {"10.0.0.9", "gpu-01"}
    assert host_keys({"kubernetes_node": "n1"}) == {"n1"}


def test_scope_keeps_the_workload_and_the_gpus_and_hosts_it_runs_on():
    store, report = scope_store(fleet(), parse_scope('{model_name="llama-70b"}'))
    assert store.frames["vllm:num_requests_running"]["instance"].to_list() == ["gpu-01:8000", "gpu-02:8000"]
    assert sorted(set(store.frames["DCGM_FI_DEV_GPU_UTIL"]["Hostname"])) == ["gpu-01", "gpu-02"]
    assert sorted(store.frames["node_cpu_seconds_total"]["instance"]) == ["gpu-01:9100", "gpu-02:9100"]
    # an info metric without model_name is joined by host, like the GPUs
    assert store.frames["vllm:cache_config_info"]["instance"].to_list() == ["gpu-01:8000"]
    assert report.hosts == ["gpu-01", "gpu-02"]
    assert report.matched == (2, 4) and report.joined == (7, 17)


def test_hosts_override_and_regex_scope():
    store, report = scope_store(fleet(), parse_scope('{model_name=~"qwen.*"}', "gpu-04"))
    assert store.frames["vllm:num_requests_running"].height == 2  # the matchers pick the series ...
    assert set(store.frames["DCGM_FI_DEV_GPU_UTIL"]["Hostname"]) == {"gpu-04"}  # ... --hosts the GPUs
    assert report.hosts == ["gpu-04"]


def test_a_scope_that_matches_nothing_says_so():
    with pytest.raises(ScopeMatchesNothing, match="matches no series"):
        scope_store(fleet(), parse_scope('{model_name="llama-8b"}'))


def test_series_without_host_labels_are_kept_and_reported():
    store = fleet()
    store.frames["vllm:num_requests_running"] = store.frames["vllm:num_requests_running"].drop("instance")
    scoped, report = scope_store(store, parse_scope('{model_name="llama-70b"}'))
    assert scoped.frames["DCGM_FI_DEV_GPU_UTIL"].height == 10  # not narrowed: no host to join on
    assert report.notes and "--hosts" in report.notes[0]


def test_scoped_selectors_in_promql_and_the_local_engine():
    sel = (
        ops.Selector("vllm:num_requests_running")
        .where(engine="0")
        .narrowed(*parse_scope('{model_name=~"l.*"}').matchers)
    )
    assert to_promql(sel) == 'vllm:num_requests_running{engine="0",model_name=~"l.*"}'
    engine = LocalEngine(fleet())
    out = engine.instant(
        ops.Selector("vllm:num_requests_running").narrowed(Matcher("model_name", "!=", "qwen-7b")), T0
    )
    assert sorted(out["instance"]) == ["gpu-01:8000", "gpu-02:8000"]


def test_a_gauge_summed_over_a_restart_counts_the_server_once():
    """A server restarted mid-window under a new instance: 10 requests running before and after.
    Summing each series' own average would read 20 (issue 9: restarts and churn)."""
    from datetime import timedelta

    from perfkit.core.frames import Window
    from perfkit.engine import signals as S

    rows = []
    for i in range(80):  # 20 minutes of 15 s scrapes; the instance changes after 10 minutes
        instance = "10.0.0.1:8000" if i < 40 else "10.0.0.2:8000"
        rows.append({"instance": instance, "ts": T0 + timedelta(seconds=15 * i), "value": 10.0})
    running = pl.DataFrame(rows, schema={"instance": pl.Utf8, "ts": TS_DTYPE, "value": pl.Float64})
    engine = LocalEngine(MetricStore({"vllm:num_requests_running": running}))
    window = Window(T0 + timedelta(minutes=1), T0 + timedelta(minutes=19))
    # within 5 %: the bundle engine holds a stopped series for two scrapes (engine/local.py staleness)
    assert S.gauge_stat(engine, "running", window, "avg") == pytest.approx(10.0, rel=0.05)
    # two replicas alive through the window are still summed: 20
    both = pl.concat([running.with_columns(pl.lit(f"r{k}").alias("pod")) for k in (1, 2)])
    both = both.with_columns(pl.lit("10.0.0.9:8000").alias("instance"))
    engine = LocalEngine(MetricStore({"vllm:num_requests_running": both}))
    assert S.gauge_stat(engine, "running", window, "avg") == pytest.approx(20.0, rel=0.02)
