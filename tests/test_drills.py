"""Drills end to end, as a trainer and a trainee use them: neutral ids, evidence that names neither
the scenario nor the direction, and the answer only once graded."""

from __future__ import annotations

import gzip
import io
import json
import re
import shutil
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from perfkit.app.cli.main import cli
from perfkit.app.drills.ids import REGISTRY

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "scenarios"
NAMES = sorted(p.parent.name for p in SCENARIOS.glob("*/answer.yaml"))
# the triage table's ids, as the docs and the rows spell them (perfkit/triage/*_rows.py)
DIRECTIONS = (
    "data_pipeline",
    "network_communication",
    "kv_cache_allocation",
    "decode_efficiency",
    "scheduler_queueing",
    "memory_oversubscription",
    "training_instability",
    "prefill_decode_interference",
    "release_regression",
)
ID_OF = {name: drill for drill, name in REGISTRY.items()}


def invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def injected(path: Path) -> str:
    nb = json.loads(path.read_text())
    return "".join(next(c for c in nb["cells"] if "injected-parameters" in c["metadata"]["tags"])["source"])


def spoilers(text: str) -> list[str]:
    """Every scenario name and direction id in ``text``, in any case, with - or _ between words."""
    low = text.lower()
    found = []
    for word in (*NAMES, *DIRECTIONS):
        for form in {word, word.replace("-", "_"), word.replace("_", "-")}:
            if form in low:
                found.append(form)
    return found


def grep_folder(folder: Path) -> dict[str, list[str]]:
    """file (relative) → the spoilers in its bytes (gzip files read decompressed) or in its path."""
    hits = {}
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        data = path.read_bytes()
        if path.suffix == ".gz":
            data = gzip.decompress(data)
        found = spoilers(data.decode("latin-1")) + spoilers(str(path.relative_to(folder)))
        if found:
            hits[str(path.relative_to(folder))] = found
    return hits


def test_every_shipped_scenario_has_a_fixed_id():
    from perfkit.app.runner.embedded import specs

    shipped = set(NAMES) | set(specs())  # a checkout's bundles, a wheel's specs
    missing = sorted(shipped - set(REGISTRY.values()))
    assert missing == [], "give each a drill id: append it to perfkit/app/drills/ids.py REGISTRY"
    numbers = sorted(int(i.split("-")[1]) for i in REGISTRY)
    assert numbers == list(range(1, len(REGISTRY) + 1))
    assert len(set(REGISTRY.values())) == len(REGISTRY)


def test_list_gives_ids_and_briefs_not_answers():
    res = invoke("drill", "list")
    assert res.exit_code == 0
    assert "drill-01" in res.output and ID_OF[NAMES[-1]] in res.output and "easy" in res.output
    assert "Users say streamed answers come out slower than yesterday" in res.output  # a brief
    assert spoilers(res.output) == []


def test_answers_view_names_scenarios_and_directions():
    res = invoke("drill", "list", "--answers")
    assert res.exit_code == 0
    rows = {line.split("│")[1].strip(): line for line in res.output.splitlines() if "│ drill-" in line}
    assert len(rows) == len(NAMES)
    for name in NAMES:
        answer = yaml.safe_load((SCENARIOS / name / "answer.yaml").read_text())
        row = rows[ID_OF[name]]
        assert f" {name} " in row and f" {answer['direction']} " in row


def test_every_drill_starts_without_naming_its_answer(tmp_path):
    from perfkit.app.drills.recorded import drills, start

    listed = [d.id for d in drills()]
    assert len(listed) == len(NAMES)
    for drill in listed:
        folder = tmp_path / drill
        bundle, runbook = start(drill, folder)
        assert runbook.parent == folder and runbook.suffix == ".ipynb"
        assert not (bundle / "answer.yaml").exists()
        assert grep_folder(folder) == {}, drill
        incident = yaml.safe_load((bundle / "incident.yaml").read_text())
        assert re.fullmatch(rf"INC-\d{{8}}-{drill}", incident["id"])
        assert "generator" not in incident and incident["window"] and incident["title"]
        assert str(bundle.resolve()) in injected(runbook)
        shutil.rmtree(folder)  # keep the temporary disk small


