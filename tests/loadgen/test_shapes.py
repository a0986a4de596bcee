"""Load shapes: synthetic plans, request-log replay and incident-bundle replay.

The Mooncake sample (tests/loadgen/data/replay_mooncake.jsonl) is the start of a published trace;
see tests/loadgen/data/replay_SOURCES.md. Bundle replays are checked against what the engine
computes from the bundle and, for a simulated incident, against the simulator's own arrivals.
"""

from __future__ import annotations

import json
import math
import os
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest

from perfkit.core.frames import Window
from perfkit.engine import signals as S
from perfkit.engine.local import LocalEngine
from perfkit.errors import BundleError, ConfigError
from perfkit.loadgen import shapes
from perfkit.loadgen.shapes import (
    Plan,
    burst_plan,
    concurrency_plan,
    rate_plan,
    replay_bundle,
    replay_log,
    with_duration,
)
from perfkit.sources.bundle import load_bundle

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "data" / "scenarios" / "release-regression"


# -- synthetic plans ---------------------------------------------------------------------------


def test_concurrency_plan_is_closed_loop():
    plan = concurrency_plan(50, prompt_tokens=256, output_tokens=64, concurrency=8)
    assert len(plan) == 50 and not plan.at_s.any()
    assert set(plan.prompt_tokens.tolist()) == {256} and set(plan.output_tokens.tolist()) == {64}
    load = plan.describe()
    assert load["shape"] == "concurrency" and load["concurrency"] == 8
    assert load["rate"] is None and load["requested_rate"] is None and load["arrival"] is None
    assert (load["prompt_tokens"], load["output_tokens"], load["num_requests"]) == (256, 64, 50)


def test_burst_plan_sends_everything_at_once():
    plan = burst_plan(7, prompt_tokens=10, output_tokens=3)
    assert plan.at_s.tolist() == [0.0] * 7 and plan.describe()["shape"] == "burst"


def test_constant_rate_spaces_requests_evenly():
    plan = rate_plan(11, rate=4.0, seed=0, arrival="constant")
    assert np.allclose(np.diff(plan.at_s), 0.25) and plan.at_s[0] == 0.0
    assert plan.describe()["burstiness"] is None and plan.describe()["requested_rate"] == 4.0


def test_poisson_rate_is_seeded_and_offers_exactly_the_rate():
    a = rate_plan(10_001, rate=20.0, seed=7)
    b = rate_plan(10_001, rate=20.0, seed=7)
    c = rate_plan(10_001, rate=20.0, seed=8)
    assert np.array_equal(a.at_s, b.at_s) and not np.array_equal(a.at_s, c.at_s)
    gaps = np.diff(a.at_s)
    assert a.at_s[-1] == pytest.approx(10_000 / 20.0)  # rescaled like vLLM: mean gap exactly 1/rate
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.08)  # exponential: CV 1
    assert (gaps >= 0).all()
    load = a.describe()
    assert (load["arrival"], load["burstiness"], load["rate"]) == ("poisson", 1.0, 20.0)


@pytest.mark.parametrize("shape", [0.25, 0.5, 2.0, 4.0])
def test_gamma_burstiness_sets_the_spread_of_gaps(shape):
    """vLLM's definition: Gamma(shape=burstiness, scale=1/(rate*burstiness)), so the coefficient of
    variation of the gaps is 1/sqrt(burstiness) (measured spread over seeds: 1.5 % at most)."""
    plan = rate_plan(10_001, rate=20.0, seed=3, arrival="gamma", burstiness=shape)
    gaps = np.diff(plan.at_s)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(shape), rel=0.08)
    assert gaps.mean() == pytest.approx(1 / 20.0, rel=1e-9)
    assert plan.describe()["burstiness"] == shape


def test_rate_plan_can_cap_concurrency():
    assert rate_plan(5, rate=1.0, seed=0, concurrency=2).describe()["concurrency"] == 2


