"""The serving simulator's core: its own CPU cost per engine step, and its calibration against vLLM.

1. **Speed** (issue 11 target: scheduling overhead under 1 ms per engine step at 200 running
   sequences): 200 requests decode together on Llama-3.1-8B / H100; the script times
   ``EngineCore.step`` over many steps and prints steps/s, microseconds per step and the ratio to the
   1 ms budget (also with prefix caching on, and with prompts arriving while 200 decode).
2. **Calibration** (``--calibrate``): the workloads of vLLM's v0.6.0 performance post
   (https://blog.vllm.ai/2024/09/05/perf-update.html: Llama 3 8B on 1x H100 and 70B on 4x H100,
   500 ShareGPT prompts, a prefill-heavy and a decode-heavy set) run through the simulator with the
   engine settings vLLM 0.6.0 had, next to the numbers read off the post's figures. docs/simulator.md
   carries the table this prints, and the seed's §5.3 case (TTFT p50/p95 with and without chunked
   prefill).

    .venv/bin/python benchmarks/servesim_bench.py [--calibrate]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfkit.lab.servesim.config import SimConfig, config_from_dict  # noqa: E402
from perfkit.lab.servesim.core import EngineCore  # noqa: E402

BUDGET_S = 1e-3  # the issue's target: < 1 ms of scheduling overhead per engine step


# -- speed -------------------------------------------------------------------------------------


def time_steps(
    cfg: SimConfig, streams: int = 200, steps: int = 3000, arrivals_per_step: float = 0.0
) -> float:
    """Seconds of CPU per ``EngineCore.step`` with ``streams`` sequences decoding (after their prefill)."""
    core = EngineCore(cfg, seed=1)
    for i in range(streams):
        core.add(f"r{i}", 500, 7000, 0.0, prefix_key=f"sys{i % 8}", prefix_tokens=256)
    now = 0.0
    while any(r.outputs == 0 for r in core.running) or core.waiting:  # warm up: every prompt prefilled
        now += core.step(now).duration_s
    extra = 0
    acc = 0.0
    t0 = time.process_time()
    for _ in range(steps):
        acc += arrivals_per_step
        while acc >= 1.0:  # short requests arriving while the 200 decode
            acc -= 1.0
            extra += 1
            core.add(f"x{extra}", 300, 20, now, prefix_key="sys0", prefix_tokens=256)
        now += core.step(now).duration_s
    return (time.process_time() - t0) / steps


def speed() -> None:
    base = dict(model="llama-3.1-8b", gpu="h100-sxm", max_num_seqs=256)
    cases = [
        ("200 decoding, chunked prefill", config_from_dict(base, "bench"), 0.0),
        (
            "200 decoding, prefix caching on",
            config_from_dict({**base, "enable_prefix_caching": True}, "bench"),
            0.0,
        ),
        (
            "200 decoding + arrivals, caching",
            config_from_dict({**base, "enable_prefix_caching": True}, "bench"),
            0.5,
        ),
        (
            "200 decoding, chunked prefill off",
            config_from_dict({**base, "enable_chunked_prefill": False}, "bench"),
            0.0,
        ),
    ]
    print(f"{'case':36} {'steps/s':>9} {'us/step':>9} {'x of 1 ms budget':>17}")
    for name, cfg, rate in cases:
        per = min(time_steps(cfg, arrivals_per_step=rate) for _ in range(3))
        print(f"{name:36} {1 / per:9.0f} {per * 1e6:9.1f} {per / BUDGET_S:17.3f}")


# -- calibration -------------------------------------------------------------------------------


@dataclass
class Run:
    throughput_rps: float
    output_tps: float
    mean_ttft_ms: float
    mean_tpot_ms: float
    preemptions: int


def replay(
    cfg: SimConfig, arrivals: np.ndarray, prompts: np.ndarray, outputs: np.ndarray, seed: int = 0
) -> Run:
    """Run requests (arrival s, prompt and output tokens) through the core; vLLM benchmark_serving's numbers."""
    core = EngineCore(cfg, seed=seed)
    order = np.argsort(arrivals, kind="stable")
    now, k, n = 0.0, 0, len(order)
    ttft, tpot, last = [], [], 0.0
    while k < n or core.busy:
        while k < n and arrivals[order[k]] <= now:
            i = order[k]
            core.add(str(i), int(prompts[i]), int(outputs[i]), float(arrivals[i]))
            k += 1
        if not core.busy:
            now = float(arrivals[order[k]])
            continue
        res = core.step(now)
        now += res.duration_s if res.duration_s > 0 else 1e-3
        for f in res.finished:
            ttft.append(f.first_token - f.arrival)
            if f.output_tokens > 1:
                tpot.append((f.last_token - f.first_token) / (f.output_tokens - 1))
            last = max(last, f.last_token)
    start = float(arrivals.min())
    return Run(
        throughput_rps=n / (last - start),
        output_tps=float(outputs.sum()) / (last - start),
        mean_ttft_ms=1e3 * statistics.fmean(ttft),
        mean_tpot_ms=1e3 * statistics.fmean(tpot),
        preemptions=core.totals["preemptions"],
    )


