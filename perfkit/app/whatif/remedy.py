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

SLO_TOLERANCE = 0.25
"""A replay that misses the observed incident's number for an SLO by more than this (as the trusted
replay's TTFT p95, :data:`perfkit.app.whatif.reproduce.TOLERANCE`) predicts nothing about that SLO:
its row is ``unknown`` (untrusted), whatever the remedy's number."""
BOUND_RESOLUTION = 0.05
"""A predicted number within the replay's own error on it (at least 5 %: the histogram buckets the
replay is read through) of an SLO's bound cannot say which side of the bound it lands: ``unknown``."""
CHUNK_SEARCH = [(budget, cap) for budget in (1024, 2048, 4096) for cap in (128, 256, 512)]
REPLICA_SEARCH = (3, 4)
"""Where the row's remedy newly breaks an SLO or leaves one broken, the settings of its own knob tried
for one that meets every SLO: chunk budgets and per-request caps (a smaller chunk is a shorter step
beside the decodes, at more steps per long prompt), more engines."""
SLO_SIGNALS = ("ttft", "tpot", "itl", "e2e")
"""The SLOs a replay can predict: per request (TTFT, TPOT, E2E) and per engine step (ITL)."""
VERDICTS = ("meets", "still_breaches", "newly_breaches", "unknown")

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
    slo_observed: dict[str, dict[str, Any]] = field(default_factory=dict)  # metric -> SLO, observed, as_was

    @property
    def recommended(self) -> dict[str, Any] | None:
        """The remedy to ship: of those that help (their own number moves, no SLO that held breaks),
        the one that leaves the fewest SLOs broken and meets the most, then the lowest own number."""
        helps = [t for t in self.tried if t["verdict"] == "helps"]
        if not helps:
            return None

        def key(t: dict[str, Any]) -> tuple[int, int, int, float]:
            verdicts = [r["verdict"] for r in t.get("slos") or []]
            own = (t.get("predicted") or {}).get(TARGET.get(t["direction"], ""))
            return (verdicts.count("newly_breaches"), verdicts.count("still_breaches"), -verdicts.count("meets"),
                    own if isinstance(own, int | float) else math.inf)  # fmt: skip

        return min(helps, key=key)

    @property
    def slos(self) -> list[dict[str, Any]]:
        """The recommended remedy's row per SLO (else the first tried): metric, observed, predicted,
        replay_error, verdict."""
        pick = self.recommended or (self.tried[0] if self.tried else None)
        return list(pick.get("slos") or []) if pick else []

    def as_dict(self) -> dict[str, Any]:
        rec = self.recommended
        return {
            "observed": self.observed,
            "as_was": self.as_was,
            "replay_error": self.replay_error,
            "trusted": self.trusted,
            "tried": self.tried,
            "notes": self.notes,
            "slos": self.slos,
            "slo_observed": self.slo_observed,
            "recommended": rec["label"] if rec else None,
            "meets_every_slo": bool(rec and rec.get("meets_every_slo")),
        }

    def action_text(self) -> str:
        """The mitigation in one line: the setting to ship (its command), each SLO it is predicted to
        give, and what it leaves broken; the full reasoning is :meth:`summary`'s."""
        rec = self.recommended
        if rec is None:
            return self.summary()
        cmd = command(rec.get("set") or {})
        rows = rec.get("slos") or []
        said = ", ".join(
            f"{r['label']} {_ms(r['predicted_ms'])}"
            + {"meets": "", "unknown": f" (cannot tell against {_ms(r['slo_ms'])}: {r['why']})"}.get(
                r["verdict"], f" ({r['verdict'].replace('_', ' ')} its {_ms(r['slo_ms'])} SLO)"
            )
            for r in rows
        )
        trust = "" if self.trusted else "; untrusted: the replay of the incident misses what was observed"
        return (
            f"predicted by the calibrated replay: {rec['label']}"
            + (f" (vLLM: {cmd})" if cmd else "")
            + (f": {said}" if said else "")
            + trust
        )

    def summary(self) -> str:
        """The fix to ship in one sentence: its own number, then every SLO, then what the row's first
        setting would have cost where the search found a better one, or that none meets every SLO."""
        if not self.tried:
            return "no confirmed direction has a remedy the serving replay can play"
        rec = self.recommended
        shown = [rec] if rec else self.tried[:2]
        head = "; ".join(
            f"{t['label']}: {_own(t)} ({t['verdict']}); {_slo_words(t.get('slos') or [])}" for t in shown
        )
        if rec is not None:
            first = next(t for t in self.tried if t["direction"] == rec["direction"])
            if first is not rec:
                head += f". The row's first setting, {first['label']}, {first['verdict']}: {_slo_words(first.get('slos') or [])}"
            if not rec.get("meets_every_slo") and rec.get("slos"):
                n = sum(1 for t in self.tried if t["direction"] == rec["direction"])
                head += f". No setting of the {n} tried meets every SLO (the table shows the trade-off)"
        trust = "" if self.trusted else " — untrusted: the replay of the incident misses what was observed"
        return f"predicted by the calibrated replay: {head}{trust}"


