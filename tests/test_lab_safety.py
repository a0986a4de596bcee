"""`perfkit lab down` signals a PID only while it still runs the server perfkit started.

A stale or forged state file (the PID now belongs to an unrelated process, or the state copies
that process's argv) must not kill that process, and a malformed one must not crash. Real
processes throughout: an unrelated ``sleep``, stand-ins whose argv looks like the engine's (a
Python named ``prometheus`` / ``victoria-metrics``), ``perfkit lab down`` itself, and a real
Prometheus where one is installed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfkit.errors import ConfigError
from perfkit.lab.servers import LabServer, NotOurProcess, process_identity, start

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "scenarios"


def alive(proc: subprocess.Popen) -> bool:
    return proc.poll() is None


def stand_in(
    spawn, name: str, *args: str, code: str = "import time; time.sleep(60)", **kwargs
) -> subprocess.Popen:
    """A Python process whose argv reads ``name -c CODE ARGS…``: the engine's binary, as far as
    /proc/PID/cmdline can tell."""
    return spawn([name, "-c", code, *args], executable=sys.executable, **kwargs)


def identity_of(proc: subprocess.Popen) -> dict:
    argv, started = process_identity(proc.pid) or ([], None)
    assert argv and started is not None
    return {"cmdline": argv, "started": started}


def lab_down(lab_dir: Path, name: str, state: dict) -> subprocess.CompletedProcess:
    """``perfkit lab down NAME`` (a real CLI process) on a state file holding ``state``."""
    (lab_dir / name).mkdir(parents=True, exist_ok=True)
    (lab_dir / name / "state.json").write_text(json.dumps(state))
    env = {**os.environ, "PERFKIT_LAB_DIR": str(lab_dir)}
    return subprocess.run(
        [sys.executable, "-m", "perfkit", "lab", "down", name],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).resolve().parents[1],
    )


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


def test_forged_state_copying_a_victims_argv_is_refused_by_lab_down(spawn, tmp_path: Path) -> None:
    """The review's attack: a state file naming the victim's PID with the victim's own argv."""
    victim = spawn(["sleep", "1002"])
    state = forged(victim.pid, tmp_path, cmdline=["sleep", "1002"], started=None).as_dict()
    res = lab_down(tmp_path / "lab", "prometheus-x", state)
    assert res.returncode == 0, res.stderr
    assert f"pid {victim.pid} is no longer the prometheus server" in res.stdout
    assert "it is not prometheus" in res.stdout and "removed its stale state" in res.stdout
    assert not (tmp_path / "lab" / "prometheus-x" / "state.json").exists()
    time.sleep(0.2)
    assert alive(victim)
    # ... nor with its exact start time copied too
    with pytest.raises(NotOurProcess, match="it is not prometheus"):
        state_round_trip(forged(victim.pid, tmp_path, **identity_of(victim))).stop(timeout_s=1)
    assert alive(victim)


def test_engine_binary_on_another_data_dir_is_refused_even_with_its_argv(spawn, tmp_path: Path) -> None:
    other = stand_in(spawn, "prometheus", f"--storage.tsdb.path={tmp_path / 'other'}")
    # the state copies that process's argv and start time, but names another data dir
    server = state_round_trip(forged(other.pid, tmp_path, **identity_of(other)))
    with pytest.raises(NotOurProcess, match="does not run on"):
        server.stop(timeout_s=1)
    # a data dir that only ends the same way is not this one either
    tail = stand_in(spawn, "prometheus", f"--storage.tsdb.path=/x{tmp_path / 'tsdb'}")
    with pytest.raises(NotOurProcess, match="does not run on"):
        state_round_trip(forged(tail.pid, tmp_path, **identity_of(tail))).stop(timeout_s=1)
    # VictoriaMetrics' flag does not count for Prometheus, nor the other way round
    vm_flag = stand_in(spawn, "prometheus", f"-storageDataPath={tmp_path / 'tsdb'}")
    with pytest.raises(NotOurProcess, match="does not run on"):
        state_round_trip(forged(vm_flag.pid, tmp_path, **identity_of(vm_flag))).stop(timeout_s=1)
    time.sleep(0.2)
    assert alive(other) and alive(tail) and alive(vm_flag)


def test_reused_pid_same_command_other_start_time_is_not_signalled(spawn, tmp_path: Path) -> None:
    proc = stand_in(spawn, "prometheus", f"--storage.tsdb.path={tmp_path / 'tsdb'}")
    ident = identity_of(proc)
    server = state_round_trip(
        forged(proc.pid, tmp_path, cmdline=ident["cmdline"], started=ident["started"] - 1)
    )
    with pytest.raises(NotOurProcess, match="it started at another time"):
        server.stop(timeout_s=1)
    # a start time without an argv is checked as well
    with pytest.raises(NotOurProcess, match="it started at another time"):
        state_round_trip(forged(proc.pid, tmp_path, started=ident["started"] + 1)).stop(timeout_s=1)
    # the same engine and data dir, but not the argv recorded
    other_argv = [*ident["cmdline"], "--web.enable-admin-api"]
    with pytest.raises(NotOurProcess, match="command line differs"):
        state_round_trip(forged(proc.pid, tmp_path, cmdline=other_argv, started=ident["started"])).stop(
            timeout_s=1
        )
    time.sleep(0.2)
    assert alive(proc)


MALFORMED = [
    {"pid": "123"},
    {"pid": True},
    {"pid": 1},
    {"pid": 0},
    {"pid": -1},
    {"pid": 2**40},
    {"pid": 12.0},
    {"pid": None},
    {"cmdline": "sleep 60"},
    {"cmdline": ["sleep", 60]},
    {"cmdline": None},
    {"started": "12345"},
    {"started": 1.5},
    {"started": True},
    {"started": -3},
    {"engine": "sleep"},
    {"engine": ["prometheus"]},
    {"data_dir": ""},
    {"data_dir": 7},
]


