"""The triage table as one declaration (issue 35): every row declares what the rest of perfkit reads
about it, the import-time check refuses a name that does not exist, and each consumer (ranking,
postmortem, figures, remedies, docs) has what the rows declare."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from perfkit.app.whatif.remedy import REMEDIES, TARGET, candidates
from perfkit.engine.local import LocalEngine
from perfkit.report.evidence_figures import evidence_figure
from perfkit.report.rows_doc import BEGIN, END, replace_table, rows_table
from perfkit.sources.bundle import load_bundle
from perfkit.triage.evidence import gather
from perfkit.triage.rows import EXPLAINS, ROWS, check_rows
from perfkit.triage.table import run

REPO = Path(__file__).resolve().parents[2]
SCENARIOS = REPO / "data" / "scenarios"
#: an embedded incident of each workload whose evidence holds every series its rows draw
SERVING, TRAINING = "oom-sampler-kv-full", "dataloader-starvation"


def test_the_docs_rows_table_is_the_generated_one():
    text = (REPO / "docs" / "bundle.md").read_text(encoding="utf-8")
    assert BEGIN in text and END in text
    assert replace_table(text) == text, (
        "docs/bundle.md's rows table differs from the rows' declarations: run "
        "`python -m perfkit.report.rows_doc --write docs/bundle.md`"
    )
    for row in ROWS:  # one line a row, with its ids and its deciding thresholds
        line = next(x for x in rows_table().splitlines() if x.startswith(f"| {row.symptom} |"))
        assert f"| {row.direction} |" in line and all(f"`{t}`" in line for t in row.decides)


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"decides": ("NO_SUCH_CUT",)}, "no threshold 'NO_SUCH_CUT'"),
        ({"confirms": ("VERDICT_WEIGHT",)}, "no threshold 'VERDICT_WEIGHT'"),  # a table, not a number
        ({"reads": ("no_such_quantity",)}, "no quantity 'no_such_quantity'"),
        ({"preconditions": ("moon_full",)}, "no precondition 'moon_full'"),
        ({"explains": ("cosmic_rays",)}, "explains unknown 'cosmic_rays'"),
        ({"workload": "batch"}, "workload 'batch'"),
        ({"remedy": None, "remedy_target": "ttft_p95_ms"}, "a remedy target without a remedy"),
    ],
)
def test_a_row_naming_what_does_not_exist_fails_the_check(change, named):
    bad = dataclasses.replace(ROWS[-1], **change)
    with pytest.raises(RuntimeError, match=named):
        check_rows((*ROWS[:-1], bad))


def test_two_rows_with_one_direction_fail_the_check():
    with pytest.raises(RuntimeError, match="declared twice"):
        check_rows((*ROWS, dataclasses.replace(ROWS[0], symptom="another")))


def test_every_row_declares_its_figure_action_and_what_its_verdicts_hang_on():
    check_rows(ROWS)
    for row in ROWS:
        assert row.figure is not None and row.figure.title, row.direction
        assert row.action, f"{row.direction}: no postmortem action to add"
        assert row.decides, f"{row.direction}: no deciding threshold"
        assert row.reads, f"{row.direction}: reads no named quantity"
        assert set(row.confirms).isdisjoint(row.decides), row.direction
    assert all(cause in {r.direction for r in ROWS} for cause in EXPLAINS)


def test_every_quantity_is_read_by_a_row():
    from perfkit.triage.quantities import QUANTITIES

    unread = [q for q in QUANTITIES if not any(q in r.reads for r in ROWS)]
    assert unread == [], f"quantities no row declares it reads: {unread}"


def test_every_declared_remedy_has_candidates_and_a_target():
    class Engine:  # the simulator's vLLM settings candidates read (perfkit.lab.servesim.config)
        enable_chunked_prefill = False
        long_prefill_token_threshold = 0
        gpu_memory_utilization = 0.9
        max_num_seqs = 256

    for row in ROWS:
        if row.remedy is None:
            assert row.direction not in TARGET and candidates(row.direction, Engine(), True) == []
            continue
        assert row.remedy in REMEDIES, f"{row.direction}: no what-if remedy {row.remedy!r}"
        assert TARGET[row.direction] == row.remedy_target
        tried = candidates(row.direction, Engine(), True)
        assert tried and all(c.direction == row.direction for c in tried), row.direction


@pytest.mark.parametrize("name", [SERVING, TRAINING])
def test_every_rows_figure_draws_from_an_incident_of_its_workload(name):
    b = load_bundle(SCENARIOS / name)
    engine = LocalEngine(b.store)
    ev = gather(engine, b.incident, events=b.events, logs=b.logs)
    result = run(ev)
    assert result.workload in ("serving", "training")
    span = ev.release.span
    marks = {"window": b.incident.window, "baseline": b.incident.baseline, "events": []}
    for row in ROWS:
        if row.workload not in (result.workload, "any") or row.figure is None:
            continue
        series = row.figure.series(engine, span, per_token=ev.per_token()) if row.figure.series else None
        if series is not None:
            assert any(frame.height for frame in series.values()), f"{row.direction}: every series empty"
        fig = evidence_figure(row.direction, ev, series, **marks)
        assert fig is not None, f"{row.direction}: no evidence figure"
        assert row.figure.title in fig.layout.title.text
