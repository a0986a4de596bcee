"""A relationship is drawn as one (issue 36, item 6): the decode row's evidence is TPOT against the
batch size, one point per time step, the baseline's points apart from the incident's; on the thermal
throttle the incident's points sit above the baseline's at the same batch sizes (slower, not busier)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from perfkit.engine.local import LocalEngine
from perfkit.report.evidence_figures import evidence_figure
from perfkit.sources.bundle import load_bundle
from perfkit.triage.evidence import gather
from perfkit.triage.rows import BY_DIRECTION

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"


def test_tpot_against_the_batch_is_a_scatter_that_shows_slower_at_the_same_batch() -> None:
    b = load_bundle(SCENARIOS / "decode-thermal-throttle")
    engine = LocalEngine(b.store)
    ev = gather(engine, b.incident, events=b.events, logs=b.logs)
    figure = BY_DIRECTION["decode_efficiency"].figure
    assert figure is not None and figure.series is not None
    series = figure.series(engine, ev.release.span, per_token=ev.per_token())
    fig = evidence_figure("decode_efficiency", ev, series, b.incident.window, b.incident.baseline, [])
    assert fig.layout.xaxis.title.text == "running requests (batch)"
    assert fig.layout.yaxis.title.text.endswith("p50 (ms)")
    traces = {t.name.split(" (")[0]: t for t in fig.data}
    assert set(traces) == {"baseline", "incident"} and all(t.mode == "markers" for t in fig.data)
    base, inc = traces["baseline"], traces["incident"]
    # at the batch sizes both windows ran, the incident's tokens take longer
    shared = set(np.round(base.x)) & set(np.round(inc.x))
    assert len(shared) >= 5

    def at_shared(side: object) -> list[float]:
        return [y for x, y in zip(side.x, side.y, strict=True) if round(x) in shared]  # type: ignore[attr-defined]

    assert np.median(at_shared(inc)) / np.median(at_shared(base)) > 1.5


def test_long_prompts_against_stalls_are_drawn_over_the_baseline_too() -> None:
    """The interference claim is "against a baseline without either": its chart draws the baseline's
    bins beside the incident's, marks the baseline, and its line does not bridge the time between."""
    from datetime import datetime

    b = load_bundle(SCENARIOS / "p95-prefill-interference")
    ev = gather(LocalEngine(b.store), b.incident, events=b.events, logs=b.logs)
    base_w, inc_w = b.incident.baseline, ev.incident.window
    assert base_w is not None
    fig = evidence_figure("prefill_decode_interference", ev, None, inc_w, base_w, [])
    bars, line = fig.data

    def side(trace: object, w: object) -> list[float]:
        return [
            y
            for x, y in zip(trace.x, trace.y, strict=True)  # type: ignore[attr-defined]
            if y is not None and w.start <= datetime.fromisoformat(x) <= w.end  # type: ignore[attr-defined]
        ]

    # the baseline's bins are there, with few long prompts and few stalls; the incident's have many
    assert len(side(line, base_w)) >= 10 and len(side(bars, base_w)) >= 10
    assert sum(side(bars, inc_w)) > 5 * sum(side(bars, base_w))
    assert sum(side(line, inc_w)) > 5 * sum(side(line, base_w))
    assert None in line.y and None not in bars.y  # a break in the line, none among the bars
    assert any(s.x0 == base_w.start.isoformat().replace("+00:00", "Z") for s in fig.layout.shapes)
