"""Print HTA's numbers for one folder of Kineto traces as JSON: the values tests/traces pins.

Not a test: run it with the interpreter of a virtualenv that has HTA (PyPI
``holistictraceanalysis==0.5.0``; ``benchmarks/trace_bench.py`` creates one under
``~/.cache/perfkit-bench/hta``)::

    ~/.cache/perfkit-bench/hta/bin/python tests/traces/hta_reference.py FOLDER > out.json

Default mode is exactly ``TraceAnalysis(trace_dir=FOLDER)`` (HTA's trimming to GPU work launched
before the last ProfilerStep), split into its steps (``Trace.parse_traces``,
``_align_all_ranks``, ``_filter_irrelevant_gpu_kernels``) so that the same parse also gives the
untrimmed ("whole trace") numbers: the analyses run on the aligned frames without the filter.
"""

from __future__ import annotations

import json
import sys
import warnings

warnings.filterwarnings("ignore")


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("holistictraceanalysis", "traceinsight"):
        try:
            return f"{dist} {version(dist)}"
        except PackageNotFoundError:
            continue
    return "unknown"


def _frames(t):
    for rank, df in t.traces.items():
        df = df.set_index("index", drop=False)
        df.index.names = [None]
        t.traces[rank] = df


def _analyses(t, ta_cls):
    from hta.analyzers.breakdown_analysis import BreakdownAnalysis
    from hta.analyzers.communication_analysis import CommunicationAnalysis
    from hta.analyzers.cuda_kernel_analysis import CudaKernelAnalysis

    out = {}

    def guard(key, fn):
        try:
            out[key] = fn()
        except Exception as exc:  # HTA fails on some fixtures: record how
            out[key] = {"error": f"{type(exc).__name__}: {exc}"}

    guard(
        "temporal",
        lambda: BreakdownAnalysis.get_temporal_breakdown(t, visualize=False).to_dict("records"),
    )
    guard(
        "overlap",
        lambda: CommunicationAnalysis.get_comm_comp_overlap(t, visualize=False).to_dict("records"),
    )

    def idle():
        res = {}
        for rank in sorted(t.traces):
            df, _ = BreakdownAnalysis.get_idle_time_breakdown(
                t, consecutive_kernel_delay=30, rank=rank, visualize=False
            )
            res[str(rank)] = df.to_dict("records")
        return res

    guard("idle", idle)

    def kernels():
        types, kdf = BreakdownAnalysis.get_gpu_kernel_breakdown(
            t, visualize=False, duration_ratio=0.8, num_kernels=10, include_memory_kernels=True
        )
        return {
            "types": types.to_dict("records"),
            "kernels": kdf[["name", "sum (us)", "kernel_type", "rank"]].to_dict("records"),
        }

    guard("kernels", kernels)

    def launch():
        res = {}
        stats = CudaKernelAnalysis.cuda_kernel_launch_stats(t, sorted(t.traces), visualize=False)
        for rank, df in stats.items():
            res[str(rank)] = {
                "count": int(len(df)),
                "launch_delay_sum": float(df["launch_delay"].sum()),
                "launch_delay_max": float(df["launch_delay"].max()) if len(df) else None,
                "launch_delay_over_100": int((df["launch_delay"] > 100).sum()),
                "cpu_duration_over_50": int((df["cpu_duration"] > 50).sum()),
                "short_gpu": int(
                    ((df["cpu_duration"] <= 50) & (df["gpu_duration"] < df["cpu_duration"])).sum()
                ),
            }
        return res

    guard("launch", launch)
    return out


def _clean(value):
    """NaN (HTA's answer for an empty ratio) as null, so the output is strict JSON."""
    if isinstance(value, float) and value != value:
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if hasattr(value, "item"):  # numpy scalars
        return _clean(value.item())
    return value


def main(folder: str) -> None:
    from hta.analyzers.straggler_analysis import StragglerAnalysis
    from hta.common.trace import Trace
    from hta.trace_analysis import TraceAnalysis

    result = {"hta": _version(), "folder": folder}
    t = Trace(trace_dir=folder)
    try:
        t.parse_traces(use_multiprocessing=False)
    except Exception as exc:  # not a trace HTA can read
        result["error"] = f"{type(exc).__name__}: {exc}"
        json.dump(result, sys.stdout, indent=1)
        return
    t._align_all_ranks()
    raw = {rank: df.copy() for rank, df in t.traces.items()}
    t._filter_irrelevant_gpu_kernels(False)
    _frames(t)
    t.is_parsed = True
    result["ranks"] = sorted(t.traces)
    result["default"] = _analyses(t, TraceAnalysis)
    try:
        result["default"]["steps"] = [int(s) for s in StragglerAnalysis.get_profiler_steps(t)]
        result["default"]["stragglers"] = [int(r) for r in StragglerAnalysis.get_potential_stragglers(t)]
    except Exception as exc:
        result["default"]["stragglers"] = {"error": f"{type(exc).__name__}: {exc}"}
    t.traces = raw
    _frames(t)
    result["whole"] = _analyses(t, TraceAnalysis)
    json.dump(_clean(result), sys.stdout, indent=1, allow_nan=False)


if __name__ == "__main__":
    main(sys.argv[1])
