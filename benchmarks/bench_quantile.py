"""p95 TTFT by model over a 24 h, 15 s-resolution bundle: perfkit's local engine vs plain pandas.

Both compute histogram_quantile(0.95, sum by (le, model_name) (rate(bucket[1m]))) at 15 s steps with
Prometheus 2.x semantics (extrapolated rate, counter resets, bucket interpolation); the script checks
they agree, then prints the times side by side and their ratio.
"""

from __future__ import annotations

import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import T0, ttft_om  # noqa: E402

from perfkit.engine import ops  # noqa: E402
from perfkit.engine.local import LocalEngine  # noqa: E402
from perfkit.sources.openmetrics import parse_text  # noqa: E402

WINDOW_S = 60.0
W_MS = int(WINDOW_S * 1000)
STEP_S = 15.0
Q = 0.95


def pandas_p95(samples: pd.DataFrame, steps: np.ndarray) -> pd.DataFrame:
    """The same computation written plainly with pandas (one group per series, merge_asof per step)."""
    out = []
    grid = pd.DataFrame({"t": steps})
    for (model, _engine, le), g in samples.groupby(["model_name", "engine", "le"], sort=False):
        g = g.sort_values("t")
        v = g["value"].to_numpy()
        prev = np.concatenate([[v[0]], v[:-1]])
        g = g.assign(corr=v + np.cumsum(np.where(v < prev, prev, 0.0)))
        last = pd.merge_asof(grid, g[["t", "corr", "value"]], on="t", direction="backward")
        first = pd.merge_asof(
            grid.assign(t=grid["t"] - W_MS), g[["t", "corr", "value"]], on="t", direction="forward"
        )
        t_last = pd.merge_asof(grid, g[["t"]].assign(tl=g["t"]), on="t", direction="backward")["tl"]
        t_first = pd.merge_asof(
            grid.assign(t=grid["t"] - W_MS), g[["t"]].assign(tf=g["t"]), on="t", direction="forward"
        )["tf"]
        n = pd.Series(np.searchsorted(g["t"].to_numpy(), steps, side="right")) - pd.Series(
            np.searchsorted(g["t"].to_numpy(), steps - W_MS, side="left")
        )
        res = last["corr"] - first["corr"]
        sampled = (t_last - t_first) / 1000
        avg = sampled / (n - 1)
        to_start = (t_first - (steps - W_MS)) / 1000
        to_end = (steps - t_last) / 1000
        to_zero = np.where((res > 0) & (first["value"] >= 0), sampled * first["value"] / res, np.inf)
        to_start = np.minimum(to_start, to_zero)
        ext = (
            sampled
            + np.where(to_start < avg * 1.1, to_start, avg / 2)
            + np.where(to_end < avg * 1.1, to_end, avg / 2)
        )
        rate = res * (ext / sampled) / WINDOW_S
        rate[n < 2] = np.nan
        out.append(pd.DataFrame({"model_name": model, "le": le, "t": steps, "rate": rate}))
    rates = pd.concat(out).groupby(["model_name", "le", "t"], as_index=False)["rate"].sum(min_count=1)
    rates["le_f"] = rates["le"].astype(float)
    result = []
    for (model, t), g in rates.groupby(["model_name", "t"], sort=True):
        g = g.sort_values("le_f")
        upper, counts = g["le_f"].to_numpy(), np.maximum.accumulate(g["rate"].fillna(0).to_numpy())
        total = counts[-1]
        if not total > 0:
            continue
        rank = Q * total
        b = int(np.argmax(counts[:-1] >= rank)) if (counts[:-1] >= rank).any() else len(upper) - 1
        if b == len(upper) - 1:
            val = upper[-2]
        else:
            start = upper[b - 1] if b > 0 else 0.0
            below = counts[b - 1] if b > 0 else 0.0
            val = start + (upper[b] - start) * (rank - below) / (counts[b] - below)
        result.append((model, t, val))
    return pd.DataFrame(result, columns=["model_name", "t", "value"])


def main() -> None:
    cache = Path(__file__).resolve().parent / ".cache" / "ttft_24h_4models.om"
    if not cache.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(ttft_om(hours=24, models=4, seed=11))
    store = parse_text(cache.read_text(), require_eof=True)
    frame = store.frames["vllm:time_to_first_token_seconds_bucket"]
    start = datetime.fromtimestamp(T0 + 600, UTC)
    end = datetime.fromtimestamp(T0 + 24 * 3600 - 15, UTC)
    expr = ops.histogram_quantile(
        Q,
        ops.sum_by(
            ops.rate(ops.Selector("vllm:time_to_first_token_seconds_bucket"), WINDOW_S), "le", "model_name"
        ),
    )
    engine = LocalEngine(store)
    t = time.perf_counter()
    ours = engine.range(expr, start, end, STEP_S)
    ours_s = time.perf_counter() - t

    samples = frame.to_pandas()
    samples["t"] = frame["ts"].cast(pl.Int64).to_numpy()
    steps = np.arange(int(start.timestamp() * 1000), int(end.timestamp() * 1000) + 1, int(STEP_S * 1000))
    t = time.perf_counter()
    ref = pandas_p95(samples, steps)
    ref_s = time.perf_counter() - t

    mine = ours.to_pandas()
    mine["t"] = ours["ts"].cast(pl.Int64).to_numpy()
    joined = mine.merge(ref, on=["model_name", "t"], suffixes=("", "_ref"))
    diff = np.nanmax(np.abs(joined["value"] - joined["value_ref"]) / joined["value_ref"])
    print(
        f"series: {frame.height:,} bucket samples, 4 models x 23 buckets, 24 h at 15 s; "
        f"{len(ours):,} result points"
    )
    print(f"agreement: {len(joined):,} points compared, max relative difference {diff:.2e}")
    print(f"perfkit local engine {ours_s:7.2f} s")
    print(f"plain pandas         {ref_s:7.2f} s   ratio {ref_s / ours_s:5.1f}x (pandas / perfkit)")


if __name__ == "__main__":
    main()
