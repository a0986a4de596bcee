"""A fleet capture for scale checks: several serving workloads, each replicated over hosts, in one bundle.

A fleet's Prometheus holds every model's vLLM engines and every host's DCGM and node exporters;
an incident is about one of them. :func:`write_fleet` builds such a bundle from embedded
scenarios (``data/scenarios/<name>``): each :class:`FleetWorkload` repeats one scenario's metrics
on ``replicas`` hosts, relabelled as a real scrape would label them:

* vLLM series get ``instance="<host>:8000"`` and the workload's ``model_name``;
* DCGM series get the host's ``Hostname`` and per-host GPU ``UUID`` s; node series ``instance="<host>:9100"``;
* the other workloads' timestamps are shifted so their incident windows line up with the first's.

The values are the scenario's own (byte for byte), so scoping the fleet to the first workload
must give that scenario's triage answer. The first workload's ``incident.yaml``, ``events.csv``
and ``logs/`` are the bundle's.

It is written by bytes replacement of each scenario's text (vectorised, ~1 GB in seconds), one
file per workload and exporter, each family's samples together (``vllm-a.om``, ``dcgm-a.om`` ...).
"""

from __future__ import annotations

import json
import re
import shutil
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl

from perfkit.core.frames import to_ms
from perfkit.core.resources import SCENARIOS
from perfkit.sources.incident_file import read_incident

FLEET_VERSION = 1
"""Bumped when what :func:`write_fleet` writes changes, so a cached fleet is rebuilt."""
EXPORTERS = ("vllm", "dcgm", "node")
MAX_REPLICAS = 500


@dataclass(frozen=True)
class FleetWorkload:
    model: str  # the model_name its engines report
    scenario: str  # the embedded scenario whose metrics each replica repeats
    replicas: int  # hosts it runs on (one vLLM engine and its GPUs each)


def default_fleet(replicas: int) -> list[FleetWorkload]:
    """Four serving workloads of ``replicas`` hosts each; the incident is the first one's."""
    return [
        FleetWorkload("meta-llama/Llama-3.1-70B-Instruct", "p95-prefill-interference", replicas),
        FleetWorkload("mistralai/Mixtral-8x22B-Instruct-v0.1", "queueing-traffic-surge", replicas),
        FleetWorkload("Qwen/Qwen3-32B", "kv-prefix-cache-thrash", replicas),
        FleetWorkload("Qwen/Qwen3-32B-FP8", "decode-thermal-throttle", replicas),
    ]


def replica_bytes(workloads: list[FleetWorkload], scenarios: Path = SCENARIOS) -> list[int]:
    """Bytes of metrics one replica of each workload writes (relabelled and shifted as written)."""
    start = to_ms(read_incident(scenarios / workloads[0].scenario / "incident.yaml").window.start)
    sizes = []
    for i, w in enumerate(workloads):
        size = 0
        for exporter, text in _texts(scenarios / w.scenario, start).items():
            for old, new in _renames(exporter, text, w.model)(host_name(i, 0), 0):
                size += text.count(old) * (len(new) - len(old))
            size += len(text)
        sizes.append(size)
    return sizes


def _texts(source: Path, start_ms: int) -> dict[str, bytes]:
    """A scenario's exporter texts, timestamps moved so its window starts at ``start_ms``."""
    shift_ms = start_ms - to_ms(read_incident(source / "incident.yaml").window.start)
    return {e: _shift((source / "metrics" / f"{e}.om").read_bytes(), shift_ms) for e in EXPORTERS}


def host_name(workload: int, replica: int) -> str:
    return f"gpu-{chr(ord('a') + workload)}{replica:02d}"


def write_fleet(out: Path, workloads: list[FleetWorkload], *, scenarios: Path = SCENARIOS) -> dict[str, Any]:
    """Write the fleet bundle into ``out``; return what was written.

    A complete bundle already in ``out`` written from the same workloads (and
    :data:`FLEET_VERSION`) is kept; another fleet there is replaced. Any other non-empty ``out``
    is refused (``ValueError``): it is never deleted.
    """
    if not workloads or not all(0 < w.replicas <= MAX_REPLICAS for w in workloads):
        raise ValueError(f"a fleet needs workloads of 1 to {MAX_REPLICAS} replicas")
    if len(workloads) > 26:
        raise ValueError("at most 26 workloads (hosts are named gpu-a00 ... gpu-z99)")
    spec = {"version": FLEET_VERSION, "workloads": [asdict(w) for w in workloads]}
    marker = out / "fleet.json"
    if marker.is_file():
        known = json.loads(marker.read_text())
        if known.get("spec") == spec and known.get("complete"):
            return dict(known)
        shutil.rmtree(out)
    elif out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty and holds no fleet bundle: not replaced")
    (out / "metrics").mkdir(parents=True)
    marker.write_text(json.dumps({"spec": spec, "complete": False}))
    first = scenarios / workloads[0].scenario
    shutil.copy(first / "incident.yaml", out / "incident.yaml")
    if (first / "events.csv").is_file():
        shutil.copy(first / "events.csv", out / "events.csv")
    if (first / "logs").is_dir():
        shutil.copytree(first / "logs", out / "logs")
    start = to_ms(read_incident(first / "incident.yaml").window.start)
    written: dict[str, int] = {}
    for i, w in enumerate(workloads):
        texts = _texts(scenarios / w.scenario, start)
        hosts = [host_name(i, r) for r in range(w.replicas)]
        letter = chr(ord("a") + i)
        for exporter, text in texts.items():
            rename = _renames(exporter, text, w.model)
            path = out / "metrics" / f"{exporter}-{letter}.om"
            written[path.name] = _write_replicated(path, text, [rename(h, r) for r, h in enumerate(hosts)])
    summary = {
        "spec": spec,
        "complete": True,
        "bytes": sum(written.values()),
        "files": written,
        "hosts": {w.model: [host_name(i, r) for r in range(w.replicas)] for i, w in enumerate(workloads)},
    }
    marker.write_text(json.dumps(summary, indent=1))
    return summary