@pytest.mark.parametrize("chunk", [3, 5, 7, 1 << 20])
def test_a_leak_is_a_whole_identifier_even_across_reads(monkeypatch, chunk):
    from perfkit.app.drills import evidence as E

    monkeypatch.setattr(E, "CHUNK", chunk)
    leaks = E.Leaks.of(["kv-prefix-cache-thrash"], ["data_pipeline", "tpot_high"], "drill-20")
    text = (
        b"room zoom; Data-Pipeline,data_pipelines xdata_pipeline tpot_high=1 "
        b"KV_PREFIX_CACHE_THRASH.log kv-prefix-cache-thrash2"
    )
    out = io.BytesIO()
    count = E.scrub_stream(io.BytesIO(text), out, leaks, name="x", limit=1 << 20)
    assert out.getvalue() == (
        b"room zoom; redacted,data_pipelines xdata_pipeline redacted=1 drill-20.log kv-prefix-cache-thrash2"
    )
    assert count == 3


def test_leaks_in_logs_metrics_and_names_are_replaced_and_the_bundle_still_loads(tmp_path):
    from perfkit.app.drills.recorded import start
    from perfkit.sources.bundle import load_bundle

    name = "kv-prefix-cache-thrash"
    root = tmp_path / "library"
    src = root / name
    shutil.copytree(SCENARIOS / name, src)
    with (src / "logs" / "vllm.log").open("a") as fh:
        fh.write(
            "(APIServer pid=1) INFO 11-22 12:50:00 [x.py:1] KV_Prefix_Cache_Thrash: kv-cache-allocation\n"
            "(APIServer pid=1) ERROR 11-22 12:50:01 [x.py:2] CUDA OOM: room for 3 blocks, zoom in\n"
        )
    om = (src / "metrics" / "vllm.om").read_text()
    help_line = "# HELP vllm:num_requests_running Number of requests in model execution batches."
    assert help_line in om
    (src / "metrics" / "vllm.om").write_text(
        om.replace(
            help_line,
            "# HELP vllm:num_requests_running Requests (kv-prefix-cache-thrash; decode_efficiency).",
        )
    )
    (src / "logs" / f"{name}.log.gz").write_bytes(
        gzip.compress(b"INFO scheduler_queueing p95-prefill-interference\n")
    )
    (src / "notes.bin").write_bytes(b"\0\1binary " + name.encode())
    with (src / "events.csv").open("a") as fh:
        fh.write("2026-11-22T12:20:00Z,note,assist-api,,see runbook release-regression\n")

    drill = ID_OF[name]
    bundle, _ = start(drill, tmp_path / "started", root=root)
    assert grep_folder(tmp_path / "started") == {}
    assert not (bundle / "notes.bin").exists()  # binary and naming the answer: left out
    # a scenario name becomes the drill's id, a direction id "redacted"; files and names stay usable
    log = (bundle / "logs" / f"{drill}.log.gz").read_bytes()
    assert gzip.decompress(log) == f"INFO redacted {drill}\n".encode()
    assert f"Requests ({drill}; redacted)." in (bundle / "metrics" / "vllm.om").read_text()
    assert f"{drill}: redacted\n" in (bundle / "logs" / "vllm.log").read_text()
    assert "CUDA OOM: room for 3 blocks, zoom in\n" in (bundle / "logs" / "vllm.log").read_text()
    assert (bundle / "metrics" / "dcgm.om").read_bytes() == (src / "metrics" / "dcgm.om").read_bytes()
    loaded = load_bundle(bundle)
    assert loaded.incident.id.endswith(drill) and loaded.incident.service == "assist-api"
    assert f"see runbook {drill}" in loaded.events["detail"].to_list()


def test_a_link_in_the_bundle_is_refused_not_followed(tmp_path):
    from perfkit.app.drills.recorded import start
    from perfkit.errors import BundleError

    src = tmp_path / "library" / "train-healthy"
    (src / "logs").mkdir(parents=True)
    for f in ("incident.yaml", "answer.yaml"):
        shutil.copy(SCENARIOS / "train-healthy" / f, src / f)
    (src / "logs" / "train.log").symlink_to("/etc/hostname")
    with pytest.raises(BundleError, match=r"logs/train.log: a symbolic link"):
        start(ID_OF["train-healthy"], tmp_path / "out", root=tmp_path / "library")


