"""Hostile input: bundles, log files and HTTP answers built to hurt are refused, bounded and named.

The cases that would eat memory or block without the bounds (a 50 MB label value, /dev/zero, a
FIFO) run in a child process with a 4 GiB address-space limit and a time limit, so a regression
fails the test instead of taking the machine down or hanging the run.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

import perfkit
from perfkit.core.frames import Window
from perfkit.engine import ops
from perfkit.errors import BundleError, SourceError
from perfkit.sources.alertmanager import AlertmanagerClient
from perfkit.sources.bundle import load_bundle
from perfkit.sources.http import HttpConfig
from perfkit.sources.logs import read_logs
from perfkit.sources.loki import LokiClient
from perfkit.sources.openmetrics import read_file
from perfkit.sources.prometheus import PrometheusClient, PrometheusEngine

REPO = Path(__file__).resolve().parents[2]
PERFKIT_ROOT = Path(perfkit.__file__).resolve().parents[1]
SCENARIO = REPO / "data" / "scenarios" / "p95-prefill-interference"
WINDOW = Window("2026-11-12T01:55:00Z", "2026-11-12T02:35:00Z")
T0 = datetime(2026, 11, 12, 2, 0, tzinfo=UTC)
OOM = "2026-11-12 02:10:00,000 torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"


def isolated(code: str, *, timeout_s: float = 60, mem_gib: int = 4) -> dict:
    """Run ``code`` (which sets ``out``, a dict) in a child with a memory cap; return ``out`` with
    ``error`` (exception type), ``message`` and ``maxrss_mb`` (the child's peak resident size)."""
    body = textwrap.indent(textwrap.dedent(code).strip(), "    ")
    script = (
        "import json, resource\n"
        f"resource.setrlimit(resource.RLIMIT_AS, ({mem_gib} * 2**30, {mem_gib} * 2**30))\n"
        "out = {}\n"
        "try:\n"
        f"{body}\n"
        "except BaseException as exc:\n"
        "    out['error'], out['message'] = type(exc).__name__, str(exc)[:2000]\n"
        # VmHWM: this process's own peak. ru_maxrss would carry the parent's peak over the exec
        # (on Linux the rusage high-water mark survives fork+exec), so it grew with pytest's size.
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0]\n"
        "out['maxrss_mb'] = int(hwm.split()[1]) / 1024\n"
        "print(json.dumps(out))\n"
    )
    proc = subprocess.run(  # in the folder holding the perfkit this test imported
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout_s, cwd=PERFKIT_ROOT
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def om_file(path: Path, label_value: str = "chat-api-0") -> Path:
    path.write_text(
        "# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{instance="{label_value}"}} 3 1794448800\n'
        'vllm:num_requests_running{instance="chat-api-1"} 4 1794448800\n'
        "# EOF\n"
    )
    return path


def small_bundle(root: Path) -> Path:
    """incident.yaml of a real scenario, a small metrics file, a log with a vLLM line."""
    root.mkdir(parents=True)
    shutil.copy(SCENARIO / "incident.yaml", root / "incident.yaml")
    (root / "metrics").mkdir()
    om_file(root / "metrics" / "vllm.om")
    (root / "logs").mkdir()
    (root / "logs" / "vllm.log").write_text("INFO 11-12 02:00:00 [api_server.py:1] started\n")
    return root


def open_writer_later(fifo: Path, after_s: float) -> threading.Timer:
    """Unblock whoever is stuck opening ``fifo`` for reading (the unfixed code) after ``after_s``."""

    def writer() -> None:
        with contextlib.suppress(OSError):  # no reader waiting: nobody to unblock
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    timer = threading.Timer(after_s, writer)
    timer.start()
    return timer


# -- OpenMetrics -------------------------------------------------------------------------------------


def test_50mb_label_value_is_a_bundle_error_fast_and_small(tmp_path):
    """A 50 MB label value used to take ~9 GB of memory (and minutes); now the line is named."""
    path = tmp_path / "vllm.om"
    om_file(path, label_value="A" * 50_000_000)
    out = isolated(
        f"""
        import time
        from perfkit.sources.openmetrics import read_file
        t = time.perf_counter()
        try:
            read_file({str(path)!r})
        finally:
            out["seconds"] = time.perf_counter() - t
        """
    )
    assert out.get("error") == "BundleError", out
    assert out["message"].startswith(f"{path}:2: line of 47.7 MiB, longer than the 64 KiB limit")
    assert out["seconds"] < 5
    assert out["maxrss_mb"] < 500, out


def test_long_label_value_under_the_line_cap_is_refused(tmp_path):
    path = om_file(tmp_path / "vllm.om", label_value="x" * 40_000)
    with pytest.raises(BundleError, match=r"label instance has a value of 39\.1 KiB") as info:
        read_file(path)
    assert info.value.line == 2
    assert read_file(om_file(tmp_path / "ok.om", label_value="x" * 1000)).frames  # real sizes load


def test_metrics_file_that_is_dev_zero_or_a_fifo_is_refused(tmp_path):
    zero = tmp_path / "zero.om"
    zero.symlink_to("/dev/zero")
    fifo = tmp_path / "fifo.om"
    os.mkfifo(fifo)
    timer = open_writer_later(fifo, 10)
    try:
        out = isolated(
            f"""
            from perfkit.sources.openmetrics import read_file
            messages = []
            for name in ({str(zero)!r}, {str(fifo)!r}):
                try:
                    read_file(name)
                    messages.append("read")
                except Exception as exc:
                    messages.append(type(exc).__name__ + ": " + str(exc))
            out["messages"] = messages
            """
        )
    finally:
        timer.cancel()
    assert out["messages"] == [
        f"BundleError: {zero}: refused: not a regular file (a character device)",
        f"BundleError: {fifo}: refused: not a regular file (a FIFO)",
    ], out
    assert out["maxrss_mb"] < 500


def test_oversized_metrics_file_is_refused_before_reading(tmp_path):
    path = tmp_path / "sparse.om"
    with path.open("wb") as fh:
        fh.truncate(3 * 2**30)  # sparse: 3 GiB of NULs that would take memory and time to read
    out = isolated(
        f"""
        import time
        from perfkit.sources.openmetrics import read_file
        t = time.perf_counter()
        try:
            read_file({str(path)!r})
        finally:
            out["seconds"] = time.perf_counter() - t
        """
    )
    assert out.get("error") == "BundleError", out
    assert out["message"] == f"{path}: refused: file is 3 GiB, over the 2 GiB limit"
    assert out["seconds"] < 1 and out["maxrss_mb"] < 500


# -- logs ----------------------------------------------------------------------------------------------


def test_giant_log_line_is_skipped_counted_and_never_held_whole(tmp_path):
    path = tmp_path / "vllm.log"
    with path.open("w") as fh:
        fh.write("INFO 11-12 02:00:00 [api_server.py:1] started\n")
        fh.write("INFO 11-12 02:00:01 [x.py:1] " + "B" * 100_000_000 + "\n")  # 100 MB, one line
        fh.write(OOM)
        fh.write("C" * 70_000)  # a second long line, the last, without a newline
    tracemalloc.start()
    try:
        result = read_logs(path, window=WINDOW)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.errors == ["vllm.log:2: line longer than 65536 bytes, skipped (and 1 more such line(s))"]
    assert result.records.select("line", "kind").rows() == [(1, "vllm"), (3, "cuda_oom")]
    assert peak < 20 * 2**20, f"peak {peak / 2**20:.0f} MiB of Python memory while reading"


def test_lines_built_to_backtrack_parse_in_linear_time(tmp_path):
    """Lines under the length cap that made the NCCL, Xid and DataLoader patterns rescan the line
    from every position (a 64 KiB "NCCL aaa..." line took ~40 s); real lines still parse."""
    path = tmp_path / "train.log"
    n = 60_000
    lines = [
        "NCCL " + "a" * n,
        "NCCL WARN " + "[" * n,
        "NVRM: Xid (" * (n // 11),
        "DataLoader worker (pid" * (n // 22),
        "[rank0]:node-1:123:456 [0] transport/net.cc:123 (ncclFn) NCCL WARN NET/IB : completion error 12",
        OOM.rstrip("\n"),
    ]
    path.write_text("\n".join(lines) + "\n")
    t = time.perf_counter()
    result = read_logs(path, window=WINDOW)
    assert time.perf_counter() - t < 2
    assert result.records.select("line", "kind").rows() == [(5, "nccl_warn"), (6, "cuda_oom")]
    assert result.unknown == 4


def test_log_fifo_and_device_are_skipped_with_a_reason(tmp_path):
    fifo = tmp_path / "pipe.log"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.log"
    zero.symlink_to("/dev/zero")
    (tmp_path / "ok.log").write_text(OOM)
    timer = open_writer_later(fifo, 5)  # without the check, the reader would wait for a writer
    try:
        t = time.perf_counter()
        result = read_logs(tmp_path, window=WINDOW)
        assert time.perf_counter() - t < 3
    finally:
        timer.cancel()
    assert result.errors == [
        "pipe.log: not a regular file (a FIFO), skipped",
        "zero.log: not a regular file (a character device), skipped",
    ]
    assert result.files == ["ok.log"] and result.records["kind"].to_list() == ["cuda_oom"]


# -- bundles with symlinks -----------------------------------------------------------------------------


def test_logs_folder_linked_outside_the_bundle_is_not_read(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "train.log").write_text(OOM)
    # control: the same line inside a bundle does change the evidence (an OOM record)
    inside = small_bundle(tmp_path / "inside")
    shutil.copy(elsewhere / "train.log", inside / "logs" / "train.log")
    assert "cuda_oom" in load_bundle(inside).logs["kind"].to_list()

    bundle = small_bundle(tmp_path / "bundle")
    shutil.rmtree(bundle / "logs")
    (bundle / "logs").symlink_to(elsewhere, target_is_directory=True)
    b = load_bundle(bundle)
    assert b.logs.height == 0 and b.files["logs"] == []
    assert f"logs: logs/ resolves outside the bundle (to {elsewhere}), not read" in b.missing


def test_log_and_event_files_linked_outside_are_refused_inside_links_are_fine(tmp_path):
    secret = tmp_path / "secret.log"
    secret.write_text(OOM)
    bundle = small_bundle(tmp_path / "bundle")
    (bundle / "logs" / "evil.log").symlink_to(secret)
    (bundle / "logs" / "evil2.log").symlink_to("../../secret.log")
    (bundle / "raw").mkdir()
    (bundle / "raw" / "kept.log").write_text(OOM)
    (bundle / "logs" / "kept.log").symlink_to("../raw/kept.log")  # stays inside: read
    (bundle / "events.csv").symlink_to(tmp_path / "events.csv")
    (tmp_path / "events.csv").write_text(
        "ts,kind,service,version,detail\n2026-11-12T02:00:00Z,deploy,x,v9,\n"
    )
    b = load_bundle(bundle)
    assert b.files["logs"] == ["logs/kept.log", "logs/vllm.log"]
    assert b.logs.filter(b.logs["kind"] == "cuda_oom")["source"].to_list() == ["kept.log"]
    assert f"logs: logs/evil.log resolves outside the bundle (to {secret}), not read" in b.missing
    assert f"logs: logs/evil2.log resolves outside the bundle (to {secret}), not read" in b.missing
    assert b.events.height == 0
    assert (
        f"events: events.csv resolves outside the bundle (to {tmp_path / 'events.csv'}), not read"
        in b.missing
    )


def test_bundle_metrics_linked_to_dev_zero_or_a_fifo_are_skipped(tmp_path):
    bundle = small_bundle(tmp_path / "bundle")
    (bundle / "metrics" / "a.om").symlink_to("/dev/zero")
    os.mkfifo(bundle / "metrics" / "b.om")
    (bundle / "logs" / "c.log").symlink_to("/dev/zero")
    timer = open_writer_later(bundle / "metrics" / "b.om", 10)
    try:
        out = isolated(
            f"""
            from perfkit.sources.bundle import load_bundle
            b = load_bundle({str(bundle)!r})
            out["missing"], out["files"] = b.missing, b.files
            out["series"] = sorted(b.store.frames)
            """
        )
    finally:
        timer.cancel()
    assert "error" not in out, out
    assert out["files"] == {"metrics": ["metrics/vllm.om"], "logs": ["logs/vllm.log"]}
    assert out["series"] == ["vllm:num_requests_running"]
    assert "metrics: metrics/a.om resolves outside the bundle (to /dev/zero), not read" in out["missing"]
    assert "metrics: metrics/b.om is not a regular file (a FIFO), not read" in out["missing"]
    assert "logs: logs/c.log resolves outside the bundle (to /dev/zero), not read" in out["missing"]
    assert out["maxrss_mb"] < 500


def test_incident_yaml_linked_outside_is_refused(tmp_path):
    bundle = small_bundle(tmp_path / "bundle")
    (bundle / "incident.yaml").rename(tmp_path / "incident.yaml")
    (bundle / "incident.yaml").symlink_to(tmp_path / "incident.yaml")
    with pytest.raises(BundleError, match="resolves outside the bundle") as info:
        load_bundle(bundle)
    assert info.value.path == str(bundle / "incident.yaml")


# -- HTTP answers ------------------------------------------------------------------------------------


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    answer: Callable[[str], tuple[int, bytes]]


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        status, body = self.server.answer(self.path)  # type: ignore[attr-defined]
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def answering() -> Iterator[Callable[[Callable[[str], tuple[int, bytes]]], str]]:
    """A real HTTP server on 127.0.0.1 answering GETs with ``answer(path) -> (status, body)``."""
    servers: list[_Server] = []

    def start(answer: Callable[[str], tuple[int, bytes]]) -> str:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.answer = answer
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


@pytest.mark.parametrize("depth", [100_000, 65])
def test_deeply_nested_answers_are_source_errors(answering, depth):
    prom = answering(lambda path: (200, ('{"status": "success", "data": ' + nested(depth) + "}").encode()))
    with pytest.raises(SourceError) as info:
        PrometheusClient(HttpConfig(prom, retries=0)).query("up", T0)
    assert str(info.value) == f"{prom}/api/v1/query: HTTP 200: answer nested deeper than 64 levels"

    am = answering(lambda path: (200, nested(depth, "{}").encode()))
    with pytest.raises(SourceError, match=r"/api/v2/alerts: HTTP 200: answer nested deeper than 64 levels"):
        AlertmanagerClient(HttpConfig(am, retries=0)).alerts()

    loki = answering(lambda path: (200, ('{"status": "success", "data": ' + nested(depth) + "}").encode()))
    with pytest.raises(SourceError, match=r"/loki/api/v1/query_range: HTTP 200: answer nested deeper"):
        LokiClient(HttpConfig(loki, retries=0)).query_range('{job="vllm"}', WINDOW)


def test_brackets_inside_strings_do_not_count_and_real_answers_pass(answering):
    deep_text = nested(5000, "")  # a label value full of brackets is text, not nesting
    body = {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": {"path": deep_text}, "value": [1.5, "2"]}]},
    }
    url = answering(lambda path: (200, json.dumps(body).encode()))
    assert PrometheusClient(HttpConfig(url, retries=0)).query("up", T0) == body["data"]
    at_cap = {"status": "success", "data": json.loads(nested(62))}  # 64 levels in all: decoded ...
    url = answering(lambda path: (200, json.dumps(at_cap).encode()))
    assert (
        PrometheusClient(HttpConfig(url, retries=0)).get("/api/v1/query", {"query": "up"}) == at_cap["data"]
    )
    with pytest.raises(SourceError, match=r"answer's data is not a mapping"):  # ... but not the shape
        PrometheusClient(HttpConfig(url, retries=0)).query("up", T0)


def test_answer_larger_than_the_cap_is_a_source_error(answering):
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": ["x" * 2**20]}})
    url = answering(lambda path: (200, body.encode()))
    with pytest.raises(SourceError, match=r"/api/v1/query: HTTP 200: answer larger than the 512 KiB limit"):
        client = PrometheusClient(HttpConfig(url, retries=0))
        client.max_answer_bytes = 512 * 2**10
        client.query("up", T0)


# -- timeouts ------------------------------------------------------------------------------------------


@pytest.fixture
def silent_server() -> Iterator[Callable[[float], str]]:
    """A TCP server that accepts connections and never answers (or, with ``trickle_s``, sends
    headers and then one byte every ``trickle_s`` seconds, for at most 20 s)."""
    stop = threading.Event()
    sockets: list[socket.socket] = []

    def start(trickle_s: float = 0.0) -> str:
        listener = socket.create_server(("127.0.0.1", 0))
        listener.settimeout(0.1)
        sockets.append(listener)

        def serve() -> None:
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                sockets.append(conn)
                if trickle_s:
                    threading.Thread(target=trickle, args=(conn,), daemon=True).start()

        def trickle(conn: socket.socket) -> None:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n")
                until = time.monotonic() + 20
                while not stop.is_set() and time.monotonic() < until:
                    conn.sendall(b" ")
                    time.sleep(trickle_s)
                conn.close()
            except OSError:
                pass

        threading.Thread(target=serve, daemon=True).start()
        return f"http://127.0.0.1:{listener.getsockname()[1]}"

    yield start
    stop.set()
    for s in sockets:
        s.close()


def test_server_that_never_answers_fails_within_the_total_deadline(silent_server):
    url = silent_server()
    t = time.perf_counter()
    with pytest.raises(SourceError) as info:
        PrometheusClient(HttpConfig(url, timeout_s=0.5)).query("up", T0)
    elapsed = time.perf_counter() - t
    # 4 x timeout by default: attempt (0.5) + backoff (0.5) + attempt (0.5), then the next backoff
    # (1 s) would pass the 2 s deadline, so it stops
    assert elapsed < 2.5
    message = str(info.value)
    assert message.startswith(f"{url}/api/v1/query: no answer within 0.5 s (total ")
    assert message.endswith(" s over 2 attempts)")


@pytest.mark.parametrize("make", [AlertmanagerClient, LokiClient])
def test_total_timeout_is_configurable_on_every_client(silent_server, make):
    url = silent_server()
    client = make(HttpConfig(url, timeout_s=0.3, total_timeout_s=1.0, backoff_s=0.1))
    t = time.perf_counter()
    with pytest.raises(SourceError, match=r": no answer within 0\.3 s \(total \d\.\d s over \d attempts\)"):
        if make is LokiClient:
            client.query_range('{job="vllm"}', WINDOW)
        else:
            client.alerts()
    assert time.perf_counter() - t < 1.8


def test_answer_trickling_byte_by_byte_meets_the_deadline(silent_server):
    url = silent_server(trickle_s=0.05)  # each byte well inside the 0.5 s read timeout
    t = time.perf_counter()
    with pytest.raises(SourceError, match=r"no answer within 0\.5 s \(total \d\.\d s over 1 attempt\)"):
        PrometheusClient(HttpConfig(url, timeout_s=0.5, total_timeout_s=1.5)).query("up", T0)
    assert time.perf_counter() - t < 3


# -- answers of the wrong shape ------------------------------------------------------------------------
# Valid JSON, under the size and depth caps, but not what the API documents: every client checks the
# shape in one pass and says which part is wrong, never a TypeError/KeyError/ValueError traceback.

METRIC_NAMES = [  # enough for triage to ask instant and range queries
    "DCGM_FI_DEV_GPU_UTIL",
    "up",
    "vllm:e2e_request_latency_seconds_bucket",
    "vllm:gpu_cache_usage_perc",
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:time_to_first_token_seconds_bucket",
]
GOOD_VECTOR = {"resultType": "vector", "result": [{"metric": {"pod": "a"}, "value": [1794448800, "1"]}]}
BIG = "x" * (20 * 2**10)


def series(metric: object = None, values: object = None) -> dict:
    return {"metric": {"pod": "a"} if metric is None else metric, "values": values or [[1794448800, "1"]]}


def matrix(*result: object) -> dict:
    return {"resultType": "matrix", "result": list(result)}


# (data of the answer, the message after "answer's ") for /api/v1/query and /api/v1/query_range
WRONG_SHAPES = {
    "60 nested lists": (
        {"resultType": "matrix", "result": [json.loads(nested(60))]},
        "data.result[0] is not a series (a mapping with metric and values; it is a list of 1)",
    ),
    "data a list of lists": (
        [[1, 2], [3]],
        "data is not a mapping with resultType and result (it is a list of 2)",
    ),
    "data a string": (
        "matrix",
        "data is not a mapping with resultType and result (it is the string 'matrix')",
    ),
    "result a mapping": (
        {"resultType": "matrix", "result": {}},
        "data.result is not a list of series (it is a mapping)",
    ),
    "result missing": ({"resultType": "matrix"}, "data.result is not a list of series (it is missing)"),
    "resultType unknown": ({"resultType": "table", "result": []}, "data.resultType is 'table', not 'matrix'"),
    "resultType a list": (
        {"resultType": ["matrix"], "result": []},
        "data.resultType is a list of 1, not 'matrix'",
    ),
    "metric a list": (
        matrix(series(), series(["pod", "a"])),
        "data.result[1].metric is not a mapping of label names to strings (it is a list of 2)",
    ),
    "label value a number": (
        matrix(series({"pod": 3})),
        "data.result[0].metric is not a mapping of label names to strings ('pod' is the number 3)",
    ),
    "label value null": (
        matrix(series({"pod": None})),
        "data.result[0].metric is not a mapping of label names to strings ('pod' is null)",
    ),
    "label value a list": (
        matrix(series({"pod": ["a"]})),
        "data.result[0].metric is not a mapping of label names to strings ('pod' is a list of 1)",
    ),
    "label value of 20 KiB": (
        matrix(series({"pod": BIG})),
        "data.result[0].metric has a value of 20 KiB (label 'pod'), over the 16 KiB limit",
    ),
    "values a mapping": (
        matrix({"metric": {}, "values": {"1": "2"}}),
        "data.result[0].values is not a list of [timestamp, value] pairs (it is a mapping)",
    ),
    "values not pairs": (
        matrix(series(values=[[1794448800, "1"], [1794448815, "2", "3"]])),
        "data.result[0].values[1] is not a [timestamp, value] pair (it is a list of 3)",
    ),
    "values of numbers": (
        matrix(series(values=[1794448800, 1794448815])),
        "data.result[0].values[0] is not a [timestamp, value] pair (it is the number 1794448800)",
    ),
    "sample value an object": (
        matrix(series(values=[[1794448800, {"v": 1}]])),
        "data.result[0].values[0][1] is not a sample value (a number in a string; it is a mapping)",
    ),
    "sample value a number": (
        matrix(series(values=[[1794448800, 1.5]])),
        "data.result[0].values[0][1] is not a sample value (a number in a string; it is the number 1.5)",
    ),
    "sample value not a number": (
        matrix(series(values=[[1794448800, "1"], [1794448815, "fast"]])),
        "data.result[0].values[1][1] is not a sample value (a number in a string; it is the string 'fast')",
    ),
    "timestamp a string": (
        matrix(series(values=[["1794448800", "1"]])),
        "data.result[0].values[0][0] is not a timestamp (a number of seconds, years 1 to 9999; "
        "it is the string '1794448800')",
    ),
    "timestamp a boolean": (
        matrix(series(values=[[True, "1"]])),
        "data.result[0].values[0][0] is not a timestamp (a number of seconds, years 1 to 9999; "
        "it is the boolean true)",
    ),
    "timestamp past year 9999": (
        matrix(series(values=[[1e300, "1"]])),
        "data.result[0].values[0][0] is not a timestamp (a number of seconds, years 1 to 9999; "
        "it is the number 1e+300)",
    ),
    "series a number": (
        matrix(series(), 7),
        "data.result[1] is not a series (a mapping with metric and values; it is the number 7)",
    ),
}


def prometheus_answering(answering, query: object, query_range: object, names: object = METRIC_NAMES) -> str:
    """A Prometheus on 127.0.0.1 answering with these ``data`` (label values, instant, range)."""

    def answer(path: str) -> tuple[int, bytes]:
        route = path.split("?")[0]
        data = names if "/label/" in route else query_range if route.endswith("/query_range") else query
        return 200, json.dumps({"status": "success", "data": data}).encode()

    return answering(answer)


@pytest.mark.parametrize("case", WRONG_SHAPES)
def test_prometheus_answers_of_the_wrong_shape_are_source_errors(answering, case):
    data, message = WRONG_SHAPES[case]
    url = prometheus_answering(answering, data, data)
    client = PrometheusClient(HttpConfig(url, retries=0))
    with pytest.raises(SourceError) as info:
        client.query_range("up", T0, T0.replace(hour=3), 15)
    assert str(info.value) == f"{url}/api/v1/query_range: HTTP 200: answer's {message}"
    assert info.value.url == f"{url}/api/v1/query_range" and info.value.status == 200

    with pytest.raises(SourceError) as info:  # the instant query takes the four result types
        client.query("up", T0)
    assert str(info.value).startswith(f"{url}/api/v1/query: HTTP 200: answer's {message.split(', not')[0]}")

    engine = PrometheusEngine(client, start=T0, end=T0.replace(hour=3), dialect="prometheus")
    for call in (
        lambda: engine.range(ops.Selector("up"), T0, T0.replace(hour=3), 15),
        lambda: engine.instant(ops.Selector("up"), T0),
        lambda: engine.raw("up", T0, T0.replace(hour=3)),
    ):
        with pytest.raises(
            SourceError, match=r"^http://127\.0\.0\.1:\d+/api/v1/query(_range)?: HTTP 200: answer's "
        ):
            call()


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"resultType": "scalar", "result": ["1794448800", "1"]}, "data.result[0] is not a timestamp"),
        ({"resultType": "scalar", "result": [1794448800, "x"]}, "data.result[1] is not a sample value"),
        (
            {"resultType": "scalar", "result": [[1794448800, "1"]]},
            "data.result is not a [timestamp, value] pair",
        ),
        ({"resultType": "string", "result": [1794448800, 3]}, "data.result[1] is not a sample value"),
        ({"resultType": "vector", "result": [{"metric": {}, "value": "1"}]}, "data.result[0].value is not a"),
        (
            {"resultType": "vector", "result": [{"metric": {}, "value": [1, None]}]},
            "data.result[0].value[1] is not",
        ),
    ],
)
def test_instant_answers_of_the_wrong_shape_are_source_errors(answering, data, message):
    url = prometheus_answering(answering, data, data)
    with pytest.raises(SourceError) as info:
        PrometheusClient(HttpConfig(url, retries=0)).query("up", T0)
    assert str(info.value).startswith(f"{url}/api/v1/query: HTTP 200: answer's {message}")


