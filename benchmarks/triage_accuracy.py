"""Triage accuracy on every embedded scenario: top-1 accuracy, the confusion list, and false
confirmations on healthy controls (issue 4's target: every scenario right, none on a control).

    python benchmarks/triage_accuracy.py [SCENARIOS_DIR]
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

from perfkit.app.grading import grade_bundle, scenario_dirs

ROOT = Path(__file__).resolve().parents[1] / "data" / "scenarios"


def main(root: Path = ROOT) -> int:
    graded = [grade_bundle(d) for d in scenario_dirs(root)]
    width = max(len(g.scenario) for g in graded)
    print(f"{'scenario':{width}}  {'answer':28}  {'rank 1 (confirmed)':28}  ok   s")
    for g in graded:
        want = g.want + (f" {g.want_version}" if g.want_version else "")
        got = (g.got or "-") + (f" {g.got_version}" if g.got_version else "")
        print(
            f"{g.scenario:{width}}  {want:28}  {got:28}  {'yes' if g.correct else 'NO ':3}  {g.seconds:4.1f}"
        )
    incidents = [g for g in graded if not g.control]
    controls = [g for g in graded if g.control]
    right = sum(g.correct for g in incidents)
    print(
        f"\ntop-1 accuracy: {right}/{len(incidents)} incidents ({100 * right / max(1, len(incidents)):.0f} %)"
    )
    confusion = Counter((g.want, g.got or "none confirmed") for g in incidents if not g.correct)
    print("confusions: " + (", ".join(f"{w} -> {g} x{n}" for (w, g), n in confusion.items()) or "none"))
    false_conf = [(g.scenario, d) for g in controls for d in g.false_confirmations]
    print(
        f"controls: {len(controls)}; false confirmations on controls: "
        + (", ".join(f"{s}: {d}" for s, d in false_conf) or "none")
    )
    side = [(g.scenario, d) for g in incidents for d in g.false_confirmations]
    print(
        "other directions confirmed beside the answer (explained effects included): "
        + (", ".join(f"{s}: {d}" for s, d in side) or "none")
    )
    return 0 if right == len(incidents) and not false_conf else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT))
