"""The baseline store: round trip, ids, labels, no overwrite, corrupt files skipped, never deleted."""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from bench_docs import bench_doc as shared_bench_doc

from perfkit.errors import ConfigError, PerfkitError
from perfkit.loadgen import store
from perfkit.loadgen.store import StoreError, StoreWarning

STARTED = "2025-03-01T10:00:00Z"


def bench_doc(*, model: str = "meta-llama/Llama-3.1-8B-Instruct", started: str = STARTED, **kw: Any) -> dict:
    """The shared builder (tests/bench_docs.py) with this file's model and start."""
    kw = {"completed": 100, "duration": 10.0, "attainment": None, **kw}
    return shared_bench_doc(model=model, started=started, **kw)


def write_result(folder: Path, name: str = "run.json", *, with_records: bool = False, **kw) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    if with_records:
        kw["records"] = f"{path.stem}.requests.parquet"
        pq.write_table(pa.table({"ttft_ms": [49.0, 51.0]}), folder / kw["records"])
    path.write_text(json.dumps(bench_doc(**kw)), encoding="utf-8")
    return path


def test_round_trip_id_labels_and_records(tmp_path: Path) -> None:
    result = write_result(tmp_path / "runs", with_records=True)
    labels = store.parse_labels(["version=1.4.2", "config=tp2", "hardware=h200", "team=serving"])
    ident = store.add(result, tmp_path / "store", labels)

    original = json.loads(result.read_text())
    body = {k: v for k, v in original.items() if k not in ("baseline", "records")}
    digest = hashlib.sha256(
        json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    ).hexdigest()
    assert ident == f"20250301T100000Z-meta-llama-llama-3-1-8b-instruct-{digest[:8]}"

    folder = tmp_path / "store" / "baselines"
    assert sorted(p.name for p in folder.iterdir()) == [f"{ident}.json", f"{ident}.requests.parquet"]
    src = tmp_path / "runs" / "run.requests.parquet"
    assert (folder / f"{ident}.requests.parquet").read_bytes() == src.read_bytes()

    stored = json.loads((folder / f"{ident}.json").read_text())
    assert stored["records"] == f"{ident}.requests.parquet"
    assert stored["baseline"]["id"] == ident
    assert stored["baseline"]["labels"] == {
        "version": "1.4.2",
        "config": "tp2",
        "hardware": "h200",
        "team": "serving",
    }
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stored["baseline"]["added"])
    assert {k: v for k, v in stored.items() if k not in ("baseline", "records")} == body

    shown = store.show(tmp_path / "store", ident)
    assert shown.labels["hardware"] == "h200" and shown.model == original["meta"]["model"]
    assert store.show(tmp_path / "store", ident[:22]).id == ident  # a unique prefix
    assert [b.id for b in store.list_baselines(tmp_path / "store")] == [ident]


def test_no_temporary_files_left(tmp_path: Path) -> None:
    store.add(write_result(tmp_path / "runs", with_records=True), tmp_path / "store")
    assert not [p for p in (tmp_path / "store" / "baselines").iterdir() if p.name.startswith(".")]


def test_the_same_run_is_refused_the_second_time(tmp_path: Path) -> None:
    result = write_result(tmp_path / "runs")
    ident = store.add(result, tmp_path / "store")
    with pytest.raises(StoreError, match=f"already in the store as {ident}"):
        store.add(result, tmp_path / "store", {"version": "2"})
    assert len(list((tmp_path / "store" / "baselines").glob("*.json"))) == 1


def test_never_overwrites_an_existing_file(tmp_path: Path) -> None:
    result = write_result(tmp_path / "runs")
    ident = store.make_id(json.loads(result.read_text()))
    folder = tmp_path / "store" / "baselines"
    folder.mkdir(parents=True)
    (folder / f"{ident}.json").write_text("somebody's file")
    with pytest.raises(StoreError, match="never overwrites"):
        store.add(result, tmp_path / "store")
    assert (folder / f"{ident}.json").read_text() == "somebody's file"


@pytest.mark.parametrize(
    "items, message",
    [
        (["version"], "expected key=value"),
        (["1version=2"], "label key"),
        (["ver sion=2"], "label key"),
        (["config=../../etc"], "path separator"),
        (["config=a\\b"], "path separator"),
        (["config=a\x1bb"], "control character"),
        (["config="], "1 to 200 characters"),
        ([f"config={'x' * 201}"], "1 to 200 characters"),
        ([f"k{i}=v" for i in range(33)], "more than 32"),
        (["version=1", "version=2"], "given twice"),
    ],
)
def test_bad_labels_are_refused(items: list[str], message: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(message)):
        store.parse_labels(items)


