"""The training runbook's trace, efficiency, memory, scaling and cost sections, and the training
postmortem (issue 12, items 8 and 9): executed with papermill on the traced training bundles, and
the postmortem rendered from the executed notebook.

Expected values come from the scenarios' own answers (``answer.yaml``): the DataLoader case's
slowest rank waits ~30 % of every step (under 1 % before); the 32 -> 64 GPU case gives ~1.5x the
throughput, a scaling efficiency of ~0.76, with communication going from ~15 % to ~35 % of the step.
"""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from perfkit.app.runner.run import execute
from perfkit.core.findings import findings_from_notebook

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
SERVING_METRICS = re.compile(r"\b(TTFT|ITL|TPOT|E2E|queue)\b")
SERVING_ROWS = {
    "kv_cache_allocation",
    "decode_efficiency",
    "scheduler_queueing",
    "prefill_decode_interference",
}
TRAINING_ROWS = {"data_pipeline", "network_communication", "training_instability"}


def _run(tmp_path_factory: pytest.TempPathFactory, runbook: str, name: str, **params: object) -> dict:
    out = tmp_path_factory.mktemp(name)
    result = execute(runbook, out, {"bundle": str(SCENARIOS / name), **params})
    assert result.error is None, result.error
    findings = findings_from_notebook(json.loads(result.notebook.read_text()))
    return {
        "findings": findings,
        "md": (out / "postmortem.md").read_text(),
        "html": (out / "postmortem.html").read_text(),
        "json": json.loads((out / "findings.json").read_text()),
        "out": out,
    }


@pytest.fixture(scope="module")
def dataloader(tmp_path_factory):
    return _run(tmp_path_factory, "training_step", "dataloader-starvation")


@pytest.fixture(scope="module")
def allreduce(tmp_path_factory):
    return _run(tmp_path_factory, "training_step", "allreduce-scaling-64gpu")


def _section(md: str, title: str) -> str:
    """The Markdown between ``## title`` and the next ``## ``."""
    start = md.index(f"## {title}\n")
    end = md.find("\n## ", start + 3)
    return md[start : end if end > 0 else None]


def _impact(pm: dict) -> dict[str, list]:
    return {row[0]: row for row in pm["findings"]["postmortem"].data["impact"]["rows"]}


@pytest.mark.notebook
def test_dataloader_postmortem_names_the_data_pipeline(dataloader):
    f = dataloader["findings"]
    assert all(x.status != "error" for x in f.values()), {k: x.summary for k, x in f.items()}
    pm = f["postmortem"].data
    assert pm["workload"] == "training"
    assert "data_pipeline" in pm["summary"] and "data_pipeline" in pm["root_cause"]
    impact = _impact(dataloader)
    wait = impact["data wait, slowest rank (% of step)"]
    assert float(wait[1]) < 1.0 and 20.0 < float(wait[2]) < 40.0  # answer.yaml: ~30 %, under 1 % before
    assert "tokens/s per GPU (while running)" in impact and "time lost in the window" in impact
    # the traces find the rank the others wait for, and draw the step it stalled in
    trace = f["trace"]
    assert trace.status == "ok" and "waits for the data loader" in trace.summary
    incident = next(p for p in trace.data["phases"] if p["window"] == "incident")
    worst = max(incident["ranks"], key=lambda r: r["dataloader_pct"] or 0)
    assert f"rank {worst['rank']} waits for the data loader" in trace.summary
    assert (
        worst["dataloader_pct"] > 20 and sum((r["dataloader_pct"] or 0) > 20 for r in incident["ranks"]) == 1
    )
    assert f"rank {worst['rank']}" in trace.figure["layout"]["title"]["text"]
    # scaling on one GPU count says so; the lost time goes to data
    assert f["scaling"].summary.startswith("not a scaling change: 8 GPUs in both windows")
    assert f["scaling"].data["lost_to"] == "data"
    # no model description for llava-next-7b: said, not invented
    assert f["efficiency"].status == "warn" and "llava-next-7b" in f["efficiency"].summary
    assert f["memory"].status == "missing" and "models.yaml" in f["memory"].summary
    for name in ("trace", "trace_ranks", "scaling"):
        assert (dataloader["out"] / "figures" / f"{name}.png").stat().st_size > 5000