@pytest.mark.parametrize(
    "kwargs, phrase",
    [
        ({"n_requests": 0}, "number of requests"),
        ({"n_requests": True}, "number of requests"),
        ({"rate": 0.0}, "rate"),
        ({"rate": float("nan")}, "rate"),
        ({"rate": "fast"}, "rate"),
        ({"arrival": "weibull"}, "arrival process"),
        ({"arrival": "gamma", "burstiness": -1.0}, "burstiness"),
        ({"prompt_tokens": 0}, "prompt tokens"),
        ({"output_tokens": 2**30}, "output tokens"),
        ({"concurrency": 0}, "concurrency"),
    ],
)
def test_rate_plan_refuses_bad_arguments(kwargs, phrase):
    args = {"n_requests": 10, "rate": 5.0, "seed": 0, **kwargs}
    with pytest.raises(ConfigError, match=phrase):
        rate_plan(**args)


def test_with_duration_keeps_the_arrivals_before_it():
    plan = rate_plan(100, rate=10.0, seed=0, arrival="constant")
    cut = with_duration(plan, 5.0)
    assert len(cut) == 50 and cut.at_s[-1] < 5.0
    assert len(with_duration(concurrency_plan(30, 8, 8, 4), 1.0)) == 30  # closed loop: the client stops it
    late = Plan(np.array([2.0]), np.array([1]), np.array([1]), "rate")
    with pytest.raises(ConfigError, match="due within"):
        with_duration(late, 1.0)


def test_a_plan_is_checked_and_read_only():
    plan = burst_plan(3)
    with pytest.raises(ValueError):
        plan.at_s[0] = 5.0
    with pytest.raises(ConfigError, match="non-decreasing"):
        Plan(np.array([1.0, 0.5]), np.array([1, 1]), np.array([1, 1]), "rate")
    with pytest.raises(ConfigError, match="prompt_tokens"):
        Plan(np.array([0.0]), np.array([0]), np.array([1]), "rate")
    with pytest.raises(ConfigError, match="whole numbers"):
        Plan(np.array([0.0]), np.array([1.5]), np.array([1]), "rate")
    with pytest.raises(ConfigError, match="load shape"):
        Plan(np.array([0.0]), np.array([1]), np.array([1]), "ramp")
    big = np.array([2**31 + 5])  # would wrap to a small int32 if cast before the check
    with pytest.raises(ConfigError, match="prompt_tokens"):
        Plan(np.array([0.0]), big, np.array([1]), "rate")


# -- request logs ------------------------------------------------------------------------------


def test_replay_of_epoch_milliseconds_sorts_and_takes_every_alias():
    plan = replay_log(DATA / "replay_epoch.jsonl")
    assert plan.at_s.tolist() == [0.0, 1.5, 3.125, 3.125, 5.25]
    assert plan.prompt_tokens.tolist() == [1520, 64, 2048, 300, 812]
    assert plan.output_tokens.tolist() == [240, 12, 512, 30, 96]
    load = plan.describe()
    assert load["shape"] == "replay" and load["arrival"] == "trace" and load["prompt_tokens"] is None
    assert load["replay"] == {
        "source": "replay_epoch.jsonl",
        "format": "jsonl",
        "requests": 5,
        "time_scale": 1.0,
        "time_unit": "epoch_ms",
        "skipped": 0,
    }
    assert load["requested_rate"] == pytest.approx(4 / 5.25)


def test_replay_of_a_csv_with_iso_times():
    plan = replay_log(DATA / "replay_iso.csv")
    # 13:50:00Z, 14:50:01+01:00 (= 13:50:01Z), 13:50:02.5Z, 13:50:07.25 (no zone: UTC)
    assert plan.at_s.tolist() == [0.0, 1.0, 2.5, 7.25]
    assert plan.prompt_tokens.tolist() == [1200, 95, 410, 3000]
    assert plan.output_tokens.tolist() == [256, 17, 88, 640]
    assert plan.replay["format"] == "csv" and plan.replay["time_unit"] == "iso"


def test_replay_of_a_mooncake_trace():
    rows = [json.loads(line) for line in (DATA / "replay_mooncake.jsonl").read_text().splitlines()]
    plan = replay_log(DATA / "replay_mooncake.jsonl", time_scale=2.0)
    assert plan.replay["format"] == "mooncake" and len(plan) == len(rows) == 40
    times = np.array([r["timestamp"] for r in rows], dtype=float) / 1000.0  # Mooncake: milliseconds
    assert np.allclose(plan.at_s, (times - times.min()) / 2.0)  # time_scale 2: twice as fast
    assert plan.prompt_tokens.tolist() == [r["input_length"] for r in rows]  # already in time order
    assert plan.output_tokens.tolist() == [r["output_length"] for r in rows]


