"""The fleet bundle generator (benchmarks/bench_scale.py's input): relabelled replicas of scenarios.

Scoped to one workload, the fleet must hold that scenario's own samples on each of its hosts: the
check reads the scenario bundle and the fleet separately and compares them after undoing the
relabelling.
"""

from __future__ import annotations

import polars as pl
import pytest
from polars.testing import assert_frame_equal

from perfkit.core.resources import SCENARIOS
from perfkit.core.scope import parse_scope
from perfkit.lab.sim.fleet import FleetWorkload, replica_bytes, write_fleet
from perfkit.sources.bundle import load_bundle
from perfkit.triage.table import triage_bundle

FLEET = [
    FleetWorkload("org/model-a", "kv-prefix-cache-thrash", 2),
    FleetWorkload("org/model-b", "decode-thermal-throttle", 1),
]


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    out = tmp_path_factory.mktemp("fleet")
    return out, write_fleet(out, FLEET)


def test_sizes_and_files(fleet):
    out, summary = fleet
    files = sorted(p.name for p in (out / "metrics").glob("*.om"))
    assert files == sorted(f"{e}-{w}.om" for w in "ab" for e in ("dcgm", "node", "vllm"))
    assert summary["bytes"] == sum(p.stat().st_size for p in (out / "metrics").glob("*.om"))
    per_replica = replica_bytes(FLEET)
    assert summary["bytes"] == pytest.approx(2 * per_replica[0] + per_replica[1], rel=0.001)
    assert summary["hosts"] == {"org/model-a": ["gpu-a00", "gpu-a01"], "org/model-b": ["gpu-b00"]}


def test_rewriting_is_deterministic_and_cached(fleet, tmp_path):
    out, _ = fleet
    again = tmp_path / "again"
    write_fleet(again, FLEET)
    for path in (out / "metrics").glob("*.om"):
        assert (again / "metrics" / path.name).read_bytes() == path.read_bytes()
    stamp = (again / "metrics" / "vllm-a.om").stat().st_mtime_ns
    write_fleet(again, FLEET)  # same spec: kept
    assert (again / "metrics" / "vllm-a.om").stat().st_mtime_ns == stamp
    write_fleet(again, FLEET[:1])  # another spec: rewritten
    assert not (again / "metrics" / "vllm-b.om").exists()
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="holds no fleet bundle"):
        write_fleet(other, FLEET)  # a folder that is not a fleet is never deleted
    assert (other / "notes.txt").read_text() == "mine"


def test_scoped_fleet_holds_the_scenario_on_each_host(fleet):
    out, _ = fleet
    source = load_bundle(SCENARIOS / FLEET[0].scenario)
    scoped = load_bundle(out, scope=parse_scope('{model_name="org/model-a"}'))
    assert scoped.scope is not None and scoped.scope.hosts == ["gpu-a00", "gpu-a01"]
    old_model = source.store.frames["vllm:num_requests_running"]["model_name"][0]
    old_host = source.store.frames["DCGM_FI_DEV_GPU_UTIL"]["Hostname"][0]
    assert set(scoped.store.frames) == set(source.store.frames)
    for host in ("gpu-a00", "gpu-a01"):
        for name, want in source.store.frames.items():
            got = scoped.store.frames[name]
            if name.startswith("vllm:"):
                got = got.filter(pl.col("instance") == f"{host}:8000").drop("instance")
                got = (
                    got.with_columns(pl.lit(old_model).alias("model_name"))
                    if "model_name" in got.columns
                    else got
                )
            elif name.startswith("DCGM_"):
                got = got.filter(pl.col("Hostname") == host).with_columns(pl.lit(old_host).alias("Hostname"))
                got, want = got.drop("UUID"), want.drop("UUID")  # per-host GPU ids
            else:
                got = got.filter(pl.col("instance") == f"{host}:9100")
                got = got.with_columns(pl.lit(f"{old_host}:9100").alias("instance"))
            assert_frame_equal(got.select(want.columns), want, check_row_order=True)


def test_scoped_triage_gives_the_scenario_answer(fleet):
    out, _ = fleet
    answer = (SCENARIOS / FLEET[0].scenario / "answer.yaml").read_text()
    top = triage_bundle(out, scope='{model_name="org/model-a"}').top
    assert top is not None and f"direction: {top.row.direction}" in answer
    assert top.verification.verdict == "confirmed", (top.row.direction, top.verification.verdict)