def test_result_types_the_caller_cannot_use_are_refused(answering):
    text = {"resultType": "string", "result": [1794448800, "hello"]}
    url = prometheus_answering(answering, text, GOOD_VECTOR)
    client = PrometheusClient(HttpConfig(url, retries=0))
    assert client.query("up", T0) == text  # a well-formed string answer is the API's ...
    engine = PrometheusEngine(client, start=T0, end=T0.replace(hour=3), dialect="prometheus")
    with pytest.raises(
        SourceError, match=r"/api/v1/query: HTTP 200: answer's data.resultType is 'string', not "
    ):
        engine.instant(ops.Selector("up"), T0)  # ... but not a number
    with pytest.raises(
        SourceError,
        match=r"/api/v1/query_range: HTTP 200: answer's data.resultType is 'vector', not 'matrix'$",
    ):
        client.query_range("up", T0, T0.replace(hour=3), 15)


@pytest.mark.parametrize(
    ("names", "message"),
    [
        ({"a": 1}, "data is not a list of label values (it is a mapping)"),
        ([["up"]], "data[0] is not a label value (a string; it is a list of 1)"),
        (["up", None], "data[1] is not a label value (a string; it is null)"),
        (["up", 7], "data[1] is not a label value (a string; it is the number 7)"),
        (["up", BIG], "data[1] is a label value of 20 KiB, over the 16 KiB limit"),
    ],
)
def test_label_values_of_the_wrong_shape_are_source_errors(answering, names, message):
    url = prometheus_answering(answering, GOOD_VECTOR, matrix(), names)
    with pytest.raises(SourceError) as info:
        PrometheusClient(HttpConfig(url, retries=0)).label_values("__name__", T0, T0.replace(hour=3))
    assert str(info.value) == f"{url}/api/v1/label/__name__/values: HTTP 200: answer's {message}"


