"""The training simulator's profiler traces (perfkit.lab.sim.training_traces): they have the real
Kineto traces' schema, perfkit.traces reads them, and the breakdown it computes is the simulator's
own step split (data wait, compute, collective time per rank per step). The two embedded bundles
that carry them are the generator's output, and their trace analysis names the data pipeline and
communication. The bundle reader lists traces/ with bounds."""

from __future__ import annotations

import gzip
import json
import os
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from perfkit.lab.sim.training import generate
from perfkit.lab.sim.training_engine import simulate
from perfkit.lab.sim.training_physics import H2D_S
from perfkit.lab.sim.training_scenarios import TRAINING_SCENARIOS
from perfkit.lab.sim.training_traces import TRACED, profiled_steps, write_traces
from perfkit.sources import bundle as bundle_mod
from perfkit.sources.bundle import load_bundle
from perfkit.traces import analyze

ROOT = Path(__file__).resolve().parents[2]
SCENARIOS = ROOT / "data" / "scenarios"
#: real Kineto traces (HTA's test data; tests/data/hta-traces/SOURCE.txt says from where):
#: an A100 NCCL job of 16 ranks (integer µs) and a PyTorch 2.x trace with NCCL collective args
HTA_TRACES = ROOT / "tests" / "data" / "hta-traces"
FIXTURES = [
    HTA_TRACES / "negative_queue_length_values_check" / "rank0.json.gz",
    HTA_TRACES / "nccl_parser_config" / "nccl_data.json.gz",
]


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    """Both traced scenarios simulated at full length and their traces written (~1 s)."""
    out = {}
    for name in sorted(TRACED):
        run = simulate(TRAINING_SCENARIOS[name]())
        folder = tmp_path_factory.mktemp(name)
        facts = write_traces(run, folder)
        out[name] = (run, folder, facts)
    return out


def _doc(path: Path) -> dict:
    return json.loads(gzip.decompress(path.read_bytes()))


def _keys(docs: list[dict]) -> tuple[dict, dict, dict, dict]:
    """Per (ph, cat): the union and the intersection of event keys, and of ``args`` keys."""
    union, inter, aunion, ainter = defaultdict(set), {}, defaultdict(set), {}
    for d in docs:
        for e in d["traceEvents"]:
            k = (e.get("ph"), e.get("cat"))
            ks, a = set(e), set(e.get("args") or {})
            union[k] |= ks
            inter[k] = inter.get(k, ks) & ks
            aunion[k] |= a
            ainter[k] = ainter.get(k, a) & a
    return union, inter, aunion, ainter


def test_traces_have_the_real_fixtures_schema(written):
    real = [json.loads(gzip.decompress(p.read_bytes())) for p in FIXTURES]
    ru, ri, rau, rai = _keys(real)
    _, folder, facts = written["allreduce-scaling-64gpu"]
    assert facts["trace_files"] == 12  # 6 ranks x (baseline, incident)
    ours = _doc(folder / "traces" / "incident" / "rank-0.pt.trace.json.gz")
    ou, oi, oau, oai = _keys([ours])
    for k in ou:
        assert k in ru, f"event kind {k} is in no real trace"
        assert ou[k] <= ru[k], (k, ou[k] - ru[k])  # no key a real trace never has
        assert ri[k] <= oi[k], (k, ri[k] - oi[k])  # every key all real events of the kind have
        assert oau[k] <= rau[k], (k, oau[k] - rau[k])
        assert rai[k] <= oai[k], (k, rai[k] - oai[k])
    for kind in (("X", "kernel"), ("X", "cuda_runtime"), ("X", "cpu_op"), ("X", "user_annotation"), ("X", "gpu_memcpy")):  # fmt: skip
        assert kind in ou, kind
    # the header: the keys perfkit.traces and HTA read, with the real traces' sub-keys
    for key in ("schemaVersion", "deviceProperties", "distributedInfo", "traceEvents"):
        assert key in ours
    assert set(ours["deviceProperties"][0]) <= set(real[1]["deviceProperties"][0])
    assert set(ours["distributedInfo"]) <= set(real[1]["distributedInfo"])
    assert ours["distributedInfo"]["world_size"] == 64 and ours["distributedInfo"]["rank"] == 0
    # µs since the epoch, integers (Chrome's trace format: ts in µs), in the scenario's day
    spec = TRAINING_SCENARIOS["allreduce-scaling-64gpu"]()
    ts = [e["ts"] for e in ours["traceEvents"] if e.get("ph") == "X"]
    assert all(isinstance(t, int) for t in ts)
    t0 = spec.start.timestamp() * 1e6
    assert t0 + spec.window[0] * 1e6 <= min(ts) and max(ts) <= t0 + spec.window[1] * 1e6