def test_a_label_contradicting_the_run_is_refused(tmp_path: Path) -> None:
    result = write_result(tmp_path / "runs", labels={"hardware": "h100"})
    with pytest.raises(ConfigError, match="hardware=h200 contradicts the run's own label hardware=h100"):
        store.add(result, tmp_path / "store", {"hardware": "h200"})


def test_invalid_run_refused_unless_forced(tmp_path: Path) -> None:
    result = write_result(tmp_path / "runs", valid=False)
    with pytest.raises(
        StoreError, match=r"run\.json: the run is marked invalid \(client overhead 14 % of ITL\)"
    ):
        store.add(result, tmp_path / "store")
    assert not (tmp_path / "store" / "baselines").exists() or not any(
        (tmp_path / "store" / "baselines").iterdir()
    )
    ident = store.add(result, tmp_path / "store", force=True)
    assert store.show(tmp_path / "store", ident).doc["validity"]["valid"] is False


def test_a_baseline_needs_a_calibrated_run_unless_forced(tmp_path: Path) -> None:
    path = write_result(tmp_path / "runs")
    doc = json.loads(path.read_text())
    doc["validity"]["calibration"] = None  # perfkit bench --no-calibrate
    path.write_text(json.dumps(doc))
    assert store.add(path, tmp_path / "plain")  # a plain store takes it
    with pytest.raises(StoreError, match=r"run\.json: the run was not calibrated \(--no-calibrate\)"):
        store.add(path, tmp_path / "store", require_calibration=True)
    assert store.add(path, tmp_path / "store", require_calibration=True, force=True)
    doc["source"] = {"tool": "vllm bench serve"}  # an imported result carries no calibration
    path.write_text(json.dumps(doc))
    assert store.add(path, tmp_path / "imported", require_calibration=True)


def test_the_same_mean_rate_in_bursts_is_another_load() -> None:
    poisson = bench_doc()
    poisson["load"].update(shape="rate", rate=8.0, arrival="poisson", burstiness=1.0)
    bursty = json.loads(json.dumps(poisson))
    bursty["load"].update(arrival="gamma", burstiness=0.25)
    assert store.load_signature(poisson) != store.load_signature(bursty)
    assert store.load_signature(poisson) == store.load_signature(json.loads(json.dumps(poisson)))


def test_interrupted_run_refused_unless_forced(tmp_path: Path) -> None:
    path = write_result(tmp_path / "runs")
    doc = json.loads(path.read_text())
    doc["interrupted"] = True
    path.write_text(json.dumps(doc))
    with pytest.raises(StoreError, match="interrupted"):
        store.add(path, tmp_path / "store")
    assert store.add(path, tmp_path / "store", force=True)


def test_missing_records_warn_and_store_the_summary(tmp_path: Path) -> None:
    path = write_result(tmp_path / "runs", records="run.requests.parquet")  # named, not written
    seen: list[str] = []
    ident = store.add(path, tmp_path / "store", warn=seen.append)
    assert len(seen) == 1 and "run.requests.parquet are missing" in seen[0]
    assert store.show(tmp_path / "store", ident).doc["records"] is None


@pytest.mark.parametrize(
    "name", ["../run.requests.parquet", "/etc/passwd.parquet", "run.csv", ".hidden.parquet"]
)
def test_records_must_be_a_parquet_file_beside_the_result(tmp_path: Path, name: str) -> None:
    path = write_result(tmp_path / "runs", records=name)
    with pytest.raises(StoreError, match="'records' must be a Parquet file name beside the result"):
        store.add(path, tmp_path / "store")


def test_records_that_are_not_parquet_leave_nothing_behind(tmp_path: Path) -> None:
    path = write_result(tmp_path / "runs", records="run.requests.parquet")
    (tmp_path / "runs" / "run.requests.parquet").write_text("ttft_ms\n49\n")
    with pytest.raises(StoreError, match="not a Parquet file"):
        store.add(path, tmp_path / "store")
    assert list((tmp_path / "store" / "baselines").iterdir()) == []


