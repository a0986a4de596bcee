"""No output contradicts another (issue 21): a check over the triage outputs of every embedded scenario.

Three kinds of contradiction an engineer met in the demo and the drills:
- a stage the per-stage breakdown says owns the tail, called normal in the confirmed cause's text;
- evidence the bundle holds (logs, deploy events) reported as missing;
- rows that cannot apply to the workload (training rows on a server) listed, or their gaps reported;
- a ranking that puts a direction its verification ruled out above one it left open, or a row about the
  other workload first.
"""

from __future__ import annotations

import csv
import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from perfkit.analyses.stages import breakdown
from perfkit.app.cli.console import triage_table
from perfkit.app.runner.embedded import scenario_dirs
from perfkit.engine.local import LocalEngine
from perfkit.sources.bundle import load_bundle
from perfkit.triage.table import triage_evidence
from perfkit.triage.workload_notes import about_rows

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
BUNDLES = scenario_dirs(SCENARIOS)


def _normal_clause(why: str) -> str:
    """The part of a verdict's text that says what is normal (``... while X, Y and Z are normal``)."""
    m = re.search(r"while (.*?) (?:is|are) normal", why)
    return m.group(1) if m else ""


def _deploys(bundle: Path) -> int:
    path = bundle / "events.csv"
    if not path.is_file():
        return 0
    rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"))))
    return sum(1 for r in rows if "deploy" in (r.get("kind") or r.get("type") or "").lower())


@pytest.mark.parametrize("bundle", BUNDLES, ids=[b.name for b in BUNDLES])
def test_no_two_statements_contradict(bundle):
    b = load_bundle(bundle)
    engine = LocalEngine(b.store)
    result = triage_evidence(
        engine, b.incident, events=b.events, logs=b.logs, missing=b.missing, scope=b.scope
    )
    problems: list[str] = []

    # rows about the other workload: not listed, and their gaps are no gaps
    na = {r.row.symptom for r in result.results if not r.applies}
    problems += [
        f"gap of a row that does not apply: {m}" for m in result.missing if about_rows(m, na, result.workload)
    ]
    console = Console(record=True, width=400)
    triage_table(result, console)
    shown = console.export_text()
    problems += [
        f"{r.row.direction} listed on a {result.workload} incident"
        for r in result.results
        if not r.applies and f" {r.row.direction} " in shown
    ]

    # evidence the bundle holds is never called missing
    logs = [p for p in (bundle / "logs").glob("*") if p.is_file()] if (bundle / "logs").is_dir() else []
    if logs:
        problems += [
            f"logs read ({len(logs)} files) but: {m}" for m in result.missing if re.search(r"\blogs?\b", m)
        ]
    if _deploys(bundle):
        problems += [f"deploy events in events.csv but: {m}" for m in result.missing if "deploy" in m]

    # the ranking agrees with the verdicts (issue 35): the rows about the incident's workload first (a
    # serving incident never ranks a training row first), and among them confirmed directions first,
    # then those left open, then those ruled out
    applies = [r.applies for r in result.results]
    if applies != sorted(applies, reverse=True):
        problems.append(f"a row about the other workload ranks above one about this: {applies}")
    rank = {"confirmed": 0, "inconclusive": 1, "ruled_out": 2}
    order = [rank[r.verification.verdict] for r in result.results if r.applies]
    if order != sorted(order):
        problems.append(f"verdicts out of rank order: {[r.verification.verdict for r in result.results]}")
    top = result.top
    about = top.row.workload if top is not None else "any"
    if result.workload in ("serving", "training") and about not in (result.workload, "any"):
        problems.append(f"rank 1 is a {about} row on a {result.workload} incident")

    # a stage that owns the tail is not "normal" in a confirmed verdict's text
    if b.incident.baseline is not None and result.workload in ("serving", "mixed"):
        owner = breakdown(engine, b.incident.window, b.incident.baseline).tail_owner
        for r in result.confirmed():
            clause = _normal_clause(r.verification.why)
            if owner and re.search(rf"\b{owner}\b", clause):
                problems.append(f"{owner} owns the tail, but {r.row.direction} says: {clause} ... normal")
    assert not problems, "\n".join(problems)


def test_a_release_history_read_and_empty_is_no_gap(tmp_path):
    """Issue 21: a live drill given --release-metric said 'missing deploy events' when the metric
    showed no release in the window. A history read and empty rules the row out; none given is a gap."""
    import shutil

    from perfkit.triage.table import triage_bundle

    bundle = tmp_path / "b"
    shutil.copytree(SCENARIOS / "queueing-traffic-surge", bundle)
    (bundle / "events.csv").write_text("ts,kind,service,version,detail\n")  # read: nothing in it
    read = triage_bundle(bundle)
    row = next(r for r in read.results if r.row.direction == "release_regression")
    assert row.verification.verdict == "ruled_out" and not any("deploy events" in m for m in read.missing)
    (bundle / "events.csv").unlink()  # not given
    gap = triage_bundle(bundle)
    row = next(r for r in gap.results if r.row.direction == "release_regression")
    assert row.verification.verdict == "inconclusive" and any("deploy events" in m for m in gap.missing)