def test_streams_are_serial_and_gpu_work_follows_its_launch(written):
    for name, (_, folder, _) in written.items():
        for path in sorted((folder / "traces").rglob("*.gz")):
            events = _doc(path)["traceEvents"]
            launch_end = {
                e["args"]["correlation"]: e["ts"] + e["dur"] for e in events if e.get("cat") == "cuda_runtime"
            }
            by_stream = defaultdict(list)
            for e in events:
                if e.get("cat") in ("kernel", "gpu_memcpy"):
                    assert e["ts"] > launch_end[e["args"]["correlation"]], (name, path.name, e["name"])
                    by_stream[e["args"]["stream"]].append((e["ts"], e["ts"] + e["dur"]))
            for stream, spans in by_stream.items():
                spans.sort()
                starts, ends = np.array(spans).T
                assert np.all(starts[1:] >= ends[:-1]), (name, path.name, stream)


def test_breakdown_is_the_simulators_step_split(written):
    """perfkit.traces' numbers per rank against the simulator's per-step data wait, compute and
    collective time of the analysed steps (HTA leaves the last profiled step out)."""
    for name, (run, folder, _) in written.items():
        spec = run.spec
        for label, window in (("baseline", spec.baseline), ("incident", spec.window)):
            rows = profiled_steps(run, window)[:-1]
            report = analyze(folder / "traces" / label)
            for r in report.ranks:
                rk = r.rank
                wait, comp, comm = run.wait[rows, rk], run.compute[rows, rk], run.comm[rows, rk]
                assert [s.step for s in r.steps] == list(run.step[rows])
                for s, i in zip(r.steps, rows, strict=True):
                    assert s.dur_us / 1e6 == pytest.approx(run.t_end[i] - run.t_start[i], abs=2e-6)
                    # the DataLoader call: the simulator's wait less the host-to-device copy
                    assert s.dataloader_us / 1e6 == pytest.approx(max(run.wait[i, rk] - H2D_S, 0), abs=2e-4)
                t = r.temporal
                # compute kernels run back to back: their union is the simulator's compute time
                assert t.compute_us / 1e6 == pytest.approx(comp.sum(), rel=1e-4), (name, label, rk)
                # the GPU idles while the rank waits for its batch (the first step's wait comes
                # before the first GPU event, outside HTA's kernel time)
                assert t.idle_us / 1e6 == pytest.approx(np.maximum(wait[1:] - H2D_S, 0).sum(), abs=1e-3)
                # only collectives (exposed, or waiting for the slowest rank) and the batch copies
                assert t.non_compute_us / 1e6 == pytest.approx(comm.sum() + len(rows) * H2D_S, abs=2e-3)
            # the window's intended shares: the trace's communication share is the simulator's
            intended = run.shares(*window)
            comm_pct = np.mean([r.temporal.pct(r.temporal.non_compute_us) for r in report.ranks])
            assert comm_pct == pytest.approx(100 * intended["comm_share"], abs=3.0), (name, label)


