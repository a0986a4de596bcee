"""Mutation check (issue 28): does the suite fail when the code it guards is wrong?

    python tests/mutation/run_mutations.py [--only NAME,NAME] [--list] [--keep] [--gaps]

Each mutation below is NAMED: a file, a snippet of its source, the wrong version of that snippet
(a flipped comparison, a cut-off moved past the physics, a unit lost, a pacing that drifts), and the
tests that must catch it. The script copies the repository (its tracked and unignored files, as
``.ci/run`` does) into a temporary folder ONCE, checks that each mutation's tests pass there as they
are, then for each mutation writes the wrong snippet into the COPY, runs only its tests (with the copy
first on PYTHONPATH), and restores the file. The working tree is never written.

Outcomes: ``killed`` (the tests failed: good), ``SURVIVED`` (they passed on wrong code), ``SNIPPET
NOT FOUND`` (the code moved on: update the mutation), ``BASELINE FAILS`` (the tests fail without the
mutation, so they prove nothing here). Exit status 1 when any outcome is not ``killed``.

It lives with the tests, not in ``benchmarks/``: it measures the test suite, not perfkit, and it is
run by ``make test-all`` beside the tests (``benchmarks/`` measures speed and accuracy of perfkit).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RUN_TIMEOUT_S = 240  # one mutation's tests; a hang is reported as a kill by timeout


@dataclass(frozen=True)
class Mutation:
    name: str
    file: str  # relative to the repository root
    original: str  # must occur exactly once in the file
    mutated: str
    tests: tuple[str, ...]  # pytest node ids or files, relative to the root
    why: str  # what a user would get if this shipped


M = Mutation
GATE = "tests/loadgen/test_gate.py"
LIBRARY = "tests/triage/test_scenario_library.py::test_triage_matches_the_answer_key_with_margin"
MUTATIONS: list[Mutation] = [
    # -- the triage detectors and their thresholds -------------------------------------------------
    M(
        "queue-share-cut-past-the-surge",
        "perfkit/triage/thresholds.py",
        "QUEUE_SHARE_CONFIRM = 0.5 ",
        "QUEUE_SHARE_CONFIRM = 0.97 ",
        ("tests/test_cli.py::test_triage_table_for_people",),
        "a scheduler queue holding 96 % of TTFT would no longer be confirmed",
    ),
    M(
        "verdict-ranks-swapped",
        "perfkit/triage/table.py",
        'VERDICT_RANK = {"confirmed": 0, "inconclusive": 1, "ruled_out": 2}',
        'VERDICT_RANK = {"confirmed": 0, "inconclusive": 2, "ruled_out": 1}',
        (
            "tests/triage/test_coherence.py::test_no_two_statements_contradict[surge-overlapping-deploy]",
            "tests/triage/test_coherence.py::test_no_two_statements_contradict[decode-slow-node-swap]",
        ),
        "a direction its verification ruled out (decode, in a surge) would rank above one left open "
        "(the overlapping deploy)",
    ),
    M(
        "rank-by-score-alone",
        "perfkit/triage/table.py",
        "return not r.applies, VERDICT_RANK[r.verification.verdict], -r.score, _order(r.row)",
        "return False, 0, -r.score, _order(r.row)",
        ("tests/triage/test_fresh_seed_classes.py::test_a_confirmed_direction_outranks_a_strong_suspicion",),
        "a deploy's strong but unverified shift would read rank 1 above the confirmed cause",
    ),
    M(
        "rank-ignores-the-workload",
        "perfkit/triage/table.py",
        "return not r.applies, VERDICT_RANK[r.verification.verdict], -r.score, _order(r.row)",
        "return False, VERDICT_RANK[r.verification.verdict], -r.score, _order(r.row)",
        ("tests/triage/test_coherence.py::test_no_two_statements_contradict[healthy-busy-evening]",),
        "a serving incident with nothing confirmed would read a training row (left open) at rank 1",
    ),
    M(
        "confirmatory-cut-vetoes",
        "perfkit/triage/thresholds.py",
        "OUTWEIGH_MARGIN = 0.5\n",
        "OUTWEIGH_MARGIN = 50.0\n",
        (
            "tests/triage/test_leading.py",
            "tests/triage/test_weighed_gate.py::test_a_confirmatory_cut_within_its_noise_does_not_veto_evidence_far_past_its_cuts",
        ),
        "an interference incident whose median sits at its 'as usual' cut would read leading, not confirmed, "
        "however far its stalls and correlation are past theirs (issue 35, Why 1)",
    ),
    M(
        "queueing-confirmed-on-either-sign",
        "perfkit/triage/inference_rows.py",
        'queued = all_of(at_least(share, "QUEUE_SHARE_CONFIRM"), at_least(waiting, "QUEUED_CONFIRM_MIN"))',
        'queued = any_of(at_least(share, "QUEUE_SHARE_CONFIRM"), at_least(waiting, "QUEUED_CONFIRM_MIN"))',
        ("tests/triage/test_bad_input.py::test_queue_time_without_anyone_waiting_is_not_confirmed_queueing",),
        "a long queue time with nobody waiting (contradictory evidence) would confirm queueing",
    ),
    M(
        "kv-pressure-needs-every-sign",
        "perfkit/triage/inference_rows.py",
        "pressure = any_of(hits, full, preempting)",
        "pressure = all_of(hits, full, preempting)",
        (
            f"{LIBRARY}[kv-pressure-shared-gpu]",
            f"{LIBRARY}[kv-prefix-cache-thrash]",
        ),
        "KV-cache pressure would need a hit-rate drop, a full cache and preemptions all at once",
    ),
    M(
        "kv-full-never-reached",
        "perfkit/triage/thresholds.py",
        "KV_FULL_FRAC = 0.9 ",
        "KV_FULL_FRAC = 1.01 ",
        (
            "tests/triage/test_bad_input.py::test_kv_pressure_without_prefix_cache_counters_rests_on_the_cache_fill",
        ),
        "a KV cache at 96 % would not count as pressure",
    ),
    M(
        "oom-lines-never-enough",
        "perfkit/triage/thresholds.py",
        "OOM_LINES = 0.5 ",
        "OOM_LINES = 1e9 ",
        (f"{LIBRARY}[oom-sampler-kv-full]", f"{LIBRARY}[train-oom-batch-size]"),
        "CUDA out-of-memory lines would not be the OOM symptom",
    ),
    M(
        "oom-needs-two-lines",
        "perfkit/triage/oom_row.py",
        'seen = above(n, "OOM_LINES")\n    return Detection(',
        'seen = above(n - 1, "OOM_LINES")\n    return Detection(',
        ("tests/triage/test_bad_input.py::test_a_single_cuda_oom_line_is_the_oom_symptom",),
        "an engine that crashed on its first OOM (one line) would show no OOM",
    ),
    M(
        "data-wait-share-divided",
        "perfkit/triage/training_rows.py",
        'share = at_least(i, "DATA_WAIT_SHARE")',
        'share = at_least(i / 4, "DATA_WAIT_SHARE")',
        (f"{LIBRARY}[dataloader-starvation]", f"{LIBRARY}[dataloader-slow-storage]"),
        "a GPU waiting for its batches a third of every step would not be flagged",
    ),
    M(
        "comm-share-divided",
        "perfkit/triage/training_rows.py",
        'share = at_least(value(ev, "comm_share"), "COMM_SHARE")',
        'share = at_least((value(ev, "comm_share") or 0.0) / 4, "COMM_SHARE")',
        (f"{LIBRARY}[allreduce-scaling-64gpu]", f"{LIBRARY}[nccl-socket-fallback]"),
        "exposed all-reduce time of a quarter of the step would not be flagged",
    ),
    M(
        "loss-roughness-divided",
        "perfkit/triage/training_rows.py",
        'rougher = at_least(ratio, "LOSS_ROUGHNESS_RATIO")',
        'rougher = at_least(ratio and ratio / 4, "LOSS_ROUGHNESS_RATIO")',
        (
            f"{LIBRARY}[loss-oscillation-data-order]",
            f"{LIBRARY}[loss-spikes-no-warmup]",
            "tests/triage/test_loss_same_data.py::test_without_step_numbers_the_trend_confirms_it",
        ),
        "a loss four times rougher than the baseline would look stable",
    ),
    M(
        "loss-spikes-not-net-of-baseline",
        "perfkit/triage/training_rows.py",
        'recurring = at_least(value(ev, "loss_spikes_more"), "LOSS_SPIKES")',
        'recurring = at_least(value(ev, "loss_spikes"), "LOSS_SPIKES")',
        ("tests/triage/test_bad_input.py::test_loss_spikes_the_baseline_had_too_are_no_new_instability",),
        "a run that always had the odd loss spike would be called unstable",
    ),
    # -- load generation: the plan and its pacing --------------------------------------------------
    M(
        "pacing-1.9x-slow",
        "perfkit/loadgen/client.py",
        "due = t0 + float(at_s[i])",
        "due = t0 + 1.9 * float(at_s[i])",
        ("tests/loadgen/test_bench_honest.py::test_an_open_loop_rate_is_kept",),
        "perfkit bench would offer half the requested rate and report the requested one",
    ),
    M(
        "rate-plan-not-rescaled",
        "perfkit/loadgen/shapes.py",
        "at *= ((n - 1) / r) / at[-1]",
        "at *= 1.0",
        ("tests/loadgen/test_shapes.py::test_poisson_rate_is_seeded_and_offers_exactly_the_rate",),
        "a short Poisson plan would offer its sampling error, not the requested rate",
    ),
    M(
        "burstiness-ignored",
        "perfkit/loadgen/shapes.py",
        "gaps = rng.gamma(k, 1.0 / (r * k), n - 1)",
        "gaps = rng.gamma(1.0, 1.0 / r, n - 1)",
        ("tests/loadgen/test_shapes.py::test_gamma_burstiness_sets_the_spread_of_gaps",),
        "--burstiness would change nothing",
    ),
    M(
        "knee-keeps-up-at-half",
        "perfkit/loadgen/sweep.py",
        "if achieved < ACHIEVED_MIN_FRAC * offered:",
        "if achieved < 0.5 * offered:",
        ("tests/loadgen/test_sweep.py",),
        "the knee would sit past the rate the server can actually sustain",
    ),
    M(
        "knee-keeps-up-at-half-live",
        "perfkit/loadgen/sweep.py",
        "if achieved < ACHIEVED_MIN_FRAC * offered:",
        "if achieved < 0.5 * offered:",
        (
            "tests/loadgen/test_bench_honest.py::test_the_knee_sits_below_the_capacity_the_concurrency_cap_allows",
        ),
        "a live sweep past the server's capacity (C / E2E) would not find the knee",
    ),
    # -- the trace reader --------------------------------------------------------------------------
    M(
        "ns-durations-not-converted",
        "perfkit/traces/read.py",
        "ts, dur = ts / 1000, dur / 1000",
        "ts, dur = ts / 1000, dur",
        ("tests/traces/test_trace_bad_input.py", "tests/traces/test_trace_scan.py"),
        "a nanosecond trace's kernels would last 1000x too long",
    ),
    M(
        "overlap-counts-either-side",
        "perfkit/traces/breakdown.py",
        "return float(np.diff(times)[running[:-1] == 3].sum())",
        "return float(np.diff(times)[running[:-1] >= 2].sum())",
        ("tests/traces/test_hta_parity.py::test_temporal_breakdown_and_overlap_match_hta",),
        "communication would look hidden under compute when compute alone runs",
    ),
    M(
        "idle-time-halved",
        "perfkit/traces/breakdown.py",
        "idle = kernel_time - float((e - s).sum())",
        "idle = (kernel_time - float((e - s).sum())) / 2",
        ("tests/traces/test_hta_parity.py::test_temporal_breakdown_and_overlap_match_hta",),
        "GPU idle time would be half what HTA reports",
    ),
    # -- the release gate (written against perfkit/loadgen/gate.py as of 2026-12-02 ~10:40 UTC) -----
    M(
        "gate-band-doubled",
        "perfkit/loadgen/gate.py",
        'status = "regressed" if worse > band else "improved" if -worse > band else "pass"',
        'status = "regressed" if worse > 2 * band else "improved" if -worse > band else "pass"',
        (GATE,),
        "a regression up to twice the allowed band would pass the release gate",
    ),
    M(
        "gate-direction-ignored",
        "perfkit/loadgen/gate.py",
        "sign = 1.0 if rule.direction == LOWER else -1.0",
        "sign = 1.0",
        (GATE,),
        "a throughput drop would read as an improvement",
    ),
    M(
        "gate-min-requests-ignored",
        "perfkit/loadgen/gate.py",
        "if completed < rule.min_requests:",
        "if completed < 0:",
        (GATE,),
        "a run of a handful of requests would be judged",
    ),
    M(
        "gate-band-smallest-term",
        "perfkit/loadgen/gate.py",
        "band_from = max(terms, key=lambda t: terms[t])",
        "band_from = min(terms, key=lambda t: terms[t])",
        (GATE,),
        "the band would ignore the noise and floor terms: jitter would fail releases",
    ),
    M(
        "negative-durations-kept",
        "perfkit/traces/read.py",
        'c.data["dur"] = np.where(neg, 0.0, c["dur"])',
        'c.data["dur"] = c["dur"]',
        ("tests/traces/test_trace_edges.py",),
        "a negative-length GPU event must be clamped, counted in a note, and every share stay in [0, 100]",
    ),
]

# Mutants the suite does NOT catch today (found by this script on 2026-12-02): each is a test that is
# missing. Not in the default run (it would fail every `make test-all` until the test is written);
# `--gaps` runs them, and a gap whose mutant is killed should move up into MUTATIONS.
GAPS: list[Mutation] = []


SKIP_DIRS = {".git", ".venv", "venv", "out", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def repository_files() -> list[str]:
    """The tracked and unignored files (what a clone plus the uncommitted work holds), as .ci/run
    copies them; in a copy without .git (.ci/run's own), every file but caches and virtualenvs."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=REPO,
            check=True,
            capture_output=True,
        ).stdout
        return [raw.decode() for raw in listed.split(b"\0") if raw]
    except (OSError, subprocess.CalledProcessError):
        out = []
        for folder, dirs, files in os.walk(REPO):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
            out += [str((Path(folder) / f).relative_to(REPO)) for f in files]
        return out


