"""`perfkit run` of the demo incident, kernel start included, and the postmortem render alone.

Targets (issue 2): run <= 20 s wall on a 2-core machine; render <= 2 s. Prints where the time goes:
CLI start, kernel start, each runbook cell (papermill's own per-cell timings), render.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUNDLE = REPO / "data" / "scenarios" / "p95-prefill-interference"


def main(runs: int = 2) -> None:
    perfkit = Path(sys.executable).with_name("perfkit")
    walls = []
    for _ in range(runs):
        out = Path(tempfile.mkdtemp(prefix="perfkit-bench-"))
        t = time.perf_counter()
        subprocess.run(
            [str(perfkit), "run", "inference_latency", "--bundle", str(BUNDLE), "-o", str(out)],
            check=True,
            capture_output=True,
        )
        walls.append(time.perf_counter() - t)
    nb = json.loads((out / "inference_latency.ipynb").read_text())
    meta = nb["metadata"]["papermill"]
    cells = [
        (
            c["source"] if isinstance(c["source"], str) else "".join(c["source"]),
            c["metadata"].get("papermill", {}).get("duration") or 0.0,
        )
        for c in nb["cells"]
        if c["cell_type"] == "code"
    ]
    in_cells = sum(d for _, d in cells)
    t = time.perf_counter()
    from perfkit.report import render_postmortem

    import_s = time.perf_counter() - t
    renders = []
    for _ in range(3):
        t = time.perf_counter()
        render_postmortem(out / "inference_latency.ipynb", Path(tempfile.mkdtemp(prefix="perfkit-render-")))
        renders.append(time.perf_counter() - t)
    wall = min(walls)
    print(f"perfkit run (demo), wall: best {wall:.1f} s of {runs}  -> {wall / 20:.2f} of the 20 s target")
    print(
        f"  papermill-recorded notebook duration {meta.get('duration', 0):.1f} s; cells {in_cells:.1f} s; "
        f"CLI start + kernel start + render ≈ {wall - in_cells:.1f} s"
    )
    for src, d in sorted(cells, key=lambda x: -x[1])[:6]:
        print(f"    {d:5.2f} s  {src.splitlines()[0][:60] if src else ''}")
    print(
        f"postmortem render alone: first {renders[0]:.2f} s (+{import_s:.2f} s import), best {min(renders):.2f} s  "
        f"-> {renders[0] / 2:.2f} of the 2 s target"
    )


if __name__ == "__main__":
    main()
