"""The baseline-capture runbook and the inference runbook's baseline extras.

Most tests call the section functions in process on hand-made results whose verdict is known; one
benches the reference server twice (the second time slowed) and sees the gate name the regression;
the ``notebook`` tests execute the runbooks with papermill and read the findings they recorded."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import perfkit.app.runbooks.baseline as br
from perfkit.core.findings import findings_from_notebook
from perfkit.loadgen import store

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "data" / "scenarios" / "p95-prefill-interference"


def bench_doc(*, started: str, ttft: float = 50.0, itl: float = 10.0, rps: float = 10.0, failed: int = 0,
              rate: float | None = None, version: str = "", completed: int = 1200) -> dict[str, Any]:  # fmt: skip
    """A perfkit.bench/1 document with known values (the shared spec's fields)."""
    doc: dict[str, Any] = {
        "schema": "perfkit.bench/1",
        "completed": completed,
        "failed": failed,
        "duration": completed / rps,
        "total_input_tokens": completed * 128,
        "total_output_tokens": completed * 64,
        "request_throughput": rps,
        "output_throughput": rps * 64,
        "total_token_throughput": rps * 192,
        "errors": {
            "total": failed,
            "rate": failed / (completed + failed),
            "by_kind": {"http_5xx": failed} if failed else {},
        },  # fmt: skip
        "goodput": None,
        "percentiles": {"ttft_ms": {"50": ttft, "99": ttft * 1.3}, "itl_ms": {"50": itl, "99": itl * 1.3}},
        "load": {
            "shape": "rate" if rate else "concurrency",
            "concurrency": None if rate else 8,
            "rate": rate,
            "requested_rate": rate,
            "prompt_tokens": 128,
            "output_tokens": 64,
            "endpoint": "completions",
        },  # fmt: skip
        "meta": {"model": "llama", "started": started, "labels": {"version": version} if version else {}},
        "validity": {"valid": True, "reasons": []},
        "records": None,
        "interrupted": False,
    }
    for stat, factor in (("mean", 1.0), ("median", 1.0), ("std", 0.1), ("p99", 1.3)):
        doc[f"{stat}_ttft_ms"], doc[f"{stat}_tpot_ms"] = ttft * factor, itl * factor
        doc[f"{stat}_itl_ms"], doc[f"{stat}_e2el_ms"] = itl * factor, (ttft + 63 * itl) * factor
    return doc


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
def baselines(tmp_path: Path) -> Path:
    """A store of three runs of the same load: ITL median 10.0, 10.1, 9.9 ms."""
    folder = tmp_path / "store"
    for i, itl in enumerate((10.0, 10.1, 9.9), start=1):
        run = write(
            tmp_path / f"base{i}.json",
            bench_doc(started=f"2026-03-0{i}T10:00:00Z", itl=itl, version=f"1.{i}"),
        )
        store.add(run, folder)
    return folder


def test_a_slower_run_is_a_regression_named_in_every_section(tmp_path, baselines):
    # ITL median 14 ms against a history of 10 (band: 10 % of the median, the spread's 3 x 1.48 x 0.1 is smaller)
    slow = write(tmp_path / "slow.json", bench_doc(started="2026-03-05T10:00:00Z", itl=14.0, version="1.4"))
    cap = br.open_capture(result=str(slow), store=str(baselines))
    assert cap.error is None and cap.mode == "loaded"
    verdict = br.verdict(cap).finding
    assert verdict.status == "critical" and verdict.data["verdict"] == "regress"
    assert "median_itl_ms" in verdict.data["regressed"] and "median_ttft_ms" not in verdict.data["regressed"]
    table = dict(zip(verdict.table["columns"], zip(*verdict.table["rows"], strict=True), strict=True))
    assert table["status"][table["metric"].index("median_itl_ms")] == "regressed"
    history = br.history(cap).finding
    assert history.status == "ok" and len(history.data["runs"]) == 3
    assert [r[0] for r in history.table["rows"]] == ["1: 1.1", "2: 1.2", "3: 1.3", "new"]
    panels = [a["text"].split(" ")[0] for a in history.figure["layout"]["annotations"]]
    # TPOT, ITL and E2E (mean, median, p99) regressed: 9, more than the 8 panels, all shown first
    assert len(verdict.data["regressed"]) == 9 and set(panels) <= set(verdict.data["regressed"])
    assert len(panels) == br.MAX_PANELS and "median_itl_ms" in panels
    bench = br.result(cap).finding
    assert bench.status == "ok" and bench.summary.startswith("all 1200 requests completed")
    assert br.curve(cap).finding.status == "missing"  # no sweep given: said, not raised
    model = br.findings(cap).finding.data
    assert model["severity"] == "blocks the release" and "median_itl_ms 14" in model["root_cause"]
    assert model["action_items"][0]["priority"] == "P0"
    impact = {r[0]: r for r in model["impact"]["rows"]}
    assert impact["median_itl_ms"][1:] == ["10", "14", "+40.0 %", "11", "regressed"]
    assert impact["median_ttft_ms"][-1] == "pass"


def test_the_same_run_passes_and_is_added_to_the_store(tmp_path, baselines):
    same = write(tmp_path / "same.json", bench_doc(started="2026-03-05T10:00:00Z", itl=10.05, version="1.4"))
    cap = br.open_capture(result=str(same), store=str(baselines), add_to_store=True)
    assert cap.verdict["verdict"] == "pass" and cap.added is not None
    assert len(store.list_baselines(baselines)) == 4
    assert br.verdict(cap).finding.status == "ok" and cap.added in br.verdict(cap).finding.summary


def test_a_poisoned_store_file_is_named_and_the_runbook_judges_on_the_rest(tmp_path, baselines):
    """Issue 35 item 5: a stored baseline whose ITL median is -1e9 ms (no measurement) and one that is
    not JSON. Every section still renders; the verdict passes an unchanged run on the two good
    baselines and says how many files it skipped; the findings name each file, which stays as it was."""
    files = sorted((baselines / "baselines").glob("*.json"))
    doc = json.loads(files[-1].read_text())
    doc["median_itl_ms"] = -1e9
    files[-1].write_text(json.dumps(doc))
    broken = baselines / "baselines" / "20260304T100000Z-llama-0badf11e.json"
    broken.write_text('{"schema": ')
    kept = {f: f.read_bytes() for f in (files[-1], broken)}
    same = write(tmp_path / "same.json", bench_doc(started="2026-03-05T10:00:00Z", itl=10.05, version="1.4"))
    cap = br.open_capture(result=str(same), store=str(baselines))
    assert cap.error is None and cap.verdict["verdict"] == "pass", cap.verdict
    assert len(cap.verdict["history"]) == 2 and len(cap.verdict["skipped"]) == 2
    skipped = [m for m in cap.missing if m.startswith("store: skipped ")]
    assert len(skipped) == 2 and any(
        files[-1].name in m and "median_itl_ms is -1e+09 ms" in m for m in skipped
    )
    assert any(broken.name in m and "invalid JSON" in m for m in skipped)
    verdict = br.verdict(cap).finding
    assert verdict.status == "ok" and "skipped 2 baseline files of the store" in verdict.summary
    assert br.history(cap).finding.status == "ok"
    model = br.findings(cap).finding
    assert all(m in model.missing for m in skipped)
    assert {f: f.read_bytes() for f in kept} == kept


@pytest.mark.notebook
def test_the_notebook_runs_on_a_poisoned_store(tmp_path, baselines):
    """runbooks/baseline_capture.ipynb executed (papermill) on a store holding a file that is not JSON:
    it completes, the gate passes an unchanged run, and the report names the file it skipped."""
    from perfkit.app.runner.run import execute

    broken = baselines / "baselines" / "20260304T100000Z-llama-0badf11e.json"
    broken.write_text("[" * 100)
    same = write(tmp_path / "same.json", bench_doc(started="2026-03-05T10:00:00Z", itl=10.05, version="1.4"))
    result = execute("baseline_capture", tmp_path / "out", {"result": str(same), "store": str(baselines)})
    assert result.error is None, result.error
    findings = findings_from_notebook(json.loads(result.notebook.read_text()))
    assert findings["verdict"].data["verdict"] == "pass" and len(findings["verdict"].data["skipped"]) == 1
    assert any(broken.name in m for m in findings["postmortem"].missing)
    assert broken.name in result.outputs["markdown"].read_text()


def test_failures_come_first(tmp_path, baselines):
    doc = bench_doc(started="2026-03-05T10:00:00Z", failed=24)
    cap = br.open_capture(result=str(write(tmp_path / "f.json", doc)), store=str(baselines))
    bench = br.result(cap).finding
    assert bench.status == "warn" and bench.summary.startswith(
        "24 of 1224 requests FAILED (2.0%: http_5xx 24)"
    )


def test_earlier_results_are_the_history_without_a_store(tmp_path):
    paths = [
        write(tmp_path / f"r{i}.json", bench_doc(started=f"2026-03-0{i}T10:00:00Z", ttft=50 + i))
        for i in (1, 2)
    ]
    cap = br.open_capture(result=",".join(map(str, paths)))
    assert cap.verdict["verdict"] == "pass" and len(cap.verdict["history"]) == 1


def test_bad_input_is_said_by_every_section(tmp_path):
    missing = br.open_capture(result=str(tmp_path / "nope.json"))
    assert "nope.json" in missing.error
    for section in (br.result, br.curve, br.history, br.verdict, br.findings):
        f = section(missing).finding
        assert f.status == "missing" and f.data["not_run"] == missing.error  # `perfkit run` then fails
    both = br.open_capture(result="a.json", url="http://127.0.0.1:9")
    assert "not both" in both.error
    bad = write(tmp_path / "bad.json", {**bench_doc(started="2026-03-05T10:00:00Z"), "completed": -1})
    assert "bad.json: completed" in br.open_capture(result=str(bad)).error
    (tmp_path / "p.yaml").write_text("history: many\n")
    assert "p.yaml: history" in br.open_capture(result=str(bad), policy=str(tmp_path / "p.yaml")).error


def test_a_sweep_of_results_marks_its_knee_and_a_broken_one_is_said(tmp_path, baselines):
    # 1 and 2 req/s kept up; at 4 req/s only 3.1 were served: 4 is saturated, 2 is the knee
    levels = [(1.0, 1.0, 60), (2.0, 2.0, 70), (4.0, 3.1, 900)]
    paths = [write(tmp_path / f"rate{r:g}.json", bench_doc(started="2026-03-05T10:00:00Z", rate=r, rps=a, ttft=t / 1.3))
             for r, a, t in levels]  # fmt: skip
    new = write(tmp_path / "new.json", bench_doc(started="2026-03-05T11:00:00Z"))
    cap = br.open_capture(result=str(new), store=str(baselines), sweep=",".join(map(str, paths)))
    curve = br.curve(cap).finding
    assert curve.status == "ok" and curve.data["knee"]["point"]["offered_rate"] == 2.0
    assert curve.data["knee"]["saturated_by"] == "throughput"
    assert [r[-1] for r in curve.table["rows"]] == ["", "knee", "saturated"]
    names = [t.get("name") for t in curve.figure["data"]]
    assert "knee 2 req/s" in names and "first saturated level" in names
    (tmp_path / "broken.json").write_text('{"schema": "perfkit.sweep/1", "points": [{"offered_rate": "x"}]}')
    broken = br.open_capture(result=str(new), store=str(baselines), sweep=str(tmp_path / "broken.json"))
    f = br.curve(broken).finding
    assert f.status == "error" and "broken.json" in f.summary and "offered_rate" in f.summary
    assert br.verdict(broken).finding.status == "ok"  # the other sections stand


def test_the_gate_catches_a_slowed_reference_server(tmp_path):
    """Issue 10's 'done when': bench the reference server, keep it, bench it slowed, see the gate fail."""
    from perfkit.lab.serve import serving

    folder = tmp_path / "store"
    load = {"concurrency": 8, "num_requests": 120, "output_tokens": 16, "calibrate": False}
    with serving(ttft_ms=20, itl_ms=5, model="lab") as url:
        first = br.open_capture(url=url, model="lab", out_dir=str(tmp_path / "a"), store=str(folder), add_to_store=True, **load)  # fmt: skip
    assert first.error is None and first.added and first.verdict["verdict"] == "unusable"  # no history yet
    with serving(ttft_ms=20, itl_ms=8, model="lab") as url:  # 60 % slower per token
        second = br.open_capture(url=url, model="lab", out_dir=str(tmp_path / "b"), store=str(folder), **load)
    assert second.verdict["verdict"] == "regress", second.verdict["summary"]
    assert "median_itl_ms" in second.verdict["regressed"]
    # no per-token metric passes a 60 % slowdown silently: each regressed, or is not judged (120
    # requests of which a loaded machine makes only a few independent), saying why, or passes only
    # because the runs' own measured noise (a stall of the shared machine in one block of requests
    # moves a mean) made its band wider than the change, which the row shows
    for m in second.verdict["metrics"]:
        if m["metric"] in ("median_tpot_ms", "mean_tpot_ms", "median_itl_ms", "mean_itl_ms"):
            noisy = m["band_from"] == "noise" and m["new"] - m["median"] <= m["band"]
            assert m["status"] == "regressed" or "too few requests" in (m.get("why") or "") or noisy, m
    bench = br.result(second).finding
    assert bench.figure is not None and bench.data["mode"] == "ran"  # each request, from the records
    assert len(store.list_baselines(folder)) == 1  # a regressed run is not added


def test_the_inference_baseline_section_shows_attainment_and_a_bench_result(tmp_path):
    import perfkit.app.runbooks.inference as rb

    bench = write(tmp_path / "bench.json", bench_doc(started="2026-03-05T10:00:00Z", ttft=400.0))
    ctx = rb.open_incident(str(SCENARIO), bench_result=str(bench))
    section = rb.baseline(ctx)
    f = section.finding
    rows = f.data["slo_attainment"]["rows"]
    assert [r["slo"] for r in rows] == ["ttft_p95_s", "tpot_p95_s", "itl_p95_s", "e2e_p99_s"]
    ttft = rows[0]
    # the incident's p95 TTFT is above its 1.5 s SLO (the scenario's tail): fewer than 95 % under it
    assert ttft["met"] is False and ttft["incident"]["share"] < 0.95 <= ttft["baseline"]["share"]
    assert "SLO attainment in the incident window: TTFT ≤ 1.5 s for" in f.summary
    extra = {e.key: e for e in section.extra_findings}["bench_result"]
    assert extra.status == "ok" and extra.data["file"] == str(bench)
    bench_rows = {r[0]: r for r in extra.table["rows"]}
    assert bench_rows["TTFT p50"][2] == 400.0 and bench_rows["TTFT p50"][3] is not None  # beside the window's


def test_a_broken_bench_result_never_breaks_the_baseline_section(tmp_path):
    import perfkit.app.runbooks.inference as rb

    (tmp_path / "bench.json").write_text('{"schema": "perfkit.bench/1", "completed": ')
    for path in (tmp_path / "bench.json", tmp_path / "absent.json"):
        section = rb.baseline(rb.open_incident(str(SCENARIO), bench_result=str(path)))
        assert section.finding.status != "error" and section.finding.table is not None
        extra = {e.key: e for e in section.extra_findings}["bench_result"]
        assert extra.status == "missing" and path.name in extra.missing[0]


@pytest.mark.slow  # ~10-35 s: in make test-all and CI, not make test
@pytest.mark.notebook
def test_the_runbook_runs_its_demo_headless_and_renders(tmp_path):
    from perfkit.app.runner.run import execute

    result = execute("baseline_capture", tmp_path / "out", {})
    assert result.error is None, result.error
    findings = findings_from_notebook(json.loads(result.notebook.read_text()))
    assert set(findings) == {"bench", "curve", "history", "verdict", "postmortem"}
    assert findings["bench"].status == "ok" and findings["bench"].data["completed"] == 200
    # the demo server's truth is 50 ms to the first token, 10 ms a token
    p = findings["bench"].data["percentiles"]
    assert 50 <= p["ttft_ms"]["50"] < 60 and 9.5 < p["itl_ms"]["50"] < 11
    assert len(findings["curve"].data["points"]) == 3 and findings["curve"].data["knee"]["point"]
    assert findings["history"].status == "ok" and len(findings["history"].data["runs"]) == 2
    # the same server three times: a pass, unless a busy machine moved a number past its band; either
    # way the table says what the gate decided
    verdict = findings["verdict"].data
    assert verdict["verdict"] in ("pass", "regress")
    for row in verdict["metrics"]:
        if row["status"] == "regressed":
            assert (row["new"] - row["limit"]) * (1 if row["direction"] == "lower_is_better" else -1) > 0
    md = result.outputs["markdown"].read_text()
    assert md.startswith(f"# Baseline capture: perfkit-lab, gate {verdict['verdict']}") and "## Impact" in md
    assert {"figure:bench", "figure:curve", "figure:history"} <= set(result.outputs)


@pytest.mark.notebook
def test_the_inference_runbook_takes_a_bench_result(tmp_path):
    from perfkit.app.runner.run import execute

    bench = write(tmp_path / "bench.json", bench_doc(started="2026-03-05T10:00:00Z"))
    result = execute(
        "inference_latency",
        tmp_path / "out",
        {"bundle": str(SCENARIO), "bench_result": str(bench), "predict_fix": False},
    )
    assert result.error is None, result.error
    findings = findings_from_notebook(json.loads(result.notebook.read_text()))
    assert findings["bench_result"].status == "ok" and findings["baseline"].data["slo_attainment"]["rows"]
    assert "Bench result beside the metrics" in result.outputs["markdown"].read_text()
