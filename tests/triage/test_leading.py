"""Confidence that means something (issue 27): a confirmation decided by a cut within 5 % of its
cut-off is leading, not confirmed; a confirmed verdict states its closest cut. And (issue 35) verdicts
decided by their deciding evidence: a confirmatory cut within its noise is weighed against how far
the deciding cuts are past theirs, not taken as a veto."""

from __future__ import annotations

import pytest

from perfkit.triage import thresholds as T
from perfkit.triage.row_types import Cut, Detection, Verification, at_least, at_most, weigh
from perfkit.triage.row_types import Test as Outcome
from perfkit.triage.rows import BY_DIRECTION
from perfkit.triage.table import closest_cut, settled

TAIL = BY_DIRECTION["prefill_decode_interference"]  # MEDIAN_FINE_RATIO among what confirms it


def _case(value: float, cutoff: float) -> tuple[Detection, Verification]:
    det = Detection(True, 0.8, {}, cuts=[Cut("TAIL_RATIO", 3.0, 1.5, True)])
    ver = Verification(
        "confirmed", "ITL stalls follow long prompts", {"r": 0.6}, [Cut("CORR_CONFIRM", value, cutoff, True)]
    )
    return det, ver


@pytest.mark.parametrize(("value", "leading"), [(0.505, True), (0.52, True), (0.53, False), (0.9, False)])
def test_a_confirmation_within_the_margin_is_leading(value, leading):
    det, ver = _case(value, 0.5)
    out = settled(TAIL, det, ver)
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
    assert settled(TAIL, det, ruled) is ruled
    bare = Verification("confirmed", "yes", {})
    assert settled(TAIL, Detection(True, 1.0, {}), bare) is bare


def _weighed_case(median: float, corr: float) -> tuple[Detection, Verification]:
    """The interference row with its "median as usual" cut at ``median`` (cut-off 1.3) and the
    correlation at ``corr`` (cut-off 0.5); stalls 28x the baseline against the 3x cut."""
    det = Detection(
        True,
        0.9,
        {},
        cuts=[
            Cut("STALL_RISE", 28.0, 3.0, True),
            Cut("MEDIAN_FINE_RATIO", median, 1.3, median <= 1.3),
        ],
    )
    ver = Verification(
        "confirmed", "ITL stalls follow long prompts", {}, [Cut("CORR_CONFIRM", corr, 0.5, True)]
    )
    return det, ver


def test_a_confirmatory_cut_within_its_noise_is_outweighed_by_evidence_far_past_its_cuts():
    det, ver = _weighed_case(1.29, 0.96)  # the median 0.8 % from its cut, r = 0.96
    out = settled(TAIL, det, ver)
    assert out.verdict == "confirmed"
    assert out.why.startswith("confirmed; the confirmatory cut MEDIAN_FINE_RATIO 1.29 against 1.3 was 0.8%")
    assert "outweighed by the deciding evidence" in out.why and "CORR_CONFIRM 0.96 against 0.5" in out.why
    weighed = out.numbers["weighed"]
    assert [c["name"] for c in weighed["within_noise"]] == ["MEDIAN_FINE_RATIO"]
    assert {c["name"] for c in weighed["outweighed_by"]} == {"STALL_RISE", "CORR_CONFIRM"}


def test_a_confirmatory_cut_within_its_noise_leaves_a_thin_case_leading():
    det, ver = _weighed_case(1.29, 0.62)  # r = 0.62 is only 24 % past its cut: not far enough
    out = settled(TAIL, det, ver)
    assert out.verdict == "inconclusive" and out.numbers["leading"] is True
    assert "MEDIAN_FINE_RATIO" in out.why and "not far enough past its cuts" in out.why


def test_a_confirmatory_cut_clear_of_its_noise_changes_nothing():
    det, ver = _weighed_case(1.1, 0.62)
    assert settled(TAIL, det, ver) is ver


def test_the_same_cut_deciding_another_row_is_held_to_the_margin_rule():
    # MEDIAN_FINE_RATIO decides the deploy row (a tail-only shift while long prompts rose), not confirms
    det, ver = _weighed_case(1.29, 0.96)
    out = settled(BY_DIRECTION["release_regression"], det, ver)
    assert out.verdict == "inconclusive" and out.why.startswith("leading, not confirmed: MEDIAN_FINE_RATIO")


@pytest.mark.parametrize(
    ("median", "deciding", "passes"),
    [
        (1.31, 3.0, True),  # missed by 0.8 %, the deciding cut 100 % past: no veto
        (1.31, 1.6, False),  # missed by 0.8 %, the deciding cut only 7 % past: the miss stands
        (1.40, 3.0, False),  # missed by 7.7 %: beyond its noise, a real veto
        (1.20, 1.6, True),  # passed: nothing to weigh
    ],
)
def test_weigh_lets_a_miss_within_noise_pass_only_against_strong_evidence(median, deciding, passes):
    out = weigh(at_most(median, "MEDIAN_FINE_RATIO"), at_least(deciding, "TAIL_RATIO"))
    assert out.ok is passes
    assert [c.name for c in out.cuts] == ["MEDIAN_FINE_RATIO"]  # the cut is kept, close or not


def test_weigh_needs_measured_deciding_evidence():
    miss = at_most(1.31, "MEDIAN_FINE_RATIO")
    assert not weigh(miss, Outcome(True))  # nothing measured decided: nothing to outweigh with
    assert not weigh(miss, at_least(1.0, "TAIL_RATIO"))  # the deciding evidence itself failed
