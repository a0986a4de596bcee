"""Prometheus HTTP API source: the server aggregates, perfkit reads the answer.

Works unchanged against Prometheus and VictoriaMetrics (single node or cluster ``/select/0/prometheus``)
and other engines with the same API (Thanos, Mimir). :class:`PrometheusEngine` evaluates
:mod:`perfkit.engine.ops` expressions by translating them to PromQL (never pulling raw buckets to
compute what the server can compute); :class:`PrometheusClient` is the HTTP layer:

* long ranges are split so no request asks for more than ``max_points`` points per series (the
  server refuses more than 11,000), and the pieces are fetched in parallel with a bound;
* 429/5xx answers, timeouts and refused connections are retried with exponential backoff, then
  raise :class:`~perfkit.errors.SourceError` naming the URL (never a token) and the status
  (:mod:`perfkit.sources.http`, shared by every live source); ``timeout_s`` bounds each request
  and ``total_timeout_s`` (default 4 × ``timeout_s``) all attempts of one call, backoff included;
* answers are bounded (256 MiB, 64 levels of JSON nesting: a SourceError beyond), and their shape
  is checked in one pass before anything walks them (:func:`check_result`,
  :func:`check_label_values`): ``resultType`` one the caller can use, each series a mapping whose
  ``metric`` maps label names to strings (16 KiB at most), samples ``[timestamp, "value"]`` pairs
  with a number of seconds and a string ``float()`` reads (``"NaN"``, ``"+Inf"``). Anything else is
  ``SourceError("<url>: HTTP 200: answer's data.result[3].metric is not a mapping of label names
  to strings (...)")``, never a TypeError;
* auth comes from references: a bearer token in an env var or file, or basic auth with the
  password in an env var; TLS verification is on unless turned off, with an optional CA file.

The HTTP session is injected, so tests hand in a fake one (or a real server).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

import polars as pl
import requests

from perfkit.core.frames import TS_DTYPE, to_ms, utc
from perfkit.engine.ops import Expr, Selector, validate
from perfkit.engine.promql import selector as to_selector
from perfkit.engine.promql import to_promql
from perfkit.errors import SourceError
from perfkit.sources.http import (
    MAX_LABEL_VALUE_BYTES,
    MISSING,
    BadShape,
    HttpConfig,
    HttpSource,
    check_text_map,
    kind_of,
    short,
)
from perfkit.sources.safeio import size_text

MAX_POINTS = 11_000
RESULT_TYPES = ("matrix", "vector", "scalar", "string")
"""The ``resultType`` values of ``/api/v1/query``; ``/api/v1/query_range`` answers only ``matrix``."""
MIN_TS_S, MAX_TS_S = -62_135_596_800, 253_402_300_799
"""Timestamps accepted in answers (seconds): years 1 to 9999."""


class PrometheusClient(HttpSource):
    """Prometheus HTTP API client with retries, range splitting and bounded parallelism."""

    def __init__(
        self,
        config: HttpConfig,
        *,
        session: requests.Session | None = None,
        sleep: Callable[[float], None] = time.sleep,
        max_workers: int = 4,
        max_points: int = MAX_POINTS,
    ) -> None:
        super().__init__(config, session=session, sleep=sleep)
        self.max_workers = max_workers
        self.max_points = max_points

    # -- HTTP ------------------------------------------------------------------------------------

    def get(self, path: str, params: dict[str, Any], check: Callable[[Any], Any] | None = None) -> Any:
        """GET ``path`` and return the API's ``data``; retries 429/5xx/timeouts; raises SourceError.

        ``check(data)`` raises :class:`~perfkit.sources.http.BadShape` for data of the wrong shape
        (a SourceError naming the URL, the status and the part of the answer).
        """
        shown, resp = self.fetch(path, params)
        data = self._data(shown, resp)
        if check is not None:
            try:
                check(data)
            except BadShape as bad:
                raise self.shape_error(shown, resp, bad) from None
        return data

    def _data(self, url: str, resp: requests.Response) -> Any:
        try:
            body = self.read_json(url, resp)
        except ValueError:
            snippet = self.clean(resp.text[:80])
            raise SourceError(
                f"{url}: HTTP {resp.status_code}: answer is not JSON ({snippet!r})",
                url=url,
                status=resp.status_code,
            ) from None
        if not isinstance(body, dict) or body.get("status") != "success":
            err = body.get("error", "unknown error") if isinstance(body, dict) else "unexpected answer"
            kind = body.get("errorType", "") if isinstance(body, dict) else ""
            raise SourceError(
                f"{url}: HTTP {resp.status_code}: {kind} {self.clean(str(err))}".replace("  ", " "),
                url=url,
                status=resp.status_code,
            )
        if "data" not in body:
            raise SourceError(
                f"{url}: HTTP {resp.status_code}: answer has no data", url=url, status=resp.status_code
            )
        return body["data"]

    # -- API -------------------------------------------------------------------------------------

    def query(self, promql: str, at: datetime, *, want: tuple[str, ...] = RESULT_TYPES) -> dict[str, Any]:
        """Instant query: the answer's ``data``, its shape checked (:func:`check_result`); a
        ``resultType`` not in ``want`` is a SourceError."""
        return self.get(
            "/api/v1/query",
            {"query": promql, "time": f"{utc(at).timestamp():.3f}"},
            lambda data: check_result(data, want),
        )

    def query_range(self, promql: str, start: datetime, end: datetime, step_s: float) -> list[dict[str, Any]]:
        """Range query split into pieces of at most ``max_points`` steps, fetched in parallel; merged."""
        a, b = utc(start).timestamp(), utc(end).timestamp()
        n = int(math.floor((b - a) / step_s)) + 1
        pieces = []
        per = self.max_points
        for i in range(0, n, per):
            s = a + i * step_s
            e = min(b, a + (i + per - 1) * step_s)
            pieces.append((s, e))

        def fetch(piece: tuple[float, float]) -> list[dict[str, Any]]:
            data = self.get(
                "/api/v1/query_range",
                {
                    "query": promql,
                    "start": f"{piece[0]:.3f}",
                    "end": f"{piece[1]:.3f}",
                    "step": f"{step_s:g}",
                },
                lambda data: check_result(data, ("matrix",)),
            )
            return list(data["result"])

        if len(pieces) == 1:
            parts = [fetch(pieces[0])]
        else:
            with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
                parts = list(pool.map(fetch, pieces))
        merged: dict[tuple, dict[str, Any]] = {}
        for part in parts:
            for series in part:
                key = tuple(sorted(series.get("metric", {}).items()))  # checked: str -> str
                if key in merged:
                    merged[key]["values"].extend(series.get("values", []))
                else:
                    merged[key] = {
                        "metric": series.get("metric", {}),
                        "values": list(series.get("values", [])),
                    }
        return list(merged.values())

    def label_values(self, label: str, start: datetime, end: datetime, match: str | None = None) -> list[str]:
        params: dict[str, Any] = {
            "start": f"{utc(start).timestamp():.3f}",
            "end": f"{utc(end).timestamp():.3f}",
        }
        if match:
            params["match[]"] = match
        return list(self.get(f"/api/v1/label/{label}/values", params, check_label_values))


def check_label_values(data: Any) -> list[str]:
    """``data`` of a ``/api/v1/label/<name>/values`` answer if it is a list of strings (each at
    most 16 KiB); :class:`~perfkit.sources.http.BadShape` otherwise."""
    if type(data) is not list:
        raise BadShape("data", f"is not a list of label values (it is {kind_of(data)})")
    for i, value in enumerate(data):
        if type(value) is not str:
            raise BadShape(f"data[{i}]", f"is not a label value (a string; it is {kind_of(value)})")
        if len(value) > MAX_LABEL_VALUE_BYTES // 4:
            size = len(value.encode("utf-8", "surrogatepass"))
            if size > MAX_LABEL_VALUE_BYTES:
                raise BadShape(
                    f"data[{i}]",
                    f"is a label value of {size_text(size)}, over the {size_text(MAX_LABEL_VALUE_BYTES)} limit",
                )
    return data


def check_result(data: Any, want: tuple[str, ...] = RESULT_TYPES) -> dict[str, Any]:
    """``data`` of a ``/api/v1/query`` or ``/api/v1/query_range`` answer if it has the documented
    shape and a ``resultType`` in ``want``; :class:`~perfkit.sources.http.BadShape` (naming the
    part, ``data.result[3].values[17][1]``) otherwise. One pass over every sample."""
    if type(data) is not dict:
        raise BadShape("data", f"is not a mapping with resultType and result (it is {kind_of(data)})")
    kind = data.get("resultType", MISSING)
    if type(kind) is not str or kind not in want:
        said = short(kind) if type(kind) is str else kind_of(kind)
        raise BadShape("data.resultType", f"is {said}, not {' or '.join(map(repr, want))}")
    result = data.get("result", MISSING)
    if kind in ("scalar", "string"):
        _check_point(result, "data.result", text=kind == "string")
        return data
    if type(result) is not list:
        raise BadShape("data.result", f"is not a list of series (it is {kind_of(result)})")
    for i, series in enumerate(result):
        if type(series) is not dict:
            raise BadShape(
                f"data.result[{i}]",
                f"is not a series (a mapping with metric and values; it is {kind_of(series)})",
            )
        metric = series.get("metric", MISSING)
        if metric is not MISSING:
            check_text_map(metric, f"data.result[{i}].metric")
        value = series.get("value", MISSING)
        if value is not MISSING:
            _check_point(value, f"data.result[{i}].value")
        values = series.get("values", MISSING)
        if values is MISSING:
            continue
        if type(values) is not list:
            raise BadShape(
                f"data.result[{i}].values",
                f"is not a list of [timestamp, value] pairs (it is {kind_of(values)})",
            )
        if not _points_ok(values):
            for j, point in enumerate(values):  # find the bad one (raises)
                _check_point(point, f"data.result[{i}].values[{j}]")
    return data


def _points_ok(values: list[Any]) -> bool:
    """Whether every item of ``values`` is a ``[timestamp, "value"]`` pair: the hot loop (tens of
    MB of samples), so it only says yes or no; :func:`_check_point` says what is wrong."""
    try:
        for point in values:
            if type(point) is not list or len(point) != 2:
                return False
            t, v = point
            if (
                (type(t) is not float and type(t) is not int)
                or not MIN_TS_S <= t <= MAX_TS_S
                or type(v) is not str
            ):
                return False
            float(v)
    except ValueError:
        return False
    return True


def _check_point(point: Any, where: str, *, text: bool = False) -> None:
    """A ``[timestamp, "value"]`` pair (``"value"`` any string when ``text``); BadShape saying what
    is wrong with it otherwise."""
    if type(point) is not list or len(point) != 2:
        raise BadShape(where, f"is not a [timestamp, value] pair (it is {kind_of(point)})")
    t, v = point
    if not ((type(t) is float or type(t) is int) and MIN_TS_S <= t <= MAX_TS_S):
        raise BadShape(
            f"{where}[0]", f"is not a timestamp (a number of seconds, years 1 to 9999; it is {kind_of(t)})"
        )
    if type(v) is not str:
        raise BadShape(f"{where}[1]", f"is not a sample value (a number in a string; it is {kind_of(v)})")
    if text:
        return
    try:
        float(v)
    except ValueError:
        raise BadShape(
            f"{where}[1]", f"is not a sample value (a number in a string; it is {kind_of(v)})"
        ) from None


def _value(v: Any) -> float:
    return float(v)  # Prometheus sends "NaN", "+Inf", "-Inf" as strings; float() reads them


def series_frame(result: list[dict[str, Any]], *, keep_name: bool = False) -> pl.DataFrame:
    """Prometheus ``matrix``/``vector`` results → frame (label columns, ts, value), like the local engine's."""
    rows: list[dict[str, Any]] = []
    labels: list[str] = []
    for series in result:
        metric = {k: v for k, v in series.get("metric", {}).items() if keep_name or k != "__name__"}
        for k in metric:
            if k not in labels:
                labels.append(k)
        points = series.get("values") or ([series["value"]] if "value" in series else [])
        for t, v in points:
            rows.append({**metric, "ts": int(round(float(t) * 1000)), "value": _value(v)})
    schema = {**dict.fromkeys(labels, pl.Utf8), "ts": pl.Int64, "value": pl.Float64}
    frame = pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)
    frame = frame.with_columns(pl.col("ts").cast(TS_DTYPE))
    return frame.unique(subset=[*labels, "ts"], keep="first").sort([*labels, "ts"])


