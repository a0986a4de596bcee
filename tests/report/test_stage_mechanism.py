"""Stages that explain (issue 36, item 5): the mechanism behind the stage that grew, and no stage
owning the tail because it is the only one timed."""

from __future__ import annotations

from perfkit.analyses.stages import StageBreakdown
from perfkit.report.postmortem import _stages_text


def _stages(p95: dict[str, dict[str, float | None]], owner: str | None, missing: list[str]) -> StageBreakdown:
    return StageBreakdown(means={}, p95=p95, tail_owner=owner, ttft_owner=owner, missing=missing)


def test_queue_time_behind_whole_prompt_prefills_is_named_as_prefills_doing() -> None:
    s = _stages({"baseline": {"queue": 0.3, "prefill": 0.4, "decode": 0.05},
                 "incident": {"queue": 2.4, "prefill": 0.5, "decode": 0.05}}, "queue", [])  # fmt: skip
    text = _stages_text(s, "prefill_decode_interference")
    assert text.startswith("the queue stage owns the tail")
    assert "head-of-line blocking" in text and "prefill" in text.split(";")[-1]
    assert "head-of-line" not in _stages_text(s, "decode_efficiency")  # no mechanism claimed for others
    assert "load's doing" in _stages_text(s, "scheduler_queueing")


def test_the_only_stage_timed_owns_nothing() -> None:
    s = _stages({"baseline": {"queue": 0.3, "prefill": None, "decode": None},
                 "incident": {"queue": 2.4, "prefill": None, "decode": None}}, None,
                ["stages: prefill: no histogram", "stages: decode: no histogram"])  # fmt: skip
    text = _stages_text(s, "kv_cache_allocation")
    assert "stage owns the tail:" not in text
    assert "the only stage the engine times" in text and "300 ms → 2.40 s" in text
