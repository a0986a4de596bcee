"""What-if sweeps on the serving simulator (``perfkit lab whatif``, issue 11 item 6): the same
traffic through every combination of engine settings, faster than real time, and per configuration
TTFT/TPOT p50/p95, output throughput, goodput under the SLOs and the cost of a million output tokens.

* **Traffic**: a request log (:func:`perfkit.loadgen.shapes.replay_log`) or an incident bundle's
  traffic (:func:`~perfkit.loadgen.shapes.replay_bundle`, seeded), cut to its first ``minutes``.
* **Base configuration**: ``--engine-config FILE``, else what the bundle recorded
  (:func:`perfkit.app.whatif.base.config_from_bundle`: ``incident.yaml``'s model, GPU, count, price and SLOs; the engine's
  start-up log lines and ``vllm:cache_config_info`` through :mod:`perfkit.sources.engine_config`),
  each field's origin said; the rest are :class:`~perfkit.lab.servesim.config.SimConfig`'s defaults.
* **Grid**: the cartesian product of ``--set key=v1,v2`` over
  :data:`~perfkit.lab.servesim.config.SETTABLE`, each point validated by ``with_changes`` (vLLM's own
  start-up refusals, naming the field and value).
* **Runs**: :func:`perfkit.lab.servesim.offline.run_offline`, every configuration on the same
  arrivals and the same seed (step jitter included), so differences are the configuration's.
* **Numbers**, as ``vllm bench serve`` computes them (``vllm/benchmarks/serve.py``,
  ``calculate_metrics``; perfkit's :mod:`perfkit.loadgen.summary` does the same): percentiles over
  completed requests; TPOT per request ``(last - first) / (tokens - 1)``; throughput and goodput over
  the run's duration (t=0 to the last token); goodput counts requests meeting every SLO given.
  ``usd_per_million_tokens = usd_per_gpu_hour * tensor_parallel_size * duration_h / output_tokens * 1e6``.
* **Reproduced first**: for a bundle, its incident and baseline windows are replayed on the base
  configuration as they were and shown beside what was observed, with each error
  (:mod:`perfkit.app.whatif.reproduce`); a replay that misses marks the rows untrusted, saying which
  numbers missed.
* **Best**: the configuration with the most requests meeting the SLOs (the traffic is the same for
  all, so the count is the comparison; goodput's denominator only differs by the drain time), then
  the lowest cost. Without SLOs no configuration is marked.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.app.whatif.base import bundle_extras, config_from_bundle, config_from_file, gpu_price
from perfkit.app.whatif.calibrate import CALIBRATED
from perfkit.app.whatif.reproduce import fit_recorded, reproduce
from perfkit.errors import ConfigError

MAX_CONFIGS = 64
"""Most configurations one sweep runs: ~1 s of CPU per 10 simulated minutes of the demo traffic
(benchmarks/whatif_bench.py), so 64 configurations of an hour each stay within minutes."""
MAX_VALUES = 16
"""Most values one ``--set`` lists."""
MAX_MINUTES = 24 * 60.0
"""Longest traffic a sweep replays: a day (longer is a unit mistake or a job for a load test)."""
DEFAULT_MINUTES = 10.0
"""The issue's target unit: ten simulated minutes hold ~1,800 requests of the demo incident."""
NO_SLO_DRAIN_FACTOR = 1.0
"""Without SLOs the run may drain for as long again as the traffic lasted: a configuration that needs
more than twice the traffic's span to serve it is over twice overloaded, and its numbers say so."""
MAX_TIME_SCALE = 100.0
"""Densest replay: 100x the recorded rate (a bundle's 3 req/s becomes 300 req/s, more than one
engine of the tables serves; the runs stay bounded by the drain horizon either way)."""
SLO_KEYS = ("ttft", "tpot", "e2el")
#: a row's measured fields (the JSON contract); null in the row of a configuration that cannot run
ROW_METRICS = ("ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "tpot_p95_ms", "output_throughput", "goodput",
               "usd_per_million_tokens")  # fmt: skip
"""SLO names, as ``vllm bench serve --goodput`` takes them (milliseconds)."""
# -- arguments ------------------------------------------------------------------------------------


