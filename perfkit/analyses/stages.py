"""Per-stage latency: queue, prefill, decode and frontend overhead, and which stage owns the tail.

Identities (vLLM ``vllm/v1/metrics/stats.py``), on means over the window::

    TTFT  ≈ frontend + queue + prefill
    e2e   ≈ frontend + queue + inference,   inference = prefill + decode
    frontend/other ≈ mean(e2e) − mean(queue) − mean(inference)

Means are ``increase(_sum)/increase(_count)``. A stage's *share* of TTFT is read in the typical
minute: the median, over the minutes of the window, of that minute's mean stage time over its mean
TTFT. A mean over the whole window is owned by its worst minutes: the backlog a restarted server
drains (every request that arrived while it was down waits in its queue), or one burst, can put
80 % of the window's TTFT in the queue while the typical request waited for nothing. The tail owner is the stage whose p95 grew
the most *relative* to the baseline, among changes big enough to feel (a stage that is slow in both
windows is not what changed), and of at least two stages timed: the only stage an engine times
owns nothing by default. Decode is compared per token (TPOT, else ITL), since a request's
whole decode time mostly measures how many tokens it asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import polars as pl

from perfkit.core.frames import Window
from perfkit.engine import signals as S

STAGES = ("queue", "prefill", "decode")


@dataclass
class StageBreakdown:
    means: dict[str, dict[str, float | None]]  # side → stage/ttft/e2e/inference/frontend → mean s
    p95: dict[str, dict[str, float | None]]  # side → stage → p95 s
    tail_owner: str | None
    ttft_owner: str | None  # queue or prefill: which part of TTFT grew most
    shares: dict[str, float | None] = field(default_factory=dict)  # stage → share of TTFT, typical minute
    queries: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    # side → stage → the first bucket's bound, where the p95 lies in it (only "at most" that is known)
    p95_under: dict[str, dict[str, float]] = field(default_factory=dict)
    #: what stood in for a stage the engine exports no histogram of, in words (PREFILL_STAND_IN, ...)
    stand_ins: list[str] = field(default_factory=list)

    def table(self) -> pl.DataFrame:
        rows = []
        for stage in (*STAGES, "frontend", "ttft", "e2e"):
            b, i = self.means.get("baseline", {}).get(stage), self.means.get("incident", {}).get(stage)
            pb, pi = self.p95.get("baseline", {}).get(stage), self.p95.get("incident", {}).get(stage)
            under = [side for side in ("baseline", "incident") if stage in self.p95_under.get(side, {})]
            # a side in the first bucket counts as its bound: the delta is then the least (baseline
            # inside) or most (incident inside) the histogram allows; both inside: no delta at all
            pb = self.p95_under["baseline"][stage] if "baseline" in under else pb
            pi = self.p95_under["incident"][stage] if "incident" in under else pi
            both = len(under) == 2
            rows.append(
                {
                    "stage": stage,
                    "mean_baseline_s": b,
                    "mean_incident_s": i,
                    "p95_baseline_s": self.p95.get("baseline", {}).get(stage),
                    "p95_incident_s": self.p95.get("incident", {}).get(stage),
                    "p95_delta_s": (pi - pb) if pi is not None and pb is not None and not both else None,
                    "note": _under_note(under, self.p95_under, stage),
                }
            )
        return pl.DataFrame(
            rows,
            schema={
                "stage": pl.Utf8,
                "mean_baseline_s": pl.Float64,
                "mean_incident_s": pl.Float64,
                "p95_baseline_s": pl.Float64,
                "p95_incident_s": pl.Float64,
                "p95_delta_s": pl.Float64,
                "note": pl.Utf8,
            },
        )

    def summary(self) -> str:
        if not self.tail_owner:
            timed = [s for s in STAGES if all(self.p95.get(side, {}).get(s) is not None for side in self.p95)]
            if len(timed) == 1 and self.missing:
                stage = timed[0]
                b, i = (_s(self.p95.get(side, {}).get(stage)) for side in ("baseline", "incident"))
                return (
                    f"the {stage} stage's p95 went {b} → {i}; it is the only stage the engine times, so which "
                    "stage owns the tail is not known" + "".join(f"; {x}" for x in self.stand_ins)
                )
            if self.missing:
                return "per-stage histograms missing: cannot say which stage owns the tail"
            return "no stage's p95 grew noticeably against the baseline"
        shown = [
            f"≤ {_s(bound)}" if (bound := self.p95_under.get(side, {}).get(self.tail_owner)) is not None
            else _s(self.p95.get(side, {}).get(self.tail_owner))
            for side in ("baseline", "incident")
        ]  # fmt: skip
        text = f"the {self.tail_owner} stage owns the tail: p95 {shown[0]} → {shown[1]}"
        if self.ttft_owner:
            text += f"; TTFT grew mostly in {self.ttft_owner}"
        return text + "".join(f"; {x}" for x in self.stand_ins)

    def as_dict(self) -> dict[str, Any]:
        return {
            "means": self.means,
            "p95": self.p95,
            "tail_owner": self.tail_owner,
            "ttft_owner": self.ttft_owner,
            "shares_of_ttft": self.shares,
            "p95_first_bucket": self.p95_under,
            "stand_ins": self.stand_ins,
            "summary": self.summary(),
        }


def _under_note(under: list[str], bounds: dict[str, dict[str, float]], stage: str) -> str:
    """Which side's p95 is only "at most" its first bucket's bound (signals.FirstBucket)."""
    if not under:
        return ""
    bound = bounds[under[-1]][stage]
    side = "both" if len(under) == 2 else under[0]
    return f"p95 {side} ≤ {_s(bound)} (first bucket: interpolated from 0)"


def _s(v: float | None) -> str:
    return "n/a" if v is None else (f"{v * 1000:.0f} ms" if v < 1 else f"{v:.2f} s")


def _side(engine, window: Window, queries: list[str]) -> tuple[dict, dict]:
    means = {s: S.window_mean(engine, s, window, queries) for s in (*STAGES, "ttft", "e2e", "inference")}
    if means["ttft"] is None and means["queue"] is not None and _ttft_stand_in(engine):
        # an engine without a TTFT histogram (TGI): a request's first token comes at the end of the
        # prefill forward that takes it in after its wait in the queue, so TTFT ≈ queue + that forward
        forward = S.window_mean(engine, "prefill_forward", window, queries)
        if forward is not None:
            means["prefill"], means["ttft"] = forward, means["queue"] + forward
    if means["prefill"] is None and None not in (means["ttft"], means["queue"]) and not _has_prefill(engine):
        # an engine without a prefill histogram (SGLang): TTFT ≈ queue + prefill gives prefill's mean
        means["prefill"] = max(0.0, means["ttft"] - means["queue"])  # type: ignore[operator]
    if None not in (means["e2e"], means["queue"], means["inference"]):
        means["frontend"] = max(0.0, means["e2e"] - means["queue"] - means["inference"])  # type: ignore[operator]
    else:
        means["frontend"] = None
    p95 = {s: S.window_quantiles(engine, s, (0.95,), window, queries)[0.95] for s in (*STAGES, "ttft", "e2e")}
    return means, p95


def _has_prefill(engine) -> bool:
    return S.resolve(engine, "prefill").found


def _ttft_stand_in(engine) -> bool:
    """The engine exports no TTFT histogram but the duration of its prefill forward passes (TGI)."""
    return not S.resolve(engine, "ttft").found and S.resolve(engine, "prefill_forward").found


PREFILL_STAND_IN = "prefill = TTFT - queue (the engine exports no prefill-time histogram)"
TTFT_STAND_IN = (
    "TTFT = queue time + the mean prefill forward pass (the engine exports no TTFT histogram; its prefill "
    "forward is the step that gives a request its first token after the queue)"
)

SHARE_STEP_S = 60.0
"""Shares are read per minute: four scrapes per rate, and enough minutes for a median."""
SHARE_MIN_MINUTES = 5
"""Fewer minutes with traffic than this, and the share falls back to the window's means."""


