"""Helpers of the trace tests (not a test module): where the fixtures and HTA's numbers are, and
small Kineto-shaped traces written by the tests.

Each event is one of: a CPU op with ``args`` the reader must skip, a ``cuda_runtime`` launch with
a correlation id, and its GPU ``kernel`` on a stream; plus ``ProfilerStep#N`` and
``enumerate(DataLoader)`` annotations. Timestamps are µs integers unless ``scale``/``fractional``
say otherwise.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

HERE = Path(__file__).parent
#: the real Kineto traces copied from HTA's repository into tests/data/ (SOURCE.txt there says from where)
FIXTURES = HERE.parent / "data" / "hta-traces"
#: HTA 0.5.0's output on each fixture folder (see test_hta_parity.py for the command)
EXPECTED = HERE / "hta-0.5.0"


def expected(folder: str) -> dict:
    """HTA's recorded numbers for a fixture folder (``trace_diff/control`` -> trace_diff_control.json)."""
    return json.loads((EXPECTED / (folder.replace("/", "_") + ".json")).read_text())


def events(steps: int = 3, kernels_per_step: int = 4, *, t0: int = 1_700_000_000_000_000, rank: int = 0):
    """Yield events of ``steps`` steps of 1000 µs: a 100 µs data-loader call, then kernels of
    100 µs every 200 µs (compute), and one NCCL kernel of 300 µs overlapping the last compute."""
    corr = 1
    for s in range(steps):
        base = t0 + s * 1000
        yield {
            "ph": "X",
            "cat": "user_annotation",
            "name": f"ProfilerStep#{s + 1}",
            "pid": 1,
            "tid": 1,
            "ts": base,
            "dur": 1000,
        }
        yield {
            "ph": "X",
            "cat": "user_annotation",
            "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
            "pid": 1,
            "tid": 1,
            "ts": base + 1,
            "dur": 100,
        }
        for k in range(kernels_per_step):
            launch = base + 110 + k * 200
            yield {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 1,
                "ts": launch - 5,
                "dur": 20,
                "args": {
                    "External id": corr,
                    "Input Dims": [[64, 64], [64, 64]],
                    "Input type": ["float", "float"],
                },
            }
            yield {
                "ph": "X",
                "cat": "cuda_runtime",
                "name": "cudaLaunchKernel",
                "pid": 1,
                "tid": 1,
                "ts": launch,
                "dur": 5,
                "args": {"correlation": corr, "external id": corr},
            }
            yield {
                "ph": "X",
                "cat": "kernel",
                "name": "ampere_sgemm_64x64_nn",
                "pid": 0,
                "tid": 7,
                "ts": launch + 10,
                "dur": 100,
                "args": {"stream": 7, "correlation": corr, "device": 0},
            }
            yield {
                "ph": "f",
                "id": corr,
                "pid": 0,
                "tid": 7,
                "ts": launch + 10,
                "cat": "ac2g",
                "name": "ac2g",
                "bp": "e",
            }
            corr += 1
        launch = base + 100 + (kernels_per_step - 1) * 200
        yield {
            "ph": "X",
            "cat": "cuda_runtime",
            "name": "cudaLaunchKernel",
            "pid": 1,
            "tid": 1,
            "ts": launch,
            "dur": 5,
            "args": {"correlation": corr},
        }
        yield {
            "ph": "X",
            "cat": "kernel",
            "name": "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
            "pid": 0,
            "tid": 13,
            "ts": launch + 20,
            "dur": 300,
            "args": {"stream": 13, "correlation": corr},
        }
        corr += 1


def document(evs, *, rank: int = 0, world_size: int = 2, extra: dict | None = None) -> dict:
    return {
        "schemaVersion": 1,
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": world_size},
        "traceEvents": list(evs),
        **(extra or {}),
    }


def write(path: Path, doc: dict, *, indent: int | None = None) -> Path:
    text = json.dumps(doc, indent=indent).encode()
    if path.name.endswith(".gz"):
        path.write_bytes(gzip.compress(text, compresslevel=1))
    else:
        path.write_bytes(text)
    return path
