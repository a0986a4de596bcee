"""What every engine telling of the incident simulator shares (:mod:`perfkit.lab.sim.tellings` has the
engines): the hooks the :class:`~perfkit.lab.sim.exporters.Recorder` calls, histograms and counters kept
per label set, the families an engine has touched since its (re)start, bucket bounds printed as Rust's
``f64`` Display and prometheus-cpp print them, and the bucket ladders and fixed costs the engines share.
A telling draws no random numbers: the same seed gives the same physics in every telling."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from perfkit.lab.sim.series import Histogram

Recorder = Any  # perfkit.lab.sim.exporters.Recorder, which imports the tellings (no import circles)


def le_text(bound: float) -> str:
    """A bucket bound as Rust's ``f64`` Display and prometheus-cpp print it: the shortest decimal that
    reads back, no exponent, no ``.0`` on a whole number (``le="0.0022"``, ``le="130000"``, ``le="10"``)."""
    b = float(bound)
    if b == int(b) and abs(b) < 1e15:
        return str(int(b))
    text = repr(b)
    return text if "e" not in text else f"{b:.20f}".rstrip("0")


def rust_round_sig(value: float, figures: int) -> float:
    """Dynamo's ``round_to_sig_figs`` (``metrics.rs``): half away from zero, as Rust's ``f64::round``."""
    if value == 0.0:
        return 0.0
    magnitude = math.floor(math.log10(abs(value)))
    scale = 10.0 ** (figures - 1.0 - magnitude)
    x = value * scale
    return math.copysign(math.floor(abs(x) + 0.5), x) / scale


def dynamo_log_buckets(lo: float, hi: float, count: int) -> list[float]:
    """Dynamo's ``generate_log_buckets``: 0, then ``count - 1`` log-spaced values up to ``hi`` (``lo``
    itself never a bucket), each rounded to two significant figures, consecutive duplicates dropped."""
    out = [0.0]
    for i in range(1, count):
        value = math.exp(math.log(lo) + (math.log(hi) - math.log(lo)) * i / (count - 1))
        out.append(rust_round_sig(value, 2))
    return [b for k, b in enumerate(out) if k == 0 or b != out[k - 1]]


def tgi_duration_buckets() -> list[float]:
    """TGI's buckets for every metric whose name ends in ``duration`` (``server.rs``)."""
    out, value = [], 0.0001
    for _ in range(35):
        value *= 1.5
        out.append(value)
    return out


def linear_buckets(top: int) -> list[float]:
    """TGI's 100 token-count buckets, ``(top as f64 / 100.0) * (x + 1) as f64`` (``server.rs``)."""
    return [(top / 100.0) * (x + 1) for x in range(100)]


# the prometheus default buckets a Dynamo worker's dynamo_component_request_duration_seconds shows
# (docs/observability/metrics_examples/vllm.log)
COMPONENT_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0]
TRITON_TOKEN_BUCKETS = [10.0, 50.0, 100.0, 500.0, 1000.0]  # custom_metrics_reporter.cc


def validation_s(prompt: int) -> float:
    """TGI's validation (tokenising the prompt before it is queued): a fixed cost the engine never sees."""
    return 0.0004 + 2.0e-7 * prompt


def frontend_in_s(prompt: int) -> float:
    """Dynamo's frontend before the worker has the request (tokenising, routing)."""
    return 0.0015 + 2.0e-7 * prompt


FRONTEND_OUT_S = 0.0004  # the frontend detokenising and sending the last chunk


@dataclass(frozen=True, slots=True)
class Done:
    """A finished request as a telling sees it: its tokens and its engine times (seconds of the run)."""

    prompt: int
    generated: int
    arrival: float
    scheduled: float
    first: float
    last: float


class Telling:
    """One engine's exporter and log over the simulated engine (subclassed per dialect)."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec
        self.hist: dict[tuple[str, tuple[tuple[str, str], ...]], Histogram] = {}
        self.counters: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.touched: set[str] = set()
        self.prompts: dict[int, int] = {}
        self.arrived_n = self.first_n = self.finished_n = 0
        self.started_at = 0.0

    # -- what every telling keeps --------------------------------------------------------------------

    def observe(self, name: str, bounds: Sequence[float], values: Any, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        h = self.hist.get(key)
        if h is None:
            h = self.hist[key] = Histogram(list(bounds))
        h.observe(values)
        self.touched.add(name)

    def add(self, name: str, n: float = 1, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        self.counters[key] = self.counters.get(key, 0.0) + n
        self.touched.add(name)

    def reset(self, at: float) -> None:
        """The process restarted: every series starts again from nothing (requests in flight stay)."""
        self.hist.clear()
        self.counters.clear()
        self.touched.clear()
        self.started_at = at

    def put(self, name: str, kind: str, help_: str, labels: dict[str, str], ts: float, value: Any) -> None:
        self.rec.out.put(name, kind, help_, name, labels, ts, value)

    def write_histograms(self, ts: float, helps: dict[str, str], base: dict[str, str]) -> None:
        for (name, labels), h in sorted(self.hist.items()):
            own = {**base, **dict(labels)}
            cum = np.cumsum(h.counts)
            help_ = helps.get(name, "")
            for bound, c in zip([*h.bounds, math.inf], cum, strict=True):
                le = "+Inf" if math.isinf(bound) else le_text(bound)
                self.rec.out.put(name, "histogram", help_, f"{name}_bucket", {**own, "le": le}, ts, int(c))
            self.rec.out.put(name, "histogram", help_, f"{name}_sum", own, ts, round(h.total, 6))
            self.rec.out.put(name, "histogram", help_, f"{name}_count", own, ts, int(cum[-1]))

    def write_counters(self, ts: float, helps: dict[str, str], base: dict[str, str]) -> None:
        for (name, labels), value in sorted(self.counters.items()):
            self.put(name, "counter", helps.get(name, ""), {**base, **dict(labels)}, ts, int(round(value)))

    def stamp(self, t: float) -> str:
        """Rust tracing-subscriber's UTC timestamp (TGI, Dynamo): ``2026-11-12T01:00:00.213000Z``."""
        return self.rec.spec.at(t).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    def log(self, t: float, line: str) -> None:
        self.rec.logs.append((t, line))

    # -- engine callbacks (default: nothing) ----------------------------------------------------------

    def arrived(self, r: int, t: float, prompt: int) -> None:
        self.prompts[r] = prompt
        self.arrived_n += 1

    def first_token(self, r: int, ttft: float) -> None:
        self.first_n += 1

    def itl(self, values: np.ndarray, emitted: Any) -> None:
        pass

    def prefix_hit(self, hit: int) -> None:
        pass

    def finished(
        self,
        r: int,
        prompt: int,
        generated: int,
        arrival: float,
        scheduled: float,
        first: float,
        last: float,
    ) -> None:
        """The bookkeeping every telling shares, then the engine's own series (:meth:`done`)."""
        self.finished_n += 1
        self.prompts.pop(r, None)
        self.done(Done(prompt, generated, arrival, scheduled, first, last))

    def done(self, req: Done) -> None:
        pass

    def step(self, start: float, end: float, prefill_tokens: int, prefill_seqs: int, n_decode: int) -> None:
        pass

    def scrape(self, t: float) -> None:
        pass

    def startup(self, t: float, version: str, cfg: Any) -> None:
        pass

    def oom(self, t: float, error: str) -> None:
        """The engine's lines when a worker dies of CUDA out-of-memory (default: PyTorch's traceback)."""
        for i, line in enumerate(("Traceback (most recent call last):", error)):
            self.log(t - 0.1 + i * 1e-4, line)
