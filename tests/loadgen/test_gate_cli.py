"""``perfkit baseline add|list|show`` and ``perfkit gate`` through click: output, exit codes, verdict file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bench_docs import bench_doc as shared_bench_doc
from click.testing import CliRunner, Result

from perfkit.app.cli.gate import baseline, gate
from perfkit.app.cli.main import Cli

# the top-level group as cli.py builds it: its Cli class turns a PerfkitError into one line and exit 2
perfkit = Cli(name="perfkit", commands={"baseline": baseline, "gate": gate})


def bench_doc(*, ttft: float = 50.0, model: str = "llama", failed: int = 0, **load: Any) -> dict[str, Any]:
    """The shared builder (tests/bench_docs.py): 1,200 requests sent, ``failed`` of them HTTP 5xx,
    TTFT ``ttft`` ms; ``load`` overrides fields of the load signature."""
    completed = 1200 - failed
    doc = shared_bench_doc(
        ttft=ttft, model=model, completed=completed, failed=failed, rps=completed / 60.0, error_kind="http_5xx",
        attainment=None,
    )  # fmt: skip
    doc["load"].update(load)
    return doc


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(perfkit, [str(a) for a in args])


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, Path]:
    """A store holding three baselines of a 50 ms TTFT (one per day), and a runs folder."""
    runs, st = tmp_path / "runs", tmp_path / "store"
    runs.mkdir()
    for day, ttft in ((1, 50.0), (2, 50.5), (3, 49.5)):
        doc = bench_doc(ttft=ttft)
        doc["meta"]["started"] = f"2025-02-0{day}T10:00:00Z"
        (runs / f"b{day}.json").write_text(json.dumps(doc))
        res = run("baseline", "add", runs / f"b{day}.json", "--store", st, "--label", f"version=1.{day}")
        assert res.exit_code == 0, res.output
    return runs, st


def write(runs: Path, name: str, doc: dict[str, Any]) -> Path:
    path = runs / name
    path.write_text(json.dumps(doc))
    return path


def test_add_prints_the_id_and_list_show_find_it(setup: tuple[Path, Path]) -> None:
    runs, st = setup
    res = run(
        "baseline",
        "add",
        write(runs, "new.json", bench_doc(ttft=52.0)),
        "--store",
        st,
        "--label",
        "hardware=h200",
    )
    assert res.exit_code == 0
    ident = res.stdout.strip()
    assert ident.startswith("20250301T100000Z-llama-") and len(ident) == len("20250301T100000Z-llama-") + 8

    listed = run("baseline", "list", "--store", st, "--json")
    assert listed.exit_code == 0
    rows = json.loads(listed.stdout)
    assert [r["id"] for r in rows][0] == ident and len(rows) == 4
    assert rows[0]["labels"] == {"hardware": "h200"} and rows[1]["labels"] == {"version": "1.3"}

    table = run("baseline", "list", "--store", st, "--label", "version=1.2")
    assert table.exit_code == 0 and "version=1.2" in table.stdout and "version=1.3" not in table.stdout

    shown = run("baseline", "show", ident[:24], "--store", st)
    assert shown.exit_code == 0 and ident in shown.stdout and "hardware=h200" in shown.stdout
    assert "52.00 / 52.00 / 67.60" in shown.stdout  # TTFT mean / median / p99
    as_json = json.loads(run("baseline", "show", ident, "--store", st, "--json").stdout)
    assert as_json["baseline"]["labels"] == {"hardware": "h200"} and as_json["mean_ttft_ms"] == 52.0


def test_gate_pass_exits_0(setup: tuple[Path, Path], tmp_path: Path) -> None:
    runs, st = setup
    out = tmp_path / "verdict.json"
    res = run("gate", write(runs, "new.json", bench_doc(ttft=51.0)), "--store", st, "--out", out)
    assert res.exit_code == 0, res.output
    assert res.stdout.splitlines()[0].startswith("pass: 16 metrics within their bands against 3 baselines")
    assert json.loads(out.read_text())["verdict"] == "pass"


def test_gate_regression_exits_1_and_names_the_metrics_first(
    setup: tuple[Path, Path], tmp_path: Path
) -> None:
    runs, st = setup
    out = tmp_path / "verdict.json"
    res = run("gate", write(runs, "new.json", bench_doc(ttft=75.0)), "--store", st, "--out", out)
    assert res.exit_code == 1, res.output
    lines = res.stdout.splitlines()
    assert lines[0].startswith("REGRESSION in 3 metrics against 3 baselines: mean_ttft_ms +50.0 %")
    table = [ln for ln in lines if "better)" in ln]
    assert [ln.split()[1] for ln in table[:3]] == ["mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms"]
    assert all("regressed" in ln for ln in table[:3]) and not any("regressed" in ln for ln in table[3:])
    verdict = json.loads(out.read_text())
    assert verdict["exit_code"] == 1 and verdict["regressed"] == [
        "mean_ttft_ms",
        "median_ttft_ms",
        "p99_ttft_ms",
    ]


def test_gate_says_failures_first(setup: tuple[Path, Path]) -> None:
    runs, st = setup
    res = run("gate", write(runs, "new.json", bench_doc(failed=60)), "--store", st)
    assert res.exit_code == 1  # 5 % errors: more than the 1-point floor
    first = res.stdout.splitlines()[0]
    assert first.startswith("the new result has 60 failed requests of 1200 sent (5.0%; http_5xx 60)")
    assert "errors.rate" in res.stdout.splitlines()[1]


def test_gate_another_model_is_unusable(setup: tuple[Path, Path], tmp_path: Path) -> None:
    runs, st = setup
    out = tmp_path / "verdict.json"
    res = run("gate", write(runs, "new.json", bench_doc(model="qwen")), "--store", st, "--out", out)
    assert res.exit_code == 2
    assert "model (baselines llama, this run qwen)" in res.stderr
    verdict = json.loads(out.read_text())
    assert verdict["verdict"] == "unusable" and verdict["exit_code"] == 2 and verdict["metrics"] == []


def test_gate_history_option(setup: tuple[Path, Path]) -> None:
    runs, st = setup
    res = run("gate", write(runs, "new.json", bench_doc()), "--store", st, "--history", "1")
    assert res.exit_code == 0 and "against 1 baseline" in res.stdout


def test_gate_unreadable_result_is_one_line_exit_2(setup: tuple[Path, Path], tmp_path: Path) -> None:
    runs, st = setup
    bad = runs / "bad.json"
    bad.write_text('{"schema": "perfkit.bench/1",\n oops')
    out = tmp_path / "verdict.json"
    res = run("gate", bad, "--store", st, "--out", out)
    assert res.exit_code == 2
    assert res.stderr.count("\n") == 1 and "bad.json:2" in res.stderr and "Traceback" not in res.output
    assert json.loads(out.read_text())["verdict"] == "unusable"


def test_gate_bad_policy_names_file_and_key(setup: tuple[Path, Path], tmp_path: Path) -> None:
    runs, st = setup
    policy = tmp_path / "gate.yaml"
    policy.write_text("metrics:\n  p99_ttft_ms: {max_regression: lots}\n")
    res = run("gate", write(runs, "new.json", bench_doc()), "--store", st, "--policy", policy)
    assert res.exit_code == 2
    assert "gate.yaml: metrics.p99_ttft_ms.max_regression: expected a number" in res.stderr


def test_gate_policy_loosens_a_metric(setup: tuple[Path, Path], tmp_path: Path) -> None:
    runs, st = setup
    policy = tmp_path / "gate.yaml"
    policy.write_text(
        "metrics:\n"
        + "".join(f"  {s}_ttft_ms: {{max_regression: 60%}}\n" for s in ("mean", "median", "p99"))
        + "  mean_e2el_ms: {enabled: false}\n"
    )
    res = run("gate", write(runs, "new.json", bench_doc(ttft=75.0)), "--store", st, "--policy", policy)
    assert res.exit_code == 0, res.output
    assert "mean_e2el_ms (" not in res.stdout  # no row in the table: said once, as not judged
    assert f"not judged: mean_e2el_ms: turned off by the policy ({policy})" in res.stdout.replace("\n", "")


def test_gate_warns_about_a_corrupt_store_file(setup: tuple[Path, Path]) -> None:
    runs, st = setup
    corrupt = st / "baselines" / "20250101T000000Z-llama-0000000a.json"
    corrupt.write_text('{"schema": 1')
    res = run("gate", write(runs, "new.json", bench_doc()), "--store", st)
    assert res.exit_code == 0
    assert "perfkit: warning: skipped" in res.stderr and "0000000a.json:1: invalid JSON" in res.stderr
    assert corrupt.read_text() == '{"schema": 1'


def test_add_refuses_a_bad_label(setup: tuple[Path, Path]) -> None:
    runs, st = setup
    res = run("baseline", "add", runs / "b1.json", "--store", st, "--label", "config=a/b")
    assert res.exit_code == 2 and "path separator" in res.stderr


def test_list_of_a_missing_store(tmp_path: Path) -> None:
    res = run("baseline", "list", "--store", tmp_path / "none")
    assert res.exit_code == 2 and "no such store folder" in res.stderr
