"""perfkit's trace numbers against Holistic Trace Analysis' on every HTA test trace carried in tests/data/hta-traces/.

How the expected values were obtained: ``tests/traces/hta-0.5.0/<fixture>.json`` is the verbatim
output of

    ~/.cache/perfkit-bench/hta/bin/python tests/traces/hta_reference.py tests/data/hta-traces/<fixture>

in a virtualenv with PyPI ``holistictraceanalysis==0.5.0`` (pandas 3.1.1, numpy 2.4.6, Python
3.11.7; ``benchmarks/trace_bench.py`` creates it). Its "default" block is
``TraceAnalysis(trace_dir=FOLDER)`` and, on it, ``get_temporal_breakdown(visualize=False)``,
``get_comm_comp_overlap(visualize=False)``, ``get_idle_time_breakdown(ranks=[r],
consecutive_kernel_delay=30)`` per rank, ``get_gpu_kernel_breakdown(duration_ratio=0.8,
num_kernels=10, include_memory_kernels=True)``, ``get_cuda_kernel_launch_stats(ranks=all)``,
``get_profiler_steps()`` and ``get_potential_stragglers()`` (the same calls on ``BreakdownAnalysis``
and friends, made without plotting); its "whole" block runs the same analyses on the parsed,
aligned frames without ``_filter_irrelevant_gpu_kernels`` (the untrimmed trace). Where HTA raised,
the file records the exception, and perfkit must instead give a clear answer (tested below).

Tolerances: percentages within 0.1 percentage point (the issue's bar); in practice perfkit
reproduces HTA to the microsecond, and the µs values are compared within 0.01 % to say so.
"""

from __future__ import annotations

from functools import cache

import pytest
from trace_synth import FIXTURES, expected

from perfkit.traces import analyze_traces, read_traces

#: every Kineto trace folder among the shared fixtures (memory_analysis is not one: see test_bad_input)
TRACE_FOLDERS = [
    "trace_filter",
    "amd_trace",
    "critical_path/alexnet",
    "cupti_profiler",
    "df_index_resolver",
    "nccl_parser_config",
    "ns_resolution_trace",
    "negative_queue_length_values_check",
    "trace_diff/control",
    "trace_diff/test",
]
MODES = ["default", "whole"]
PP = 0.1  # percentage points


@cache
def _ranks(folder: str):
    return read_traces(FIXTURES / folder)


@cache
def report(folder: str, mode: str, num_candidates: int = 2, hta_compat: bool = True) -> dict:
    """perfkit's report with HTA 0.5.0's kernel classes (``hta_compat``), as the parity needs."""
    return analyze_traces(
        _ranks(folder),
        path=folder,
        whole_trace=(mode == "whole"),
        num_candidates=num_candidates,
        hta_compat=hta_compat,
    ).as_dict()


def by_rank(rep: dict) -> dict[int, dict]:
    return {r["rank"]: r for r in rep["ranks"]}


def close_us(got: float, want: float) -> bool:
    return abs(got - want) <= max(1.0, 1e-4 * abs(want))


def test_every_trace_fixture_has_expected_values():
    """A fixture added to tests/data/hta-traces/ without HTA's numbers fails here, not silently."""
    on_disk = {
        str(p.parent.relative_to(FIXTURES))
        for p in FIXTURES.rglob("*.json.gz")
        if p.parent.name != "memory_analysis"
    }
    assert on_disk == set(TRACE_FOLDERS)
    for folder in TRACE_FOLDERS + ["memory_analysis"]:
        assert expected(folder)["hta"] == "holistictraceanalysis 0.5.0"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("folder", TRACE_FOLDERS)
