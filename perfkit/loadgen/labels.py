"""Labels of a stored result (``version=``, ``config=``, ``hardware=`` and free ``k=v``): read from
the command line, checked, and the effective set of a document (the run's own under the store's).

Labels end up in file listings, tables and the gate's comparability (``hardware``), so they are
bounded: at most 32, keys ``[A-Za-z_][A-Za-z0-9_.-]*`` up to 64 characters, values 1-200 printable
characters without a path separator.

>>> parse_labels(["version=1.4.2", "hardware=h200"])
{'version': '1.4.2', 'hardware': 'h200'}
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from perfkit.errors import ConfigError

MAX_LABELS = 32
MAX_LABEL_KEY = 64
MAX_LABEL_VALUE = 200
KNOWN_LABELS = ("version", "config", "hardware")

_LABEL_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def parse_labels(items: Iterable[str]) -> dict[str, str]:
    """``["k=v", ...]`` (command-line ``--label`` values) as a validated dict.

    Raises :class:`~perfkit.errors.ConfigError` naming the bad label.
    """
    labels: dict[str, str] = {}
    for item in items:
        key, sep, value = str(item).partition("=")
        if not sep:
            raise ConfigError(f"--label {_short(item)!r}: expected key=value (e.g. version=1.4.2)")
        key = key.strip()
        if key in labels and labels[key] != value:
            raise ConfigError(f"--label {key}: given twice ({_short(labels[key])!r} and {_short(value)!r})")
        labels[key] = value
    return validate_labels(labels)


def validate_labels(labels: Mapping[str, Any], *, where: str = "--label") -> dict[str, str]:
    """``labels`` checked: at most 32; keys ``[A-Za-z_][A-Za-z0-9_.-]*`` up to 64 characters; values
    1-200 printable characters without a path separator (they end up in file listings and tables)."""
    if not isinstance(labels, Mapping):
        raise ConfigError(f"{where}: labels must be a mapping of key to value")
    if len(labels) > MAX_LABELS:
        raise ConfigError(f"{where}: {len(labels)} labels, more than {MAX_LABELS}")
    out: dict[str, str] = {}
    for key, value in labels.items():
        if not isinstance(key, str) or not key or len(key) > MAX_LABEL_KEY or not _LABEL_KEY.match(key):
            raise ConfigError(
                f"{where} {_short(key)!r}: a label key is a letter or _ then letters, digits, '_', '.', '-' "
                f"(at most {MAX_LABEL_KEY})"
            )
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise ConfigError(f"{where} {key}: the value must be text")
        text = str(value)
        if not text or len(text) > MAX_LABEL_VALUE:
            raise ConfigError(f"{where} {key}: the value must be 1 to {MAX_LABEL_VALUE} characters")
        if "/" in text or "\\" in text or not text.isprintable():
            raise ConfigError(
                f"{where} {key}: the value may not hold a path separator or a control character"
            )
        out[key] = text
    return out


def effective_labels(doc: Mapping[str, Any]) -> dict[str, str]:
    """The run's ``meta.labels`` with the store's ``baseline.labels`` over them (only text values)."""
    labels: dict[str, str] = {}
    for source in (_dict(doc.get("meta")).get("labels"), _dict(doc.get("baseline")).get("labels")):
        for key, value in _dict(source).items():
            if isinstance(key, str) and isinstance(value, str | int | float) and not isinstance(value, bool):
                labels[key] = str(value)
    return labels


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _short(value: Any, limit: int = 60) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
