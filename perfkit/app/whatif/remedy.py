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
buckets, as the observed ones are (the inter-token ones where no per-request TPOT is exported). Every remedy is also judged against every SLO of the incident
(:mod:`perfkit.app.whatif.remedy_slos`: TTFT, TPOT, ITL and E2E, each beside what was observed with the
replay's own error on it): one that breaks an SLO that held in the incident **trades off**, and the
remedy's own knob is searched (:data:`CHUNK_SEARCH`, :data:`REPLICA_SEARCH`) for a setting that breaks
none; the recommended remedy leaves the fewest SLOs broken. Memory oversubscription (a crash) and
training directions are not replayed: a crash or a training job is not what the serving simulator
plays.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from perfkit.app.whatif.remedy_slos import VERDICTS as VERDICTS
from perfkit.app.whatif.remedy_slos import observed_ms as _observed_ms
from perfkit.app.whatif.remedy_slos import replayed_slos, slo_rows, slo_targets, slo_words
from perfkit.loadgen.bundle_lengths import NO_HISTOGRAM
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

CHUNK_SEARCH = [(budget, cap) for budget in (1024, 2048, 4096) for cap in (128, 256, 512)]
CHUNK_SEARCH_NO_CAP = [(budget, 0) for budget in (512, 1024, 4096, 8192)]
REPLICA_SEARCH = (3, 4)
"""Where the row's remedy newly breaks an SLO or leaves one broken, the settings of its own knob tried
for one that meets every SLO: chunk budgets and per-request caps (a smaller chunk is a shorter step
beside the decodes, at more steps per long prompt), more engines. An engine with no per-request
prefill cap (only vLLM has ``--long-prefill-token-threshold``) is searched over budgets alone
(:data:`CHUNK_SEARCH_NO_CAP`): a setting it cannot be given is never predicted for it."""
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
    engine: str | None = None  # the serving engine of the bundle (its flags in the commands)

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
            "engine": self.engine,
            "recommended": rec["label"] if rec else None,
            "meets_every_slo": bool(rec and rec.get("meets_every_slo")),
        }

    def action_text(self) -> str:
        """The mitigation in one line: the setting to ship (its command), each SLO it is predicted to
        give, and what it leaves broken; the full reasoning is :meth:`summary`'s."""
        rec = self.recommended
        trust = "" if self.trusted else "; untrusted: the replay of the incident misses what was observed"
        if rec is None:  # what the row's general advice should be read against
            if not self.tried:
                return self.summary()
            first, others = self.tried[0], len(self.tried) - 1
            return (
                f"the calibrated replay found no setting that helps: {first['label']} gives {_own(first)}"
                + (f", and none of the {others} other settings tried did better" if others else "")
                + f" (the fix section shows each against every SLO){trust}"
            )
        cmd = command(rec.get("set") or {}, self.engine)
        rows = rec.get("slos") or []
        said = ", ".join(
            f"{r['label']} {_ms(r['predicted_ms'])}"
            + {"meets": "", "unknown": f" (cannot tell against {_ms(r['slo_ms'])}: {r['why']})"}.get(
                r["verdict"], f" ({r['verdict'].replace('_', ' ')} its {_ms(r['slo_ms'])} SLO)"
            )
            for r in rows
        )
        return (
            f"predicted by the calibrated replay: {rec['label']}"
            + (f" ({cmd})" if cmd else "")
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
            f"{t['label']}: {_own(t)} ({t['verdict']}); {slo_words(t.get('slos') or [])}" for t in shown
        )
        if rec is not None:
            first = next(t for t in self.tried if t["direction"] == rec["direction"])
            if first is not rec:
                head += f". The row's first setting, {first['label']}, {first['verdict']}: {slo_words(first.get('slos') or [])}"
            if not rec.get("meets_every_slo") and rec.get("slos"):
                n = sum(1 for t in self.tried if t["direction"] == rec["direction"])
                head += f". No setting of the {n} tried meets every SLO (the table shows the trade-off)"
        trust = "" if self.trusted else " — untrusted: the replay of the incident misses what was observed"
        assumed = [n for n in self.notes if NO_HISTOGRAM in n]  # lengths drawn without a histogram
        lengths = f". Request lengths: {'; '.join(assumed)}" if assumed else ""
        return f"predicted by the calibrated replay: {head}{trust}{lengths}"


FLAGS: dict[str, dict[str, str]] = {
    "vllm": {
        "enable_chunked_prefill": "--enable-chunked-prefill",
        "max_num_batched_tokens": "--max-num-batched-tokens",
        "long_prefill_token_threshold": "--long-prefill-token-threshold",
        "gpu_memory_utilization": "--gpu-memory-utilization",
        "max_num_seqs": "--max-num-seqs",
    },
    # the nearest knob of each other engine (perfkit.engine.dialects.WORDS has their names and sources):
    # SGLang chunks prefills by default, by its --chunked-prefill-size; its --mem-fraction-static is
    # weights and KV like vLLM's share; trtllm-serve's fraction is of the memory left after the weights
    "sglang": {
        "max_num_batched_tokens": "--chunked-prefill-size",
        "gpu_memory_utilization": "--mem-fraction-static",
        "max_num_seqs": "--max-running-requests",
    },
    "trtllm": {
        "enable_chunked_prefill": "--enable_chunked_prefill",
        "max_num_batched_tokens": "--max_num_tokens",
        "gpu_memory_utilization": "--kv_cache_free_gpu_memory_fraction",
        "max_num_seqs": "--max_batch_size",
    },
    "tgi": {
        "max_num_batched_tokens": "--max-batch-prefill-tokens",
        "gpu_memory_utilization": "--cuda-memory-fraction",
        "max_num_seqs": "--max-concurrent-requests",
    },
}
"""A replayed setting as each engine's flag. The serving simulator plays vLLM's scheduler: on another
engine the flag is its nearest knob, and a setting it has none for is said (``command``)."""
SAME_BY_DEFAULT = {("sglang", "enable_chunked_prefill"), ("tgi", "enable_chunked_prefill")}


def command(changes: dict[str, Any], engine: str | None = None) -> str:
    """The settings a remedy changes as ``engine``'s command line (vLLM's when not known): its nearest
    flags, and what it has no flag for (vLLM's per-request prefill cap has none elsewhere)."""
    from perfkit.engine.dialects import BY_NAME

    name = engine if engine in FLAGS else "vllm"
    title = BY_NAME[name].title if name in BY_NAME else name
    parts, none = [], []
    for key, value in changes.items():
        flag = FLAGS[name].get(key)
        if flag is None:
            if (name, key) not in SAME_BY_DEFAULT:
                none.append(key)
            continue
        parts.append(flag if value is True else f"{flag} {value}")
    text = f"{title}: {' '.join(parts)}" if parts else ""
    if none:
        text += f"{'; ' if text else ''}no {title} flag for {', '.join(none)}"
    return text


def _own(t: dict[str, Any]) -> str:
    """A remedy's own number (its row's target), as it was in the replay and as predicted."""
    target = TARGET[t["direction"]]
    name = target.split("_ms")[0].replace("_", " ").upper().replace(" P", " p")
    return f"{name} {_ms(t['as_was_target'])} → {_ms((t.get('predicted') or {}).get(target))}"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1e3:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def has_prefill_cap(engine: str | None) -> bool:
    """Whether ``engine`` (vLLM's when not known) has a flag for a per-request prefill cap."""
    return "long_prefill_token_threshold" in FLAGS.get(engine or "vllm", FLAGS["vllm"])


def _chunk(direction: str, budget: int, cap: int, engine: str | None) -> Candidate:
    """Chunked prefill at ``budget`` tokens a step, each request's prefill capped at ``cap`` where the
    engine has that knob (else none)."""
    cap = cap if has_prefill_cap(engine) else 0
    changes: dict[str, Any] = {"enable_chunked_prefill": True, "max_num_batched_tokens": budget}
    if cap:
        changes["long_prefill_token_threshold"] = cap
    return Candidate(direction, _chunk_label(budget, cap), changes)


def _chunked_prefill(direction: str, cfg: Any, has_baseline: bool, engine: str | None) -> list[Candidate]:
    """Chunked prefill with a bounded budget (and a per-request cap where the engine has one); none
    where the engine already runs it (SGLang chunks by default: then a smaller budget, if it has more)."""
    if cfg.enable_chunked_prefill and has_prefill_cap(engine) and cfg.long_prefill_token_threshold:
        return []
    if (
        cfg.enable_chunked_prefill
        and not has_prefill_cap(engine)
        and cfg.max_num_batched_tokens <= CHUNK_BUDGET
    ):
        return []
    return [_chunk(direction, CHUNK_BUDGET, CHUNK_CAP, engine)]