def test_list_is_newest_first_and_filters(tmp_path: Path) -> None:
    runs, st = tmp_path / "runs", tmp_path / "store"
    old = store.add(write_result(runs, "a.json", started="2025-01-01T00:00:00Z"), st, {"version": "1"})
    new = store.add(write_result(runs, "b.json", started="2025-02-01T00:00:00+01:00"), st, {"version": "2"})
    other = store.add(write_result(runs, "c.json", model="qwen", started="2025-01-15T00:00:00Z"), st)
    assert [b.id for b in store.list_baselines(st)] == [new, other, old]
    assert new.startswith("20250131T230000Z-")  # the start time in UTC
    assert [b.id for b in store.list_baselines(st, model="qwen")] == [other]
    assert [b.id for b in store.list_baselines(st, labels={"version": "1"})] == [old]


def _corrupt_store(tmp_path: Path) -> tuple[Path, str, dict[str, bytes]]:
    st = tmp_path / "store"
    good = store.add(write_result(tmp_path / "runs"), st)
    folder = st / "baselines"
    bad = {
        "20250101T000000Z-m-0000000a.json": b'{"schema": "perfkit.bench/1",\n "completed": }',
        "20250101T000000Z-m-0000000b.json": json.dumps({"schema": "guidellm/1"}).encode(),
        "20250101T000000Z-m-0000000c.json": b"\xff\xfe not text",
        "20250101T000000Z-m-0000000d.json": b"[1, 2]",
        "notes.json": b"{}",
    }
    for name, data in bad.items():
        (folder / name).write_bytes(data)
    secret = tmp_path / "elsewhere.json"
    secret.write_text(json.dumps(bench_doc()))
    os.symlink(secret, folder / "20250101T000000Z-m-0000000e.json")
    return st, good, bad


def test_corrupt_files_are_skipped_with_a_warning_and_kept(tmp_path: Path) -> None:
    st, good, bad = _corrupt_store(tmp_path)
    with pytest.warns(StoreWarning) as caught:
        found = store.list_baselines(st)
    assert [b.id for b in found] == [good]
    messages = [str(w.message) for w in caught]
    assert len(messages) == 6
    assert all("\n" not in m for m in messages)
    joined = "\n".join(messages)
    assert "0000000a.json:2: invalid JSON" in joined
    assert "0000000b.json: schema" in joined
    assert "0000000c.json:1: not UTF-8" in joined
    assert "0000000d.json:1: expected a JSON object" in joined
    assert "notes.json: not a baseline file name" in joined
    assert "0000000e.json: a link to a file outside the store" in joined
    for name, data in bad.items():
        assert (st / "baselines" / name).read_bytes() == data


@pytest.mark.parametrize("ident", ["../../etc/passwd", "a/b", "", "x" * 100])
def test_show_refuses_what_is_not_an_id(tmp_path: Path, ident: str) -> None:
    store.add(write_result(tmp_path / "runs"), tmp_path / "store")
    with pytest.raises(StoreError, match="is not a baseline id"):
        store.show(tmp_path / "store", ident)


def test_show_unknown_and_ambiguous(tmp_path: Path) -> None:
    st = tmp_path / "store"
    store.add(write_result(tmp_path / "runs", "a.json", ttft=50.0), st)
    store.add(write_result(tmp_path / "runs", "b.json", ttft=51.0), st)
    with pytest.raises(StoreError, match="no baseline 2024"):
        store.show(st, "2024")
    with pytest.raises(StoreError, match="names 2 baselines"):
        store.show(st, "20250301T100000Z")


def test_a_missing_store_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no such store folder"):
        store.list_baselines(tmp_path / "nowhere")
    (tmp_path / "plain").mkdir()
    with pytest.raises(StoreError, match="no baselines/ folder"):
        store.list_baselines(tmp_path / "plain")


def test_an_unreadable_result_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text('{"schema": "perfkit.bench/1",\n  oops}')
    with pytest.raises(PerfkitError, match=r"run\.json:2"):
        store.add(path, tmp_path / "store")


def test_a_leftover_records_file_is_named_not_overwritten(tmp_path: Path) -> None:
    result = write_result(tmp_path / "runs", with_records=True)
    ident = store.make_id(json.loads(result.read_text()))
    folder = tmp_path / "store" / "baselines"
    folder.mkdir(parents=True)
    (folder / f"{ident}.requests.parquet").write_bytes(b"PAR1 half")
    with pytest.raises(StoreError, match=rf"{ident}\.requests\.parquet: exists without its summary"):
        store.add(result, tmp_path / "store")
    assert (folder / f"{ident}.requests.parquet").read_bytes() == b"PAR1 half"
    assert not (folder / f"{ident}.json").exists()
