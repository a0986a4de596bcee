"""Per-request records of a load test, streamed to a Parquet file as they complete.

Every request that was sent has a row, with its error when it failed: percentiles are computed
from these rows and never hide a failure. Rows are buffered a few thousand at a time and written as
row groups, so a 100,000-request run holds one group in memory, not the run.

Columns (times in seconds; offsets from the run's start, on the client's monotonic clock)::

    i               request number in the plan
    scheduled_s     when the plan meant to send it (open loop), or when a slot freed (closed loop)
    sent_s          when it was sent; sent_s - scheduled_s is the schedule lag
    ttft_s          first byte of the first chunk carrying a generated token (NaN: none arrived)
    e2el_s          last chunk carrying a token (NaN: none)
    prompt_tokens   the server's usage.prompt_tokens (-1: not reported)
    output_tokens   the server's usage.completion_tokens, else the client's count (-1: none)
    client_tokens   tokens the client counted in the stream (usage deltas, else one per chunk)
    chunks          content-bearing chunks (SSE events with text)
    gaps_s          the gap before each chunk after the first (list, one per later chunk)
    chunk_tokens    tokens in each chunk after the first (list, same length as gaps_s)
    status          HTTP status (0: no answer)
    error           kind: connect, timeout, http_4xx, http_5xx, malformed, disconnect, stall,
                    cancelled (null: completed)
    detail          one line about the error (bounded)
"""

from __future__ import annotations

import os
import queue
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema(
    [
        ("i", pa.int64()),
        ("scheduled_s", pa.float64()),
        ("sent_s", pa.float64()),
        ("ttft_s", pa.float64()),
        ("e2el_s", pa.float64()),
        ("prompt_tokens", pa.int32()),
        ("output_tokens", pa.int32()),
        ("client_tokens", pa.int32()),
        ("chunks", pa.int32()),
        ("gaps_s", pa.list_(pa.float32())),
        ("chunk_tokens", pa.list_(pa.int32())),
        ("status", pa.int16()),
        ("error", pa.string()),
        ("detail", pa.string()),
    ]
)
ERROR_KINDS = ("connect", "timeout", "http_4xx", "http_5xx", "malformed", "disconnect", "stall", "cancelled")
FLUSH_ROWS = 4096
MAX_DETAIL = 200


@dataclass
class Record:
    i: int
    scheduled_s: float
    sent_s: float = float("nan")
    ttft_s: float = float("nan")
    e2el_s: float = float("nan")
    prompt_tokens: int = -1
    output_tokens: int = -1
    client_tokens: int = 0
    chunks: int = 0
    gaps_s: list[float] = field(default_factory=list)
    chunk_tokens: list[int] = field(default_factory=list)
    status: int = 0
    error: str | None = None
    detail: str | None = None

    def fail(self, kind: str, detail: str) -> None:
        """Mark the request failed (the first failure wins: a disconnect after a 500 is the 500)."""
        if self.error is None:
            self.error = kind
            self.detail = " ".join(str(detail).split())[:MAX_DETAIL]


