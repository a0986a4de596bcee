"""Issue 22 against ``perfkit gate``, ``compare`` and ``baseline``: exit codes mean one thing (0 pass,
1 regression, 2 could not judge), a crash is never 1, the ``-o`` verdict is written in every case,
hostile result files (rows C1, C2, E1-E3, M10, T1, U) are refused in one line naming the key, and
a store with one bad entry is judged with the rest. Result documents are synthetic (tests/bench_docs.py)."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from bench_docs import bench_doc
from click.testing import CliRunner, Result

from perfkit.app.cli.compare import compare
from perfkit.app.cli.gate import baseline, gate
from perfkit.app.cli.main import Cli
from perfkit.loadgen import gate as gating

perfkit = Cli(name="perfkit", commands={"baseline": baseline, "gate": gate, "compare": compare})
DIGITS = "1" + "0" * 400  # 10**400 written out: beyond float range (issue 22 C1)


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(perfkit, [str(a) for a in args])


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """A store with two baselines (50 and 50.5 ms TTFT)."""
    st = tmp_path / "store"
    for day, ttft in ((1, 50.0), (2, 50.5)):
        path = tmp_path / f"b{day}.json"
        path.write_text(json.dumps(bench_doc(ttft=ttft, started=f"2025-02-0{day}T10:00:00Z")))
        assert run("baseline", "add", path, "--store", st).exit_code == 0
    return st


def raw_doc(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def gate_out(tmp_path: Path, result: Path, store: Path, *extra: str) -> tuple[Result, dict[str, Any]]:
    out = tmp_path / "verdict.json"
    out.unlink(missing_ok=True)
    res = run("gate", result, "--store", store, "-o", out, *extra)
    return res, json.loads(out.read_text())


def test_the_readme_result_passes_and_o_is_out(tmp_path: Path, store: Path) -> None:
    res, verdict = gate_out(tmp_path, raw_doc(tmp_path, "new.json", json.dumps(bench_doc(ttft=50.2))), store)
    assert res.exit_code == 0 and verdict["verdict"] == "pass", res.output


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # C1: an integer of 401 digits at the top level, and inside a number field
        (
            json.dumps(bench_doc()).replace('"completed": 1200', f'"completed": {DIGITS}'),
            "completed: an integer of 401 digits",
        ),
        (
            json.dumps(bench_doc()).replace('"mean_ttft_ms": 50.0', f'"mean_ttft_ms": {DIGITS}'),
            "mean_ttft_ms: an integer of 401 digits",
        ),
        # E3: NaN in meta.started
        (
            json.dumps(bench_doc()).replace('"started": "2025-03-01T10:00:00Z"', '"started": NaN'),
            "meta.started: NaN is not a JSON number",
        ),
        # C2: nested 100,000 deep, far under the size cap
        ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
        (
            '{"schema": "perfkit.bench/1", "meta": ' + '{"a": ' * 2000 + "1" + "}" * 2001,
            "nested deeper than 64 levels",
        ),
        ('{"schema": "perfkit.bench/1", "a": 1e400}', "a: 1e400 is beyond the range of a number"),
    ],
)
def test_hostile_results_are_refused_in_one_line_exit_2_with_a_verdict(
    tmp_path: Path, store: Path, text: str, says: str
) -> None:
    res, verdict = gate_out(tmp_path, raw_doc(tmp_path, "bad.json", text), store)
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert says in res.stderr and len(res.stderr.strip().splitlines()) == 1
    assert verdict["verdict"] == "unusable" and verdict["exit_code"] == 2 and says in verdict["reasons"][0]
    added = run("baseline", "add", tmp_path / "bad.json", "--store", store)
    assert added.exit_code == 2 and says in added.stderr
    cmp = run("compare", tmp_path / "bad.json", tmp_path / "b1.json")
    assert cmp.exit_code == 2 and says in cmp.stderr


def test_nothing_measured_or_nothing_to_judge_is_not_a_pass(tmp_path: Path, store: Path) -> None:
    """E2: completed 0, failed 0, validity valid; E1: every latency and throughput null."""
    empty = bench_doc(completed=0, failed=0, judged=0)
    res, verdict = gate_out(tmp_path, raw_doc(tmp_path, "empty.json", json.dumps(empty)), store)
    assert res.exit_code == 2 and "nothing measured: the run completed no request (0 failed)" in res.stderr
    assert verdict["exit_code"] == 2
    nulls = bench_doc()
    for key in list(nulls):
        if key.endswith("_ms") or key.endswith("throughput"):
            nulls[key] = None
    res, verdict = gate_out(tmp_path, raw_doc(tmp_path, "nulls.json", json.dumps(nulls)), store)
    assert res.exit_code == 2 and "nothing to judge" in res.stderr
    assert verdict["verdict"] == "unusable" and "errors.rate" in [m["metric"] for m in verdict["metrics"]]


def test_a_crash_is_exit_2_never_1_and_the_verdict_says_why(
    tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RecursionError("maximum recursion depth exceeded\nwhile calling a Python object")

    monkeypatch.setattr(gating, "gate", boom)
    res, verdict = gate_out(tmp_path, raw_doc(tmp_path, "new.json", json.dumps(bench_doc())), store)
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert res.stderr.strip() == (
        "perfkit: gate: could not judge: RecursionError: maximum recursion depth exceeded while calling a Python object"
    )
    assert verdict["verdict"] == "unusable" and "RecursionError" in verdict["reasons"][0]


def test_compare_and_baseline_crashes_are_exit_2(
    tmp_path: Path, store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perfkit.app.cli import compare as compare_cli
    from perfkit.loadgen import store as stores

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise OverflowError("int too large to convert to float")

    monkeypatch.setattr(compare_cli, "judge", boom)
    monkeypatch.setattr(stores, "list_baselines", boom)
    for args in (
        ("compare", tmp_path / "b1.json", tmp_path / "b2.json"),
        ("baseline", "list", "--store", store),
    ):
        res = run(*args)
        assert res.exit_code == 2 and "Traceback" not in res.output, res.output
        assert res.stderr.strip().endswith(
            "could not judge: OverflowError: int too large to convert to float"
        )


def test_a_store_with_one_bad_entry_is_judged_with_the_rest(tmp_path: Path, store: Path) -> None:
    """C1 in the store: one baseline's ``mean_ttft_ms`` is 401 digits; another holds NaN."""
    files = sorted((store / "baselines").glob("*.json"))
    text = files[0].read_text()
    files[0].write_text(text.replace('"mean_ttft_ms": 50.0', f'"mean_ttft_ms": {DIGITS}'))
    listed = run("baseline", "list", "--store", store)
    assert listed.exit_code == 0 and "mean_ttft_ms: an integer of 401 digits" in listed.stderr
    assert files[1].stem in listed.stdout and files[0].stem not in listed.stdout
    res, verdict = gate_out(tmp_path, raw_doc(tmp_path, "new.json", json.dumps(bench_doc(ttft=50.3))), store)
    assert res.exit_code == 0, res.output
    assert [h["id"] for h in verdict["history"]] == [files[1].stem]
    assert any("401 digits" in w for w in verdict["warnings"])
    files[1].write_text(files[1].read_text().replace('"failed": 0', '"failed": NaN', 1))
    res, verdict = gate_out(tmp_path, tmp_path / "new.json", store)
    assert res.exit_code == 2 and "no usable baseline: all 2 files of the store were skipped" in res.stderr
    assert len(verdict["reasons"]) == 1 and len(verdict["skipped"]) == 2  # both skipped, said


