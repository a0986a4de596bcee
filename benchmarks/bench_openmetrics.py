"""OpenMetrics bundle load: perfkit's reader vs prometheus_client's parsers on the same ~50 MB file.

Target (issue 9, item 7): >= 20x the throughput of prometheus_client's text parser (issue 2 asked
for 10x). Prints ratios measured side by side in one run (absolute times drift on a noisy machine;
ratios hold), by wall time and by CPU time (perfkit's reader may use more than one core).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import ttft_om  # noqa: E402

from perfkit.sources.openmetrics import parse_text  # noqa: E402

TARGET = 20.0


def best_of(fn, n: int) -> tuple[float, float]:
    """The best wall and CPU seconds of ``n`` calls."""
    walls, cpus = [], []
    for _ in range(n):
        t, c = time.perf_counter(), time.process_time()
        fn()
        walls.append(time.perf_counter() - t)
        cpus.append(time.process_time() - c)
    return min(walls), min(cpus)


def main() -> None:
    cache = Path(__file__).resolve().parent / ".cache" / "ttft_50mb.om"
    if not cache.exists():
        cache.parent.mkdir(parents=True, exist_ok=True)
        cache.write_text(ttft_om(hours=27, models=3, engines=1))
    text = cache.read_text()
    mb = len(text.encode()) / 1e6
    lines = text.count("\n")
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
    from prometheus_client.parser import text_string_to_metric_families as text_parse

    def perfkit_load():
        store = parse_text(text, require_eof=True)
        assert store.n_samples == lines - 3

    def pc_text():
        n = sum(len(f.samples) for f in text_parse(text.replace("# EOF\n", "")))
        assert n == lines - 3

    def pc_om():
        n = sum(len(f.samples) for f in om_parse(text))
        assert n == lines - 3

    ours, ours_cpu = best_of(perfkit_load, 3)
    ref_text, ref_text_cpu = best_of(pc_text, 1)
    try:
        ref_om: float | None = best_of(pc_om, 1)[0]
    except ValueError as exc:  # it rejects histograms with many timestamped points per series
        ref_om, om_note = None, str(exc)
    ratio = ref_text / ours
    print(f"file: {mb:.1f} MB, {lines:,} lines")
    print(f"perfkit.sources.openmetrics   {ours:7.2f} s  {mb / ours:7.1f} MB/s   (CPU {ours_cpu:.2f} s)")
    print(
        f"prometheus_client text parser {ref_text:7.2f} s  {mb / ref_text:7.1f} MB/s   ratio {ratio:5.1f}x"
        f"   (CPU {ref_text_cpu:.2f} s, ratio {ref_text_cpu / ours_cpu:.1f}x)"
    )
    if ref_om is not None:
        print(
            f"prometheus_client OM parser   {ref_om:7.2f} s  {mb / ref_om:7.1f} MB/s   ratio {ref_om / ours:5.1f}x"
        )
    else:
        print(f"prometheus_client OM parser   cannot read this file: {om_note}")
    print(
        f"target: >= {TARGET:.0f}x the text parser (wall) -> {ratio:.1f}x {'MET' if ratio >= TARGET else 'NOT MET'}"
    )


if __name__ == "__main__":
    main()
