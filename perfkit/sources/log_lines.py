"""Parse log lines: the line formats, signals and timestamps of :mod:`perfkit.sources.logs`.

The regexes of vLLM lines and stats (other engines' in :mod:`perfkit.sources.engine_lines`) and of the
signals (OOM, NCCL, DataLoader, Xid); JSON lines' fields
(:data:`JSON_TS_KEYS`); and :class:`_Parser`, which classifies one file's lines into the rows of
:class:`_Columns` (see :mod:`perfkit.sources.logs`), each line at its own time or placed between its
stamped neighbours (:mod:`perfkit.sources.log_times`, whatever the framework that wrote the file).
"""

from __future__ import annotations

import json
import re

import polars as pl

from perfkit.core.frames import LOG_SCHEMA, STATS_SCHEMA, TS_DTYPE, SchemaDict
from perfkit.sources.engine_lines import (
    SGLANG_ARGS,
    is_trtllm_launch,
    sglang_stats,
    tracing_line,
    trtllm_line,
)
from perfkit.sources.log_times import LEVELS, Placement, Years, json_ts, normalize_level, own_time
from perfkit.sources.trainer_lines import (
    CHECKPOINT_KIND,
    KINDS,
    PROGRESS_KIND,
    checkpoint_step,
    progress_step,
    trainer_kind,
)

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
# "CUDA error: out of memory". TensorRT-LLM's C++ runtime has no PyTorch allocator: its CUDA check
# (cpp/include/tensorrt_llm/common/cudaUtils.h ``check``) throws "[TensorRT-LLM][ERROR] CUDA runtime error
# in <call>: <cudaGetErrorString>", which for cudaErrorMemoryAllocation is "out of memory"
# ("CUDA runtime error in ::cudaMallocAsync(ptr, n, mMemPool->getPool(), mCudaStream->get()): out of
# memory (.../tllmBuffers.h:125)", NVIDIA/TensorRT-LLM#2335, #3636).
_OOM = re.compile(
    r"\b(?:CUDA|HIP) out of memory|CUDA error: out of memory|\bOut of memory\. Tried to allocate"
    r"|CUDA runtime error in [^\n]{1,1024}?: out of memory"
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


# -- parsing ---------------------------------------------------------------------------------------


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
    """Classifies the lines of one file; a line without a time of its own is placed by the stamped
    lines around it (:class:`~perfkit.sources.log_times.Placement`)."""

    def __init__(self, out: _Columns, years: Years, source: str) -> None:
        self.out = out
        self.years = years
        self.source = source
        self.placement = Placement()
        self.unknown = 0
        self.last_stats: int | None = None  # index of this file's last stats row, for V0's prefix line
        self.wrapped: _Wrapped | None = None  # a start-up line the next rows may continue
        self._untimed = False  # the line being read carries no time of its own

    def feed(self, lineno: int, text: str) -> None:
        """Classify one line (newline optional) and append what it gives."""
        rows = len(self.out.log_rows)
        self._untimed = False
        self._feed(lineno, text)
        if self._untimed:
            self.placement.untimed(len(self.out.log_rows) - rows)

    def note(self) -> str | None:
        """How this file's lines without a time were placed (one line), once it is all fed."""
        return self.placement.note(self.source)

    def _feed(self, lineno: int, text: str) -> None:
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
            tracing = tracing_line(text) if text[:1].isdigit() else None
            if tracing is None:
                self._plain(lineno, text)
                return
            # TGI's and Dynamo's tracing-subscriber line (perfkit.sources.engine_lines)
            stamp, level, _target, msg = tracing
            self._classified(
                lineno, self._carry(json_ts(stamp)), normalize_level(level), msg, default_kind="tracing"
            )
            self._maybe_wrapped(msg, width, "tracing")
            return
        date, time, level, msg = m.group("date", "time", "level", "msg")
        self._classified(
            lineno, self._carry(self.years.stamp_ms(date, time)), level, msg, default_kind="vllm"
        )
        self._maybe_wrapped(msg, width, "vllm")

    def _maybe_wrapped(self, msg: str, width: int, kind: str) -> None:
        """Remember the record just made if it is a start-up line whose settings a wrap may have cut."""
        settings = _settings_part(msg) if width >= _MIN_WRAP_WIDTH else None
        if settings is not None and self.out.log_rows[-1][3] == kind:
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
            own_time(text, self.years)[0] is None
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
        own_ts, level = own_time(text, self.years)
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
        trtllm = trtllm_line(text) if stats is None else None
        if trtllm is not None:  # TensorRT-LLM's C++ logger: no time of its own (perfkit.sources.engine_lines)
            self.out.record(ts, self.source, lineno, "trtllm", normalize_level(trtllm[0]), trtllm[1])
            return
        if stats is None:
            what = "vllm_launch" if _is_launch(text) else "sglang" if SGLANG_ARGS in text else None
            trainer = None if what else trainer_kind(text)  # perfkit.sources.trainer_lines
            if not what and trainer is None and progress_step(text) is not None:
                trainer = PROGRESS_KIND  # a script's "step N | loss" line: its step, for progress
            elif not what and trainer is None and checkpoint_step(text) is not None:
                trainer = CHECKPOINT_KIND  # a checkpoint save and its step: where a rollback resumes
            if trainer in _PLACED_BY_CONTENT and own_ts is None:
                ts, self._untimed = None, False  # trainer_series places it by its own numbers
            if what or trainer:
                self.out.record(ts, self.source, lineno, what or trainer or "", level, text)
            else:
                self.unknown += 1
            return
        self.out.stats_row(ts, stats, text)
        self.last_stats = len(self.out.stats_rows) - 1
        self.out.record(ts, self.source, lineno, "vllm_stats", level, text)

    def _carry(self, ts: int | None) -> int | None:
        """``ts`` if the line has one (and remember it), else the last one seen in this file: the line
        is placed by its stamped neighbours (:class:`~perfkit.sources.log_times.Placement`)."""
        if ts is None:
            self._untimed = True
            return self.placement.last
        self.placement.stamp(ts)
        return ts


_PLACED_BY_CONTENT = frozenset(KINDS) - {
    "megatron_timer",
    "deepspeed_flops",
    "elastic_restart",
    "elastic_failure",
}
"""A training framework's progress lines: without a time of their own they stay without one, and
:mod:`perfkit.sources.trainer_series` places them by their iterations and step times (a midpoint between
neighbours would invent the step times it derives from their spacing). A timer block, the flops
profiler's summary and torchrun's restart reports are placed like any other line."""


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
            return ("nccl_warn" if level == "WARN" else "nccl_info"), LEVELS.get(level, level)
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
    ts = json_ts(raw_ts)
    if ts is None:
        return None
    message = raw_msg if isinstance(raw_msg, str) else json.dumps(raw_msg)
    message = message.rstrip("\r\n")
    if "\x1b" in message:
        message = _ANSI.sub("", message)
    return ts, normalize_level(_first(obj, JSON_LEVEL_KEYS)), message
