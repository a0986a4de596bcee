"""Impact per tenant: on whose requests an SLO's misses fell, where a label names tenants.

An SLO breach that falls on one tenant is another incident than one spread over all: a batch tenant's
long prompts may slow only its own requests (rate-limit it, tell it), or everyone's (isolate it). The
fleet's histograms say which when a label names the tenant: the first of :data:`TENANT_LABELS` that
the SLO's histogram carries with two values or more in the incident window. Per tenant and per SLO
the incident caused (:mod:`perfkit.analyses.impact`), from the same buckets split by that label
(``sum by (le, <label>) (increase(<signal>_bucket[window]))``): the attainment in both windows, the
requests in the window and over the bound, and the tenant's share of the SLO's misses. Engines do
not label by tenant themselves (vLLM, SGLang and TensorRT-LLM label by model); a gateway in front or a
relabelling does (LiteLLM's ``team``, ``api_key_alias``, ``end_user``).

At most :data:`MAX_TENANTS` tenants are kept, those with the most requests over; a label value is
text from outside and is cut to :data:`MAX_NAME` characters (the report escapes it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from perfkit.analyses.slo import share_under
from perfkit.core.frames import Window
from perfkit.engine import ops
from perfkit.engine import signals as S

TENANT_LABELS = ("tenant", "tenant_id", "team", "team_alias", "customer", "org", "organization", "api_key_alias", "end_user")  # fmt: skip
"""Labels that name a tenant, most specific first (LiteLLM's gateway metrics carry ``team``,
``team_alias``, ``api_key_alias``, ``end_user``; relabelled fleets ``tenant`` or ``customer``)."""
MAX_TENANTS = 20
MAX_NAME = 80
CONCENTRATED = 0.5
"""A tenant holding at least half an SLO's misses is where the impact fell, and is named first."""


@dataclass(frozen=True)
class TenantImpact:
    """One tenant's part of one SLO's impact."""

    tenant: str
    metric: str  # ttft_p95, as in incident.yaml without its unit
    label: str  # "TTFT p95"
    counted: str  # requests | gaps (ITL)
    incident_attainment: float | None
    baseline_attainment: float | None
    requests: float  # observations in the incident window
    over: float  # of them over the bound
    share_of_over: float | None  # of the SLO's observations over the bound, this tenant's

    def as_dict(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "metric": self.metric,
            "label": self.label,
            "counted": self.counted,
            "incident_attainment": self.incident_attainment,
            "baseline_attainment": self.baseline_attainment,
            "requests": round(self.requests),
            "over": round(self.over),
            "share_of_over": None if self.share_of_over is None else round(self.share_of_over, 4),
        }


def tenant_label(engine: S.Engine, signal: str, window: Window) -> str | None:
    """The first of :data:`TENANT_LABELS` that ``signal``'s histogram carries with two values or more
    (one query, grouped by them all: each label's values are those of its column)."""
    res = S.resolve(engine, signal)
    if res.metric is None:
        return None
    expr = ops.sum_by(ops.increase(res.histogram("_count"), window.seconds), *TENANT_LABELS)
    frame = engine.instant(expr, window.end)
    return next(
        (
            label
            for label in TENANT_LABELS
            if label in frame.columns and frame[label].drop_nulls().n_unique() >= 2
        ),
        None,
    )


def by_tenant(
    engine: S.Engine,
    slos: Sequence[Any],
    window: Window,
    baseline: Window | None,
    queries: list[str] | None = None,
) -> tuple[str | None, list[TenantImpact]]:
    """The tenant label and, per SLO the incident caused (``caused`` set, judged on its histogram),
    each tenant's part of it, most requests over first (module docstring)."""
    caused = [s for s in slos if getattr(s, "caused", "") and s.how == "histogram"]
    label = next((found for s in caused if (found := tenant_label(engine, s.signal, window))), None)
    if label is None:
        return None, []
    out: list[TenantImpact] = []
    for s in caused:
        now = S.window_buckets_by(engine, s.signal, window, label, queries) or {}
        before = (
            (S.window_buckets_by(engine, s.signal, baseline, label) or {}) if baseline is not None else {}
        )
        rows = []
        for who, buckets in now.items():
            share = share_under(buckets, s.slo_s)
            if share.share is None or not share.total:
                continue
            base = share_under(before[who], s.slo_s).share if who in before else None
            over = (1.0 - share.share) * share.total
            rows.append((who, share.share, base, share.total, over))
        total_over = sum(r[4] for r in rows)
        for who, inc, base, n, over in sorted(rows, key=lambda r: -r[4])[:MAX_TENANTS]:
            name = who[:MAX_NAME] or "(no label)"
            share_of = over / total_over if total_over > 0 else None
            out.append(TenantImpact(name, s.metric, s.label, s.counted, inc, base, n, over, share_of))
    return label, out


def concentration(label: str | None, tenants: Sequence[TenantImpact]) -> list[str]:
    """One sentence per SLO on where its misses fell: the tenant holding most of them and how it
    fared against the rest, or that they are spread."""
    if label is None:
        return []
    out = []
    for metric in dict.fromkeys(t.metric for t in tenants):
        rows = [t for t in tenants if t.metric == metric]
        top = rows[0]
        if top.share_of_over is None:
            continue
        rest_n = sum(t.requests for t in rows[1:])
        rest_over = sum(t.over for t in rows[1:])
        rest = (
            f"{100 * (1 - rest_over / rest_n):.1f} % for the other {len(rows) - 1}"
            if rest_n
            else "no other tenant"
        )
        within = f"{100 * (top.incident_attainment or 0):.1f} % within it"
        if top.baseline_attainment is not None:
            within += f" (baseline {100 * top.baseline_attainment:.1f} %)"
        if top.share_of_over >= CONCENTRATED:
            out.append(
                f"{top.label} by {label}: `{top.tenant}` holds {top.share_of_over:.0%} of the ~{top.over / top.share_of_over:,.0f} "
                f"{top.counted} over ({top.over:,.0f} of its {top.requests:,.0f}), {within} against {rest}"
            )
        else:
            out.append(
                f"{top.label} by {label}: the misses are spread over {len(rows)} tenants; the largest part, "
                f"`{top.tenant}`'s, is {top.share_of_over:.0%} ({within})"
            )
    return out
