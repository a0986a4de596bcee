"""Profiler-trace analysis: perfkit vs Holistic Trace Analysis (HTA) vs merely parsing the file.

Issue 12, item 3. On ``df_index_resolver.json.gz`` (3.0 MB gzip, 54 MB of JSON, 216k events) it
times, each in its own child process, best of ``--repeat`` runs, with the child's peak RSS
(``ru_maxrss``):

* **HTA**: ``TraceAnalysis(trace_dir=...)`` then its temporal breakdown, comm/comp overlap, idle
  breakdown and kernel breakdown (PyPI ``holistictraceanalysis==0.5.0``, else ``traceinsight``,
  installed into its own virtualenv under ``~/.cache/perfkit-bench/hta``, created if missing);
* **perfkit**: ``perfkit.traces.analyze`` (the same analyses plus launch delays, steps, stragglers);
* **parse**: gunzip and parse the whole document with the fastest JSON parser here (orjson, else
  json), the floor any reader that looks at every event pays.

Targets: perfkit >= 20x faster than HTA, and within 2x of the parse. ``--big-gb N`` also writes an
N GB (text) trace by repeating the file's events (shifted in time, new correlation ids and step
numbers) and reports perfkit's time and peak RSS on it: memory must not grow with the file.

    python benchmarks/trace_bench.py [--repeat 3] [--big-gb 1] [--skip-hta]
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FILE = REPO / "tests" / "data" / "hta-traces" / "df_index_resolver" / "df_index_resolver.json.gz"
CACHE = Path.home() / ".cache" / "perfkit-bench"
HTA_VENV = CACHE / "hta"
SPEED_TARGET = 20.0  # x faster than HTA
PARSE_TARGET = 2.0  # x the time to decompress + parse

_CHILD = {
    "hta": """
        from hta.trace_analysis import TraceAnalysis
        t0 = time.perf_counter()
        a = TraceAnalysis(trace_dir=TARGET)
        a.get_temporal_breakdown(visualize=False)
        a.get_comm_comp_overlap(visualize=False)
        for rank in a.t.get_ranks():
            a.get_idle_time_breakdown(ranks=[rank], visualize=False)
        a.get_gpu_kernel_breakdown(visualize=False)
        """,
    "perfkit": """
        from perfkit.traces import analyze
        t0 = time.perf_counter()
        analyze(TARGET)
        """,
    "parse": """
        import gzip
        try:
            import orjson as parser
        except ImportError:
            import json as parser
        t0 = time.perf_counter()
        with open(TARGET, "rb") as f:
            raw = f.read()
        parser.loads(gzip.decompress(raw) if raw[:2] == b"\\x1f\\x8b" else raw)
        """,
    "gunzip": """
        import zlib
        t0 = time.perf_counter()
        z = zlib.decompressobj(31)
        with open(TARGET, "rb") as f:
            while chunk := f.read(1 << 20):
                z.decompress(chunk)
        """,
}


def ensure_hta() -> tuple[Path, str]:
    """The HTA virtualenv's interpreter and the distribution it has; created on first use."""
    python = HTA_VENV / "bin" / "python"
    probe = "import importlib.metadata as m, hta\nfor d in ('holistictraceanalysis', 'traceinsight'):\n    try: print(d, m.version(d)); break\n    except m.PackageNotFoundError: pass"
    if python.exists():
        got = subprocess.run([python, "-c", probe], capture_output=True, text=True)
        if got.returncode == 0 and got.stdout.strip():
            return python, got.stdout.strip()
    HTA_VENV.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(HTA_VENV)], check=True)
    for spec in ("holistictraceanalysis==0.5.0", "traceinsight"):
        print(f"installing {spec} into {HTA_VENV} ...", flush=True)
        if subprocess.run([python, "-m", "pip", "install", "-q", spec]).returncode == 0:
            got = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
            return python, got.stdout.strip()
    raise SystemExit("could not install HTA (holistictraceanalysis 0.5.0 nor traceinsight)")