def sharegpt_like(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Prompt and output lengths with ShareGPT's means in the post (202 in, 179 out): lognormal, sigma 1,
    clipped to [4, 1024] as benchmark_serving filters ShareGPT, then scaled to those means."""
    out = []
    for mean in (202.0, 179.0):
        x = np.clip(rng.lognormal(np.log(mean) - 0.5, 1.0, n), 4, 1024)
        out.append(np.clip(np.rint(x * mean / x.mean()), 4, 1024).astype(np.int64))
    return out[0], out[1]


# vLLM 0.6.0's defaults for these runs: chunked prefill off (models with <= 32K context), 256 sequences,
# a token budget of max_model_len, 0.9 of the memory, Llama 3's 8,192-token context.
V060 = dict(enable_chunked_prefill=False, max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=8192)

# Read off the post's figures (assets/figures/perf-v060/H100_8B.png, H100_70B.png): bar tops and line
# centres against the grid lines, +-2 % for the bars, +-0.5 ms for the TPOT lines.
PUBLISHED = {
    ("8B 1xH100", "ShareGPT, QPS inf", "req/s"): 36.9,
    ("8B 1xH100", "decode-heavy, QPS inf", "req/s"): 31.0,
    ("8B 1xH100", "prefill-heavy, QPS inf", "req/s"): 59.0,
    ("8B 1xH100", "ShareGPT, QPS 2", "TPOT ms"): 8.6,
    ("8B 1xH100", "ShareGPT, QPS 32", "TPOT ms"): 14.7,
    ("70B 4xH100", "ShareGPT, QPS inf", "req/s"): 17.3,
    ("70B 4xH100", "decode-heavy, QPS inf", "req/s"): 15.4,
    ("70B 4xH100", "prefill-heavy, QPS inf", "req/s"): 25.2,
    ("70B 4xH100", "ShareGPT, QPS 2", "TPOT ms"): 22.0,
}


def calibrate() -> None:
    setups = {
        "8B 1xH100": config_from_dict({"model": "llama-3-8b", "gpu": "h100-sxm", **V060}, "calibration"),
        "70B 4xH100": config_from_dict(
            {"model": "llama-3-70b", "gpu": "h100-sxm", "tensor_parallel_size": 4, **V060}, "calibration"
        ),
    }
    n = 500
    rng = np.random.default_rng(0)
    sp, so = sharegpt_like(n, rng)
    fixed = {"decode-heavy": (462, 256), "prefill-heavy": (462, 16)}
    print(f"ShareGPT-like lengths: prompt mean {sp.mean():.0f}, output mean {so.mean():.0f}")
    print(f"{'setup':11} {'workload':24} {'metric':8} {'published':>9} {'simulated':>9} {'error':>7}")
    for setup, cfg in setups.items():
        runs = {}
        zero = np.zeros(n)
        runs["ShareGPT, QPS inf"] = replay(cfg, zero, sp, so)
        for name, (p, o) in fixed.items():
            runs[f"{name}, QPS inf"] = replay(cfg, zero, np.full(n, p), np.full(n, o))
        for qps in (2, 32):
            arrivals = np.cumsum(np.random.default_rng(qps).exponential(1.0 / qps, n))
            runs[f"ShareGPT, QPS {qps}"] = replay(cfg, arrivals, sp, so)
        for (s, workload, metric), want in PUBLISHED.items():
            if s != setup:
                continue
            run = runs[workload]
            got = run.throughput_rps if metric == "req/s" else run.mean_tpot_ms
            print(
                f"{setup:11} {workload:24} {metric:8} {want:9.1f} {got:9.1f} {100 * (got - want) / want:+6.0f}%"
            )


def seed_case() -> None:
    """The seed's §5.3 mix on Llama-3.1-8B / H100: 16 req/s, 3 % of prompts 6,000-7,800 tokens, the rest
    ~300; TTFT p50/p95, the longest inter-token gap and output tokens/s without chunked prefill, with
    it, and with it plus a cap on the prompt tokens one request gets per step (vLLM's
    long_prefill_token_threshold)."""
    n, rate = 4000, 16.0
    rng = np.random.default_rng(0)
    arrivals = np.cumsum(rng.exponential(1.0 / rate, n))
    long = rng.uniform(size=n) < 0.03
    short = np.clip(rng.lognormal(np.log(300), 0.6, n), 20, 2000)
    prompts = np.where(long, rng.integers(6000, 7800, n), short).astype(np.int64)
    outputs = np.clip(rng.lognormal(np.log(200), 0.5, n), 10, 300).astype(np.int64)
    base = {"model": "llama-3.1-8b", "gpu": "h100-sxm"}
    cases = {
        "chunked prefill off": {"enable_chunked_prefill": False},
        "chunked prefill on, 2048-token budget": {"max_num_batched_tokens": 2048},
        "... and long_prefill_token_threshold=512": {
            "max_num_batched_tokens": 2048,
            "long_prefill_token_threshold": 512,
        },
    }
    head = f"{'seed 5.3 case (16 req/s, 3 % long prompts)':44} {'TTFT p50':>9} {'p95':>7} {'p95/p50':>8}"
    print(f"{head} {'ITL max':>8} {'tok/s':>7}")
    for name, over in cases.items():
        core = EngineCore(config_from_dict({**base, **over}, "seed"), seed=1)
        now, k, ttft, itl, last = 0.0, 0, [], [], 0.0
        while k < n or core.busy:
            while k < n and arrivals[k] <= now:
                core.add(str(k), int(prompts[k]), int(outputs[k]), float(arrivals[k]))
                k += 1
            if not core.busy:
                now = float(arrivals[k])
                continue
            res = core.step(now)
            now += res.duration_s or 1e-3
            itl += res.itl
            ttft += [f.first_token - f.arrival for f in res.finished]
            last = max([last, *(f.last_token for f in res.finished)])
        p50, p95 = np.percentile(ttft, [50, 95])
        itl_max = max(itl)
        row = f"{name:44} {p50 * 1e3:7.0f}ms {p95 * 1e3:5.0f}ms {p95 / p50:8.1f} {itl_max * 1e3:6.0f}ms"
        print(f"{row} {outputs.sum() / last:7.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--calibrate", action="store_true", help="also print the calibration table and the seed case"
    )
    args = parser.parse_args()
    speed()
    if args.calibrate:
        print()
        calibrate()
        print()
        seed_case()


if __name__ == "__main__":
    main()
