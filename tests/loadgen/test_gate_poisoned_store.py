"""Issue 35 item 5, "the store survives a bad file": one baseline file that cannot be read or holds no
measurement is skipped with one line naming it and why; the gate judges on the rest, counts what it
skipped (text and JSON), still catches a real regression, and never touches the file.

Before this, a stored TTFT of 5e-324 ms made an unchanged run's change a percentage beyond a float's
range and the verdict unwritable (exit 2 on every deploy), and a stored TTFT of -1e9 ms made it
"regress" (exit 1). Result documents are synthetic (tests/bench_docs.py); the store is filled by
the real ``perfkit baseline add`` and then poisoned on disk, as a bad commit to it would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from bench_docs import bench_doc
from click.testing import CliRunner, Result

from perfkit.app.cli.main import cli
from perfkit.loadgen import plausible

REPO = Path(__file__).resolve().parents[2]
Poison = Callable[[dict[str, Any]], None]


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(cli, [str(a) for a in args])


def good_store(tmp_path: Path, days: tuple[int, ...] = (1, 2, 3)) -> Path:
    """A store of runs of a 50 ms TTFT, one a day, added by ``perfkit baseline add``."""
    st = tmp_path / "store"
    for day in days:
        path = tmp_path / f"b{day}.json"
        path.write_text(json.dumps(bench_doc(ttft=50.0 + day / 10, started=f"2025-02-0{day}T10:00:00Z")))
        added = run("baseline", "add", path, "--store", st)
        assert added.exit_code == 0, added.output
    return st


def poison(st: Path, change: Poison) -> Path:
    """Add one more good run to the store, then change its stored file on disk: the file the gate
    must now skip. Returns its path."""
    before = set((st / "baselines").glob("*.json"))
    src = st.parent / "victim.json"
    src.write_text(json.dumps(bench_doc(ttft=50.05, started="2025-02-09T10:00:00Z")))
    assert run("baseline", "add", src, "--store", st).exit_code == 0
    (path,) = set((st / "baselines").glob("*.json")) - before
    doc = json.loads(path.read_text())
    change(doc)
    path.write_text(json.dumps(doc))
    return path


def unchanged(tmp_path: Path, **fields: Any) -> Path:
    path = tmp_path / "new.json"
    path.write_text(json.dumps(bench_doc(ttft=50.1, started="2025-03-01T10:00:00Z", **fields)))
    return path


def gate_json(tmp_path: Path, result: Path, st: Path, *extra: str) -> tuple[Result, dict[str, Any]]:
    out = tmp_path / "verdict.json"
    out.unlink(missing_ok=True)
    res = run("gate", result, "--store", st, "-o", out, *extra)
    return res, json.loads(out.read_text())


def _set(**fields: Any) -> Poison:
    return lambda doc: doc.update(fields)


def _nested(key: str, **fields: Any) -> Poison:
    return lambda doc: doc[key].update(fields)


POISONS: dict[str, tuple[Poison, str]] = {
    # a median of 5e-324 ms: the change of any run is a percentage beyond a float (exit 2 before)
    "subnormal TTFT": (
        _set(mean_ttft_ms=5e-324, median_ttft_ms=5e-324),
        "mean_ttft_ms is 4.94066e-324 ms, under 1e-09 ms",
    ),  # fmt: skip
    # the median of the history dragged below zero: an unchanged run regressed (exit 1 before)
    "negative TTFT": (
        _set(mean_ttft_ms=-1e9, median_ttft_ms=-1e9),
        "mean_ttft_ms is -1e+09 ms: it cannot be negative",
    ),  # fmt: skip
    "TTFT of 3e300 years": (_set(p99_ttft_ms=1e308), "p99_ttft_ms is 1e+308 ms, over 6.05e+08 ms"),
    "throughput no link carries": (
        _set(output_throughput=1.7e308),
        "output_throughput is 1.7e+308 tok/s, over 1e+11 tok/s",
    ),  # fmt: skip
    "attainment above 1": (
        _nested("goodput", attainment=40.0),
        "goodput.attainment is 40, not a share from 0 to 1",
    ),
    "model as a list": (_nested("meta", model=["llama"]), "meta.model is a list, not text"),
    "started in 2999": (
        _nested("meta", started="2999-01-01T00:00:00Z"),
        "meta.started '2999-01-01T00:00:00Z' is in the future",
    ),  # fmt: skip
    "latency as text": (_set(mean_ttft_ms="fast"), "mean_ttft_ms: expected a finite number or null"),
}


@pytest.mark.parametrize("name", list(POISONS))
def test_an_unchanged_result_passes_with_a_poisoned_baseline_named_and_counted(
    tmp_path: Path, name: str
) -> None:
    change, says = POISONS[name]
    st = good_store(tmp_path)
    bad = poison(st, change)
    kept = bad.read_bytes()
    # judged against the newest baseline only: the poisoned one, until it is skipped
    res, verdict = gate_json(tmp_path, unchanged(tmp_path), st, "--history", "1")
    assert res.exit_code == 0, res.output
    assert verdict["verdict"] == "pass" and verdict["exit_code"] == 0
    # one line on stderr names the file and why
    lines = [line for line in res.stderr.splitlines() if bad.name in line]
    assert len(lines) == 1 and lines[0].startswith("perfkit: warning: skipped ") and says in lines[0], (
        res.stderr
    )
    # the text output and the JSON verdict say how many were skipped, and which
    assert "skipped 1 baseline file of the store" in res.stdout and "judged on the other 3" in res.stdout
    assert [Path(s["file"]).name for s in verdict["skipped"]] == [bad.name]
    assert says in verdict["skipped"][0]["why"]
    assert [h["started"] for h in verdict["history"]] == ["2025-02-03T10:00:00Z"]  # the newest good one
    assert bad.read_bytes() == kept  # never rewritten, never deleted


def test_the_real_command_line_passes_an_unchanged_result_and_names_the_file(tmp_path: Path) -> None:
    """``python -m perfkit gate`` in its own process, as CI runs it. Against the newest baseline, a
    stored TTFT of 5e-324 ms made the change of any run infinite and the verdict unwritable: exit 2."""
    st = good_store(tmp_path)
    bad = poison(st, POISONS["subnormal TTFT"][0])
    out = tmp_path / "verdict.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "perfkit", "gate", str(unchanged(tmp_path)), "--store", str(st), "--history", "1", "-o", str(out)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"skipped {bad}: no measurement: mean_ttft_ms is 4.94066e-324 ms" in proc.stderr
    assert "pass: " in proc.stdout and "skipped 1 baseline file of the store" in proc.stdout
    assert json.loads(out.read_text())["skipped"][0]["file"] == str(bad)


def test_a_regressed_result_still_fails_with_a_poisoned_file_present(tmp_path: Path) -> None:
    st = good_store(tmp_path)
    bad = poison(st, POISONS["negative TTFT"][0])
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(bench_doc(ttft=80.0, started="2025-03-01T10:00:00Z")))
    res, verdict = gate_json(tmp_path, slow, st)
    assert res.exit_code == 1, res.output
    assert verdict["verdict"] == "regress" and "mean_ttft_ms" in verdict["regressed"]
    assert [Path(s["file"]).name for s in verdict["skipped"]] == [bad.name]
    assert "REGRESSION" in res.stdout and bad.name in res.stderr


def test_a_poisoned_file_that_would_hide_a_regression_is_skipped(tmp_path: Path) -> None:
    """A stored TTFT of 1e300 ms: with two baselines the median is 5e299 and any run "improves".
    Skipped, the regression against the one good baseline is caught."""
    st = good_store(tmp_path, days=(1,))
    poison(st, _set(mean_ttft_ms=1e300, median_ttft_ms=1e300, p99_ttft_ms=1e300))
    slow = tmp_path / "slow.json"
    slow.write_text(json.dumps(bench_doc(ttft=80.0, started="2025-03-01T10:00:00Z")))
    res, verdict = gate_json(tmp_path, slow, st)
    assert res.exit_code == 1 and "mean_ttft_ms" in verdict["regressed"], res.output


def test_with_every_file_skipped_the_gate_says_so_and_cannot_judge(tmp_path: Path) -> None:
    """As with an empty store (exit 2, "no baseline to compare with"), and saying why."""
    st = good_store(tmp_path, days=(1,))
    (only,) = (st / "baselines").glob("*.json")
    doc = json.loads(only.read_text())
    doc["request_throughput"] = -1.0
    only.write_text(json.dumps(doc))
    (st / "baselines" / "20250305T100000Z-llama-0badf11e.json").write_text('{"schema": "perfkit.bench/1",')
    res, verdict = gate_json(tmp_path, unchanged(tmp_path), st)
    assert res.exit_code == 2 and verdict["verdict"] == "unusable"
    assert "no usable baseline: all 2 files of the store were skipped" in res.stderr
    assert len(verdict["skipped"]) == 2 and verdict["reasons"][0].startswith("no usable baseline")
    assert sum("perfkit: warning: skipped" in line for line in res.stderr.splitlines()) == 2


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: p.mkdir(), "not a regular file (a folder)"),
        (lambda p: os.mkfifo(p), "not a regular file (a FIFO)"),
        (lambda p: p.symlink_to("/etc/hostname"), "a link to a file outside the store"),
        (lambda p: p.write_bytes(b" " * (17 * 2**20)), "over the 16 MiB limit"),
        (lambda p: p.write_bytes(b"\xff\xfe{}"), "not UTF-8 text"),
    ],
    ids=["folder", "fifo", "symlink-out", "huge", "binary"],
)
def test_files_that_are_not_baselines_are_skipped_too(tmp_path: Path, make: Any, says: str) -> None:
    st = good_store(tmp_path, days=(1, 2))
    bad = st / "baselines" / "20250305T100000Z-llama-0badf11e.json"
    make(bad)
    res, verdict = gate_json(tmp_path, unchanged(tmp_path), st)
    assert res.exit_code == 0, res.output
    assert len(verdict["skipped"]) == 1 and says in verdict["skipped"][0]["why"]
    assert bad.exists() or bad.is_symlink()


def test_list_counts_and_show_refuses_the_poisoned_file(tmp_path: Path) -> None:
    st = good_store(tmp_path, days=(1,))
    bad = poison(st, POISONS["negative TTFT"][0])
    listed = run("baseline", "list", "--store", st)
    assert listed.exit_code == 0 and "1 file skipped" in listed.stdout and bad.name in listed.stderr
    shown = run("baseline", "show", bad.stem, "--store", st)
    assert shown.exit_code == 2 and f"{bad}: no measurement: mean_ttft_ms is -1e+09 ms" in shown.stderr


def test_a_result_that_is_no_measurement_is_refused_in_one_line(tmp_path: Path) -> None:
    st = good_store(tmp_path, days=(1,))
    bad = unchanged(tmp_path, median_itl_ms=-3.0)
    res, verdict = gate_json(tmp_path, bad, st)
    assert res.exit_code == 2 and verdict["verdict"] == "unusable"
    assert (
        res.stderr.strip() == f"perfkit: {bad}: no measurement: median_itl_ms is -3 ms: it cannot be negative"
    )
    added = run("baseline", "add", bad, "--store", st)
    assert added.exit_code == 2 and "median_itl_ms is -3 ms" in added.stderr


def test_a_baseline_whose_records_link_out_of_the_store_is_judged_without_them(tmp_path: Path) -> None:
    st = good_store(tmp_path, days=(1, 2))
    path = sorted((st / "baselines").glob("*.json"))[-1]
    doc = json.loads(path.read_text())
    doc["records"] = f"{path.stem}.requests.parquet"
    path.write_text(json.dumps(doc))
    outside = tmp_path / "elsewhere.parquet"
    outside.write_bytes(b"PAR1 not really")
    (st / "baselines" / doc["records"]).symlink_to(outside)
    res, verdict = gate_json(tmp_path, unchanged(tmp_path), st)
    assert res.exit_code == 0, res.output
    assert any("link outside the store; not read" in w for w in verdict["warnings"]), verdict["warnings"]


# -- the bounds themselves -------------------------------------------------------------------------


def test_real_results_of_every_tool_are_measurements() -> None:
    """No false alarm on the recorded results of vLLM, guidellm, inference-perf and aiperf
    (tests/loadgen/data/SOURCES.md), read as ``baseline add`` and ``gate`` read them."""
    from perfkit.loadgen.result import read_result

    data = REPO / "tests" / "loadgen" / "data"
    names = [p for p in sorted(data.glob("*.json")) if "config" not in p.name]
    assert len(names) >= 6
    for path in names:
        doc = read_result(path, index=0 if "sweep" in path.name else None)
        assert plausible.implausible(doc) is None, path.name


@pytest.mark.parametrize(
    ("field", "value", "ok"),
    [
        ("mean_ttft_ms", 0.0, True),  # vLLM writes 0 for "none"
        ("mean_ttft_ms", 1e-6, True),  # a nanosecond: one tick
        ("mean_ttft_ms", 1e-10, False),
        ("mean_ttft_ms", 6.0e8, True),  # just under a week
        ("mean_ttft_ms", 6.1e8, False),
        ("request_throughput", 2e-6, True),  # about one request in a week
        ("request_throughput", 1e-6, False),
        ("request_throughput", 1e9, True),
        ("request_throughput", 1.1e9, False),
        ("total_token_throughput", 1e11, True),
        ("total_token_throughput", 1.1e11, False),
        ("duration", 604_800.0, True),
        ("duration", 604_801.0, False),
        ("total_output_tokens", 1.5, False),
    ],
)
def test_each_bound_is_where_its_docstring_puts_it(field: str, value: float, ok: bool) -> None:
    doc = bench_doc()
    doc[field] = value
    assert (plausible.implausible(doc) is None) is ok, plausible.implausible(doc)


def test_the_message_is_one_bounded_line_naming_the_first_problems() -> None:
    doc = bench_doc()
    for key in plausible.LATENCIES:
        doc[key] = -1.0
    doc["meta"]["model"] = "x\n" * 5000
    why = plausible.implausible(doc)
    assert why is not None and "\n" not in why and len(why) < 400
    assert why.startswith("mean_ttft_ms is -1 ms: it cannot be negative;") and why.endswith("(and 13 more)")
