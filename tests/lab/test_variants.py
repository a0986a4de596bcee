"""Variant bundles (perfkit.lab.sim.variants): loose windows, shared fleets, restarts, other seeds.

Each check reads the written bundle back with the ordinary readers and compares it with the base
scenario's spec or bundle: what the variant promises is measured, not taken from the variant's code.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import polars as pl
import pytest
import yaml

from perfkit.analyses.completeness import completeness
from perfkit.core.scope import host_keys, parse_scope
from perfkit.engine.local import LocalEngine
from perfkit.errors import BundleError
from perfkit.lab.sim import bundle as inference_bundle
from perfkit.lab.sim import training as training_bundle
from perfkit.lab.sim.catalog import SCENARIOS
from perfkit.lab.sim.training_scenarios import TRAINING_SCENARIOS
from perfkit.lab.sim.variants import (
    LOOSE_FACTOR,
    loose_window,
    other_seeds,
    read_om,
    write_variant,
)
from perfkit.sources.bundle import load_bundle

ROOT = Path(__file__).resolve().parents[2] / "data" / "scenarios"
EVERY = {**SCENARIOS, **TRAINING_SCENARIOS}


def short_inference(name: str, seconds: float = 900):
    return inference_bundle.compress(SCENARIOS[name](), seconds)


def short_training(name: str, seconds: float = 900):
    return training_bundle.compress(TRAINING_SCENARIOS[name](), seconds)


def answer(path: Path) -> dict:
    return yaml.safe_load((path / "answer.yaml").read_text())


def series_of(frame: pl.DataFrame, **where: str) -> pl.DataFrame:
    for k, v in where.items():
        frame = frame.filter(pl.col(k) == v)
    return frame.sort("ts")


def test_other_seeds_are_deterministic_distinct_and_new():
    a, b = other_seeds(20261201, 8), other_seeds(20261201, 8)
    assert a == b and len(set(a)) == 8 and 20261201 not in a
    assert set(a).isdisjoint(other_seeds(20261203, 8))  # another scenario's seeds differ
    assert other_seeds(20261201, 3) == a[:3]  # asking for more seeds keeps the first ones


@pytest.mark.parametrize("name", sorted(EVERY))
def test_loose_window_keeps_the_story_and_triples_the_window(name):
    spec = EVERY[name]()
    loose = loose_window(spec)
    w0, w1 = spec.window[0], min(spec.window[1], spec.duration_s)
    assert loose.window[1] - loose.window[0] == pytest.approx(LOOSE_FACTOR * (w1 - w0), abs=1)
    assert loose.at(loose.window[1]) == spec.at(w1)  # the window ends where it did
    assert loose.baseline[1] <= loose.window[0]  # the baseline stays before the window
    assert loose.baseline[1] - loose.baseline[0] == spec.baseline[1] - spec.baseline[0]
    # every change of the story at the same wall-clock time
    old = sorted(spec.at(t) for t in _times(spec))
    new = sorted(loose.at(t) for t in _times(loose))
    assert old == new
    # the loose window is a lead-in of (factor - 1) fault lengths, then the original window
    lead = timedelta(seconds=round((LOOSE_FACTOR - 1) * (w1 - w0)))
    assert loose.at(loose.window[0]) + lead == spec.at(w0)


def _times(spec) -> list[float]:
    times = [at for at, _, _ in spec.notes]
    if hasattr(spec, "releases"):
        return times + [r.at_s for r in spec.releases] + [p.start_s for p in spec.phases]
    return (
        times
        + [c.at_s for c in spec.changes]
        + [c.at_s for c in spec.crashes]
        + [p.start_s for p in spec.phases]
    )


def test_loose_window_bundle(tmp_path):
    spec = short_training("dataloader-starvation")
    training_bundle.generate(spec, tmp_path / "base")
    write_variant("loose-window", spec, tmp_path / "loose")
    base, loose = load_bundle(tmp_path / "base"), load_bundle(tmp_path / "loose")
    bw, lw = base.incident.window, loose.incident.window
    assert lw.end == bw.end and lw.seconds == pytest.approx(LOOSE_FACTOR * bw.seconds, abs=1)
    assert loose.incident.baseline.end <= lw.start
    # the same events at the same times (but the "running since" note, at the earlier start)
    assert base.events["detail"][1:].to_list() == loose.events["detail"][1:].to_list()
    assert base.events["ts"][1:].to_list() == loose.events["ts"][1:].to_list()
    # the lead-in is the healthy job: its step time is the baseline's, in the window's first part
    steps = loose.store.get("train_step_duration_seconds")
    lead_end = lw.start + timedelta(seconds=(LOOSE_FACTOR - 1) * bw.seconds - 60)
    lead = steps.filter((pl.col("ts") >= lw.start) & (pl.col("ts") < lead_end))["value"].median()
    before = steps.filter(pl.col("ts") <= loose.incident.baseline.end)["value"].median()
    assert lead == pytest.approx(before, rel=0.05)
    assert answer(tmp_path / "loose")["direction"] == answer(tmp_path / "base")["direction"]
    assert answer(tmp_path / "loose")["variant"] == "loose-window"


def test_restart_of_an_inference_server(tmp_path):
    spec = short_inference("decode-thermal-throttle", 450)
    inference_bundle.generate(spec, tmp_path / "base")
    write_variant("restart", spec, tmp_path / "restart")
    b = load_bundle(tmp_path / "restart")
    running = b.store.get("vllm:num_requests_running")
    pods = running.group_by("pod").agg(pl.col("ts").min().alias("first"), pl.col("ts").max().alias("last"))
    assert pods.height == 2 and running["instance"].n_unique() == 2
    old, new = pods.sort("first").to_dicts()
    down = (new["first"] - old["last"]).total_seconds()
    assert 15 < down <= 45  # one or two scrapes find the server down
    assert b.incident.window.start < new["first"] < b.incident.window.end
    # the counters start again from zero under the new pod
    ok = b.store.get("vllm:request_success_total").filter(pl.col("finished_reason") == "stop")
    old_c, new_c = series_of(ok, pod=old["pod"]), series_of(ok, pod=new["pod"])
    assert new_c["value"][0] < 0.1 * old_c["value"][-1]
    # GPU and host series are the host's: not relabelled, no gap beyond a scrape
    assert "pod" not in b.store.get("DCGM_FI_DEV_GPU_UTIL").columns
    # an orchestrator's in-place restart writes no deploy event: the events are the base's
    assert (tmp_path / "restart" / "events.csv").read_text() == (tmp_path / "base" / "events.csv").read_text()
    assert answer(tmp_path / "restart")["direction"] == answer(tmp_path / "base")["direction"]
    # completeness puts the restart on the timeline at the new pod's first sample
    c = completeness(LocalEngine(b.store), b.incident.window)
    moved = [r for r in c.restarts if r.how == "new instance"]
    assert [r.ts for r in moved] == [new["first"].strftime("%Y-%m-%dT%H:%M:%SZ")]


def test_restart_of_a_training_job(tmp_path):
    spec = short_training("dataloader-starvation")
    training_bundle.generate(spec, tmp_path / "base")
    write_variant("restart", spec, tmp_path / "restart")
    b = load_bundle(tmp_path / "restart")
    tokens = b.store.get("train_tokens_total")
    assert tokens["pod"].n_unique() == 2
    for rank in ("0", "7"):
        per_rank = series_of(tokens, rank=rank)
        first_pod = per_rank["pod"][0]
        old, new = series_of(per_rank, pod=first_pod), per_rank.filter(pl.col("pod") != first_pod)
        assert new["value"][0] < old["value"][-1]  # relaunched from the checkpoint: the counter restarts
        assert new["ts"][0] > old["ts"][-1]
    base_events = load_bundle(tmp_path / "base").events
    added = b.events.join(base_events, on=["ts", "kind", "detail"], how="anti")
    assert added["kind"].to_list() == ["note"] and "rescheduled" in added["detail"][0]


def test_shared_fleet_holds_two_workloads_and_the_scope_selects_one(tmp_path):
    spec = short_inference("decode-thermal-throttle", 360)
    write_variant("shared-fleet", spec, tmp_path / "fleet")
    b = load_bundle(tmp_path / "fleet")
    a = answer(tmp_path / "fleet")
    scope = parse_scope(a["scope"])
    running = b.store.get("vllm:num_requests_running")
    models = set(running["model_name"].unique())
    assert spec.model in models and len(models) == 2  # one family, two workloads
    workload_hosts = set()
    for row in running.select("model_name", "instance").unique().iter_rows(named=True):
        if scope.matches(row):
            assert row["model_name"] == spec.model
            workload_hosts |= host_keys(row)
    gpu_hosts = set(b.store.get("DCGM_FI_DEV_GPU_UTIL")["Hostname"].unique())
    cpu_hosts = {i.split(":")[0] for i in b.store.get("node_cpu_seconds_total")["instance"].unique()}
    assert len(gpu_hosts) == 2 and gpu_hosts == cpu_hosts
    assert workload_hosts & gpu_hosts and len(workload_hosts & gpu_hosts) == 1  # the scope finds its host
    # both workloads over the same time range
    spans = running.group_by("model_name").agg(pl.col("ts").min().alias("a"), pl.col("ts").max().alias("b"))
    for edge in ("a", "b"):
        assert (spans[edge].max() - spans[edge].min()).total_seconds() <= 15  # within one scrape
    assert a["direction"] == spec.answer["direction"] and a["variant"] == "shared-fleet"


def test_variants_are_deterministic(tmp_path):
    spec = short_training("nccl-socket-fallback", 600)
    for variant in ("shared-fleet", "restart"):
        write_variant(variant, spec, tmp_path / f"{variant}-1")
        write_variant(variant, spec, tmp_path / f"{variant}-2")
        files = sorted(
            p.relative_to(tmp_path / f"{variant}-1")
            for p in (tmp_path / f"{variant}-1").rglob("*")
            if p.is_file()
        )
        assert files
        for rel in files:
            assert (tmp_path / f"{variant}-1" / rel).read_bytes() == (
                tmp_path / f"{variant}-2" / rel
            ).read_bytes(), rel


@pytest.mark.parametrize(
    "name",
    [
        "dataloader-starvation-loose-window",
        "nccl-socket-fallback-shared-fleet",
        "train-oom-batch-size-restart",
    ],
)
def test_embedded_variant_bundle_is_the_generators_output(name, tmp_path):
    """data/scenarios/<variant bundle> is not hand-edited: regenerating reproduces it byte for byte."""
    from perfkit.app.runner.embedded import specs

    factory, write = specs()[name]
    write(factory(), tmp_path / name)
    files = sorted(p.relative_to(ROOT / name) for p in (ROOT / name).rglob("*") if p.is_file())
    assert {"answer.yaml", "incident.yaml", "events.csv"} <= {str(f) for f in files}
    for rel in files:
        assert (tmp_path / name / rel).read_bytes() == (ROOT / name / rel).read_bytes(), rel


def test_a_malformed_metrics_line_names_file_and_line(tmp_path):
    path = tmp_path / "x.om"
    path.write_text('# TYPE g gauge\ng{a="1"} 1 1700000000.000\ng{a="1"} 2\n# EOF\n')
    with pytest.raises(BundleError, match=r"x\.om:3: not a timestamped sample line"):
        read_om(path)
    path.write_text('g{a="1"} 1 1700000000.000\n# EOF\n')
    with pytest.raises(BundleError, match=r"x\.om:1"):
        read_om(path)