class PrometheusEngine:
    """Evaluates perfkit's metric operations on a Prometheus-compatible server (the server aggregates)."""

    name = "prometheus"

    def __init__(
        self, client: PrometheusClient, *, start: datetime, end: datetime, dialect: str | None = None
    ) -> None:
        self.client = client
        self.start, self.end = utc(start), utc(end)
        self._names: set[str] | None = None
        self._dialect = dialect
        self.queries: list[str] = []

    @property
    def dialect(self) -> str:
        """``victoriametrics`` when the server understands MetricsQL's ``increase_prometheus``, else
        ``prometheus`` (probed once: Prometheus answers an unknown function with bad_data)."""
        if self._dialect is None:
            try:
                self.client.get(
                    "/api/v1/query",
                    {"query": "increase_prometheus(vector(1)[1m])", "time": f"{self.end.timestamp():.3f}"},
                )
                self._dialect = "victoriametrics"
            except SourceError as exc:
                if exc.status is None or exc.status >= 500:
                    raise
                self._dialect = "prometheus"
        return self._dialect

    def _promql(self, expr: Expr) -> str:
        validate(expr)
        promql = to_promql(expr, self.dialect)
        self.queries.append(promql)
        return promql

    def metric_names(self) -> list[str]:
        if self._names is None:
            self._names = set(self.client.label_values("__name__", self.start, self.end))
        return sorted(self._names)

    def has(self, metric: str) -> bool:
        return metric in set(self.metric_names())

    def range(self, expr: Expr, start: datetime, end: datetime, step_s: float) -> pl.DataFrame:
        promql = self._promql(expr)
        return series_frame(self.client.query_range(promql, start, end, step_s))

    def instant(self, expr: Expr, at: datetime) -> pl.DataFrame:
        promql = self._promql(expr)
        data = self.client.query(promql, at, want=("vector", "scalar", "matrix"))
        if data["resultType"] == "scalar":
            t, v = data["result"]
            return series_frame([{"metric": {}, "value": [t, v]}])
        return series_frame(list(data["result"]))

    def raw(
        self,
        metric: str,
        start: datetime,
        end: datetime,
        *,
        chunk_s: float = 6 * 3600,
        selector: Selector | None = None,
    ) -> pl.DataFrame:
        """Stored samples of ``metric`` (or of ``selector``, with its matchers) in [start, end] via
        range-vector instant queries, in chunks."""
        text = to_selector(selector) if selector is not None else metric
        a, b = to_ms(start), to_ms(end)
        frames = []
        t = a
        while t <= b:
            e = min(b, t + int(chunk_s * 1000))
            width = max(1, (e - t) // 1000)
            data = self.client.query(f"{text}[{width}s]", utc(e / 1000), want=("matrix", "vector"))
            frames.append(series_frame(list(data["result"])))
            t = e + 1
        frames = [f for f in frames if f.height]
        if not frames:
            return series_frame([])
        out = pl.concat(frames, how="diagonal_relaxed")
        labels = [c for c in out.columns if c not in ("ts", "value")]
        ts = pl.col("ts").cast(pl.Int64)
        return out.filter((ts >= a) & (ts <= b)).unique(subset=[*labels, "ts"]).sort([*labels, "ts"])