def test_escape_sequences_in_a_stored_result_never_reach_the_terminal(tmp_path: Path, store: Path) -> None:
    """T1: labels, meta.started and the model of a stored file hold OSC 52 (a clipboard write) and ESC[2J."""
    path = sorted((store / "baselines").glob("*.json"))[0]
    doc = json.loads(path.read_text())
    doc["meta"]["labels"] = {"version": "1.2\x1b]52;c;cm0gLXJmIH4=\x07", "hardware": "h\x1b[2Jx"}
    doc["meta"]["started"] = "2025-02-01\x1b[31mT10:00:00Z\x9b2J"
    path.write_text(json.dumps(doc))
    for args in (("list",), ("show", path.stem)):
        res = run("baseline", *args, "--store", store)
        assert res.exit_code == 0, res.output
        assert not any(c in res.output for c in "\x1b\x07\x9b"), repr(res.output)
        assert "1.2" in res.stdout
    as_json = run("baseline", "show", path.stem, "--store", store, "--json")
    assert "\x1b" not in as_json.stdout and "\\u001b" in as_json.stdout  # JSON escapes it, keeps it


def test_a_utf8_bom_is_accepted(tmp_path: Path, store: Path) -> None:
    """U: a BOM-prefixed perfkit result was "not a vllm ... result"."""
    path = tmp_path / "bom.json"
    path.write_bytes(
        b"\xef\xbb\xbf" + json.dumps(bench_doc(ttft=50.1, started="2025-03-02T10:00:00Z")).encode()
    )
    res, verdict = gate_out(tmp_path, path, store)
    assert res.exit_code == 0 and verdict["verdict"] == "pass", res.output
    assert run("baseline", "add", path, "--store", store).exit_code == 0


