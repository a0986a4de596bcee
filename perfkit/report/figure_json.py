"""Reading a plotly figure's JSON for :mod:`perfkit.report.static`: value decoding (typed arrays,
ISO dates, rich text, colours, dash styles) and the axes layout (:class:`_Grid`: which plotly
axis is drawn on which matplotlib axes). Nothing here draws.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

_DASHES: dict[str, Any] = {
    "solid": "-",
    "dash": (0, (5, 3)),
    "dot": (0, (1, 2)),
    "dashdot": (0, (5, 2, 1, 2)),
    "longdash": (0, (9, 3)),
    "longdashdot": (0, (9, 2, 1, 2)),
}
_TAG = re.compile(r"<[^>]+>")
_ISO_START = re.compile(r"^\d{4}-\d{2}-\d{2}")


# -- value decoding -------------------------------------------------------------------------------


def decode_array(value: Any) -> list[Any]:
    """A plotly data array as a list: plain lists pass through, typed arrays
    (``{"dtype": "f8", "bdata": "<base64>"}``, what plotly ≥6 emits for numpy) are decoded."""
    if value is None:
        return []
    if isinstance(value, Mapping) and "bdata" in value:
        import numpy as np

        dtype = np.dtype(str(value.get("dtype") or "f8")).newbyteorder("<")
        data = value["bdata"]
        raw = base64.b64decode(data) if isinstance(data, str) else bytes(data)
        return np.frombuffer(raw, dtype=dtype).tolist()
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        return [value]
    return list(value)


def parse_datetime(value: Any) -> datetime | None:
    """An ISO 8601 string (or datetime) as a naive UTC datetime; ``None`` when it is not a date."""
    if isinstance(value, datetime):
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo else value
    if not isinstance(value, str) or not _ISO_START.match(value):
        return None
    text = value.strip().replace(" ", "T", 1)
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed.astimezone(UTC).replace(tzinfo=None) if parsed.tzinfo else parsed


def _as_dict(value: Any) -> dict[str, Any]:
    return dict(value) if isinstance(value, Mapping) else {}


def _text(value: Any) -> str:
    """Plotly rich text as plain matplotlib text (tags dropped, ``$`` not taken as math)."""
    if isinstance(value, Mapping):
        value = value.get("text")
    if value is None:
        return ""
    text = str(value).replace("<br>", "\n").replace("<br/>", "\n").replace("<br />", "\n")
    text = _TAG.sub("", text)
    text = text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
    return text.replace("$", r"\$")


def _color(value: Any, default: Any = None) -> Any:
    """A matplotlib colour from a plotly one (``"red"``, ``"#EF553B"``, ``"rgba(255,0,0,0.2)"``)."""
    from matplotlib.colors import to_rgba

    if not isinstance(value, str) or not value.strip():
        return default
    text = value.strip()
    match = re.match(r"rgba?\(([^)]*)\)", text.replace(" ", ""), re.IGNORECASE)
    try:
        if match:
            parts = [float(p.rstrip("%")) for p in match.group(1).split(",")]
            rgb = [max(0.0, min(1.0, p / 255.0)) for p in parts[:3]]
            alpha = max(0.0, min(1.0, parts[3])) if len(parts) > 3 else 1.0
            return (*rgb, alpha)
        return to_rgba(text.lower() if not text.startswith("#") else text)
    except (ValueError, IndexError):
        return default


# -- axes layout ---------------------------------------------------------------------------------


def _axis_id(layout_key: str) -> str:
    """``xaxis2`` -> ``x2``; ``yaxis`` -> ``y``."""
    return layout_key[0] + layout_key[len("xaxis") :]


def _ref_axis(ref: Any, letter: str) -> tuple[str | None, bool]:
    """``"x2"`` -> (``"x2"``, False); ``"y domain"`` -> (``"y"``, True); ``"paper"`` -> (None, True)."""
    if not isinstance(ref, str) or not ref or ref == "paper":
        return None, True
    name, _, rest = ref.partition(" ")
    if not name.startswith(letter):
        return None, True
    return name, rest == "domain"


@dataclass
class _Grid:
    """Where each plotly axis goes: base y axes get their own matplotlib axes, overlaying ones a twin."""

    xaxes: dict[str, dict[str, Any]]
    yaxes: dict[str, dict[str, Any]]
    base_y: list[str] = field(default_factory=list)
    overlay_y: dict[str, str] = field(default_factory=dict)  # y2 -> y

    @classmethod
    def from_layout(cls, layout: Mapping[str, Any], traces: Sequence[Mapping[str, Any]]) -> _Grid:
        xaxes = {_axis_id(k): _as_dict(v) for k, v in layout.items() if re.fullmatch(r"xaxis\d*", k)}
        yaxes = {_axis_id(k): _as_dict(v) for k, v in layout.items() if re.fullmatch(r"yaxis\d*", k)}
        for trace in traces:
            xaxes.setdefault(str(trace.get("xaxis") or "x"), {})
            yaxes.setdefault(str(trace.get("yaxis") or "y"), {})
        xaxes.setdefault("x", {})
        yaxes.setdefault("y", {})
        grid = cls(xaxes, yaxes)
        for name in sorted(yaxes, key=_axis_order):
            over = yaxes[name].get("overlaying")
            if isinstance(over, str) and over in yaxes and over != name:
                grid.overlay_y[name] = over
            else:
                grid.base_y.append(name)
        # resolve chains (y3 overlaying y2 overlaying y) to the base axis
        for name, over in list(grid.overlay_y.items()):
            seen = {name}
            while over in grid.overlay_y and over not in seen:
                seen.add(over)
                over = grid.overlay_y[over]
            grid.overlay_y[name] = over if over in grid.base_y else grid.base_y[0]
        # a y axis with no traces and nothing on it (make_subplots always writes xaxis/yaxis) is kept
        return grid

    def x_of(self, yname: str) -> str:
        anchor = self.yaxes.get(yname, {}).get("anchor")
        if isinstance(anchor, str) and anchor in self.xaxes:
            return anchor
        candidate = "x" + yname[1:]
        return candidate if candidate in self.xaxes else "x"

    def ydomain(self, yname: str) -> list[float]:
        return _domain(self.yaxes.get(yname, {}).get("domain"))

    def xdomain(self, xname: str) -> list[float]:
        return _domain(self.xaxes.get(xname, {}).get("domain"))


def _axis_order(name: str) -> int:
    digits = name[1:]
    return int(digits) if digits.isdigit() else 1


def _domain(value: Any) -> list[float]:
    if isinstance(value, Sequence) and len(value) == 2:
        try:
            lo, hi = float(value[0]), float(value[1])
        except (TypeError, ValueError):
            return [0.0, 1.0]
        if 0.0 <= lo < hi <= 1.0:
            return [lo, hi]
    return [0.0, 1.0]


def _is_reversed(spec: Mapping[str, Any]) -> bool:
    return spec.get("autorange") == "reversed"


def _paper_to_axes(value: float, domain: list[float]) -> float:
    lo, hi = domain
    return (value - lo) / (hi - lo) if hi > lo else value


def _clip01(value: float) -> float:
    return max(0.0, min(1.0, value))


def _float(value: Any) -> float:
    if value is None or isinstance(value, bool):
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan
