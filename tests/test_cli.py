"""The CLI as a user meets it: contracts on stdout, one-line errors, exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfkit.app.cli.main import cli

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "data" / "scenarios"


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args))


def test_triage_json_contract():
    res = invoke("triage", "--bundle", str(SCENARIOS / "release-regression"), "--format", "json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    # DESIGN.md §5's keys, plus the workload scope, the workloads found and the span judged (issue 9),
    # and the serving engine whose series answered (issue 24), and what the sources read but is less
    # certain than it looks (issue 35: log lines placed by their neighbours' times), and each replica
    # against its peers (issue 37: null for the one engine this bundle holds)
    assert doc["engine"] == {"name": "vllm", "title": "vLLM", "version": "0.8.5"}  # its logs say 0.8.5
    assert doc["replicas"] is None
    assert set(doc) == {
        "replicas",
        "notes",
        "engine",
        "incident",
        "window",
        "symptoms",
        "directions",
        "missing",
        "scope",
        "workloads",
        "judged",
    }
    assert (
        doc["scope"] is None and len(doc["workloads"]) == 1 and doc["judged"]["end"] == doc["window"]["end"]
    )
    assert set(doc["window"]) == {"start", "end"}
    ranks = [d["rank"] for d in doc["directions"]]
    assert ranks == list(range(1, 10))
    assert [d["score"] for d in doc["directions"]] == sorted(
        (d["score"] for d in doc["directions"]), reverse=True
    )
    ids = {d["id"] for d in doc["directions"]}
    assert ids == {
        "data_pipeline",
        "network_communication",
        "kv_cache_allocation",
        "decode_efficiency",
        "scheduler_queueing",
        "memory_oversubscription",
        "training_instability",
        "prefill_decode_interference",
        "release_regression",
    }
    for d in doc["directions"]:
        assert d["verdict"] in ("confirmed", "ruled_out", "inconclusive")
        assert set(d) >= {"id", "rank", "score", "verdict", "symptom", "verification", "suspect_version"}
        assert (d["suspect_version"] is not None) == (d["id"] == "release_regression")
    assert doc["directions"][0]["suspect_version"] == "v2.4.0"
    # training rows on a serving incident: in the JSON (the contract lists all nine) but marked as
    # not applying, never confirmed, and the training series they lack are no gap in `missing`
    loss = next(d for d in doc["directions"] if d["id"] == "training_instability")
    assert loss["verdict"] == "inconclusive" and loss["applies"] is False and loss["about"] == "training"
    assert not any("train_" in m for m in doc["missing"]), doc["missing"]
    assert doc["directions"][0]["margin"]["margin"] >= 0.05  # a confirmation states its closest cut


def test_triage_table_for_people():
    res = invoke("triage", "--bundle", str(SCENARIOS / "queueing-traffic-surge"))
    assert res.exit_code == 0, res.output
    # the table lists all nine directions whatever the answer: read its first data row (rank 1)
    rows = [line for line in res.output.splitlines() if line.startswith("│") and line.split("│")[1].strip()]
    cells = [c.strip() for c in rows[0].split("│")[1:-1]]
    rank, direction, _symptom, fired, verdict = cells[:5]
    assert (rank, direction, fired, verdict) == ("1", "scheduler_queueing", "yes", "confirmed"), rows[0]
    # and no other direction is confirmed beside it
    others = [[c.strip() for c in r.split("│")[1:-1]] for r in rows[1:]]
    assert [c[1] for c in others if c[4] == "confirmed"] == [], res.output


def test_malformed_metrics_line_names_file_and_line(scenario_copy):
    bundle = scenario_copy("release-regression")
    om = bundle / "metrics" / "vllm.om"
    lines = om.read_text().splitlines()
    lines[5] = "vllm:num_requests_running{engine=0} 3 1794000000"
    om.write_text("\n".join(lines) + "\n")
    res = invoke("triage", "--bundle", str(bundle))
    assert res.exit_code == 2
    assert res.output.strip().splitlines()[-1] == (f"perfkit: {om}:6: malformed labels '{{engine=0}}'")
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-p", "colour=blue"], "unknown runbook parameter(s) colour"),
        (["-p", "start=2026-11-18T15:00:00Z", "-p", "end=2026-11-18T14:00:00Z"], "window: ends"),
        (
            ["-p", "start=yesterday", "-p", "end=2026-11-18T14:00:00Z"],
            "parameter start: cannot read 'yesterday'",
        ),
    ],
)
def test_bad_run_parameters_are_one_line_errors(tmp_path, args, message):
    res = invoke(
        "run",
        "inference_latency",
        "--bundle",
        str(SCENARIOS / "release-regression"),
        "-o",
        str(tmp_path / "o"),
        *args,
    )
    assert res.exit_code == 2
    assert message in res.output and "Traceback" not in res.output


def test_unknown_runbook_and_missing_bundle(tmp_path):
    res = invoke(
        "run", "no_such_runbook", "--bundle", str(SCENARIOS / "release-regression"), "-o", str(tmp_path)
    )
    assert res.exit_code == 2 and "unknown runbook 'no_such_runbook'" in res.output
    res = invoke("triage", "--bundle", str(tmp_path / "nope"))
    assert res.exit_code == 2 and "bundle folder not found" in res.output


def test_batch_file_errors_name_the_file(tmp_path):
    f = tmp_path / "b.yaml"
    f.write_text("- bundle: [unclosed\n")
    res = invoke("batch", str(f))
    assert res.exit_code == 2 and f"{f}:" in res.output and "invalid YAML" in res.output


def test_open_writes_a_parameterized_copy(tmp_path):
    res = invoke(
        "open",
        "inference_latency",
        "--bundle",
        str(SCENARIOS / "release-regression"),
        "-o",
        str(tmp_path / "inc"),
        "-p",
        "start=2026-11-18T13:50:00Z",
        "--no-lab",
    )
    assert res.exit_code == 0, res.output
    nb = json.loads((tmp_path / "inc" / "inference_latency.ipynb").read_text())
    injected = [c for c in nb["cells"] if "injected-parameters" in c["metadata"].get("tags", [])]
    assert len(injected) == 1
    src = "".join(injected[0]["source"])
    assert 'start = "2026-11-18T13:50:00Z"' in src and "release-regression" in src


@pytest.mark.slow
def test_triage_on_a_fleet_lists_the_workloads_and_the_scope_to_use(tmp_path):
    from fleet import HOST, MODEL, OTHER_MODEL, fleet_bundle

    bundle = fleet_bundle(tmp_path)
    res = invoke("triage", "--bundle", str(bundle))
    assert res.exit_code == 0, res.output
    assert "2 workloads in the evidence, judged together" in res.output
    assert f"--scope '{{model_name=\"{MODEL}\"}}'" in res.output
    assert f"--scope '{{model_name=\"{OTHER_MODEL}\"}}'" in res.output
    doc = json.loads(invoke("triage", "--bundle", str(bundle), "--format", "json").output)
    assert sorted(w["value"] for w in doc["workloads"]) == sorted([MODEL, OTHER_MODEL])
    assert doc["missing"][0].startswith("scope: the evidence holds 2 workloads")
    scoped = invoke(
        "triage", "--bundle", str(bundle), "--scope", f'{{model_name="{MODEL}"}}', "--format", "json"
    )
    assert scoped.exit_code == 0, scoped.output
    sdoc = json.loads(scoped.output)
    assert sdoc["scope"]["hosts"] == [HOST] and sdoc["workloads"] == []
    single = json.loads(
        invoke("triage", "--bundle", str(SCENARIOS / "decode-thermal-throttle"), "--format", "json").output
    )
    assert [(d["id"], d["verdict"]) for d in sdoc["directions"]] == [
        (d["id"], d["verdict"]) for d in single["directions"]
    ]
    typo = invoke("triage", "--bundle", str(bundle), "--scope", '{model_name="qwen3"}')
    assert typo.exit_code == 2 and "matches no series" in typo.output and OTHER_MODEL in typo.output
