"""The fix against every SLO of the incident (issue 36): each SLO a replay can predict, read from the
replay as the observed one is read (through the observed histogram's buckets), and judged beside what
was observed with the replay's own error on it. Used by :mod:`perfkit.app.whatif.remedy`."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

SLO_TOLERANCE = 0.25
"""A replay that misses the observed incident's number for an SLO by more than this (as the trusted
replay's TTFT p95, :data:`perfkit.app.whatif.reproduce.TOLERANCE`) predicts nothing about that SLO:
its row is ``unknown`` (untrusted), whatever the remedy's number."""
BOUND_RESOLUTION = 0.05
"""A predicted number within the replay's own error on it (at least 5 %: the histogram buckets the
replay is read through) of an SLO's bound cannot say which side of the bound it lands: ``unknown``."""
SLO_SIGNALS = ("ttft", "tpot", "itl", "e2e")
"""The SLOs a replay can predict: per request (TTFT, TPOT, E2E) and per engine step (ITL)."""
VERDICTS = ("meets", "still_breaches", "newly_breaches", "unknown")


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


def observed_ms(store: Any, target: dict[str, Any], window: Any) -> float | None:
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


def slo_words(rows: list[dict[str, Any]]) -> str:
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
