"""Does the what-if replay reproduce each embedded inference incident? (issue 26, done-when 1)

For every embedded inference scenario: the incident and baseline windows replayed on the engine the
bundle recorded (:func:`perfkit.app.whatif.reproduce.reproduce`), on the roofline as it is and after
the calibration of its step costs to each window (:mod:`perfkit.app.whatif.calibrate`), and the
incident's traffic on the *baseline's* calibrated engine: the one number here nothing was fitted to
(for an incident of traffic alone it should hold; where the engine itself changed, a release or a
throttled GPU, it shows how much). Prints TTFT p50/p95 and TPOT p50 observed, simulated and the
error, the fitted scales, and the count within the issue's tolerances (TTFT ±25 %, TPOT ±15 %).

    .venv/bin/python benchmarks/whatif_reproduce.py [--only NAME,NAME] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from perfkit.app.whatif.base import config_from_bundle  # noqa: E402
from perfkit.app.whatif.reproduce import TOLERANCE, reproduce  # noqa: E402
from perfkit.errors import ConfigError  # noqa: E402
from perfkit.lab.sim.catalog import SCENARIOS as INFERENCE  # noqa: E402

SCENARIOS = ROOT / "data" / "scenarios"
METRICS = tuple(TOLERANCE)


def inference_scenarios() -> list[str]:
    """The embedded bundles of every simulated inference incident (training ones have no serving replay)."""
    return sorted(name for name in INFERENCE if (SCENARIOS / name / "incident.yaml").is_file())


def _pct(x: float | None) -> str:
    return "    -" if x is None else f"{x:+5.0%}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--only", default="", help="comma-separated scenario names (default: every inference one)"
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    names = [n for n in args.only.split(",") if n] or inference_scenarios()
    within = {"roofline": 0, "calibrated": 0, "baseline engine": 0}
    total = 0
    t_all = time.perf_counter()
    print(f"{'scenario':34s} {'replay':34s} " + " ".join(f"{m:>22s}" for m in METRICS))
    for name in names:
        path = SCENARIOS / name
        t0 = time.perf_counter()
        try:
            cfg = config_from_bundle(path).cfg
        except ConfigError as exc:
            total += 1
            print(f"{name:34s} cannot replay: {exc}")
            continue
        rep = reproduce(path, cfg, seed=args.seed)
        rows = {(r["window"], r["metric"]): r for r in rep.rows}
        total += 1
        for label, window, key in (
            ("roofline", "incident", "uncalibrated"),
            ("calibrated", "incident", "simulated"),
            ("baseline engine", "incident on the baseline's engine", "simulated"),
        ):
            cells, ok = [], True
            for m in METRICS:
                r = rows.get((window, m))
                obs, sim = (r["observed"], r[key]) if r else (None, None)
                err = sim / obs - 1 if obs and sim is not None else None
                ok &= err is not None and abs(err) <= TOLERANCE[m]
                cells.append(
                    f"{'-' if obs is None else f'{obs:.0f}'}/{'-' if sim is None else f'{sim:.0f}'} {_pct(err)}"
                )
            within[label] += ok
            print(f"{name if label == 'roofline' else '':34s} {label + (' ok' if ok else ' MISS'):34s} "
                  + " ".join(f"{c:>22s}" for c in cells))  # fmt: skip
        for side, cal in rep.calibration.items():
            scales = ", ".join(f"{k}={v:.3g}" for k, v in cal["scales"].items())
            print(f"{'':34s}   {side} engine: {scales} ({'fitted' if cal['fitted'] else 'not fitted'}, "
                  f"{len(cal['rounds'])} replays)")  # fmt: skip
        print(f"{'':34s}   {time.perf_counter() - t0:.1f} s")
        sys.stdout.flush()
    print(f"\nincident windows within TTFT p50/p95 ±25 % and TPOT p50 ±15 % ({total} scenarios, "
          f"{time.perf_counter() - t_all:.0f} s):")  # fmt: skip
    for label, n in within.items():
        print(f"  {label:16s} {n}/{total}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
