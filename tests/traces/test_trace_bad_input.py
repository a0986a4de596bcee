"""Bad input (issue 12): truncated or corrupt gzip, not a trace, no GPU events, no ProfilerStep,
float and nanosecond timestamps, ranks from different jobs, and a hand-computed trace whose
numbers follow from HTA's definitions (so the arithmetic is checked against the definitions, not
only against HTA's output)."""

from __future__ import annotations

import gzip
import json
import shutil

import pytest
import trace_synth as synth
from trace_synth import FIXTURES, expected

from perfkit.errors import BundleError, ConfigError
from perfkit.traces import analyze, read_trace

RANK0 = FIXTURES / "trace_filter" / "sampled_rank-0.json.gz"
RANK1 = FIXTURES / "trace_filter" / "sampled_rank-1.json.gz"


def test_hand_computed_trace_follows_the_definitions(tmp_path):
    """One step: compute kernels [120,220] [320,420] [520,620] [720,820] µs and an NCCL kernel
    [720,1020] after the step start. Kernel time 900, busy 600 so idle 300 (33.33 %), compute 400
    (44.44 %), non-compute 200 (22.22 %); the NCCL kernel is hidden under compute for 100 of its
    300 µs (33.33 %). The 3 gaps on the compute stream follow launches made after the previous
    kernel ended: host wait 300. The data loader takes 100 of the 1000 µs step."""
    path = synth.write(tmp_path / "r0.json", synth.document(synth.events(steps=1)))
    r = analyze(path).as_dict()["ranks"][0]
    assert (r["kernel_time_us"], r["idle_us"], r["compute_us"], r["non_compute_us"]) == (900, 300, 400, 200)
    assert (r["idle_pct"], r["compute_pct"], r["non_compute_pct"]) == (33.33, 44.44, 22.22)
    assert r["comm_comp_overlap_pct"] == 33.33
    assert r["idle_breakdown"]["streams"] == [
        {"stream": 7, "host_wait_us": 300.0, "kernel_wait_us": 0.0, "other_us": 0.0},
        {"stream": 13, "host_wait_us": 0.0, "kernel_wait_us": 0.0, "other_us": 0.0},
    ]
    assert r["steps"] == [
        {
            "step": 1,
            "ts_us": 1.7e15,
            "dur_us": 1000.0,
            "dataloader_us": 100.0,
            "dataloader_calls": 1,
            "dataloader_pct": 10.0,
        }
    ]
    assert r["launch"]["count"] == 5 and r["launch"]["launch_delay_max_us"] == 15.0
    assert any("one ProfilerStep only" in n for n in analyze(path).notes)


def test_trimming_drops_the_last_step_and_its_kernels(tmp_path):
    """Three steps: HTA's trimming keeps GPU work launched before step 3 starts (2 of 3 steps)."""
    path = synth.write(tmp_path / "r0.json.gz", synth.document(synth.events(steps=3)))
    trimmed, whole = analyze(path), analyze(path, whole_trace=True)
    assert trimmed.ranks[0].gpu_events == 10 and whole.ranks[0].gpu_events == 15
    assert [s.step for s in trimmed.ranks[0].steps] == [1, 2]
    assert [s.step for s in whole.ranks[0].steps] == [1, 2, 3]