def test_well_formed_answers_still_read(answering):
    """The checks refuse shapes, not values: NaN/Inf strings, a label value of 16 KiB, float and int
    times, series without values (native histograms) and empty results are read as before."""
    samples = [[1794448800, "NaN"], [1794448815.5, "+Inf"], [1794448830, "-Inf"], [1794448845, "1e-3"]]
    data = matrix(series({"pod": "é" * 8192}, samples), {"metric": {"pod": "h"}, "histograms": []})
    url = prometheus_answering(answering, GOOD_VECTOR, data)
    client = PrometheusClient(HttpConfig(url, retries=0))
    got = client.query_range("up", T0, T0.replace(hour=3), 15)
    assert got[0]["values"] == samples and got[1] == {"metric": {"pod": "h"}, "values": []}
    engine = PrometheusEngine(client, start=T0, end=T0.replace(hour=3), dialect="prometheus")
    frame = engine.range(ops.Selector("up"), T0, T0.replace(hour=3), 15)
    assert frame.height == 4 and frame["value"][3] == 0.001
    assert engine.instant(ops.Selector("up"), T0)["value"].to_list() == [1.0]
    assert engine.metric_names() == sorted(METRIC_NAMES)


CLI_SHAPES = [
    "60 nested lists",
    "data a list of lists",
    "metric a list",
    "values not pairs",
    "sample value an object",
    "label value a list",
    "resultType unknown",
]


