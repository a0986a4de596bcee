"""Static PNGs of plotly figures, drawn with matplotlib (what the Markdown postmortem embeds)."""

from __future__ import annotations

import struct
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import plotly.graph_objects as go
import pytest
from plotly.subplots import make_subplots
from report_fixtures import T0, bar_figure, timeseries_figure

from perfkit.core.findings import jsonable
from perfkit.report.figure_json import decode_array, parse_datetime
from perfkit.report.static import figure_to_png

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    width, height = struct.unpack(">II", data[16:24])
    return width, height


def pixels(path: Path) -> np.ndarray:
    import matplotlib.image

    return matplotlib.image.imread(path)[..., :3]


def count_near(image: np.ndarray, rgb: tuple[float, float, float], tol: float = 0.06) -> int:
    return int((np.abs(image - np.array(rgb)).max(axis=-1) < tol).sum())


def test_time_series_with_window_deploy_and_slo(tmp_path: Path) -> None:
    out = figure_to_png(jsonable(timeseries_figure()), tmp_path / "ts.png")
    assert out == tmp_path / "ts.png"
    assert png_size(out) == (1000, 400)  # 10 x 4 in at 100 dpi
    image = pixels(out)
    # the incident window: red at opacity 0.2 over the plot background
    assert count_near(image, (0.99, 0.79, 0.79), tol=0.05) > 10_000
    # the SLO line is orange, the deploy marker purple (anti-aliased, so loosely matched)
    assert count_near(image, (1.0, 0.647, 0.0), tol=0.2) > 500
    assert count_near(image, (0.5, 0.0, 0.5), tol=0.25) > 100


def test_without_shapes_there_is_no_shading(tmp_path: Path) -> None:
    figure = jsonable(timeseries_figure())
    figure["layout"].pop("shapes")
    image = pixels(figure_to_png(figure, tmp_path / "plain.png"))
    assert count_near(image, (0.99, 0.79, 0.79), tol=0.05) < 200


def test_stacked_subplots(tmp_path: Path) -> None:
    xs = [T0 + timedelta(minutes=i) for i in range(60)]
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, subplot_titles=("queue", "prefill", "decode"))
    for row in (1, 2, 3):
        fig.add_trace(go.Scatter(x=xs, y=np.arange(60.0) * row, name=f"stage {row}"), row=row, col=1)
    fig.add_vrect(x0=xs[20], x1=xs[40], row="all", col=1, fillcolor="red", opacity=0.2, line_width=0)
    fig.update_layout(title="Per-stage p95")
    out = figure_to_png(fig.to_plotly_json(), tmp_path / "sub.png")
    width, height = png_size(out)
    assert width == 1000 and height > 400  # taller than a single plot
    image = pixels(out)
    # the window is shaded in each of the three rows: three bands down one column (grid lines
    # cross a band; only a gap taller than 20 px separates two bands)
    column = image[:, 500]
    rows = np.flatnonzero(np.abs(column - np.array((0.99, 0.79, 0.79))).max(axis=-1) < 0.05)
    assert rows.size > 150
    assert int(np.count_nonzero(np.diff(rows) > 20)) + 1 == 3
    outside = image[:, 150]  # before the window: no shading at all
    assert count_near(outside[None, :, :], (0.99, 0.79, 0.79), tol=0.05) < 10


def test_bar_charts_vertical_grouped_and_horizontal(tmp_path: Path) -> None:
    out = figure_to_png(bar_figure(), tmp_path / "bar.png")
    image = pixels(out)
    # both traces drawn in plotly's first two colours
    assert count_near(image, (0x63 / 255, 0x6E / 255, 0xFA / 255), tol=0.12) > 2_000
    assert count_near(image, (0xEF / 255, 0x55 / 255, 0x3B / 255), tol=0.12) > 2_000
    hbar = go.Figure(go.Bar(y=["gpu0", "gpu1 (NVLink degraded)"], x=[91.0, 30.0], orientation="h"))
    out = figure_to_png(hbar.to_plotly_json(), tmp_path / "hbar.png")
    assert count_near(pixels(out), (0x63 / 255, 0x6E / 255, 0xFA / 255), tol=0.12) > 5_000


def test_secondary_y_axis_and_unknown_traces(tmp_path: Path) -> None:
    xs = [T0 + timedelta(minutes=i) for i in range(30)]
    fig = make_subplots(specs=[[{"secondary_y": True}]])
    fig.add_trace(
        go.Scatter(x=xs, y=np.arange(30.0), name="running", line={"color": "green"}), secondary_y=False
    )
    fig.add_trace(
        go.Scatter(x=xs, y=np.linspace(0, 1, 30), name="kv cache", mode="markers"), secondary_y=True
    )
    fig.add_trace(go.Heatmap(z=[[1, 2], [3, 4]]))
    fig.add_trace(go.Pie(values=[1, 2]))
    out = figure_to_png(fig.to_plotly_json(), tmp_path / "y2.png")
    assert count_near(pixels(out), (0.0, 0.5, 0.0), tol=0.1) > 200


@pytest.mark.parametrize(
    "figure",
    [
        {},
        {"data": [], "layout": {}},
        {"data": [{"type": "scatter", "x": ["a", None, "b"], "y": [1, None, "oops"]}]},
        {"data": [{"type": "scatter", "y": [1, 2, 3]}], "layout": {"shapes": [{"type": "circle", "x0": 0}]}},
        {
            "data": [{"type": "bar", "x": [], "y": []}],
            "layout": {"annotations": [{"text": "$5 <b>cost</b>"}]},
        },
    ],
)
def test_odd_figures_still_give_an_image(tmp_path: Path, figure: dict[str, Any]) -> None:
    out = figure_to_png(figure, tmp_path / "odd.png")
    assert png_size(out) == (1000, 400)


def test_decode_array_and_dates() -> None:
    encoded = go.Figure(go.Scatter(y=np.array([1.5, 2.5]))).to_plotly_json()["data"][0]["y"]
    assert isinstance(encoded, dict) and "bdata" in encoded
    assert decode_array(encoded) == [1.5, 2.5]
    assert decode_array([1, 2]) == [1, 2]
    assert decode_array(None) == []
    assert parse_datetime("2026-11-30T04:00:00+02:00") == datetime(2026, 11, 30, 2, 0)
    assert parse_datetime("2026-11-30T02:00:00Z") == datetime(2026, 11, 30, 2, 0)
    assert parse_datetime(datetime(2026, 11, 30, 2, 0, tzinfo=UTC)) == datetime(2026, 11, 30, 2, 0)
    assert parse_datetime("queue") is None
