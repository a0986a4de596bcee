from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "data" / "scenarios"

# papermill/nbformat pull a slow optional import; perfkit.app.runner.run documents why this is safe.
sys.modules.setdefault("rfc3987_syntax", None)  # type: ignore[arg-type]


@pytest.fixture(scope="session", autouse=True)
def _replay_cache(tmp_path_factory) -> Iterator[None]:
    """One replay cache for the session (perfkit.app.whatif.replay_cache), never the user's: runbooks
    executed on the same bundle calibrate its replay once. A test that sets PERFKIT_CACHE keeps it."""
    import os

    if "PERFKIT_CACHE" in os.environ:
        yield
        return
    os.environ["PERFKIT_CACHE"] = str(tmp_path_factory.mktemp("perfkit-cache"))
    try:
        yield
    finally:
        os.environ.pop("PERFKIT_CACHE", None)


@pytest.fixture
def scenario_copy(tmp_path):
    """Copy an embedded scenario so a test may break it."""

    def make(name: str) -> Path:
        dst = tmp_path / name
        shutil.copytree(SCENARIOS / name, dst)
        return dst

    return make


@pytest.fixture
def spawn() -> Iterator:
    """Start real processes; whatever a test leaves running is killed (by its own PID) afterwards."""
    from perfkit.lab.servers import process_identity

    procs: list[subprocess.Popen] = []

    def run(args: list[str], **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, **kwargs)
        procs.append(proc)
        deadline = time.monotonic() + 5
        while not (process_identity(proc.pid) or ([], None))[0]:  # its exec has completed
            assert time.monotonic() < deadline, args
            time.sleep(0.005)
        return proc

    yield run
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


# -- CI: a skip is a failure (issue 28) --------------------------------------------------------------
#
# With PERFKIT_REQUIRE_INTEGRATION=1 (.ci/run) every skipped test fails the run: a skip there means a
# server, package or tool CI should have had. The one exception is a test marked for a device or
# service CI cannot have, saying which: ``@pytest.mark.needs("gpu")`` (pyproject's markers). An
# xfail is not a skip. A module that skips while it is collected (``importorskip`` at the top)
# cannot carry the marker, so it always counts.

_SKIPS: list[tuple[str, str, str | None]] = []  # (node id, reason, what it needs when marked)


def _needs(item) -> str | None:
    marker = item.get_closest_marker("needs")
    if marker is None or not marker.args or not isinstance(marker.args[0], str):
        return None
    return marker.args[0].strip() or None


def _skip_reason(report) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.skipped and not hasattr(report, "wasxfail"):  # the marker travels with the report
        report.user_properties.append(("perfkit_needs", _needs(item) or ""))


def pytest_runtest_logreport(report):
    """Skips are counted where reports are logged: in the one process, or in the controller of
    ``pytest -n N`` (``make test``), which sees every worker's reports."""
    if report.skipped and not hasattr(report, "wasxfail"):
        needs = dict(report.user_properties).get("perfkit_needs") or None
        _SKIPS.append((report.nodeid, _skip_reason(report), needs))


def pytest_collectreport(report):
    if report.skipped:
        _SKIPS.append((report.nodeid, _skip_reason(report), None))


def ci_skip_failures(skips: list[tuple[str, str, str | None]]) -> list[str]:
    """The lines that fail a CI run: every skip not marked ``needs(...)``."""
    return [f"skipped in CI: {node}: {reason}" for node, reason, what in skips if what is None]


def pytest_sessionfinish(session, exitstatus):
    """In CI (PERFKIT_REQUIRE_INTEGRATION=1) a skipped test fails the run unless marked needs(...)."""
    import os

    if os.environ.get("PERFKIT_REQUIRE_INTEGRATION") != "1" or hasattr(session.config, "workerinput"):
        return  # not CI, or an xdist worker: its controller judges every worker's skips
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter and _SKIPS:
        reporter.ensure_newline()
    write = reporter.write_line if reporter else print
    for node, _, what in _SKIPS:
        if what is not None:
            write(f"allowed skip in CI (needs {what}): {node}")
    failures = ci_skip_failures(_SKIPS)
    for line in failures:
        write(line, **({"red": True} if reporter else {}))
    if failures:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


@pytest.fixture
def alertmanager(tmp_path):
    """Base URL of an Alertmanager on a free 127.0.0.1 port, gossip off, one null receiver."""
    from servers import require_binary, serving

    from perfkit.lab.servers import free_port

    if ALERTMANAGER is None:
        require_binary("prometheus-alertmanager")
    config = tmp_path / "alertmanager.yml"
    config.write_text('route:\n  receiver: "null"\nreceivers:\n  - name: "null"\n')
    port = free_port()
    argv = [
        ALERTMANAGER,
        f"--config.file={config}",
        f"--storage.path={tmp_path / 'data'}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--cluster.listen-address=",  # empty: no gossip, no second port
    ]
    url = f"http://127.0.0.1:{port}"
    with serving(argv, url, tmp_path / "alertmanager.log", timeout_s=30):
        yield url