def parse_sets(items: Sequence[str]) -> dict[str, list[str]]:
    """``["max_num_seqs=128,256", ...]`` as ``{field: [values]}``, fields of :data:`SETTABLE` once
    each; ConfigError naming the bad item. The product may hold at most :data:`MAX_CONFIGS`."""
    from perfkit.lab.servesim.config import SETTABLE

    grid: dict[str, list[str]] = {}
    for item in items:
        text = str(item)
        key, sep, values = text.partition("=")
        name = key.strip().lstrip("-").replace("-", "_")
        if not sep or not name:
            raise ConfigError(f"--set {text[:80]!r}: expected key=v1,v2 (e.g. max_num_seqs=128,256)")
        if name not in SETTABLE:
            raise ConfigError(f"--set {name}: cannot be swept; settable: {', '.join(SETTABLE)}")
        if name in grid:
            raise ConfigError(f"--set {name}: given twice; list every value in one --set {name}=v1,v2")
        vals = [v.strip() for v in values.split(",")]
        if not all(vals) or len(vals) > MAX_VALUES or any(len(v) > 40 for v in vals):
            raise ConfigError(
                f"--set {name}: expected 1 to {MAX_VALUES} comma-separated values of up to 40 characters, got {values[:80]!r}"
            )
        if len(set(vals)) != len(vals):
            raise ConfigError(f"--set {name}: a value is listed twice in {values[:80]!r}")
        grid[name] = vals
    total = math.prod(len(v) for v in grid.values())
    if total > MAX_CONFIGS:
        raise ConfigError(f"--set: {total} configurations, more than the {MAX_CONFIGS} one sweep runs")
    return grid


def parse_slo(text: str | None) -> dict[str, float]:
    """``"ttft=1500,tpot=80"`` (milliseconds; keys of :data:`SLO_KEYS`) as a dict; ConfigError otherwise."""
    out: dict[str, float] = {}
    if not text:
        return out
    for part in str(text)[:200].split(","):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in SLO_KEYS:
            raise ConfigError(f"--slo {part.strip()!r}: expected {'|'.join(SLO_KEYS)}=MILLISECONDS")
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if not (math.isfinite(ms) and 0 < ms <= 3.6e6):
            raise ConfigError(f"--slo {key}: expected milliseconds in (0, 3600000], got {value.strip()!r}")
        out[key] = ms
    return out


# -- the sweep --------------------------------------------------------------------------------------


@dataclass
class WhatIf:
    """A sweep's results: ``configs`` (the JSON contract's rows), ``runs`` (per-configuration
    counts and timings, same order) and what it was run on."""

    configs: list[dict[str, Any]]
    runs: list[dict[str, Any]]
    base: dict[str, dict[str, Any]]
    traffic: dict[str, Any]
    slo_ms: dict[str, float]
    slo_origin: str
    usd_per_gpu_hour: float | None
    price_origin: str
    notes: list[str]
    wall_s: float
    reproduction: dict[str, Any] | None = None  # the windows replayed as they were (reproduce.py)

    def as_dict(self) -> dict[str, Any]:
        return {
            "reproduction": self.reproduction,
            "configs": self.configs,
            "runs": self.runs,
            "base": self.base,
            "traffic": self.traffic,
            "slo_ms": self.slo_ms or None,
            "slo_origin": self.slo_origin or None,
            "usd_per_gpu_hour": self.usd_per_gpu_hour,
            "price_origin": self.price_origin or None,
            "notes": self.notes,
            "wall_s": self.wall_s,
        }


def load_traffic(replay: str | Path, minutes: float, seed: int, time_scale: float = 1.0) -> Any:
    """The plan of ``replay`` (a bundle folder or a request log), ``time_scale`` times as dense (2:
    the same requests in half the time), cut to its first ``minutes``."""
    from perfkit.loadgen.shapes import replay_bundle, replay_log, with_duration

    p = Path(replay)
    plan = replay_bundle(p, time_scale, seed=seed) if p.is_dir() else replay_log(p, time_scale)
    return with_duration(plan, minutes * 60.0)


