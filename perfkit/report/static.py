"""Static PNGs of perfkit's plotly figures, drawn with matplotlib (no browser, no kaleido).

The Markdown postmortem needs images that render anywhere; kaleido needs Chrome, so this
module redraws the figure JSON (``fig.to_plotly_json()``, as stored in a finding) with
matplotlib's Agg backend::

    figure_to_png(finding.figure, Path("figures/changes.png"))

It covers what perfkit figures use: ``scatter`` (lines/markers, dash, colour, fill to zero),
``bar`` (vertical, horizontal, grouped/stacked), a secondary y axis, stacked subplots from
``make_subplots``, shaded windows (``add_vrect``), deploy markers (``add_vline``), SLO lines
(``add_hline``), annotations, titles and legends. Dates are drawn in UTC. Trace types it cannot
draw are skipped and named in the image title, never raised.

Reading the figure JSON (value decoding, the axes layout) lives in :mod:`perfkit.report.figure_json`,
shapes and annotations in :mod:`perfkit.report.static_overlays`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

from perfkit.report.figure_json import (
    _DASHES,
    _as_dict,
    _color,
    _float,
    _Grid,
    _is_reversed,
    _text,
    decode_array,
    parse_datetime,
)
from perfkit.report.static_overlays import _Overlays

WIDTH_IN = 10.0
HEIGHT_IN = 4.0
DPI = 100

#: plotly's default colourway, used when a trace has no colour and the layout names none.
PLOTLY_COLORWAY = (
    "#636efa",
    "#EF553B",
    "#00cc96",
    "#ab63fa",
    "#FFA15A",
    "#19d3f3",
    "#FF6692",
    "#B6E880",
    "#FF97FF",
    "#FECB52",
)
_SYMBOLS = {"circle": "o", "square": "s", "diamond": "D", "cross": "P", "x": "X", "triangle-up": "^"}
_FIG_LEFT, _FIG_RIGHT, _FIG_BOTTOM, _FIG_TOP = 0.08, 0.97, 0.14, 0.87


def figure_to_png(
    figure: Mapping[str, Any],
    path: str | Path,
    *,
    width_in: float = WIDTH_IN,
    height_in: float | None = None,
    dpi: int = DPI,
) -> Path:
    """Draw a plotly figure dict as a PNG at ``path`` and return the path.

    ``height_in`` defaults to 4 in (more for stacked subplots, or the layout's own height at 100 px
    per inch). Never raises on content it cannot draw: such traces are named in the title.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    layout = _as_dict(figure.get("layout"))
    traces = [t for t in (figure.get("data") or []) if isinstance(t, Mapping)]
    grid = _Grid.from_layout(layout, traces)
    fig = Figure(figsize=(width_in, height_in or _height_in(layout, grid)), dpi=dpi)
    FigureCanvasAgg(fig)
    _Drawing(fig, layout, traces, grid).draw()
    fig.savefig(path, format="png", dpi=dpi, facecolor="white")
    return path


def _height_in(layout: Mapping[str, Any], grid: _Grid) -> float:
    height = layout.get("height")
    if isinstance(height, int | float) and height > 0:
        return min(max(float(height) / 100.0, 3.0), 12.0)
    rows = len({tuple(grid.ydomain(y)) for y in grid.base_y})
    return max(HEIGHT_IN, 2.2 * rows)


# -- drawing -------------------------------------------------------------------------------------


