"""Scalars from TensorBoard event files (``events.out.tfevents.*``), read without trusting them.

Format: an event file is a TFRecord stream (``uint64 length``, ``crc32c(length)``, ``length`` bytes of a
serialized ``tensorflow.Event`` protobuf, ``crc32c(data)``). The first record holds ``file_version:
"brain.Event:2"``; later ones carry ``wall_time`` (float seconds since the epoch), ``step`` and a
``summary`` of tagged values. A scalar is written one of two ways, and both are read:

* TF1 style, ``summary.value[].simple_value`` (float): ``tf.compat.v1.summary.scalar``, PyTorch's
  ``torch.utils.tensorboard.SummaryWriter.add_scalar`` (so Megatron-LM's ``iteration-time``, ``lm loss``
  ..., and HF Trainer's ``train/loss`` ... written through it), tensorboardX;
* TF2 style, ``summary.value[].tensor``: a float tensor of scalar shape, with ``plugin_name: "scalars"``
  in the metadata of the tag's first value (``tf.summary.scalar``, ``tensorboard.summary.Writer``).
  A float scalar tensor whose tag an earlier value declared for another plugin is not a scalar series
  and is skipped.

Sources: an event file, or a folder searched recursively (symlinked folders are not followed) for
files whose name contains ``tfevents``, as TensorBoard's ``--logdir`` does; each file's ``run`` is its
folder relative to that folder (``""`` for files directly in it, as for a single file given).

Records are read with TensorBoard's own loader
(``tensorboard.backend.event_processing.event_file_loader.RawEventFileLoader``, the pure-Python reader
TensorBoard uses when TensorFlow is absent, or TensorFlow's when present), which checks both CRCs and
stops at the first damaged or truncated record, so a file cut short by a crash yields every event
before the damage. Each record is then parsed on its own; one that passes its CRCs but is not a valid
``Event`` is skipped. ``tensorboard`` is imported on first use only (``pip install tensorboard``).

Hostile input:

* a non-empty file of which not even the first record can be read (random bytes, a text file named
  ``*.tfevents*``) raises :class:`~perfkit.errors.BundleError` naming the file; an empty file (a
  writer that had not flushed yet) contributes nothing;
* FIFOs, devices, sockets and files that resolve outside the folder (symlinks) raise BundleError
  rather than being opened;
* a record header claiming more bytes than the file holds is refused before the loader reads it
  (the pure-Python loader would otherwise ask for that many bytes);
* at most ``max_files`` files are read: when a folder holds more, the ``max_files`` newest by file name
  (writers put the creation time in it: ``events.out.tfevents.<unix time>.<host>...``), silently;
* at most ``max_points`` points are kept: reading stops, silently, once that many are held (the
  frame then holds the first ``max_points`` points in file order, files in (run, name) order);
* values are kept as written, NaN and infinities included (a NaN loss is evidence); a ``wall_time``
  that is not finite or is outside years 1..9999 gives a null ``ts``.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from perfkit.errors import BundleError
from perfkit.sources.safeio import not_regular, outside

#: columns and dtypes of :func:`read_scalars`' frame
SCHEMA: dict[str, Any] = {
    "ts": pl.Datetime("ms", "UTC"),
    "step": pl.Int64,
    "tag": pl.Utf8,
    "value": pl.Float64,
    "run": pl.Utf8,
}

# Milliseconds since the epoch of 0001-01-01 and 10000-01-01: the range polars' Datetime("ms") prints.
_MIN_MS = -62_135_596_800_000
_MAX_MS = 253_402_300_800_000
# TensorFlow DataType enum values of the float types (types.proto): DT_FLOAT, DT_DOUBLE, DT_BFLOAT16, DT_HALF.
_FLOAT_DTYPES = frozenset({1, 2, 14, 19})
_SCALARS_PLUGIN = "scalars"


def read_scalars(
    path: str | os.PathLike[str], *, max_files: int = 64, max_points: int = 2_000_000
) -> pl.DataFrame:
    """Every scalar point in the event file ``path``, or in the event files under the folder ``path``.

    Returns a frame with ``ts`` (Datetime ms UTC, the event's wall time), ``step`` (Int64), ``tag``,
    ``value`` (Float64, NaN/inf kept) and ``run`` (the file's folder relative to ``path``; ``""`` when
    ``path`` is a file), sorted by run, tag, step (ties keep file order). See the module docstring for
    the limits: at most ``max_files`` files (the newest by name) and ``max_points`` points (the first
    ones read; the rest are dropped without notice).

    Raises :class:`~perfkit.errors.BundleError` when ``path`` does not exist, a folder holds no event
    file, or a file is not an event file (or not a regular file, or a link out of the folder).
    """
    if max_files < 1:
        raise ValueError(f"max_files must be at least 1, got {max_files}")
    if max_points < 0:
        raise ValueError(f"max_points must be non-negative, got {max_points}")
    root = Path(path)
    try:
        st = root.stat()
    except OSError as err:
        raise BundleError(f"cannot read TensorBoard events: {err.strerror or err}", path=str(root)) from err
    is_dir = stat.S_ISDIR(st.st_mode)
    files = _event_files(root, max_files) if is_dir else [(root, "")]

    columns: dict[str, list[Any]] = {name: [] for name in SCHEMA}
    budget = max_points
    for file, run in files:
        if budget <= 0:
            break
        for ts, step, tag, value in _scalars(file, root if is_dir else None, budget):
            columns["ts"].append(ts)
            columns["step"].append(step)
            columns["tag"].append(tag)
            columns["value"].append(value)
            columns["run"].append(run)
            budget -= 1
    frame = pl.DataFrame(columns, schema=SCHEMA)
    return frame.sort(["run", "tag", "step"], maintain_order=True)


def _event_files(root: Path, max_files: int) -> list[tuple[Path, str]]:
    """(file, run) of the event files under ``root``: the ``max_files`` newest by name, in (run, name) order."""
    found: list[tuple[Path, str]] = []
    for folder, dirs, names in os.walk(root):  # followlinks=False: a symlinked folder is not entered
        dirs.sort()
        rel = Path(folder).relative_to(root).as_posix()
        run = "" if rel == "." else rel
        found.extend((Path(folder) / name, run) for name in names if "tfevents" in name)
    if not found:
        raise BundleError("no TensorBoard event file (*tfevents*) in this folder", path=str(root))
    if len(found) > max_files:
        found = sorted(found, key=lambda fr: (fr[0].name, fr[1]))[-max_files:]
    return sorted(found, key=lambda fr: (fr[1], fr[0].name))


def _check_file(file: Path, root: Path | None) -> int:
    """The size of ``file``, a regular file inside ``root`` (when given); else BundleError."""
    if root is not None and (real := outside(file, root)) is not None:
        raise BundleError(f"event file resolves outside {root} (to {real}); not read", path=str(file))
    try:
        st = os.stat(file)
    except OSError as err:
        raise BundleError(f"cannot read event file: {err.strerror or err}", path=str(file)) from err
    if not stat.S_ISREG(st.st_mode):
        raise BundleError(f"not an event file: {not_regular(st.st_mode)}", path=str(file))
    return st.st_size


def _records(file: Path, size: int) -> Iterator[bytes]:
    """The serialized records of ``file`` up to the first damaged one, via TensorBoard's loader.

    Before each record, its 8-byte length is compared with what is left of the file (a byte count
    only, the loader still does all parsing and checking): a length the file cannot hold is damage,
    and stops the file there instead of letting the loader ask for that many bytes.
    """
    try:
        from tensorboard.backend.event_processing.event_file_loader import (
            RawEventFileLoader,
        )
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise BundleError(
            "reading TensorBoard event files needs the tensorboard package (pip install tensorboard)",
            path=str(file),
        ) from err

    loader = RawEventFileLoader(os.fspath(file))
    offset = 0
    with open(file, "rb") as fh:
        for record in _guarded(loader.Load(), fh, size):
            offset += 16 + len(record)
            fh.seek(offset)
            yield record


def _guarded(records: Iterator[bytes], fh: Any, size: int) -> Iterator[bytes]:
    """``records``, stopped where the next record's declared length exceeds the rest of the file."""
    while True:
        start = fh.tell()
        head = fh.read(8)
        if len(head) == 8 and int.from_bytes(head, "little") > size - start - 16:
            return
        try:
            record = next(records)
        except StopIteration:
            return
        yield record


def _scalars(file: Path, root: Path | None, limit: int) -> Iterator[tuple[int | None, int, str, float]]:
    """(ts ms, step, tag, value) of the scalars in ``file``, at most ``limit`` of them."""
    size = _check_file(file, root)
    if size == 0 or limit <= 0:
        return
    from tensorboard.compat.proto import event_pb2
    from tensorboard.util import tensor_util

    plugins: dict[str, str] = {}  # tag -> plugin_name its first metadata named
    n_records = 0
    n = 0
    for record in _records(file, size):
        n_records += 1
        try:
            event = event_pb2.Event.FromString(record)
        except Exception:  # google.protobuf.message.DecodeError, RecursionError: a bad record
            continue
        if not event.HasField("summary"):
            continue
        ts = _ms(event.wall_time)
        for v in event.summary.value:
            if v.HasField("metadata") and v.metadata.plugin_data.plugin_name and v.tag not in plugins:
                plugins[v.tag] = v.metadata.plugin_data.plugin_name
            kind = v.WhichOneof("value")
            if kind == "simple_value":
                value = float(v.simple_value)
            elif kind == "tensor" and _is_float_scalar(v.tensor):
                if plugins.get(v.tag, _SCALARS_PLUGIN) != _SCALARS_PLUGIN:
                    continue
                try:
                    value = float(tensor_util.make_ndarray(v.tensor).item())
                except Exception:  # inconsistent tensor (content of the wrong size ...): not a point
                    continue
            else:
                continue
            yield ts, event.step, v.tag, value
            n += 1
            if n >= limit:
                return
    if n_records == 0:
        raise BundleError(
            "not a TensorBoard event file: its first record is unreadable (bad length or checksum)",
            path=str(file),
        )


def _is_float_scalar(tensor: Any) -> bool:
    """Whether a TensorProto is a float scalar (shape ``[]``, or ``[1]`` as some writers emit)."""
    if tensor.dtype not in _FLOAT_DTYPES or tensor.tensor_shape.unknown_rank:
        return False
    dims = [d.size for d in tensor.tensor_shape.dim]
    return dims == [] or dims == [1]


def _ms(wall_time: float) -> int | None:
    """``wall_time`` (seconds) as integer milliseconds, or None when it is not a representable time."""
    if not math.isfinite(wall_time):
        return None
    ms = round(wall_time * 1000.0)
    return ms if _MIN_MS <= ms < _MAX_MS else None
