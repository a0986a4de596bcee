"""When a log line happened: the stamp it carries, or its place between the stamped lines around it.

A line's own time (:func:`own_time`) is a stamp at its start, after indentation and launcher prefixes
(torchrun's ``[rank3]:``, ``[default0]:``, a ``[1234]`` pid, Ray's ``(Worker pid=1)``; :data:`_LINE_PREFIX`),
or after a logger's short header (:data:`_HEADER`): torchtitan's ``[titan] 2025-01-01 12:00:00,123 -``
(``torchtitan/tools/logging.py``), NeMo's ``[NeMo I 2025-01-01 12:00:00 module:12]``
(``nemo/utils/formatters/base.py``), transformers' explicit format ``[INFO|trainer.py:2128]
2025-01-01 12:00:00,123 >>`` (``transformers/utils/logging.py`` ``enable_explicit_format``), a launcher's
``stdout:`` or ``srun --label``'s ``0:``. Formats: ISO 8601 (``2026-11-30 02:10:01,123``, optionally in
brackets, as NCCL, DeepSpeed, Megatron-LM and Python's logging write it), the ``%m/%d/%Y %H:%M:%S`` of
the Hugging Face example scripts' ``logging.basicConfig``, glog (``[E1130 02:10:01.123456 file.cpp:12]``,
which also gives the level), PyTorch's c10 logger (``[E810 03:04:11.061727749 file.cpp:683]``, the date
as month * 100 + day), syslog (``Nov 30 02:10:01``) and ``dmesg -T`` (``[Mon Nov 30 02:10:01 2026]``).

Many lines carry no time at all: NCCL's ``host:pid:tid [dev] NCCL INFO/WARN`` lines (``src/debug.cc``
stamps none before 2.26, and from 2.26 only WARN by default), Python tracebacks and the errors they end
with (``torch.OutOfMemoryError: CUDA out of memory``, ``RuntimeError: CUDA error: ...``,
``torch.distributed.DistBackendError: NCCL error in: ...``), a torchrun report. Whatever the framework,
a file is written in order, so such a line happened between the stamped lines before and after it.
:class:`Placement` gives it the time of the stamped line before it: a traceback, an NCCL warning or a
CUDA error is printed as the failure happens, right after the last line the job wrote, while the next
stamped line may come minutes later, after a restart (a midpoint would put such a line minutes late).
The exception is a line printed at the end of a silence (an unstamped watchdog timeout after a hang):
it is placed at the silence's start. Either way the line is at most the gap to the next stamp early,
never late, and one note per file says how many lines
were placed and the widest such gap (``train.log: 12 lines without a time of their own placed by their
timestamped neighbours (at the time of the line before, at most 4.2 s early)``). After the file's last
stamp a line is early by an amount the file cannot say; before the first it has no time. A training
framework's progress line that carries no time is not placed here: its own numbers place it
(:mod:`perfkit.sources.trainer_series`).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from perfkit.core.frames import Window, to_ms

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

LEVELS = dict(WARN="WARNING", ERR="ERROR", FATAL="CRITICAL", CRIT="CRITICAL", TRACE="DEBUG")
LEVELS.update(D="DEBUG", I="INFO", W="WARNING", E="ERROR", F="CRITICAL")  # glog's one-letter levels


# A logger's short header before its stamp: a launcher's "stdout: ", srun --label's "0: " or pdsh's (the
# deepspeed launcher's) "gpu003: " host; closed tags without spaces (torchtitan's "[titan] ",
# transformers' "[INFO|trainer.py:2128] "); a tag left open around the stamp (NeMo's "[NeMo I ",
# LLaMA-Factory's "[INFO|"). Each part bounded; tried after the leading formats, so a line's own
# leading stamp always wins, and a date further into a message is never taken for the line's time.
_HEADER = re.compile(
    r"(?:[\w.-]{1,64}: )?(?:\[[^\[\]\s]{1,64}\] ?){0,2}(?:\[(?:[A-Za-z][\w.-]{0,15}[ |]){1,2})?"
)
# the Hugging Face example scripts' logging.basicConfig(datefmt="%m/%d/%Y %H:%M:%S") (month first)
_US_TS = re.compile(r"(\d\d)/(\d\d)/(\d{4}) (\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?\b")


class Years:
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


def normalize_level(level: object) -> str | None:
    """Upper-case level name with aliases folded (``warn`` → ``WARNING``, glog ``E`` → ``ERROR``)."""
    if level is None or isinstance(level, bool):
        return None
    text = str(level).strip().upper()
    if not text:
        return None
    return LEVELS.get(text, text)


def own_time(text: str, years: Years) -> tuple[int | None, str | None]:
    """(epoch ms, level) of the line's own stamp (the module's docstring lists where it may stand and
    in which formats); (None, None) when it carries none. Only glog and c10 stamps give a level."""
    if text[:1] in " \t[(":
        prefix = _LINE_PREFIX.match(text)
        if prefix:
            text = text[prefix.end() :]
    first = text[:1]
    if first.isdigit() or first == "[":
        m = _ISO_TS.match(text)
        if m:
            return iso_ms(m), None
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
    if first.isdigit() and (m := _US_TS.match(text)):
        return _us_ms(m), None
    header = _HEADER.match(text) if first.isalnum() or first == "[" else None
    if header is not None and header.end() > 0:
        rest = text[header.end() :]
        if m := _ISO_TS.match(rest):
            return iso_ms(m), None
        if m := _US_TS.match(rest):
            return _us_ms(m), None
    return None, None


def _us_ms(m: re.Match[str]) -> int | None:
    """Epoch ms of a :data:`_US_TS` match (month first; no zone: UTC)."""
    return _calendar_ms(int(m[3]), int(m[1]), int(m[2]), int(m[4]), int(m[5]), int(m[6]), _frac_ms(m[7]))


def _frac_ms(digits: str | None) -> int:
    """Milliseconds in a fraction-of-second digit string (``"123456"`` → 123)."""
    return int((digits + "000")[:3]) if digits else 0


def _calendar_ms(year: int, month: int, day: int, hh: int, mm: int, ss: int, frac_ms: int = 0) -> int | None:
    try:
        return to_ms(datetime(year, month, day, hh, mm, min(ss, 59), tzinfo=UTC)) + frac_ms
    except ValueError:
        return None


def iso_ms(m: re.Match[str]) -> int | None:
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


def json_ts(value: object) -> int | None:
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
    return None if m is None else iso_ms(m)


class Placement:
    """The lines of one file that carry no time, placed by the stamped lines around them.

    The parser calls :meth:`stamp` for each line with a time of its own and :meth:`untimed` for the
    rows a line without one appended (at :attr:`last`, the stamp before it); the next stamp bounds
    how early they are. :meth:`note` says it once for the file."""

    def __init__(self) -> None:
        self.last: int | None = None  # the file's last stamp so far (epoch ms): where untimed lines go
        self.waiting = 0  # lines placed since that stamp: the next stamp bounds them
        self.placed = 0  # lines placed between two stamps
        self.widest_gap_ms = 0  # the largest gap between two stamps with placed lines between them
        self.before_first = 0  # lines before the file's first stamp: no time

    def stamp(self, ts: int) -> None:
        """A line stamped ``ts``: the lines placed since the last stamp are at most this much early."""
        if self.last is not None and self.waiting:
            self.placed += self.waiting
            self.widest_gap_ms = max(self.widest_gap_ms, abs(ts - self.last))
            self.waiting = 0
        self.last = ts

    def untimed(self, records: int) -> None:
        """A line without a time of its own gave ``records`` records (at :attr:`last`, or none)."""
        if self.last is None:
            self.before_first += records
        else:
            self.waiting += records

    def note(self, source: str) -> str | None:
        """One line for the file ``source``: how many lines were placed and how well; None when none
        were, or the file carries no time at all (nothing to place by)."""
        if self.last is None or not (self.placed or self.waiting or self.before_first):
            return None
        parts = []
        if self.placed:
            early = _duration(self.widest_gap_ms / 1000)
            parts.append(f"{_lines(self.placed)} without a time of their own placed by their timestamped neighbours (at the time of the line before, at most {early} early)")  # fmt: skip
        if self.waiting:
            parts.append(f"{_lines(self.waiting)} after the last timestamped line placed at it (early by an unknown amount)")  # fmt: skip
        if self.before_first:
            parts.append(f"{_lines(self.before_first)} before the first timestamped line left without a time")
        return f"{source}: " + "; ".join(parts)


def _lines(n: int) -> str:
    return f"{n:,} line{'s' if n != 1 else ''}"


def _duration(seconds: float) -> str:
    """``0.5 s``, ``4.2 min``, ``3 h``: a span as one reads it."""
    if seconds < 60:
        return f"{seconds:.3g} s"
    if seconds < 3600:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"