@pytest.mark.parametrize("where", ["query", "query_range", "label values"])
@pytest.mark.parametrize("case", CLI_SHAPES)
def test_triage_against_a_server_of_the_wrong_shape_says_one_line(answering, case, where):
    from click.testing import CliRunner

    from perfkit.app.cli.main import cli

    data, _ = WRONG_SHAPES[case]
    if where == "label values":
        url = prometheus_answering(answering, GOOD_VECTOR, matrix(), data)
    elif where == "query":
        url = prometheus_answering(answering, data, matrix())
    else:
        url = prometheus_answering(answering, GOOD_VECTOR, data)
    result = CliRunner().invoke(cli, ["triage", "--prometheus", url, "--since", "1h", "--timeout", "2"])
    assert result.exit_code == 2, (result.output, result.exc_info)
    assert isinstance(result.exception, SystemExit)
    stderr = result.stderr if hasattr(result, "stderr") else result.output
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith(f"perfkit: {url}/api/v1/"), lines[0]
    assert ": HTTP 200: answer's data" in lines[0]


ALERT_SHAPES = {
    "a mapping": ({"alerts": []}, "answer is a mapping (want a JSON list of alerts)"),
    "a list of lists": ([json.loads(nested(60))], "answer[0] is a list of 1 (want an alert, a mapping)"),
    "labels a list": (
        [{"labels": ["alertname", "X"]}],
        "answer[0].labels is not a mapping of label names to strings (it is a list of 2)",
    ),
    "label value a number": (
        [{"labels": {"alertname": "X"}}, {"labels": {"alertname": 5}}],
        "answer[1].labels is not a mapping of label names to strings ('alertname' is the number 5)",
    ),
    "label value of 20 KiB": (
        [{"labels": {"alertname": BIG}}],
        "answer[0].labels has a value of 20 KiB (label 'alertname'), over the 16 KiB limit",
    ),
    "annotation null": (
        [{"labels": {}, "annotations": {"summary": None}}],
        "answer[0].annotations is not a mapping of names to strings ('summary' is null)",
    ),
    "startsAt a number": (
        [{"labels": {}, "startsAt": 1794448800}],
        "answer[0].startsAt is not a time (an RFC 3339 string; it is the number 1794448800)",
    ),
    "status a string": (
        [{"labels": {}, "status": "active"}],
        "answer[0].status is not a mapping (it is the string 'active')",
    ),
    "status.state a list": (
        [{"labels": {}, "status": {"state": []}}],
        "answer[0].status.state is not a string (it is a list of 0)",
    ),
}


