"""Runbook parameters are plain data: what reaches papermill is str, int, float, bool, None, and
lists or dicts of them. Everything else is refused before a kernel starts.

papermill writes each parameter into the injected cell as Python source. Strings are quoted with
``repr``, but values of other types are written with their own ``str``: a ``bytes`` value from a
YAML ``!!binary`` tag, or any object whose text is code, would run in the kernel. So nothing but
the plain types passes; dates and times become ISO 8601 strings (what the runbooks parse).

>>> plain_parameters({"start": "2026-11-30T02:00:00Z", "slo": {"ttft_p95_s": 2}}, source="-p")
{'start': '2026-11-30T02:00:00Z', 'slo': {'ttft_p95_s': 2}}
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from datetime import date, datetime, time
from typing import Any

from perfkit.errors import ConfigError

#: Bounds on one parameter set: a runbook's parameters are a few dozen short values.
MAX_DEPTH = 8
MAX_ITEMS = 10_000
MAX_TEXT = 1 << 20  # 1 MiB in one string
MAX_INT = 2**63 - 1


def parse_parameter(text: str) -> tuple[str, Any]:
    """``name=value`` → (name, value); numbers and booleans are converted, the rest stays text."""
    if "=" not in text:
        raise ConfigError(f"parameter {text!r} must be name=value")
    name, raw = text.split("=", 1)
    name = name.strip()
    if not name.isidentifier():
        raise ConfigError(f"parameter name {name!r} is not an identifier")
    value: Any = raw
    if raw.lower() in ("true", "false"):
        value = raw.lower() == "true"
    else:
        for cast in (int, float):
            try:
                value = cast(raw)
                break
            except ValueError:
                continue
        if isinstance(value, float) and not math.isfinite(value):
            value = raw  # "nan", "inf": keep the text, papermill would write a bare name
    return name, value


def plain_parameters(
    params: Mapping[str, Any], *, source: str, where: Callable[[tuple[Any, ...]], str] | None = None
) -> dict[str, Any]:
    """A copy of ``params`` holding only plain data, or :class:`ConfigError` naming the first value
    that is not (``source``, and the line ``where(path)`` gives for its key path when known).

    Dates and times become ISO 8601 text; non-finite floats, bytes, sets and any other type are refused.
    """
    count = 0

    def fail(path: tuple[Any, ...], why: str) -> ConfigError:
        loc = where(path) if where else source
        shown = ".".join(str(p) for p in path) or "parameters"
        return ConfigError(f"{loc}: parameter {shown}: {why}")

    def walk(value: Any, path: tuple[Any, ...]) -> Any:
        nonlocal count
        count += 1
        if count > MAX_ITEMS:
            raise fail(path, f"more than {MAX_ITEMS} values")
        if len(path) > MAX_DEPTH:
            raise fail(path, f"nested deeper than {MAX_DEPTH} levels")
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, int):
            if abs(value) > MAX_INT:
                raise fail(path, "integer out of range (beyond 64 bits)")
            return value
        if isinstance(value, float):
            if not math.isfinite(value):
                raise fail(path, f"{value!r} is not a finite number")
            return value
        if isinstance(value, str):
            if len(value) > MAX_TEXT:
                raise fail(path, f"text longer than {MAX_TEXT} characters")
            return value
        if isinstance(value, datetime | date | time):
            return value.isoformat().replace("+00:00", "Z")
        if isinstance(value, list | tuple):
            return [walk(v, (*path, i)) for i, v in enumerate(value)]
        if isinstance(value, Mapping):
            out: dict[str, Any] = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    raise fail((*path, k), f"keys must be text, not {type(k).__name__}")
                out[k] = walk(v, (*path, k))
            return out
        raise fail(
            path,
            f"a {type(value).__name__} value is not allowed: only text, numbers, booleans, null, "
            "lists and mappings reach a runbook",
        )

    out: dict[str, Any] = {}
    for name, value in params.items():
        if not isinstance(name, str) or not name.isidentifier():
            raise fail((name,), "the name must be a Python identifier")
        out[name] = walk(value, (name,))
    return out