def typical_shares(engine, window: Window, means: dict[str, float | None], queries: list[str]) -> dict:
    """Queue's and prefill's share of TTFT in the typical minute (module docstring); the window's
    means when there are too few minutes with traffic to take a median of."""
    step = max(SHARE_STEP_S, S.choose_step(window, points=120))
    ttft = S.mean_series(engine, "ttft", window, step, queries)
    if not ttft.height and _ttft_stand_in(engine):  # TTFT ≈ queue + the prefill forward (TTFT_STAND_IN)
        queue = S.mean_series(engine, "queue", window, step, queries)
        forward = S.mean_series(engine, "prefill_forward", window, step, queries)
        ttft = queue.join(forward.rename({"value": "forward"}), on="ts").select(
            "ts", (pl.col("value") + pl.col("forward")).alias("value")
        )
    shares: dict[str, float | None] = {}
    for stage in ("queue", "prefill"):
        whole = means.get(stage), means.get("ttft")
        fallback = whole[0] / whole[1] if whole[0] is not None and whole[1] else None
        part = S.mean_series(engine, stage, window, step, queries)
        if stage == "prefill" and not part.height and _ttft_stand_in(engine):
            part = S.mean_series(engine, "prefill_forward", window, step, queries)
        if (
            stage == "prefill"
            and not part.height
            and not _has_prefill(engine)
            and shares.get("queue") is not None
        ):
            shares[stage] = 1.0 - shares["queue"]  # type: ignore[operator]  # TTFT ≈ queue + prefill
            continue
        if not ttft.height or not part.height:
            shares[stage] = fallback
            continue
        joined = (
            part.select("ts", pl.col("value").alias("part"))
            .join(ttft.select("ts", pl.col("value").alias("ttft")), on="ts")
            .filter(pl.col("ttft").is_finite() & (pl.col("ttft") > 0) & pl.col("part").is_finite())
        )
        if joined.height < SHARE_MIN_MINUTES:
            shares[stage] = fallback
            continue
        shares[stage] = float((joined["part"] / joined["ttft"]).clip(0.0, 1.0).median())  # type: ignore[arg-type]
    return shares


