"""summarise() against numbers computed here from the same raw draws (not from the code under test)."""

from __future__ import annotations

import numpy as np
import pytest

from perfkit.loadgen.records import Record, RecordSink
from perfkit.loadgen.summary import LogHistogram, summarise


def _weighted_pct(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    order = np.argsort(values)
    v, cum = values[order], np.cumsum(weights[order])
    return float(v[np.searchsorted(cum, q / 100 * cum[-1])])


def test_itl_percentiles_are_token_weighted_and_within_the_bin_width(tmp_path):
    rng = np.random.default_rng(7)
    sink = RecordSink(tmp_path / "r.parquet")
    all_gaps, all_toks = [], []
    for i in range(3000):
        n = int(rng.integers(2, 40))
        gaps = rng.lognormal(np.log(0.012), 0.6, n).astype(np.float32)
        toks = rng.integers(1, 5, n)
        all_gaps.append(gaps.astype(np.float64))
        all_toks.append(toks)
        out = int(toks.sum()) + 1
        sink.add(
            Record(
                i,
                0.0,
                sent_s=i * 0.01,
                ttft_s=0.05,
                e2el_s=0.05 + float(gaps.sum()),
                prompt_tokens=10,
                output_tokens=out,
                client_tokens=out,
                chunks=n + 1,
                gaps_s=list(map(float, gaps)),
                chunk_tokens=list(map(int, toks)),
                status=200,
            )
        )
    sink.add(Record(3000, 0.0, sent_s=30.0, error="http_5xx", status=500))  # failed: not in ITL
    path = sink.close()
    doc = summarise(path, 40.0)
    gaps, toks = np.concatenate(all_gaps), np.concatenate(all_toks)
    per_token = gaps / toks
    for q in (50.0, 90.0, 99.0, 99.9):
        exact = _weighted_pct(per_token, toks.astype(float), q) * 1000
        assert doc["percentiles"]["itl_ms"][f"{q:g}"] == pytest.approx(exact, rel=6e-4)
        chunk = float(np.sort(gaps)[int(np.ceil(q / 100 * gaps.size)) - 1]) * 1000
        assert doc["percentiles"]["itl_chunk_ms"][f"{q:g}"] == pytest.approx(chunk, rel=6e-4)
    mean = float((per_token * toks).sum() / toks.sum()) * 1000
    assert doc["mean_itl_ms"] == pytest.approx(mean, rel=1e-6)
    std = float(np.sqrt(np.cov(per_token, aweights=toks, bias=True))) * 1000
    assert doc["std_itl_ms"] == pytest.approx(std, rel=1e-4)
    assert doc["completed"] == 3000 and doc["failed"] == 1
    assert doc["tokens_per_chunk"]["max"] == 4


def test_log_histogram_keeps_extremes_and_tiny_gaps():
    h = LogHistogram()
    h.add(np.array([0.0, 0.0, 0.0, 2.5]))
    p = h.percentiles((50.0, 100.0))
    assert p["50"] == 0.0  # gaps of two chunks read together are zero, not the 0.1 µs bin's middle
    assert p["100"] == pytest.approx(2500.0)
    assert LogHistogram().percentiles((50.0,)) == {"50": None}


def test_memory_does_not_grow_with_chunks():
    h = LogHistogram()
    before = h.counts.nbytes
    for _ in range(20):
        h.add(np.random.default_rng(1).exponential(0.01, 200_000))
    assert h.counts.nbytes == before and h.weight == 4_000_000


def test_the_peak_second_is_never_below_the_runs_own_rate(tmp_path):
    # a 0.4 s run of 3 x 10 tokens: no whole second, 75 tok/s on average; the peak is at least that
    sink = RecordSink(tmp_path / "r.parquet")
    for i in range(3):
        sink.add(
            Record(i, 0.0, sent_s=0.1 * i, ttft_s=0.05, e2el_s=0.2, prompt_tokens=10, output_tokens=10,
                   client_tokens=10, chunks=10, gaps_s=[0.0167] * 9, chunk_tokens=[1] * 9, status=200)
        )  # fmt: skip
    doc = summarise(sink.close(), 0.4)
    assert doc["output_throughput"] == pytest.approx(75.0)
    assert doc["max_output_tokens_per_s"] >= doc["output_throughput"]