def test_a_leak_across_two_reads_is_found():
    from perfkit.app.drills.evidence import CHUNK, Leaks, scrub_stream

    leaks = Leaks.of(["kv-prefix-cache-thrash"], ["kv_cache_allocation"], "drill-20")
    for cut in (0, 1, 5, 21, 22):  # the name starts `cut` bytes before the first read ends
        data = b"x" * (CHUNK - cut - 1) + b" kv-prefix-cache-thrash " + b"y" * 10
        out = io.BytesIO()
        assert scrub_stream(io.BytesIO(data), out, leaks, name="t", limit=1 << 30) == 1
        assert out.getvalue() == b"x" * (CHUNK - cut - 1) + b" drill-20 " + b"y" * 10
        # glued to a word on either side it is another identifier, wherever the read ends
        for glued in (
            b"x" * (CHUNK - cut) + b"kv-prefix-cache-thrash y",
            b" " * (CHUNK - cut) + b"kv-prefix-cache-thrashy",
        ):
            out = io.BytesIO()
            assert scrub_stream(io.BytesIO(glued), out, leaks, name="t", limit=1 << 30) == 0
            assert out.getvalue() == glued
    # the longest name wins where one is the prefix of another
    leaks = Leaks.of(["release-regression", "release-regression-prefill"], ["release_regression"], "drill-09")
    out = io.BytesIO()
    scrub_stream(
        io.BytesIO(b"a release-regression-prefill b RELEASE_REGRESSION c"), out, leaks, name="t", limit=99
    )
    assert out.getvalue() == b"a drill-09 b drill-09 c"


def test_a_scenario_name_typed_is_accepted_without_showing_its_id(tmp_path):
    res = invoke("drill", "start", "decode-thermal-throttle", "-o", str(tmp_path / "d"))
    assert res.exit_code == 0, res.output
    assert ID_OF["decode-thermal-throttle"] not in res.output
    assert "perfkit drill check decode-thermal-throttle" in res.output
    res = invoke("drill", "start", "drill-7", "-o", str(tmp_path / "e"))  # an id without its zero
    assert res.exit_code == 0 and "drill drill-07:" in res.output
    res = CliRunner().invoke(cli, ["drill", "start", "no-such-drill", "-o", str(tmp_path / "f")])
    assert res.exit_code == 2 and "perfkit drill list" in res.output and spoilers(res.output) == []


def test_check_grades_first_then_reveals_the_scenario():
    queue, release = ID_OF["queueing-traffic-surge"], ID_OF["release-regression"]
    res = invoke("drill", "check", release, "--answer", "release_regression", "--version", "v2.4.0")
    assert res.exit_code == 0 and res.output.startswith("CORRECT")
    assert f"{release} was the scenario release-regression" in res.output
    res = CliRunner().invoke(
        cli, ["drill", "check", release, "--answer", "release_regression", "--version", "v2.4.1"]
    )
    assert res.exit_code == 1 and "the version is not: v2.4.1" in res.output
    res = CliRunner().invoke(cli, ["drill", "check", queue, "--answer", "kv_cache_allocation"])
    assert res.exit_code == 1 and res.output.startswith("NOT QUITE: the direction was scheduler_queueing")
    lines = res.output.splitlines()
    assert lines[1] == f"{queue} was the scenario queueing-traffic-surge"  # after the verdict
    assert "waiting requests climb into the hundreds" in res.output  # the evidence to have seen
    assert "fix: scale out replicas" in res.output
    assert "perfkit's triage: rank 1 scheduler_queueing (confirmed)" in res.output
    healthy = ID_OF["healthy-busy-evening"]  # a control: triage rules every row out
    res = CliRunner().invoke(cli, ["drill", "check", healthy, "--answer", "none"])
    assert res.exit_code == 0 and "perfkit's triage: every direction ruled out" in res.output
    assert "ruled_out" not in res.output
    res = CliRunner().invoke(cli, ["drill", "check", release, "--answer", "bad_luck"])
    assert res.exit_code == 2 and "unknown direction 'bad_luck'" in res.output
    assert "release-regression" not in res.output  # refused before anything is told


