"""The real servers the integration tests start, one way to treat a missing one, and one way to run
one: on a free 127.0.0.1 port (the caller's argv names it), its output in a log file, waited for
until it answers, stopped by its PID at the end."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

#: binary -> its Debian package; `make test` installs them, CI fails on any integration skip
SERVERS = {
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "victoria-metrics": "victoria-metrics",
    "prometheus-alertmanager": "prometheus-alertmanager",
}


def require_binary(name: str) -> str:
    """The path of server binary ``name``, or skip the test naming its install command: every test
    treats a missing server the same way (and CI, with PERFKIT_REQUIRE_INTEGRATION, fails on it)."""
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"needs {name}: apt-get install -y --no-install-recommends {SERVERS.get(name, name)}")
    return path


@contextlib.contextmanager
def running(argv: list[str], log_path: Path) -> Iterator[subprocess.Popen]:
    """The server ``argv`` running, its output in ``log_path``; at the end it is stopped by its PID
    (through the Popen handle): SIGTERM, then SIGKILL when it lingers 15 s."""
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


def wait_until(
    proc: subprocess.Popen, log_path: Path, done: Callable[[], bool], *, timeout_s: float, what: str
) -> None:
    """Ask ``done`` every 50 ms until it holds; fail with the server's log when the server exits
    first, or when ``timeout_s`` pass (``what`` says what did not happen)."""
    deadline = time.monotonic() + timeout_s
    while not done():
        assert proc.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, f"{what} after {timeout_s:g} s:\n{log_path.read_text()}"
        time.sleep(0.05)


def answers(url: str) -> bool:
    """``url`` answers 200 (a Prometheus or Alertmanager ``/-/ready``)."""
    try:
        return requests.get(url, timeout=1).status_code == 200
    except requests.ConnectionError:
        return False


@contextlib.contextmanager
def serving(
    argv: list[str], url: str, log_path: Path, *, timeout_s: float = 60
) -> Iterator[subprocess.Popen]:
    """:func:`running`, once the server answers ``url/-/ready``."""
    with running(argv, log_path) as proc:
        wait_until(
            proc, log_path, lambda: answers(f"{url}/-/ready"), timeout_s=timeout_s, what=f"{url} not ready"
        )
        yield proc
