"""The streamed, selective OpenMetrics reader: pieces, the fast split, ``families`` and ``scope``.

Reference values come from outside the code under test: prometheus_client's parser, line numbers
and lengths fixed when the text is built, and :func:`perfkit.engine.scope.scope_store` applied
after a full read (the post-read filter the scoped reader replaces).
"""

from __future__ import annotations

import math
from pathlib import Path

import polars as pl
import pytest
from polars.testing import assert_frame_equal
from prometheus_client.parser import text_string_to_metric_families

from perfkit.core.frames import MetricStore, sort_series
from perfkit.core.scope import Scope, parse_scope
from perfkit.engine.scope import ScopeMatchesNothing, scope_store
from perfkit.errors import BundleError
from perfkit.sources import openmetrics
from perfkit.sources.bundle import load_bundle, read_scoped
from perfkit.sources.openmetrics import parse_text, read_file, read_files

SCENARIO = Path(__file__).resolve().parents[2] / "data" / "scenarios" / "p95-prefill-interference"

TRICKY = """\
# TYPE a gauge
# HELP a gauge with hard label values
a{x="sp ace",y="br}ace#h",z="q\\"e\\\\n\\n"} 1.5 1700000000.250
a{x="u\u00e9"}\t2\t1700000015
a   NaN   1700000030\x20\x20
a +Inf 1700000045
a -Inf 1700000060
a{x="sp ace",y="br}ace#h",z="q\\"e\\\\n\\n"} 2.5e-3 1700000015.5
a{x="sp ace",y="br}ace#h",z="q\\"e\\\\n\\n"} 7 1700000000.250
# TYPE b counter
b_total{m="1",n="2"} 1e3 1700000000
b_total{n="2",m="1"} 2000 1700000015
b_total{m="1",n="2"} 3000 1700000030
b_total{m="2"} 5 1700000000
"""


def om(body: str) -> str:
    return body.rstrip("\n") + "\n# EOF\n"


def samples_of(store: MetricStore) -> dict[str, dict[tuple, float]]:
    """name -> {(labels, ts ms): value}, NaN as the string 'nan' so it compares."""
    out: dict[str, dict[tuple, float]] = {}
    for name, frame in store.frames.items():
        labels = [c for c in frame.columns if c not in ("ts", "value")]
        for row in frame.with_columns(pl.col("ts").dt.epoch("ms")).iter_rows(named=True):
            key = tuple(sorted((k, row[k]) for k in labels if row[k] is not None))
            out.setdefault(name, {})[(key, row["ts"])] = _v(row["value"])
    return out


def _v(value: float) -> float | str:
    return "nan" if math.isnan(value) else value


def reference(text: str) -> dict[str, dict[tuple, float]]:
    """prometheus_client's reading (its text format takes timestamps as ms; ours are OpenMetrics seconds)."""
    out: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            key = (tuple(sorted(s.labels.items())), round(s.timestamp * 1e6))
            out.setdefault(s.name, {})[key] = _v(s.value)  # a later duplicate wins, as in a scrape
    return out


@pytest.mark.parametrize("piece", [64, 300, 1 << 20])
def test_agrees_with_prometheus_client_across_pieces(monkeypatch, piece):
    monkeypatch.setattr(openmetrics, "CHUNK_BYTES", piece)
    store = parse_text(om(TRICKY), require_eof=True)
    assert samples_of(store) == reference(TRICKY)
    assert store.types == {"a": "gauge", "b_total": "counter"}
    for frame in store.frames.values():
        assert_frame_equal(frame, sort_series(frame))  # sorted by series, then time


def test_real_scenario_file_agrees_with_prometheus_client(monkeypatch):
    text = (SCENARIO / "metrics" / "node.om").read_text()
    monkeypatch.setattr(openmetrics, "CHUNK_BYTES", 100_000)  # ~13 pieces
    store = parse_text(text, require_eof=True)
    assert samples_of(store) == reference(text.replace("# EOF\n", ""))


def test_fast_split_and_full_regex_read_the_same():
    plain = "# TYPE g gauge\n" + "".join(f'g{{i="{i % 3}"}} {i * 0.5} {1700000000 + i}\n' for i in range(60))
    odd = plain.replace(" ", "\t").replace("# TYPE\tg\tgauge", "# TYPE g gauge").replace("\n", "  \n")
    assert odd != plain
    fast, slow = parse_text(om(plain), require_eof=True), parse_text(om(odd), require_eof=True)
    assert list(fast.frames) == list(slow.frames) == ["g"]
    assert_frame_equal(fast.frames["g"], slow.frames["g"])
    assert fast.frames["g"].height == 60


def test_exemplars_and_a_label_value_that_looks_like_a_sample():
    text = om(
        '# TYPE h histogram\nh_bucket{le="1"} 4 100 # {trace_id="abc"} 0.5 99\n'
        'h_bucket{le="+Inf",note="x 1 2"} 5 100\n'
    )
    frame = parse_text(text, require_eof=True).frames["h_bucket"]
    assert frame.select("le", "note", "value").rows() == [("+Inf", "x 1 2", 5.0), ("1", None, 4.0)]


