from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from perfkit.errors import BundleError
from perfkit.sources.openmetrics import parse_labels, parse_text, read_file

DATA = Path(__file__).resolve().parents[1] / "data"
T0 = datetime(2026, 11, 30, tzinfo=UTC)


def om(body: str) -> str:
    return body.strip("\n") + "\n# EOF\n"


def test_counter_with_created_histogram_and_special_values():
    text = om(
        """
# TYPE req counter
req_total{m="a"} 1 100
req_created{m="a"} 50 100
req_total{m="a"} 3 115
# TYPE lat histogram
lat_bucket{le="1"} 2 100
lat_bucket{le="+Inf"} 3 100
lat_count 3 100
lat_sum 2.5 100
lat_created 50 100
# TYPE g gauge
g NaN 100
g +Inf 115
g -Inf 130
"""
    )
    store = parse_text(text, require_eof=True)
    assert set(store.frames) == {"req_total", "lat_bucket", "lat_count", "lat_sum", "g"}
    assert store.types["req_total"] == "counter"
    assert store.types["lat_bucket"] == "histogram"
    values = store.frames["g"]["value"].to_list()
    assert math.isnan(values[0]) and values[1] == math.inf and values[2] == -math.inf
    assert store.frames["req_total"]["value"].to_list() == [1.0, 3.0]
    ts = store.frames["req_total"]["ts"].to_list()
    assert ts[0] == datetime(1970, 1, 1, 0, 1, 40, tzinfo=UTC)


def test_unsorted_series_are_sorted_and_duplicates_keep_last():
    text = om(
        """
# TYPE x gauge
x{a="2"} 5 130
x{a="1"} 2 115
x{a="1"} 1 100
x{a="1"} 9 115
"""
    )
    frame = parse_text(text, require_eof=True).frames["x"]
    assert frame.select("a", "value").rows() == [("1", 1.0), ("1", 9.0), ("2", 5.0)]


def test_label_escapes_and_exemplars():
    assert parse_labels(r'{a="x\"y",b="c\\d",n="l\n2"}') == {"a": 'x"y', "b": "c\\d", "n": "l\n2"}
    store = parse_text(om('# TYPE h histogram\nh_bucket{le="1"} 4 100 # {trace_id="abc"} 0.5 99\n'))
    assert store.frames["h_bucket"]["value"].to_list() == [4.0]


@pytest.mark.parametrize(
    ("body", "line", "what"),
    [
        ("# TYPE x gauge\nx 1 100\nx{a=1} 2 115\n", 3, "malformed labels"),
        ("# TYPE x gauge\nx 1 100\nx one 115\n", 3, "invalid value"),
        ("# TYPE x gauge\nx 1 100\nx 2 later\n", 3, "invalid timestamp"),
        ("x 1 100\nthis is not a sample\n", 2, "malformed sample line"),
    ],
)
def test_malformed_line_names_file_and_line(body, line, what):
    with pytest.raises(BundleError) as err:
        parse_text(om(body), path="metrics/vllm.om", require_eof=True)
    assert err.value.line == line
    assert str(err.value).startswith(f"metrics/vllm.om:{line}: {what}")


def test_missing_eof_and_missing_timestamp(tmp_path):
    p = tmp_path / "m.om"
    p.write_text("x 1 100\n")
    with pytest.raises(BundleError, match="# EOF"):
        read_file(p)
    p.write_text("x 1\n# EOF\n")
    with pytest.raises(BundleError, match=r"m.om:1: sample has no timestamp"):
        read_file(p)


def test_synthetic_vllm_exposition_without_timestamps():
    """vLLM 0.33.0's metric names, HELP, types, labels and buckets; the values are invented (its header)."""
    path = DATA / "vllm_metrics_synthetic_v0.33.0.txt"
    store = read_file(path, default_ts=T0)
    assert "vllm:kv_cache_usage_perc" in store
    assert not [n for n in store if n.endswith("_created")]
    ttft = store.frames["vllm:time_to_first_token_seconds_bucket"]
    assert ttft.filter(pl.col("le") == "+Inf")["value"].item() == 200.0
    assert store.types["vllm:generation_tokens_total"] == "counter"
    assert ttft["ts"].unique().to_list() == [T0]


def test_vllm_exposition_printed_in_vllms_docs():
    """The `curl /metrics` example output of vLLM's docs/design/metrics.md (tests/data/SOURCE.md): values
    as printed there, no timestamps, a histogram without its +Inf bucket and _sum (the doc prints none)."""
    store = read_file(DATA / "vllm_metrics_docs_example.txt", default_ts=T0)
    model = "meta-llama/Llama-3.1-8B-Instruct"
    assert store.types == {
        "vllm:num_requests_running": "gauge",
        "vllm:generation_tokens_total": "counter",
        "vllm:request_success_total": "counter",
        "vllm:time_to_first_token_seconds_bucket": "histogram",
        "vllm:time_to_first_token_seconds_count": "histogram",
    }
    assert store.frames["vllm:num_requests_running"].select("model_name", "value").rows() == [(model, 8.0)]
    assert store.frames["vllm:generation_tokens_total"]["value"].to_list() == [27453.0]
    success = store.frames["vllm:request_success_total"]
    assert dict(success.select("finished_reason", "value").rows()) == {
        "stop": 1.0,
        "length": 131.0,
        "abort": 0.0,
    }
    ttft = store.frames["vllm:time_to_first_token_seconds_bucket"]
    by_le = dict(ttft.select("le", "value").rows())
    assert (by_le["0.02"], by_le["0.04"], by_le["0.1"], len(by_le)) == (13.0, 97.0, 140.0, 8)
    assert store.frames["vllm:time_to_first_token_seconds_count"]["value"].to_list() == [140.0]
    assert {t for f in store.frames.values() for t in f["ts"].to_list()} == {T0}