def test_same_run_same_bytes(written, tmp_path):
    run, folder, _ = written["dataloader-starvation"]
    write_traces(run, tmp_path)
    ours = sorted(p.relative_to(tmp_path) for p in (tmp_path / "traces").rglob("*.gz"))
    assert ours == sorted(p.relative_to(folder) for p in (folder / "traces").rglob("*.gz"))
    for rel in ours:
        assert (tmp_path / rel).read_bytes() == (folder / rel).read_bytes(), rel


def test_embedded_traces_are_the_generators_output(tmp_path):
    """data/scenarios/*/traces are what ``perfkit generate NAME`` writes: the same files with the
    same text (compared gunzipped: another zlib build may compress the same text to other bytes;
    on one machine the bytes are equal, test_same_run_same_bytes)."""
    for name in sorted(TRACED):
        generate(TRAINING_SCENARIOS[name](), tmp_path / name)
        mine = sorted(p.relative_to(tmp_path / name) for p in (tmp_path / name / "traces").rglob("*"))
        theirs = sorted(p.relative_to(SCENARIOS / name) for p in (SCENARIOS / name / "traces").rglob("*"))
        assert mine == theirs, name
        for rel in mine:
            if (tmp_path / name / rel).is_file():
                ours = gzip.decompress((tmp_path / name / rel).read_bytes())
                assert ours == gzip.decompress((SCENARIOS / name / rel).read_bytes()), rel


def test_only_the_traced_scenarios_carry_traces(tmp_path):
    generate(TRAINING_SCENARIOS["train-healthy"](), tmp_path / "h", duration_s=600)
    assert not (tmp_path / "h" / "traces").exists()
    assert load_bundle(tmp_path / "h").traces == []
    # a compressed story still profiles both windows
    generate(TRAINING_SCENARIOS["dataloader-starvation"](), tmp_path / "d", duration_s=600)
    b = load_bundle(tmp_path / "d")
    runs = b.trace_runs()
    assert sorted(runs) == ["baseline", "incident"] and all(len(v) == 8 for v in runs.values())
    assert b.files["traces"][0] == "traces/baseline/rank-0.pt.trace.json.gz"
    assert b.missing == []


def test_embedded_dataloader_traces_name_the_data_pipeline():
    """After the workers were cut 8 -> 2, in every profiled step one rank waits a large share of
    the step in enumerate(DataLoader) with its GPU idle, and the others wait in the collective."""
    base = analyze(SCENARIOS / "dataloader-starvation" / "traces" / "baseline")
    inc = analyze(SCENARIOS / "dataloader-starvation" / "traces" / "incident")

    def slowest_share(report):  # per step, the largest rank's data-loader share of the step
        steps = defaultdict(list)
        for r in report.ranks:
            for s in r.steps:
                steps[s.step].append(s.dataloader_us / s.dur_us)
        return [max(v) for v in steps.values()]

    assert max(slowest_share(base)) < 0.01
    # two workers cannot keep up: most steps one rank waits for a quarter to half of the step
    # (the four prefetched batches cover a step now and then)
    shares = slowest_share(inc)
    assert np.mean(shares) > 0.2 and sum(v > 0.2 for v in shares) >= len(shares) // 2 + 1
    for r in inc.ranks:  # a rank's GPU idle is its own data wait
        loader = sum(s.dataloader_us for s in r.steps[1:])
        assert r.temporal.idle_us == pytest.approx(loader, abs=1000.0 * len(r.steps))
    assert max(r.temporal.pct(r.temporal.idle_us) for r in inc.ranks) > 15.0
    assert max(r.temporal.pct(r.temporal.idle_us) for r in base.ranks) < 1.0