def test_temporal_breakdown_and_overlap_match_hta(folder, mode):
    want = expected(folder)[mode]
    got = by_rank(report(folder, mode))
    assert sorted(got) == expected(folder)["ranks"]
    temporal = want["temporal"]
    if isinstance(temporal, dict):  # HTA raised: a trace without GPU kernels
        assert "IndexError" in temporal["error"]
        for r in got.values():
            assert r["gpu_events"] == 0 and r["idle_pct"] is None and r["kernel_time_us"] is None
            assert any("no GPU events" in n for n in r["notes"])
        return
    for row in temporal:
        r = got[row["rank"]]
        assert abs(r["idle_pct"] - row["idle_time_pctg"]) <= PP
        assert abs(r["compute_pct"] - row["compute_time_pctg"]) <= PP
        assert abs(r["non_compute_pct"] - row["non_compute_time_pctg"]) <= PP
        assert close_us(r["kernel_time_us"], row["kernel_time(us)"])
        assert close_us(r["idle_us"], row["idle_time(us)"])
        assert close_us(r["compute_us"], row["compute_time(us)"])
        assert close_us(r["non_compute_us"], row["non_compute_time(us)"])
    for row in want["overlap"]:
        hta = row["comp_comm_overlap_pctg"]
        mine = got[row["rank"]]["comm_comp_overlap_pct"]
        if hta is None:  # HTA divides 0 by 0 when a rank has no communication kernel
            assert mine is None
        else:
            assert abs(mine - hta) <= PP


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("folder", TRACE_FOLDERS)
def test_idle_breakdown_matches_hta_per_stream(folder, mode):
    want = expected(folder)[mode]["idle"]
    got = by_rank(report(folder, mode))
    if "error" in want:  # HTA has no kernels to walk
        assert all(r["idle_breakdown"]["streams"] == [] for r in got.values())
        return
    keys = {"host_wait": "host_wait_us", "kernel_wait": "kernel_wait_us", "other": "other_us"}
    for rank, rows in want.items():
        streams = {s["stream"]: s for s in got[int(rank)]["idle_breakdown"]["streams"]}
        assert set(streams) == {row["stream"] for row in rows}
        for row in rows:
            assert close_us(streams[row["stream"]][keys[row["idle_category"]]], row["idle_time"]), row


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("folder", TRACE_FOLDERS)
def test_kernel_types_and_top_kernels_match_hta(folder, mode):
    want = expected(folder)[mode]["kernels"]
    rep = report(folder, mode)
    types = rep["kernel_types"]
    hta_types = {row["kernel_type"]: row for row in want["types"] if row["sum"] > 0}
    assert set(types) == set(hta_types)
    for name, row in hta_types.items():
        assert close_us(types[name]["us"], row["sum"])
        assert abs(types[name]["pct"] - row["percentage"]) <= PP
    got = {
        (r["rank"], k["kernel_type"], k["name"]): k["sum_us"] for r in rep["ranks"] for k in r["top_kernels"]
    }
    hta = {(row["rank"], row["kernel_type"], row["name"]): row["sum (us)"] for row in want["kernels"]}
    assert set(got) == set(hta)
    for key, value in hta.items():
        assert close_us(got[key], value), key


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("folder", TRACE_FOLDERS)
def test_launch_statistics_match_hta(folder, mode):
    want = expected(folder)[mode]["launch"]
    got = by_rank(report(folder, mode))
    for rank, row in want.items():
        launch = got[int(rank)]["launch"]
        assert launch["count"] == row["count"]
        assert close_us(launch["launch_delay_sum_us"], row["launch_delay_sum"])
        assert launch["launch_delay_max_us"] == row["launch_delay_max"]
        assert launch["launch_delay_over_cutoff"] == row["launch_delay_over_100"]
        assert launch["runtime_over_cutoff"] == row["cpu_duration_over_50"]
        assert launch["short_gpu_kernels"] == row["short_gpu"]


@pytest.mark.parametrize("folder", TRACE_FOLDERS)
def test_profiler_steps_and_stragglers_match_hta(folder):
    want = expected(folder)["default"]
    rep = report(folder, "default")
    steps = sorted({s["step"] for r in rep["ranks"] for s in r["steps"]})
    assert steps == want["steps"]  # HTA's get_profiler_steps: every step but the trimmed last
    if isinstance(want["stragglers"], list):
        assert sorted(rep["stragglers"]["ranks"]) == sorted(want["stragglers"])
    else:  # HTA raised (one rank, or no step); perfkit says why instead
        assert rep["stragglers"]["ranks"] == [] and rep["stragglers"]["note"]


def test_straggler_with_one_candidate_matches_hta():
    """``get_potential_stragglers(num_candidates=1)`` on trace_filter (HTA 0.5.0) names rank 1; the
    kernel it compares is the SendRecv on stream 84, whose last long instance in step 551 starts
    at 0.442700 (rank 0) and 0.712708 (rank 1) of a mean step after the first step's start
    (printed by HTA's ``_compute_normalized_start_time_of_significant_comm_kernels``)."""
    s = report("trace_filter", "default", 1)["stragglers"]
    assert s["ranks"] == [1]
    assert s["stream"] == 84 and s["kernel"].startswith("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t")
    starts = s["normalized_start_by_step"]["551"]
    assert abs(starts["0"] - 0.442700) < 1e-5 and abs(starts["1"] - 0.712708) < 1e-5


def test_trimming_changes_the_numbers_as_hta_does():
    """The default and the whole trace differ on trace_filter (HTA: idle 53.56 % vs 55.21 % on
    rank 0), so a test that passed in one mode could not pass in the other by accident."""
    trimmed, whole = by_rank(report("trace_filter", "default")), by_rank(report("trace_filter", "whole"))
    assert abs(trimmed[0]["idle_pct"] - whole[0]["idle_pct"]) > 1.0
    assert whole[0]["kernel_time_us"] > 1.9 * trimmed[0]["kernel_time_us"]


@pytest.mark.parametrize("folder", TRACE_FOLDERS)
def test_the_default_classes_change_nothing_on_htas_traces(folder):
    """perfkit's default also counts the communication kernels HTA 0.5.0 does not know
    (docs/traces.md); HTA's test traces hold none, so the default report equals the parity one
    there: the parity above holds for the default too."""
    for mode in MODES:
        default, compat = report(folder, mode, hta_compat=False), report(folder, mode)
        assert default["kernel_types"] == compat["kernel_types"]
        assert default["ranks"] == compat["ranks"]