def test_time_scale_and_max_requests():
    full = replay_log(DATA / "replay_mooncake.jsonl")
    slow = replay_log(DATA / "replay_mooncake.jsonl", time_scale=0.5, max_requests=12)
    assert len(slow) == 12 and np.allclose(slow.at_s, full.at_s[:12] * 2)


def _log(tmp_path: Path, lines: list[str], name: str = "log.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


GOOD = '{"arrival_s": 0.5, "prompt_tokens": 10, "output_tokens": 5}'


@pytest.mark.parametrize(
    "bad, phrase",
    [
        ("{not json", "not JSON"),
        ("[1, 2, 3]", "want a JSON object"),
        ('{"prompt_tokens": 10, "output_tokens": 5}', "no arrival_s or timestamp column"),
        ('{"arrival_s": 1, "output_tokens": 5}', "no prompt_tokens or input_tokens"),
        ('{"arrival_s": 1, "prompt_tokens": 10}', "no output_tokens or completion_tokens"),
        ('{"arrival_s": 1, "prompt_tokens": -4, "output_tokens": 5}', "prompt_tokens is negative"),
        ('{"arrival_s": 1, "prompt_tokens": 10, "output_tokens": 2.5}', "output_tokens is fractional"),
        ('{"arrival_s": 1, "prompt_tokens": "ten", "output_tokens": 5}', "is not a number"),
        ('{"arrival_s": 1, "prompt_tokens": 10, "output_tokens": 0}', "output_tokens is 0"),
        ('{"arrival_s": 1, "prompt_tokens": 99999999999, "output_tokens": 5}', "over the limit"),
        ('{"arrival_s": "NaN", "prompt_tokens": 10, "output_tokens": 5}', "not a finite number"),
        ('{"arrival_s": 1, "prompt_tokens": true, "output_tokens": 5}', "not a number"),
        ('{"timestamp": 1000, "prompt_tokens": 10, "output_tokens": 5}', "unlike the first row"),
        ('{"arrival_s": 9000000, "prompt_tokens": 10, "output_tokens": 5}', "days from the first row"),
    ],
)
def test_a_broken_line_names_file_and_line(tmp_path, bad, phrase):
    path = _log(tmp_path, [GOOD, GOOD, bad, GOOD])
    with pytest.raises(BundleError, match=phrase) as err:
        replay_log(path)
    assert str(err.value).startswith(f"{path}:3: ") and "\n" not in str(err.value)
    assert (err.value.path, err.value.line) == (str(path), 3)


def test_broken_lines_can_be_skipped_and_are_counted(tmp_path):
    path = _log(
        tmp_path, [GOOD, "{oops", GOOD, "", '{"arrival_s": 2, "prompt_tokens": 0, "output_tokens": 1}', GOOD]
    )
    plan = replay_log(path, max_bad_lines=2)
    assert len(plan) == 3 and plan.replay["skipped"] == 2
    assert plan.replay["skipped_examples"][0].startswith("log.jsonl:2: not JSON")
    with pytest.raises(BundleError, match=":5: prompt_tokens is 0"):
        replay_log(path, max_bad_lines=1)  # the second bad line is one too many


def test_broken_csv_lines(tmp_path):
    path = tmp_path / "log.csv"
    path.write_bytes(b"arrival_s,prompt_tokens,output_tokens\n0,10,5\n1,10\n2,\xff\xfe,5\n")
    with pytest.raises(BundleError, match=r"log\.csv:3: 2 fields, the header has 3"):
        replay_log(path)
    with pytest.raises(BundleError, match=r"log\.csv:4: not UTF-8"):
        replay_log(path, max_bad_lines=1)


def test_a_timestamp_unit_follows_the_first_row(tmp_path):
    seconds = _log(
        tmp_path,
        [
            '{"timestamp": 1795009800, "input_length": 5, "output_length": 1}',
            '{"timestamp": 1795009860.5, "input_length": 5, "output_length": 1}',
        ],
        "s.jsonl",
    )
    plan = replay_log(seconds)
    assert plan.at_s.tolist() == [0.0, 60.5] and plan.replay["time_unit"] == "epoch_s"
    assert plan.replay["format"] == "jsonl"  # epoch times: not a Mooncake trace


def test_oversized_and_odd_logs_are_refused(tmp_path, monkeypatch):
    path = _log(tmp_path, [GOOD] * 50)
    monkeypatch.setattr(shapes, "MAX_REPLAY_BYTES", 100)
    with pytest.raises(BundleError, match="request log refused: file is .* over the 100 bytes limit"):
        replay_log(path)
    monkeypatch.undo()
    monkeypatch.setattr(shapes, "MAX_LINE_BYTES", 80)
    long = '{"arrival_s": 1, "prompt_tokens": 10, "output_tokens": 5, "pad": "' + "x" * 300 + '"}'
    with pytest.raises(BundleError, match=r":2: line is over 80 bytes"):
        replay_log(_log(tmp_path, [GOOD, long, GOOD], "long.jsonl"))
    skipped = replay_log(_log(tmp_path, [GOOD, long, GOOD, GOOD], "long2.jsonl"), max_bad_lines=1)
    assert len(skipped) == 3 and "long2.jsonl:2:" in skipped.replay["skipped_examples"][0]
    monkeypatch.undo()
    with pytest.raises(BundleError, match="unknown request log format"):
        replay_log(_log(tmp_path, [GOOD], "log.txt"))
    with pytest.raises(BundleError, match="cannot read request log"):
        replay_log(tmp_path / "missing.jsonl")
    with pytest.raises(BundleError, match="holds no requests"):
        replay_log(_log(tmp_path, [""], "empty.jsonl"))
    os.mkfifo(tmp_path / "fifo.jsonl")
    with pytest.raises(BundleError, match="not a regular file"):
        replay_log(tmp_path / "fifo.jsonl")


def test_a_log_over_the_request_cap_asks_for_max_requests(tmp_path, monkeypatch):
    path = _log(tmp_path, [GOOD] * 5)
    monkeypatch.setattr(shapes, "MAX_REPLAY_REQUESTS", 3)
    with pytest.raises(BundleError, match=":4: over 3 requests; pass max_requests"):
        replay_log(path)
    assert len(replay_log(path, max_requests=4)) == 4


# -- incident bundles --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def demo():
    bundle = load_bundle(DEMO)
    return LocalEngine(bundle.store), bundle.incident.window


def test_demo_bundle_replay_follows_the_engines_request_rate(demo):
    engine, window = demo
    plan = replay_bundle(DEMO, seed=11)
    served = S.window_count(engine, "e2e", window)  # requests finished in the window, by the engine
    assert served is not None and served > 5000
    # Poisson sampling error is sqrt(N); 4 sigma, plus the backlog at the window's edges (tens)
    assert abs(len(plan) - served) < 4 * math.sqrt(served) + 50
    # and its shape: every 5 minutes of the replay against the engine's count for those minutes
    for start in range(0, int(window.seconds), 300):
        part = Window(window.start + timedelta(seconds=start), window.start + timedelta(seconds=start + 300))
        expected = S.window_count(engine, "e2e", part)
        got = int(((plan.at_s >= start) & (plan.at_s < start + 300)).sum())
        assert abs(got - expected) < 4 * math.sqrt(expected) + 50, (start, got, expected)
    load = plan.describe()
    assert load["shape"] == "replay" and load["replay"]["source"] == "release-regression"
    assert load["replay"]["window"] == window.as_dict()


def test_demo_bundle_replay_draws_lengths_from_the_histograms(demo):
    engine, window = demo
    plan = replay_bundle(DEMO, seed=11)
    for signal, lengths in (("prompt_tokens", plan.prompt_tokens), ("generation_tokens", plan.output_tokens)):
        total = S.window_count(engine, signal, window)
        bounds = (10, 100, 1000, 5000)
        counts = [S.window_count(engine, signal, window, le=b) for b in bounds]
        assert lengths.min() >= 1
        # the lowest and highest non-empty buckets bound every length drawn
        lowest = max([0, *[b for b, c in zip(bounds, counts, strict=True) if c == 0]])
        assert lengths.min() > lowest
        top = next((b for b, c in zip(bounds, counts, strict=True) if c >= total - 1e-6), None)
        if top is not None:
            assert lengths.max() <= top
        for b, c in zip(bounds, counts, strict=True):
            share, n = c / total, len(lengths)
            sigma = math.sqrt(max(share * (1 - share), 1e-4) / n)
            assert abs((lengths <= b).mean() - share) < 5 * sigma + 1e-3, (signal, b)


def test_bundle_replay_is_seeded_and_max_requests_keeps_its_start(demo):
    a = replay_bundle(DEMO, seed=5)
    b = replay_bundle(DEMO, seed=5)
    c = replay_bundle(DEMO, seed=6)
    assert np.array_equal(a.at_s, b.at_s) and np.array_equal(a.prompt_tokens, b.prompt_tokens)
    assert not np.array_equal(a.at_s[:100], c.at_s[:100])
    first = replay_bundle(DEMO, seed=5, max_requests=300, time_scale=4.0)
    assert len(first) == 300 and first.replay["requests"] == 300
    assert np.allclose(first.at_s * 4.0, a.at_s[:300])
    assert np.array_equal(first.prompt_tokens, a.prompt_tokens[:300])
    assert np.array_equal(first.output_tokens, a.output_tokens[:300])


def _without(bundle: Path, family: str) -> None:
    path = bundle / "metrics" / "vllm.om"
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    path.write_text("".join(ln for ln in lines if family not in ln), encoding="utf-8")


def test_bundle_without_request_counters_names_them(scenario_copy):
    bundle = scenario_copy("release-regression")
    _without(bundle, "vllm:e2e_request_latency_seconds")
    plan = replay_bundle(bundle, seed=1)  # falls back to vllm:request_success_total
    assert "vllm:request_success_total" in plan.replay["notes"][0]
    _without(bundle, "vllm:request_success")
    with pytest.raises(BundleError, match="cannot tell the request rate"):
        replay_bundle(bundle)


def test_bundle_replay_refuses_bad_arguments():
    with pytest.raises(ConfigError, match="time scale"):
        replay_bundle(DEMO, time_scale=0)
    with pytest.raises(ConfigError, match="max_requests"):
        replay_bundle(DEMO, max_requests=0)
    with pytest.raises(BundleError, match="bundle folder not found"):
        replay_bundle(DEMO / "nope")


@pytest.fixture(scope="module")
def surge(tmp_path_factory):
    """A simulated traffic surge that outruns the server (1.55x for most of the window): generated
    by the lab, with the simulator's own record of when every request arrived and finished."""
    from perfkit.lab.sim.bundle import compress, generate
    from perfkit.lab.sim.catalog import SCENARIOS
    from perfkit.lab.sim.engine import Engine
    from perfkit.lab.sim.exporters import Recorder

    spec = compress(SCENARIOS["queueing-traffic-surge"](), 2400)
    out = tmp_path_factory.mktemp("surge") / "bundle"
    generate(spec, out)
    rng = np.random.default_rng(spec.seed)
    recorder = Recorder(spec, rng)
    Engine(spec, recorder, rng).run()
    records = np.array([r[:5] for r in recorder.records], dtype=float)
    return out, spec, records[:, 0], records[:, 0] + records[:, 4]


@pytest.mark.slow
def test_bundle_replay_recovers_arrivals_when_the_server_fell_behind(surge):
    """Servers count requests when they finish; during a surge the queue grows, so finished
    requests undercount the traffic. The replay adds the backlog's growth back."""
    bundle, spec, arrived, finished = surge
    (w0, w1), phase = spec.window, spec.phases[0]
    true_arrivals = int(((arrived >= w0) & (arrived < w1)).sum())
    true_finished = int(((finished >= w0) & (finished < w1)).sum())
    assert true_finished < 0.95 * true_arrivals  # the surge did outrun the server
    plan = replay_bundle(bundle, seed=2)
    sigma = math.sqrt(true_arrivals)
    assert abs(len(plan) - true_arrivals) < 4 * sigma + 30
    assert abs(len(plan) - true_finished) > 4 * sigma  # finished requests alone would be wrong
    # before, during and after the surge, against the simulator's arrivals; minute bins blur an
    # edge by up to a minute of the surge's extra traffic
    blur = (phase.rate_mult - 1) * spec.base_rps * 60
    edges = [0, phase.start_s - w0, phase.start_s - w0 + 60, phase.end_s - w0 - 60, phase.end_s - w0, w1 - w0]
    for a, b in zip(edges[::2], edges[1::2], strict=True):
        truth = int(((arrived >= w0 + a) & (arrived < w0 + b)).sum())
        got = int(((plan.at_s >= a) & (plan.at_s < b)).sum())
        assert abs(got - truth) < 4 * math.sqrt(truth) + blur, (a, b, got, truth)