def _shift(text: bytes, shift_ms: int) -> bytes:
    """``text`` with every sample's timestamp moved by ``shift_ms`` (written to the millisecond)."""
    if not shift_ms:
        return text
    lines = pl.Series("line", [text.decode("utf-8")]).str.split("\n").explode()
    frame = pl.DataFrame({"line": lines}).with_columns(
        sample=~pl.col("line").str.starts_with("#") & (pl.col("line") != ""),
        ts=(pl.col("line").str.extract(r" ([^ ]+)$", 1).cast(pl.Float64, strict=False) * 1000).round(),
    )
    ts = (pl.col("ts").cast(pl.Int64) + shift_ms).alias("ts_ms")
    moved = frame.with_columns(ts).select(
        pl.when(pl.col("sample"))
        .then(
            pl.col("line").str.replace(r" [^ ]+$", " ", literal=False)
            + (pl.col("ts_ms") // 1000).cast(pl.Utf8)
            + "."
            + (pl.col("ts_ms") % 1000).cast(pl.Utf8).str.zfill(3)
        )
        .otherwise(pl.col("line"))
    )
    return "\n".join(moved.to_series().to_list()).encode("utf-8")


def _first(pattern: bytes, text: bytes, what: str) -> bytes:
    m = re.search(pattern, text)
    if m is None:
        raise ValueError(f"scenario metrics have no {what}")
    return m.group(1)


def _renames(exporter: str, text: bytes, model: str) -> Any:
    """For ``exporter``'s text: (host, replica) -> the (old, new) byte replacements of that replica."""
    if exporter == "vllm":
        old = _first(rb'model_name="([^"]*)"', text, "model_name")
        return lambda host, _: [
            (
                b'model_name="%s"' % old,
                b'instance="%s:8000",model_name="%s"' % (host.encode(), model.encode()),
            )
        ]
    if exporter == "dcgm":
        old = _first(rb'Hostname="([^"]*)"', text, "DCGM Hostname")
        uuids = sorted(set(re.findall(rb'UUID="GPU-([0-9a-f]{8})-', text)))

        def dcgm(host: str, replica: int) -> list[tuple[bytes, bytes]]:
            pairs = [(b'Hostname="%s"' % old, b'Hostname="%s"' % host.encode())]
            pairs += [
                (b'UUID="GPU-%s-' % u, b'UUID="GPU-%08x-' % zlib.crc32(host.encode() + u)) for u in uuids
            ]
            return pairs

        return dcgm
    old = _first(rb'instance="([^":]*):9100"', text, "node exporter instance")
    return lambda host, _: [(b'instance="%s:9100"' % old, b'instance="%s:9100"' % host.encode())]


def _write_replicated(path: Path, text: bytes, renames: list[list[tuple[bytes, bytes]]]) -> int:
    """One file holding ``text`` once per rename list, each family's samples together, one # EOF."""
    body = text.rstrip()
    if body.endswith(b"# EOF"):
        body = body[: -len(b"# EOF")]
    families = re.split(rb"(?m)^(?=# TYPE )", body)
    size = 0
    with path.open("wb") as fh:
        for family in families:
            head, samples = _split_header(family)
            size += fh.write(head)
            for pairs in renames:
                replica = samples
                for old, new in pairs:
                    replica = replica.replace(old, new)
                size += fh.write(replica)
        size += fh.write(b"# EOF\n")
    return size


def _split_header(family: bytes) -> tuple[bytes, bytes]:
    """A family's comment lines (TYPE, HELP, UNIT) and its samples, each ending in a newline."""
    pos = 0
    while family.startswith(b"#", pos):
        end = family.find(b"\n", pos)
        pos = len(family) if end < 0 else end + 1
    samples = family[pos:]
    if samples and not samples.endswith(b"\n"):
        samples += b"\n"
    return family[:pos], samples