@pytest.mark.notebook
def test_scaling_postmortem_names_communication_and_the_speed_up(allreduce):
    f = allreduce["findings"]
    assert all(x.status != "error" for x in f.values()), {k: x.summary for k, x in f.items()}
    sc = f["scaling"].data
    assert (sc["before"]["gpus"], sc["after"]["gpus"]) == (32, 64)
    assert 1.4 <= sc["speedup"] <= 1.6 and 0.70 <= sc["efficiency"] <= 0.82  # answer.yaml: ~1.5x, ~0.76
    assert sc["lost_to"] == "communication"
    assert sc["before"]["throughput_scaled"] and sc["after"]["throughput_scaled"]  # 11 of 32, 15 of 64 export
    pm = f["postmortem"].data
    assert "network_communication" in pm["root_cause"]
    assert "1.48x the job's throughput for 2x the GPUs" in pm["summary"] or re.search(
        r"1\.[45]\dx the job's throughput for 2x the GPUs", pm["summary"]
    )
    breakdown = _section(allreduce["md"], "Step breakdown: per rank and per phase")
    assert "communication" in breakdown and re.search(r"scaling efficiency 0\.[78]\d", breakdown)
    impact = _impact(allreduce)
    assert impact["GPUs"][1:3] == ["32", "64"]
    comm = impact["exposed communication, critical path (% of step)"]
    assert 10 < float(comm[1]) < 22 and 30 < float(comm[2]) < 45  # answer.yaml: ~15 % -> ~35 %
    mfu = impact["MFU (%)"]
    assert float(mfu[2]) < float(mfu[1])  # the same model, fewer tokens per GPU: lower MFU
    ratio = float(impact["tokens/s per GPU (while running)"][3].rstrip("x"))
    assert ratio == pytest.approx(sc["efficiency"], abs=0.01)
    # the resize relaunched from the last checkpoint, below the highest step run before it: the steps
    # between were run again inside the window (read from the trainer's own step lines here)
    log = (SCENARIOS / "allreduce-scaling-64gpu" / "logs" / "train.log").read_text()
    stamped = [
        (t, int(n))
        for t, n in re.findall(r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),\d+\] .*?\bstep (\d+) \|", log)
    ]
    start = "2026-12-07 02:20:00"  # incident.yaml's window
    before = max(n for t, n in stamped if t < start)
    inside = [n for t, n in stamped if t >= start]
    resumed = next(n for (_, a), (_, n) in zip(stamped, stamped[1:], strict=False) if n < a)
    assert resumed < before < max(inside)
    new_share = (max(inside) - before) / (before - resumed + max(inside) - before)
    lost = impact["time lost in the window"]
    # while running the job lost 1 - efficiency; of the steps it ran, only the new ones count
    assert float(lost[3].rstrip("%")) == pytest.approx(100 * (1 - sc["efficiency"] * new_share), abs=2)
    assert impact["steps run again (since the checkpoint resumed from)"][2] == f"{before - resumed:,}"
    assert f["efficiency"].status == "ok" and "scaled from the ranks" in f["efficiency"].summary
    assert f["training_cost"].data["lost_usd"] > 0


@pytest.mark.notebook
@pytest.mark.parametrize("case", ["dataloader", "allreduce"])
def test_training_postmortem_speaks_in_the_jobs_terms(case, request):
    pm = request.getfixturevalue(case)
    impact = _section(pm["md"], "Impact")
    assert "tokens/s per GPU (while running)" in impact and "step time" in impact
    assert not SERVING_METRICS.search(impact), impact
    assert "Per-stage analysis" not in pm["md"] and "latency histograms" not in pm["md"]
    trail = _section(pm["md"], "Triage trail")
    table = trail.split("*4 rows not applicable to a training job")[0]
    assert not any(row in table for row in SERVING_ROWS), trail
    assert all(row in trail for row in SERVING_ROWS)  # listed apart, not dropped
    missing = _section(pm["md"], "Missing evidence")
    assert "TTFT" not in missing and "histogram" not in missing, missing
    assert '<details class="not-applicable">' in pm["html"]
    apart = [d for d in pm["json"]["triage"]["directions"] if d["applies"] is False]
    assert {d["id"] for d in apart} == SERVING_ROWS and {d["about"] for d in apart} == {"serving"}


