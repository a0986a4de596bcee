"""One why, said whole once (issue 36, item 8 of Why: "the same 400-character why in four sections"):
the confirmed direction's reasoning is whole under Root-cause direction; the summary and the triage
trail carry its first clauses and point there."""

from __future__ import annotations

from pathlib import Path

import perfkit.app.runbooks.inference as rb
from perfkit.report.postmortem import BRIEF_CHARS, IN_FULL, brief

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"


def test_brief_cuts_at_a_clause_else_a_word_never_inside_a_parenthesis() -> None:
    short = "6 NCCL warnings/timeouts in the window; exposed communication 82% of the step"
    assert brief(short) == (short, False)
    clauses = "a" * 120 + "; " + "b" * 60 + "; " + "c" * 100
    assert brief(clauses) == ("a" * 120 + "; " + "b" * 60 + " …", True)
    # the loss row's why cut at 200: at its last comma, not inside "not the data"
    loss = (
        "on the same 10 steps "
        + "x" * 140
        + ": the optimisation changed (LR, warmup, data order), not the data"
    )
    assert brief(loss)[0] == "on the same 10 steps " + "x" * 140 + ": the optimisation changed …"
    nested = "the token is slow " + "(" + "x " * 120 + ")" + " and more"
    said, cut = brief(nested)
    assert cut and said == "the token is slow …" and len(said) <= BRIEF_CHARS + 2


def test_the_decode_why_is_whole_once_in_the_postmortem_model() -> None:
    ctx = rb.open_incident(str(SCENARIOS / "decode-thermal-throttle"))
    for key in ("scope", "changes", "baseline", "impact", "stages", "triage"):
        getattr(rb, key)(ctx)
    model = rb.findings(ctx).finding.data
    why = ctx.results["triage"].confirmed()[0].verification.why
    assert len(why) > BRIEF_CHARS  # a long one, as the expert read
    assert why in model["root_cause"]
    assert why not in model["summary"] and IN_FULL in model["summary"]
    trail = next(r for r in model["triage_checked"] if r["verdict"] == "confirmed")
    assert why not in trail["why"] and trail["why"].startswith(brief(why)[0])