class _Drawing(_Overlays):
    """One figure's matplotlib rendering (all state for a single call of :func:`figure_to_png`)."""

    def __init__(self, fig: Any, layout: Mapping[str, Any], traces: list[Mapping[str, Any]], grid: _Grid):
        self.fig = fig
        self.layout = layout
        self.traces = traces
        self.grid = grid
        self.axes: dict[str, Any] = {}  # plotly y axis -> matplotlib axes
        self.xkind: dict[str, str] = {}  # plotly x axis -> "date" | "category" | "linear"
        self.ykind: dict[str, str] = {}
        self.categories: dict[str, list[Any]] = {}  # plotly axis -> category order
        self.skipped: dict[str, int] = {}
        self.stacks: dict[
            int, dict[tuple[bool, float], float]
        ] = {}  # id(axes) -> bar tops, for barmode stack
        self.colorway = self._colorway()
        self.plot_area = (_FIG_LEFT, _FIG_BOTTOM, _FIG_RIGHT - _FIG_LEFT, _FIG_TOP - _FIG_BOTTOM)

    # paper coordinates -> figure fraction
    def paper_to_fig(self, x: float, y: float) -> tuple[float, float]:
        left, bottom, width, height = self.plot_area
        return left + x * width, bottom + y * height

    def draw(self) -> None:
        self._classify_axes()
        self._size_plot_area()
        self._make_axes()
        bar_groups = self._bar_groups()
        for index, trace in enumerate(self.traces):
            self._draw_trace(index, trace, bar_groups)
        for shape in self.layout.get("shapes") or []:
            if isinstance(shape, Mapping):
                self._draw_shape(shape)
        for note in self.layout.get("annotations") or []:
            if isinstance(note, Mapping):
                self._draw_annotation(note)
        self._finish_axes()
        self._title()

    def _colorway(self) -> list[Any]:
        template = _as_dict(_as_dict(self.layout.get("template")).get("layout"))
        way = self.layout.get("colorway") or template.get("colorway") or PLOTLY_COLORWAY
        colors = [_color(c) for c in way if _color(c) is not None]
        return colors or [_color(c) for c in PLOTLY_COLORWAY]

    # axes kinds: decide from layout type, else from the values traces put on the axis
    def _classify_axes(self) -> None:
        values: dict[tuple[str, str], list[Any]] = {}
        for trace in self.traces:
            xname, yname = str(trace.get("xaxis") or "x"), str(trace.get("yaxis") or "y")
            values.setdefault(("x", xname), []).extend(decode_array(trace.get("x"))[:50])
            values.setdefault(("y", yname), []).extend(decode_array(trace.get("y"))[:50])
        for letter, axes, kinds in (("x", self.grid.xaxes, self.xkind), ("y", self.grid.yaxes, self.ykind)):
            for name, spec in axes.items():
                declared = spec.get("type")
                sample = [v for v in values.get((letter, name), []) if v is not None]
                if declared in ("date", "category", "linear", "log"):
                    kinds[name] = str(declared)
                elif sample and isinstance(sample[0], str | datetime):
                    kinds[name] = "date" if parse_datetime(sample[0]) is not None else "category"
                else:
                    kinds[name] = "linear"
        # matched x axes (shared_xaxes) take the kind of the axis they match
        for name, spec in self.grid.xaxes.items():
            match = spec.get("matches")
            if isinstance(match, str) and match in self.xkind and self.xkind[name] == "linear":
                self.xkind[name] = self.xkind[match]

    def _size_plot_area(self) -> None:
        """Leave room on the left for long category labels and on the right for a second y axis."""
        longest = 0
        for trace in self.traces:
            if self.ykind.get(str(trace.get("yaxis") or "y")) == "category":
                longest = max([longest, *(len(str(v)) for v in decode_array(trace.get("y"))[:200])])
        width_in = self.fig.get_figwidth()
        left = min(0.4, max(_FIG_LEFT, (0.35 + 0.075 * longest) / width_in))
        right = 0.92 if self.grid.overlay_y else _FIG_RIGHT
        self.plot_area = (left, _FIG_BOTTOM, right - left, _FIG_TOP - _FIG_BOTTOM)

    def _make_axes(self) -> None:
        by_x: dict[str, Any] = {}
        for yname in self.grid.base_y:
            xname = self.grid.x_of(yname)
            x0, x1 = self.grid.xdomain(xname)
            y0, y1 = self.grid.ydomain(yname)
            fx0, fy0 = self.paper_to_fig(x0, y0)
            fx1, fy1 = self.paper_to_fig(x1, y1)
            match = self.grid.xaxes.get(xname, {}).get("matches")
            share = by_x.get(match) if isinstance(match, str) else None
            ymatch = self.grid.yaxes.get(yname, {}).get("matches")  # shared_yaxes: one scale to compare
            sharey = self.axes.get(ymatch) if isinstance(ymatch, str) else None
            ax = self.fig.add_axes((fx0, fy0, fx1 - fx0, fy1 - fy0), sharex=share, sharey=sharey)
            by_x.setdefault(xname, ax)
            if isinstance(match, str):
                by_x.setdefault(match, ax)
            ax.set_facecolor("#fbfbfd")
            ax.grid(True, color="#e3e6ee", linewidth=0.8)
            ax.set_axisbelow(True)
            for side in ("top", "right"):
                ax.spines[side].set_visible(False)
            ax.tick_params(labelsize=8)
            self.axes[yname] = ax
        for yname, base in self.grid.overlay_y.items():
            twin = self.axes[base].twinx()
            twin.tick_params(labelsize=8)
            twin.spines["top"].set_visible(False)
            self.axes[yname] = twin

    def _ax(self, yname: str) -> Any:
        return self.axes.get(yname) or self.axes[self.grid.base_y[0]]

    def _axes_for_x(self, xname: str) -> list[Any]:
        return [self.axes[y] for y in self.grid.base_y if self.grid.x_of(y) == xname] or [
            self.axes[self.grid.base_y[0]]
        ]

    # value conversion per axis kind
    def _convert(self, values: list[Any], kind: str, axis: str) -> list[float]:
        if kind == "date":
            epoch = _date_epoch()
            out: list[float] = []
            for v in values:
                parsed = parse_datetime(v)
                out.append((parsed - epoch).total_seconds() / 86400.0 if parsed is not None else _float(v))
            return out
        if kind == "category":
            order = self.categories.setdefault(axis, [])
            out = []
            for v in values:
                if v is None:
                    out.append(math.nan)
                    continue
                if v not in order:
                    order.append(v)
                out.append(float(order.index(v)))
            return out
        return [_float(v) for v in values]

    def _xy(self, trace: Mapping[str, Any]) -> tuple[list[float], list[float]]:
        xname, yname = str(trace.get("xaxis") or "x"), str(trace.get("yaxis") or "y")
        ys = decode_array(trace.get("y"))
        xs = decode_array(trace.get("x"))
        if not xs and ys:
            xs = list(range(len(ys)))
        if not ys and xs:
            ys = list(range(len(xs)))
        n = min(len(xs), len(ys))
        return (
            self._convert(xs[:n], self.xkind.get(xname, "linear"), xname),
            self._convert(ys[:n], self.ykind.get(yname, "linear"), yname),
        )

    def _trace_color(self, index: int, trace: Mapping[str, Any]) -> Any:
        line = _as_dict(trace.get("line"))
        marker = _as_dict(trace.get("marker"))
        fallback = self.colorway[index % len(self.colorway)]
        return _color(line.get("color"), None) or _color(marker.get("color"), None) or fallback

    def _label(self, trace: Mapping[str, Any]) -> str | None:
        name = trace.get("name")
        if trace.get("showlegend") is False or name in (None, ""):
            return None
        return _text(name)

    def _draw_trace(
        self, index: int, trace: Mapping[str, Any], bar_groups: dict[int, tuple[int, int]]
    ) -> None:
        kind = str(trace.get("type") or "scatter")
        if trace.get("visible") in (False, "legendonly"):
            return
        try:
            if kind in ("scatter", "scattergl"):
                self._scatter(index, trace)
            elif kind == "bar":
                self._bar(index, trace, bar_groups.get(index, (0, 1)))
            else:
                self.skipped[kind] = self.skipped.get(kind, 0) + 1
        except (TypeError, ValueError, KeyError, IndexError, OverflowError):
            # malformed data: leave this trace out rather than fail the whole postmortem
            self.skipped[kind] = self.skipped.get(kind, 0) + 1

    def _scatter(self, index: int, trace: Mapping[str, Any]) -> None:
        ax = self._ax(str(trace.get("yaxis") or "y"))
        xs, ys = self._xy(trace)
        mode = str(trace.get("mode") or ("lines" if len(xs) > 20 else "lines+markers"))
        line = _as_dict(trace.get("line"))
        marker = _as_dict(trace.get("marker"))
        color = self._trace_color(index, trace)
        width = line.get("width")
        size = marker.get("size")
        kwargs: dict[str, Any] = {
            "color": color,
            "label": self._label(trace),
            "linestyle": _DASHES.get(str(line.get("dash") or "solid"), "-") if "lines" in mode else "none",
            "linewidth": float(width) * 0.75 if isinstance(width, int | float) else 1.5,
            "marker": _SYMBOLS.get(str(marker.get("symbol") or "circle"), "o") if "markers" in mode else None,
            "markersize": min(float(size), 12.0) * 0.6 if isinstance(size, int | float) else 4,
        }
        if line.get("shape") in ("hv", "vh"):
            kwargs["drawstyle"] = "steps-post" if line.get("shape") == "hv" else "steps-pre"
        opacity = trace.get("opacity")
        if isinstance(opacity, int | float):
            kwargs["alpha"] = float(opacity)
        ax.plot(xs, ys, **kwargs)
        fill = trace.get("fill")
        if fill in ("tozeroy", "tonexty") and xs:
            fillcolor = _color(trace.get("fillcolor"), None)
            ax.fill_between(
                xs, 0, ys, color=fillcolor or color, alpha=None if fillcolor else 0.25, linewidth=0
            )

    def _bar_groups(self) -> dict[int, tuple[int, int]]:
        """Trace index -> (slot, slots) for grouped bars sharing an axes."""
        if self.layout.get("barmode") in ("stack", "overlay", "relative"):
            return {}
        per_axes: dict[tuple[str, str], list[int]] = {}
        for i, trace in enumerate(self.traces):
            if trace.get("type") == "bar" and trace.get("visible") not in (False, "legendonly"):
                key = (str(trace.get("yaxis") or "y"), str(trace.get("orientation") or "v"))
                per_axes.setdefault(key, []).append(i)
        return {i: (slot, len(members)) for members in per_axes.values() for slot, i in enumerate(members)}

    def _bar(self, index: int, trace: Mapping[str, Any], group: tuple[int, int]) -> None:
        import numpy as np

        ax = self._ax(str(trace.get("yaxis") or "y"))
        xs, ys = self._xy(trace)
        horizontal = trace.get("orientation") == "h"
        positions, lengths = (ys, xs) if horizontal else (xs, ys)
        finite = sorted({p for p in positions if math.isfinite(p)})
        spacing = min((b - a for a, b in zip(finite, finite[1:], strict=False)), default=1.0)
        slot, slots = group
        width = 0.8 * spacing / slots
        offset = (slot - (slots - 1) / 2.0) * width
        pos = np.asarray(positions, dtype=float) + offset
        length = np.nan_to_num(np.asarray(lengths, dtype=float))
        bottoms = self._stack_base(ax, horizontal, pos, length)
        marker = _as_dict(trace.get("marker"))
        color = _color(marker.get("color"), None) or self.colorway[index % len(self.colorway)]
        kwargs = {"color": color, "label": self._label(trace), "alpha": 0.9}
        if horizontal:
            ax.barh(pos, length, height=width, left=bottoms, **kwargs)
        else:
            ax.bar(pos, length, width=width, bottom=bottoms, **kwargs)

    def _stack_base(self, ax: Any, horizontal: bool, pos: Any, length: Any) -> Any:
        import numpy as np

        if self.layout.get("barmode") not in ("stack", "relative"):
            return None
        store = self.stacks.setdefault(id(ax), {})
        base = np.array([store.get((horizontal, round(float(p), 9)), 0.0) for p in pos])
        for p, b, v in zip(pos, base, length, strict=False):
            store[(horizontal, round(float(p), 9))] = b + v
        return base

    def _finish_axes(self) -> None:
        from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

        bottom_ax = min(self.grid.base_y, key=lambda y: self.grid.ydomain(y)[0])
        for yname, ax in self.axes.items():
            spec = self.grid.yaxes.get(yname, {})
            kind = self.ykind.get(yname, "linear")
            is_base = yname in self.grid.base_y
            xname = self.grid.x_of(yname if is_base else self.grid.overlay_y[yname])
            xspec = self.grid.xaxes.get(xname, {})
            ylabel = _text(spec.get("title"))
            if kind == "log":
                ax.set_yscale("log")
            if kind == "category":
                order = self.categories.get(yname, [])
                ax.set_yticks(range(len(order)), [_text(c) for c in order])
            if ylabel:
                ax.set_ylabel(ylabel, fontsize=9)
            if _is_reversed(spec):
                ax.invert_yaxis()
            if spec.get("rangemode") == "tozero" and kind == "linear":
                ax.set_ylim(bottom=0)  # counts and latencies: an axis that starts above 0 exaggerates
            if not is_base:
                continue
            xkind = self.xkind.get(xname, "linear")
            if xkind == "date":  # as many ticks as the axis' width holds (a small multiple's is narrow)
                wide_in = ax.get_position().width * self.fig.get_figwidth()
                locator = AutoDateLocator(tz=UTC, maxticks=max(3, min(10, int(wide_in * 1.6))))
                ax.xaxis.set_major_locator(locator)
                ax.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=UTC))
            elif xkind == "category":
                order = self.categories.get(xname, [])
                ax.set_xticks(range(len(order)), [_text(c) for c in order])
                if sum(len(str(c)) for c in order) > 90:
                    ax.tick_params(axis="x", labelrotation=30)
            elif xkind == "log":
                ax.set_xscale("log")
            if _is_reversed(xspec):
                ax.invert_xaxis()
            xlabel = _text(xspec.get("title"))
            if xkind == "date" and "UTC" not in xlabel:
                xlabel = f"{xlabel} (UTC)" if xlabel else "time (UTC)"
            show_ticks = xspec.get("showticklabels") is not False
            if yname == bottom_ax or show_ticks:
                if xlabel and (yname == bottom_ax or xspec.get("title")):
                    ax.set_xlabel(xlabel, fontsize=9)
            else:
                ax.tick_params(axis="x", labelbottom=False)
            if not show_ticks:
                ax.tick_params(axis="x", labelbottom=False)
            self._legend(yname, ax)

    def _legend(self, yname: str, ax: Any) -> None:
        if self.layout.get("showlegend") is False:
            return
        handles, labels = ax.get_legend_handles_labels()
        top = ax  # the legend goes on the axes drawn last, so twin-axis data does not cover it
        for other, base in self.grid.overlay_y.items():
            if base == yname:
                top = self.axes[other]
                h, lab = top.get_legend_handles_labels()
                handles += h
                labels += lab
        if not handles:
            return
        if len(self.grid.base_y) == 1:  # one plot: a row of entries above it, like plotly's
            top.legend(
                handles,
                labels,
                loc="lower right",
                bbox_to_anchor=(1.0, 1.0),
                ncol=min(len(handles), 4),
                fontsize=7,
                frameon=False,
            )
        else:
            top.legend(handles, labels, loc="upper left", fontsize=7, framealpha=0.85)

    def _title(self) -> None:
        title = _text(self.layout.get("title"))
        if self.skipped:
            skipped = ", ".join(f"{k} ×{n}" if n > 1 else k for k, n in sorted(self.skipped.items()))
            title = f"{title}\n(not drawn here: {skipped})" if title else f"(not drawn here: {skipped})"
        if title:
            self.fig.suptitle(title, x=_FIG_LEFT, ha="left", fontsize=11, y=0.985, va="top")


@lru_cache(maxsize=1)
def _date_epoch() -> datetime:
    """matplotlib's date epoch (day numbers count from it), as a naive UTC datetime."""
    from matplotlib.dates import get_epoch

    parsed = parse_datetime(get_epoch())
    return parsed if parsed is not None else datetime(1970, 1, 1)
