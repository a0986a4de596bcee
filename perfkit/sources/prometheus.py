"""Prometheus HTTP API source: the server aggregates, perfkit reads the answer.

Works unchanged against Prometheus and VictoriaMetrics (single node or cluster ``/select/0/prometheus``)
and other engines with the same API (Thanos, Mimir). :class:`PrometheusEngine` evaluates
:mod:`perfkit.query.ops` expressions by translating them to PromQL (never pulling raw buckets to
compute what the server can compute); :class:`PrometheusClient` is the HTTP layer:

* long ranges are split so no request asks for more than ``max_points`` points per series (the
  server refuses more than 11,000), and the pieces are fetched in parallel with a bound;
* 429/5xx answers, timeouts and refused connections are retried with exponential backoff, then
  raise :class:`~perfkit.errors.SourceError` naming the URL (never a token) and the status
  (:mod:`perfkit.sources.http`, shared by every live source); ``timeout_s`` bounds each request
  and ``total_timeout_s`` (default 4 × ``timeout_s``) all attempts of one call, backoff included;
* answers are bounded (256 MiB, 64 levels of JSON nesting: a SourceError beyond);
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

from perfkit.errors import SourceError
from perfkit.frames import TS_DTYPE, to_ms, utc
from perfkit.query.ops import Expr, validate
from perfkit.query.promql import to_promql
from perfkit.sources.http import Auth, HttpSource

MAX_POINTS = 11_000


class PrometheusClient(HttpSource):
    """Prometheus HTTP API client with retries, range splitting and bounded parallelism."""

    def __init__(
        self,
        url: str,
        *,
        session: requests.Session | None = None,
        auth: Auth | None = None,
        verify: bool = True,
        ca_file: str | None = None,
        timeout_s: float = 30.0,
        total_timeout_s: float | None = None,
        retries: int = 3,
        backoff_s: float = 0.5,
        max_workers: int = 4,
        max_points: int = MAX_POINTS,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        super().__init__(
            url,
            session=session,
            auth=auth,
            verify=verify,
            ca_file=ca_file,
            timeout_s=timeout_s,
            total_timeout_s=total_timeout_s,
            retries=retries,
            backoff_s=backoff_s,
            sleep=sleep,
        )
        self.max_workers = max_workers
        self.max_points = max_points

    # -- HTTP ------------------------------------------------------------------------------------

    def get(self, path: str, params: dict[str, Any]) -> Any:
        """GET ``path`` and return the API's ``data``; retries 429/5xx/timeouts; raises SourceError."""
        shown, resp = self.fetch(path, params)
        return self._data(shown, resp)

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
            raise SourceError(f"{url}: answer has no data", url=url, status=resp.status_code)
        return body["data"]

    # -- API -------------------------------------------------------------------------------------

    def query(self, promql: str, at: datetime) -> dict[str, Any]:
        return self.get("/api/v1/query", {"query": promql, "time": f"{utc(at).timestamp():.3f}"})

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
            )
            return list(data.get("result", []))

        if len(pieces) == 1:
            parts = [fetch(pieces[0])]
        else:
            with ThreadPoolExecutor(max_workers=self.max_workers) as pool:
                parts = list(pool.map(fetch, pieces))
        merged: dict[tuple, dict[str, Any]] = {}
        for part in parts:
            for series in part:
                key = tuple(sorted(series.get("metric", {}).items()))
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
        return list(self.get(f"/api/v1/label/{label}/values", params))


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
        data = self.client.query(promql, at)
        if data.get("resultType") == "scalar":
            t, v = data["result"]
            return series_frame([{"metric": {}, "value": [t, v]}])
        return series_frame(list(data.get("result", [])))

    def raw(self, metric: str, start: datetime, end: datetime, *, chunk_s: float = 6 * 3600) -> pl.DataFrame:
        """Stored samples of ``metric`` in [start, end] via range-vector instant queries, in chunks."""
        a, b = to_ms(start), to_ms(end)
        frames = []
        t = a
        while t <= b:
            e = min(b, t + int(chunk_s * 1000))
            width = max(1, (e - t) // 1000)
            data = self.client.query(f"{metric}[{width}s]", utc(e / 1000))
            frames.append(series_frame(list(data.get("result", []))))
            t = e + 1
        frames = [f for f in frames if f.height]
        if not frames:
            return series_frame([])
        out = pl.concat(frames, how="diagonal_relaxed")
        labels = [c for c in out.columns if c not in ("ts", "value")]
        ts = pl.col("ts").cast(pl.Int64)
        return out.filter((ts >= a) & (ts <= b)).unique(subset=[*labels, "ts"]).sort([*labels, "ts"])
