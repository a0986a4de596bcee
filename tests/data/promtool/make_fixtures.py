"""Rebuild the files of this folder with the real promtool and Prometheus (README.md says what each is).

Run from the repository root with the project's environment: ``.venv/bin/python
tests/data/promtool/make_fixtures.py`` (needs ``promtool`` and ``prometheus`` on PATH: ``make servers``).
It makes the blocks, the dump, the server and the snapshot as the tests do (``tests/sources/promtool_kit.py``):
Prometheus listens on a free 127.0.0.1 port and is stopped by its PID; everything else happens in a
temporary folder.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import urllib.parse
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parents[1]), str(HERE.parents[1] / "sources")]  # tests/: servers, promtool_kit

from promtool_kit import dump, make_blocks, prometheus, snapshot  # noqa: E402

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


def get(url: str, **params: str) -> bytes:
    query = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{url}?{query}" if params else url, timeout=10) as resp:
        return resp.read()


def main() -> int:
    promtool = shutil.which("promtool")
    if not promtool or not shutil.which("prometheus"):
        print("needs promtool and prometheus: apt-get install -y --no-install-recommends prometheus")
        return 1
    (HERE / "source.om").write_text(source_om(), encoding="utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        blocks = make_blocks(HERE / "source.om", work / "blocks")
        dumped = dump(blocks, HERE / "dump.txt", work).read_bytes().decode("utf-8")
        (HERE / "dump-openmetrics.om").write_text(dump_openmetrics(dumped), encoding="utf-8")
        with prometheus(blocks, work) as (url, data):
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
            shutil.rmtree(HERE / "snapshot", ignore_errors=True)
            snapshot(url, data, HERE / "snapshot")
    version = subprocess.run([promtool, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    print(f"made with {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
