"""Fleet-scale triage: a ~1 GB bundle of four serving workloads, triaged scoped to one of them.

Target (issue 9, item 7): ``perfkit triage --bundle B --scope '{model_name="..."}'`` in <= 60 s
and <= 3 GB peak RSS on a 2-core machine. Every run is a child process, as a user would run it,
timed from outside (wall seconds, the child's peak resident size), side by side in one run with
references: the same bundle unscoped, and the workload's own small bundle.

The bundle (perfkit.lab.sim.fleet: embedded scenarios replicated over hosts, relabelled) is written
to a temp folder (``--out`` to choose), kept and reused when its spec has not changed; never
under data/. Usage: ``python benchmarks/bench_scale.py [--gb 1.0] [--out DIR] [--no-unscoped]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from perfkit.core.resources import SCENARIOS
from perfkit.lab.sim.fleet import default_fleet, replica_bytes, write_fleet

TARGET_S = 60.0
TARGET_RSS_GIB = 3.0

# Runs `argv` and reports its wall time and peak RSS. A small go-between process does the waiting:
# a child's ru_maxrss starts from the RSS of the process that forked it (Linux carries the
# high-water mark over fork+exec), so it must not be this process, which grew writing the bundle.
_MEASURE = """
import json, resource, subprocess, sys, time
t = time.perf_counter()
p = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - t
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KiB on Linux
print(json.dumps({"rc": p.returncode, "wall_s": wall, "rss_kib": rss, "out": p.stdout[-100000:], "err": p.stderr[-2000:]}))
"""

# Until `perfkit triage` has --scope: the same calls, through the seam the CLI uses.
_TRIAGE = """
import json, sys
from perfkit.triage.table import triage_bundle
print(json.dumps(triage_bundle(sys.argv[1], scope=sys.argv[2] or None).to_json()))
"""

# Scoped, reading only the signal catalogue's families (a proposal for triage_bundle).
_CATALOGUE = """
import json, sys
from perfkit.core.scope import parse_scope
from perfkit.engine.local import LocalEngine
from perfkit.engine.signals import COUNTERS, GAUGES, HISTOGRAMS
from perfkit.sources.bundle import load_bundle
from perfkit.triage.table import triage_evidence
names = {n for group in (*GAUGES.values(), *COUNTERS.values()) for n in group}
names |= {b + s for group in HISTOGRAMS.values() for b in group for s in ("_bucket", "_sum", "_count")}
want = lambda n: n in names or (n.startswith("vllm:") and n.endswith("_info"))
b = load_bundle(sys.argv[1], scope=parse_scope(sys.argv[2]), families=want)
r = triage_evidence(LocalEngine(b.store), b.incident, events=b.events, logs=b.logs, missing=b.missing, scope=b.scope)
print(json.dumps(r.to_json()))
"""


def cli_has_scope() -> bool:
    perfkit = shutil.which("perfkit") or str(Path(sys.executable).parent / "perfkit")
    try:
        out = subprocess.run([perfkit, "triage", "--help"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "--scope" in out.stdout


def triage_argv(bundle: Path, scope: str, *, cli: bool) -> list[str]:
    if cli:
        perfkit = shutil.which("perfkit") or str(Path(sys.executable).parent / "perfkit")
        argv = [perfkit, "triage", "--bundle", str(bundle), "--format", "json"]
        return argv + (["--scope", scope] if scope else [])
    return [sys.executable, "-c", _TRIAGE, str(bundle), scope]


def measure(argv: list[str]) -> dict:
    proc = subprocess.run([sys.executable, "-c", _MEASURE, *argv], capture_output=True, text=True, check=True)
    result = json.loads(proc.stdout)
    result["rss_gib"] = result["rss_kib"] / 2**20
    top = None
    if result["rc"] == 0:
        try:
            directions = json.loads(result["out"][result["out"].index("{") :])["directions"]
            top = directions[0]["id"] if directions and directions[0]["score"] > 0 else "none"
        except (ValueError, KeyError, IndexError):
            top = "?"
    result["top"] = top
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.0, help="bundle size to write (GB, 1e9 bytes)")
    ap.add_argument(
        "--out", type=Path, default=None, help="folder for the bundle (default: a temp folder, reused)"
    )
    ap.add_argument("--no-unscoped", action="store_true", help="skip the unscoped reference run")
    args = ap.parse_args()

    probe = default_fleet(1)
    replicas = max(1, round(args.gb * 1e9 / sum(replica_bytes(probe))))
    fleet = default_fleet(replicas)
    out = args.out or Path(tempfile.gettempdir()) / f"perfkit-bench-fleet-{replicas}x{len(fleet)}"
    t = time.perf_counter()
    summary = write_fleet(out, fleet)
    print(
        f"bundle: {out}  {summary['bytes'] / 1e9:.2f} GB, {len(fleet)} workloads x {replicas} hosts "
        f"({time.perf_counter() - t:.1f} s to write or find)"
    )
    target = fleet[0]
    scope = f'{{model_name="{target.model}"}}'
    answer = next(
        (
            line.split(":", 1)[1].strip()
            for line in (SCENARIOS / target.scenario / "answer.yaml").read_text().splitlines()
            if line.startswith("direction:")
        ),
        "?",
    )
    cli = cli_has_scope()
    print(f"scope: {scope}   (expected top direction, the scenario's answer: {answer})")
    print(
        f"runner: {'perfkit triage --scope (CLI)' if cli else 'python -c triage_bundle(...) (the CLI has no --scope yet)'}"
    )
    runs = [
        ("scoped (the target)", triage_argv(out, scope, cli=cli)),
        ("scoped, catalogue families", [sys.executable, "-c", _CATALOGUE, str(out), scope]),
        ("workload's own bundle", triage_argv(SCENARIOS / target.scenario, "", cli=cli)),
    ]
    if not args.no_unscoped:
        runs.append(("unscoped, same bundle", triage_argv(out, "", cli=cli)))
    print(f"\n{'run':30s} {'seconds':>8s} {'peak RSS':>9s}  top direction")
    results = {}
    for name, argv in runs:
        r = measure(argv)
        results[name] = r
        status = "" if r["rc"] == 0 else f"  FAILED rc={r['rc']}: {r['err'].strip().splitlines()[-1:]}"
        print(f"{name:30s} {r['wall_s']:8.1f} {r['rss_gib']:7.2f} GiB  {r['top']}{status}", flush=True)
    main_run = results["scoped (the target)"]
    ok = main_run["rc"] == 0 and main_run["wall_s"] <= TARGET_S and main_run["rss_gib"] <= TARGET_RSS_GIB
    print(
        f"\ntarget: scoped triage <= {TARGET_S:.0f} s and <= {TARGET_RSS_GIB:.0f} GiB peak RSS -> "
        f"{main_run['wall_s']:.1f} s, {main_run['rss_gib']:.2f} GiB: {'MET' if ok else 'NOT MET'}"
    )
    if main_run["top"] != answer:
        print(f"note: the scoped top direction {main_run['top']} is not the scenario's answer {answer}")


if __name__ == "__main__":
    main()
