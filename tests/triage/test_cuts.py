"""The record of threshold comparisons (row_types.Cut and its helpers): which comparisons decided an
outcome, and how far each was from its cut-off."""

from __future__ import annotations

import math

import pytest

from perfkit.triage import thresholds as T
from perfkit.triage.row_types import (
    ABSENT,
    Cut,
    all_of,
    any_of,
    at_least,
    at_most,
    below,
    cuts_of,
    negate,
)


def test_margin_is_the_relative_distance_to_the_cutoff():
    assert Cut("TAIL_RATIO", 1.8, 1.5, True).margin == pytest.approx(0.2)
    assert Cut("TAIL_RATIO", 1.2, 1.5, False).margin == pytest.approx(0.2)
    assert Cut("X", -3.0, -2.0, False).margin == pytest.approx(0.5)  # |cutoff| in the denominator
    assert Cut("X", 0.1, 0.0, True).margin == math.inf
    assert Cut("X", 0.0, 0.0, False).margin == 0.0


def test_a_comparison_reads_its_cutoff_from_thresholds_and_records_it():
    t = at_least(1.92, "TAIL_RATIO")
    assert t and t.cuts == (Cut("TAIL_RATIO", 1.92, T.TAIL_RATIO, True),)
    f = below(0.6, "PREFILL_SHARE_RULE_OUT")
    assert not f and f.cuts[0].cutoff == T.PREFILL_SHARE_RULE_OUT and f.cuts[0].passed is False
    # a cut-off derived from a threshold (here the threshold itself, passed explicitly) keeps its name
    d = at_most(0.5, "KV_CALM_FRAC", cutoff=0.4)
    assert not d and d.cuts == (Cut("KV_CALM_FRAC", 0.5, 0.4, False),)


def test_a_missing_value_is_false_and_decides_nothing():
    t = at_least(None, "TAIL_RATIO")
    assert t == ABSENT and not t and t.cuts == ()
    assert not at_least(float("nan"), "TAIL_RATIO")


def test_names_must_be_thresholds():
    with pytest.raises(KeyError, match="NO_SUCH_THRESHOLD"):
        at_least(1.0, "NO_SUCH_THRESHOLD")
    with pytest.raises(KeyError):
        at_least(1.0, "NO_SUCH_THRESHOLD", cutoff=2.0)  # an explicit cut-off still needs a real name
    with pytest.raises(KeyError):
        at_least(1.0, "ramp")  # a function of the module is not a threshold


def test_or_is_decided_by_its_most_robust_true_comparison_or_all_when_false():
    a, b, c = at_least(3.0, "TAIL_RATIO"), at_least(1.0, "TAIL_RATIO"), at_least(1.55, "TAIL_RATIO")
    true = any_of(c, b, a)
    # b, false, did not decide; c passes by 3 %, but the outcome holds while a (100 % past) does
    assert true and [x.value for x in true.cuts] == [3.0]
    assert [x.value for x in any_of(c, b).cuts] == [1.55]  # the only true one: a close call stays one
    false = any_of(b, at_least(1.1, "TAIL_RATIO"))
    assert not false and [x.value for x in false.cuts] == [1.0, 1.1]


def test_and_keeps_the_false_comparisons_or_all_when_true():
    a, b = at_least(3.0, "TAIL_RATIO"), at_most(2.0, "MEDIAN_FINE_RATIO")
    false = all_of(a, b)
    assert not false and [x.name for x in false.cuts] == ["MEDIAN_FINE_RATIO"]
    true = all_of(a, at_most(1.0, "MEDIAN_FINE_RATIO"))
    assert true and [x.name for x in true.cuts] == ["TAIL_RATIO", "MEDIAN_FINE_RATIO"]
    # two false: decided by the one further from flipping (5.0 is far past 1.3; 1.4 is near 1.5)
    both = all_of(at_least(1.4, "TAIL_RATIO"), at_most(5.0, "MEDIAN_FINE_RATIO"))
    assert not both and [x.name for x in both.cuts] == ["MEDIAN_FINE_RATIO"]
    # nested: (a or b) and c, where c is false: only c decided
    assert [x.name for x in all_of(any_of(a, b), b).cuts] == ["MEDIAN_FINE_RATIO"]


def test_negation_and_collection_keep_the_cuts():
    t = at_least(3.0, "TAIL_RATIO")
    n = negate(t)
    assert not n and n.cuts == t.cuts
    assert cuts_of(t, n, at_most(1.0, "MEDIAN_FINE_RATIO")) == [
        *t.cuts,
        Cut("MEDIAN_FINE_RATIO", 1.0, T.MEDIAN_FINE_RATIO, True),
    ]
