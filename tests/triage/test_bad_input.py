"""Triage on damaged evidence: it still answers, says what it could not check, and never crashes."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from perfkit.engine.local import LocalEngine
from perfkit.sources.bundle import load_bundle
from perfkit.triage.table import triage_bundle

SCENARIOS = Path(__file__).resolve().parents[2] / "data" / "scenarios"
TS = re.compile(r" (\d{10}\.\d{3})$")


def triage(bundle: Path):
    return triage_bundle(bundle).to_json()


def rewrite(path: Path, fn) -> None:
    lines = path.read_text().splitlines()
    path.write_text("\n".join(fn(lines)) + "\n")


def copy(tmp_path: Path, name: str) -> Path:
    dst = tmp_path / name
    shutil.copytree(SCENARIOS / name, dst)
    return dst


def test_flat_lined_series(tmp_path):
    """A frozen exporter repeats its last values: counters stop, gauges flat. No direction may be confirmed
    from a flat line, and the shift is not blamed on a deploy."""
    bundle = copy(tmp_path, "release-regression")

    def freeze(lines):
        out, last = [], {}
        for line in lines:
            m = TS.search(line)
            if m and float(m.group(1)) > 1795007400:  # 13:50Z: everything after repeats its last value
                key = line[: line.rfind(" ", 0, m.start())]
                line = f"{key} {last.get(key, '0')} {m.group(1)}"
            elif m:
                key, value = line[: m.start()].rsplit(" ", 1)
                last[key] = value
            out.append(line)
        return out

    rewrite(bundle / "metrics" / "vllm.om", freeze)
    doc = triage(bundle)
    assert all(d["verdict"] != "confirmed" for d in doc["directions"]), doc["directions"][:2]


def test_nan_bursts_and_a_window_without_traffic(tmp_path):
    bundle = copy(tmp_path, "queueing-traffic-surge")

    def nans(lines):
        out = []
        for i, line in enumerate(lines):
            m = TS.search(line)
            if m and "vllm:num_requests" in line and i % 7 == 0:
                line = line[: m.start()].rsplit(" ", 1)[0] + f" NaN {m.group(1)}"
            out.append(line)
        return out

    rewrite(bundle / "metrics" / "vllm.om", nans)
    doc = triage(bundle)
    assert doc["directions"][0]["id"] == "scheduler_queueing"  # NaN samples do not hide a real surge
    # a window before any traffic: the server was not scraped yet
    y = (bundle / "incident.yaml").read_text()
    y = re.sub(
        r"window:\n  start: '[^']+'\n  end: '[^']+'",
        "window:\n  start: '2026-11-24T10:00:00Z'\n  end: '2026-11-24T10:30:00Z'",
        y,
    )
    (bundle / "incident.yaml").write_text(y)
    doc = triage(bundle)
    assert all(d["verdict"] != "confirmed" for d in doc["directions"])
    assert any("TTFT" in m or "ttft" in m for m in doc["missing"])


def test_skewed_log_clock_and_duplicate_series(tmp_path):
    bundle = copy(tmp_path, "p95-prefill-interference")

    def skew(lines):  # the log host's clock runs 7 minutes late
        out = []
        for line in lines:
            m = re.search(r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)", line)
            if m:
                h, mi = int(m.group(3)), int(m.group(4)) + 7
                h, mi = h + mi // 60, mi % 60
                line = (
                    line[: m.start()]
                    + f"{m.group(1)}-{m.group(2)} {h:02d}:{mi:02d}:{m.group(5)}"
                    + line[m.end() :]
                )
            out.append(line)
        return out

    rewrite(bundle / "logs" / "vllm.log", skew)
    # the same exporter scraped twice (two jobs): every sample duplicated in a second file
    (bundle / "metrics" / "vllm-dup.om").write_text((bundle / "metrics" / "vllm.om").read_text())
    from perfkit.analyses.completeness import completeness

    b = load_bundle(bundle)
    c = completeness(LocalEngine(b.store), b.incident.window, stats=b.stats, events=b.events)
    assert c.clock_skew_s == pytest.approx(420, abs=30)
    doc = triage(bundle)
    assert doc["directions"][0]["id"] == "prefill_decode_interference"