def test_embedded_scaling_traces_name_communication():
    """32 -> 64 GPUs: the exposed collectives go from ~15 % to ~35 % of GPU time, compute stays,
    nothing waits for data."""
    base = analyze(SCENARIOS / "allreduce-scaling-64gpu" / "traces" / "baseline")
    inc = analyze(SCENARIOS / "allreduce-scaling-64gpu" / "traces" / "incident")
    nb = np.mean([r.temporal.pct(r.temporal.non_compute_us) for r in base.ranks])
    ni = np.mean([r.temporal.pct(r.temporal.non_compute_us) for r in inc.ranks])
    assert 12 <= nb <= 20 and 32 <= ni <= 42, (nb, ni)
    for report in (base, inc):
        types = report.kernel_types()
        assert types["COMMUNICATION"]["pct"] > 15
        assert all(s.dataloader_pct < 1 for r in report.ranks for s in r.steps)
        assert all(r.temporal.pct(r.temporal.idle_us) < 1 for r in report.ranks)
    assert inc.kernel_types()["COMMUNICATION"]["pct"] > 2 * base.kernel_types()["COMMUNICATION"]["pct"]


# -- the bundle reader's traces/ ------------------------------------------------------------------


def _bundle(tmp_path: Path) -> Path:
    root = tmp_path / "b"
    root.mkdir(parents=True)
    (root / "incident.yaml").write_text(
        "id: X\ntitle: t\nservice: s\nwindow: {start: '2026-01-01T00:00:00Z', end: '2026-01-01T01:00:00Z'}\n"
    )
    return root


def test_bundle_reader_lists_runs_and_refuses_what_it_must(tmp_path):
    root = _bundle(tmp_path)
    t = root / "traces"
    (t / "a").mkdir(parents=True)
    (t / "a" / "rank-0.json").write_text("{}")
    (t / "a" / "notes.txt").write_text("not a trace")
    (t / "a" / "deeper").mkdir()
    (t / "top.json.gz").write_bytes(b"")
    outside = tmp_path / "secret.json"
    outside.write_text("{}")
    os.symlink(outside, t / "a" / "link.json")
    os.mkfifo(t / "a" / "pipe.json")
    b = load_bundle(root)
    assert b.traces == [t / "a" / "rank-0.json", t / "top.json.gz"]
    assert b.trace_runs() == {"a": [t / "a" / "rank-0.json"], "": [t / "top.json.gz"]}
    text = "\n".join(b.missing)
    assert "traces/a/link.json resolves outside the bundle" in text
    assert "traces/a/pipe.json is not a regular file" in text
    assert "traces/a/deeper is nested two folders deep" in text


def test_bundle_reader_bounds_the_listing(tmp_path, monkeypatch):
    root = _bundle(tmp_path)
    for run in ("r1", "r2", "r3"):
        (root / "traces" / run).mkdir(parents=True)
        for k in range(3):
            (root / "traces" / run / f"rank-{k}.json").write_text("{}")
    monkeypatch.setattr(bundle_mod, "MAX_TRACE_FILES", 4)
    b = load_bundle(root)
    assert len(b.traces) == 4
    assert any("more than 4 trace files; traces/r2/rank-1.json and later not read" in m for m in b.missing)
    monkeypatch.setattr(bundle_mod, "MAX_TRACE_FILES", 1024)
    monkeypatch.setattr(bundle_mod, "MAX_TRACE_RUNS", 2)
    b = load_bundle(root)
    assert sorted(b.trace_runs()) == ["r1", "r2"]
    assert any("more than 2 sub-folders; traces/r3 and later not read" in m for m in b.missing)
    # traces/ itself a link out of the bundle: nothing listed
    other = _bundle(tmp_path / "o")
    os.symlink(root / "traces", other / "traces")
    b = load_bundle(other)
    assert b.traces == [] and any("traces/ resolves outside the bundle" in m for m in b.missing)


def test_stragglers_read_the_nccl_kernels_newer_nccl_names():
    """The simulated traces carry NCCL 2.21's kernel names (ncclDevKernel_*), as the bundles' logs:
    straggler detection must compare them, not report that there is no communication kernel."""
    from perfkit.traces import analyze

    report = analyze(SCENARIOS / "allreduce-scaling-64gpu" / "traces" / "incident")
    assert report.stragglers.kernel is not None and report.stragglers.kernel.startswith("ncclDevKernel")


