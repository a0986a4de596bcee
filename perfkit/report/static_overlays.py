"""Shapes and annotations of a static PNG figure: shaded windows (``add_vrect``), deploy markers
(``add_vline``), SLO lines (``add_hline``) and text notes, drawn by :class:`perfkit.report.static._Drawing`
through the :class:`_Overlays` mixin.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from perfkit.report.figure_json import (
    _DASHES,
    _as_dict,
    _clip01,
    _color,
    _float,
    _Grid,
    _paper_to_axes,
    _ref_axis,
    _text,
)


class _Overlays:
    """:class:`perfkit.report.static._Drawing`'s shapes and annotations (it supplies the axes and state)."""

    # what _Drawing supplies (declared for the type checker only; nothing is set here)
    fig: Any  # matplotlib Figure
    grid: _Grid
    axes: dict[str, Any]  # plotly y axis -> matplotlib axes
    xkind: dict[str, str]
    ykind: dict[str, str]

    if TYPE_CHECKING:

        def paper_to_fig(self, x: float, y: float) -> tuple[float, float]: ...

        def _axes_for_x(self, xname: str) -> list[Any]: ...

        def _convert(self, values: list[Any], kind: str, axis: str) -> list[float]: ...

    # shapes: windows, deploy markers, SLO lines
    def _shape_value(self, value: Any, axis: str | None, letter: str) -> float:
        if axis is None:
            return _float(value)
        kinds = self.xkind if letter == "x" else self.ykind
        return self._convert([value], kinds.get(axis, "linear"), axis)[0]

    def _draw_shape(self, shape: Mapping[str, Any]) -> None:
        kind = shape.get("type")
        xaxis, xrel = _ref_axis(shape.get("xref", "x"), "x")
        yaxis, yrel = _ref_axis(shape.get("yref", "y"), "y")
        line = _as_dict(shape.get("line"))
        color = _color(line.get("color"), "#2a3f5f")
        width = line.get("width")
        linewidth = float(width) * 0.75 if isinstance(width, int | float) else 1.5
        dash = _DASHES.get(str(line.get("dash") or "solid"), "-")
        opacity = shape.get("opacity")
        alpha = float(opacity) if isinstance(opacity, int | float) else None
        try:
            x0 = self._shape_value(shape.get("x0"), None if xrel else xaxis, "x")
            x1 = self._shape_value(shape.get("x1"), None if xrel else xaxis, "x")
            y0 = self._shape_value(shape.get("y0"), None if yrel else yaxis, "y")
            y1 = self._shape_value(shape.get("y1"), None if yrel else yaxis, "y")
        except (TypeError, ValueError):
            return
        if not all(math.isfinite(v) for v in (x0, x1, y0, y1)):
            return
        targets = self._shape_axes(xaxis, xrel, yaxis, yrel)
        if kind == "rect":
            fill = _color(shape.get("fillcolor"), (0.5, 0.5, 0.5, 1.0))
            edge = color if isinstance(width, int | float) and width > 0 else "none"
            for ax in targets:
                if not xrel and yrel:
                    ax.axvspan(
                        x0,
                        x1,
                        ymin=_clip01(y0),
                        ymax=_clip01(y1),
                        facecolor=fill,
                        alpha=alpha,
                        edgecolor=edge,
                    )
                elif xrel and not yrel:
                    ax.axhspan(
                        y0,
                        y1,
                        xmin=_clip01(x0),
                        xmax=_clip01(x1),
                        facecolor=fill,
                        alpha=alpha,
                        edgecolor=edge,
                    )
                elif not xrel and not yrel:
                    ax.fill_between([x0, x1], y0, y1, facecolor=fill, alpha=alpha, edgecolor=edge)
        elif kind == "line":
            style = {"color": color, "linewidth": linewidth, "linestyle": dash, "alpha": alpha}
            for ax in targets:
                if not xrel and yrel and x0 == x1:
                    ax.axvline(x0, ymin=_clip01(y0), ymax=_clip01(y1), **style)
                elif xrel and not yrel and y0 == y1:
                    ax.axhline(y0, xmin=_clip01(x0), xmax=_clip01(x1), **style)
                elif not xrel and not yrel:
                    ax.plot([x0, x1], [y0, y1], **style)

    def _shape_axes(self, xaxis: str | None, xrel: bool, yaxis: str | None, yrel: bool) -> list[Any]:
        if yaxis is not None and yaxis in self.axes:
            return [self.axes[yaxis]]
        if xaxis is not None:
            return self._axes_for_x(xaxis)
        return [self.axes[y] for y in self.grid.base_y]

    def _draw_annotation(self, note: Mapping[str, Any]) -> None:
        text = _text(note.get("text"))
        if not text:
            return
        xaxis, xrel = _ref_axis(note.get("xref", "x"), "x")
        yaxis, yrel = _ref_axis(note.get("yref", "y"), "y")
        ha = {"left": "left", "right": "right", "center": "center"}.get(str(note.get("xanchor")), "center")
        va = {"top": "top", "bottom": "bottom", "middle": "center"}.get(str(note.get("yanchor")), "center")
        font = _as_dict(note.get("font"))
        size = font.get("size")
        style = {
            "ha": ha,
            "va": va,
            "fontsize": min(float(size) * 0.65, 11.0) if isinstance(size, int | float) else 8,
            "color": _color(font.get("color"), "#2a3f5f"),
            "clip_on": False,
        }
        try:
            if xaxis is None and yaxis is None:  # paper/paper: subplot titles, free notes
                fx, fy = self.paper_to_fig(_float(note.get("x", 0.5)), _float(note.get("y", 1.0)))
                self.fig.text(fx, fy, text, **style)
                return
            ynames = [y for y in self.grid.base_y if self.grid.x_of(y) == xaxis] or self.grid.base_y
            ax = self.axes.get(yaxis or "", None) or self.axes[ynames[0]]
            x = _float(note.get("x")) if xrel else self._shape_value(note.get("x"), xaxis, "x")
            y = _float(note.get("y")) if yrel else self._shape_value(note.get("y"), yaxis, "y")
            if not (math.isfinite(x) and math.isfinite(y)):
                return
            if yaxis is None and xaxis is not None:  # data x, paper y: place relative to the axes
                y = _paper_to_axes(y, self.grid.ydomain(ynames[0]))
            if xaxis is None and yaxis is not None:
                x = _paper_to_axes(x, self.grid.xdomain(self.grid.x_of(yaxis)))
            if xrel and yrel:
                transform = ax.transAxes
            elif xrel:
                transform = ax.get_yaxis_transform()
            elif yrel:
                transform = ax.get_xaxis_transform()
            else:
                transform = ax.transData
            ax.text(x, y, text, transform=transform, **style)
        except (TypeError, ValueError, KeyError):
            return
