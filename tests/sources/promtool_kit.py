"""The real promtool and Prometheus for the metric-format tests: blocks, dumps, a server, a snapshot."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import requests
from servers import require_binary, serving

from perfkit.core.frames import MetricStore
from perfkit.lab.servers import free_port

FIXTURES = Path(__file__).resolve().parents[1] / "data" / "promtool"


def make_blocks(om: Path, out: Path) -> Path:
    """TSDB blocks of the OpenMetrics file ``om`` (``promtool tsdb create-blocks-from openmetrics``)."""
    made = subprocess.run(
        [require_binary("promtool"), "tsdb", "create-blocks-from", "openmetrics", str(om), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    return out


def dump(blocks: Path, out: Path, work: Path) -> Path:
    """``promtool tsdb dump`` of ``blocks`` (on a copy: promtool writes into the folder it opens)."""
    copy = work / "dump-copy"
    shutil.copytree(blocks, copy)
    (copy / "wal").mkdir(exist_ok=True)
    with out.open("wb") as fh:
        done = subprocess.run(
            [require_binary("promtool"), "tsdb", "dump", str(copy)],
            stdout=fh,
            stderr=subprocess.PIPE,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr
    shutil.rmtree(copy)
    return out


@contextlib.contextmanager
def prometheus(blocks: Path, work: Path) -> Iterator[tuple[str, Path]]:
    """(base URL, data folder) of a real Prometheus on a free 127.0.0.1 port over a copy of
    ``blocks``, its admin API on (snapshots); stopped by its PID at the end."""
    binary = require_binary("prometheus")
    data = work / "prometheus-data"
    shutil.copytree(blocks, data)
    config = work / "prometheus.yml"
    config.write_text("global: {scrape_interval: 15s}\nscrape_configs: []\n")
    port = free_port()
    argv = [
        binary,
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=3650d",
        "--web.enable-admin-api",
    ]
    url = f"http://127.0.0.1:{port}"
    with serving(argv, url, work / "prometheus.log"):
        yield url, data


def snapshot(url: str, data: Path, out: Path) -> Path:
    """A snapshot taken by the running Prometheus (``POST /api/v1/admin/tsdb/snapshot``), copied to ``out``."""
    made = requests.post(f"{url}/api/v1/admin/tsdb/snapshot", timeout=60)
    assert made.status_code == 200, made.text
    shutil.copytree(data / "snapshots" / made.json()["data"]["name"], out)
    return out


def sorted_frame(frame: pl.DataFrame) -> pl.DataFrame:
    cols = sorted(frame.columns)
    return frame.select(cols).sort(cols)


def differences(want: MetricStore, got: MetricStore, *, leave_out: tuple[str, ...] = ()) -> list[str]:
    """What differs between two stores' samples (families, label columns, rows); NaN equals NaN."""
    out = [f"{n}: missing" for n in want.frames if n not in got.frames and n not in leave_out]
    out += [f"{n}: not in the source" for n in got.frames if n not in want.frames]
    for name, frame in want.frames.items():
        if name in leave_out or name not in got.frames:
            continue
        a, b = sorted_frame(frame), sorted_frame(got.frames[name])
        if a.columns != b.columns:
            out.append(f"{name}: columns {a.columns} != {b.columns}")
        elif not a.equals(b):
            out.append(f"{name}: {a.height} rows != {b.height} rows, or values differ")
    return out
