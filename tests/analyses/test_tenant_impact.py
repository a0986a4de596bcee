"""Impact per tenant (perfkit.analyses.tenant_impact): a fleet whose histograms carry a tenant label,
every count of it known by construction, one tenant whose long prompts breach the TTFT SLO for
itself; and the same fleet without the label, where nothing is split."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from perfkit.analyses.impact import assess
from perfkit.analyses.slo import attainment
from perfkit.core.frames import Window
from perfkit.engine.local import LocalEngine
from perfkit.report.postmortem import _impact_sentence
from perfkit.sources.openmetrics import parse_text

T0 = datetime(2026, 12, 7, 3, 0, tzinfo=UTC)
EDGES = ("0.5", "1.0", "2.5", "5.0", "+Inf")
FAMILY = "vllm:time_to_first_token_seconds"
SCRAPES = 160  # 40 minutes at 15 s: the baseline the first 20, the incident the last 20
HOSTILE = "evil`|<b>" + "x" * 200


def _per_scrape(tenant: str, incident: bool) -> dict[str, int]:
    """Requests a scrape adds to each bucket (not cumulative over edges): 4 a scrape for everyone;
    in the incident, 3 of batch-rag's 4 land in (2.5, 5] s, and the hostile tenant's 1 in (1, 2.5]."""
    if incident and tenant == "batch-rag":
        return {"0.5": 1, "5.0": 3}
    if incident and tenant == HOSTILE:
        return {"0.5": 3, "2.5": 1}
    return {"0.5": 4}


def _exposition(label: str | None) -> str:
    tenants = ("chat", "search", "batch-rag", HOSTILE)
    lines = [f"# TYPE {FAMILY} histogram"]
    totals = {t: dict.fromkeys(EDGES, 0) for t in tenants}
    for k in range(SCRAPES):
        ts = (T0 + timedelta(seconds=15 * k)).timestamp()
        for t in tenants:
            for edge, n in _per_scrape(t, k >= SCRAPES // 2).items():
                for e in EDGES[EDGES.index(edge) :]:  # cumulative: every edge at or above
                    totals[t][e] += n
            tag = f',{label}="{t}"' if label else f',replica="{tenants.index(t)}"'
            for e in EDGES:
                lines.append(f'{FAMILY}_bucket{{model_name="m"{tag},le="{e}"}} {totals[t][e]} {ts:.3f}')
            lines.append(f'{FAMILY}_count{{model_name="m"{tag}}} {totals[t]["+Inf"]} {ts:.3f}')
            lines.append(f'{FAMILY}_sum{{model_name="m"{tag}}} 0 {ts:.3f}')
    return "\n".join(lines) + "\n# EOF\n"


def _impact(label: str | None):
    engine = LocalEngine(parse_text(_exposition(label), require_eof=True))
    baseline = Window(T0 + timedelta(minutes=2), T0 + timedelta(minutes=19))
    window = Window(T0 + timedelta(minutes=22), T0 + timedelta(minutes=39))
    slo = {"ttft_p95_s": 1.5}
    return assess(engine, window, baseline, slo, attainment(engine, window, baseline, slo))


def test_the_misses_are_split_by_the_tenant_label_and_fall_on_one_tenant() -> None:
    impact = _impact("team")
    assert impact.tenant_label == "team"
    rows = {t.tenant: t for t in impact.tenants}
    top = impact.tenants[0]
    assert top.tenant == "batch-rag"
    # batch-rag: 3 of every 4 requests over 1.5 s in the incident, none in the baseline
    assert top.incident_attainment == pytest.approx(0.25, abs=0.02)
    assert top.baseline_attainment == pytest.approx(1.0)
    # the hostile tenant: 1 of 4 in (1, 2.5] s, interpolated at 1.5 s: a third of it over
    hostile = rows[HOSTILE[:80]]
    assert hostile.over == pytest.approx(hostile.requests / 4 * (2.5 - 1.5) / 1.5, rel=0.05)
    assert top.share_of_over == pytest.approx(top.over / (top.over + hostile.over), rel=1e-6)
    assert top.share_of_over > 0.8 and rows["chat"].over == pytest.approx(0.0)
    text = _impact_sentence(impact)
    assert "TTFT p95 by team: `batch-rag` holds" in text and "for the other 3" in text
    assert len(HOSTILE) > 80 and HOSTILE not in str(impact.as_dict())  # cut to 80 characters
    data = impact.as_dict()
    assert data["tenant_label"] == "team" and data["tenants"][0]["tenant"] == "batch-rag"


def test_without_a_tenant_label_nothing_is_split() -> None:
    impact = _impact(None)  # the same requests, labelled by replica only
    assert impact.tenant_label is None and impact.tenants == []
    assert any(s.caused for s in impact.slos)  # the breach is still there, fleet-wide
    assert "holds" not in _impact_sentence(impact) and "tenants" not in _impact_sentence(impact)