def run_whatif(
    replay: str | Path,
    sets: Sequence[str] = (),
    *,
    engine_config: str | Path | None = None,
    minutes: float = DEFAULT_MINUTES,
    slo: str | None = None,
    usd_per_gpu_hour: float | None = None,
    seed: int = 0,
    time_scale: float = 1.0,
    calibrated: bool = True,
) -> WhatIf:
    """The sweep (module docstring): ``replay`` a bundle folder or a request log; ``sets`` the
    ``--set key=v1,v2`` items; ``slo`` ``"ttft=MS,tpot=MS"`` (default: the bundle's);
    ``time_scale`` replays the traffic that many times as fast (what if it doubled?)."""
    import time

    if not (isinstance(minutes, int | float) and 0 < minutes <= MAX_MINUTES):
        raise ConfigError(f"--minutes: expected (0, {MAX_MINUTES:g}], got {minutes!r}")
    if usd_per_gpu_hour is not None and not (math.isfinite(usd_per_gpu_hour) and 0 < usd_per_gpu_hour < 1e4):
        raise ConfigError(f"--usd-per-gpu-hour: expected a price in (0, 10000), got {usd_per_gpu_hour!r}")
    if not (isinstance(time_scale, int | float) and 0 < time_scale <= MAX_TIME_SCALE):
        raise ConfigError(f"--time-scale: expected (0, {MAX_TIME_SCALE:g}], got {time_scale!r}")
    grid = parse_sets(sets)
    slo_ms = parse_slo(slo)
    from perfkit.app.runner.embedded import replay_source

    replay = str(replay_source(str(replay)))
    is_bundle = Path(replay).is_dir()
    if engine_config is not None:
        base = config_from_file(engine_config)
        if is_bundle:
            from_bundle = bundle_extras(replay)
            base.slo_ms, base.slo_origin = from_bundle.slo_ms, from_bundle.slo_origin
            base.usd_per_gpu_hour, base.price_origin = from_bundle.usd_per_gpu_hour, from_bundle.price_origin
    elif is_bundle:
        base = config_from_bundle(replay)
    else:
        raise ConfigError(
            f"{replay}: a request log carries no engine; give --engine-config FILE (docs/simulator.md)"
        )
    if slo_ms:
        base.slo_ms, base.slo_origin = slo_ms, "--slo"
    price, price_origin = gpu_price(base, usd_per_gpu_hour)
    reproduction, engine = None, base.cfg
    if is_bundle:  # before predicting: does the replay reproduce what was observed?
        rep = reproduce(replay, base.cfg, seed=seed, calibrated=calibrated)
        reproduction = rep.as_dict()
        engine = rep.engines.get("incident", base.cfg)
    configs = _grid_configs(engine, grid)
    plan = load_traffic(replay, float(minutes), seed, float(time_scale))
    notes = list(base.notes)
    if is_bundle:
        plan, cut = fit_recorded(plan, base.cfg.max_model_len)
        if cut:
            notes.append(
                f"{cut:,} drawn requests passed the recorded max_model_len {base.cfg.max_model_len:,} (the "
                "length histograms' +Inf bucket is open-ended): cut to fit, as the recorded engine served them"
            )
    span = float(minutes) * 60.0
    t0 = time.perf_counter()
    rows, runs = [], []
    for changes, cfg in configs:
        if isinstance(cfg, str):  # cannot run: a row of nulls with its reason
            rows.append({"set": changes, **dict.fromkeys(ROW_METRICS), "best": False, "error": cfg})
            runs.append({"set": changes, "error": cfg})
            notes.append(f"not run: {cfg}")
            continue
        run = _run(cfg, plan, span, base.slo_ms, seed)
        row, info = summarise(run, cfg, changes, base.slo_ms, price)
        rows.append(row)
        runs.append(info)
    mark_best(rows, runs)
    notes += list((plan.replay or {}).get("notes", []))
    ran = [c for _, c in configs if not isinstance(c, str)]
    if any(c.long_prefill_token_threshold and not c.enable_chunked_prefill for c in ran):
        notes.append(
            "long_prefill_token_threshold acts only with chunked prefill on: without it a prompt is "
            "prefilled whole (vLLM V0's scheduler), so those rows equal their threshold-0 twins"
        )
    if not base.slo_ms:
        notes.append("no SLO known: goodput is not computed and no configuration is marked best (give --slo)")
    if price is None:
        notes.append(
            f"no price known for {base.cfg.gpu.key}: usd_per_million_tokens is null (give --usd-per-gpu-hour)"
        )
    last = float(plan.at_s[-1]) if len(plan) else 0.0
    traffic = {**plan.describe(), "minutes": float(minutes), "last_arrival_s": last, "seed": seed,
               "time_scale": float(time_scale)}  # fmt: skip
    described = {
        name: {"value": _plain(getattr(base.cfg, name)), "origin": src} for name, src in base.origin.items()
    }
    if is_bundle:
        if engine is not base.cfg:
            fitted = ", ".join(f"{k}={getattr(engine, k):.3g}" for k in CALIBRATED)
            notes.insert(0, f"every row runs on the engine calibrated to the incident window ({fitted}; "
                         "docs/simulator.md, Calibration)")  # fmt: skip
        if not rep.trusted:
            notes.insert(0, "the replay of the incident as it was misses what was observed, so the rows are "
                         "untrusted predictions: " + "; ".join(rep.why))  # fmt: skip
    budgets = {
        c.max_num_batched_tokens for _, c in configs if not isinstance(c, str) and c.enable_chunked_prefill
    }
    if not engine.enable_chunked_prefill and "max_num_batched_tokens" not in grid and budgets:
        notes.append(CHUNKED_BUDGET_NOTE.format(budget=min(budgets), recorded=engine.max_num_batched_tokens))
    return WhatIf(
        rows, runs, described, traffic, base.slo_ms, base.slo_origin, price, price_origin, notes,
        time.perf_counter() - t0, reproduction,
    )  # fmt: skip


