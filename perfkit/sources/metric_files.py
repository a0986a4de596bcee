"""What a bundle's ``metrics/`` holds, told by content, and all of it read into one store.

Four formats, whatever the file is called (the first bytes decide, :func:`sniff`):

* OpenMetrics or Prometheus text with timestamps (``*.om``, ``promtool tsdb dump-openmetrics``'s
  output): :mod:`perfkit.sources.openmetrics`. A ``*.om`` file is read as OpenMetrics unless it is
  plainly one of the other formats, so a broken one is an error naming the line, as always;
* ``promtool tsdb dump`` text and Prometheus query API JSON: :mod:`perfkit.sources.promdump`;
* a TSDB snapshot, a folder of block folders (or block folders directly in ``metrics/``):
  :mod:`perfkit.sources.tsdb_snapshot`.

Every file of ``metrics/`` is read or named in ``missing``: one of no format perfkit reads with what
it looks like (``metrics/x.csv not read: looks like CSV; ...``), a folder that holds no TSDB
blocks, and (as for every bundle file) a symlink out of the bundle, a FIFO or a device, never
opened. All files go through one :class:`~perfkit.sources.openmetrics.Reader`, so the same series
in two files (or two formats) is one series, the later file's value winning a shared timestamp.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from perfkit.core.frames import MetricStore
from perfkit.sources.openmetrics import MAX_FILE_BYTES, Families, Reader, Skip
from perfkit.sources.promdump import infer_type, read_api_json, read_dump
from perfkit.sources.safeio import open_regular, outside, refusal
from perfkit.sources.series_store import Select
from perfkit.sources.tsdb_snapshot import blocks_in, is_block, read_tsdb

OPENMETRICS, DUMP, API_JSON, TSDB = "OpenMetrics", "promtool tsdb dump", "query API JSON", "TSDB snapshot"
READ = "perfkit reads OpenMetrics, promtool tsdb dump, query_range JSON, a TSDB snapshot"
SNIFF_BYTES = 64 * 2**10
"""Bytes looked at to tell a file's format: a few lines of any of them."""

_LABELS = r"\{(?:[^\"}]|\"(?:[^\"\\]|\\.)*\")*\}"
_VALUE = r"[-+]?(?:[0-9]+\.?[0-9]*(?:[eE][-+]?[0-9]+)?|\.[0-9]+(?:[eE][-+]?[0-9]+)?|Inf|inf|NaN|nan)"
_OM_SAMPLE = re.compile(
    rf"[a-zA-Z_:][a-zA-Z0-9_:]*(?:{_LABELS})?[ \t]+{_VALUE}(?P<ts>[ \t]+{_VALUE})?[ \t]*(?:#.*)?"
)
_OM_META = re.compile(r"#\s+(?:TYPE|HELP|UNIT)\s+[a-zA-Z_:][a-zA-Z0-9_:]*(?:\s.*)?|# EOF")
_DUMP_START = re.compile(r'\{\s*(?:[a-zA-Z_][a-zA-Z0-9_]*|"(?:[^"\\]|\\.)*")\s*=\s*"')
_JSON_KEY = re.compile(r'\s*[\[{]\s*(?:\{\s*)?"((?:[^"\\]|\\.)*)"\s*:')
_MAGIC = (
    (b"\x1f\x8b", "gzip-compressed data (decompress it into metrics/)"),
    (b"PAR1", "Parquet"),
    (b"PK\x03\x04", "a ZIP archive"),
    (b"BZh", "bzip2-compressed data"),
    (b"\xfd7zXZ\x00", "xz-compressed data"),
    (b"\x28\xb5\x2f\xfd", "zstd-compressed data"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"\x89HDF", "HDF5"),
    (b"ARROW1", "Arrow"),
    (b"%PDF", "a PDF"),
    (b"\x89PNG", "a PNG image"),
)


@dataclass(frozen=True)
class Entry:
    """One thing in ``metrics/``: a file, or a TSDB (``blocks``), and its format (None: not read)."""

    path: Path
    format: str | None
    looks: str = ""  # what a file not read looks like
    blocks: tuple[Path, ...] = ()


def sniff(path: Path) -> tuple[str | None, str]:
    """(format, what it looks like) of the regular file ``path`` from its first bytes: the format
    perfkit reads it as, or None and what it looks like instead."""
    try:
        with open_regular(path) as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError as exc:
        return None, f"cannot be read ({exc.strerror or type(exc).__name__})"
    if not head.strip():
        return None, "it is empty"
    for magic, what in _MAGIC:
        if head.startswith(magic):
            return None, f"looks like {what}"
    if b"\x00" in head:
        return None, "looks like binary data"
    text = head.decode("utf-8", "replace")  # a stray byte is the reader's to name, with its line
    if text.count("\ufffd") > len(text) // 10:
        return None, "looks like binary data (not UTF-8 text)"
    cut = len(head) == SNIFF_BYTES and not head.endswith(b"\n")  # the last line read is not whole
    return _sniff_text(text.lstrip("\ufeff"), cut=cut)


