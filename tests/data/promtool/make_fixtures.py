"""Rebuild the files of this folder with the real promtool and Prometheus (README.md says what each is).

Run from the repository root: ``python tests/data/promtool/make_fixtures.py`` (needs ``promtool`` and
``prometheus`` on PATH: ``make servers``). Prometheus listens on a free 127.0.0.1 port and is stopped
by its PID; everything else happens in a temporary folder.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCENARIO = HERE.parents[2] / "data" / "scenarios" / "p95-prefill-interference" / "metrics"
SAMPLES = 20  # the first 20 scrapes (5 minutes at 15 s) of each series kept
FAMILIES = {
    "vllm.om": (
        "vllm:num_requests_running",
        "vllm:prompt_tokens",
        "vllm:cache_config_info",
        "vllm:time_to_first_token_seconds",
    ),
    "dcgm.om": ("DCGM_FI_DEV_GPU_UTIL",),
    "node.om": ("node_cpu_seconds",),
}
# Ours, not from the scenario: values and label text the scenario lacks (NaN, ±Inf, a counter's
# _created, quotes, a backslash, a newline, a tab, a control byte and non-ASCII in label values).
ODD = """# TYPE perfkit_fixture_ratio gauge
perfkit_fixture_ratio{path="a\\"b\\\\c\\nd",tab="x\ty",text="caf\u00e9\x01"} NaN 1794445200.213
perfkit_fixture_ratio{path="a\\"b\\\\c\\nd",tab="x\ty",text="caf\u00e9\x01"} +Inf 1794445215.213
perfkit_fixture_ratio{path="a\\"b\\\\c\\nd",tab="x\ty",text="caf\u00e9\x01"} -Inf 1794445230.213
perfkit_fixture_ratio{path="a\\"b\\\\c\\nd",tab="x\ty",text="caf\u00e9\x01"} 0.25 1794445245.213
# TYPE perfkit_fixture_events counter
perfkit_fixture_events_total 3 1794445200.213
perfkit_fixture_events_created 1794445000.5 1794445200.213
perfkit_fixture_events_total 1e+21 1794445215.213
perfkit_fixture_events_created 1794445000.5 1794445215.213
"""


def source_om() -> str:
    """The first SAMPLES scrapes of FAMILIES, as the scenario wrote them, and ODD; one # EOF."""
    out: list[str] = []
    for file, families in FAMILIES.items():
        keep, seen = False, {}
        for line in (SCENARIO / file).read_text(encoding="utf-8").splitlines():
            if line.startswith("# TYPE ") or line.startswith("# HELP "):
                keep = line.split()[2] in families
                if keep:
                    out.append(line)
            elif keep and line and not line.startswith("#"):
                series = line.rsplit(" ", 2)[0]
                seen[series] = seen.get(series, 0) + 1
                if seen[series] <= SAMPLES:
                    out.append(line)
    return "\n".join(out) + "\n" + ODD + "# EOF\n"


def dump_openmetrics(dump: str) -> str:
    """``dump`` (``promtool tsdb dump``) as ``promtool tsdb dump-openmetrics`` prints the same samples:
    ``formatSeriesSetOpenMetrics`` in cmd/promtool/tsdb.go (prometheus/prometheus v2.51.0 on):
    ``"%s%s %g %.3f\\n"`` of the name, the other labels without spaces after the commas, the value
    and the timestamp in seconds; then ``# EOF``. Debian's promtool 2.42 has no such command."""
    out = []
    for line in dump.splitlines():
        head, value, ts = line.rsplit(" ", 2)
        pairs = head[1:-1].split(", ")  # no label value here holds ", "
        name = next(p for p in pairs if p.startswith("__name__="))[len('__name__="') : -1]
        rest = ",".join(p for p in pairs if not p.startswith("__name__="))
        out.append(f"{name}{{{rest}}} {value} {int(ts) / 1000:.3f}")
    return "\n".join(out) + "\n# EOF\n"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str, **params: str) -> bytes:
    query = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{url}?{query}" if params else url, timeout=10) as resp:
        return resp.read()


def main() -> int:
    promtool, prometheus = shutil.which("promtool"), shutil.which("prometheus")
    if not promtool or not prometheus:
        print("needs promtool and prometheus: apt-get install -y --no-install-recommends prometheus")
        return 1
    (HERE / "source.om").write_text(source_om(), encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        blocks = work / "blocks"
        subprocess.run(
            [promtool, "tsdb", "create-blocks-from", "openmetrics", str(HERE / "source.om"), str(blocks)],
            check=True,
            capture_output=True,
        )
        copy = work / "dump-copy"
        shutil.copytree(blocks, copy)
        (copy / "wal").mkdir()  # promtool 2.42's dump opens the WAL too
        dump = subprocess.run([promtool, "tsdb", "dump", str(copy)], check=True, capture_output=True).stdout
        (HERE / "dump.txt").write_bytes(dump)
        (HERE / "dump-openmetrics.om").write_text(dump_openmetrics(dump.decode("utf-8")), encoding="utf-8")

        data = work / "prometheus"
        shutil.copytree(blocks, data)
        config = work / "prometheus.yml"
        config.write_text("global: {scrape_interval: 15s}\nscrape_configs: []\n")
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        log = (work / "prometheus.log").open("w")
        proc = subprocess.Popen(
            [
                prometheus,
                f"--config.file={config}",
                f"--storage.tsdb.path={data}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--storage.tsdb.retention.time=3650d",
                "--web.enable-admin-api",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    get(f"{url}/-/ready")
                    break
                except OSError:
                    if time.monotonic() > deadline or proc.poll() is not None:
                        raise
                    time.sleep(0.1)
            start, end = "1794445200.213", "1794445485.213"
            everything = '{__name__=~".+"}'
            answers = {
                "query_range.json": get(
                    f"{url}/api/v1/query_range", query=everything, start=start, end=end, step="15"
                ),
                "query_vector.json": get(f"{url}/api/v1/query", query=everything, time="1794445300"),
                "query_raw.json": get(f"{url}/api/v1/query", query=everything + "[10m]", time="1794445500"),
            }
            for name, body in answers.items():
                assert json.loads(body)["status"] == "success", body[:200]
                (HERE / name).write_bytes(body)
            request = urllib.request.Request(f"{url}/api/v1/admin/tsdb/snapshot", method="POST")
            with urllib.request.urlopen(request, timeout=30) as resp:
                made = json.loads(resp.read())["data"]["name"]
            snapshot = HERE / "snapshot"
            shutil.rmtree(snapshot, ignore_errors=True)
            shutil.copytree(data / "snapshots" / made, snapshot)
        finally:
            proc.terminate()  # by its PID, through the Popen handle
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=15)
            log.close()
    version = subprocess.run([promtool, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"made with {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
