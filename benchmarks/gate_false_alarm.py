"""Does the release gate cry wolf? The README's gate example, rerun N times on an unchanged service.

Issue 21 item 2: with ONE baseline in the store, identical reruns of the README's bench against
``perfkit lab serve`` must all pass (no false regression), and the README's slowdown (the server
from 50 ms TTFT / 10 ms per token to 80 ms / 12 ms) must be caught (exit 1) every time.

Two phases, so the (slow) measurements are kept and the (fast) judging can be repeated:

1. **collect** into ``--dir``: ``base.json`` (the baseline run), ``same-NN.json`` (``--runs``
   identical reruns) and ``slow-NN.json`` (``--slow-runs`` runs against the slowed server), each a
   ``perfkit bench`` child process exactly as the README types it (``--concurrency 16
   --num-requests 1000 --slo ttft=200 --label hardware=laptop``), against a fresh ``perfkit lab
   serve`` (``perfkit.lab.serve.serving``: 127.0.0.1, a free port, stopped by its PID). A file that
   is already there is kept (a collection can be resumed); each bench is bounded by ``--timeout``.
2. **judge**: a fresh store in ``--dir/store`` with ``perfkit baseline add base.json``, then
   ``perfkit gate RUN --store ... -o VERDICT`` for every run, as child processes: the exit status
   is what CI sees. A run the bench itself marked invalid (on a loaded machine the client's own
   overhead can pass 10 % of the TTFT) exits 2 there ("could not judge", never a false alarm) and
   is judged again with ``--allow-invalid``. Prints each run's verdict line, then::

       false alarms: F of N identical reruns (exit 1); catch rate: C of M slowed runs (exit 1); ...
       with --allow-invalid: false alarms F' of N, caught C' of M

Usage: ``python benchmarks/gate_false_alarm.py [--dir DIR] [--runs 20] [--slow-runs 20]
[--num-requests 1000] [--collect-only | --judge-only]``. One bench of the README's example takes about 45 s (50
with the slower server) plus its calibration, so the default (1 + 20 + 20 runs) takes about 35
minutes; the collection runs one bench at a time (two processes: the client and the server).
Exit 0 when no identical rerun regressed and every slowed run was caught (invalid runs judged
anyway), else 1.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

README_BENCH = (
    "--concurrency",
    "16",
    "--num-requests",
    "{n}",
    "--slo",
    "ttft=200",
    "--label",
    "hardware=laptop",
)
SAME = {"ttft_ms": 50, "itl_ms": 10}
SLOW = {"ttft_ms": 80, "itl_ms": 12}


def perfkit(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "perfkit", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def bench(out: Path, knobs: dict[str, float], n: int, timeout: float) -> None:
    from perfkit.lab.serve import serving

    if out.exists():
        return
    started = time.monotonic()
    with serving(model="perfkit-lab", **knobs) as url:
        args = [a.format(n=n) for a in README_BENCH]
        res = perfkit(
            "bench", "--url", url, "--model", "perfkit-lab", *args, "--quiet", "-o", str(out), timeout=timeout
        )
    took = time.monotonic() - started
    state = "ok" if res.returncode == 0 else f"exit {res.returncode}: {res.stderr.strip()[-300:]}"
    print(f"  {out.name}: {took:.0f} s, {state}", flush=True)


def collect(folder: Path, runs: int, slow_runs: int, n: int, timeout: float) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    bench(folder / "base.json", SAME, n, timeout)
    for i in range(1, max(runs, slow_runs) + 1):  # interleaved: a drift of the machine's load hits both
        if i <= runs:
            bench(folder / f"same-{i:02d}.json", SAME, n, timeout)
        if i <= slow_runs:
            bench(folder / f"slow-{i:02d}.json", SLOW, n, timeout)


def judge(folder: Path, timeout: float) -> dict[str, list[tuple[str, int, str]]]:
    """Every run gated as the README says; a run the bench marked invalid (a loaded machine: the
    client's own overhead over 10 % of a TTFT) exits 2 there, and is judged again with
    ``--allow-invalid`` so that its verdict is counted too (kind ``same+`` / ``slow+``)."""
    store = folder / "store"
    if store.exists():
        for p in sorted(store.rglob("*"), reverse=True):
            p.unlink() if p.is_file() else p.rmdir()
        store.rmdir()
    added = perfkit(
        "baseline",
        "add",
        str(folder / "base.json"),
        "--store",
        str(store),
        "--allow-invalid",
        timeout=timeout,
    )
    if added.returncode != 0:
        raise SystemExit(f"baseline add failed: {added.stderr.strip()}")
    out: dict[str, list[tuple[str, int, str]]] = {"same": [], "slow": [], "same+": [], "slow+": []}
    verdicts = folder / "verdicts"
    verdicts.mkdir(exist_ok=True)
    for kind in ("same", "slow"):
        for run in sorted(folder.glob(f"{kind}-*.json")):
            for extra in ((), ("--allow-invalid",)):
                target = verdicts / f"{run.stem}{'-allow' if extra else ''}.json"
                res = perfkit(
                    "gate", str(run), "--store", str(store), "-o", str(target), *extra, timeout=timeout
                )
                summary = (
                    json.loads(target.read_text()).get("summary", "")
                    if target.exists()
                    else res.stderr.strip()
                )
                out[kind + ("+" if extra else "")].append((run.name, res.returncode, summary))
                print(
                    f"  {run.name}{' --allow-invalid' if extra else ''}: exit {res.returncode}: {summary[:150]}",
                    flush=True,
                )
                if res.returncode != 2 or "marked invalid" not in summary:
                    if not extra:
                        out[kind + "+"].append((run.name, res.returncode, summary))
                    break
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path("gate-false-alarm"), help="where the runs are kept")
    ap.add_argument("--runs", type=int, default=20, help="identical reruns")
    ap.add_argument("--slow-runs", type=int, default=20, help="runs against the slowed server")
    ap.add_argument("--num-requests", type=int, default=1000, help="requests per run (the README's: 1000)")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds one child process may take")
    ap.add_argument("--judge-only", action="store_true", help="judge the runs already collected")
    ap.add_argument("--collect-only", action="store_true", help="collect the runs, do not judge them")
    a = ap.parse_args()
    if not a.judge_only:
        print(f"collecting into {a.dir} (1 baseline, {a.runs} identical, {a.slow_runs} slowed)", flush=True)
        collect(a.dir, a.runs, a.slow_runs, a.num_requests, a.timeout)
    if a.collect_only:
        return 0
    got = judge(a.dir, a.timeout)
    same, slow = got["same"], got["slow"]
    false_alarms = sum(code == 1 for _, code, _ in same)
    caught = sum(code == 1 for _, code, _ in slow)
    invalid = sum(code == 2 and "marked invalid" in text for _, code, text in same + slow)
    print(
        f"false alarms: {false_alarms} of {len(same)} identical reruns (exit 1); "
        f"catch rate: {caught} of {len(slow)} slowed runs (exit 1); "
        f"{invalid} runs marked invalid by the bench (exit 2, as the README's command says)"
    )
    judged_same, judged_slow = got["same+"], got["slow+"]
    print(
        f"with --allow-invalid: false alarms {sum(c == 1 for _, c, _ in judged_same)} of {len(judged_same)}, "
        f"caught {sum(c == 1 for _, c, _ in judged_slow)} of {len(judged_slow)}"
    )
    ok = all(c != 1 for _, c, _ in judged_same) and all(c == 1 for _, c, _ in judged_slow)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