def _plain(value: Any) -> Any:
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return getattr(value, "key", str(value))


def _grid_configs(base: Any, grid: dict[str, list[str]]) -> list[tuple[dict[str, Any], Any]]:
    """Every combination of the grid applied to ``base``: (the settings, the config or the reason it
    cannot run, a str). A value that does not parse is a ConfigError naming it; a combination that
    parses but cannot run (the model no longer fits, a batch under max_model_len) is kept as its
    reason, so one impossible corner does not cost the rest of the sweep. All impossible: ConfigError."""
    from perfkit.lab.servesim.config import parse_changes, with_changes

    names = list(grid)
    for name in names:  # each value alone, before anything runs
        for value in grid[name]:
            parse_changes({name: value}, f"--set {name}={value}")
    out: list[tuple[dict[str, Any], Any]] = []
    for combo in itertools.product(*(grid[n] for n in names)):
        changes: dict[str, str | int | float | bool] = dict(zip(names, combo, strict=True))
        label = ", ".join(f"{k}={v}" for k, v in changes.items())
        changes = _with_chunked_budget(base, changes, label)
        try:
            cfg = with_changes(base, changes, f"--set {label}")
        except ConfigError as exc:
            parsed = parse_changes(changes, label)
            out.append(({k: _plain(parsed[k]) for k in names}, str(exc)))
            continue
        out.append(({k: _plain(getattr(cfg, k)) for k in names}, cfg))
    if out and all(isinstance(cfg, str) for _, cfg in out):
        raise ConfigError(
            out[0][1] if len(out) == 1 else f"no configuration of the sweep can run; first: {out[0][1]}"
        )
    return out


def _with_chunked_budget(
    base: Any, changes: dict[str, str | int | float | bool], label: str
) -> dict[str, str | int | float | bool]:
    """``changes``, and when they turn chunked prefill on over a base whose token budget is the one
    chunked prefill off forces (at least ``max_model_len``), vLLM's own budget for chunked prefill
    (:func:`~perfkit.lab.servesim.config.chunked_budget_default`): an operator who adds
    ``--enable-chunked-prefill`` gets that budget, not a 32k step that chunks nothing."""
    from perfkit.lab.servesim.config import chunked_budget_default, parse_changes

    if "max_num_batched_tokens" in changes or "enable_chunked_prefill" not in changes:
        return changes
    on = parse_changes({"enable_chunked_prefill": changes["enable_chunked_prefill"]}, label)
    forced = not base.enable_chunked_prefill and base.max_num_batched_tokens >= base.max_model_len
    if on["enable_chunked_prefill"] and forced:
        return {**changes, "max_num_batched_tokens": chunked_budget_default(base.gpu)}
    return changes