def child(kind: str, python: Path | str, target: Path) -> dict[str, float]:
    """Run one measurement in a fresh interpreter: seconds of work (imports excluded), process
    wall seconds, peak RSS in MB."""
    body = textwrap.dedent(_CHILD[kind])
    code = (
        "import json, resource, sys, time, warnings, logging\n"
        "warnings.filterwarnings('ignore'); logging.disable(logging.CRITICAL)\n"
        f"TARGET = {str(target)!r}\n{body}\n"
        "work = time.perf_counter() - t0\n"
        "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "print(json.dumps({'work': work, 'rss_mb': rss}))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    started = time.perf_counter()
    out = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{out.stderr[-2000:]}")
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return {"work": got["work"], "wall": wall, "rss_mb": got["rss_mb"]}


def best(kind: str, python: Path | str, target: Path, repeat: int) -> dict[str, float]:
    runs = [child(kind, python, target) for _ in range(repeat)]
    return {
        "work": min(r["work"] for r in runs),
        "wall": min(r["wall"] for r in runs),
        "rss_mb": max(r["rss_mb"] for r in runs),
    }


def write_big(source: Path, gigabytes: float) -> Path:
    """An N GB trace: the source's events repeated, each copy shifted past the previous one in
    time, with its own correlation ids and ProfilerStep numbers (cached)."""
    import orjson

    out = CACHE / f"big-{gigabytes:g}gb.json.gz"
    if out.exists():
        return out
    doc = orjson.loads(gzip.decompress(source.read_bytes()))
    events = doc.pop("traceEvents")
    t = [e["ts"] for e in events if isinstance(e.get("ts"), int | float)]
    span = int(max(t) - min(t)) + 1_000_000
    corr_span = 1 + max(int(e.get("args", {}).get("correlation", 0) or 0) for e in events)
    head = orjson.dumps(doc)[:-1] + b',"traceEvents":['
    written, copy = 0, 0
    tmp = out.with_suffix(".tmp")
    with gzip.open(tmp, "wb", compresslevel=1) as f:
        f.write(head)
        while written < gigabytes * 1e9:
            shifted = []
            for e in events:
                e = dict(e)
                if isinstance(e.get("ts"), int | float):
                    e["ts"] += copy * span
                name = e.get("name")
                if isinstance(name, str) and name.startswith("ProfilerStep#"):
                    e["name"] = f"ProfilerStep#{copy * 1000 + int(name.split('#')[1])}"
                args = e.get("args")
                if (
                    isinstance(args, dict)
                    and isinstance(args.get("correlation"), int)
                    and args["correlation"] >= 0
                ):
                    e["args"] = dict(args, correlation=args["correlation"] + copy * corr_span)
                shifted.append(e)
            piece = orjson.dumps(shifted)[1:-1]
            f.write((b"," if copy else b"") + piece)
            written += len(piece)
            copy += 1
        f.write(b"]}")
    tmp.rename(out)
    print(f"wrote {out} ({written / 1e9:.2f} GB of text, {copy} copies)", file=sys.stderr, flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--file", type=Path, default=FILE, help="a trace file alone in its folder (HTA reads folders)"
    )
    ap.add_argument("--skip-hta", action="store_true")
    ap.add_argument(
        "--big-gb", type=float, default=0.0, help="also measure perfkit on a trace of this many GB"
    )
    args = ap.parse_args()
    target = args.file
    print(f"trace: {target} ({target.stat().st_size / 1e6:.1f} MB on disk)")
    results = {}
    if not args.skip_hta:
        hta_python, dist = ensure_hta()
        print(f"HTA: {dist} ({hta_python})")
        results["HTA"] = best("hta", hta_python, target.parent, args.repeat)
    results["perfkit"] = best("perfkit", sys.executable, target, args.repeat)
    results["parse"] = best("parse", sys.executable, target, args.repeat)
    results["gunzip"] = best("gunzip", sys.executable, target, args.repeat)
    print(f"\n{'':10}{'work s':>9}{'process s':>11}{'peak RSS MB':>13}")
    for name, r in results.items():
        print(f"{name:10}{r['work']:9.3f}{r['wall']:11.3f}{r['rss_mb']:13.0f}")
    pk, parse = results["perfkit"], results["parse"]
    print(
        f"\nperfkit / parse (orjson or json, whole file): {pk['work'] / parse['work']:.2f}x  (target <= {PARSE_TARGET:g}x)"
    )
    if "HTA" in results:
        hta = results["HTA"]
        print(
            f"HTA / perfkit: {hta['work'] / pk['work']:.1f}x by work, {hta['wall'] / pk['wall']:.1f}x by process wall "
            f"(target >= {SPEED_TARGET:g}x); peak RSS {pk['rss_mb']:.0f} MB vs HTA's {hta['rss_mb']:.0f} MB"
        )
    if args.big_gb > 0:
        # written by a child: ru_maxrss survives fork and exec, so the children measured next
        # would otherwise inherit this process's peak from holding the source's events
        code = f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import trace_bench as b; "
        code += f"print(b.write_big(b.Path({str(target)!r}), {args.big_gb!r}))"
        made = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
        big = Path(made.stdout.strip().splitlines()[-1])
        r = child("perfkit", sys.executable, big)
        g = child("gunzip", sys.executable, big)
        print(
            f"\n{args.big_gb:g} GB trace ({big.stat().st_size / 1e6:.0f} MB gzip): perfkit {r['work']:.1f} s, "
            f"peak RSS {r['rss_mb']:.0f} MB (gunzip alone {g['work']:.1f} s, {g['rss_mb']:.0f} MB)"
        )


if __name__ == "__main__":
    main()
