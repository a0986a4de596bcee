"""A drill's evidence as a trainee gets it: a copy of the bundle that names neither the scenario
nor a triage direction.

What leaks, and what is done about it:

* ``incident.yaml`` is rewritten as a real incident would be: a neutral
  ``id: INC-<window start date>-<label>`` and only the fields an incident has
  (:data:`INCIDENT_KEYS`, the ones :func:`perfkit.core.incident.parse_incident` reads); the
  simulator's ``generator:`` (scenario, seed) and anything else is dropped.
* Every other file is scanned, streamed in :data:`CHUNK` pieces (metrics files run to 11 MB), for
  the :class:`Leaks`: the scenario names (which spell the cause: ``kv-prefix-cache-thrash``) and
  the triage table's direction and symptom ids (``prefill_decode_interference``). Identifiers, so
  matched as such: case-insensitively, with ``-`` and ``_`` taken as the same character, never
  inside a longer word (``oom`` is not replaced in ``room``); natural words ("a data pipeline")
  are evidence and stay. A scenario name becomes the drill's label
  (``job="kv-prefix-cache-thrash"`` → ``job="drill-20"``), a direction or symptom id ``redacted``:
  quoted label values and CSV fields stay parseable. A file without a leak is copied byte for byte.
  gzip files (``.gz`` logs) are scanned decompressed and recompressed only when they leak; any
  other binary file (a NUL in its first 8 KiB, the test git and grep use) that leaks cannot be
  edited safely and is left out of the copy (the caller is told which).
* Path names get the same replacement.
* The copy is bounded (:data:`MAX_BUNDLE_BYTES`) and made of regular files only: a symbolic link
  or a FIFO in a bundle is refused, never followed.
"""

from __future__ import annotations

import gzip
import os
import shutil
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from perfkit.core.incident import parse_incident
from perfkit.errors import BundleError
from perfkit.sources.safeio import RefusedFile, open_regular
from perfkit.sources.safeyaml import YamlError, load_yaml

#: the fields of an incident (perfkit.core.incident.parse_incident); ``id`` is written anew
INCIDENT_KEYS = ("title", "service", "model", "window", "baseline", "slo", "hardware", "scope", "hosts")
#: what a direction or symptom id becomes (a plain word: valid in a label value, a CSV field, YAML)
REDACTED = "redacted"
#: streamed reads: 4 MiB keeps the largest embedded metrics file (11 MB) to three reads
CHUNK = 4 << 20
#: a file with a NUL byte in its first 8 KiB is binary (git's and GNU grep's test)
SNIFF = 8 << 10
#: the largest embedded bundle is 16 MB; 2 GiB of evidence (also decompressed) is not a drill
MAX_BUNDLE_BYTES = 2 << 30


