"""Fast synthetic vLLM OpenMetrics for benchmarks: TTFT histograms (vLLM's buckets) per model, 15 s scrapes.

Not a physics simulation (that is perfkit.lab.sim): counters grow by Poisson-many lognormal observations
per scrape, enough to make realistic files of any size quickly.
"""

from __future__ import annotations

import numpy as np

from perfkit.lab.sim.exporters import TTFT_BUCKETS

T0 = 1_794_000_000.0  # 2026-11-07T...Z


def ttft_om(*, hours: float, models: int, step_s: float = 15.0, engines: int = 1, seed: int = 7) -> str:
    """OpenMetrics text: vllm:time_to_first_token_seconds for ``models`` x ``engines`` series sets."""
    rng = np.random.default_rng(seed)
    n = int(hours * 3600 / step_s)
    ts = T0 + np.arange(n) * step_s
    bounds = np.array([*TTFT_BUCKETS, np.inf])
    lines = [
        "# TYPE vllm:time_to_first_token_seconds histogram",
        "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
    ]
    for m in range(models):
        for e in range(engines):
            per_step = rng.poisson(40, n)
            slow = 1.0 + 4.0 * ((np.arange(n) % 2880) > 2600)  # a daily slow spell per model
            med = 0.15 * (1 + 0.3 * m) * slow
            counts = np.zeros((n, bounds.size), dtype=np.int64)
            total = np.zeros(n)
            for i in range(n):
                obs = rng.lognormal(np.log(med[i]), 0.8, per_step[i])
                counts[i] = np.bincount(np.searchsorted(bounds, obs, side="left"), minlength=bounds.size)
                total[i] = obs.sum()
            cum = np.cumsum(np.cumsum(counts, axis=0), axis=1)
            sums = np.cumsum(total)
            labels = f'engine="{e}",model_name="model-{m}"'
            heads = [
                f'vllm:time_to_first_token_seconds_bucket{{{labels},le="{"+Inf" if np.isinf(b) else repr(float(b))}"}}'
                for b in bounds
            ]
            for i in range(n):
                t = f"{ts[i]:.3f}"
                lines.extend(f"{h} {int(c)} {t}" for h, c in zip(heads, cum[i], strict=True))
                lines.append(f"vllm:time_to_first_token_seconds_count{{{labels}}} {int(cum[i, -1])} {t}")
                lines.append(f"vllm:time_to_first_token_seconds_sum{{{labels}}} {sums[i]:.4f} {t}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"
