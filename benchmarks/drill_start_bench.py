"""``perfkit drill start DRILL --live`` to the first scrape (issue 11's target: under 10 s).

Each try runs the command as a user does, in a fresh temporary folder, and reads the time it
reports from its own start to the moment Prometheus answers a query for the engine's first sample
(``first_scrape_s`` in the drill's ``.live/state.json``), beside the command's whole wall time (it
returns right after). Then ``perfkit drill stop`` stops every process it started, by PID. Side by
side in the same run, the floor it cannot beat: a bare Prometheus of this machine (the same Debian
binary, the same lab helper) started on a static target until its first sample is queryable.

    python benchmarks/drill_start_bench.py [--drill drill-24] [--tries 3] [--speed 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 10.0


def drill_start(drill: str, speed: float, seed: int) -> tuple[float, float]:
    """(first scrape as the command reports it, the command's wall seconds) for one start."""
    with tempfile.TemporaryDirectory(prefix="perfkit-drill-bench-") as tmp:
        folder = Path(tmp) / drill
        cmd = [sys.executable, "-m", "perfkit", "drill", "start", drill, "--live", "-o", str(folder)]
        t0 = time.perf_counter()
        done = subprocess.run([*cmd, f"--speed={speed:g}", f"--seed={seed}"], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        try:
            if done.returncode != 0:
                raise SystemExit(f"drill start failed ({done.returncode}): {done.stderr.strip()[-500:]}")
            state = json.loads((folder / ".live" / "state.json").read_text())
            return float(state["first_scrape_s"]), wall
        finally:
            subprocess.run(
                [sys.executable, "-m", "perfkit", "drill", "stop", drill, "-o", str(folder)],
                capture_output=True,
                text=True,
            )


def bare_prometheus() -> float:
    """Seconds from starting a Prometheus on a static target (itself) to its first sample."""
    import urllib.parse
    import urllib.request

    from perfkit.lab.servers import free_port, start_scraping

    with tempfile.TemporaryDirectory(prefix="perfkit-prom-bench-") as tmp:
        port = free_port()
        t0 = time.perf_counter()
        server = start_scraping([f"127.0.0.1:{port}"], Path(tmp) / "p", interval_s=0.2, port=port)
        try:
            q = urllib.parse.urlencode({"query": 'up{job="engine"} == 1'})
            while time.perf_counter() - t0 < 60:
                with urllib.request.urlopen(f"{server.url}/api/v1/query?{q}", timeout=2) as r:
                    if json.loads(r.read())["data"]["result"]:
                        return time.perf_counter() - t0
                time.sleep(0.05)
            raise SystemExit("the bare Prometheus took no sample in 60 s")
        finally:
            server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--drill", default="drill-24", help="a drill with a live form (perfkit drill list --live)"
    )
    ap.add_argument("--tries", type=int, default=3)
    ap.add_argument("--speed", type=float, default=30.0)
    args = ap.parse_args()
    firsts, walls, floors = [], [], []
    for i in range(args.tries):
        first, wall = drill_start(args.drill, args.speed, seed=i + 1)
        floor = bare_prometheus()
        firsts.append(first)
        walls.append(wall)
        floors.append(floor)
        print(
            f"try {i + 1}: first scrape {first:.2f} s (command {wall:.2f} s); bare Prometheus {floor:.2f} s"
        )
    med, floor = statistics.median(firsts), statistics.median(floors)
    print(f"\nmedian first scrape {med:.2f} s = {med / TARGET_S:.2f} of the {TARGET_S:g} s target "
          f"({'met' if med < TARGET_S else 'NOT met'}); {med / floor:.1f}x a bare Prometheus' first sample "
          f"({floor:.2f} s): the rest is the simulator's and the load generator's start")  # fmt: skip


if __name__ == "__main__":
    main()
