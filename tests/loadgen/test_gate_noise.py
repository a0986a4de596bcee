"""The gate's within-run noise (perfkit.loadgen.records.run_noise, within_band): exact binomial ranks
checked against a sum computed here, and the intervals' coverage measured on synthetic record files
(seeded draws from known distributions: iid, and with the machine's state shared by requests sent
together), where the naive independent-request interval is shown to fall short."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from perfkit.loadgen.records import (
    SCHEMA,
    binomial_ranks,
    coverage,
    min_requests,
    run_noise,
    student,
    within_band,
)


def binom_cdf(n: int, q: float, k: int) -> float:
    """P(B <= k), B ~ Bin(n, q), summed exactly with integers and floats (independent of the code)."""
    return sum(math.comb(n, i) * q**i * (1 - q) ** (n - i) for i in range(k + 1))


@pytest.mark.parametrize(("n", "q"), [(1000, 0.99), (1000, 0.5), (700, 0.99), (120, 0.5)])
def test_binomial_ranks_are_the_exact_ones(n: int, q: float) -> None:
    half = (1 - coverage(3.0)) / 2
    ranks = binomial_ranks(n, q, 3.0)
    assert ranks is not None
    lo, hi = ranks
    assert binom_cdf(n, q, lo - 1) <= half < binom_cdf(n, q, lo)  # P(B < l) <= a/2, the largest such l
    assert 1 - binom_cdf(n, q, hi - 1) <= half < 1 - binom_cdf(n, q, hi - 2)  # P(B >= u) <= a/2, smallest u


def test_a_p99_needs_658_independent_requests_at_k_3() -> None:
    assert min_requests(0.99, 3.0) == 658  # ln(0.00135) / ln(0.99) = 657.6
    assert binomial_ranks(658, 0.99, 3.0) is not None and binomial_ranks(657, 0.99, 3.0) is None
    assert binomial_ranks(1000, 0.99, 3.0) == (979, 999)


def test_ten_blocks_give_students_t_not_the_normal_multiplier() -> None:
    """Table values (any statistics text): t(0.975; 9) = 2.262, t(0.975; 2) = 4.303, t(0.99865; 9) ~ 4.09."""
    assert student(1.959964, 9) == pytest.approx(2.2622, abs=1e-3)
    assert student(1.959964, 2) == pytest.approx(4.3027, abs=1e-3)
    assert student(3.0, 9) == pytest.approx(4.09, abs=0.01) and student(3.0, 10_000) == pytest.approx(
        3.0, abs=0.01
    )


def write_records(path: Path, ttft_s: np.ndarray) -> Path:
    """A synthetic records file: requests sent 10 ms apart, the given TTFTs, 16 tokens 10 ms apart."""
    n = ttft_s.size
    gaps = [[0.01] * 15] * n
    table = pa.Table.from_pydict(
        {
            "i": np.arange(n), "scheduled_s": np.arange(n) * 0.01, "sent_s": np.arange(n) * 0.01,
            "ttft_s": ttft_s, "e2el_s": ttft_s + 0.15, "prompt_tokens": np.full(n, 32, np.int32),
            "output_tokens": np.full(n, 16, np.int32), "client_tokens": np.full(n, 16, np.int32),
            "chunks": np.full(n, 16, np.int32), "gaps_s": gaps, "chunk_tokens": [[1] * 15] * n,
            "status": np.full(n, 200, np.int16), "error": [None] * n, "detail": [None] * n,
        },
        schema=SCHEMA,
    )  # fmt: skip
    pq.write_table(table, path)
    return path


def coverage_of(
    tmp_path: Path, draw, truth: dict[str, float], runs: int = 60
) -> dict[str, tuple[float, float]]:
    """Per metric: the share of runs with an interval (bounded), and the share of those holding the truth."""
    bounded, hits = dict.fromkeys(truth, 0), dict.fromkeys(truth, 0)
    for r in range(runs):
        noise = run_noise(write_records(tmp_path / f"r{r}.parquet", draw(np.random.default_rng(r))))
        for name, value in truth.items():
            if (iv := noise.intervals.get(name)) is not None:
                bounded[name] += 1
                hits[name] += iv.lo <= value <= iv.hi
    return {name: (bounded[name] / runs, hits[name] / max(bounded[name], 1)) for name in truth}


def test_independent_requests_are_covered(tmp_path: Path) -> None:
    """2,000 lognormal TTFTs (median 50 ms, sigma 0.3): the 99.73 % intervals of the mean, median and
    p99 hold the true values (50 x e^0.045, 50, 50 x e^(0.3 x 2.326) ms) in nearly every run. The
    p99 is bounded in most runs (2,000 requests over the 658 it needs, less the effective count's
    own uncertainty from ten blocks)."""
    truth = {
        "median_ttft_ms": 50.0,
        "p99_ttft_ms": 50.0 * math.exp(0.3 * 2.3263479),
        "mean_ttft_ms": 50.0 * math.exp(0.045),
    }
    got = coverage_of(tmp_path, lambda rng: 0.05 * np.exp(0.3 * rng.standard_normal(2000)), truth)
    assert got["median_ttft_ms"] == (1.0, pytest.approx(1.0, abs=0.04)) and got["mean_ttft_ms"][1] >= 0.96, (
        got
    )
    assert got["p99_ttft_ms"][0] >= 0.75 and got["p99_ttft_ms"][1] >= 0.95, got


def shared_state(rng: np.random.Generator, n: int = 2000) -> np.ndarray:
    """Each 100 requests sent together share one slow-down of the machine (lognormal, sigma 0.25)."""
    state = np.repeat(np.exp(0.25 * rng.standard_normal(n // 100)), 100)
    return 0.05 * np.exp(0.3 * rng.standard_normal(n)) * state


def test_requests_that_share_the_machines_state_widen_the_interval(tmp_path: Path) -> None:
    """With the state shared, 2,000 requests hold about 20 independent draws of it: the p99 is not
    bounded (too few requests, said), and the median's interval still covers the truth, where an
    interval that counted 2,000 independent requests would miss it often."""
    big = shared_state(np.random.default_rng(12345), 4_000_000)
    true_median = float(np.median(big))
    got = coverage_of(tmp_path, shared_state, {"median_ttft_ms": true_median * 1000})
    assert got["median_ttft_ms"][0] == 1.0 and got["median_ttft_ms"][1] >= 0.95, got
    naive_hits = 0
    for r in range(60):
        x = np.sort(shared_state(np.random.default_rng(r)) * 1000)
        lo, hi = binomial_ranks(x.size, 0.5, 3.0) or (1, x.size)
        naive_hits += x[lo - 1] <= true_median * 1000 <= x[hi - 1]
    assert naive_hits / 60 < 0.6  # the independent-request interval is far too narrow here
    noise = run_noise(write_records(tmp_path / "one.parquet", shared_state(np.random.default_rng(7))))
    assert noise.unbounded["p99_ttft_ms"].startswith("too few requests for p99: n=2,000, about ")
    assert "share the machine's state; its 99.73% interval needs 658" in noise.unbounded["p99_ttft_ms"]


def test_within_band_takes_each_side_from_its_bad_end() -> None:
    from perfkit.loadgen.records import Interval, RunNoise

    def noise(est: float, lo: float, hi: float) -> RunNoise:
        return RunNoise(k=3.0, blocks=10, intervals={"median_ttft_ms": Interval(est, lo, hi, 1000, 1000.0)})

    new, ref = noise(60.0, 57.0, 64.0), noise(50.0, 48.0, 51.0)
    band, source, why = within_band("median_ttft_ms", 3.0, 1.0, 60.0, new, [(ref, 50.0)], completed=1000)
    # lower is better: the new value may be 3 ms above its truth, the reference 1 ms below its own
    assert (band, source, why) == (pytest.approx(math.hypot(3.0, 1.0)), "within-run CI", None)
    alone, _, _ = within_band("median_ttft_ms", 3.0, 1.0, 60.0, new, [(None, 50.0)], completed=1000)
    assert alone == pytest.approx(math.hypot(3.0, 3.0))  # the new run's stands in for the baseline's
    higher, _, _ = within_band("median_ttft_ms", 3.0, -1.0, 60.0, new, [(ref, 50.0)], completed=1000)
    assert higher == pytest.approx(math.hypot(4.0, 2.0))  # higher is better: the other ends