@pytest.mark.parametrize("case", ALERT_SHAPES)
def test_alertmanager_answers_of_the_wrong_shape_are_source_errors(answering, case):
    body, message = ALERT_SHAPES[case]
    url = answering(lambda path: (200, json.dumps(body).encode()))
    client = AlertmanagerClient(HttpConfig(url, retries=0))
    for call in (client.alerts, lambda: client.timeline_events(WINDOW)):
        with pytest.raises(SourceError) as info:
            call()
        assert str(info.value) == f"{url}/api/v2/alerts: HTTP 200: {message}"
        assert info.value.status == 200


def test_alertmanager_well_formed_answer_still_reads(answering):
    body = [
        {
            "labels": {"alertname": "HighLatency", "service": "chat"},
            "annotations": {"summary": "p95 over SLO", "description": "d" * 30_000},
            "startsAt": "2026-11-12T02:00:00.123456789Z",
            "endsAt": "2026-11-12T02:10:00Z",
            "status": {"state": "active", "silencedBy": [], "inhibitedBy": []},
            "fingerprint": "abc",
            "receivers": [{"name": "x"}],
        }
    ]
    url = answering(lambda path: (200, json.dumps(body).encode()))
    client = AlertmanagerClient(HttpConfig(url, retries=0), clock=lambda: T0)
    assert client.alerts() == body
    assert client.timeline_events(WINDOW)["detail"].to_list() == ["HighLatency firing: p95 over SLO"]