def _replicas(direction: str, cfg: Any, has_baseline: bool, engine: str | None) -> list[Candidate]:
    return [Candidate(direction, "twice the engines (half the traffic each)", traffic_share=0.5)]


def _kv_headroom(direction: str, cfg: Any, has_baseline: bool, engine: str | None) -> list[Candidate]:
    out = []
    if cfg.gpu_memory_utilization + 1e-9 < MAX_UTILIZATION:
        up = round(min(MAX_UTILIZATION, cfg.gpu_memory_utilization + KV_HEADROOM), 2)
        out.append(
            Candidate(direction, f"KV cache's share of GPU memory {up:g}", {"gpu_memory_utilization": up})
        )
    if cfg.max_num_seqs >= 16:
        half = cfg.max_num_seqs // 2
        out.append(Candidate(direction, f"at most {half} running requests", {"max_num_seqs": half}))
    return out


def _baseline_engine(direction: str, cfg: Any, has_baseline: bool, engine: str | None) -> list[Candidate]:
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


def candidates(direction: str, cfg: Any, has_baseline: bool, engine: str | None = None) -> list[Candidate]:
    """What the row's next step is, for the engine ``cfg`` served by ``engine`` (a dialect's name; vLLM's
    knobs when None) (module docstring); none for a direction whose row declares no remedy."""
    row = BY_DIRECTION.get(direction)
    if row is None or row.remedy is None:
        return []
    return REMEDIES[row.remedy](direction, cfg, has_baseline, engine)


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
            fields = {k: doc[k] for k in ("observed", "as_was", "replay_error", "trusted", "tried", "notes", "slo_observed", "engine")}  # fmt: skip
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
    from perfkit.engine import signals as S
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
    lengths = [n for n in (plan.replay or {}).get("notes", []) if NO_HISTOGRAM in n]
    out = Prediction(
        observed, as_was, error, rep.trusted, notes=[*rep.why, *lengths], engine=S.serving_engine(store)
    )
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
        cands = candidates(direction, engine, "baseline" in rep.engines, out.engine)
        if direction in TARGET and not cands:
            out.notes.append(f"{direction}: no remedy left to replay for this engine's settings")
        target = TARGET.get(direction)
        done = False
        for cand in cands:  # the row's remedies in order, until one helps and breaks no SLO
            tried = attempt(direction, cand, target)
            out.tried.append(tried)
            if tried["verdict"] == "helps" and (tried["meets_every_slo"] or not out.slo_observed):
                done = True
                break
        if done or not cands:  # nothing of the row's left for this engine: no knob to search either
            continue
        for cand in searched(direction, engine, [t["label"] for t in out.tried], out.engine):
            tried = attempt(direction, cand, target)
            tried["searched"] = True
            out.tried.append(tried)
            if tried["verdict"] == "helps" and tried["meets_every_slo"]:
                break
    return out


def searched(direction: str, cfg: Any, tried: list[str], engine: str | None = None) -> list[Candidate]:
    """The row's own knob at other settings (:data:`CHUNK_SEARCH`, :data:`REPLICA_SEARCH`) that
    ``engine`` can be given, none already tried."""
    row = BY_DIRECTION.get(direction)
    kind = row.remedy if row is not None else None
    out: list[Candidate] = []
    if kind == "chunked_prefill":
        for budget, cap in CHUNK_SEARCH if has_prefill_cap(engine) else CHUNK_SEARCH_NO_CAP:
            out.append(_chunk(direction, budget, cap, engine))
    elif kind == "replicas":
        for n in REPLICA_SEARCH:
            out.append(
                Candidate(direction, f"{n}x the engines (1/{n} of the traffic each)", traffic_share=1 / n)
            )
    return [c for c in out if c.label not in tried]


def _chunk_label(budget: int, cap: int) -> str:
    return f"chunked prefill, budget {budget}, " + (
        f"{cap}-token cap per request" if cap else "no per-request cap"
    )


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