VLLM_FLAGS = {
    "enable_chunked_prefill": "--enable-chunked-prefill",
    "max_num_batched_tokens": "--max-num-batched-tokens",
    "long_prefill_token_threshold": "--long-prefill-token-threshold",
    "gpu_memory_utilization": "--gpu-memory-utilization",
    "max_num_seqs": "--max-num-seqs",
}
"""The replayed settings as vLLM's flags (the serving simulator plays vLLM's scheduler)."""


def command(changes: dict[str, Any]) -> str:
    """The settings a remedy changes as a vLLM command line ("" for none, or one without a flag)."""
    parts = []
    for key, value in changes.items():
        flag = VLLM_FLAGS.get(key)
        if flag is None:
            return ""
        parts.append(flag if value is True else f"{flag} {value}")
    return " ".join(parts)


def _own(t: dict[str, Any]) -> str:
    """A remedy's own number (its row's target), as it was in the replay and as predicted."""
    target = TARGET[t["direction"]]
    name = target.split("_ms")[0].replace("_", " ").upper().replace(" P", " p")
    return f"{name} {_ms(t['as_was_target'])} → {_ms((t.get('predicted') or {}).get(target))}"


def _slo_words(rows: list[dict[str, Any]]) -> str:
    """Each SLO's predicted verdict in a few words: "TTFT p95 1.54 s (unknown: within ...)"."""
    if not rows:
        return "no SLO to judge it on"
    if all(r["verdict"] == "meets" for r in rows):
        return "meets every SLO (" + ", ".join(f"{r['label']} {_ms(r['predicted_ms'])}" for r in rows) + ")"
    words = [
        f"{r['label']} {_ms(r['observed_ms'])} → {_ms(r['predicted_ms'])} against {_ms(r['slo_ms'])}: "
        f"{r['verdict'].replace('_', ' ')}" + (f" ({r['why']})" if r.get("why") else "")
        for r in rows
        if r["verdict"] != "meets"
    ]
    met = [r["label"] for r in rows if r["verdict"] == "meets"]
    return ", ".join(words) + (f"; {', '.join(met)} met" if met else "")


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
            _chunk_label(CHUNK_BUDGET, CHUNK_CAP),
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
    """Replay each of ``directions``' remedies (module docstring) on the bundle's incident window. Kept
    on disk for the same bundle, engine, directions, SLOs, price, seed and code, as the reproduction
    is (:mod:`perfkit.app.whatif.replay_cache`): the search of a remedy's knob replays a dozen times."""
    import json

    from perfkit.app.whatif import replay_cache

    variant = "remedy/" + json.dumps([directions, slo_ms, usd_per_gpu_hour], sort_keys=True, default=str)
    name = replay_cache.key(bundle, repr(cfg), seed, variant)
    doc = replay_cache.load(name)
    if doc is not None:
        try:
            fields = {k: doc[k] for k in ("observed", "as_was", "replay_error", "trusted", "tried", "notes", "slo_observed")}  # fmt: skip
            out = Prediction(**fields)
            out.notes.append("read from the replay cache (" + str(replay_cache.cache_dir()) + ")")
            return out
        except (KeyError, TypeError):
            pass  # not an entry of this shape: replay again
    out = _predict(bundle, cfg, directions, slo_ms=slo_ms, usd_per_gpu_hour=usd_per_gpu_hour, seed=seed)
    replay_cache.store(name, out.as_dict())
    return out


