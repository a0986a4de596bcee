"""Parse log lines: the line formats, signals and timestamps of :mod:`perfkit.sources.logs`.

The regexes of vLLM lines and stats (other engines' in :mod:`perfkit.sources.engine_lines`), of the
signals (OOM, NCCL, DataLoader, Xid) and of other lines' timestamps; JSON lines' fields
(:data:`JSON_TS_KEYS`); the year of year-less stamps (:class:`_Years`); and :class:`_Parser`, which
classifies one file's lines into the rows of :class:`_Columns` (see :mod:`perfkit.sources.logs`).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import polars as pl

from perfkit.core.frames import LOG_SCHEMA, STATS_SCHEMA, TS_DTYPE, SchemaDict, Window, to_ms
from perfkit.sources.engine_lines import SGLANG_ARGS, is_trtllm_launch, sglang_stats
from perfkit.sources.trainer_lines import trainer_kind

#: JSON keys tried, in order, for the timestamp, the message and the level of a JSON line
#: (``asctime``/``levelname``: vLLM's JSON logging, python-json-logger with vLLM's ``JSON_FORMAT``)
JSON_TS_KEYS = ("ts", "timestamp", "time", "@timestamp", "asctime")
JSON_MESSAGE_KEYS = ("message", "msg", "log")
JSON_LEVEL_KEYS = ("level", "severity", "levelname")

_ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[@-Z\\-_])")

# -- vLLM ---------------------------------------------------------------------------------------
# "(APIServer pid=7) INFO 11-30 00:10:05 [loggers.py:335] msg" (vllm/logger.py _FORMAT; the process
# part is vllm.utils.decorate_logs' stdout prefix, vLLM >= 0.10); vLLM 0.6.3-0.7.0 wrote "loggers.py:335]".
_VLLM = re.compile(
    r"(?:\((?P<proc>[^()]*?) pid=(?P<pid>\d+)\) )?"
    r"(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) "
    r"(?P<date>\d\d-\d\d) (?P<time>\d\d:\d\d:\d\d)(?:[.,]\d+)? "
    r"\[?[^\s\[\]]+:\d+\] ?(?P<msg>.*)"
)
_VLLM_HINT = re.compile(r"(?:INFO|DEBUG|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:")  # cheap pre-check
_NUM = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|nan|inf)"
# V1 (vllm/v1/metrics/loggers.py LoggingStatLogger): "Engine 000: Avg prompt throughput: ...", or
# "2 Engines Aggregated: ..." (AggregatedLoggingStatLogger, vLLM 0.33.0); V0 (vllm/engine/metrics.py):
# no engine part, "Swapped: N reqs, Pending: N reqs", and the prefix-cache figures on a line of their own.
_STATS = re.compile(
    rf"(?:Engine (?P<engine>\d+): |(?P<engines>\d+) Engines Aggregated: )?"
    rf"Avg prompt throughput: (?P<prompt>{_NUM}) tokens/s, "
    rf"Avg generation throughput: (?P<gen>{_NUM}) tokens/s, Running: (?P<running>\d+) reqs, "
    r"(?:Swapped: \d+ reqs, )?(?:Waiting|Pending): (?P<waiting>\d+) reqs"
)
_V0_PREFIX_LINE = re.compile(rf"Prefix cache hit rate: GPU: ({_NUM})%, CPU: {_NUM}%")
_V0_PREFIX_GAP_MS = 1500  # V0's prefix line follows its stats line by µs: stamps 0-1 s apart, never 2
_PREEMPTIONS = re.compile(r"Preemptions: (\d+)")
_KV_USAGE = re.compile(rf"KV cache usage: ({_NUM})%")  # the first: GPU/XPU/... (V0 adds CPU after it)
# "Prefix cache hit rate: x%" (V1), "GPU: x%" inside it (V0's own line), or a device word before it
# ("GPU prefix cache hit rate: x%, CPU prefix cache hit rate: y%"): the word says whose cache it is.
_PREFIX_HIT = re.compile(rf"(?:\b(\w{{1,16}}) )?[Pp]refix cache hit rate: (?:GPU: )?({_NUM})%")
#: words before "prefix cache hit rate" that name another cache than the engine's own (GPU) one
_OTHER_PREFIX_CACHES = frozenset({"CPU", "External", "external", "Host", "host", "Disk", "disk", "Remote"})

# -- signals --------------------------------------------------------------------------------------
# PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp): "CUDA out of memory. Tried to allocate"
# under torch.OutOfMemoryError (>= 2.1), torch.cuda.OutOfMemoryError (1.13-2.0) or RuntimeError (older);
# the device-neutral allocators say "Out of memory. Tried to allocate"; the CUDA runtime's own error is
# "CUDA error: out of memory".
_OOM = re.compile(
    r"\b(?:CUDA|HIP) out of memory|CUDA error: out of memory|\bOut of memory\. Tried to allocate"
)
# Log lines are hostile input: no pattern here may rescan a line from every position (a 64 KiB
# "NCCL aaaa..." line took 40 s). The host starts only where a host cannot continue (so a run of
# host characters is tried once, as the leftmost match would start there anyway), a bracketed
# time holds no bracket, and the other open-ended parts are bounded.
# NCCL src/debug.cc: "host:pid:tid [dev] NCCL INFO msg", "host:pid:tid [dev] file:line NCCL WARN msg"
# ("file:line (func)" from 2.30), "host:pid:tid [dev] 12.345678 func:line NCCL TRACE msg"; from 2.26 a
# "[%F %T] " stamp (NCCL_DEBUG_TIMESTAMP_FORMAT, local time) leads WARN lines by default.
_NCCL = re.compile(  # training-metrics.md §5.1, unanchored so "[rank0]:" style prefixes pass
    r"(?:\[(?P<ts>[^\[\]]{1,64})\] )?(?<![^:\s\[\]])(?P<host>[^:\s\[\]]+):(?P<pid>\d+):(?P<tid>\d+) "
    r"\[(?P<dev>\d+)\] (?:\d{1,15}\.\d{1,9} )?(?:(?P<file>\S+):(?P<line>\d+) (?:\((?P<func>[^()]{0,256})\) )?)?"
    r"NCCL (?P<level>WARN|INFO|TRACE) (?P<msg>.*)$"
)
_DATALOADER = re.compile(
    r"DataLoader worker \(pid.{0,256}?\) exited unexpectedly|DataLoader timed out after \d+ seconds"
    r"|is killed by signal|Unexpected bus error encountered in worker"
)
# open-gpu-kernel-modules src/nvidia/src/kernel/gpu/rc/kernel_rc.c: "NVRM: Xid (PCI:0000:3b:00): 79, pid=..,
# name=.., msg" (MIG adds " GPU-I:01 GPU-CI:00" inside the parenthesis; old drivers wrote no "PCI:").
_XID = re.compile(r"NVRM: Xid \((?P<pci>[^()]{0,64})\): (?P<xid>\d+)")
# The same condition as Xid 79 said without an Xid (open-gpu-kernel-modules
# src/nvidia/arch/nvalloc/unix/src/osinit.c): osHandleGpuLost's "NVRM: GPU 0000:3b:00.0: GPU has fallen off
# the bus." and RmInitAdapter's three-line "NVRM: The NVIDIA GPU 0000:b3:00.0 / NVRM: (PCI ID: 10de:26b5)
# installed in this system has / NVRM: fallen off the bus and is not responding to commands."
_FALLEN = "fallen off the bus"

# -- wrapped start-up lines and launch lines --------------------------------------------------------
# A terminal or a log viewer cuts a long line into rows of one width (vllm-project/vllm#8242 and #9532 pasted
# start-up lines cut at 1000 columns, one mid-word): the rows after a start-up line that cannot start a
# record are joined back to it while each row before was full width and the settings are not closed yet.
_STARTUP_MARKS = ("non-default args: {", "args: Namespace(")
_MIN_WRAP_WIDTH, _MAX_WRAP_ROWS = 80, 256  # no terminal is narrower than 80 columns; 64 KiB at 256
_MAX_JOINED = 64 * 2**10  # as long as one log line may be
_QUOTE_AFTER = frozenset("=:[({, ")
# A launcher's echo of vLLM's command line ("python -m vllm.entrypoints.openai.api_server --model m
# --enable-chunked-prefill", a k8s "vllm serve m --max_num_batched_tokens 1024" args list): its flags.
_LAUNCH_FLAG = re.compile(
    r"--(?:no-)?(enable[-_]chunked[-_]prefill|max[-_]num[-_]batched[-_]tokens|max[-_]num[-_]seqs"
    r"|gpu[-_]memory[-_]utilization|enable[-_]prefix[-_]caching)\b"
)


def _is_launch(text: str) -> bool:
    """A command line (not argparse's usage text) that sets vLLM's flags: it names vLLM and sets one of
    them, or sets two (no other engine spells two of them alike: LMDeploy shares only prefix caching)."""
    if "--" not in text or "[--" in text:
        return False
    names = {m[1].replace("_", "-") for m in _LAUNCH_FLAG.finditer(text, 0, _MAX_JOINED)}
    return len(names) >= 2 or (len(names) == 1 and "vllm" in text.lower()) or is_trtllm_launch(text)


class _Wrapped:
    """A start-up record whose settings a wrap may have cut: its row, the first row's width, the
    brackets and quote open at its end (a quote opens only after a delimiter, as in a Python repr)."""

    def __init__(self, row: int, width: int, settings: str) -> None:
        self.row, self.width, self.rows, self.size = row, width, 1, len(settings)
        self.depth, self.quote, self.last = 0, "", ""
        self.scan(settings)

    def scan(self, text: str) -> None:
        depth, quote, prev, escaped = self.depth, self.quote, self.last, False
        for ch in text:
            if escaped:  # only ever set inside a quote
                escaped = False
            elif quote:
                escaped, quote = ch == "\\", "" if ch == quote else quote
            elif ch in "'\"" and (not prev or prev in _QUOTE_AFTER):
                quote = ch
            elif ch in "([{":
                depth += 1
            elif ch in ")]}":
                depth = max(depth - 1, 0)
            prev = ch
        self.depth, self.quote, self.last = depth, quote, prev or self.last

    @property
    def open(self) -> bool:
        return bool(self.quote) or self.depth > 0 or self.last not in (")", "}")


def _settings_part(msg: str) -> str | None:
    """The settings of a vLLM start-up line (from its opening bracket), or None when it is not one."""
    for mark in _STARTUP_MARKS:
        if msg.startswith(mark):
            return msg[len(mark) - 1 :]
    at = msg.find("with config: ", 0, 256)
    return msg[at + 13 :] if at > 0 and msg.startswith("Initializing ") else None


# -- timestamps of lines that are not vLLM / JSON -----------------------------------------------
# Put before a line's own stamp: indentation, torchrun's "[rank3]:"/"[default0]:", a "[1234] " pid or line
# number ("[80746] [rank0]:[E321 02:07:08...]", hiyouga/LlamaFactory#7396), Ray's "(WorkerDict pid=1230, ip=..)
# "; a few, each bounded (a dmesg "[12345.678901]" has a dot: not one).
_LINE_PREFIX = re.compile(
    r"[ \t]{0,64}(?:(?:\[(?:rank|default)?\d{1,9}\]:?|\([\w.-]{0,64} ?pid=\d{1,9}(?:, ip=[^()\s]{1,256})?\)) ?){0,4}"
)
_ISO_TS = re.compile(
    r"\[?(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?\s?(Z|[+-]\d\d:?\d\d)?\b"
)
# glog "E1130 02:10:01.123456 12345 file.cc:12]" and PyTorch's own c10 logger (c10/util/Logging.cpp),
# which writes the date as the number (month * 100 + day): "[E810 03:04:11.061727749 file.cpp:683]" is
# 10 August. The month is 1-2 digits, the day always 2, so "E111 " is 11 January and "E1101 " 1 November.
_GLOG_TS = re.compile(r"\[?([IWEF])(1[0-2]|0?[1-9])([0-3]\d) (\d\d):(\d\d):(\d\d)(?:\.(\d+))?[ \]]")
_MON = "(Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)"
_MONTHS = {m: i for i, m in enumerate(_MON[1:-1].split("|"), 1)}
# syslog, journalctl -o short(-precise)
_SYSLOG_TS = re.compile(_MON + r" +(\d{1,2}) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))? ")
_DMESG_T_TS = re.compile(r"\[(?:[A-Z][a-z]{2} )?" + _MON + r" +(\d{1,2}) (\d\d):(\d\d):(\d\d) (\d{4})\]")

_LEVELS = dict(WARN="WARNING", ERR="ERROR", FATAL="CRITICAL", CRIT="CRITICAL", TRACE="DEBUG")
_LEVELS.update(D="DEBUG", I="INFO", W="WARNING", E="ERROR", F="CRITICAL")  # glog's one-letter levels


# -- parsing ---------------------------------------------------------------------------------------


class _Years:
    """Epoch milliseconds for year-less stamps, taking the year nearest the window's middle."""

    def __init__(self, window: Window) -> None:
        self.middle = window.start + (window.end - window.start) / 2
        self._days: dict[tuple[int, int], int | None] = {}
        self._by_text: dict[str, int | None] = {}

    def day_ms(self, month: int, day: int) -> int | None:
        """Epoch ms of 00:00 UTC on ``month``/``day`` of the nearest year; None if no such date."""
        key = (month, day)
        if key not in self._days:
            self._days[key] = self._nearest(month, day)
        return self._days[key]

    def _nearest(self, month: int, day: int) -> int | None:
        best: tuple[timedelta, datetime] | None = None
        for year in (self.middle.year - 1, self.middle.year, self.middle.year + 1):
            try:
                midnight = datetime(year, month, day, tzinfo=UTC)
            except ValueError:
                continue
            distance = abs(midnight + timedelta(hours=12) - self.middle)
            if best is None or distance < best[0]:
                best = (distance, midnight)
        return None if best is None else to_ms(best[1])

    def stamp_ms(self, date: str, time: str) -> int | None:
        """Epoch ms of a vLLM stamp (``"11-30"``, ``"00:10:05"``); None when it is not a valid time."""
        base = self._by_text.get(date, -1)
        if base == -1:
            base = self._by_text[date] = self.day_ms(int(date[:2]), int(date[3:5]))
        hh, mm, ss = int(time[:2]), int(time[3:5]), int(time[6:8])
        if base is None or hh > 23 or mm > 59 or ss > 60:
            return None
        return base + ((hh * 60 + mm) * 60 + ss) * 1000

    def ms(self, month: int, day: int, hh: int, mm: int, ss: int, frac_ms: int = 0) -> int | None:
        """Epoch ms of a year-less stamp, or None when it is not a valid time."""
        if hh > 23 or mm > 59 or ss > 60:
            return None
        base = self.day_ms(month, day)
        return None if base is None else base + ((hh * 60 + mm) * 60 + ss) * 1000 + frac_ms


class _Columns:
    """Rows the parsers append to; :meth:`frames` turns them into the two frames."""

    def __init__(self) -> None:
        self.log_rows: list[tuple[object, ...]] = []
        self.stats_rows: list[tuple[object, ...]] = []

    def record(self, ts: int | None, source: str, line: int, kind: str, level: str | None, msg: str) -> None:
        self.log_rows.append((ts, source, line, kind, level, msg))

    def stats_row(self, ts: int | None, m: re.Match[str], text: str) -> None:
        """Append the stats of one vLLM stats line (``m`` matched :data:`_STATS` in ``text``); ``engine`` is
        its engine index (``"0"`` when it names none, as V0's), ``"all"`` for the aggregated line."""
        rest = text[m.end() :]
        preemptions = _PREEMPTIONS.search(rest) if "Preemptions" in rest else None
        kv = _KV_USAGE.search(rest)
        prefix = _gpu_prefix_hit(rest)
        engine = m["engine"]
        self.stats_rows.append(
            (
                ts,
                "all" if m["engines"] else str(int(engine)) if engine else "0",
                float(m["prompt"]),
                float(m["gen"]),
                int(m["running"]),
                int(m["waiting"]),
                float(kv[1]) / 100 if kv else None,
                prefix,
                int(preemptions[1]) if preemptions else None,
            )
        )

    def v0_prefix_hit(self, index: int, ts: int | None, text: str) -> bool:
        """Put the GPU hit rate of a V0 ``Prefix cache hit rate: GPU: x%, CPU: y%`` line into stats row
        ``index`` (the stats line it follows); False when ``text`` is not one or the row does not fit."""
        m = _V0_PREFIX_LINE.match(text)
        row = self.stats_rows[index]
        row_ts = row[0]
        if m is None or row[7] is not None:
            return False
        if (ts is None) != (row_ts is None):
            return False
        if ts is not None and isinstance(row_ts, int) and abs(ts - row_ts) > _V0_PREFIX_GAP_MS:
            return False
        self.stats_rows[index] = (*row[:7], float(m[1]) / 100, row[8])
        return True

    def frames(self) -> tuple[pl.DataFrame, pl.DataFrame]:
        """(records, stats) with their schemas; ts columns are UTC datetimes in ms."""
        records = _build(self.log_rows, LOG_SCHEMA)
        stats = _build(self.stats_rows, STATS_SCHEMA).sort("ts", nulls_last=True, maintain_order=True)
        return records, stats


def _gpu_prefix_hit(rest: str) -> float | None:
    """The engine's own (GPU) prefix-cache hit rate in the rest of a stats line, as a fraction: the
    first figure not named for another cache (CPU offload, external, ...); None when there is none."""
    if "refix cache hit rate" not in rest:
        return None
    for m in _PREFIX_HIT.finditer(rest):
        if m[1] not in _OTHER_PREFIX_CACHES:
            return float(m[2]) / 100
    return None


def _build(rows: list[tuple[object, ...]], schema: SchemaDict) -> pl.DataFrame:
    """A frame with ``schema`` from row tuples in schema order (``ts`` given in epoch ms)."""
    columns = list(zip(*rows, strict=True)) if rows else [() for _ in schema]
    data = {
        name: pl.Series(name, values, dtype=pl.Int64).cast(TS_DTYPE)
        if name == "ts"
        else pl.Series(name, values, dtype=dtype)
        for (name, dtype), values in zip(schema.items(), columns, strict=True)
    }
    return pl.DataFrame(data, schema=schema)


def _empty(schema: SchemaDict) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


class _Parser:
    """Classifies the lines of one file, carrying the last timestamp forward."""

    def __init__(self, out: _Columns, years: _Years, source: str) -> None:
        self.out = out
        self.years = years
        self.source = source
        self.last_ts: int | None = None
        self.unknown = 0
        self.last_stats: int | None = None  # index of this file's last stats row, for V0's prefix line
        self.wrapped: _Wrapped | None = None  # a start-up line the next rows may continue

    def feed(self, lineno: int, text: str) -> None:
        """Classify one line (newline optional) and append what it gives."""
        if "\x1b" in text:
            text = _ANSI.sub("", text)
        if self.wrapped is not None and self._continues(text.rstrip("\r\n")):
            return
        width = len(text.rstrip("\r\n"))
        text = text.rstrip()
        if not text:
            return
        if text[0] == "{" and self._json(lineno, text):
            return
        m = _VLLM.search(text) if _VLLM_HINT.search(text) else None
        if m is None:
            self._plain(lineno, text)
            return
        date, time, level, msg = m.group("date", "time", "level", "msg")
        self._classified(
            lineno, self._carry(self.years.stamp_ms(date, time)), level, msg, default_kind="vllm"
        )
        settings = _settings_part(msg) if width >= _MIN_WRAP_WIDTH else None
        if settings is not None and self.out.log_rows[-1][3] == "vllm":
            wrapped = _Wrapped(len(self.out.log_rows) - 1, width, settings)
            self.wrapped = wrapped if wrapped.open else None

    def _continues(self, row: str) -> bool:
        """Join ``row`` to the start-up line a wrap cut, if it is the rest of it (see :data:`_STARTUP_MARKS`)."""
        wrapped, self.wrapped = self.wrapped, None
        assert wrapped is not None
        text = row.rstrip()
        if (
            not text
            or wrapped.rows >= _MAX_WRAP_ROWS
            or wrapped.size + len(row) > _MAX_JOINED
            or text.startswith(("  ", "\t"))  # indented: a traceback, a continued kernel message
            or not self._cannot_start(text)
        ):
            return False
        ts, source, line, kind, level, msg = self.out.log_rows[wrapped.row]
        self.out.log_rows[wrapped.row] = (ts, source, line, kind, level, f"{msg}{row}")
        wrapped.scan(row)
        wrapped.rows += 1
        wrapped.size += len(row)
        if len(row) == wrapped.width and wrapped.open:
            self.wrapped = wrapped  # a full row, the settings still open: the next row may go on
        return True

    def _cannot_start(self, text: str) -> bool:
        """True when ``text`` is no record of its own: no vLLM, JSON or timestamped line, no signal, no stats."""
        if _VLLM_HINT.search(text) or (text[0] == "{" and _json_fields(text) is not None):
            return False
        return (
            _leading_ts(text, self.years)[0] is None
            and _signal(text) is None
            and "Avg prompt throughput" not in text
            and not _is_launch(text)
        )

    def _json(self, lineno: int, text: str) -> bool:
        fields = _json_fields(text)
        if fields is None:
            return False
        ts, level, message = fields
        kind = "json"
        inner = _VLLM.search(message) if _VLLM_HINT.search(message) else None
        if inner is not None:  # a vLLM line shipped as JSON (docker json-file, fluent-bit ...)
            kind, message = "vllm", inner["msg"]
            level = level or inner["level"]
        self._classified(lineno, self._carry(ts), level, message, default_kind=kind)
        return True

    def _classified(
        self, lineno: int, ts: int | None, level: str | None, msg: str, *, default_kind: str
    ) -> None:
        """Record a vLLM or JSON line; a signal or stats in its message decides the kind."""
        signal = _signal(msg)
        if signal is not None:
            kind, implied = signal
            level = level or implied
        else:
            stats = _STATS.search(msg) if "Avg prompt throughput" in msg else None
            kind = default_kind if stats is None else "vllm_stats"
            if stats is not None:
                self.out.stats_row(ts, stats, msg)
                self.last_stats = len(self.out.stats_rows) - 1
            elif self.last_stats is not None and msg.startswith("Prefix cache hit rate: GPU: "):
                self.out.v0_prefix_hit(self.last_stats, ts, msg)
                self.last_stats = None
        self.out.record(ts, self.source, lineno, kind, level, msg)

    def _plain(self, lineno: int, text: str) -> None:
        """A line in no structured format: a record if it holds a signal or vLLM stats."""
        own_ts, level = _leading_ts(text, self.years)
        ts = self._carry(own_ts)
        signal = _signal(text)
        if signal is not None:
            kind, implied = signal
            self.out.record(ts, self.source, lineno, kind, level or implied, text)
            return
        stats = _STATS.search(text) if "Avg prompt throughput" in text else None
        sglang = sglang_stats(text) if stats is None and " batch" in text else None
        if sglang is not None:  # SGLang's scheduler line (perfkit.sources.engine_lines)
            self.out.stats_rows.append((ts, "0", *sglang[1:], None, None))
            self.out.record(ts, self.source, lineno, f"sglang_{sglang[0]}", level, text)  # PREFILL_KIND
            return
        if stats is None:
            what = "vllm_launch" if _is_launch(text) else "sglang" if SGLANG_ARGS in text else None
            trainer = None if what else trainer_kind(text)  # perfkit.sources.trainer_lines
            if trainer and trainer not in ("megatron_timer", "deepspeed_flops"):  # its own stamp, or none
                m = _ISO_TS.search(text, 0, 96) if own_ts is None else None
                ts = _iso_ms(m) if m else own_ts
            if what or trainer:
                self.out.record(ts, self.source, lineno, what or trainer or "", level, text)
            else:
                self.unknown += 1
            return
        self.out.stats_row(ts, stats, text)
        self.last_stats = len(self.out.stats_rows) - 1
        self.out.record(ts, self.source, lineno, "vllm_stats", level, text)

    def _carry(self, ts: int | None) -> int | None:
        """``ts`` if the line has one (and remember it), else the last one seen in this file."""
        if ts is None:
            return self.last_ts
        self.last_ts = ts
        return ts


def _signal(text: str) -> tuple[str, str | None] | None:
    """(kind, implied level) of the signal in ``text`` (cuda_oom, nccl_*, dataloader_error, xid), or None."""
    if ("out of memory" in text or "Out of memory" in text) and _OOM.search(text):
        return "cuda_oom", "ERROR"
    if "NCCL" in text:
        if "Watchdog caught collective operation timeout" in text:
            return "nccl_timeout", "ERROR"
        if "NCCL error in:" in text or "NCCL communicator was aborted" in text:
            return "nccl_error", "ERROR"
        m = _NCCL.search(text) if "NCCL " in text else None
        if m is not None:
            level = m["level"]
            return ("nccl_warn" if level == "WARN" else "nccl_info"), _LEVELS.get(level, level)
    if ("DataLoader" in text or "killed by signal" in text or "bus error" in text) and _DATALOADER.search(
        text
    ):
        return "dataloader_error", "ERROR"
    if "NVRM" in text:
        if "NVRM: Xid" in text and _XID.search(text):
            return "xid", "ERROR"
        fallen = text.find(_FALLEN)
        if fallen > 0 and "NVRM:" in text[:fallen]:
            return "xid", "ERROR"  # the Xid 79 condition, logged without its Xid
    return None


def normalize_level(level: object) -> str | None:
    """Upper-case level name with aliases folded (``warn`` → ``WARNING``, glog ``E`` → ``ERROR``)."""
    if level is None or isinstance(level, bool):
        return None
    text = str(level).strip().upper()
    if not text:
        return None
    return _LEVELS.get(text, text)


# -- timestamps ------------------------------------------------------------------------------------


def _leading_ts(text: str, years: _Years) -> tuple[int | None, str | None]:
    """(epoch ms, level) from a timestamp at the start of ``text``; (None, None) when there is none.

    Understands ISO 8601 (``2026-11-30 02:10:01,123``, optionally in brackets, as NCCL writes
    it), glog (``[E1130 02:10:01.123456 file.cpp:12]``, which also gives the level), syslog
    (``Nov 30 02:10:01 host kernel:``, also with ``journalctl -o short-precise`` microseconds),
    PyTorch's c10 logger (``[E810 03:04:11.061727749 file.cpp:683]``, the date as month * 100 + day)
    and ``dmesg -T`` (``[Mon Nov 30 02:10:01 2026]``), after optional indentation and launcher prefixes
    (``[rank0]:``, ``[default0]:``, ``[1234] ``; :data:`_LINE_PREFIX`).
    """
    if text[:1] in " \t[(":
        prefix = _LINE_PREFIX.match(text)
        if prefix:
            text = text[prefix.end() :]
    first = text[:1]
    if first.isdigit() or first == "[":
        m = _ISO_TS.match(text)
        if m:
            return _iso_ms(m), None
    if first in "[IWEF":
        m = _GLOG_TS.match(text)
        if m:
            ms = years.ms(int(m[2]), int(m[3]), int(m[4]), int(m[5]), int(m[6]), _frac_ms(m[7]))
            return ms, normalize_level(m[1])
    if first == "[":
        m = _DMESG_T_TS.match(text)
        if m:
            return _calendar_ms(int(m[6]), _MONTHS[m[1]], int(m[2]), int(m[3]), int(m[4]), int(m[5])), None
    elif first in "JFMASOND":
        m = _SYSLOG_TS.match(text)
        if m:
            return years.ms(_MONTHS[m[1]], int(m[2]), int(m[3]), int(m[4]), int(m[5]), _frac_ms(m[6])), None
    return None, None


def _frac_ms(digits: str | None) -> int:
    """Milliseconds in a fraction-of-second digit string (``"123456"`` → 123)."""
    return int((digits + "000")[:3]) if digits else 0


def _calendar_ms(year: int, month: int, day: int, hh: int, mm: int, ss: int, frac_ms: int = 0) -> int | None:
    try:
        return to_ms(datetime(year, month, day, hh, mm, min(ss, 59), tzinfo=UTC)) + frac_ms
    except ValueError:
        return None


def _iso_ms(m: re.Match[str]) -> int | None:
    """Epoch ms of an :data:`_ISO_TS` match; no zone means UTC."""
    ms = _calendar_ms(int(m[1]), int(m[2]), int(m[3]), int(m[4]), int(m[5]), int(m[6]), _frac_ms(m[7]))
    zone = m[8]
    if ms is None or not zone or zone == "Z":
        return ms
    sign = -1 if zone[0] == "-" else 1
    digits = zone[1:].replace(":", "")
    offset_min = int(digits[:2]) * 60 + int(digits[2:])
    return ms - sign * offset_min * 60_000


def epoch_ms(value: float) -> int:
    """Epoch milliseconds from a number in epoch seconds, ms, µs or ns (chosen by magnitude)."""
    size = abs(value)
    if size >= 1e17:
        return round(value / 1e6)
    if size >= 1e14:
        return round(value / 1e3)
    if size >= 1e11:
        return round(value)
    return round(value * 1000)


def _json_ts(value: object) -> int | None:
    """Epoch ms of a JSON timestamp (ISO string, or epoch s/ms/µs/ns as a number or string)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return epoch_ms(value) if value == value else None
    if not isinstance(value, str):
        return None
    text = value.strip()
    try:
        return epoch_ms(float(text))
    except ValueError:
        m = _ISO_TS.fullmatch(text) if text[:1].isdigit() else None
    return None if m is None else _iso_ms(m)


def _first(obj: dict[str, object], keys: tuple[str, ...]) -> object:
    return next((v for v in (obj.get(k) for k in keys) if v is not None), None)


def _json_fields(text: str) -> tuple[int, str | None, str] | None:
    """(ts ms, level, message) of a JSON log line, or None when it is not one."""
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    raw_ts = _first(obj, JSON_TS_KEYS)
    raw_msg = _first(obj, JSON_MESSAGE_KEYS)
    if raw_ts is None or raw_msg is None:
        return None
    ts = _json_ts(raw_ts)
    if ts is None:
        return None
    message = raw_msg if isinstance(raw_msg, str) else json.dumps(raw_msg)
    message = message.rstrip("\r\n")
    if "\x1b" in message:
        message = _ANSI.sub("", message)
    return ts, normalize_level(_first(obj, JSON_LEVEL_KEYS)), message
