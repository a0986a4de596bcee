"""Every request carries X-Request-Id perfkit-<run>-<i>; the reference server's timing log (its own
TTFT, from the request's arrival on its socket) joins the client's records request by request."""

from __future__ import annotations

import asyncio

import pyarrow.parquet as pq
import pytest

from perfkit.errors import ConfigError
from perfkit.lab.serve import ReferenceServer, ServeConfig, serving
from perfkit.loadgen.bench import BenchOptions, run_bench
from perfkit.loadgen.shapes import concurrency_plan

SLACK_S = 0.001  # a write's own time between the bytes leaving and the writer's stamp


def test_the_servers_timing_log_joins_the_records(tmp_path):
    log = tmp_path / "server.tsv"
    with serving(ttft_ms=30, itl_ms=5, model="perfkit-lab", timing_log=str(log)) as url:
        opts = BenchOptions(
            url=url, model="perfkit-lab", plan=concurrency_plan(24, 16, 6, 4), out=tmp_path / "r.json"
        )
        doc = run_bench(opts)
    prefix = doc["meta"]["request_ids"].removesuffix("<i>")
    assert prefix.startswith("perfkit-") and prefix.endswith("-")
    server = {}
    for line in log.read_text().splitlines():
        rid, arrived, written = line.split("\t")
        assert rid.startswith(prefix)
        server[int(rid[len(prefix) :])] = float(written) - float(arrived)
    table = pq.read_table(tmp_path / doc["records"], columns=["i", "ttft_s"]).to_pydict()
    assert sorted(server) == sorted(table["i"]) == list(range(24))
    for i, ttft in zip(table["i"], table["ttft_s"], strict=True):
        # the server waits 30 ms from arrival (never less; more only when a loaded machine delays it);
        # the client saw about that. Each request of the closed loop of 4 is sent ~55 ms after
        # the one before it on its slot, so a request joined to another's line breaks these bounds.
        # Each side stamps just after its own write returns (the server after `await resp.write`,
        # the client in aiohttp's on_request_chunk_sent), so the other process, on its own core, can
        # read those bytes first: seen once in CI, 0.12 ms. SLACK_S allows for that write, at a
        # fiftieth of the spacing that tells two requests apart.
        assert 0.030 <= server[i] < 0.080
        assert -SLACK_S <= ttft - server[i] < 0.030
    # one clock on both sides: the client's send precedes the server's read of it
    origin = doc["meta"]["clock_origin_s"]
    sent = pq.read_table(tmp_path / doc["records"], columns=["i", "sent_s"]).to_pydict()
    arrivals = {
        int(ln.split("\t")[0][len(prefix) :]): float(ln.split("\t")[1]) for ln in log.read_text().splitlines()
    }
    for i, s in zip(sent["i"], sent["sent_s"], strict=True):
        assert -SLACK_S <= arrivals[i] - (origin + s) < 0.030


def test_two_runs_do_not_share_request_ids(tmp_path):
    a = BenchOptions(
        url="http://127.0.0.1:1", model="m", plan=concurrency_plan(1, 1, 1, 1), out=tmp_path / "a"
    )
    b = BenchOptions(
        url="http://127.0.0.1:1", model="m", plan=concurrency_plan(1, 1, 1, 1), out=tmp_path / "b"
    )
    assert a.run_id != b.run_id


def test_the_timing_log_never_overwrites_a_file(tmp_path):
    log = tmp_path / "server.tsv"
    log.write_text("someone's earlier log\n")
    server = ReferenceServer(ServeConfig(port=0, timing_log=str(log)))

    async def start_and_stop() -> None:
        try:
            await server.start()
        finally:
            await server.stop()

    with pytest.raises(ConfigError, match="timing-log"):
        asyncio.run(start_and_stop())
    assert log.read_text() == "someone's earlier log\n"