def streams(*result: object) -> dict:
    return {"resultType": "streams", "result": list(result)}


NS = "1794448800000000000"
LOKI_SHAPES = {
    "60 nested lists": (
        streams(json.loads(nested(60))),
        "malformed streams answer: data.result[0] is not a stream (a mapping with stream and values; "
        "it is a list of 1)",
    ),
    "result a mapping": (
        {"resultType": "streams", "result": {}},
        "malformed streams answer: data.result is not a list of streams (it is a mapping)",
    ),
    "resultType unknown": (
        {"resultType": ["streams"], "result": []},
        "answer's data.resultType is a list of 1, not 'streams' (is this a metric query?)",
    ),
    "stream a list": (
        streams({"stream": ["job"], "values": []}),
        "malformed streams answer: data.result[0].stream is not a mapping of label names to strings "
        "(it is a list of 1)",
    ),
    "label value a number": (
        streams({"stream": {"job": 1}, "values": []}),
        "malformed streams answer: data.result[0].stream is not a mapping of label names to strings "
        "('job' is the number 1)",
    ),
    "label value of 20 KiB": (
        streams({"stream": {"job": BIG}, "values": []}),
        "malformed streams answer: data.result[0].stream has a value of 20 KiB (label 'job'), over the 16 KiB limit",
    ),
    "values a mapping": (
        streams({"stream": {}, "values": {NS: "x"}}),
        "malformed streams answer: data.result[0].values is not a list of [time, line] pairs (it is a mapping)",
    ),
    "value not a pair": (
        streams({"stream": {}, "values": [[NS, "a"], [NS]]}),
        "malformed streams answer: data.result[0].values[1] is not a [time, line] pair (it is a list of 1)",
    ),
    "time a number": (
        streams({"stream": {}, "values": [[1794448800000000000, "a"]]}),
        "malformed streams answer: data.result[0].values[0][0] is not a time (ns since 1970 as a string "
        "of digits, years 1970 to 9999; it is the number 1794448800000000000)",
    ),
    "time not digits": (
        streams({"stream": {}, "values": [["-1", "a"]]}),
        "malformed streams answer: data.result[0].values[0][0] is not a time (ns since 1970 as a string "
        "of digits, years 1970 to 9999; it is the string '-1')",
    ),
    "time past year 9999": (
        streams({"stream": {}, "values": [["9" * 21, "a"]]}),
        "malformed streams answer: data.result[0].values[0][0] is not a time (ns since 1970 as a string "
        f"of digits, years 1970 to 9999; it is the string {'9' * 21!r})",
    ),
    "line an object": (
        streams({"stream": {}, "values": [[NS, {"msg": "a"}]]}),
        "malformed streams answer: data.result[0].values[0][1] is not a log line (a string; it is a mapping)",
    ),
    "metadata a string": (
        streams({"stream": {}, "values": [[NS, "a", "meta"]]}),
        "malformed streams answer: data.result[0].values[0][2] is not a mapping of metadata "
        "(it is the string 'meta')",
    ),
}