class RecordSink:
    """Appends records to ``path`` (Parquet), a row group per :data:`FLUSH_ROWS` records.

    Encoding a row group takes tens of milliseconds; it happens on a writer thread, so the event
    loop that timestamps chunks is not held up by it."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".partial", dir=self.path.parent)
        os.close(fd)
        self._tmp = Path(tmp)
        # dictionary pages only for the error columns: on the float lists they held 26 MB and saved nothing
        self._writer = pq.ParquetWriter(
            self._tmp, SCHEMA, compression="zstd", use_dictionary=["error", "detail"]
        )
        self._rows: list[Record] = []
        self._queue: queue.Queue[list[Record] | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name="perfkit-records", daemon=True)
        self._thread.start()
        self.count = 0

    def add(self, rec: Record) -> None:
        self._rows.append(rec)
        self.count += 1
        if len(self._rows) >= FLUSH_ROWS:
            self.flush()

    def flush(self) -> None:
        if self._rows:
            rows, self._rows = self._rows, []
            self._queue.put(rows)

    def _drain(self) -> None:
        while (rows := self._queue.get()) is not None:
            try:
                self._writer.write_table(_table(rows))
            except BaseException as exc:  # kept for close(), which raises it
                self._error = exc

    def close(self) -> Path:
        """Write what is left and move the file into place (a crash leaves only the ``.partial``)."""
        self.flush()
        self._queue.put(None)
        self._thread.join()
        self._writer.close()
        if self._error is not None:
            raise self._error
        os.replace(self._tmp, self.path)
        return self.path


# Arrays are built from and read into numpy through their buffers: pyarrow's conversions of Python
# lists and its ``to_numpy``/``to_pylist`` import pandas on first use, 45 MB of resident memory that a
# load generator has no use for (the budget is 300 MB for a 100,000-request run).


def _table(rows: list[Record]) -> pa.Table:
    arrays = []
    for name in SCHEMA.names:
        typ = SCHEMA.field(name).type
        values = [getattr(r, name) for r in rows]
        if pa.types.is_list(typ):
            arrays.append(_lists(values, typ))
        elif pa.types.is_string(typ):
            arrays.append(_strings(values))
        else:
            arrays.append(_numbers(np.asarray(values, dtype=typ.to_pandas_dtype())))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _numbers(values: np.ndarray) -> pa.Array:
    values = np.ascontiguousarray(values)
    return pa.Array.from_buffers(pa.from_numpy_dtype(values.dtype), values.size, [None, pa.py_buffer(values)])


def _strings(values: list[str | None]) -> pa.Array:
    encoded = [b"" if v is None else v.encode("utf-8", "replace") for v in values]
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    valid = np.packbits(np.array([v is not None for v in values], dtype=bool), bitorder="little")
    buffers = [pa.py_buffer(valid), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(pa.string(), len(values), buffers, null_count=values.count(None))


def _lists(values: list[list], typ: pa.DataType) -> pa.Array:
    """A list column from Python lists, built from one flat numpy array (fast for long lists)."""
    lengths = np.fromiter((len(v) for v in values), dtype=np.int32, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat_type = typ.value_type
    flat = np.fromiter(
        (x for v in values for x in v), dtype=flat_type.to_pandas_dtype(), count=int(offsets[-1])
    )
    return pa.ListArray.from_arrays(_numbers(offsets), _numbers(flat))


def _valid(col: pa.Array) -> np.ndarray | None:
    if not col.null_count:
        return None
    bits = np.frombuffer(col.buffers()[0], dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little")[col.offset : col.offset + len(col)].astype(bool)


def numbers(col: pa.Array) -> np.ndarray:
    """A numeric column as a numpy array (a copy; nulls as NaN)."""
    data = np.frombuffer(col.buffers()[1], dtype=col.type.to_pandas_dtype())
    out = data[col.offset : col.offset + len(col)].copy()
    valid = _valid(col)
    if valid is not None:
        out = out.astype(np.float64)
        out[~valid] = np.nan
    return out


def texts(col: pa.Array) -> list[str | None]:
    """A string column as Python strings (None for nulls)."""
    offsets = np.frombuffer(col.buffers()[1], dtype=np.int32)[col.offset : col.offset + len(col) + 1]
    data = col.buffers()[2]
    raw = b"" if data is None else data.to_pybytes()
    valid = _valid(col)
    return [
        None
        if valid is not None and not valid[i]
        else raw[offsets[i] : offsets[i + 1]].decode("utf-8", "replace")
        for i in range(len(col))
    ]


def flat_list(col: pa.ListArray) -> tuple[np.ndarray, np.ndarray]:
    """A list column's offsets (one more than rows, from 0) and its flat values."""
    offsets = numbers(col.offsets).astype(np.int64)
    values = numbers(col.values)[offsets[0] : offsets[-1]]
    return offsets - offsets[0], values


def read_columns(path: str | os.PathLike[str], columns: list[str]):
    """Iterate the record file's row groups (:data:`FLUSH_ROWS` records each) as record batches of ``columns``.

    One group at a time and without pre-buffering: ``iter_batches`` read ahead and held about 70 MB
    more for a 100,000-request run of 64-token outputs."""
    pf = pq.ParquetFile(path, pre_buffer=False, buffer_size=1 << 20)
    for i in range(pf.metadata.num_row_groups):
        yield from pf.read_row_group(i, columns=columns).to_batches()
