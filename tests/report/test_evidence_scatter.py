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