CHUNKED_BUDGET_NOTE = (
    "enable_chunked_prefill=true runs with vLLM's own max_num_batched_tokens for chunked prefill, {budget} "
    "(EngineArgs.get_batch_defaults for this GPU): the recorded {recorded} is the budget chunked prefill off "
    "forces (max_model_len); --set max_num_batched_tokens=... sweeps it"
)


def _run(cfg: Any, plan: Any, span: float, slo_ms: dict[str, float], seed: int) -> Any:
    """One configuration over the plan. With SLOs the run stops at ``span + ttft + longest output x
    tpot`` (+ e2el): a request still unfinished then has missed an SLO (it got its first token after
    the TTFT SLO, or its tokens came slower than the TPOT SLO), so goodput is exact."""
    from perfkit.lab.servesim.offline import run_offline

    longest = int(plan.output_tokens.max()) if len(plan) else 1
    if slo_ms and ("e2el" in slo_ms or {"ttft", "tpot"} <= slo_ms.keys()):
        drain = slo_ms.get("e2el", math.inf)
        if {"ttft", "tpot"} <= slo_ms.keys():
            drain = min(drain, slo_ms["ttft"] + slo_ms["tpot"] * max(0, longest - 1))
        drain_s = drain / 1e3
    else:
        drain_s = NO_SLO_DRAIN_FACTOR * span
    return run_offline(
        cfg, plan.at_s, plan.prompt_tokens, plan.output_tokens, until_s=span + drain_s, seed=seed
    )


def _pct(values: np.ndarray, q: float) -> float | None:
    return float(np.percentile(values, q) * 1e3) if values.size else None


def summarise(
    run: Any, cfg: Any, changes: dict[str, Any], slo_ms: dict[str, float], price: float | None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """One configuration's row of the JSON contract, and its run's counts and timings."""
    from perfkit.lab.servesim.offline import FINISHED

    ttft, e2e = run.ttft_s(), run.e2e_s()
    tpot, multi = run.tpot_s()
    duration = max(run.end_s, 1e-9)
    tokens = int(run.output_tokens.sum())
    met_count = None
    if slo_ms:
        met = np.ones(ttft.size, dtype=bool)
        if "ttft" in slo_ms:
            met &= ttft * 1e3 <= slo_ms["ttft"]
        if "e2el" in slo_ms:
            met &= e2e * 1e3 <= slo_ms["e2el"]
        if "tpot" in slo_ms:
            ok = np.ones(ttft.size, dtype=bool)
            ok[multi] = tpot * 1e3 <= slo_ms["tpot"]
            met &= ok
        met_count = int(met.sum())
    hours = duration / 3600.0
    cost = price * cfg.tensor_parallel_size * hours / tokens * 1e6 if price is not None and tokens else None
    row = {
        "set": changes,
        "ttft_p50_ms": _pct(ttft, 50),
        "ttft_p95_ms": _pct(ttft, 95),
        "tpot_p50_ms": _pct(tpot, 50),
        "tpot_p95_ms": _pct(tpot, 95),
        "output_throughput": tokens / duration,
        "goodput": met_count / duration if met_count is not None else None,
        "usd_per_million_tokens": cost,
        "best": False,
    }
    info = {
        "set": changes,
        **run.describe(),
        "completed": int((run.status == FINISHED).sum()),
        "met_slo": met_count,
        "output_tokens": tokens,
        "duration_s": duration,
        "num_gpu_blocks": cfg.num_gpu_blocks(),
        "kv_usage_max": float(run.steps.kv_usage.max()) if len(run.steps) else 0.0,
        "rejections": list(run.rejections),
    }
    return row, info


def mark_best(rows: list[dict[str, Any]], runs: list[dict[str, Any]]) -> int | None:
    """Mark the configuration with the most requests meeting the SLOs, then the lowest cost (an
    unknown cost last, then the first listed); None (nothing marked) without SLOs."""
    scored = [(i, info["met_slo"]) for i, info in enumerate(runs) if info.get("met_slo") is not None]
    if not scored:
        return None

    def key(item: tuple[int, int]) -> tuple[int, float, int]:
        i, met = item
        cost = rows[i]["usd_per_million_tokens"]
        return (-met, cost if cost is not None else math.inf, i)

    best = min(scored, key=key)[0]
    rows[best]["best"] = True
    return best