def _predict(
    bundle: str | Path,
    cfg: Any,
    directions: list[str],
    *,
    slo_ms: dict[str, float],
    usd_per_gpu_hour: float | None,
    seed: int,
) -> Prediction:
    """:func:`predict`, replayed."""
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
    targets = slo_targets(b.incident.slo)
    slo_bounds = {sig: bucket_bounds(store, sig, window) for sig in {t["signal"] for t in targets}}
    slo_seen = {t["metric"]: _observed_ms(store, t, window) for t in targets}
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
        per_slo = replayed_slos(run, targets, slo_bounds)
        return {**{m: row.get(m) for m in SHOWN}, "slo_met_share": met_share, "slo_ms": per_slo}

    as_was = play(engine)
    error = {m: _error(as_was.get(m), observed.get(m)) for m in SHOWN}
    out = Prediction(observed, as_was, error, rep.trusted, notes=list(rep.why))
    out.slo_observed = {
        t["metric"]: {**t, "observed_ms": slo_seen[t["metric"]], "as_was_ms": as_was["slo_ms"].get(t["metric"]),
                      "replay_error": _error(as_was["slo_ms"].get(t["metric"]), slo_seen[t["metric"]])}
        for t in targets
    }  # fmt: skip

    def attempt(direction: str, cand: Candidate, target: str | None) -> dict[str, Any]:
        base = rep.engines["baseline"] if cand.engine == "baseline" else engine
        try:
            c = with_changes(base, cand.changes, cand.label) if cand.changes else base
        except Exception as exc:  # the engine refuses the setting (the model no longer fits)
            return {"direction": direction, "label": cand.label, "verdict": "cannot run", "why": str(exc),
                    "predicted": {}, "as_was_target": as_was.get(target or ""), "slos": []}  # fmt: skip
        predicted = play(c, cand.traffic_share)
        gain, needed, verdict = _verdict(
            as_was.get(target or ""), predicted.get(target or ""), error.get(target or "")
        )
        before, after = as_was.get("slo_met_share"), predicted.get("slo_met_share")
        missed = before is not None and before < 1 - MIN_SLO_GAIN  # the replay has requests outside the SLOs
        if verdict == "helps" and missed and (after or 0.0) - before < MIN_SLO_GAIN:  # type: ignore[operator]
            verdict = "does not help"  # faster, but no more requests within the SLOs
        judged = slo_rows(out.slo_observed, predicted["slo_ms"])
        breaks = [r["metric"] for r in judged if r["verdict"] == "newly_breaches"]
        if verdict == "helps" and breaks:
            verdict = "trades off"  # its own number moves, but an SLO that held breaks
        return {"direction": direction, "label": cand.label, "set": cand.changes, "engine": cand.engine or "incident",
                "traffic_share": cand.traffic_share, "predicted": predicted, "as_was_target": as_was.get(target or ""),
                "gain": gain, "needed": needed, "verdict": verdict, "slos": judged, "breaks": breaks,
                "meets_every_slo": bool(judged) and all(r["verdict"] == "meets" for r in judged)}  # fmt: skip

    for direction in directions:
        cands = candidates(direction, engine, "baseline" in rep.engines)
        if direction in TARGET and not cands:
            out.notes.append(f"{direction}: no remedy left to replay for this engine's settings")
        target = TARGET.get(direction)
        done = False
        for cand in cands:
            tried = attempt(direction, cand, target)
            out.tried.append(tried)
            if tried["verdict"] == "helps" and (tried["meets_every_slo"] or not out.slo_observed):
                done = True
                break
            if tried["verdict"] in ("helps", "trades off"):
                break  # the row's remedy works on its own number: search its knob for every SLO
        if done:
            continue
        for cand in searched(direction, engine, [t["label"] for t in out.tried]):
            tried = attempt(direction, cand, target)
            tried["searched"] = True
            out.tried.append(tried)
            if tried["verdict"] == "helps" and tried["meets_every_slo"]:
                break
    return out


def slo_targets(slo: Any) -> list[dict[str, Any]]:
    """The incident's quantile SLOs a replay can predict (:data:`SLO_SIGNALS`): metric (``ttft_p95``),
    label, signal, quantile, bound in ms."""
    from perfkit.analyses.slo import LABELS, parse_slo_key

    out = []
    for key, value in (slo or {}).items():
        parsed = parse_slo_key(str(key))
        if parsed is None or parsed[0] not in SLO_SIGNALS:
            continue
        if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0:
            continue
        metric = str(key).removesuffix("_s")
        label = f"{LABELS.get(parsed[0], parsed[0])} {metric.rsplit('_', 1)[-1]}"
        out.append({"metric": metric, "label": label, "signal": parsed[0], "q": parsed[1], "slo_ms": float(value) * 1e3})  # fmt: skip
    return out


def _observed_ms(store: Any, target: dict[str, Any], window: Any) -> float | None:
    from perfkit.engine import signals as S

    v = S.window_quantiles(store, target["signal"], (target["q"],), window).get(target["q"])
    return None if v is None or not math.isfinite(v) else v * 1e3