def _sniff_text(text: str, *, cut: bool = False) -> tuple[str | None, str]:
    lines = [line.strip() for line in (cut and text.splitlines()[:-1]) or text.splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return None, "it is empty"
    first = lines[0]
    if first[0] in "[{" and (key := _JSON_KEY.match(text)) is not None:
        head = text[:4096]
        if any(f'"{k}"' in head for k in ("status", "resultType", "metric")):
            return API_JSON, ""
        if key.group(1) == "__name__" or '"__name__"' in first:
            return None, "looks like promtool tsdb dump --format=seriesjson (series without samples)"
        return None, "looks like JSON, not a Prometheus query API answer"
    if _DUMP_START.match(first):  # a label block first: the dump's reader names a malformed line
        return DUMP, ""
    samples = [line for line in lines if not line.startswith("#")]
    if samples and (sample := _OM_SAMPLE.fullmatch(samples[0])):
        if sample.group("ts") is None:
            return (
                None,
                "looks like one scrape without timestamps (bundle metrics need a time on each sample)",
            )
        return OPENMETRICS, ""
    if not samples and any(map(_OM_META.fullmatch, lines)):
        return OPENMETRICS, ""
    return None, _looks(first)


def _looks(first: str) -> str:
    if first.startswith("<"):
        return "looks like XML or HTML"
    if first == "---" or re.match(r"[\w.-]+:(\s|$)", first):
        return "looks like YAML"
    if first.count(",") and not first.startswith("#"):
        return "looks like CSV"
    if "\t" in first:
        return "looks like tab-separated values"
    return "looks like text of no format perfkit reads"


def survey(root: Path, missing: list[str]) -> list[Entry]:
    """What ``metrics/`` of the bundle ``root`` holds, to read: refusals and things of no format
    perfkit reads go to ``missing`` (``"metrics: <path> <why>"``)."""
    where = root / "metrics"
    if not where.is_dir():
        return []
    outside_to = outside(where, root)
    if outside_to is not None:
        missing.append(f"metrics: metrics/ resolves outside the bundle (to {outside_to}), not read")
        return []
    entries: list[Entry] = []
    loose: list[Path] = []  # block folders directly in metrics/ (a snapshot's content)
    for p in sorted(where.iterdir()):
        rel = p.relative_to(root).as_posix()
        if p.is_dir():
            beyond = outside(p, root)
            if beyond is not None:
                missing.append(f"metrics: {rel}/ resolves outside the bundle (to {beyond}), not read")
            elif is_block(p):
                loose.append(p)
            elif blocks := blocks_in(p):
                entries.append(Entry(p, TSDB, blocks=tuple(blocks)))
                for other in sorted(set(p.iterdir()) - set(blocks)):
                    missing.append(
                        f"metrics: {rel}/{other.name} not read: no TSDB block (a snapshot holds blocks)"
                    )
            else:
                missing.append(f"metrics: {rel}/ not read: a folder holding no TSDB blocks; {READ}")
            continue
        refused = refusal(p, root)
        if refused is not None:
            missing.append(f"metrics: {rel} {refused}")
            continue
        form, looks = sniff(p)
        if p.suffix == ".om" and form not in (DUMP, API_JSON):
            form = OPENMETRICS  # the OpenMetrics reader says what is wrong with it, and where
        if form is None:
            missing.append(f"metrics: {rel} not read: {looks}; {READ}")
        else:
            entries.append(Entry(p, form, looks))
    if loose:
        entries.append(Entry(where, TSDB, blocks=tuple(loose)))
    return entries


def read_metrics(
    entries: list[Entry],
    root: Path,
    *,
    families: Families = None,
    skip: Skip | None = None,
    select: Select | None = None,
) -> tuple[MetricStore, list[str], list[str]]:
    """Read ``entries`` (of :func:`survey`) into one store, narrowed as
    :func:`perfkit.sources.openmetrics.read_files` narrows; the entries read (paths in the bundle);
    and the notes for ``missing`` (what was left out of a file, a snapshot not read and why), each
    ``"metrics: ..."``.

    Raises :class:`~perfkit.errors.BundleError` naming the file (and line, or the JSON part) for a
    malformed file, as the OpenMetrics reader does.
    """
    reader = Reader(families, skip)
    notes: list[str] = []
    read: list[str] = []
    for entry in sorted(entries, key=lambda e: e.path):
        rel = entry.path.relative_to(root).as_posix()
        ok = True
        if entry.format == OPENMETRICS:
            reader.read_path(entry.path, None, MAX_FILE_BYTES, infer=infer_type)
        elif entry.format == DUMP:
            notes.extend(f"{rel}: {note}" for note in read_dump(reader, entry.path, MAX_FILE_BYTES))
        elif entry.format == API_JSON:
            notes.extend(read_api_json(reader, entry.path, rel))
        elif entry.format == TSDB:
            ok, said = read_tsdb(reader, list(entry.blocks), root, f"{rel}/")
            notes.extend(said)
        if ok:
            read.append(rel)
    return reader.finish(select), read, [f"metrics: {note}" for note in notes]
