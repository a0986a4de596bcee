"""Confidence that means something (issue 27): a confirmation decided by a cut within 5 % of its
cut-off is leading, not confirmed; a confirmed verdict states its closest cut."""

from __future__ import annotations

import pytest

from perfkit.triage import thresholds as T
from perfkit.triage.row_types import Cut, Detection, Verification
from perfkit.triage.table import closest_cut, settled


def _case(value: float, cutoff: float) -> tuple[Detection, Verification]:
    det = Detection(True, 0.8, {}, cuts=[Cut("TAIL_RATIO", 3.0, 1.5, True)])
    ver = Verification(
        "confirmed", "ITL stalls follow long prompts", {"r": 0.6}, [Cut("CORR_CONFIRM", value, cutoff, True)]
    )
    return det, ver


@pytest.mark.parametrize(("value", "leading"), [(0.505, True), (0.52, True), (0.53, False), (0.9, False)])
def test_a_confirmation_within_the_margin_is_leading(value, leading):
    det, ver = _case(value, 0.5)
    out = settled(det, ver)
    margin = abs(value - 0.5) / 0.5
    assert (margin < T.CONFIRM_MARGIN) == leading
    if leading:
        assert out.verdict == "inconclusive" and out.numbers["leading"] is True
        assert out.why.startswith("leading, not confirmed: CORR_CONFIRM decided it")
        assert out.why.endswith("ITL stalls follow long prompts")
    else:
        assert out is ver
    assert closest_cut(det, ver).name == "CORR_CONFIRM"


def test_other_verdicts_and_rows_without_cuts_are_left_alone():
    det, ver = _case(0.501, 0.5)
    ruled = Verification("ruled_out", "no", {}, ver.cuts)
    assert settled(det, ruled) is ruled
    bare = Verification("confirmed", "yes", {})
    assert settled(Detection(True, 1.0, {}), bare) is bare