def numbered(n: int, bad: dict[int, str]) -> str:
    """An OpenMetrics text of ``n`` lines whose line ``k`` is ``bad[k]`` (1-based)."""
    lines = ["# TYPE g gauge"] + [f'g{{i="{k % 5}"}} {k} {1700000000 + k}' for k in range(2, n)] + ["# EOF"]
    for k, line in bad.items():
        lines[k - 1] = line
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize(
    ("line", "what"),
    [
        ('g{i="1"} one 1700000100', "invalid value 'one'"),
        ('g{i="1"} 1 later', "invalid timestamp 'later'"),
        ("g{i=1} 1 1700000100", "malformed labels"),
        ("this is not a sample", "malformed sample line"),
        ('g{i="1"} 1', "sample has no timestamp"),
        ('g{i="1"} 1 1e300', "invalid timestamp '1e300'"),
    ],
)
def test_errors_name_the_line_in_a_later_piece(monkeypatch, line, what):
    monkeypatch.setattr(openmetrics, "CHUNK_BYTES", 200)
    with pytest.raises(BundleError) as err:
        parse_text(numbered(300, {237: line}), path="metrics/x.om", require_eof=True)
    assert err.value.line == 237
    assert str(err.value).startswith(f"metrics/x.om:237: {what}")


def test_error_order_is_that_of_a_whole_file_reader(monkeypatch, tmp_path):
    monkeypatch.setattr(openmetrics, "CHUNK_BYTES", 200)
    truncated = numbered(300, {20: "this is not a sample"}).replace("# EOF\n", "")
    with pytest.raises(BundleError, match="must end with '# EOF'"):
        parse_text(truncated, require_eof=True)  # a cut capture: say so, not its first odd line
    long = numbered(300, {20: "this is not a sample", 250: 'g{i="' + "x" * 70_000 + '"} 1 1700000000'})
    with pytest.raises(BundleError) as err:
        parse_text(long, require_eof=True)
    assert err.value.line == 250 and "longer than the 64 KiB limit" in str(err.value)
    path = tmp_path / "bad.om"
    data = numbered(300, {20: "this is not a sample"}).encode()
    cut = data.index(b"\n", 3000) + 1
    path.write_bytes(data[:cut] + b'g{i="\xff"} 1 1700000000\n' + data[cut:])
    with pytest.raises(BundleError, match=rf"not UTF-8 text \(invalid start byte at byte {cut + 5}\)") as err:
        read_file(path)
    assert err.value.line == data[:cut].count(b"\n") + 1


def test_line_longer_than_a_piece_is_measured_whole(monkeypatch, tmp_path):
    monkeypatch.setattr(openmetrics, "CHUNK_BYTES", 4096)
    path = tmp_path / "long.om"
    head = '# TYPE g gauge\ng{i="1"} 1 1700000000\ng{i="'
    path.write_text(head + "y" * 200_000 + '"} 2 1700000015\n# EOF\n')
    with pytest.raises(BundleError) as err:
        read_file(path)
    assert err.value.line == 3
    assert "line of 195.3 KiB" in str(err.value)  # 6 + 200,000 + 16 bytes


def test_families_set_and_predicate_skip_other_lines():
    text = om(
        "# TYPE a gauge\na 1 100\n# TYPE b gauge\nb{x=1} 2 100\n# TYPE c_total counter\n"
        "c_total 3 100\nc_created 50 100\n"
    )
    with pytest.raises(BundleError, match="malformed labels"):
        parse_text(text, require_eof=True)
    only_a = parse_text(text, require_eof=True, families={"a", "c_created"})  # b's bad line is not read
    assert set(only_a.frames) == {"a"}  # c_created is a counter's start time: dropped as ever
    assert only_a.frames["a"]["value"].to_list() == [1.0]
    c = parse_text(text, require_eof=True, families=lambda name: name.startswith("c"))
    assert set(c.frames) == {"c_total"} and c.types == {"c_total": "counter"}
    with pytest.raises(TypeError, match="not one string"):
        parse_text(text, families="a")


def test_the_same_series_in_two_files_is_one_later_file_winning(tmp_path):
    (tmp_path / "a.om").write_text(om('x{p="1",q="2"} 1 100\nx{p="1",q="2"} 2 115'))
    (tmp_path / "b.om").write_text(om('x{q="2",p="1"} 9 115\nx{p="1",q="2"} 3 130'))
    frame = read_files([tmp_path / "b.om", tmp_path / "a.om"]).frames["x"]
    assert frame.select("p", "q", "value").rows() == [("1", "2", 1.0), ("1", "2", 9.0), ("1", "2", 3.0)]


# -- scope ------------------------------------------------------------------------------------------

