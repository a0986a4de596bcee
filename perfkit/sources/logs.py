"""Read raw log files (vLLM, NCCL, PyTorch, kernel, JSON lines) into log records and vLLM stats.

:func:`read_logs` turns files (plain, ``.gz``, ``.jsonl``, globs, folders) into a
:class:`LogResult`: one :data:`~perfkit.core.frames.LOG_SCHEMA` row per recognised line, one
:data:`~perfkit.core.frames.STATS_SCHEMA` row per vLLM periodic stats line, and a count of the lines
no parser recognised. Nothing in a log file is fatal: an unreadable or binary file is recorded in
``errors`` and the other files are still read.

Recognised lines and their ``kind`` (each format's upstream source and version: ``docs/formats.md``;
engine settings in vLLM's start-up lines: :mod:`perfkit.sources.engine_config`):

====================  ========================================================================
kind                  line
====================  ========================================================================
``vllm``              ``(APIServer pid=7) INFO 11-30 00:10:05 [api_server.py:1012] ...`` (also
                      with a ``VLLM_LOGGING_PREFIX``, ANSI colours, or without the process part)
``vllm_stats``        a vLLM ``Avg prompt throughput: ...`` stats line (V1, V1 aggregated over engines,
                      and V0 back to vLLM 0.2, whose ``Prefix cache hit rate: GPU: x%, CPU: y%`` line
                      after it fills the row's prefix-cache figure); the prefix-cache figure is the
                      engine's own (GPU) one, never one named ``CPU``/``External`` ``prefix cache``
``json``              ``{"ts": ..., "message": ..., "level": ...}`` (see :data:`~perfkit.sources.log_lines.JSON_TS_KEYS`;
                      vLLM's own JSON logging, ``asctime``/``levelname``/``message``, included);
                      a JSON line whose message is a vLLM line (docker json-file) is ``vllm``
``cuda_oom``          ``torch.OutOfMemoryError: CUDA out of memory. Tried to allocate ...`` (and the
                      ``RuntimeError``/``torch.cuda.OutOfMemoryError`` wordings of older PyTorch), and
                      TensorRT-LLM's ``CUDA runtime error in ::cudaMallocAsync(...): out of memory``
``nccl_warn``         ``[ts] host:pid:tid [dev] file:line (func) NCCL WARN ...``
``nccl_info``         ``host:pid:tid [dev] NCCL INFO ...`` (and ``NCCL TRACE``)
``nccl_error``        ``NCCL error in: ...`` / ``NCCL communicator was aborted`` (PyTorch side)
``nccl_timeout``      ``[PG ID 0 PG GUID 0(default_pg) Rank R] Watchdog caught collective operation
                      timeout: WorkNCCL(...)`` (older PyTorch: ``[Rank R] ...``)
``dataloader_error``  ``DataLoader worker (pid N) exited unexpectedly``, ``DataLoader timed out
                      after N seconds``, ``... is killed by signal``, shared-memory bus errors
``xid``               kernel ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., ...``; also the Xid 79
                      condition said without an Xid: ``NVRM: GPU 0000:3b:00.0: GPU has fallen off
                      the bus.``, ``NVRM: fallen off the bus and is not responding to commands.``
``vllm_launch``       a launcher's or orchestrator's echo of vLLM's command line (``python -m
                      vllm.entrypoints.openai.api_server --model m --max-num-seqs 64``, a k8s args
                      list): a line in no other format that names vLLM and sets one of its engine
                      flags, or sets two (:mod:`perfkit.sources.engine_config` reads them)
``tracing``           Rust tracing-subscriber's ``2025-09-02T15:50:01.770358Z  INFO target: message``
                      (TGI's launcher and router, Dynamo's frontend, Dynamo's Python workers and the
                      vLLM lines they forward); ``message`` is the text after the target
``trtllm``            TensorRT-LLM's C++ logger, ``[TensorRT-LLM][WARNING] message`` (no time of its own;
                      Triton's TensorRT-LLM backend writes its settings so); ``message`` after the tag
====================  ========================================================================

A vLLM start-up line (``Initializing ... with config: ...``, ``non-default args: {...}``, ``args:
Namespace(...)``) that a terminal or log viewer cut into rows of one width (at least 80 columns) is
joined back: the rows after it that cannot start a record of their own are appended to its message
while each row before was full width and the settings are still open (an open bracket or quote, or
no closing ``)``/``}``), at most 256 rows and 64 KiB.

A signal (OOM, NCCL, DataLoader, Xid) inside a vLLM or JSON line gives that line the signal's
kind. ``message`` is the message part of vLLM and JSON lines and the whole line (ANSI codes
removed) otherwise. ``level`` is the line's own level (``WARN`` → ``WARNING``, glog ``E`` →
``ERROR``), else the level the signal implies, else null.

Timestamps: vLLM (``%m-%d %H:%M:%S``), glog (``E1130 02:10:01.123456``), PyTorch's c10 logger
(``E810 03:04:11.061727749``: month * 100 + day) and syslog (``Nov 30 02:10:01``) stamps carry no
year; it is the year that puts the date closest to the middle of ``window`` (so an incident
spanning New Year works). Stamps without a zone are taken as UTC (NCCL's and syslog's are local
time on the host). A stamp is found after indentation and launcher prefixes (torchrun's ``[rank3]:``
and ``[default0]:``, a ``[1234]`` pid or line number) or after a logger's short header (torchtitan's
``[titan]``, NeMo's ``[NeMo I``, transformers' ``[INFO|file.py:12]``; :mod:`perfkit.sources.log_times`).
A line without a timestamp of its own (NCCL's INFO/WARN lines, a traceback and its
``torch.OutOfMemoryError``/``CUDA error``/``DistBackendError`` line, a dmesg ``[12345.678901]`` line,
whose clock is time since boot) is placed, whatever wrote the file, by the timestamped lines around it
in the same file: it takes the time of the one before it (a failure's lines follow the last line the
job wrote), and is at most the gap to the one after it early; before the first it has none.
``notes`` says once per file how many lines were placed and how early they may be. A
training framework's progress line without a time stays null (:mod:`perfkit.sources.trainer_series`
places it by its own numbers). Blank lines are skipped and not counted; records keep file order
(``source``, ``line``).

Log files are untrusted input, so reading is bounded: a line longer than :data:`MAX_LINE_BYTES`
(64 KiB) is skipped without ever being held whole (it is read past in 64 KiB pieces) and
reported in ``errors`` (``vllm.log:12: line longer than 65536 bytes, skipped``); a file stops
being read after :data:`MAX_FILE_BYTES` (4 GiB, after decompression); a FIFO, a device or a
socket is never opened for reading (``not a regular file (a FIFO), skipped``); and with ``root``
given, a file that resolves (through a symlink) outside ``root`` is not read at all.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path
from typing import IO

import polars as pl

from perfkit.core.frames import LOG_SCHEMA, STATS_SCHEMA, Window
from perfkit.sources.log_lines import _Columns, _empty, _Parser
from perfkit.sources.log_times import Years
from perfkit.sources.safeio import RefusedFile, open_regular, outside, size_text

PathLike = str | Path

MAX_LINE_BYTES = 64 * 2**10
"""Longest line read: real vLLM, NCCL and PyTorch lines are under 8 KiB, tracebacks come line by line."""
MAX_FILE_BYTES = 4 * 2**30
"""Most bytes read from one file (after decompression): days of a busy vLLM server's log."""

