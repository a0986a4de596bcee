"""Request lengths drawn from a length histogram (perfkit/loadgen/lengths.py): the bucket counts
place each request, the histogram's _sum pins the mean that uniform draws within wide buckets miss.

The histograms here are built from lognormal lengths the test draws itself (the shape vLLM's
request_prompt_tokens buckets hold: vLLM's 1-2-5 bounds), so the truth the draw is held to is the
test's sample, not anything the code under test computed."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from perfkit.loadgen.lengths import draw_lengths

BOUNDS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000]  # vLLM's 1-2-5 series


def histogram(sample: np.ndarray) -> pl.DataFrame:
    les = [*BOUNDS, float("inf")]
    counts = [float((sample <= b).sum()) for b in les]
    return pl.DataFrame({"le": [str(b) if b != float("inf") else "+Inf" for b in les], "value": counts})


@pytest.mark.parametrize(("median", "sigma"), [(600, 1.0), (150, 0.6), (3000, 1.2)])
def test_the_draw_keeps_the_bucket_counts_and_meets_the_recorded_mean(median, sigma):
    rng = np.random.default_rng(7)
    sample = np.clip(np.round(rng.lognormal(np.log(median), sigma, 20_000)), 1, 30_000)
    frame = histogram(sample)
    drawn, notes = draw_lengths(
        frame, 20_000, np.random.default_rng(1), "m", 2**20, mean=float(sample.mean())
    )
    assert drawn is not None
    assert drawn.mean() == pytest.approx(sample.mean(), rel=0.03)
    for b in BOUNDS:  # every request still in its bucket's share
        assert (drawn <= b).mean() == pytest.approx((sample <= b).mean(), abs=0.015)
    uniform, _ = draw_lengths(frame, 20_000, np.random.default_rng(1), "m", 2**20)
    # a falling distribution inside wide buckets: uniform overstates the mean, the pinned draw does not
    assert abs(uniform.mean() / sample.mean() - 1) > abs(drawn.mean() / sample.mean() - 1)
    assert any("_sum/_count" in n for n in notes)


def test_without_a_sum_the_draw_is_uniform_and_says_so():
    frame = histogram(np.full(100, 70.0))  # every request in (50, 100]
    drawn, notes = draw_lengths(frame, 5000, np.random.default_rng(3), "m", 2**20)
    assert drawn.min() >= 51 and drawn.max() <= 100
    assert drawn.mean() == pytest.approx(75.5, abs=1.0)
    assert any("no _sum" in n for n in notes)


def test_a_mean_the_buckets_cannot_hold_is_drawn_as_close_as_they_allow():
    frame = histogram(np.full(100, 70.0))
    drawn, notes = draw_lengths(frame, 5000, np.random.default_rng(3), "m", 2**20, mean=400.0)
    assert drawn.max() <= 100 and drawn.mean() > 90  # leaning to the bucket's top, never out of it
    assert any("not reachable" in n for n in notes)