class Reader(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


class Writer(Protocol):
    def write(self, data: bytes, /) -> int: ...


_FOLD = bytes.maketrans(b"_", b"-")


def fold(data: bytes) -> bytes:
    """``data`` as the scan compares it: lower case, ``_`` as ``-`` (same length, same offsets)."""
    return data.lower().translate(_FOLD)


@dataclass(frozen=True)
class Leaks:
    """What must not appear in a drill's evidence: folded needle → its replacement."""

    replace: dict[bytes, bytes]
    longest: int = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "longest", max((len(n) for n in self.replace), default=1))

    @classmethod
    def of(cls, scenarios: Iterable[str], ids: Iterable[str], label: str) -> Leaks:
        """Scenario names become ``label``; the direction/symptom ``ids`` become ``redacted``. A
        scenario name that folds to a direction (``release-regression``) takes the label."""
        table = {fold(i.encode()): REDACTED.encode() for i in ids if i}
        table.update({fold(s.encode()): label.encode() for s in scenarios if s})
        return cls(table)

    def spans(self, buf: bytes, before: int, prev: bytes = b"") -> list[tuple[int, int, bytes]]:
        """Non-overlapping (start, end, replacement) of the leaks starting before ``before``,
        leftmost first, the longest at a tie (``release-regression-prefill`` over its prefix). A
        leak is a whole identifier: no letter or digit right before or after it (``prev``: the byte
        before ``buf``), so ``room`` and ``bloom`` are not the symptom ``oom``."""
        folded = fold(buf)
        found = []
        for needle, repl in self.replace.items():
            i = folded.find(needle)
            while 0 <= i < before:
                j = i + len(needle)
                left = folded[i - 1 : i] if i else prev
                if not (left.isalnum() or folded[j : j + 1].isalnum()):
                    found.append((i, j, repl))
                i = folded.find(needle, i + 1)
        found.sort(key=lambda s: (s[0], s[0] - s[1]))
        out, pos = [], 0
        for s in found:
            if s[0] >= pos:
                out.append(s)
                pos = s[1]
        return out

    def text(self, value: str) -> str:
        """``value`` with its leaks replaced (path parts, short strings)."""
        raw = value.encode("utf-8", "surrogateescape")
        out, pos = [], 0
        for s, e, r in self.spans(raw, len(raw)):
            out += [raw[pos:s], r]
            pos = e
        out.append(raw[pos:])
        return b"".join(out).decode("utf-8", "surrogateescape")


def scrub_stream(src: Reader, dst: Writer | None, leaks: Leaks, *, name: str, limit: int) -> int:
    """Copy ``src`` to ``dst`` (or only scan, when ``dst`` is None) with every leak replaced;
    returns how many were. Reads :data:`CHUNK` at a time, keeping the last ``longest`` bytes
    for the next piece so a leak across two reads is found, and the byte after it seen. Refuses
    more than ``limit`` bytes."""
    keep = leaks.longest  # a leak across two reads, and the byte after it (the boundary test)
    carry, prev, count, total = b"", b"", 0, 0
    while True:
        chunk = src.read(CHUNK)
        total += len(chunk)
        if total > limit:
            raise BundleError(
                f"the evidence would pass the {MAX_BUNDLE_BYTES >> 30} GiB a drill may copy", path=name
            )
        eof = not chunk
        buf = carry + chunk
        safe = len(buf) if eof else max(0, len(buf) - keep)
        pos, out = 0, []
        for s, e, r in leaks.spans(buf, safe, prev):
            out += [buf[pos:s], r]
            pos, count = e, count + 1
        cut = max(pos, safe)
        out.append(buf[pos:cut])
        if dst is not None:
            dst.write(b"".join(out))
        prev = fold(buf[cut - 1 : cut]) if cut else prev
        carry = buf[cut:]
        if eof:
            return count


@dataclass
class Copied:
    """What :func:`copy_neutral` did: files rewritten (relative paths in the copy) and left out."""

    rewritten: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    bytes: int = 0


def copy_neutral(
    src: Path, dst: Path, leaks: Leaks, label: str, *, skip: Iterable[str] = ("answer.yaml",)
) -> Copied:
    """Copy bundle ``src`` into the new folder ``dst`` without what names the answer (see the
    module's docstring). ``skip``: top-level files never copied (the answer key)."""
    skipped = set(skip)
    done = Copied()
    dst.mkdir(parents=True, exist_ok=False)
    for here, dirs, files in os.walk(src, followlinks=False):
        rel_dir = Path(here).relative_to(src)
        for d in sorted(dirs):
            if (Path(here) / d).is_symlink():
                raise BundleError(
                    "a symbolic link: drill evidence is copied as plain files only", path=str(Path(here) / d)
                )
        dirs.sort()
        for f in sorted(files):
            path = Path(here) / f
            rel = rel_dir / f
            if rel_dir == Path(".") and f in skipped:
                continue
            if path.is_symlink():
                raise BundleError(
                    "a symbolic link: drill evidence is copied as plain files only", path=str(path)
                )
            out_rel = Path(*(leaks.text(part) for part in rel.parts))
            target = dst / out_rel
            target.parent.mkdir(parents=True, exist_ok=True)
            limit = MAX_BUNDLE_BYTES - done.bytes
            if rel == Path("incident.yaml"):
                data = neutral_incident(path, label, leaks)
                target.write_bytes(data)
                done.rewritten.append(str(out_rel))
                done.bytes += len(data)
                continue
            kind, n, size = _copy_file(path, target, leaks, limit)
            done.bytes += size
            if kind == "dropped":
                done.dropped.append(str(out_rel))
            elif n or out_rel != rel:
                done.rewritten.append(str(out_rel))
    return done


