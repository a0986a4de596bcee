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


def test_nan_bursts_keep_the_surge_confirmed(tmp_path):
    """NaN samples in vllm:num_requests_waiting made the window's average NaN (in Prometheus too),
    so the queue row said 'queue length unknown'; the finite steps are judged instead."""
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
    top = triage(bundle)["directions"][0]
    assert (top["id"], top["verdict"]) == ("scheduler_queueing", "confirmed"), top["verification"]


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


def test_a_single_cuda_oom_line_is_the_oom_symptom(tmp_path):
    """One `torch.OutOfMemoryError` line is enough (OOM_LINES sits between 0 and 1): an engine that
    crashed on its first OOM leaves exactly one. The other four of the scenario's lines are removed."""
    bundle = copy(tmp_path, "oom-sampler-kv-full")
    seen = []

    def keep_first_oom(lines):
        out = []
        for line in lines:
            if "CUDA out of memory" in line:
                if seen:
                    continue
                seen.append(line)
            out.append(line)
        return out

    rewrite(bundle / "logs" / "vllm.log", keep_first_oom)
    assert len(seen) == 1
    doc = triage(bundle)
    oom = next(d for d in doc["directions"] if d["id"] == "memory_oversubscription")
    assert oom["verdict"] == "confirmed" and oom["verification"]["cuda_oom_lines"] == 1, oom
    assert doc["directions"][0]["id"] == "memory_oversubscription"


def test_kv_pressure_without_prefix_cache_counters_rests_on_the_cache_fill(tmp_path):
    """An engine that exports no prefix-cache counters (older vLLM, caching off): the KV cache at 96 %
    with prefill 83 % of TTFT still confirms KV-cache pressure, and says it is the fill."""
    bundle = copy(tmp_path, "kv-pressure-shared-gpu")
    rewrite(bundle / "metrics" / "vllm.om", lambda lines: [x for x in lines if "prefix_cache" not in x])
    doc = triage(bundle)
    top = doc["directions"][0]
    assert (top["id"], top["verdict"]) == ("kv_cache_allocation", "confirmed"), top["verification"]
    why = top["verification"]["why"]
    assert "KV cache peaks at 96%" in why and "prefix-cache hit rate" not in why


def test_queue_time_without_anyone_waiting_is_not_confirmed_queueing(tmp_path):
    """Contradictory evidence: the queue-time histogram says 96 % of TTFT is spent queued, but the
    waiting gauge reads 0 all along (a broken exporter). Queueing needs both to agree."""
    bundle = copy(tmp_path, "queueing-traffic-surge")

    def nobody_waits(lines):
        out = []
        for line in lines:
            if line.startswith("vllm:num_requests_waiting{"):
                labels, _, ts = line.rsplit(" ", 2)
                line = f"{labels} 0 {ts}"
            out.append(line)
        return out

    rewrite(bundle / "metrics" / "vllm.om", nobody_waits)
    doc = triage(bundle)
    q = next(d for d in doc["directions"] if d["id"] == "scheduler_queueing")
    assert q["verification"]["waiting_avg"] == 0 and q["verification"]["queue_share_of_ttft"] > 0.9
    assert q["verdict"] == "inconclusive", q["verification"]


def _spike_train_loss(bundle: Path, scrape_indices: list[int], factor: float = 1.6) -> None:
    """Multiply every rank's train_loss at the given scrapes (15 s apart from the file's first)."""
    om = bundle / "metrics" / "train.om"
    lines = om.read_text().splitlines()
    first = min(float(x.rsplit(" ", 1)[1]) for x in lines if x.startswith("train_loss{"))
    at = {round(first + 15 * k, 3) for k in scrape_indices}
    out = []
    for line in lines:
        if line.startswith("train_loss{"):
            head, value, ts = line.rsplit(" ", 2)
            if round(float(ts), 3) in at:
                line = f"{head} {float(value) * factor:.4f} {ts}"
        out.append(line)
    om.write_text("\n".join(out) + "\n")


def test_loss_spikes_the_baseline_had_too_are_no_new_instability(tmp_path):
    """The healthy spike control, with three more isolated spikes in the incident window and three in
    the baseline window: a run that always spiked this often is not newly unstable."""
    bundle = copy(tmp_path, "train-loss-spike-healthy")
    _spike_train_loss(
        bundle, [14, 30, 46, 92, 108, 124]
    )  # 03:03:30, 03:07:30, 03:11:30 | 03:23, 03:27, 03:31
    doc = triage(bundle)
    row = next(d for d in doc["directions"] if d["id"] == "training_instability")
    spikes = row["verification"]["loss_spikes"]
    # several spike episodes in the incident, and about as many in the baseline
    assert spikes["incident"] >= 3 and spikes["baseline"] >= spikes["incident"] - 1, row["verification"]
    assert row["verdict"] != "confirmed", row["verification"]
    assert [d["id"] for d in doc["directions"] if d["verdict"] == "confirmed"] == []