def test_allow_invalid_is_one_name_and_force_a_deprecated_alias(tmp_path: Path, store: Path) -> None:
    path = raw_doc(
        tmp_path, "invalid.json", json.dumps(bench_doc(valid=False, started="2025-03-05T10:00:00Z"))
    )
    refused = run("baseline", "add", path, "--store", store)
    assert refused.exit_code == 2 and "--allow-invalid" in refused.stderr
    assert run("baseline", "add", path, "--store", store, "--allow-invalid").exit_code == 0
    other = raw_doc(
        tmp_path, "invalid2.json", json.dumps(bench_doc(valid=False, started="2025-03-06T10:00:00Z"))
    )
    forced = run("baseline", "add", other, "--store", store, "--force")
    assert forced.exit_code == 0 and "now --allow-invalid" in forced.stderr
    assert "--force" not in run("baseline", "add", "--help").output  # hidden
    assert "-o, --out FILE" in run("gate", "--help").output


@pytest.mark.slow
def test_a_result_full_of_empty_objects_is_refused_within_1_gb(tmp_path: Path) -> None:
    """M10: a 120 MB result of ``{}`` (under the 128 MiB cap) took 3.2 GB for gate; now refused
    by its value count before anything is built. Measured in a child process (its peak RSS)."""
    big = tmp_path / "big.json"
    with big.open("wb") as fh:
        fh.write(b"[")
        fh.write(b"{}," * 40_000_000)
        fh.write(b"{}]")
    assert 115e6 < big.stat().st_size < 128 * 2**20
    st = tmp_path / "store"
    (st / "baselines").mkdir(parents=True)
    code = (
        "import resource, sys\n"
        "from perfkit.app.cli.main import main\n"
        "sys.argv = ['perfkit', *sys.argv[1:]]\n"
        "try:\n    main()\n"
        "finally:\n    print('RSS', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    )
    for args in (["gate", str(big), "--store", str(st)], ["compare", str(big), str(big)]):
        proc = subprocess.run(
            [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 2, proc.stderr
        assert "more than 4,000,000 JSON values" in proc.stderr
        rss_kb = int(proc.stderr.rsplit("RSS ", 1)[1].split()[0])
        assert rss_kb < 1024 * 1024, f"{rss_kb / 1024:.0f} MB"
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss < 4 * 1024 * 1024  # this process built nothing
