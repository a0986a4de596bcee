"""The streamed pass over ``traceEvents``: element boundaries found outside strings whatever the
chunking, every event an analysis needs selected, and memory that does not grow with the file."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest
import trace_synth as synth
from trace_synth import FIXTURES

from perfkit.traces.read import read_trace
from perfkit.traces.scan import ScanResult, scan_events

TRICKY_NAMES = [
    "brace { and } in a name",
    "bracket ] then [",
    'a "quoted" word',
    "backslash \\ alone",
    'escaped quote then brace \\" }',
    "double backslash before quote \\\\",
    'ends with escaped quote \\"',
    "traceEvents",
    "ProfilerStep#7",
    "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__",
    "unicode µs → ✓",
]


def _tricky_document() -> bytes:
    events = []
    for i, name in enumerate(TRICKY_NAMES):
        events.append({"ph": "X", "cat": "cpu_op", "name": name, "ts": i, "dur": 1, "args": {"note": name}})
        events.append(
            {
                "ph": "X",
                "cat": "kernel",
                "name": name,
                "ts": i,
                "dur": 1,
                "args": {"stream": 7, "correlation": i},
            }
        )
        events.append(
            {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "ts": i,
                "dur": 1,
                "args": {"correlation": i},
            }
        )
    events.append({"ph": "i", "name": "stream", "ts": 1})  # a decoy: the key's bytes as a value
    events.append([1, {"nested": ["]"]}])  # not an object: skipped, must not derail the scan
    doc = {
        "schemaVersion": 1,
        "note": 'a string that says "traceEvents": [ but is not the key',
        "nested": {"traceEvents": [{"args": {"stream": 9}}]},
        "distributedInfo": {"rank": 3, "world_size": 4},
        "traceEvents": events,
        "traceName": "after } the ] array",
        "baseTimeNanoseconds": 1700000000000000000,
    }
    return json.dumps(doc, ensure_ascii=False, indent=1).encode()


def _needed(e) -> bool:
    """What the reader must see (independent of the scanner's byte tests)."""
    if not isinstance(e, dict):
        return False
    args, name = e.get("args"), str(e.get("name", ""))
    return (isinstance(args, dict) and ("stream" in args or "correlation" in args)) or (
        "ProfilerStep" in name or name.startswith("enumerate(DataLoader)")
    )


def _scan(text: bytes, chunk: int):
    stream = io.BytesIO(text)
    result = ScanResult()
    events = [e for batch in scan_events(stream.read, result, chunk=chunk) for e in batch]
    return events, result


@pytest.mark.parametrize("chunk", [1, 2, 3, 7, 64, 1000, 1 << 20])
def test_tricky_strings_at_every_chunking(chunk):
    text = _tricky_document()
    doc = json.loads(text)
    events, result = _scan(text, chunk)
    key = lambda e: json.dumps(e, sort_keys=True)  # noqa: E731
    got, want = Counter(map(key, events)), Counter(key(e) for e in doc["traceEvents"] if _needed(e))
    assert got - want == Counter({key({"ph": "i", "name": "stream", "ts": 1}): 1})  # only the decoy extra
    assert want - got == Counter()
    assert result.elements == len(doc["traceEvents"])
    assert result.meta["distributedInfo"] == {"rank": 3, "world_size": 4}
    assert result.meta["nested"] == {"traceEvents": [{"args": {"stream": 9}}]}
    assert result.meta["traceName"] == "after } the ] array"
    assert result.bytes_read == len(text)


def test_a_real_trace_reads_the_same_in_small_chunks(monkeypatch):
    """nccl_data (9.8 MB of text) in 4 kB chunks: events straddle every boundary."""
    path = FIXTURES / "nccl_parser_config" / "nccl_data.json.gz"
    whole = read_trace(path)
    monkeypatch.setattr("perfkit.traces.scan.CHUNK", 4096)
    from perfkit.traces import scan

    assert scan.CHUNK == 4096
    monkeypatch.setattr(
        "perfkit.traces.read.scan_events", lambda read, result: scan.scan_events(read, result, chunk=4096)
    )
    small = read_trace(path)
    assert small.events == whole.events == 40573
    for a, b in ((whole.device, small.device), (whole.host, small.host), (whole.marks, small.marks)):
        for name in a.data:
            assert np.array_equal(a[name], b[name]), name


def test_every_needed_event_of_a_fixture_is_selected():
    """Against a plain json.loads of df_index_resolver: the reader keeps exactly the GPU events
    (stream != -1) and the CPU events with a correlation id that HTA's frame would hold."""
    path = FIXTURES / "df_index_resolver" / "df_index_resolver.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    usable = [
        e for e in doc["traceEvents"] if e.get("dur") is not None and e.get("cat") not in (None, "Trace")
    ]
    gpu = sum(1 for e in usable if int(e.get("args", {}).get("stream", -1)) != -1)
    corr = sum(
        1
        for e in usable
        if e.get("args", {}).get("correlation", -1) != -1 and e.get("args", {}).get("stream", -1) == -1
    )
    t = read_trace(path)
    assert len(t.device) == gpu == 22290
    assert len(t.host) == corr
    assert t.events == len(doc["traceEvents"])


def test_memory_stays_bounded_on_a_large_trace(tmp_path):
    """A 120 MB trace (text) is read in a child process whose peak RSS stays far below what
    parsing the document whole takes (json.loads needs several times the text: ~700 MB here)."""
    step = list(synth.events(steps=1, kernels_per_step=40))
    path = tmp_path / "big.json.gz"
    size = 0
    with gzip.open(path, "wb", compresslevel=1) as out:
        head = json.dumps(synth.document([]))[:-2].encode()  # '{..., "traceEvents": [' without ']}'
        out.write(head)
        for s in range(4000):
            piece = []
            for e in step:
                e = dict(e, ts=e["ts"] + s * 10_000)  # 40 kernels 200 µs apart fit in 10 ms
                if e["name"].startswith("ProfilerStep"):
                    e["name"] = f"ProfilerStep#{s + 1}"
                if "correlation" in e.get("args", {}):
                    e["args"] = dict(e["args"], correlation=e["args"]["correlation"] + s * 100)
                piece.append(json.dumps(e))
            text = ("," if s else "") + ",".join(piece)
            out.write(text.encode())
            size += len(text)
        out.write(b"]}")
    assert size > 100e6
    code = textwrap.dedent(
        f"""
        import resource, sys
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        from perfkit.traces import analyze
        import numpy, orjson
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        r = analyze({str(path)!r})
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        print(r.ranks[0].gpu_events, (peak - base) // 1024, file=sys.stderr)
        print(r.ranks[0].gpu_events, (peak - base) // 1024)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    gpu_events, growth_mb = map(int, out.stdout.split())
    assert gpu_events == 3999 * 41  # trimmed: the last step's kernels are cut, as HTA does
    assert growth_mb < 160, f"peak RSS grew {growth_mb} MB reading a 120 MB trace"
