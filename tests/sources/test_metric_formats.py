"""Bundle metrics in the formats users have: promtool tsdb dump text, query API JSON, a TSDB snapshot
(and dump-openmetrics text), told by content; every other file of metrics/, logs/, traces/ named.

The files of tests/data/promtool/ were written by the real promtool and Prometheus from source.om,
a small slice of an embedded incident (tests/data/promtool/README.md); each reads to source.om's
samples. The triage of a whole incident in each format: test_metric_formats_triage.py.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path

import polars as pl
import pytest
from promtool_kit import FIXTURES, differences
from servers import require_binary

from perfkit.core.scope import parse_scope
from perfkit.errors import BundleError
from perfkit.sources import metric_files, openmetrics, tsdb_snapshot
from perfkit.sources.bundle import load_bundle
from perfkit.sources.promdump import dump_labels, go_unquote, infer_type

INCIDENT = """id: INC-formats
title: metrics in other formats
service: chat-api
window: {start: '2026-11-12T01:55:00Z', end: '2026-11-12T02:35:00Z'}
baseline: {start: '2026-11-12T01:05:00Z', end: '2026-11-12T01:45:00Z'}
"""
SOURCE = openmetrics.read_files([FIXTURES / "source.om"])
ODD = "perfkit_fixture_ratio"  # label values with a tab and a control byte: Go escapes them


def bundle(root: Path, metrics: dict[str, str | bytes | Path] | None = None) -> Path:
    """A bundle of incident.yaml and ``metrics`` (name -> text, bytes, or a fixture to copy)."""
    (root / "metrics").mkdir(parents=True)
    (root / "incident.yaml").write_text(INCIDENT)
    for name, what in (metrics or {}).items():
        dst = root / "metrics" / name
        if isinstance(what, Path):
            (shutil.copytree if what.is_dir() else shutil.copy)(what, dst)
        elif isinstance(what, bytes):
            dst.write_bytes(what)
        else:
            dst.write_text(what, encoding="utf-8")
    return root


def metric_notes(b) -> list[str]:
    return [m for m in b.missing if m.startswith("metrics: ")]


# -- each format reads to the source's samples -----------------------------------------------------


@pytest.mark.parametrize("name", ["dump.txt", "query_raw.json", "dump-openmetrics.om"])
def test_each_format_reads_the_samples_of_the_source(tmp_path, name):
    b = load_bundle(bundle(tmp_path / "b", {name: FIXTURES / name}))
    assert b.files["metrics"] == [f"metrics/{name}"] and metric_notes(b) == []
    if name == "dump-openmetrics.om":
        # dump-openmetrics writes label values with Go's escapes (\t, \x01); an OpenMetrics reader,
        # Prometheus's own included, takes only \\ \" \n and keeps the others as written
        assert differences(SOURCE, b.store, leave_out=(ODD,)) == []
        assert b.store.frames[ODD]["tab"].unique().to_list() == ["x\\ty"]
        assert b.store.frames[ODD]["value"].to_list()[1:3] == [math.inf, -math.inf]
    else:
        assert differences(SOURCE, b.store) == []
    # the _created series of a counter is no sample, in any format
    assert "perfkit_fixture_events_created" not in b.store.frames
    for family, kind in SOURCE.types.items():  # no TYPE line in a dump: counters and histograms still
        if kind in ("counter", "histogram"):
            assert b.store.types[family] == kind, family


def test_dump_keeps_nan_inf_and_every_label_byte(tmp_path):
    b = load_bundle(bundle(tmp_path / "b", {"dump.txt": FIXTURES / "dump.txt"}))
    odd = b.store.frames[ODD]
    assert odd.row(0, named=True) | {"ts": None, "value": None} == {
        "path": 'a"b\\c\nd',
        "tab": "x\ty",
        "text": "café\x01",
        "ts": None,
        "value": None,
    }
    values = odd["value"].to_list()
    assert math.isnan(values[0]) and values[1:] == [math.inf, -math.inf, 0.25]
    assert b.store.frames["perfkit_fixture_events_total"]["value"].to_list() == [3.0, 1e21]


def _last_at(series: pl.DataFrame, t_ms: int) -> float | None:
    """The value Prometheus gives at ``t_ms``: the last sample at or before it, 5 minutes back at most."""
    before = series.filter(pl.col("ts").cast(pl.Int64) <= t_ms)
    if not before.height or t_ms - int(before["ts"].cast(pl.Int64)[-1]) > 300_000:
        return None
    return float(before["value"][-1])


@pytest.mark.parametrize("name", ["query_range.json", "query_vector.json"])
def test_query_answers_read_every_point_prometheus_gave(tmp_path, name):
    """A range query's points (and an instant vector's) are Prometheus's evaluation of source.om at
    each step: the last sample at or before it. Each is read, as a sample at that time."""
    b = load_bundle(bundle(tmp_path / "b", {name: FIXTURES / name}))
    answer = json.loads((FIXTURES / name).read_text())["data"]["result"]
    points = 0
    for series in answer:
        labels = dict(series["metric"])
        family = labels.pop("__name__")
        if family == "perfkit_fixture_events_created":
            assert family not in b.store.frames
            continue
        got = b.store.frames[family].filter(
            pl.all_horizontal(pl.col(k) == v for k, v in labels.items()) if labels else pl.lit(True)
        )
        source = SOURCE.frames[family].filter(
            pl.all_horizontal(pl.col(k) == v for k, v in labels.items()) if labels else pl.lit(True)
        )
        pairs = series.get("values") or [series["value"]]
        assert got.height == len(pairs)
        for (t, v), ts, value in zip(pairs, got["ts"].cast(pl.Int64), got["value"], strict=True):
            assert ts == round(t * 1000)
            assert value == pytest.approx(float(v), nan_ok=True)
            assert value == pytest.approx(_last_at(source, ts), nan_ok=True)
            points += 1
    assert points > (500 if name == "query_range.json" else 60)


def test_several_json_files_and_formats_make_one_series(tmp_path):
    """A range split over two answers (and the same series in a dump) is one series."""
    body = json.loads((FIXTURES / "query_raw.json").read_text())
    first, second = json.loads(json.dumps(body)), json.loads(json.dumps(body))
    for series in first["data"]["result"]:
        series["values"] = series["values"][:10]
    for series in second["data"]["result"]:
        series["values"] = series["values"][8:]
    b = load_bundle(
        bundle(
            tmp_path / "b",
            {"a.json": json.dumps(first), "b.json": json.dumps(second), "c.txt": FIXTURES / "dump.txt"},
        )
    )
    assert b.files["metrics"] == ["metrics/a.json", "metrics/b.json", "metrics/c.txt"]
    assert differences(SOURCE, b.store) == []


# -- the dump's syntax -------------------------------------------------------------------------------


def test_dump_labels_read_as_go_wrote_them():
    assert dump_labels('{__name__="up", a="x\\ty", "k.8s/name"="v", b="caf\\u00e9\\x01\\\\\\""}') == {
        "__name__": "up",
        "a": "x\ty",
        "k.8s/name": "v",
        "b": 'café\x01\\"',
    }
    assert go_unquote("\\U0001F600 \\a\\b\\f\\n\\r\\v \\101") == "\U0001f600 \a\b\f\n\r\v A"
    assert go_unquote("\\xff") == "\ufffd"  # a byte that is not UTF-8
    for bad in ("\\q", "\\777", "\\U00110000"):
        with pytest.raises(ValueError):
            go_unquote(bad)


def test_types_come_from_the_names():
    names = {"a_bucket", "a_sum", "a_count", "s", "s_sum", "s_count", "c_total", "g"}
    assert {n: infer_type(n, names) for n in sorted(names)} == {
        "a_bucket": "histogram",
        "a_count": "histogram",
        "a_sum": "histogram",
        "c_total": "counter",
        "g": "unknown",
        "s": "summary",
        "s_count": "summary",
        "s_sum": "summary",
    }


GOOD = (
    '{__name__="up", job="a"} 1 1794445200000\n'
    '{__name__="up", job="a"} 0 1794445215000\n'
    '{__name__="up", job="b"} NaN 1794445200000\n'
)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{__name__="up", job="a"} abc 1794445230000', "invalid value 'abc' in sample up"),
        ('{__name__="up", job="a"} 1 17944452x0000', "invalid timestamp '17944452x0000' in sample up"),
        ('{__name__="up", job="a"} 1', "malformed sample line"),
        ('{job="a"} 1 1794445230000', "sample has no __name__ label"),
        ('{__name__="up", job="a", job="b"} 1 1794445230000', "label 'job' given twice"),
        ('{__name__="up", job=a} 1 1794445230000', "malformed labels"),
        ('{__name__="up", job="a\\q"} 1 1794445230000', "unknown escape \\q"),
        ("up 1 1794445230000 and more", "malformed sample line"),
        ('{__name__="up", job="' + "x" * 70_000 + '"} 1 1794445230000', "longer than the 64 KiB limit"),
        ('{__name__="up", job="' + "x" * 20_000 + '"} 1 1794445230000', "longer than the 16 KiB limit"),
    ],
)
def test_a_malformed_dump_line_is_an_error_naming_file_and_line(tmp_path, line, message):
    root = bundle(tmp_path / "b", {"dump.txt": GOOD + line + "\n" + GOOD})
    with pytest.raises(BundleError, match=message.replace("\\", "\\\\").replace("(", "\\(")) as info:
        load_bundle(root)
    assert (info.value.path, info.value.line) == (str(root / "metrics" / "dump.txt"), 4)


def test_a_dump_whose_first_line_is_malformed_is_read_as_a_dump_and_named(tmp_path):
    root = bundle(tmp_path / "b", {"dump.txt": '{__name__="up", job="a"} 1 two\n' + GOOD})
    with pytest.raises(BundleError, match="invalid timestamp 'two' in sample up") as info:
        load_bundle(root)
    assert info.value.line == 1


def test_a_dump_that_is_not_utf8_names_its_line(tmp_path):
    root = bundle(tmp_path / "b", {"dump.txt": GOOD.encode() + b'{__name__="up", job="\xff"} 1 1\n'})
    with pytest.raises(BundleError, match="not UTF-8 text") as info:
        load_bundle(root)
    assert info.value.line == 4


def test_native_histogram_samples_are_counted_not_read(tmp_path):
    native = '{__name__="h"} {count:3, sum:1.5, [0,1):2, [1,2):1} 1794445200000\n'
    looks_native = '{__name__="up", job="x} {count:1"} 7 1794445200000\n'  # a float sample all the same
    b = load_bundle(bundle(tmp_path / "b", {"dump.txt": GOOD + native + looks_native + native}))
    assert sorted(b.store.frames) == ["up"] and b.store.frames["up"]["value"].to_list()[-1] == 7.0
    assert (
        "metrics: metrics/dump.txt: 2 native-histogram samples not read (perfkit reads float samples)"
        in b.missing
    )


def test_families_and_scope_narrow_a_dump_and_json_as_they_narrow_openmetrics(tmp_path):
    names = ("vllm:num_requests_running", "vllm:num_requests_waiting")
    dump = "".join(
        f'{{__name__="{name}", instance="h{i % 2}:8000", model_name="m{i % 2}"}} {i} {1794445200000 + 15000 * i}\n'
        for name in names
        for i in range(6)
    )
    om = "".join(
        f'{name}{{instance="h{i % 2}:8000",model_name="m{i % 2}"}} {i} {1794445200 + 15 * i}\n'
        for name in names
        for i in range(6)
    )
    result = [
        {
            "metric": {"__name__": name, "instance": f"h{k}:8000", "model_name": f"m{k}"},
            "values": [[1794445200 + 15 * i, str(i)] for i in range(k, 6, 2)],
        }
        for name in names
        for k in (0, 1)
    ]
    as_om = bundle(tmp_path / "o", {"x.om": om + "# EOF\n"})
    others = [bundle(tmp_path / "d", {"x.txt": dump}), bundle(tmp_path / "j", {"x.json": answer(result)})]
    scope = parse_scope('{model_name="m1"}')
    for kwargs in ({"families": {"vllm:num_requests_waiting"}}, {"scope": scope}, {}):
        want = load_bundle(as_om, **kwargs)
        for other in others:
            got = load_bundle(other, **kwargs)
            assert differences(want.store, got.store) == [], (other.name, kwargs)
            assert want.scope == got.scope
    for other in others:
        kept = load_bundle(other, scope=scope).store.frames["vllm:num_requests_waiting"]
        assert kept["value"].to_list() == [1.0, 3.0, 5.0]


# -- JSON answers that are not samples, or not well formed -----------------------------------------


def answer(result: list, kind: str = "matrix") -> str:
    return json.dumps({"status": "success", "data": {"resultType": kind, "result": result}})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            answer([{"metric": {"__name__": "up"}, "values": [[1794445200, "x"]]}]),
            "data.result[0].values[0][1]",
        ),
        (answer([{"metric": {"__name__": "up"}, "values": "no"}]), "data.result[0].values is not a list"),
        (answer([{"metric": {"__name__": 3}, "values": []}]), "data.result[0].metric"),
        (
            '{"status": "success", "data": {"resultType": "matrix", "result": [NaN]}}',
            "NaN is not a JSON number",
        ),
        ('{"status": "success", "data": {"resultType": "matr', "invalid JSON"),
        ('{"status": "success", "data": ' + "[" * 100 + "]" * 100 + "}", "nested deeper than 64 levels"),
        ('{"status": "success"}', "a Prometheus API answer without data"),
        ('{"status": "success", "data": 5}', "data is not a mapping with resultType and result"),
        ('[{"metric": {"__name__": "up"}, "values": [[1, 2]]}]', "data.result[0].values[0][1]"),
    ],
)
def test_a_malformed_json_answer_is_an_error_naming_the_file_and_part(tmp_path, text, message):
    root = bundle(tmp_path / "b", {"answer.json": text})
    with pytest.raises(BundleError, match=message.replace("[", "\\[").replace("]", "\\]")) as info:
        load_bundle(root)
    assert info.value.path == str(root / "metrics" / "answer.json")


def test_json_answers_without_samples_are_named(tmp_path):
    nameless = {"metric": {"job": "a"}, "values": [[1794445200, "1"]]}
    named = {
        "metric": {"__name__": "up", "job": "a"},
        "values": [[1794445200.5, "+Inf"], [1794445215, "NaN"]],
    }
    root = bundle(
        tmp_path / "b",
        {
            "error.json": '{"status":"error","errorType":"bad_data","error":"parse error"}',
            "scalar.json": answer([1794445200, "1"], "scalar"),
            "rate.json": answer([nameless, named]),
            "data_only.json": json.dumps(
                {"resultType": "vector", "result": [{"metric": named["metric"], "value": [1794445230, "2"]}]}
            ),
        },
    )
    b = load_bundle(root)
    assert metric_notes(b) == [
        "metrics: metrics/error.json: an error answer (bad_data: parse error), no samples",
        "metrics: metrics/rate.json: 1 series without __name__ (a computed query's result) not read",
        "metrics: metrics/scalar.json: a scalar answer, no series",
    ]
    up = b.store.frames["up"]
    assert up["ts"].cast(pl.Int64).to_list() == [1794445200500, 1794445215000, 1794445230000]
    values = up["value"].to_list()
    assert values[0] == math.inf and math.isnan(values[1]) and values[2] == 2.0


# -- what is not read is named ---------------------------------------------------------------------


def test_files_of_no_format_perfkit_reads_are_named_with_what_they_look_like(tmp_path):
    seriesjson = '{"__name__":"up","job":"a"}\n{"__name__":"up","job":"b"}\n'
    root = bundle(
        tmp_path / "b",
        {
            "a.csv": "ts,name,value\n1794445200,up,1\n",
            "b.parquet": b"PAR1\x00\x01",
            "c.om.gz": b"\x1f\x8b\x08\x00",
            "d.yaml": "metrics:\n  - up\n",
            "e.bin": b"\x01\x02\x00\x03",
            "f.txt": "",
            "g.json": seriesjson,
            "h.json": '{"rows": [1, 2]}',
            "i.txt": "hello, world\n",
            "j.html": "<html><body>Grafana</body></html>\n",
            "k.txt": "just words\n",
            "l.prom": "# TYPE up gauge\nup 1\n",
            "ok.txt": GOOD,
        },
    )
    (root / "metrics" / "junk").mkdir()
    (root / "metrics" / "junk" / "x.om").write_text("# EOF\n")
    b = load_bundle(root)
    formats = "perfkit reads OpenMetrics, promtool tsdb dump, query_range JSON, a TSDB snapshot"
    assert metric_notes(b) == [
        f"metrics: metrics/a.csv not read: looks like CSV; {formats}",
        f"metrics: metrics/b.parquet not read: looks like Parquet; {formats}",
        f"metrics: metrics/c.om.gz not read: looks like gzip-compressed data (decompress it into metrics/); {formats}",
        f"metrics: metrics/d.yaml not read: looks like YAML; {formats}",
        f"metrics: metrics/e.bin not read: looks like binary data; {formats}",
        f"metrics: metrics/f.txt not read: it is empty; {formats}",
        "metrics: metrics/g.json not read: looks like promtool tsdb dump --format=seriesjson (series without"
        f" samples); {formats}",
        f"metrics: metrics/h.json not read: looks like JSON, not a Prometheus query API answer; {formats}",
        f"metrics: metrics/i.txt not read: looks like CSV; {formats}",
        f"metrics: metrics/j.html not read: looks like XML or HTML; {formats}",
        f"metrics: metrics/junk/ not read: a folder holding no TSDB blocks; {formats}",
        f"metrics: metrics/k.txt not read: looks like text of no format perfkit reads; {formats}",
        "metrics: metrics/l.prom not read: looks like one scrape without timestamps (bundle metrics need a"
        f" time on each sample); {formats}",
    ]
    assert b.files["metrics"] == ["metrics/ok.txt"] and sorted(b.store.frames) == ["up"]


def test_an_om_file_is_still_read_as_openmetrics_and_its_faults_are_errors(tmp_path):
    root = bundle(tmp_path / "b", {"x.om": "up 1 1794445200\n"})  # no # EOF: a cut capture
    with pytest.raises(BundleError, match="must end with '# EOF'"):
        load_bundle(root)
    # content decides: a dump named .om is read as a dump
    b = load_bundle(bundle(tmp_path / "c", {"x.om": GOOD}))
    assert b.store.frames["up"].height == 3


def test_a_file_linked_out_of_the_bundle_is_refused_whatever_its_name(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(GOOD)
    root = bundle(tmp_path / "b", {"ok.txt": GOOD})
    (root / "metrics" / "link.json").symlink_to(secret)
    b = load_bundle(root)
    assert f"metrics: metrics/link.json resolves outside the bundle (to {secret}), not read" in b.missing
    assert b.files["metrics"] == ["metrics/ok.txt"]


def test_a_dump_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(metric_files, "MAX_FILE_BYTES", 100)
    root = bundle(tmp_path / "b", {"dump.txt": GOOD})
    with pytest.raises(BundleError, match="over the 100 bytes limit"):
        load_bundle(root)


def test_every_file_of_logs_and_traces_is_read_or_named(tmp_path):
    root = bundle(tmp_path / "b", {"ok.txt": GOOD})
    (root / "logs" / "old").mkdir(parents=True)
    (root / "logs" / "app.log").write_text("hello\n")
    (root / "logs" / "old" / "app.log").write_text("hello\n")
    (root / "traces" / "run").mkdir(parents=True)
    (root / "traces" / "NOTES.md").write_text("notes\n")
    (root / "traces" / "run" / "rank-0.pt.trace.json").write_text("{}")
    (root / "traces" / "run" / "rank-0.pt.trace.json.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    b = load_bundle(root)
    assert "logs: logs/old/ not read: a folder (perfkit reads the files in logs/)" in b.missing
    why = "perfkit reads profiler traces named *.json or *.json.gz"
    assert f"traces: traces/NOTES.md not read: {why}" in b.missing
    assert f"traces: traces/run/rank-0.pt.trace.json.zst not read: {why}" in b.missing
    assert b.files["logs"] == ["logs/app.log"] and b.files["traces"] == ["traces/run/rank-0.pt.trace.json"]


# -- TSDB snapshots (promtool reads them) ----------------------------------------------------------


def tree_digest(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(folder.rglob("*"))
    }


@pytest.mark.integration
@pytest.mark.parametrize("layout", ["snapshot folder", "blocks directly in metrics/"])
def test_a_snapshot_prometheus_made_reads_the_samples_and_stays_untouched(tmp_path, layout):
    require_binary("promtool")
    if layout == "snapshot folder":
        root = bundle(tmp_path / "b", {"snapshot": FIXTURES / "snapshot"})
        shown = "metrics/snapshot"
    else:
        root = bundle(tmp_path / "b")
        for block in (FIXTURES / "snapshot").iterdir():
            shutil.copytree(block, root / "metrics" / block.name)
        shown = "metrics"
    before = tree_digest(root)
    b = load_bundle(root)
    assert differences(SOURCE, b.store) == [] and metric_notes(b) == []
    assert b.files["metrics"] == [shown]
    assert tree_digest(root) == before  # promtool wrote into a copy, never into the bundle


def test_a_snapshot_without_promtool_is_named_with_the_commands_that_read_it(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    root = bundle(tmp_path / "b", {"snap": FIXTURES / "snapshot"})
    b = load_bundle(root)
    assert metric_notes(b) == [
        "metrics: metrics/snap/ not read: a Prometheus TSDB snapshot, and promtool is not installed "
        "(apt-get install -y --no-install-recommends prometheus); or dump it yourself: cp -r metrics/snap/"
        " COPY && mkdir -p COPY/wal && promtool tsdb dump COPY > metrics/snap.dump.txt"
    ]
    assert b.files["metrics"] == [] and not b.store.frames


@pytest.mark.integration
def test_a_snapshot_file_linked_out_of_the_bundle_is_refused(tmp_path):
    require_binary("promtool")
    root = bundle(tmp_path / "b", {"snap": FIXTURES / "snapshot"})
    chunk = next((root / "metrics" / "snap").glob("*/chunks/000001"))
    outside = tmp_path / "elsewhere"
    chunk.rename(outside)
    chunk.symlink_to(outside)
    b = load_bundle(root)
    rel = chunk.relative_to(root).as_posix()
    assert metric_notes(b) == [
        f"metrics: metrics/snap/ not read: {rel} resolves outside the bundle (to {outside})"
    ]
    assert not b.store.frames


@pytest.mark.integration
def test_a_snapshot_over_the_bounds_is_not_read(tmp_path, monkeypatch):
    require_binary("promtool")
    root = bundle(tmp_path / "b", {"snap": FIXTURES / "snapshot", "ok.txt": GOOD})
    monkeypatch.setattr(tsdb_snapshot, "MAX_TSDB_BYTES", 4096)
    b = load_bundle(root)
    assert metric_notes(b) == ["metrics: metrics/snap/ not read: over the 4 KiB limit of a snapshot"]
    assert sorted(b.store.frames) == ["up"]
    monkeypatch.setattr(tsdb_snapshot, "MAX_TSDB_BYTES", 2**30)
    monkeypatch.setattr(metric_files, "MAX_FILE_BYTES", 2**30)
    monkeypatch.setattr(tsdb_snapshot, "MAX_FILE_BYTES", 1000)  # promtool's output read at most
    b = load_bundle(root)
    (note,) = metric_notes(b)
    assert note.startswith("metrics: metrics/snap/ not read: metrics/snap/ (promtool tsdb dump): refused:")
    assert note.endswith("over the 1000 bytes limit") and sorted(b.store.frames) == ["up"]


def test_a_promtool_that_hangs_is_stopped_and_named(tmp_path, monkeypatch):
    """The bound on promtool's time: a stand-in promtool (on PATH, never from the bundle) that
    prints a sample and hangs is stopped by its PID; what it printed is not kept."""
    tools = tmp_path / "tools"
    tools.mkdir()
    fake = tools / "promtool"
    fake.write_text("#!/bin/sh\necho '{__name__=\"up\"} 1 1794445200000'\nexec sleep 600\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setattr(tsdb_snapshot, "DUMP_TIMEOUT_S", 1.0)
    b = load_bundle(bundle(tmp_path / "b", {"snap": FIXTURES / "snapshot"}))
    assert metric_notes(b) == [
        "metrics: metrics/snap/ not read: promtool tsdb dump ran over 1 s and was stopped"
    ]
    assert not b.store.frames


def test_a_failing_promtool_is_named_with_what_it_said(tmp_path, monkeypatch):
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "promtool").write_text("#!/bin/sh\necho 'open block: corrupted index' >&2\nexit 1\n")
    (tools / "promtool").chmod(0o755)
    monkeypatch.setenv("PATH", str(tools))
    b = load_bundle(bundle(tmp_path / "b", {"snap": FIXTURES / "snapshot"}))
    assert metric_notes(b) == [
        "metrics: metrics/snap/ not read: promtool tsdb dump failed (exit 1): open block: corrupted index"
    ]


def test_block_like_folders_hold_nothing_else(tmp_path):
    root = bundle(tmp_path / "b", {"snap": FIXTURES / "snapshot"})
    (root / "metrics" / "snap" / "wal").mkdir()
    entries = metric_files.survey(root, missing := [])
    assert [(e.path.name, e.format, len(e.blocks)) for e in entries] == [("snap", "TSDB snapshot", 1)]
    assert missing == ["metrics: metrics/snap/wal not read: no TSDB block (a snapshot holds blocks)"]


@pytest.mark.integration
def test_files_in_a_block_that_are_no_part_of_it_are_named_and_the_rest_read(tmp_path):
    require_binary("promtool")
    root = bundle(tmp_path / "b", {"snap": FIXTURES / "snapshot"})
    block = next((root / "metrics" / "snap").iterdir())
    (block / "NOTES.txt").write_text("copied from prod\n")
    (block / "chunks" / "000001.tmp").write_bytes(b"\x00")
    b = load_bundle(root)
    rel = block.relative_to(root).as_posix()
    assert metric_notes(b) == [
        f"metrics: {rel}/NOTES.txt is no part of a TSDB block, not read",
        f"metrics: {rel}/chunks/000001.tmp is no chunk file of a TSDB block, not read",
    ]
    assert differences(SOURCE, b.store) == [] and b.files["metrics"] == ["metrics/snap"]