_SNIFF_BYTES = 8192
_SKIP_BYTES = 64 * 2**10  # piece size when reading past a line that is too long
_MAX_BAD_FRAC = 0.05


@dataclass
class LogResult:
    """What :func:`read_logs` found.

    ``records`` (LOG_SCHEMA) and ``stats`` (STATS_SCHEMA; rates in tokens/s, cache figures as
    fractions 0-1) are the parsed lines; ``unknown`` counts lines no parser recognised (per file
    in ``unknown_by_file``); ``files`` names the files read, as in ``records["source"]``;
    ``errors`` holds one line per file that could not be (fully) read; ``notes`` one per file whose
    untimed lines were placed by their stamped neighbours.
    """

    records: pl.DataFrame
    stats: pl.DataFrame
    unknown: int = 0
    unknown_by_file: dict[str, int] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    """One line per file whose lines without a time of their own were placed by their neighbours, and
    how well (``train.log: 12 lines without a time of their own placed by their timestamped neighbours
    (at the time of the line before, at most 4.2 s early)``): said once, not per line."""

    def within(self, window: Window) -> LogResult:
        """The same result with records and stats limited to the closed ``window`` (null ts dropped)."""
        between = pl.col("ts").is_between(window.start, window.end, closed="both")
        return LogResult(
            self.records.filter(between),
            self.stats.filter(between),
            self.unknown,
            dict(self.unknown_by_file),
            list(self.files),
            list(self.errors),
            list(self.notes),
        )