def test_ids_stay_when_scenarios_are_added(tmp_path):
    from perfkit.app.drills.recorded import drills

    def library(*names: str) -> dict[str, str]:
        for name in names:
            (tmp_path / name).mkdir(exist_ok=True)
            answer = SCENARIOS / name / "answer.yaml"
            if answer.exists():
                shutil.copy(answer, tmp_path / name / "answer.yaml")
            else:  # a scenario the registry does not know yet
                (tmp_path / name / "answer.yaml").write_text(f"scenario: {name}\ndirection: none\n")
        return {d.name: d.id for d in drills(tmp_path)}

    first = library("train-healthy", "healthy-busy-evening")
    assert first == {
        "train-healthy": ID_OF["train-healthy"],
        "healthy-busy-evening": ID_OF["healthy-busy-evening"],
    }
    second = library("aaa-new-scenario", "decode-thermal-throttle")
    assert {k: second[k] for k in first} == first
    assert second["decode-thermal-throttle"] == ID_OF["decode-thermal-throttle"]
    assert second["aaa-new-scenario"] not in REGISTRY and len(set(second.values())) == len(second)


def bundle_value(metrics: Path, name: str, at: datetime) -> float:
    """The sum over series of ``name``'s last sample at or before ``at`` in the bundle's OpenMetrics
    files (read here line by line, not by perfkit), as Prometheus' instant query at ``at`` sees it."""
    last: dict[str, tuple[float, float]] = {}
    for om in sorted(metrics.glob("*.om")):
        for line in om.read_text(encoding="utf-8").splitlines():
            if not line.startswith(name + "{"):
                continue
            labels, _, rest = line.partition("} ")
            value, ts = (float(x) for x in rest.split()[:2])
            if ts <= at.timestamp() and (labels not in last or ts >= last[labels][0]):
                last[labels] = (ts, value)
    assert last, f"{name}: no sample at or before {at} in {metrics}"
    return sum(v for _, v in last.values())


def prometheus_serves_the_bundle(notebook: Path, metrics: Path, name: str) -> float:
    """Query the Prometheus the drill's runbook names at its window's end for ``name`` and compare
    with the bundle's own value there: a URL nothing answers on, or one serving other data, fails."""
    text = injected(notebook)
    url = re.search(r'^prometheus_url = "([^"]+)"', text, re.M).group(1)
    end = re.search(r'^end = "([^"]+)"', text, re.M).group(1)
    at = datetime.fromisoformat(end.replace("Z", "+00:00"))
    query = urllib.parse.urlencode({"query": f"sum({name})", "time": f"{at.timestamp():.3f}"})
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(
        f"{url}/api/v1/query?{query}", timeout=30
    ) as resp:
        result = json.loads(resp.read())["data"]["result"]
    assert result, f"{url}: no {name} at {end}"
    served, want = float(result[0]["value"][1]), bundle_value(metrics, name, at)
    assert served == pytest.approx(want, rel=1e-9, abs=1e-9), (served, want)
    return served


@pytest.mark.integration
@pytest.mark.skipif(not shutil.which("prometheus"), reason="prometheus is not installed (make servers)")
def test_live_drill_serves_metrics_from_prometheus(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_LAB_DIR", str(tmp_path / "lab"))
    drill = ID_OF["queueing-traffic-surge"]
    res = invoke("drill", "start", drill, "-o", str(tmp_path / "d"), "--recorded")
    try:
        assert res.exit_code == 0, res.output
        text = injected(tmp_path / "d" / "inference_latency.ipynb")
        assert 'prometheus_url = "http://127.0.0.1:' in text and 'bundle = ""' in text
        # the tokens generated by the window's end, as recorded: served, not just named
        tokens = prometheus_serves_the_bundle(
            tmp_path / "d" / "inference_latency.ipynb",
            tmp_path / "d" / "evidence" / "metrics",
            "vllm:generation_tokens_total",
        )
        assert tokens > 1000
        assert grep_folder(tmp_path / "d") == {}
    finally:
        res = invoke("lab", "down")
    assert f"stopped prometheus-{drill}" in res.output


def test_training_drill_opens_the_training_runbook(tmp_path):
    res = invoke("drill", "start", ID_OF["allreduce-scaling-64gpu"], "-o", str(tmp_path / "t"))
    assert res.exit_code == 0, res.output
    assert (tmp_path / "t" / "training_step.ipynb").exists()
    assert not (tmp_path / "t" / "inference_latency.ipynb").exists()
