"""The request lengths of an incident bundle's window, for :func:`perfkit.loadgen.shapes.replay_bundle`.

Read from the best evidence the engine left, and said which in the replay's notes:

1. **Its length histograms** (vLLM's ``vllm:request_prompt_tokens`` / ``vllm:request_generation_tokens``,
   SGLang's with ``--collect-tokens-histogram``, TGI's, Dynamo's): drawn within their buckets so
   that the mean is the histogram's ``_sum / _count`` (:func:`perfkit.loadgen.lengths.draw_lengths`).
2. **Else its token counters' means** (SGLang without the flag, trtllm-serve: ``*_prompt_tokens_total``
   and ``*_generation_tokens_total`` over the requests finished, an ``_count`` or the success
   counter): the mean is measured, the spread is not. Prompts come from SGLang's own ``Prefill
   batch`` lines when the window's logs hold them (each batch's ``#new-token`` + ``#cached-token``
   split over its ``#new-seq``, scaled to the counter's mean), but only when those lines count the
   window's requests within :data:`LINES_AGREE` (a chunked prompt is logged once a chunk and a
   sampled log misses batches, and either would bend the mix). Otherwise, and for outputs always,
   a lognormal of shape :data:`LOGNORMAL_SIGMA` with the counter's mean: the usual fit of LLM
   prompt and output lengths (ShareGPT's, a chat fleet's), an assumption named in the notes.

A replay drawn from a mean alone reproduces the load but not necessarily its tail: the what-if
compares its replay of the incident with the incident's observed histograms, and a miss beyond the
replay's tolerance marks the prediction untrusted (:mod:`perfkit.app.whatif.reproduce`).
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl

from perfkit.core.frames import Window
from perfkit.engine import ops
from perfkit.engine import signals as S
from perfkit.engine.local import LocalEngine
from perfkit.loadgen.lengths import draw_lengths
from perfkit.sources.engine_lines import prefill_batches

LOGNORMAL_SIGMA = 1.0
"""The lognormal's shape (the standard deviation of log length) where only a mean is known: a
coefficient of variation of 1.31, about what ShareGPT's prompts and outputs show; a median of 0.61 of
the mean."""
LINES_AGREE = (0.8, 1.25)
"""SGLang's prefill lines stand for the prompt mix when the requests they count are within these
ratios of the requests the counter finished in the window (and their mean prompt of the counter's)."""
COUNTERS = {"prompt_tokens": "prompt_tokens_total", "generation_tokens": "generation_tokens_total"}
NO_HISTOGRAM = "no length histogram"
"""Every note of lengths drawn without a length histogram says this (the what-if shows those notes)."""
MAX_BATCH_SEQS = 100_000
"""Most new requests one prefill line is taken to hold: far above any engine's running batch (SGLang's
--max-running-requests runs to thousands), so a larger count is not a batch and the line is skipped."""


def window_lengths(
    engine: LocalEngine, logs: pl.DataFrame | None, window: Window, n: int,
    rngs: tuple[np.random.Generator, np.random.Generator], tops: tuple[int, int],
) -> tuple[list[np.ndarray], list[str]] | str:  # fmt: skip
    """``n`` (prompt, output) lengths for the window and notes on where they came from, or why there
    are none (a sentence naming what is missing)."""
    out, notes = [], []
    for signal, rng, top in zip(COUNTERS, rngs, tops, strict=True):
        metric = S.resolve(engine, signal).metric
        if metric is not None:
            increase = ops.sum_by(ops.increase(ops.Selector(f"{metric}_bucket"), window.seconds), "le")
            mean = S.window_mean(engine, signal, window)
            drawn, said = draw_lengths(engine.instant(increase, window.end), n, rng, metric, top, mean)
            if drawn is None:
                return f"{metric} has no observations in finite buckets in the incident window"
        else:
            got = _from_counters(
                engine, logs if signal == "prompt_tokens" else None, signal, window, n, rng, top
            )
            if isinstance(got, str):
                return f"{S.absent(engine, 'histograms', signal)}, {got}: cannot draw request lengths"
            drawn, said = got
        out.append(drawn)
        notes += said
    return out, notes


def _from_counters(
    engine: LocalEngine, logs: pl.DataFrame | None, signal: str, window: Window, n: int,
    rng: np.random.Generator, top: int,
) -> tuple[np.ndarray, list[str]] | str:  # fmt: skip
    """Lengths with the token counter's mean over the window (module docstring), or why not."""
    tokens = S.resolve(engine, COUNTERS[signal]).metric
    if tokens is None:
        return f"and {S.absent(engine, 'counters', COUNTERS[signal])} to take a mean from"
    # the counter's rate over the requests finished per second (the E2E histogram's count, else the
    # success counter): tokens a request
    per_s, finished_per_s = S.counter_rate(engine, COUNTERS[signal], window), S.request_rate(engine, window)
    if not (per_s and finished_per_s and per_s > 0 and finished_per_s > 0):
        return f"and {tokens} over the requests finished gives no mean (one did not rise in the window)"
    mean, requests = per_s / finished_per_s, finished_per_s * window.seconds
    said = f"{tokens} over the requests finished: {mean:,.0f} tokens a request"
    sample = _prompts_from_lines(logs, window) if logs is not None else None
    if sample is not None:
        counted, seen = len(sample), float(sample.mean())
        lo, hi = LINES_AGREE
        if lo <= counted / requests <= hi and lo <= seen / mean <= hi:
            picked = sample[rng.integers(0, len(sample), n)] * (mean / seen)
            drawn = np.clip(np.rint(picked), 1, top).astype(np.int32)
            return drawn, [
                f"{signal}: {NO_HISTOGRAM}; drawn from SGLang's {counted:,} prefill lines' prompts in "
                f"the window (mean {seen:,.0f}), scaled to the mean of {said}"
            ]
        why = (
            f"SGLang's prefill lines count {counted:,} prompts against {requests:,.0f} requests finished"
            f" and a mean of {seen:,.0f} tokens (chunked or missing lines): not used; "
        )
    else:
        why = ""
    mu = math.log(mean) - LOGNORMAL_SIGMA**2 / 2
    drawn = np.clip(np.rint(rng.lognormal(mu, LOGNORMAL_SIGMA, n)), 1, top).astype(np.int32)
    return drawn, [
        f"{signal}: {NO_HISTOGRAM}; {why}drawn lognormal (sigma {LOGNORMAL_SIGMA:g}, assumed) with the "
        f"mean of {said}: the spread is not measured, so the replay's tail may miss the incident's"
    ]


def _prompts_from_lines(logs: pl.DataFrame, window: Window) -> np.ndarray | None:
    """One prompt length per request SGLang's prefill lines in ``window`` name, or None when there are
    no such lines. A batch of one request is that prompt (its new and cached tokens); a batch of k
    holds k prompts the line does not tell apart: k - 1 of them are taken at the median one-request
    batch (the usual prompt) and the rest is the last one's, so a long prompt batched with short ones
    stays long (an even split would turn one 20,000-token prompt and three short ones into four of
    5,000 and lose the tail that blocks the decodes)."""
    batches = prefill_batches(logs).filter(
        pl.col("ts").is_between(window.start, window.end, closed="left")
        & pl.col("new_seq").is_between(1, MAX_BATCH_SEQS)
        & pl.col("cached_tokens").is_not_null()
    )
    if not batches.height:
        return None
    total = (batches["new_tokens"] + batches["cached_tokens"]).to_numpy().astype(np.float64)
    k = batches["new_seq"].to_numpy()
    usual = float(np.median(total[k == 1])) if (k == 1).any() else float(np.median(total / k))
    others = np.minimum(usual, total / k)  # never more than an even share: the last one keeps the most
    last = total - (k - 1) * others
    return np.concatenate([last, np.repeat(others, k - 1)])
