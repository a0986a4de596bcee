"""Issue 36's done-when: every embedded incident's postmortem reads as an expert would write it. Each
runbook section runs in-process on each bundle of data/scenarios (the fix is not replayed: its own
tests cover it), and everything a postmortem shows is read: every finding's summary, table and
missing evidence, and the postmortem model's prose. None may hold non-English text, an unknown host
written as "?", an unfilled "{placeholder}", rank gaps in the triage table, or a figure with no data."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from runbook_calls import section_calls

import perfkit.app.runbooks.inference as rb

SCENARIOS = sorted(
    p for p in (Path(__file__).resolve().parents[2] / "data" / "scenarios").iterdir() if p.is_dir()
)
NOT_ENGLISH = re.compile(r"[\u3000-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uff00-\uffef]")
PLACEHOLDER = re.compile(r"\{(kv_knobs|batch_knobs|chunking|oom_knobs|waiting)\}")
pytestmark = pytest.mark.slow  # every embedded bundle, every section: about a minute


def _sections(bundle: Path) -> list:
    ctx = rb.open_incident(str(bundle))
    assert ctx.error is None, ctx.error
    ctx.params["predict_fix"] = False
    training = ctx.engine.has("train_step_duration_seconds")
    calls = section_calls("training_step" if training else "inference_latency")
    out = []
    for module, name in calls:
        section = getattr(module, name)(ctx)
        out += [section.finding, *section.extra_findings]
    return out


def _has_data(figure: dict) -> bool:
    for trace in figure.get("data") or []:
        for axis in ("y", "x", "values", "z"):
            values = trace.get(axis)
            if isinstance(values, list | tuple) and any(v is not None for v in values):
                return True
            if isinstance(values, dict) and values.get("bdata"):  # plotly's binary arrays
                return True
    return False


@pytest.mark.parametrize("bundle", SCENARIOS, ids=[p.name for p in SCENARIOS])
def test_the_postmortem_reads_as_written_for_people(bundle):
    findings = _sections(bundle)
    for f in findings:
        text = json.dumps({"summary": f.summary, "table": f.table, "missing": f.missing}, ensure_ascii=False, default=str)  # fmt: skip
        if f.key == "postmortem":
            text += json.dumps(f.data, ensure_ascii=False, default=str)
        assert not NOT_ENGLISH.search(text), (f.key, NOT_ENGLISH.search(text))
        assert "hosts ?" not in text, f.key
        assert not PLACEHOLDER.search(text), (f.key, PLACEHOLDER.search(text))
        if f.figure is not None:
            assert _has_data(f.figure), f"{f.key}: a figure with no data"
        if f.key == "triage" and f.table:
            ranks = [row[f.table["columns"].index("rank")] for row in f.table["rows"]]
            assert ranks == list(range(1, len(ranks) + 1)), ranks
