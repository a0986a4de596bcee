"""LokiClient on Loki answers served by a fake session that checks every request (path, query,
start/end in ns, limit, direction, tenant header); see data/loki/README.md for each answer's origin.

No Loki server is installable here. Most answers are hand-written (synthetic) in Loki's documented
format (:func:`handwritten`); two are the example answers Loki's own HTTP API reference prints
(:func:`from_loki_docs`), recorded as published.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest
import requests

from perfkit.core.frames import Window
from perfkit.errors import SourceError
from perfkit.sources.http import Auth, HttpConfig
from perfkit.sources.loki import LokiClient, stream_names

DATA = Path(__file__).parent / "data" / "loki"
URL = "http://loki.test:3100"
PATH = "/loki/api/v1/query_range"
QUERY = '{namespace=~"inference|training"}'
WINDOW = Window("2026-11-30T00:10:00Z", "2026-11-30T00:20:00Z")
START_NS = 1_795_997_400_000_000_000  # 2026-11-30T00:10:00Z
END_NS = 1_795_998_000_000_000_001  # 00:20:00Z + 1 ns: Loki's end is exclusive, the window is closed
CANARY = "canary-LOKI-tok3n-5f1e0c9a7b"
VLLM = '{job="vllm"}'
TRAIN = '{job="train"}'


def handwritten(name: str) -> requests.Response:
    """A hand-written (synthetic) answer from data/loki/, served with HTTP 200."""
    return response(200, (DATA / name).read_bytes())


def from_loki_docs(name: str) -> requests.Response:
    """An answer recorded from Loki's docs (data/loki/README.md names the page and commit)."""
    return response(200, (DATA / name).read_bytes())


def response(status: int, body: bytes | str | dict) -> requests.Response:
    resp = requests.Response()
    resp.status_code = status
    if isinstance(body, dict):
        body = json.dumps(body)
    resp._content = body.encode() if isinstance(body, str) else body
    resp.url = URL + PATH
    return resp


class FakeSession(requests.Session):
    """Answers GETs from a list (a Response, or an exception to raise) and records each call."""

    def __init__(self, answers: list[object]) -> None:
        super().__init__()
        self.answers = list(answers)
        self.calls: list[dict] = []

    def get(self, url, params=None, headers=None, timeout=None, **kwargs):  # type: ignore[override]
        self.calls.append({"url": url, "params": dict(params or {}), "headers": dict(headers or {})})
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def client(
    answers: list[object], *, limit: int = 4, tenant: str | None = None, **http
) -> tuple[LokiClient, FakeSession, list[float]]:
    """A client on a fake session; ``http`` are :class:`HttpConfig` settings."""
    session = FakeSession(answers)
    sleeps: list[float] = []
    loki = LokiClient(
        HttpConfig(URL, **http), session=session, sleep=sleeps.append, limit=limit, tenant=tenant
    )
    return loki, session, sleeps


def params(start: int, *, end: int = END_NS, limit: int = 4, direction: str = "forward") -> dict[str, str]:
    return {"query": QUERY, "start": str(start), "end": str(end), "limit": str(limit), "direction": direction}


