"""Onset-aware triage: a loose window (picked before the onset was known) gives the same verdicts as
a tight one, and the result says which span the rows judged."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from perfkit.core.frames import iso, utc
from perfkit.triage.table import triage_bundle

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"


def widened(tmp_path: Path, name: str, window: tuple[str, str], baseline: tuple[str, str]) -> Path:
    """A copy of an embedded bundle whose incident.yaml has another window and baseline."""
    out = tmp_path / name
    shutil.copytree(SCENARIOS / name, out)
    inc = yaml.safe_load((out / "incident.yaml").read_text())
    inc["window"] = dict(zip(("start", "end"), window, strict=True))
    inc["baseline"] = dict(zip(("start", "end"), baseline, strict=True))
    (out / "incident.yaml").write_text(yaml.safe_dump(inc))
    return out


def verdicts(result) -> dict[str, str]:
    return {r.row.direction: r.verification.verdict for r in result.results}


def test_the_issue_loose_window_on_dataloader_starvation(tmp_path):
    """The issue's case: the window starts 10 minutes before the relaunch (06:10-06:40, baseline
    06:01-06:09); averaging over it ruled the data pipeline out."""
    loose = widened(
        tmp_path,
        "dataloader-starvation",
        ("2026-12-01T06:10:00Z", "2026-12-01T06:40:00Z"),
        ("2026-12-01T06:01:00Z", "2026-12-01T06:09:00Z"),
    )
    result = triage_bundle(loose)
    assert result.top.row.direction == "data_pipeline"
    assert result.top.verification.verdict == "confirmed"
    judged = result.judged
    assert judged["narrowed"] and judged["start"] > "2026-12-01T06:10:00Z"
    assert result.window["start"] == "2026-12-01T06:10:00Z"  # the window as given stays reported
    assert result.to_json()["judged"] == judged


@pytest.mark.parametrize("name", ["decode-thermal-throttle", "release-regression"])
def test_a_window_opened_right_after_the_baseline_gives_the_tight_windows_verdicts(tmp_path, name):
    tight = triage_bundle(SCENARIOS / name)
    inc = yaml.safe_load((SCENARIOS / name / "incident.yaml").read_text())
    w0, w1 = utc(inc["window"]["start"]), utc(inc["window"]["end"])
    b0, b1 = utc(inc["baseline"]["start"]), utc(inc["baseline"]["end"])
    # as loose as the bundle allows: from just after the baseline to the end
    loose = widened(tmp_path, name, (iso(b1 + (w1 - w0) / 20), iso(w1)), (iso(b0), iso(b1)))
    result = triage_bundle(loose)
    top = tight.top
    assert result.top.row.direction == top.row.direction
    assert verdicts(result)[top.row.direction] == "confirmed"
    assert result.suspect_version == tight.suspect_version


def test_a_control_without_onset_judges_the_whole_window():
    result = triage_bundle(SCENARIOS / "healthy-decoy-deploy")
    assert not result.judged["narrowed"]
    assert "whole window" in result.judged["why"]
    assert not result.confirmed()