@pytest.mark.slow
@pytest.mark.notebook
def test_inference_postmortem_keeps_training_rows_out_of_its_trail(tmp_path_factory):
    pm = _run(tmp_path_factory, "inference_latency", "p95-prefill-interference")
    trail = _section(pm["md"], "Triage trail")
    table, _, apart = trail.partition("rows not applicable to a serving workload")
    assert not any(row in table for row in TRAINING_ROWS), trail
    assert all(row in apart for row in TRAINING_ROWS)
    assert "train_loss" not in _section(pm["md"], "Missing evidence")
    assert "TTFT" in _section(pm["md"], "Impact")  # the inference postmortem as it was
    assert "## Per-stage analysis" in pm["md"]


@pytest.mark.notebook
def test_sections_say_what_is_missing_and_never_die(tmp_path_factory):
    """A training bundle without traces, and a `traces` parameter naming nothing: each section says
    so, the postmortem is still written."""
    pm = _run(tmp_path_factory, "training_step", "train-healthy", model="no-such-model", seq_len=2048)
    f = pm["findings"]
    assert f["trace"].status == "missing" and "no traces/ folder" in f["trace"].summary
    assert f["efficiency"].status != "ok" and "no-such-model" in f["efficiency"].summary
    assert f["memory"].status == "missing"
    assert "postmortem" in f and "## Impact" in pm["md"]
    bad = _run(tmp_path_factory, "training_step", "dataloader-starvation", traces="/nonexistent/traces")
    t = bad["findings"]["trace"]
    assert t.status == "error" and "/nonexistent/traces" in t.summary
    assert "postmortem" in bad["findings"]


# -- the step timeline, in-process ---------------------------------------------------------------------


def _kineto(path: Path, kernels: int, step_us: int, streams: int) -> None:
    """A one-rank Kineto trace: two ProfilerSteps, ``kernels`` 1 µs kernels spread evenly over the
    first on ``streams`` streams (every tenth a NCCL kernel)."""
    events = [
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 1000, "dur": step_us,
         "pid": 1, "tid": 1, "args": {}},
        {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": 1000 + step_us, "dur": step_us,
         "pid": 1, "tid": 1, "args": {}},
    ]  # fmt: skip
    every = step_us // kernels
    for i in range(kernels):
        name = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL" if i % 10 == 0 else "sm90_xmma_gemm_bf16"
        events.append(
            {"ph": "X", "cat": "kernel", "name": name, "ts": 1000 + i * every, "dur": 1,
             "pid": 0, "tid": 7, "args": {"stream": 7 + i % streams, "correlation": i + 1, "device": 0}}
        )  # fmt: skip
    doc = {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events}
    with gzip.open(path, "wt") as fh:
        json.dump(doc, fh)


def test_step_timeline_is_bounded_and_matches_the_trace(tmp_path):
    from perfkit.report.trace_figures import MAX_SEGMENTS, MERGE_GAP_SHARE, pick_step, step_timeline
    from perfkit.traces.analysis import analyze_traces
    from perfkit.traces.read import read_traces

    step_us, kernels, streams = 2_000_000, 7_000, 4
    # each stream's kernels are 4 x 285 µs apart: wider than the merge gap (1 ms), so merged only by
    # that gap they would be ~7,000 bars; the figure keeps at most MAX_SEGMENTS
    assert streams * step_us // kernels > step_us * MERGE_GAP_SHARE
    _kineto(tmp_path / "rank-0.pt.trace.json.gz", kernels, step_us, streams)
    traces = read_traces(tmp_path)
    rank, step, why = pick_step(analyze_traces(traces))
    assert (rank, step.step) == (0, 1) and "median" in why
    fig = step_timeline(traces[0], step)
    bars = sum(sum(x is None for x in trace.x) for trace in fig.data)
    assert 0 < bars <= MAX_SEGMENTS < kernels
    # the bars still span the step's kernels: the first kernel's start to the last one's end (ms)
    xs = [x for trace in fig.data for x in trace.x if x is not None]
    last_end = ((kernels - 1) * (step_us // kernels) + 1) / 1000.0
    assert min(xs) == 0.0 and max(xs) == pytest.approx(last_end, abs=0.002)
    assert {t.name for t in fig.data} == {"compute", "NCCL"}
    rows = {y for trace in fig.data for y in trace.y if y is not None}
    assert rows == {f"GPU stream {7 + k}" for k in range(streams)}
