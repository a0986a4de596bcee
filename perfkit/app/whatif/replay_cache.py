"""Calibrated reproductions kept on disk (``$PERFKIT_CACHE/replays`` or ``~/.cache/perfkit/replays``).

A calibrated reproduction replays a bundle's windows a dozen times or more (seconds to half a
minute). Its result depends only on the bundle's files, the engine it starts from, the seed and the
code that replays; so the on-call engineer who re-runs the runbook (another log added, a section
re-read) or sweeps a what-if after it waits once. The key hashes each of those: every file of the
bundle (path, size, modification time), the engine's ``repr``, the seed, and the source text of the
modules that decide the numbers (an edited simulator never serves an old result). Entries are
written whole (a temporary file renamed) and read within bounds; a damaged or foreign entry is
ignored and replayed again. At most :data:`MAX_ENTRIES` are kept, the oldest removed first.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

MAX_ENTRIES = 64
"""Entries kept (each a few kB)."""
MAX_BYTES = 4 * 2**20
"""Largest entry read back (a reproduction is ~20 kB; more is not ours)."""
_CODE = (
    "app/whatif/reproduce.py",
    "app/whatif/calibrate.py",
    "app/whatif/remedy.py",
    "app/whatif/remedy_slos.py",
    "app/whatif/replay.py",
    "lab/servesim/core.py",
    "lab/servesim/roofline.py",
    "lab/servesim/config.py",
    "lab/servesim/offline.py",
    "loadgen/shapes.py",
    "loadgen/lengths.py",
    "loadgen/bundle_lengths.py",
    "sources/engine_lines.py",
)


def cache_dir() -> Path:
    base = os.environ.get("PERFKIT_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "perfkit") / "replays"


def _code_digest() -> str:
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for rel in _CODE:
        h.update((root / rel).read_bytes())
    return h.hexdigest()


def key(bundle: str | Path, cfg_repr: str, seed: int, variant: str) -> str:
    """The entry's name for these inputs (module docstring)."""
    root = Path(bundle).resolve()
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        st = path.stat()
        h.update(f"{path.relative_to(root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    h.update(f"{root}\0{cfg_repr}\0{seed}\0{variant}\0{_code_digest()}".encode())
    return h.hexdigest()[:40]


def load(name: str) -> dict[str, Any] | None:
    """The entry ``name``, or None when there is none or it cannot be read as one."""
    from perfkit.sources.safejson import UnsafeJson, load_json_bounded

    path = cache_dir() / f"{name}.json"
    try:
        if path.is_symlink() or not path.is_file() or path.stat().st_size > MAX_BYTES:
            return None
        doc = load_json_bounded(path.read_bytes(), source=str(path))
    except (OSError, UnsafeJson):
        return None
    return doc if isinstance(doc, dict) and doc.get("key") == name else None


def store(name: str, doc: dict[str, Any]) -> None:
    """Write the entry ``name`` (best effort: a cache that cannot be written only costs time)."""
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".json")
        with os.fdopen(fd, "w") as fh:
            json.dump({**doc, "key": name}, fh, allow_nan=False)
        os.replace(tmp, folder / f"{name}.json")
        entries = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
        for old in entries[: max(0, len(entries) - MAX_ENTRIES)]:
            old.unlink(missing_ok=True)
    except (OSError, ValueError):
        return
