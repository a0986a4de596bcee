"""An incident whose metrics came as promtool's dump, as query_range JSON or as a TSDB snapshot is
triaged as the same incident in OpenMetrics: the issue's done-when (issue 35, "the formats users have").

The embedded p95-prefill-interference bundle's .om files are backfilled into TSDB blocks by the real
promtool; then its bundle is copied with metrics/ replaced by (a) ``promtool tsdb dump`` of the
blocks, (b) the answer of a real Prometheus's ``/api/v1/query_range`` over them, (c) the snapshot that
Prometheus takes of them. The dump and the snapshot hold the very samples: their triage JSON is the
original's. A range query re-samples each series on its 15 s grid (the last sample at or before each
step), so its numbers move a little: same directions, verdicts and ranks, ratios within 1 %.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import requests
from promtool_kit import dump, make_blocks, prometheus, snapshot

from perfkit.lab.servers import merged_openmetrics, metric_files
from perfkit.sources.bundle import load_bundle

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # ~15-25 s: promtool, Prometheus, four triages

SCENARIO = Path(__file__).resolve().parents[2] / "data" / "scenarios" / "p95-prefill-interference"


def _copy_without_metrics(dst: Path) -> Path:
    dst.mkdir(parents=True)
    for name in ("incident.yaml", "events.csv"):
        shutil.copy(SCENARIO / name, dst / name)
    shutil.copytree(SCENARIO / "logs", dst / "logs")
    (dst / "metrics").mkdir()
    return dst


@pytest.fixture(scope="module")
def bundles(tmp_path_factory) -> dict[str, Path]:
    work = tmp_path_factory.mktemp("formats")
    blocks = make_blocks(merged_openmetrics(metric_files(SCENARIO), work / "all.om"), work / "blocks")
    out = {"original": SCENARIO}
    out["dump"] = _copy_without_metrics(work / "dump")
    dump(blocks, out["dump"] / "metrics" / "tsdb-dump.txt", work)
    out["query_range"] = _copy_without_metrics(work / "query_range")
    out["snapshot"] = _copy_without_metrics(work / "snapshot")
    first, last = load_bundle(SCENARIO).store.time_range() or (None, None)
    assert first is not None and last is not None
    with prometheus(blocks, work) as (url, data):
        answer = requests.get(
            f"{url}/api/v1/query_range",
            params={
                "query": '{__name__=~".+"}',
                "start": f"{first.timestamp():.3f}",
                "end": f"{last.timestamp():.3f}",
                "step": "15",
            },
            timeout=120,
        )
        assert answer.status_code == 200, answer.text[:300]
        (out["query_range"] / "metrics" / "query_range.json").write_bytes(answer.content)
        snapshot(url, data, out["snapshot"] / "metrics" / "snapshot")
    return out


@pytest.fixture(scope="module")
def triaged(bundles) -> dict[str, dict]:
    from perfkit.triage import triage_bundle

    return {name: json.loads(json.dumps(triage_bundle(path).to_json())) for name, path in bundles.items()}


def _shape(result: dict) -> list[tuple]:
    return [
        *((s["id"], s["detected"]) for s in result["symptoms"]),
        *(
            (d["id"], d["rank"], d["verdict"], d["applies"], d["suspect_version"])
            for d in result["directions"]
        ),
    ]


@pytest.mark.parametrize("form", ["dump", "snapshot"])
def test_a_dump_or_snapshot_of_the_incident_triages_as_the_original(bundles, triaged, form):
    b = load_bundle(bundles[form])
    assert [m for m in b.missing if m.startswith("metrics: ")] == []
    assert triaged[form]["directions"][0]["id"] == "prefill_decode_interference"
    assert triaged[form] == triaged["original"]


def _numbers(value, path: str = "") -> dict[str, float]:
    if isinstance(value, dict):
        return {k: v for key, item in value.items() for k, v in _numbers(item, f"{path}.{key}").items()}
    if isinstance(value, list):
        return {k: v for i, item in enumerate(value) for k, v in _numbers(item, f"{path}[{i}]").items()}
    if isinstance(value, int | float) and not isinstance(value, bool):
        return {path: float(value)}
    return {}


def test_query_range_json_of_the_incident_triages_as_the_original(bundles, triaged):
    b = load_bundle(bundles["query_range"])
    assert [m for m in b.missing if m.startswith("metrics: ")] == []
    want, got = triaged["original"], triaged["query_range"]
    assert _shape(got) == _shape(want)
    assert got["directions"][0]["id"] == "prefill_decode_interference"
    a, c = _numbers(want), _numbers(got)
    assert a.keys() == c.keys()
    ratios = [k for k in a if "ratio" in k.rsplit(".", 1)[-1]]
    assert len(ratios) >= 4
    for key in ratios:
        assert c[key] == pytest.approx(a[key], rel=0.01), key
    # every other number (shares, margins, the GPU-utilisation swing of samples taken 12 s before
    # each grid step) stays close too
    for key in a.keys() - set(ratios):
        assert c[key] == pytest.approx(a[key], rel=0.05, abs=0.02), key