MIN_FELT_S = {"queue": 0.1, "prefill": 0.1, "decode": 0.005}  # a smaller p95 change is not what users felt
MIN_GROWTH_S = 0.02
"""A part of TTFT (queue, prefill) whose window mean grew by less than this did not make TTFT grow:
20 ms is a fifth of the 100 ms a stage's p95 must move to be felt (:data:`MIN_FELT_S`), and ten times
the window-to-window wander of those means on a steady load (1-2 ms in the live drills). Without it, a
1.6 ms change (or none) was reported as "TTFT grew mostly in queue"."""


def _tail_owner(engine, window, baseline, inc_p95, base_p95, queries) -> str | None:
    per_token = "tpot" if S.resolve(engine, "tpot").found else "itl"
    inc = {
        "queue": inc_p95.get("queue"),
        "prefill": inc_p95.get("prefill"),
        "decode": S.window_quantiles(engine, per_token, (0.95,), window, queries)[0.95],
    }
    if baseline is None:
        present = {k: v for k, v in inc.items() if v is not None}
        return max(present, key=lambda k: present[k]) if present else None
    base = {
        "queue": base_p95.get("queue"),
        "prefill": base_p95.get("prefill"),
        "decode": S.window_quantiles(engine, per_token, (0.95,), baseline)[0.95],
    }
    ratios = {}
    for stage, i in inc.items():
        b = base.get(stage)
        if i is None or b is None:
            continue
        felt = (i - b) >= MIN_FELT_S[stage]
        ratios[stage] = (i / b if b > 0 else float("inf")) if felt else 1.0
    if len(ratios) < 2:  # one stage timed: it cannot "own" the tail against stages nobody measured
        return None
    owner = max(ratios, key=lambda k: ratios[k])
    return owner if ratios[owner] > 1.0 else None


def breakdown(engine, window: Window, baseline: Window | None) -> StageBreakdown:
    queries: list[str] = []
    missing: list[str] = []
    mi, pi = _side(engine, window, queries)
    means, p95 = {"incident": mi}, {"incident": pi}
    if baseline:
        mb, pb = _side(engine, baseline, [])
        means["baseline"], p95["baseline"] = mb, pb
    else:
        missing.append(
            "stages: no baseline window; the tail owner is the slowest stage, not the one that grew"
        )
    for s in STAGES:
        if pi.get(s) is None:
            missing.append(f"stages: {s}: {S.absent(engine, 'histograms', s)}")
    under = {"incident": _p95_under(engine, window, queries)}
    if baseline:
        under["baseline"] = _p95_under(engine, baseline, [])
    bounded = {side: {**p95[side], **under[side]} for side in under}  # a first-bucket p95 as its bound
    tail_owner = _tail_owner(
        engine, window, baseline, bounded["incident"], bounded.get("baseline", {}), queries
    )
    ttft_owner = None
    if baseline and all(
        means[side].get(s) is not None for side in ("incident", "baseline") for s in ("queue", "prefill")
    ):
        dq = means["incident"]["queue"] - means["baseline"]["queue"]
        dp = means["incident"]["prefill"] - means["baseline"]["prefill"]
        if max(dq, dp) >= MIN_GROWTH_S:
            ttft_owner = "queue" if dq >= dp else "prefill"
    shares = typical_shares(engine, window, mi, queries)
    stand_ins = [TTFT_STAND_IN] if _ttft_stand_in(engine) and mi.get("ttft") is not None else []
    if not stand_ins and not _has_prefill(engine) and mi.get("prefill") is not None:
        stand_ins.append(PREFILL_STAND_IN)
    return StageBreakdown(means, p95, tail_owner, ttft_owner, shares, queries, missing, under, stand_ins)


def _p95_under(engine, window: Window, queries: list[str]) -> dict[str, float]:
    """Each p95 that lies in its histogram's first bucket, with that bucket's bound."""
    out: dict[str, float] = {}
    for stage in (*STAGES, "ttft", "e2e"):
        fb = S.first_bucket(engine, stage, window, queries)
        if fb is not None and fb.holds(0.95):
            out[stage] = fb.bound
    return out
