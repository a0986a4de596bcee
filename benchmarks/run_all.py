"""Run every benchmark in one go: `make bench`."""

from __future__ import annotations

import runpy
from pathlib import Path

HERE = Path(__file__).resolve().parent

for name in ("bench_openmetrics", "bench_quantile", "bench_demo", "bench_live"):
    print(f"\n== {name} ==")
    runpy.run_path(str(HERE / f"{name}.py"), run_name="__main__")