def _simulated_lateness(run, rows, ranks, k=2):
    """What the simulation implies for HTA's late-start test, from the simulator's own numbers:
    per analysed step, the ranks in order of arrival at the step's last collective (wait +
    compute, latest first), among those whose collective lasts at least 1 % of the mean step
    (its ``comm``: HTA's min_normalized_duration; a rank that arrives last does not wait, so its
    collective can be shorter); the count of steps each rank is among the ``k`` latest; the
    ``k`` ranks most often late."""
    mean_step = float(np.mean(run.t_end[rows] - run.t_start[rows]))
    order, counts, seen = {}, dict.fromkeys(ranks, 0), set()
    for i in rows:
        compared = [r for r in ranks if run.comm[i, r] >= 0.01 * mean_step]
        arrive = {r: run.wait[i, r] + run.compute[i, r] for r in compared}
        order[int(run.step[i])] = sorted(compared, key=lambda r: -arrive[r])
        seen.update(compared)
        for r in order[int(run.step[i])][:k]:
            counts[r] += 1
    flagged = sorted((r for r in counts if counts[r]), key=lambda r: (-counts[r], r))[:k]
    return order, {r: c for r, c in counts.items() if r in seen}, flagged


def test_stragglers_are_the_ranks_the_simulation_made_late(written):
    """Issue 28 row 13: the flagged ranks are the ones the simulation made reach the collective
    last, step by step, not merely "some ranks". In both scenarios and both windows the
    detector's per-step order, its counts and its flagged ranks equal what the simulator's
    wait + compute imply (above). A detector that flagged by rank number, by file order or by
    duration instead of start fails here."""
    for name, (run, folder, _) in written.items():
        for label, window in (("baseline", run.spec.baseline), ("incident", run.spec.window)):
            rows = profiled_steps(run, window)[:-1]
            report = analyze(folder / "traces" / label)
            s = report.stragglers
            ranks = [r.rank for r in report.ranks]  # the traced ranks: the files written
            order, counts, flagged = _simulated_lateness(run, rows, ranks)
            got = {step: sorted(by, key=lambda r: -by[r]) for step, by in s.start_by_step.items()}
            assert got == order, (name, label)
            assert s.counts == counts, (name, label)
            assert s.ranks == flagged, (name, label)


def test_healthy_windows_flag_only_what_the_definition_implies(written):
    """HTA's test flags the ``k`` latest ranks of every step whatever the spread, so a healthy run
    always has "stragglers". In the baselines (no fault) they are late by arrival noise only:
    under 3 % of a step after the earliest rank (the simulator's compute jitter, 0.8 %, and
    data-loader jitter), while a rank the incident starves of data (dataloader-starvation,
    the rank with the longest wait in a step) reaches its collective up to half a step late.
    That starved rank is never compared: it arrives last, its collective does not wait and
    lasts under 1 % of a step (HTA's filter), so HTA's definition cannot name it (docs/traces.md)."""
    for name, (_, folder, _) in written.items():
        s = analyze(folder / "traces" / "baseline").stragglers
        assert len(s.ranks) == 2  # the definition: k = 2 candidates, always
        for by in s.start_by_step.values():
            assert max(by.values()) - min(by.values()) < 0.03, (name, by)
    run, folder, _ = written["dataloader-starvation"]
    rows = profiled_steps(run, run.spec.window)[:-1]
    report = analyze(folder / "traces" / "incident")
    s = report.stragglers
    ranks = [r.rank for r in report.ranks]
    starved_late = 0
    for i in rows:
        wait = {r: run.wait[i, r] for r in ranks}
        starved = max(wait, key=wait.get)
        lead = run.wait[i, starved] - np.median([wait[r] for r in ranks])
        if lead > 0.1 * (run.t_end[i] - run.t_start[i]):  # a step where one rank starves
            starved_late += 1
            assert starved not in s.start_by_step[int(run.step[i])], int(run.step[i])
    assert starved_late >= 2
