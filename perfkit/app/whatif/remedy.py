"""The fix, predicted before it ships (issue 26 item 3): each confirmed direction's remedy replayed on
the engine calibrated to the incident, beside what was observed and what the replay of the incident
as it was gives.

For every confirmed triage direction (ranked), the candidates below are tried in order, each on the
incident window's own traffic (:func:`perfkit.loadgen.shapes.replay_bundle`) and the engine the
reproduction calibrated to that window (:func:`perfkit.app.whatif.reproduce.reproduce`):

==============================  =========================================================================
direction                       candidates (the row's next step, in the simulator's settings)
==============================  =========================================================================
prefill_decode_interference     chunked prefill with a 2,048-token budget and a 512-token cap per request
                                and step (vLLM ``--enable-chunked-prefill --max-num-batched-tokens 2048
                                --long-prefill-token-threshold 512``: the triage row's remedy); then the
                                cap alone where chunked prefill is on already
scheduler_queueing              twice the engines (each serves half the traffic)
kv_cache_allocation             ``gpu_memory_utilization`` 0.05 higher (to 0.95); then half ``max_num_seqs``
release_regression,             the baseline window's engine: its step costs as the calibration to the
decode_efficiency               baseline found them (the previous release, a healthy GPU)
==============================  =========================================================================

A remedy **helps** when the number its direction is about (TTFT p95 for interference, queueing and
the KV cache; TPOT p50 for a slower engine) falls by more than the replay's own error on that number
(the calibrated incident replay against the observed one, at least :data:`MIN_GAIN`) and, where
the replay has requests outside the SLOs, at least :data:`MIN_SLO_GAIN` more of them meet them; otherwise it is said plainly not
to help and the next candidate is tried. Latency quantiles are read through the observed histograms'
buckets, as the observed ones are (the inter-token ones where no per-request TPOT is exported). Memory oversubscription (a crash) and
training directions are not replayed: a crash or a training job is not what the serving simulator
plays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.triage.rows import BY_DIRECTION, ROWS

MIN_GAIN = 0.10
"""The least relative gain called 'helps', even where the replay's own error is smaller: the
histogram buckets the observed numbers are read through are coarser than that."""
MIN_SLO_GAIN = 0.01
"""Where the replay has requests outside the SLOs, a remedy helps only if at least one request in a
hundred more meets them: a faster tail that leaves the same requests late is not the fix. Where all
met them (a regression inside the SLOs), the direction's own number decides."""
KV_HEADROOM = 0.05
"""A KV remedy's step up in ``gpu_memory_utilization`` (vLLM's default 0.9 -> 0.95)."""
MAX_UTILIZATION = 0.95
"""Past this the CUDA graphs and the sampler's peak have no room (vLLM's own guidance stops at 0.95)."""
CHUNK_BUDGET = 2048
CHUNK_CAP = 512
"""The interference row's remedy: ``--max-num-batched-tokens 2048 --long-prefill-token-threshold 512``."""

#: the number each direction's remedy must move (all are latencies: lower is better), as its triage row
#: declares it (:attr:`perfkit.triage.row_types.Row.remedy_target`)
TARGET = {r.direction: r.remedy_target for r in ROWS if r.remedy and r.remedy_target}
SHOWN = ("ttft_p50_ms", "ttft_p95_ms", "tpot_p50_ms", "tpot_p95_ms", "output_throughput", "goodput",
         "usd_per_million_tokens")  # fmt: skip


@dataclass
class Candidate:
    direction: str
    label: str  # what the operator would do, in the engine's words
    changes: dict[str, Any] = field(default_factory=dict)  # SimConfig settings (with_changes)
    engine: str = ""  # "baseline": the baseline window's calibrated engine instead
    traffic_share: float = 1.0  # the share of the traffic one engine serves


@dataclass
class Prediction:
    """The replay as it was and each remedy tried, beside the observed numbers."""

    observed: dict[str, float | None]
    as_was: dict[str, float | None]
    replay_error: dict[str, float | None]  # the calibrated incident replay against the observed
    trusted: bool
    tried: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "observed": self.observed,
            "as_was": self.as_was,
            "replay_error": self.replay_error,
            "trusted": self.trusted,
            "tried": self.tried,
            "notes": self.notes,
        }

    def summary(self) -> str:
        helps = [t for t in self.tried if t["verdict"] == "helps"]
        if not self.tried:
            return "no confirmed direction has a remedy the serving replay can play"
        head = "; ".join(
            f"{t['label']}: {TARGET[t['direction']].split('_ms')[0].replace('_', ' ')} "
            f"{_ms(t['as_was_target'])} → {_ms(t['predicted'].get(TARGET[t['direction']]))} ({t['verdict']})"
            for t in (helps or self.tried)[:2]
        )
        trust = "" if self.trusted else " — untrusted: the replay of the incident misses what was observed"
        return f"predicted by the calibrated replay: {head}{trust}"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1e3:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def _chunked_prefill(direction: str, cfg: Any, has_baseline: bool) -> list[Candidate]:
    if cfg.enable_chunked_prefill and cfg.long_prefill_token_threshold:
        return []
    return [
        Candidate(
            direction,
            f"chunked prefill, budget {CHUNK_BUDGET}, {CHUNK_CAP}-token cap per request",
            {
                "enable_chunked_prefill": True,
                "max_num_batched_tokens": CHUNK_BUDGET,
                "long_prefill_token_threshold": CHUNK_CAP,
            },
        )
    ]


def _replicas(direction: str, cfg: Any, has_baseline: bool) -> list[Candidate]:
    return [Candidate(direction, "twice the engines (half the traffic each)", traffic_share=0.5)]


def _kv_headroom(direction: str, cfg: Any, has_baseline: bool) -> list[Candidate]:
    out = []
    if cfg.gpu_memory_utilization + 1e-9 < MAX_UTILIZATION:
        up = round(min(MAX_UTILIZATION, cfg.gpu_memory_utilization + KV_HEADROOM), 2)
        out.append(Candidate(direction, f"gpu_memory_utilization {up:g}", {"gpu_memory_utilization": up}))
    if cfg.max_num_seqs >= 16:
        half = cfg.max_num_seqs // 2
        out.append(Candidate(direction, f"max_num_seqs {half}", {"max_num_seqs": half}))
    return out


def _baseline_engine(direction: str, cfg: Any, has_baseline: bool) -> list[Candidate]:
    if not has_baseline:
        return []
    what = "the previous release's speed" if direction == "release_regression" else "a healthy engine's speed"
    return [Candidate(direction, f"{what} (the baseline window's calibrated engine)", engine="baseline")]


#: each remedy kind a triage row may declare (:attr:`perfkit.triage.row_types.Row.remedy`), and the
#: candidates it tries for the engine (module docstring)
REMEDIES = {
    "chunked_prefill": _chunked_prefill,
    "replicas": _replicas,
    "kv_headroom": _kv_headroom,
    "baseline_engine": _baseline_engine,
}


def candidates(direction: str, cfg: Any, has_baseline: bool) -> list[Candidate]:
    """What the row's next step is, for the engine ``cfg`` (module docstring); none for a direction
    whose row declares no remedy."""
    row = BY_DIRECTION.get(direction)
    if row is None or row.remedy is None:
        return []
    return REMEDIES[row.remedy](direction, cfg, has_baseline)