FLEET_VLLM_1 = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{instance="h1:8000",model_name="A"} 3 100
vllm:num_requests_running{instance="h2:8000",model_name="B"} 4 100
vllm:num_requests_running{instance="h1:8000",model_name="A"} 5 115
vllm:num_requests_running{model_name="A"} 1 100
vllm:num_requests_running{instance="h3:8000"} 6 100
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{instance="h1:8000",block_size="16"} 1 100
vllm:cache_config_info{instance="h2:8000",block_size="32"} 1 100
# TYPE train_loss gauge
train_loss{instance="h1:9000"} 2.5 100
"""
FLEET_VLLM_2 = """\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="A",instance="h1:8000"} 7 115
# TYPE train_loss gauge
train_loss{instance="h2:9000",model_name="B"} 2.0 100
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{instance="h2:8000",model_name="B"} 9 100
"""
FLEET_DCGM = """\
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{Hostname="h1",gpu="0"} 90 100
DCGM_FI_DEV_GPU_UTIL{Hostname="h2",gpu="0"} 80 100
DCGM_FI_DEV_GPU_UTIL{Hostname="h3",gpu="0"} 70 100
DCGM_FI_DEV_GPU_UTIL{gpu="9"} 60 100
# TYPE node_load1 gauge
node_load1{instance="h2:9100"} 4 100
node_load1 1 100
"""


@pytest.fixture
def fleet(tmp_path):
    for name, text in (("vllm1.om", FLEET_VLLM_1), ("vllm2.om", FLEET_VLLM_2), ("dcgm.om", FLEET_DCGM)):
        (tmp_path / name).write_text(om(text))
    return sorted(tmp_path.glob("*.om"))


@pytest.mark.parametrize(
    ("scope", "hosts", "families"),
    [
        ('{model_name="A"}', None, None),
        ('{model_name="B"}', None, None),
        ('{model_name=~"A|B"}', None, None),
        ('{model_name="A"}', "h2", None),
        (None, "h1,h3", None),
        ('{model_name!="A",instance=~"h.*"}', None, None),
        ('{model_name="A"}', None, {"vllm:num_requests_running", "DCGM_FI_DEV_GPU_UTIL"}),
        ('{instance="h3:8000"}', None, None),
    ],
)
def test_scoped_read_equals_scope_store_after_a_full_read(fleet, scope, hosts, families):
    chosen = parse_scope(scope, hosts)
    expected, expected_report = scope_store(read_files(fleet, families=families), chosen)
    store, report = read_scoped(fleet, chosen, families=families)
    assert list(store.frames) == list(expected.frames)
    assert store.types == expected.types
    for name, frame in expected.frames.items():
        assert_frame_equal(store.frames[name], frame)
    assert report == expected_report


def test_scoped_read_keeps_the_workload_and_its_hosts(fleet):
    store, report = read_scoped(fleet, parse_scope('{model_name="A"}'))
    assert report.hosts == ["h1"]
    running = store.frames["vllm:num_requests_running"]
    # 5 at 115 was overwritten by file 2's 7; A's series without an instance is A's too
    assert running.select("instance", "value").rows() == [("h1:8000", 3.0), ("h1:8000", 7.0), (None, 1.0)]
    assert store.frames["DCGM_FI_DEV_GPU_UTIL"]["gpu"].to_list() == ["0", "9"]  # h1's, and the unjoinable one
    assert store.frames["vllm:cache_config_info"]["block_size"].to_list() == ["16"]  # no model_name: by host
    assert "train_loss" not in store.frames  # carries model_name (in file 2): by the matchers, and A has none


def test_a_scope_that_matches_nothing_says_so_the_same_way(fleet):
    scope = parse_scope('{model_name="C"}')
    with pytest.raises(ScopeMatchesNothing) as expected:
        scope_store(read_files(fleet), scope)
    with pytest.raises(ScopeMatchesNothing) as got:
        read_scoped(fleet, scope)
    assert str(got.value) == str(expected.value)


def test_load_bundle_reads_scoped_and_selected(tmp_path, fleet):
    bundle = tmp_path / "bundle"
    (bundle / "metrics").mkdir(parents=True)
    (bundle / "incident.yaml").write_text((SCENARIO / "incident.yaml").read_text())
    for path in fleet:
        (bundle / "metrics" / path.name).write_text(path.read_text())
    b = load_bundle(bundle, scope=parse_scope('{model_name="B"}'), families=lambda n: n.startswith("vllm:"))
    assert set(b.store.frames) == {
        "vllm:num_requests_running",
        "vllm:cache_config_info",
        "vllm:num_requests_waiting",
    }
    assert b.scope is not None and b.scope.hosts == ["h2"]
    assert b.store.frames["vllm:cache_config_info"]["block_size"].to_list() == ["32"]
    assert b.files["metrics"] == ["metrics/dcgm.om", "metrics/vllm1.om", "metrics/vllm2.om"]


def test_an_empty_host_list_narrows_nothing_as_scope_store_says(fleet):
    scope = Scope(parse_scope('{model_name="A"}').matchers, frozenset())
    expected, expected_report = scope_store(read_files(fleet), scope)
    store, report = read_scoped(fleet, scope)
    assert report == expected_report and list(store.frames) == list(expected.frames)
    for name, frame in expected.frames.items():
        assert_frame_equal(store.frames[name], frame)
    assert store.frames["DCGM_FI_DEV_GPU_UTIL"].height == 4
