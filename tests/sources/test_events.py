from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import polars as pl
import pytest

from perfkit.core.frames import EVENTS_SCHEMA, Window
from perfkit.errors import BundleError
from perfkit.sources.events import events_between, format_ts, read_events, write_events

HEADER = "ts,kind,service,version,detail\n"


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "events.csv"
    path.write_text(body)
    return path


def test_reads_sorted_events_with_quoted_commas_epoch_and_offsets(tmp_path: Path):
    path = write(
        tmp_path,
        HEADER
        + '2026-11-30T02:04:00Z,deploy,vllm-chat,v0.33.0,"rollout 3/3, canary skipped"\n'
        + "1796004000,alert,vllm-chat,,TTFT p95 above SLO\n"
        + "\n"
        + "2026-11-30 03:30:00,note,,,\n"
        + "2026-11-30T04:10:00+02:00,ROLLBACK,vllm-chat,v0.32.1,\n",
    )
    frame = read_events(path)
    assert frame.schema == pl.Schema(EVENTS_SCHEMA)
    assert frame.rows() == [
        (datetime(2026, 11, 30, 2, 0, tzinfo=UTC), "alert", "vllm-chat", None, "TTFT p95 above SLO"),
        (
            datetime(2026, 11, 30, 2, 4, tzinfo=UTC),
            "deploy",
            "vllm-chat",
            "v0.33.0",
            "rollout 3/3, canary skipped",
        ),
        (datetime(2026, 11, 30, 2, 10, tzinfo=UTC), "rollback", "vllm-chat", "v0.32.1", None),
        (datetime(2026, 11, 30, 3, 30, tzinfo=UTC), "note", None, None, None),
    ]


def test_missing_file_gives_empty_frame(tmp_path: Path):
    frame = read_events(tmp_path / "events.csv")
    assert frame.height == 0
    assert frame.schema == pl.Schema(EVENTS_SCHEMA)


def test_bom_and_crlf_are_accepted(tmp_path: Path):
    path = tmp_path / "events.csv"
    path.write_bytes(
        b"\xef\xbb\xbfts,kind,service,version,detail\r\n2026-11-30T02:00:00Z,scale,api,,2 -> 4\r\n"
    )
    assert read_events(path).rows() == [
        (datetime(2026, 11, 30, 2, tzinfo=UTC), "scale", "api", None, "2 -> 4")
    ]


@pytest.mark.parametrize(
    ("body", "line", "fragment"),
    [
        ("ts,kind,service,detail\n", 1, "expected header"),
        ("time,kind,service,version,detail\n2026-11-30T02:00:00Z,note,a,,\n", 1, "expected header"),
        (
            HEADER + "2026-11-30T02:00:00Z,note,a,,\nnot-a-time,deploy,a,v1,\n",
            3,
            "unparseable ts 'not-a-time'",
        ),
        (HEADER + "2026-11-30T02:00:00Z,restart,a,,\n", 2, "unknown kind 'restart'"),
        (HEADER + "2026-11-30T02:00:00Z,note,a,\n", 2, "expected 5 columns, found 4"),
        (HEADER + "2026-11-30T02:00:00Z,note,a,,x,extra\n", 2, "expected 5 columns, found 6"),
        # a quoted detail spanning lines 2-3: the bad record starts on line 4
        (
            HEADER + '2026-11-30T02:00:00Z,note,a,,"two\nlines"\n2026-11-30T02:00:00Z,oops,a,,\n',
            4,
            "unknown kind",
        ),
        # a blank line still counts as a line
        (HEADER + "\n\n2026-13-45T02:00:00Z,note,a,,\n", 4, "unparseable ts"),
    ],
)
def test_bad_rows_name_file_and_line(tmp_path: Path, body: str, line: int, fragment: str):
    path = write(tmp_path, body)
    with pytest.raises(BundleError) as info:
        read_events(path)
    assert info.value.line == line
    assert info.value.path == str(path)
    assert f"events.csv:{line}: " in str(info.value)
    assert fragment in str(info.value)


def test_write_then_read_round_trip(tmp_path: Path):
    rows = [
        {
            "ts": datetime(2026, 11, 30, 2, 4, 0, 250000, tzinfo=UTC),
            "kind": "deploy",
            "service": "api",
            "version": "v2",
            "detail": 'canary, then "full"',
        },
        {
            "ts": datetime(2026, 11, 30, 3, 0, tzinfo=timezone(timedelta(hours=1))),
            "kind": "alert",
            "service": "api",
            "version": None,
            "detail": "TTFT p95 > SLO",
        },
        {"ts": datetime(2026, 11, 30, 1, 0), "kind": "note", "service": "api"},
    ]
    path = write_events(tmp_path / "bundle" / "events.csv", rows)
    assert path.read_text().splitlines() == [
        "ts,kind,service,version,detail",
        '2026-11-30T02:04:00.250Z,deploy,api,v2,"canary, then ""full"""',
        "2026-11-30T02:00:00Z,alert,api,,TTFT p95 > SLO",
        "2026-11-30T01:00:00Z,note,api,,",
    ]
    assert read_events(path).rows() == [
        (datetime(2026, 11, 30, 1, tzinfo=UTC), "note", "api", None, None),
        (datetime(2026, 11, 30, 2, tzinfo=UTC), "alert", "api", None, "TTFT p95 > SLO"),
        (datetime(2026, 11, 30, 2, 4, 0, 250000, tzinfo=UTC), "deploy", "api", "v2", 'canary, then "full"'),
    ]


def test_write_rejects_unknown_kind_and_missing_ts(tmp_path: Path):
    with pytest.raises(BundleError, match="unknown event kind 'reboot'"):
        write_events(tmp_path / "e.csv", [{"ts": datetime(2026, 1, 1, tzinfo=UTC), "kind": "reboot"}])
    with pytest.raises(BundleError, match="without ts"):
        write_events(tmp_path / "e.csv", [{"kind": "note"}])


def test_events_between_is_closed(tmp_path: Path):
    path = write(
        tmp_path,
        HEADER
        + "2026-11-30T01:59:59Z,note,a,,before\n"
        + "2026-11-30T02:00:00Z,note,a,,start\n"
        + "2026-11-30T03:00:00Z,note,a,,end\n"
        + "2026-11-30T03:00:00.001Z,note,a,,after\n",
    )
    window = Window(datetime(2026, 11, 30, 2, tzinfo=UTC), datetime(2026, 11, 30, 3, tzinfo=UTC))
    assert events_between(read_events(path), window)["detail"].to_list() == ["start", "end"]


def test_format_ts():
    assert format_ts(datetime(2026, 11, 30, 2, 4, 0, 999999, tzinfo=UTC)) == "2026-11-30T02:04:00.999Z"
    assert format_ts(datetime(2026, 11, 30, 2, 4)) == "2026-11-30T02:04:00Z"