@pytest.mark.parametrize("bad", MALFORMED, ids=lambda b: f"{next(iter(b))}={next(iter(b.values()))!r}")
def test_malformed_state_is_refused_with_a_clear_message(spawn, tmp_path: Path, bad: dict) -> None:
    proc = stand_in(spawn, "prometheus", f"--storage.tsdb.path={tmp_path / 'tsdb'}")
    state = {**forged(proc.pid, tmp_path, **identity_of(proc)).as_dict(), **bad}
    with pytest.raises(NotOurProcess, match=rf"malformed lab state: {next(iter(bad))} .*nothing signalled"):
        LabServer(**state).stop(timeout_s=1)
    time.sleep(0.1)
    assert alive(proc)


def test_lab_down_on_a_malformed_state_says_so_and_does_not_crash(spawn, tmp_path: Path) -> None:
    victim = spawn(["sleep", "60"])
    state = forged(victim.pid, tmp_path, cmdline=["sleep", "60"]).as_dict()
    res = lab_down(tmp_path / "lab", "bad", {**state, "pid": str(victim.pid)})
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert f"malformed lab state: pid '{victim.pid}' is not a process id" in res.stdout
    assert not (tmp_path / "lab" / "bad" / "state.json").exists()
    assert alive(victim)


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
    other = stand_in(spawn, "prometheus", f"--storage.tsdb.path={tmp_path / 'other'}")
    with pytest.raises(NotOurProcess):
        LabServer(**{**old, "pid": other.pid}).stop(timeout_s=1)
    assert alive(other)
    # ... and on its own data dir it is: stopped
    mine = stand_in(spawn, "prometheus", f"--storage.tsdb.path={tmp_path / 'tsdb'}")
    assert LabServer(**{**old, "pid": mine.pid}).stop(timeout_s=5) is True
    assert mine.wait(timeout=5) is not None and not alive(mine)


def test_the_process_it_started_is_stopped(spawn, tmp_path: Path) -> None:
    proc = stand_in(spawn, "prometheus", f"--storage.tsdb.path={tmp_path / 'tsdb'}")
    server = state_round_trip(forged(proc.pid, tmp_path, **identity_of(proc)))
    assert server.stop(timeout_s=5) is True
    assert not alive(proc)
    assert server.stop(timeout_s=1) is False  # already gone: nothing to signal, no error


def test_victoriametrics_is_checked_against_its_own_binary_and_flag(spawn, tmp_path: Path) -> None:
    data = tmp_path / "vmdata"

    def vm_state(proc: subprocess.Popen) -> LabServer:
        return LabServer(
            "victoriametrics", "http://127.0.0.1:9", proc.pid, str(data), str(tmp_path / "vm.log"),
            **identity_of(proc),
        )  # fmt: skip

    wrong_flag = stand_in(spawn, "victoria-metrics", f"--storage.tsdb.path={data}")
    wrong_name = stand_in(spawn, "victoriametrics", f"-storageDataPath={data}")
    for proc, why in ((wrong_flag, "does not run on"), (wrong_name, "it is not victoria-metrics")):
        with pytest.raises(NotOurProcess, match=why):
            state_round_trip(vm_state(proc)).stop(timeout_s=1)
    mine = stand_in(spawn, "victoria-metrics", f"-storageDataPath={data}", "-httpListenAddr=127.0.0.1:9")
    assert state_round_trip(vm_state(mine)).stop(timeout_s=5) is True
    assert not alive(mine) and alive(wrong_flag) and alive(wrong_name)


def test_a_process_that_ignores_sigterm_is_killed(spawn, tmp_path: Path) -> None:
    code = "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    stubborn = stand_in(
        spawn,
        "prometheus",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        code=code,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert stubborn.stdout is not None and stubborn.stdout.readline() == "up\n"
    server = forged(stubborn.pid, tmp_path, **identity_of(stubborn))
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


def test_a_server_still_there_after_sigkill_is_said_and_its_state_kept(
    spawn, tmp_path: Path, monkeypatch
) -> None:
    """A process inside an uninterruptible write dies only when the write returns: SIGKILL's wait can
    run out. ``lab down`` then says so and keeps the state (a later ``lab down`` finds it again), not
    "stopped". Stood in for by a process whose exit the wait never sees (no process outlives SIGKILL
    on demand)."""
    from click.testing import CliRunner

    from perfkit.app.cli.main import cli
    from perfkit.lab import processes

    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(60)"
    stubborn = stand_in(
        spawn,
        "prometheus",
        f"--storage.tsdb.path={tmp_path / 'tsdb'}",
        code=code,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert stubborn.stdout is not None and stubborn.stdout.readline() == "up\n"
    monkeypatch.setattr(processes, "exited", lambda pid, started: False)
    monkeypatch.setattr(processes, "KILL_WAIT_S", 0.3)
    server = forged(stubborn.pid, tmp_path, **identity_of(stubborn))
    lab = tmp_path / "lab" / "prometheus-x"
    lab.mkdir(parents=True)
    (lab / "state.json").write_text(json.dumps(server.as_dict()))
    monkeypatch.setenv("PERFKIT_LAB_DIR", str(tmp_path / "lab"))
    res = CliRunner().invoke(cli, ["lab", "down", "prometheus-x"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert (
        "still running 0.3 s after SIGKILL; its state is kept" in res.output and "stopped" not in res.output
    )
    assert (lab / "state.json").exists()