def replayed_slos(run: Any, targets: list[dict[str, Any]], bounds: dict[str, Any]) -> dict[str, float | None]:
    """Each SLO's quantile in the replay (ms), read through the observed histogram's buckets. TTFT,
    TPOT and E2E are per finished request; ITL is per step: each decoding step's gap since the last
    step that decoded (a whole-prompt prefill between them holds its decodes back), once for every
    sequence that decoded in it (vLLM observes one interval per sequence per step)."""
    ends = run.steps.start_s + run.steps.duration_s
    decoding = np.flatnonzero(run.steps.decode_seqs > 0)  # a sequence's gap runs from its last token:
    gaps = np.diff(ends[decoding])  # the step before that decoded, past any prefill-only step between
    values = {
        "ttft": (run.ttft_s(), None),
        "tpot": (run.tpot_s()[0], None),
        "e2e": (run.e2e_s(), None),
        "itl": (gaps, run.steps.decode_seqs[decoding[1:]].astype(np.float64)),
    }
    out: dict[str, float | None] = {}
    for t in targets:
        v, w = values[t["signal"]]
        got = _quantile(v, w, bounds.get(t["signal"]), t["q"])
        out[t["metric"]] = None if got is None else got * 1e3
    return out


def _quantile(
    values: np.ndarray, weights: np.ndarray | None, upper: np.ndarray | None, q: float
) -> float | None:
    """The ``q`` quantile of weighted ``values``, through the buckets ``upper`` as
    ``histogram_quantile`` reads them (the raw weighted quantile where the engine has no histogram)."""
    from perfkit.engine.local import bucket_quantile

    if not values.size:
        return None
    w = np.ones(values.size) if weights is None else weights
    order = np.argsort(values)
    sorted_v, cum = values[order], np.cumsum(w[order])
    if upper is None:
        v = float(sorted_v[min(np.searchsorted(cum, q * cum[-1]), sorted_v.size - 1)])
        return v if math.isfinite(v) else None
    idx = np.searchsorted(sorted_v, upper, side="right")
    cumulative = np.where(idx > 0, cum[np.maximum(idx - 1, 0)], 0.0)
    v = float(bucket_quantile(q, upper, cumulative[None, :])[0])
    return v if math.isfinite(v) else None


def slo_rows(seen: dict[str, dict[str, Any]], predicted: dict[str, float | None]) -> list[dict[str, Any]]:
    """One row per SLO: observed, predicted, the replay's own error on it, and a verdict of
    :data:`VERDICTS` (``unknown`` where the replay misses what was observed by more than
    :data:`SLO_TOLERANCE`, or lands within its own error of the bound)."""
    out = []
    for metric, t in seen.items():
        obs, pred, err, bound = t["observed_ms"], predicted.get(metric), t["replay_error"], t["slo_ms"]
        why = ""
        if obs is None or pred is None:
            verdict, why = "unknown", "not measured" if obs is None else "the replay has none"
        elif err is None or abs(err) > SLO_TOLERANCE:
            verdict = "unknown"
            why = "untrusted: the replay of the incident misses it" + (
                f" by {err:+.0%}" if err is not None else ""
            )
        elif abs(pred / bound - 1) <= max(abs(err), BOUND_RESOLUTION):
            verdict, why = "unknown", f"within the replay's error ({abs(err):.0%}) of its bound"
        elif pred <= bound:
            verdict = "meets"
        else:
            verdict = "newly_breaches" if obs <= bound else "still_breaches"
        out.append({"metric": metric, "label": t["label"], "slo_ms": bound, "observed_ms": obs, "predicted_ms": pred,
                    "replay_error": err, "verdict": verdict, "why": why,
                    "observed": None if obs is None else obs / 1e3, "predicted": None if pred is None else pred / 1e3,
                    "slo_s": bound / 1e3})  # fmt: skip
    return out


def searched(direction: str, cfg: Any, tried: list[str]) -> list[Candidate]:
    """The row's own knob at other settings (:data:`CHUNK_SEARCH`, :data:`REPLICA_SEARCH`), none already tried."""
    row = BY_DIRECTION.get(direction)
    kind = row.remedy if row is not None else None
    out: list[Candidate] = []
    if kind == "chunked_prefill":
        for budget, cap in CHUNK_SEARCH:
            label = _chunk_label(budget, cap)
            changes = {"enable_chunked_prefill": True, "max_num_batched_tokens": budget, "long_prefill_token_threshold": cap}  # fmt: skip
            out.append(Candidate(direction, label, changes))
    elif kind == "replicas":
        for n in REPLICA_SEARCH:
            out.append(
                Candidate(direction, f"{n}x the engines (1/{n} of the traffic each)", traffic_share=1 / n)
            )
    return [c for c in out if c.label not in tried]


def _chunk_label(budget: int, cap: int) -> str:
    return f"chunked prefill, budget {budget}, {cap}-token cap per request"


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