@pytest.mark.parametrize(
    "cut, message",
    [
        (lambda b: b[: len(b) // 2], "truncated gzip stream"),
        (lambda b: b[:-4], "truncated gzip stream"),
        (lambda b: b[:5000] + bytes(x ^ 0xFF for x in b[5000:5064]) + b[5064:], "corrupt gzip stream"),
    ],
)
def test_broken_gzip_is_a_clear_error_naming_the_file(tmp_path, cut, message):
    bad = tmp_path / "rank-0.json.gz"
    bad.write_bytes(cut(RANK0.read_bytes()))
    with pytest.raises(BundleError, match=message) as err:
        analyze(bad)
    assert str(bad) in str(err.value)


def test_truncated_plain_json_is_a_clear_error(tmp_path):
    text = gzip.decompress(RANK0.read_bytes())
    bad = tmp_path / "rank-0.json"
    bad.write_bytes(text[: len(text) // 3])
    with pytest.raises(BundleError, match="ends inside traceEvents.*truncated"):
        read_trace(bad)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "empty file"),
        (b"[1, 2, 3]", "not a Kineto trace"),
        (b'{"schemaVersion": 1, "name": "traceEvents"}', "no traceEvents"),
        (b'{"traceEvents": [{"ph": "X"}, {"ph": oops, "args": {"correlation": 1}}]}', "not JSON"),
        (b'{"traceEvents": [{"ph": "X", "args": {"stream": 1, "correlation": 2}}]', "without closing"),
    ],
)
def test_documents_that_are_not_traces(tmp_path, content, message):
    bad = tmp_path / "x.json"
    bad.write_bytes(content)
    with pytest.raises(BundleError, match=message):
        read_trace(bad)


def test_the_memory_timeline_fixture_is_refused_where_hta_crashes():
    """HTA 0.5.0 raises AttributeError on it (a JSON list, not a Kineto trace)."""
    assert "AttributeError" in expected("memory_analysis")["error"]
    with pytest.raises(BundleError, match="not a Kineto trace"):
        analyze(FIXTURES / "memory_analysis" / "memory_timeline.raw.gz")


def test_a_trace_without_gpu_events_says_so(tmp_path):
    cpu_only = [e for e in synth.events(steps=2) if e["cat"] not in ("kernel", "ac2g")]
    path = synth.write(tmp_path / "cpu.json", synth.document(cpu_only))
    r = analyze(path).as_dict()["ranks"][0]
    assert r["gpu_events"] == 0 and r["idle_pct"] is None and r["comm_comp_overlap_pct"] is None
    assert any("no GPU events" in n for n in r["notes"])


def test_no_profiler_step_analyses_the_whole_trace():
    rep = analyze(FIXTURES / "critical_path" / "alexnet")
    assert any("no ProfilerStep" in n for n in rep.notes)
    whole = analyze(FIXTURES / "critical_path" / "alexnet", whole_trace=True)
    assert rep.ranks[0].temporal == whole.ranks[0].temporal


def test_nanosecond_integer_timestamps_are_converted(tmp_path):
    """trace_filter rank 0 rewritten with ts and dur in ns (integers past 1e17): the breakdown
    equals HTA's on the µs original (within 0.1 point) and a note says the unit was converted."""
    doc = json.loads(gzip.decompress(RANK0.read_bytes()))
    for e in doc["traceEvents"]:
        for key in ("ts", "dur"):  # this trace writes kernel durations as floats (10.0)
            if isinstance(e.get(key), int | float):
                e[key] = int(e[key] * 1000)
    path = synth.write(tmp_path / "ns.json.gz", doc)
    r = analyze(path).ranks[0]
    hta = expected("trace_filter")["default"]["temporal"][0]
    assert abs(r.temporal.pct(r.temporal.idle_us) - hta["idle_time_pctg"]) <= 0.1
    assert abs(r.temporal.pct(r.temporal.compute_us) - hta["compute_time_pctg"]) <= 0.1
    assert any("ns" in n for n in r.notes)


def test_fractional_timestamps_use_htas_rounding():
    """nccl_data has float µs timestamps; HTA rounds each event to [ceil(ts), floor(ts+dur)].
    Without that rounding the idle share differs by ~0.5 point (training-metrics.md §1.4)."""
    r = analyze(FIXTURES / "nccl_parser_config").ranks[0]
    hta = expected("nccl_parser_config")["default"]["temporal"][0]
    assert r.temporal.idle_us == hta["idle_time(us)"]


def test_ranks_of_different_jobs_are_refused(tmp_path):
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    shutil.copy(RANK0, mixed / "a.json.gz")  # world_size 128
    shutil.copy(FIXTURES / "trace_diff" / "test" / "test.json.gz", mixed / "b.json.gz")  # world_size 2
    with pytest.raises(BundleError, match="world_size differs"):
        analyze(mixed)


def test_two_files_of_one_rank_are_refused(tmp_path):
    folder = tmp_path / "dup"
    folder.mkdir()
    shutil.copy(RANK0, folder / "a.json.gz")
    shutil.copy(RANK0, folder / "b.json.gz")
    with pytest.raises(BundleError, match="rank 0 is also in"):
        analyze(folder)


def test_ranks_that_do_not_overlap_in_time_are_refused(tmp_path):
    """Rank 1 of the same job, recorded a day later: same world_size, distinct ranks, but not the
    same profiled steps."""
    folder = tmp_path / "days"
    folder.mkdir()
    shutil.copy(RANK0, folder / "rank-0.json.gz")
    doc = json.loads(gzip.decompress(RANK1.read_bytes()))
    for e in doc["traceEvents"]:
        if isinstance(e.get("ts"), int):
            e["ts"] += 86_400_000_000
    synth.write(folder / "rank-1.json.gz", doc)
    with pytest.raises(BundleError, match="does not overlap any other rank"):
        analyze(folder)


def test_a_folder_without_traces_and_a_missing_path(tmp_path):
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ConfigError, match="no trace files"):
        analyze(tmp_path)
    with pytest.raises(ConfigError, match="no such trace"):
        analyze(tmp_path / "nope")
