"""`perfkit lab down` signals a PID only while it still runs the server perfkit started.

A stale or forged state file (the PID now belongs to an unrelated process) must not kill that
process. Real processes throughout: an unrelated ``sleep``, a stand-in whose argv looks like
the engine's, and a real Prometheus where one is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from perfkit.errors import ConfigError
from perfkit.lab.servers import LabServer, NotOurProcess, process_identity, start

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "scenarios"


def alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


@pytest.fixture
def spawn() -> Iterator:
    """Start real processes; whatever a test leaves running is killed (by its own PID) afterwards."""
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


def state_round_trip(server: LabServer) -> LabServer:
    """What ``perfkit lab down`` reads back: the state file's JSON."""
    return LabServer(**json.loads(json.dumps(server.as_dict())))


def forged(pid: int, tmp_path: Path, **identity) -> LabServer:
    return LabServer(
        engine="prometheus",
        url="http://127.0.0.1:9",
        pid=pid,
        data_dir=str(tmp_path / "tsdb"),
        log=str(tmp_path / "prometheus.log"),
        **identity,
    )


def test_stale_pid_running_another_program_is_not_signalled(spawn, tmp_path: Path) -> None:
    sleeper = spawn(["sleep", "60"])
    prom_argv = ["/usr/bin/prometheus", f"--storage.tsdb.path={tmp_path / 'tsdb'}"]
    server = state_round_trip(forged(sleeper.pid, tmp_path, cmdline=prom_argv, started=12345))
    with pytest.raises(NotOurProcess, match=rf"pid {sleeper.pid} is no longer the prometheus server") as err:
        server.stop(timeout_s=1)
    assert "it runs 'sleep 60'" in str(err.value) and "not signalled" in str(err.value)
    assert isinstance(err.value, ConfigError)  # the CLI prints it as one line
    time.sleep(0.2)
    assert alive(sleeper)


def test_reused_pid_same_command_other_start_time_is_not_signalled(spawn, tmp_path: Path) -> None:
    sleeper = spawn(["sleep", "60"])
    argv, started = process_identity(sleeper.pid) or ([], None)
    assert argv == ["sleep", "60"] and started is not None
    server = state_round_trip(forged(sleeper.pid, tmp_path, cmdline=argv, started=started - 1))
    with pytest.raises(NotOurProcess):
        server.stop(timeout_s=1)
    time.sleep(0.2)
    assert alive(sleeper)


def test_old_state_file_without_identity_is_checked_against_the_engine(spawn, tmp_path: Path) -> None:
    sleeper = spawn(["sleep", "60"])
    old = {
        k: v for k, v in forged(sleeper.pid, tmp_path).as_dict().items() if k not in ("cmdline", "started")
    }
    server = LabServer(**old)  # a state file written before the identity was recorded
    with pytest.raises(NotOurProcess, match="it runs 'sleep 60'"):
        server.stop(timeout_s=1)
    assert alive(sleeper)
    # the engine's binary name on another data dir is not this server either
    other = spawn(
        [
            "prometheus",
            "-c",
            "import time; time.sleep(60)",
            f"--storage.tsdb.path={tmp_path / 'other'}",
        ],
        executable=sys.executable,
    )
    with pytest.raises(NotOurProcess):
        LabServer(**{**old, "pid": other.pid}).stop(timeout_s=1)
    assert alive(other)
    # ... and on its own data dir it is: stopped
    mine = spawn(
        ["prometheus", "-c", "import time; time.sleep(60)", f"--storage.tsdb.path={tmp_path / 'tsdb'}"],
        executable=sys.executable,
    )
    assert LabServer(**{**old, "pid": mine.pid}).stop(timeout_s=5) is True
    assert mine.wait(timeout=5) is not None and not alive(mine)


def test_the_process_it_started_is_stopped(spawn, tmp_path: Path) -> None:
    sleeper = spawn(["sleep", "60"])
    argv, started = process_identity(sleeper.pid) or ([], None)
    server = state_round_trip(forged(sleeper.pid, tmp_path, cmdline=argv, started=started))
    assert server.stop(timeout_s=5) is True
    assert not alive(sleeper)
    assert server.stop(timeout_s=1) is False  # already gone: nothing to signal, no error


def test_a_process_that_ignores_sigterm_is_killed(spawn, tmp_path: Path) -> None:
    code = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    stubborn = spawn([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert stubborn.stdout is not None and stubborn.stdout.readline() == "up\n"
    argv, started = process_identity(stubborn.pid) or ([], None)
    server = forged(stubborn.pid, tmp_path, cmdline=argv, started=started)
    assert server.stop(timeout_s=0.5) is True
    assert not alive(stubborn)


@pytest.mark.integration
@pytest.mark.skipif(
    not (shutil.which("prometheus") and shutil.which("promtool")), reason="prometheus is not installed"
)
def test_real_prometheus_records_what_it_started_and_lab_down_stops_it(tmp_path: Path) -> None:
    server = start("prometheus", SCENARIOS / "release-regression", tmp_path / "lab", detach=True)
    try:
        assert server.cmdline and Path(server.cmdline[0]).name == "prometheus"
        assert f"--storage.tsdb.path={server.data_dir}" in server.cmdline
        assert server.started is not None
        assert state_round_trip(server).stop() is True
        assert process_identity(server.pid) is None or not process_identity(server.pid)[0]  # type: ignore[index]
    finally:
        identity = process_identity(server.pid)
        if identity and identity[0] == server.cmdline:
            os.kill(server.pid, 9)
