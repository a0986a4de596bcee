from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "data" / "scenarios"

# papermill/nbformat pull a slow optional import; perfkit.run documents why this is safe.
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
