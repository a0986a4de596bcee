from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "data" / "scenarios"

# papermill/nbformat pull a slow optional import; perfkit.app.runner.run documents why this is safe.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]


@pytest.fixture
def scenario_copy(tmp_path):
    """Copy an embedded scenario so a test may break it."""

    def make(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(SCENARIOS / name, dst)
        return dst

    return make


def pytest_sessionfinish(session, exitstatus):
    """In CI (PERFKIT_REQUIRE_INTEGRATION=1) a skipped integration test fails the run."""
    import os

    if os.environ.get("PERFKIT_REQUIRE_INTEGRATION") != "1":
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = [
        r
        for r in (reporter.stats.get("skipped", []) if reporter else [])
        if "integration" in getattr(r, "keywords", {})
    ]
    if skipped:
        for r in skipped:
            reporter.write_line(f"integration test skipped in CI: {r.nodeid}: {r.longrepr}", red=True)
        session.exitstatus = 1


ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def alertmanager(tmp_path):
    """Base URL of an Alertmanager on a free 127.0.0.1 port, gossip off, one null receiver."""
    if ALERTMANAGER is None:
        from servers import require_binary

        require_binary("prometheus-alertmanager")
    config = tmp_path / "alertmanager.yml"
    config.write_text('route:\n  receiver: "null"\nreceivers:\n  - name: "null"\n')
    port = _free_port()
    log_path = tmp_path / "alertmanager.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                ALERTMANAGER,
                f"--config.file={config}",
                f"--storage.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",  # empty: no gossip, no second port
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                if requests.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "Alertmanager not ready after 30 s:\n" + log_path.read_text()
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()  # by its PID, through the Popen handle
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)
