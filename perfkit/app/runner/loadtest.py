"""A load test from options: the plan they describe (:mod:`perfkit.loadgen.shapes`; a replay of a log
or of an embedded incident), the rates of a sweep, and the calibration against a ``perfkit lab serve``
started for it. ``perfkit bench`` (:mod:`perfkit.app.cli.loadgen`) and the baseline runbook
(:mod:`perfkit.app.runbooks.baseline`) both build their runs here.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from perfkit.errors import ConfigError

DEFAULT_REQUESTS = 200


def build_plan(
    *,
    concurrency: int | None,
    rate: float | None,
    burst: bool,
    arrival: str,
    burstiness: float,
    num_requests: int | None,
    prompt_tokens: int,
    output_tokens: int,
    replay: str | None,
    time_scale: float,
    duration: float | None,
    seed: int,
):
    """The plan the options describe (:mod:`perfkit.loadgen.shapes`)."""
    from perfkit.loadgen import shapes

    n = num_requests or DEFAULT_REQUESTS  # a replay without a count: the whole trace
    if replay:
        from perfkit.app.runner.embedded import replay_source

        path = replay_source(replay)
        if path.is_dir():
            plan = shapes.replay_bundle(path, time_scale=time_scale, seed=seed, max_requests=num_requests)
        else:
            plan = shapes.replay_log(path, time_scale=time_scale, max_requests=num_requests)
    elif burst:
        plan = shapes.burst_plan(n, prompt_tokens=prompt_tokens, output_tokens=output_tokens)
    elif rate is not None:
        plan = shapes.rate_plan(
            n,
            rate,
            seed,
            arrival=arrival,
            burstiness=burstiness,
            prompt_tokens=prompt_tokens,
            output_tokens=output_tokens,
        )
    elif concurrency is not None:
        plan = shapes.concurrency_plan(n, prompt_tokens, output_tokens, concurrency)
    else:
        raise ConfigError("give the load: --concurrency N, --rate R, --burst, or --replay FILE|BUNDLE")
    if duration:
        plan = shapes.with_duration(plan, duration)
    return plan


def sweep_rates_option(text: str, steps: int) -> list[float]:
    """``--sweep LOW:HIGH`` with ``--sweep-steps`` as the rates to run."""
    from perfkit.loadgen.sweep import sweep_rates

    low, sep, high = text.partition(":")
    try:
        return sweep_rates(float(low), float(high), steps) if sep else []
    except ValueError:
        pass
    raise ConfigError(f"--sweep {text[:40]!r}: expected LOW:HIGH in requests per second, e.g. 1:32")


def calibration_against_lab(opts, cancel=None) -> dict[str, Any]:
    """The client's overhead at ``opts``' load, against a `perfkit lab serve` started for it."""
    from perfkit.lab.serve import serving
    from perfkit.loadgen.bench import CALIBRATION_TRUTH, calibrate

    with (
        tempfile.TemporaryDirectory(prefix="perfkit-calibration-") as tmp,
        serving(
            ttft_ms=CALIBRATION_TRUTH["ttft_ms"], itl_ms=CALIBRATION_TRUTH["itl_ms"], model="perfkit-lab"
        ) as url,
    ):
        return calibrate(opts, url, Path(tmp), cancel)
