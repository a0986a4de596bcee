"""OpenMetrics bundle load: perfkit's reader vs prometheus_client's parsers on the same ~50 MB file.

Target (issue 2): >= 10x the throughput of prometheus_client's text parser. Prints ratios measured
side by side in one run (absolute times drift on a noisy machine; ratios hold).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import ttft_om  # noqa: E402

from perfkit.sources.openmetrics import parse_text  # noqa: E402


def best_of(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


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

    ours = best_of(perfkit_load, 3)
    ref_text = best_of(pc_text, 1)
    try:
        ref_om: float | None = best_of(pc_om, 1)
    except ValueError as exc:  # it rejects histograms with many timestamped points per series
        ref_om, om_note = None, str(exc)
    print(f"file: {mb:.1f} MB, {lines:,} lines")
    print(f"perfkit.sources.openmetrics   {ours:7.2f} s  {mb / ours:7.1f} MB/s")
    print(
        f"prometheus_client text parser {ref_text:7.2f} s  {mb / ref_text:7.1f} MB/s   ratio {ref_text / ours:5.1f}x"
    )
    if ref_om is not None:
        print(
            f"prometheus_client OM parser   {ref_om:7.2f} s  {mb / ref_om:7.1f} MB/s   ratio {ref_om / ours:5.1f}x"
        )
    else:
        print(f"prometheus_client OM parser   cannot read this file: {om_note}")
    print(f"target: >= 10x the text parser -> {'MET' if ref_text / ours >= 10 else 'NOT MET'}")


if __name__ == "__main__":
    main()