def ts(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


PAGES = ["query_range_page1.json", "query_range_page2.json", "query_range_page3.json"]


# -- query_range ---------------------------------------------------------------------------------


def test_query_range_pages_from_the_last_timestamp_and_drops_repeats():
    loki, session, sleeps = client([handwritten(p) for p in PAGES], tenant="team-a")
    entries = loki.query_range(QUERY, WINDOW)

    assert [c["url"] for c in session.calls] == [URL + PATH] * 3
    assert [c["params"] for c in session.calls] == [
        params(START_NS),
        params(1_795_997_407_250_000_000),  # page 1 was full: start again at its last timestamp
        params(1_795_997_409_900_000_000),  # so was page 2
    ]
    assert all(c["headers"] == {"X-Scope-OrgID": "team-a"} for c in session.calls)
    assert sleeps == []

    vllm = {"job": "vllm", "namespace": "inference", "pod": "vllm-chat-0"}
    train = {"job": "train", "namespace": "training", "pod": "train-0"}
    got = [(t, labels, line[:30]) for t, labels, line in entries]
    assert got == [
        (ts("2026-11-30T00:10:05.100000"), vllm, "(APIServer pid=7) INFO 11-30 0"),
        (ts("2026-11-30T00:10:05.500000"), train, "node1:4242:4251 [0] transport/"),
        (ts("2026-11-30T00:10:06"), vllm, 'INFO:     10.0.0.7:51234 - "PO'),
        (ts("2026-11-30T00:10:07.250000"), vllm, "torch.OutOfMemoryError: CUDA o"),
        (ts("2026-11-30T00:10:07.250000"), train, "[2026-11-30 00:10:07] node1:42"),
        (ts("2026-11-30T00:10:08"), vllm, "Avg prompt throughput: 10.0 to"),
        (ts("2026-11-30T00:10:09.900000"), train, "Nov 30 00:10:09 gpu-node-3 ker"),
    ]


def test_query_range_stops_after_a_short_page():
    loki, session, _ = client([handwritten("query_range_page1.json")], limit=5)
    entries = loki.query_range(QUERY, WINDOW)
    assert len(entries) == 4
    assert [c["params"] for c in session.calls] == [params(START_NS, limit=5)]


def test_query_range_backward_pages_by_end():
    """Backward: newest first; the next page ends 1 ns after the oldest entry seen (end is exclusive)."""
    a, b, c = (str(START_NS + n) for n in (100, 200, 300))
    pages = [[[c, "c"], [b, "b"]], [[b, "b"], [a, "a"]], [[a, "a"]]]
    answers = [
        response(
            200,
            {"status": "success", "data": {"resultType": "streams", "result": [{"stream": {}, "values": p}]}},
        )
        for p in pages
    ]
    loki, session, _ = client(answers, limit=2)
    entries = loki.query_range(QUERY, WINDOW, direction="backward")
    assert [line for _, _, line in entries] == ["c", "b", "a"]
    assert [c["params"]["end"] for c in session.calls] == [
        str(END_NS),
        str(START_NS + 201),
        str(START_NS + 101),
    ]
    assert {c["params"]["start"] for c in session.calls} == {str(START_NS)}
    assert {c["params"]["direction"] for c in session.calls} == {"backward"}


def test_query_range_steps_past_a_timestamp_shared_by_more_than_limit_entries():
    """Three entries at one ns with limit 2 cannot all be paged; the client must not loop forever."""
    t = str(START_NS + 500)
    same = {
        "status": "success",
        "data": {"resultType": "streams", "result": [{"stream": {"a": "1"}, "values": [[t, "x"], [t, "y"]]}]},
    }
    after = {"status": "success", "data": {"resultType": "streams", "result": []}}
    loki, session, _ = client([response(200, same), response(200, same), response(200, after)], limit=2)
    assert [line for _, _, line in loki.query_range(QUERY, WINDOW)] == ["x", "y"]
    assert [c["params"]["start"] for c in session.calls] == [str(START_NS), t, str(START_NS + 501)]


def test_empty_result():
    loki, session, _ = client([handwritten("query_range_empty.json")])
    assert loki.query_range(QUERY, WINDOW) == []
    assert len(session.calls) == 1

    loki, _, _ = client([handwritten("query_range_empty.json")])
    result = loki.read(QUERY, WINDOW)
    assert result.records.height == 0 and result.stats.height == 0
    assert result.unknown == 0 and result.files == []


# -- read: the lines become log records as from files --------------------------------------------


def test_read_parses_each_stream_like_a_log_file():
    loki, _, _ = client([handwritten(p) for p in PAGES])
    result = loki.read(QUERY, WINDOW)

    assert result.files == [TRAIN, VLLM]
    assert result.unknown == 1
    assert result.unknown_by_file == {TRAIN: 0, VLLM: 1}  # the uvicorn access line
    assert result.errors == []
    rows = result.records.select("ts", "source", "line", "kind", "level").rows()
    assert rows == [
        # no timestamp of its own: Loki's (not null, not carried from another line)
        (ts("2026-11-30T00:10:05.500"), TRAIN, 1, "nccl_warn", "WARNING"),
        # its own "[2026-11-30 00:10:07]" wins over Loki's 00:10:07.250
        (ts("2026-11-30T00:10:07"), TRAIN, 2, "nccl_info", "INFO"),
        # its own syslog stamp wins over Loki's 00:10:09.9
        (ts("2026-11-30T00:10:09"), TRAIN, 3, "xid", "ERROR"),
        # vLLM stamp (second precision) wins over Loki's 00:10:05.1
        (ts("2026-11-30T00:10:05"), VLLM, 1, "vllm_stats", "INFO"),
        # traceback line after a vLLM line: a file would carry 00:10:05; Loki knows better
        (ts("2026-11-30T00:10:07.250"), VLLM, 3, "cuda_oom", "ERROR"),
        (ts("2026-11-30T00:10:08"), VLLM, 4, "vllm_stats", None),
    ]
    assert result.records["message"][0].startswith("node1:4242:4251 [0] transport/net_ib.cc:1294")
    assert result.records["message"][3].startswith("Engine 000: Avg prompt throughput: 1234.5")
    assert result.records.schema == pl.Schema(
        {
            "ts": pl.Datetime("ms", "UTC"),
            "source": pl.Utf8,
            "line": pl.Int64,
            "kind": pl.Utf8,
            "level": pl.Utf8,
            "message": pl.Utf8,
        }
    )

    stats = result.stats.rows()
    assert stats == [
        (ts("2026-11-30T00:10:05"), "0", 1234.5, 456.7, 24, 5, 0.731, 0.332, None),
        (ts("2026-11-30T00:10:08"), "0", 10.0, 20.0, 2, 0, None, None, None),
    ]


def test_read_orders_stats_of_lines_without_own_time_by_loki_time():
    """A stats line without a stamp, earlier in Loki time than a stamped one, sorts first."""
    answer = {
        "status": "success",
        "data": {
            "resultType": "streams",
            "result": [
                {
                    "stream": {"job": "vllm"},
                    "values": [
                        [
                            "1795997401000000000",  # 00:10:01
                            "Avg prompt throughput: 1.0 tokens/s, Avg generation throughput: 2.0 tokens/s, "
                            "Running: 1 reqs, Waiting: 0 reqs",
                        ],
                        [
                            "1795997403000000000",
                            "(APIServer pid=7) INFO 11-30 00:10:02 [loggers.py:335] Avg prompt throughput: "
                            "3.0 tokens/s, Avg generation throughput: 4.0 tokens/s, Running: 3 reqs, Waiting: 1 reqs",
                        ],
                        [
                            "1795997405000000000",  # 00:10:05
                            "Avg prompt throughput: 5.0 tokens/s, Avg generation throughput: 6.0 tokens/s, "
                            "Running: 5 reqs, Waiting: 2 reqs",
                        ],
                    ],
                }
            ],
        },
    }
    loki, _, _ = client([response(200, answer)], limit=10)
    result = loki.read('{job="vllm"}', WINDOW)
    assert result.stats.select("ts", "prompt_tokens_per_s", "running").rows() == [
        (ts("2026-11-30T00:10:01"), 1.0, 1),
        (ts("2026-11-30T00:10:02"), 3.0, 3),
        (ts("2026-11-30T00:10:05"), 5.0, 5),
    ]
    assert result.records["ts"].to_list() == [
        ts("2026-11-30T00:10:01"),
        ts("2026-11-30T00:10:02"),
        ts("2026-11-30T00:10:05"),
    ]
    assert result.unknown == 0


def test_stream_names_are_short_and_unique():
    a = (("container", "vllm"), ("job", "vllm"), ("pod", "vllm-0"))
    b = (("container", "vllm"), ("job", "vllm"), ("pod", "vllm-1"))
    c = (("job", "train"), ("pod", "t0"))
    d = (("filename", '/var/log/"odd".log'),)
    names = stream_names([a, b, c, d])
    assert names == {
        a: '{job="vllm", pod="vllm-0"}',
        b: '{job="vllm", pod="vllm-1"}',
        c: '{job="train"}',
        d: '{filename="/var/log/\\"odd\\".log"}',
    }
    # a stream whose labels are a subset of another's is named by all of its labels
    e, f = (("job", "x"),), (("job", "x"), ("pod", "p"))
    assert stream_names([e, f]) == {e: '{job="x"}', f: '{job="x", pod="p"}'}


# -- faults --------------------------------------------------------------------------------------


def test_retries_429_and_5xx_then_succeeds():
    answers = [
        response(429, "too many outstanding requests"),
        response(502, ""),
        handwritten("query_range_empty.json"),
    ]
    loki, session, sleeps = client(answers, backoff_s=0.5)
    assert loki.query_range(QUERY, WINDOW) == []
    assert len(session.calls) == 3
    assert sleeps == [0.5, 1.0]


def test_5xx_forever_names_url_status_and_attempts():
    loki, session, sleeps = client([response(503, "")] * 4, retries=3)
    with pytest.raises(SourceError) as info:
        loki.query_range(QUERY, WINDOW)
    message = str(info.value)
    assert URL + PATH in message and "HTTP 503" in message and "4 attempts" in message
    assert info.value.status == 503 and info.value.url == URL + PATH
    assert len(session.calls) == 4 and sleeps == [0.5, 1.0, 2.0]


def test_status_error_answer():
    loki, _, sleeps = client([handwritten("query_range_error.json")])
    with pytest.raises(SourceError, match=r"HTTP 200: bad_data parse error at line 1, col 8") as info:
        loki.query_range("{job=vllm}", WINDOW)
    assert URL + PATH in str(info.value)
    assert sleeps == []  # a bad query is not retried


def test_bad_query_plain_text_400_is_not_retried():
    loki, session, _ = client([response(400, "parse error : syntax error: unexpected IDENTIFIER\n")])
    with pytest.raises(SourceError, match=r"HTTP 400: error \('parse error : syntax error"):
        loki.query_range("{job=vllm}", WINDOW)
    assert len(session.calls) == 1


def test_malformed_json():
    loki, _, _ = client([response(200, '{"status": "success", "data": {"resultType": "streams", "res')])
    with pytest.raises(SourceError, match="answer is not JSON"):
        loki.query_range(QUERY, WINDOW)


def test_malformed_streams_and_metric_answers():
    bad_values = {
        "status": "success",
        "data": {"resultType": "streams", "result": [{"stream": {}, "values": [["x"]]}]},
    }
    loki, _, _ = client([response(200, bad_values)])
    with pytest.raises(SourceError, match="malformed streams answer"):
        loki.query_range(QUERY, WINDOW)
    matrix = {"status": "success", "data": {"resultType": "matrix", "result": []}}
    loki, _, _ = client([response(200, matrix)])
    with pytest.raises(SourceError, match="metric query"):
        loki.query_range("rate({job='vllm'}[1m])", WINDOW)


# -- the example answers of Loki's HTTP API reference ----------------------------------------------

DOCS_WINDOW = Window("2019-09-23T19:21:00Z", "2019-09-23T19:22:00Z")


def test_the_docs_streams_answer_of_query_range():
    """grafana/loki docs/sources/reference/loki-http-api.md: `curl .../query_range --data-urlencode
    'query={job="varlogs"}'` "gave this response" (direction backward by default: newest first)."""
    loki, session, _ = client([from_loki_docs("query_range_docs_streams.json")], limit=100)
    entries = loki.query_range('{job="varlogs"}', DOCS_WINDOW)
    labels = {"filename": "/var/log/myproject.log", "job": "varlogs", "level": "info"}
    assert entries == [
        (ts("2019-09-23T19:21:32.548155"), labels, "bar"),  # 1569266492548155000 ns
        (ts("2019-09-23T19:21:37.240578"), labels, "foo"),
    ]
    assert len(session.calls) == 1  # 2 entries under the limit of 100: no second page

    loki, _, _ = client([from_loki_docs("query_range_docs_streams.json")], limit=100)
    result = loki.read('{job="varlogs"}', DOCS_WINDOW)
    assert (result.records.height, result.unknown, result.files) == (0, 2, ['{job="varlogs"}'])


def test_the_docs_matrix_answer_is_refused_as_a_metric_query():
    """The same page's `sum(rate({job="varlogs"}[10m])) by (level)` example answer: a matrix, not log lines."""
    loki, _, _ = client([from_loki_docs("query_range_docs_matrix.json")], limit=100)
    with pytest.raises(SourceError, match="metric query") as info:
        loki.query_range('sum(rate({job="varlogs"}[10m])) by (level)', DOCS_WINDOW)
    assert URL + PATH in str(info.value)


def test_connection_refused():
    loki, _, sleeps = client([requests.ConnectionError("[Errno 111] Connection refused")] * 2, retries=1)
    with pytest.raises(SourceError, match=r"cannot connect \(ConnectionError\) after 2 attempts"):
        loki.query_range(QUERY, WINDOW)
    assert sleeps == [0.5]


def test_canary_token_never_in_errors_or_repr(monkeypatch):
    monkeypatch.setenv("PERFKIT_TEST_LOKI_TOKEN", CANARY)
    auth = Auth(token_env="PERFKIT_TEST_LOKI_TOKEN")
    faults = [
        [response(401, f"invalid token {CANARY}")],
        [response(400, f"bad request; Authorization: Bearer {CANARY}")],
        [response(200, {"status": "error", "error": f"tenant token {CANARY} rejected"})],
        [response(200, f"<html>{CANARY}</html>")],
        [response(500, CANARY)] * 2,
        [requests.ConnectionError(f"refused {CANARY}")] * 2,
        [requests.Timeout(CANARY)] * 2,
    ]
    for answers in faults:
        loki, session, _ = client(answers, auth=auth, retries=1)
        assert session.headers["Authorization"] == f"Bearer {CANARY}"  # the token is used...
        with pytest.raises(SourceError) as info:
            loki.query_range(QUERY, WINDOW)
        err = info.value
        for text in (str(err), repr(err), repr(err.args), str(err.url), repr(loki)):  # ...and never shown
            assert CANARY not in text, text
        assert err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)