@pytest.mark.parametrize("case", LOKI_SHAPES)
def test_loki_answers_of_the_wrong_shape_are_source_errors(answering, case):
    data, message = LOKI_SHAPES[case]
    url = answering(lambda path: (200, json.dumps({"status": "success", "data": data}).encode()))
    client = LokiClient(HttpConfig(url, retries=0))
    for call in (
        lambda: client.query_range('{job="vllm"}', WINDOW),
        lambda: client.read('{job="vllm"}', WINDOW),
    ):
        with pytest.raises(SourceError) as info:
            call()
        assert str(info.value) == f"{url}/loki/api/v1/query_range: HTTP 200: {message}"
        assert info.value.status == 200


def test_loki_well_formed_answer_still_reads(answering):
    data = streams(
        {"stream": {"job": "vllm"}, "values": [[NS, OOM.rstrip("\n"), {"structuredMetadata": {}}]]},
        {"stream": {"job": "train"}, "values": [[str(int(NS) + 1), "hello"]]},
    )
    url = answering(lambda path: (200, json.dumps({"status": "success", "data": data}).encode()))
    entries = LokiClient(HttpConfig(url, retries=0)).query_range('{job=~".+"}', WINDOW)
    assert [(labels, line[:5]) for _, labels, line in entries] == [
        ({"job": "vllm"}, "2026-"),
        ({"job": "train"}, "hello"),
    ]
