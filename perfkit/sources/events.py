"""Read and write a bundle's ``events.csv``: deploys, rollbacks, config changes, alerts, notes.

The file is plain CSV with the header ``ts,kind,service,version,detail`` (docs/bundle.md)::

    ts,kind,service,version,detail
    2026-11-30T02:04:00Z,deploy,vllm-chat,v0.33.0,"rollout 3/3, canary skipped"
    1796004300,alert,vllm-chat,,TTFT p95 above SLO

* ``ts`` is ISO 8601 (a naive time is UTC) or epoch seconds;
* ``kind`` is one of :data:`KINDS`;
* ``service``, ``version`` and ``detail`` may be empty (they become nulls in the frame).

Anything else is a :class:`~perfkit.errors.BundleError` naming the file and the 1-based line
(the header is line 1). A missing file is not an error: it gives an empty frame, and the caller
records "no events.csv" as missing evidence.
"""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path

import polars as pl

from perfkit.core.frames import EVENTS_SCHEMA, TS_DTYPE, Window, to_ms, utc
from perfkit.errors import BundleError

HEADER = ("ts", "kind", "service", "version", "detail")
KINDS = frozenset({"deploy", "rollback", "config", "scale", "alert", "note"})
_EPOCH = re.compile(r"[+-]?\d+(?:\.\d*)?")


def empty_events() -> pl.DataFrame:
    """An events frame with no rows and the :data:`~perfkit.core.frames.EVENTS_SCHEMA` columns."""
    return pl.DataFrame(schema=EVENTS_SCHEMA)


def parse_ts(text: str) -> datetime:
    """Parse an events.csv timestamp: ISO 8601 (naive = UTC) or epoch seconds; UTC datetime.

    >>> parse_ts("1796004000").isoformat()
    '2026-11-30T02:00:00+00:00'

    Raises ValueError when ``text`` is neither.
    """
    text = text.strip()
    if _EPOCH.fullmatch(text):
        return utc(float(text))
    return utc(text)


def read_events(path: str | Path) -> pl.DataFrame:
    """Read ``events.csv`` into a frame with :data:`EVENTS_SCHEMA`, sorted by ``ts``.

    Returns an empty frame when ``path`` does not exist. Raises
    :class:`~perfkit.errors.BundleError` (file and line) for a wrong header, a wrong number of
    columns, an unparseable timestamp or an unknown kind.
    """
    path = Path(path)
    if not path.is_file():
        return empty_events()
    name = str(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError) as err:
        raise BundleError(f"cannot read events file ({err})", path=name) from err
    rows = _parse_rows(text, name)
    return _frame(rows).sort("ts", maintain_order=True)


def _parse_rows(text: str, name: str) -> list[tuple[int, str, str | None, str | None, str | None]]:
    """Validate every record of ``text``; return (ts ms, kind, service, version, detail) tuples."""
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[tuple[int, str, str | None, str | None, str | None]] = []
    header_seen = False
    end_of_previous = 0  # csv.reader.line_num after the previous record: a record starts one later
    for record in reader:
        line = end_of_previous + 1
        end_of_previous = reader.line_num
        if not header_seen:
            _check_header(record, name, line)
            header_seen = True
            continue
        if not record or (len(record) == 1 and not record[0].strip()):
            continue  # blank line
        rows.append(_parse_record(record, name, line))
    return rows


def _check_header(record: list[str], name: str, line: int) -> None:
    cells = tuple(cell.strip().lower() for cell in record)
    if cells != HEADER:
        raise BundleError(
            f"expected header {','.join(HEADER)!r}, found {','.join(record)!r}", path=name, line=line
        )


def _parse_record(
    record: list[str], name: str, line: int
) -> tuple[int, str, str | None, str | None, str | None]:
    if len(record) != len(HEADER):
        raise BundleError(f"expected {len(HEADER)} columns, found {len(record)}", path=name, line=line)
    ts_text, kind, service, version, detail = (cell.strip() for cell in record)
    try:
        ts = parse_ts(ts_text)
    except (ValueError, OverflowError, OSError) as err:
        raise BundleError(
            f"unparseable ts {ts_text!r} (want ISO 8601 or epoch seconds)", path=name, line=line
        ) from err
    kind = kind.lower()
    if kind not in KINDS:
        raise BundleError(f"unknown kind {kind!r} (one of {', '.join(sorted(KINDS))})", path=name, line=line)
    return to_ms(ts), kind, service or None, version or None, detail or None


def _frame(rows: list[tuple[int, str, str | None, str | None, str | None]]) -> pl.DataFrame:
    columns: list[Sequence[object]] = list(zip(*rows, strict=True)) if rows else [[] for _ in HEADER]
    data = {
        "ts": pl.Series("ts", columns[0], dtype=pl.Int64).cast(TS_DTYPE),
        **{col: pl.Series(col, columns[i], dtype=pl.Utf8) for i, col in enumerate(HEADER) if i},
    }
    return pl.DataFrame(data, schema=EVENTS_SCHEMA)


def events_between(frame: pl.DataFrame, window: Window) -> pl.DataFrame:
    """The rows of an events frame whose ``ts`` lies in the closed ``window``."""
    return frame.filter(pl.col("ts").is_between(window.start, window.end, closed="both"))


def format_ts(ts: datetime | str | float | int) -> str:
    """ISO 8601 in UTC with a trailing Z; milliseconds only when they are not zero.

    >>> format_ts(datetime(2026, 11, 30, 2, 4, 0, 250000))
    '2026-11-30T02:04:00.250Z'
    """
    ts = utc(ts)
    text = ts.strftime("%Y-%m-%dT%H:%M:%S")
    millis = ts.microsecond // 1000
    return f"{text}.{millis:03d}Z" if millis else f"{text}Z"


def write_events(path: str | Path, rows: Iterable[Mapping[str, object]]) -> Path:
    """Write ``rows`` (dicts with the :data:`HEADER` keys; ``ts`` a datetime) as events.csv.

    Rows are written in the order given; missing or None values become empty cells. Raises
    ValueError for a row without ``ts`` or with an unknown ``kind``. Returns the path written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(HEADER)
        for row in rows:
            writer.writerow(_row_cells(row))
    return path


def _row_cells(row: Mapping[str, object]) -> list[str]:
    ts = row.get("ts")
    if ts is None:
        raise BundleError(f"event without ts: {dict(row)!r}")
    kind = str(row.get("kind") or "").lower()
    if kind not in KINDS:
        raise BundleError(f"unknown event kind {kind!r} (one of {', '.join(sorted(KINDS))})")
    rest = ["" if row.get(col) is None else str(row.get(col)) for col in HEADER[2:]]
    return [format_ts(ts), kind, *rest]  # type: ignore[arg-type]