# -- public entry points -------------------------------------------------------------------------


def expand(paths: PathLike | Iterable[PathLike]) -> list[Path]:
    """Expand ``paths`` (files, folders, glob patterns with ``*``, ``?``, ``[`` or ``**``) to files.

    A folder gives its visible files; a pattern gives its matching files, sorted; a plain path
    is kept even when it does not exist (the reader reports it). "Files" are all entries but
    folders: a FIFO, a device or a broken link is kept too, for :func:`read_logs` to report
    (it never opens one for reading). Duplicates are dropped, first occurrence kept.
    """
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    out: list[Path] = []
    seen: set[str] = set()
    for item in items:
        for match in _expand_one(os.path.expanduser(str(item))):
            key = os.path.abspath(match)
            if key not in seen:
                seen.add(key)
                out.append(Path(match))
    return out


def _expand_one(text: str) -> list[str]:
    # Anything that is not a folder is kept (a FIFO, a device, a broken link): the reader then
    # says why it was not read, instead of the file silently missing.
    if any(ch in text for ch in "*?["):
        return [m for m in sorted(glob(text, recursive=True)) if _listable(m)]
    if os.path.isdir(text):
        names = sorted(n for n in os.listdir(text) if not n.startswith("."))
        return [p for p in (os.path.join(text, n) for n in names) if _listable(p)]
    return [text]


def _listable(path: str) -> bool:
    """A folder's entry worth reading or reporting: not a folder, and there (or a link)."""
    return os.path.lexists(path) and not os.path.isdir(path)


def read_logs(
    paths: PathLike | Iterable[PathLike], *, window: Window, root: PathLike | None = None
) -> LogResult:
    """Parse every file of ``expand(paths)``; ``window`` supplies the year for year-less stamps.

    Records are not filtered to ``window`` (use :meth:`LogResult.within`). Never raises for file
    content: unreadable, binary or non-UTF-8 files, files that are not regular (FIFO, device),
    lines over :data:`MAX_LINE_BYTES` and files over :data:`MAX_FILE_BYTES` are listed in
    ``errors``. With ``root`` (a bundle folder), a file that resolves outside ``root`` through
    a symlink (its own, or a folder's) is not opened and is listed in ``errors``.
    """
    files = expand(paths)
    names = source_names(files)
    out = _Columns()
    years = Years(window)
    result = LogResult(_empty(LOG_SCHEMA), _empty(STATS_SCHEMA))
    for path, name in zip(files, names, strict=True):
        where = outside(path, root) if root is not None else None
        if where is not None:
            result.errors.append(f"{name}: resolves outside {root} (to {where}), not read")
            continue
        parser = _Parser(out, years, name)
        read, problems = _read_file(path, parser, name)
        result.errors.extend(problems)
        if read:
            result.files.append(name)
            result.unknown_by_file[name] = parser.unknown
            result.unknown += parser.unknown
            if note := parser.note():
                result.notes.append(note)
    result.records, result.stats = out.frames()
    return result


def parse_lines(lines: Iterable[str], *, window: Window, source: str = "<lines>") -> LogResult:
    """Parse log lines already in memory (e.g. from Loki) as if they were one file named ``source``."""
    out = _Columns()
    parser = _Parser(out, Years(window), source)
    for lineno, text in enumerate(lines, 1):
        parser.feed(lineno, text)
    records, stats = out.frames()
    note = parser.note()
    return LogResult(
        records, stats, parser.unknown, {source: parser.unknown}, [source], [], [note] if note else []
    )


def source_names(files: list[Path]) -> list[str]:
    """Short, unique names for ``files``: paths relative to their common folder (``a.log``, ``n1/a.log``)."""
    if not files:
        return []
    absolute = [os.path.abspath(f) for f in files]
    try:
        common = os.path.commonpath([os.path.dirname(a) for a in absolute])
    except ValueError:  # different drives
        return [f.as_posix() for f in files]
    return [Path(os.path.relpath(a, common)).as_posix() for a in absolute]


# -- reading files ---------------------------------------------------------------------------------


class _TooLarge(OSError):
    """A log file went past :data:`MAX_FILE_BYTES`."""