def predict(
    bundle: str | Path,
    cfg: Any,
    directions: list[str],
    *,
    slo_ms: dict[str, float],
    usd_per_gpu_hour: float | None,
    seed: int = 0,
) -> Prediction:
    """Replay each of ``directions``' remedies (module docstring) on the bundle's incident window."""
    from perfkit.app.whatif.replay import _run, summarise
    from perfkit.app.whatif.reproduce import as_histogram, bucket_bounds, fit_recorded, reproduce
    from perfkit.engine.local import LocalEngine
    from perfkit.lab.servesim.config import with_changes
    from perfkit.loadgen.shapes import replay_bundle
    from perfkit.sources.bundle import load_bundle

    need_baseline = any(BY_DIRECTION[d].remedy == "baseline_engine" for d in directions if d in BY_DIRECTION)
    rep = reproduce(bundle, cfg, seed=seed, baseline=need_baseline)
    rows = {(r["window"], r["metric"]): r for r in rep.rows}
    observed = {m: (rows.get(("incident", m)) or {}).get("observed") for m in SHOWN}
    observed["output_throughput"] = (rows.get(("incident", "generated_tokens_per_s")) or {}).get("observed")
    engine = rep.engines.get("incident", cfg)
    b = load_bundle(bundle)
    window = b.incident.window
    store = LocalEngine(b.store)
    bounds = {name: bucket_bounds(store, name, window) for name in ("ttft", "tpot")}
    if bounds["tpot"] is None:  # no per-request TPOT exported: read through the inter-token buckets
        bounds["tpot"] = bucket_bounds(store, "itl", window)
    plan = replay_bundle(bundle, seed=seed, window=window)
    plan, _ = fit_recorded(plan, engine.max_model_len)
    span = window.seconds

    def play(c: Any, share: float = 1.0) -> dict[str, Any]:
        p = plan
        if share < 1.0:  # every 1/share-th request: one engine's part of a fleet of more
            keep = np.arange(len(plan)) % round(1 / share) == 0
            p = replace(plan, at_s=plan.at_s[keep], prompt_tokens=plan.prompt_tokens[keep],
                        output_tokens=plan.output_tokens[keep])  # fmt: skip
        run = _run(c, p, span, slo_ms, seed)
        row, _info = summarise(run, c, {}, slo_ms, usd_per_gpu_hour)
        values = {"ttft": run.ttft_s(), "tpot": run.tpot_s()[0]}
        for name, upper in bounds.items():  # read as the observed ones are: through their buckets
            for q in (50, 95):
                got = as_histogram(values[name], upper, q / 100) if upper is not None else None
                if got is not None:
                    row[f"{name}_p{q}_ms"] = got * 1e3
        met = _info.get("met_slo")
        met_share = met / len(p) if met is not None and len(p) else None
        return {**{m: row.get(m) for m in SHOWN}, "slo_met_share": met_share}

    as_was = play(engine)
    error = {m: _error(as_was.get(m), observed.get(m)) for m in SHOWN}
    out = Prediction(observed, as_was, error, rep.trusted, notes=list(rep.why))
    for direction in directions:
        cands = candidates(direction, engine, "baseline" in rep.engines)
        if direction in TARGET and not cands:
            out.notes.append(f"{direction}: no remedy left to replay for this engine's settings")
        target = TARGET.get(direction)
        for cand in cands:
            base = rep.engines["baseline"] if cand.engine == "baseline" else engine
            try:
                c = with_changes(base, cand.changes, cand.label) if cand.changes else base
            except Exception as exc:  # the engine refuses the setting (the model no longer fits)
                out.tried.append({"direction": direction, "label": cand.label, "verdict": "cannot run",
                                  "why": str(exc), "predicted": {}, "as_was_target": as_was.get(target or "")})  # fmt: skip
                continue
            predicted = play(c, cand.traffic_share)
            gain, needed, verdict = _verdict(
                as_was.get(target or ""), predicted.get(target or ""), error.get(target or "")
            )
            before, after = as_was.get("slo_met_share"), predicted.get("slo_met_share")
            missed = (
                before is not None and before < 1 - MIN_SLO_GAIN
            )  # the replay has requests outside the SLOs
            if verdict == "helps" and missed and (after or 0.0) - before < MIN_SLO_GAIN:  # type: ignore[operator]
                verdict = "does not help"  # faster, but no more requests within the SLOs
            out.tried.append(
                {"direction": direction, "label": cand.label, "set": cand.changes, "engine": cand.engine or "incident",
                 "traffic_share": cand.traffic_share, "predicted": predicted, "as_was_target": as_was.get(target or ""),
                 "gain": gain, "needed": needed, "verdict": verdict}
            )  # fmt: skip
            if verdict == "helps":
                break
    return out


def _error(sim: float | None, obs: float | None) -> float | None:
    return sim / obs - 1 if sim is not None and obs else None


def _verdict(
    before: float | None, after: float | None, error: float | None
) -> tuple[float | None, float, str]:
    """(the relative fall of the target number, the fall needed to beat the replay's own error, verdict)."""
    needed = max(MIN_GAIN, abs(error) if error is not None and math.isfinite(error) else MIN_GAIN)
    if before is None or after is None or before <= 0:
        return None, needed, "not measured"
    gain = 1 - after / before
    return gain, needed, "helps" if gain > needed else "does not help"