def copy_repository(dst: Path) -> None:
    for rel in repository_files():
        src = REPO / rel
        if not src.is_file():  # deleted in the working tree, or a submodule
            continue
        target = dst / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)


def run_tests(root: Path, tests: tuple[str, ...]) -> tuple[int, str, float]:
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PERFKIT_REQUIRE_INTEGRATION", None)
    bin_dir = Path(sys.executable).parent
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", *tests]
    t = time.perf_counter()
    try:
        res = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        out, rc = res.stdout + res.stderr, res.returncode
    except subprocess.TimeoutExpired as exc:
        out, rc = f"timeout after {RUN_TIMEOUT_S} s: {exc.stdout or ''}", 124
    return rc, out, time.perf_counter() - t


def last_line(out: str) -> str:
    lines = [line for line in out.strip().splitlines() if line.strip()]
    return lines[-1][:120] if lines else ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated mutation names")
    ap.add_argument("--list", action="store_true", help="list the mutations and exit")
    ap.add_argument("--keep", action="store_true", help="keep the temporary copy (its path is printed)")
    ap.add_argument("--gaps", action="store_true", help="run the known gaps (GAPS) instead")
    args = ap.parse_args(argv)
    every = GAPS if args.gaps else MUTATIONS
    chosen = every
    if args.only:
        names = {n.strip() for n in args.only.split(",") if n.strip()}
        unknown = names - {m.name for m in every}
        if unknown:
            print(f"unknown mutation(s): {', '.join(sorted(unknown))}", file=sys.stderr)
            return 2
        chosen = [m for m in every if m.name in names]
    if args.list:
        for m in chosen:
            print(f"{m.name:36} {m.file}: {m.why}")
        return 0

    work = Path(tempfile.mkdtemp(prefix="perfkit-mutants."))
    root = work / "perfkit"
    started = time.perf_counter()
    try:
        copy_repository(root)
        probe = subprocess.run(
            [sys.executable, "-c", "import perfkit; print(perfkit.__file__)"],
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        if not probe.startswith(str(root)):
            print(f"perfkit imports from {probe}, not the copy {root}: refusing to run", file=sys.stderr)
            return 2
        print(f"copy: {root} (perfkit imported from it)")
        results: list[tuple[Mutation, str, str, float]] = []
        baseline: dict[tuple[str, ...], tuple[int, str]] = {}
        for m in chosen:
            path = root / m.file
            source = path.read_text(encoding="utf-8") if path.is_file() else ""
            count = source.count(m.original)
            if count != 1:
                what = "not found" if count == 0 else f"found {count} times"
                results.append((m, "SNIPPET NOT FOUND", f"{m.file}: snippet {what}", 0.0))
                continue
            if m.tests not in baseline:
                rc, out, _ = run_tests(root, m.tests)
                baseline[m.tests] = (rc, last_line(out))
            rc0, line0 = baseline[m.tests]
            if rc0 != 0:
                results.append((m, "BASELINE FAILS", line0, 0.0))
                continue
            path.write_text(source.replace(m.original, m.mutated), encoding="utf-8")
            try:
                rc, out, seconds = run_tests(root, m.tests)
            finally:
                path.write_text(source, encoding="utf-8")
            if rc == 0:
                results.append((m, "SURVIVED", last_line(out), seconds))
            else:
                results.append((m, "killed", last_line(out), seconds))
            print(f"  {m.name}: {results[-1][1]} ({seconds:.1f} s)", flush=True)
    finally:
        if args.keep:
            print(f"kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    print(f"\n{'mutation':36} {'outcome':18} {'s':>5}  tests' last line")
    for m, outcome, line, seconds in results:
        print(f"{m.name:36} {outcome:18} {seconds:5.1f}  {line}")
    bad = [r for r in results if r[1] != "killed"]
    print(
        f"\n{len(results) - len(bad)} of {len(results)} mutants killed in {time.perf_counter() - started:.0f} s"
        + (f"; NOT KILLED: {', '.join(r[0].name for r in bad)}" if bad else "")
    )
    for m, outcome, _, _ in bad:
        print(f"  {m.name} ({outcome}): {m.why}; tests: {' '.join(m.tests)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