def _open(path: Path) -> tuple[IO[bytes] | gzip.GzipFile, IO[bytes]]:
    """(reader, the file under it): ``path`` opened for reading bytes, gzip decompressed (by magic
    number, not by name). Only a regular file is opened (:class:`~perfkit.sources.safeio.RefusedFile`)."""
    fh = open_regular(path)
    try:
        magic = fh.read(2)
        fh.seek(0)
        if magic == b"\x1f\x8b":
            return gzip.GzipFile(fileobj=fh, mode="rb"), fh
    except BaseException:
        fh.close()
        raise
    return fh, fh


def _read_file(path: Path, parser: _Parser, name: str) -> tuple[bool, list[str]]:
    """Feed the lines of ``path`` to ``parser``; return (whether it was read, problems found),
    each problem a line starting with ``name``."""
    try:
        fh, under = _open(path)
    except RefusedFile as err:
        return False, [f"{name}: {err.reason}, skipped"]
    except OSError as err:
        return False, [f"{name}: cannot read ({err.strerror or type(err).__name__})"]
    problems: list[str] = []
    lineno = 0
    replaced = 0
    too_long, first_too_long = 0, 0
    try:
        head = fh.read(_SNIFF_BYTES)
        reason = _not_text(head)
        if reason:
            return False, [f"{name}: {reason}, skipped"]
        for lineno, raw in enumerate(_lines(fh, head), 1):
            if raw is None:
                too_long += 1
                first_too_long = first_too_long or lineno
                continue
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = raw.decode("utf-8", "replace")
                replaced += 1
            if "\x00" in text:  # a log cut by a crash is often padded with NULs
                text = text.replace("\x00", "")
            parser.feed(lineno, text)
    except (OSError, EOFError, zlib.error) as err:
        if lineno == 0:
            return False, [f"{name}: cannot read ({err})"]
        problems.append(f"{name}: read stopped after line {lineno} ({err})")
    finally:
        fh.close()
        under.close()
    if too_long:
        more = f" (and {too_long - 1} more such line(s))" if too_long > 1 else ""
        problems.insert(0, f"{name}:{first_too_long}: line longer than {MAX_LINE_BYTES} bytes, skipped{more}")
    if replaced:
        problems.append(f"{name}: {replaced} line(s) with bytes that are not UTF-8 (replaced)")
    return True, problems


def _not_text(head: bytes) -> str | None:
    """Why the first bytes of a file say it is not a UTF-8 text log, or None when they look fine.

    NUL bytes mean binary; a few stray non-UTF-8 bytes are tolerated (they are replaced line by
    line), more than :data:`_MAX_BAD_FRAC` of the characters are not.
    """
    if b"\x00" in head:
        return "binary file (NUL bytes)"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as err:
        text = head.decode("utf-8", "replace")
        if text.count("\ufffd") > _MAX_BAD_FRAC * len(text):
            return f"not UTF-8 text (first bad byte at offset {err.start})"
    return None


def _lines(
    fh: IO[bytes] | gzip.GzipFile,
    head: bytes,
    *,
    limit: int = MAX_LINE_BYTES,
    max_bytes: int = MAX_FILE_BYTES,
) -> Iterator[bytes | None]:
    """Lines of ``fh`` (without newlines), given the bytes already read from it.

    A line longer than ``limit`` bytes gives ``None`` instead: it is read past in
    :data:`_SKIP_BYTES` pieces, never held whole. Past ``max_bytes`` in all, raises
    :class:`_TooLarge` (an OSError: the caller keeps what was read).
    """
    parts = head.split(b"\n")
    pending = parts.pop()  # the line the sniff window cut
    for part in parts:
        yield part if len(part) <= limit else None
    readline = fh.readline
    total = len(head)
    while True:
        want = limit + 1 - len(pending)
        line = pending + readline(want) if want > 0 else pending
        pending = b""
        if not line:
            return
        total += len(line)
        if total > max_bytes:
            raise _TooLarge(f"over the {size_text(max_bytes)} limit for one log file")
        if line[-1:] == b"\n":
            yield line[:-1]
        elif len(line) <= limit:
            yield line  # the last line, without a newline
        else:
            while True:  # the rest of a line that is too long: read past it
                piece = readline(_SKIP_BYTES)
                total += len(piece)
                if not piece or piece[-1:] == b"\n":
                    break
                if total > max_bytes:
                    raise _TooLarge(f"over the {size_text(max_bytes)} limit for one log file")
            yield None