def _copy_file(path: Path, target: Path, leaks: Leaks, limit: int) -> tuple[str, int, int]:
    """(``copied``/``dropped``, leaks replaced, bytes read) for one file."""
    name = str(path)
    try:
        with open_regular(path, max_bytes=limit) as fh:
            size = os.fstat(fh.fileno()).st_size
            if path.suffix == ".gz":
                with gzip.GzipFile(fileobj=fh) as gz:
                    n = _gz(lambda: scrub_stream(gz, None, leaks, name=name, limit=limit), name)
                fh.seek(0)
                if not n:
                    with target.open("xb") as out:
                        shutil.copyfileobj(fh, out, CHUNK)
                    return "copied", 0, size
                with gzip.GzipFile(fileobj=fh) as gz, gzip.open(target, "xb") as out:
                    return "copied", scrub_stream(gz, out, leaks, name=name, limit=limit), size
            binary = b"\0" in fh.read(SNIFF)
            fh.seek(0)
            if binary:
                if scrub_stream(fh, None, leaks, name=name, limit=limit):
                    return "dropped", 0, size
                fh.seek(0)
                with target.open("xb") as out:
                    shutil.copyfileobj(fh, out, CHUNK)
                return "copied", 0, size
            with target.open("xb") as out:
                return "copied", scrub_stream(fh, out, leaks, name=name, limit=limit), size
    except RefusedFile as exc:
        raise BundleError(exc.reason, path=name) from None
    except OSError as exc:
        raise BundleError(f"cannot copy ({exc.strerror or type(exc).__name__})", path=name) from None


def _gz(scan: Callable[[], int], name: str) -> int:
    try:
        return scan()
    except (gzip.BadGzipFile, EOFError, zlib.error) as exc:
        raise BundleError(f"not a readable gzip file ({exc})", path=name) from None


def neutral_incident(path: Path, label: str, leaks: Leaks) -> bytes:
    """``incident.yaml`` as a real incident's: ``id: INC-<YYYYmmdd of the window start>-<label>``
    and :data:`INCIDENT_KEYS` only, with any leak left in them (a title) replaced."""
    import yaml

    try:
        data = load_yaml(path)
    except FileNotFoundError:
        raise BundleError("no incident.yaml (every bundle needs one)", path=str(path)) from None
    except YamlError as exc:
        raise BundleError(exc.problem, path=str(path), line=exc.line) from None
    incident = parse_incident(data, path=str(path))  # a drill never starts on a broken bundle
    kept = {"id": f"INC-{incident.window.start:%Y%m%d}-{label}"}
    kept.update({k: data[k] for k in INCIDENT_KEYS if k in data})
    text = yaml.safe_dump(kept, sort_keys=False, allow_unicode=True)
    return leaks.text(text).encode("utf-8")


def neutral_runbook(runbook: Path, folder: Path, leaks: Leaks) -> Path:
    """A copy of the runbook ``runbook`` under ``folder`` (same file name) whose cells name no
    scenario (its default ``bundle`` parameter names the demo incident)."""
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / runbook.name
    with open_regular(runbook) as fh, target.open("xb") as out:
        scrub_stream(fh, out, leaks, name=str(runbook), limit=MAX_BUNDLE_BYTES)
    return target
