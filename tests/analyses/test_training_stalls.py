"""A hung job's frozen gauges are not its step time (perfkit.analyses.training_stalls): a synthetic
exposition whose every number is known, the slow-but-running job that must not read as hung, and
the embedded NCCL fallback's 10-minute hang."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from perfkit.analyses.scaling import metrics_side
from perfkit.analyses.training_stalls import running_mean, stalls
from perfkit.app.runbooks.inference import open_incident
from perfkit.core.frames import Window
from perfkit.engine import signals as S
from perfkit.engine.local import LocalEngine
from perfkit.sources.openmetrics import parse_text

T0 = datetime(2026, 11, 12, 1, 0, tzinfo=UTC)
RANKS = range(4)
GAUGES = ("train_step_duration_seconds", "train_data_wait_seconds", "train_comm_seconds")


def _exposition(phases: list[tuple[int, float | None, float, float]], every_s: float = 15.0) -> str:
    """Every rank scraped every 15 s through ``phases`` of ``(minutes, tokens/s a rank or None for a
    hang, step s, comm s)``; in a hang the counter stands and the gauges repeat the last step's."""
    lines = {k: [f"# TYPE {k} gauge"] for k in GAUGES}
    tokens = ["# TYPE train_tokens counter"]
    total, at, last = 0.0, T0, (1.0, 0.1)
    for minutes, rate, step, comm in phases:
        for _ in range(int(minutes * 60 / 15)):
            if rate is not None:
                total += rate * 15
                last = (step, comm)
            ts = at.timestamp()
            for r in RANKS:
                lab = f'{{job="j",rank="{r}"}}'
                # a counter the exporter refreshes every ``every_s`` (a step's end)
                shown = total - (total % (rate * every_s)) if rate else total
                tokens.append(f"train_tokens_total{lab} {shown!r} {ts:.3f}")
                for name, v in zip(GAUGES, (last[0], 0.0, last[1]), strict=True):
                    lines[name].append(f"{name}{lab} {v!r} {ts:.3f}")
            at += timedelta(seconds=15)
    body = "\n".join([*tokens, *(x for v in lines.values() for x in v)])
    return body + "\n# EOF\n"


def _engine(text: str) -> LocalEngine:
    return LocalEngine(parse_text(text, require_eof=True))


def test_a_hang_is_cut_out_of_the_step_time_and_the_throughput() -> None:
    # 5 min healthy at 1 s a step, 8 min hung (the gauges frozen at 1 s), 7 min at 6 s with 5 s in
    # collectives and a sixth of the tokens: the running job's step is 6 s, not the 3.8 s a plain
    # average of the incident minutes gives
    engine = _engine(_exposition([(5, 6000.0, 1.0, 0.1), (8, None, 1.0, 0.1), (7, 1000.0, 6.0, 5.0)]))
    window = Window(T0 + timedelta(minutes=6), T0 + timedelta(minutes=20))  # the hang began before it
    spans = stalls(engine, window, step_s=1.0)
    assert len(spans) == 1
    start, end = spans[0]
    assert start == window.start
    assert abs((end - (T0 + timedelta(minutes=13))).total_seconds()) <= 15
    frame = S.gauge_series(engine, "train_step", window, 15.0, combine="avg")
    plain = float(frame["value"].mean())
    assert plain < 4.0  # what the frozen gauge made of it
    assert running_mean(frame, spans)[0] == pytest.approx(6.0, abs=0.4)
    side = metrics_side(engine, window, label="incident", gpus=4)
    assert side.step_s == pytest.approx(6.0, abs=0.4)
    assert side.shares.communication == pytest.approx(5.0 / 6.0, abs=0.06)
    assert side.tokens_per_s_per_gpu == pytest.approx(1000.0, rel=0.15)  # the hang's zeros left out
    assert any("stood still" in n for n in side.notes)


def test_a_slow_job_that_runs_is_not_a_hang() -> None:
    # a 90 s step: the counter moves once every 6 scrapes, never standing 5 steps
    engine = _engine(_exposition([(20, 100.0, 90.0, 10.0)], every_s=90.0))
    window = Window(T0, T0 + timedelta(minutes=20))
    assert stalls(engine, window, step_s=90.0) == []
    assert stalls(engine, window) == []  # the 2-minute floor alone: 90 s is under it
    # a 2 s step whose exporter refreshes the counter at each log, every 100 steps (200 s, over the
    # 2-minute floor): the counter holds for minutes while the job runs; no minute of it is a hang
    logged = _engine(_exposition([(20, 500.0, 2.0, 0.2)], every_s=200.0))
    assert stalls(logged, window, step_s=2.0) == []
    side = metrics_side(logged, window, label="logged", gpus=4)
    assert side.tokens_per_s_per_gpu == pytest.approx(500.0, rel=0.2)  # no zero minute left out
    # a healthy 1 s job with no train_tokens_total: nothing to tell a hang by, nothing cut
    healthy = _engine(_exposition([(10, 5000.0, 1.0, 0.1)]))
    assert stalls(healthy, Window(T0, T0 + timedelta(minutes=10)), 1.0) == []


def test_the_embedded_nccl_hang_reads_its_steady_state() -> None:
    ctx = open_incident("nccl-socket-fallback")
    window = ctx.incident.window
    spans = stalls(ctx.engine, window, step_s=1.0)
    assert len(spans) == 1 and 8 * 60 <= (spans[0][1] - spans[0][0]).total_seconds() <= 11 * 60
    side = metrics_side(ctx.engine, window, label="incident", gpus=16)
    baseline = metrics_side(ctx.engine, ctx.incident.baseline, label="baseline", gpus=16)
    # the socket fallback's step after the relaunch is ~6 s against ~1 s: over 5x, not the 3.9x the
    # frozen minutes made of it; and over three quarters of it in collectives
    assert side.step_s / baseline.step_s > 5.0
    assert side.shares.communication > 0.75


def test_what_changed_draws_the_hang_as_a_gap_and_finds_its_change_points_as_exported() -> None:
    """The step-time chart leaves the minutes the job stood still undrawn (a frozen gauge is not a
    step time) and says so; the change points are read from the series as it was exported."""
    from perfkit.analyses.release import correlate
    from perfkit.report.sections import changes_section

    ctx = open_incident("nccl-socket-fallback")
    inc = ctx.incident
    rel = correlate(ctx.engine, inc.window, inc.baseline, ctx.events)
    assert len(rel.stalled) == 1
    a, b = rel.stalled[0]
    exported = rel.series["step time"]
    frozen = exported.filter((exported["ts"] > a) & (exported["ts"] <= b))
    assert frozen.height >= 5 and frozen["value"].null_count() == 0  # the gauge went on answering
    section = changes_section(rel, inc, [])
    (trace,) = section.figure.data
    drawn = dict(zip(trace.x, trace.y, strict=True))
    inside = [drawn[t.isoformat().replace("+00:00", "Z")] for t in frozen["ts"]]
    assert inside and all(v is None for v in inside)
    assert "stood still" in section.finding.figure_caption
