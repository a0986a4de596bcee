"""A live drill's state file (``<folder>/.live/state.json``) is JSON anyone may edit: ``drill fix``,
``status`` and ``stop`` must not be turned against anything but the drill's own local processes.

Real processes and real CLI runs throughout (``python -m perfkit drill ...`` in a subprocess): an
unrelated ``sleep``, stand-ins whose argv is a drill process's, a listener on a non-loopback-named
address that records whether anything reached it. No simulator is started: the state files are
written here (synthetic, as an attacker or a stale folder would leave them).
"""

from __future__ import annotations

import http.server
import json
import os
import shlex
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfkit.app.cli.main import cli
from perfkit.app.drills import live as L
from perfkit.app.drills.live_specs import MIN_LIFE_WALL_S, Timing, capped_speed, life_for, offset_for
from perfkit.errors import ConfigError
from perfkit.lab.servers import process_identity

ROOT = Path(__file__).resolve().parents[1]


def perfkit(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "perfkit", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


def forged_folder(tmp_path: Path, **state) -> Path:
    """A drill folder whose state is ``state`` over a minimal valid one (a 0700 ``.live``)."""
    folder = tmp_path / "d"
    (folder / ".live").mkdir(parents=True, mode=0o700)
    base = {"label": "drill-01", "anchor": 1.0e9, "speed": 5.0, "processes": {}, "fixes": []}
    (folder / ".live" / "state.json").write_text(json.dumps({**base, **state}))
    (folder / ".live" / "admin-token").write_text("the-admin-token")
    return folder


def identity(proc: subprocess.Popen) -> dict:
    argv, started = process_identity(proc.pid) or ([], None)
    assert argv and started is not None
    return {"cmdline": argv, "started": started}


# -- S4: the admin token goes to loopback URLs only ---------------------------------------------------


def test_loopback_urls_are_the_only_ones_taken():
    for url in ("http://127.0.0.1:8000", "http://[::1]:8000/", "http://localhost:9"):
        assert L.loopback_url(url, "x") == url.rstrip("/")
    for url in (
        "http://10.0.0.1:8000",
        "http://example.com:80",
        "https://127.0.0.1:8000",  # the simulator serves plain http on loopback only
        "http://127.0.0.1@example.com:80",
        "http://user@127.0.0.1:80",
        "http://127.0.0.2:80",
        "http://127.0.0.1:notaport",
        "file:///etc/passwd",
        None,
        ["http://127.0.0.1:1"],
    ):
        with pytest.raises(ConfigError, match="not a loopback URL"):
            L.loopback_url(url, "engine")


@pytest.fixture
def listener() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on 127.0.0.2 (loopback to the kernel, not a name a drill accepts) recording
    every request's Authorization header."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            seen.append(self.headers.get("Authorization", ""))
            self.send_response(200)
            self.end_headers()

        do_GET = do_POST  # noqa: N815

        def log_message(self, *args) -> None:
            pass

    try:
        server = http.server.HTTPServer(("127.0.0.2", 0), Handler)
    except OSError:
        pytest.skip("127.0.0.2 cannot be bound here")
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.2:{server.server_address[1]}", seen
    server.shutdown()
    server.server_close()


def test_drill_fix_never_sends_the_token_to_a_forged_engine_url(tmp_path, listener):
    url, seen = listener
    folder = forged_folder(tmp_path, urls={"engine": url}, engine={"model": "llama-3.1-8b", "gpu": "h100"})
    res = perfkit("drill", "fix", "drill-01", "-o", folder, "--remedy", "drain")
    assert res.returncode == 2, res.stderr
    assert "not a loopback URL" in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1
    assert seen == []  # nothing reached it: the token was not sent
    # the listener does answer (the test would see a request): a direct request reaches it
    with socket.create_connection(("127.0.0.2", int(url.rsplit(":", 1)[1])), timeout=5) as s:
        s.sendall(b"GET / HTTP/1.0\r\n\r\n")
        s.recv(100)
    assert seen == [""]


# -- D2: state written through a fresh temporary file in a private folder -------------------------------


def test_drill_stop_does_not_write_through_a_planted_link(tmp_path):
    folder = forged_folder(tmp_path)
    precious = tmp_path / "precious.txt"
    precious.write_text("keep me\n")
    os.chmod(folder / ".live", 0o755)  # loosened: the write makes it private again
    (folder / ".live" / "state.tmp").symlink_to(precious)  # the old fixed temporary name
    res = perfkit("drill", "stop", "drill-01", "-o", folder)
    assert res.returncode == 0, res.stderr
    assert precious.read_text() == "keep me\n"
    assert (folder / ".live" / "state.tmp").is_symlink()  # left as it was, not followed
    state = json.loads((folder / ".live" / "state.json").read_text())
    assert state["stopped"] is True
    assert stat.S_IMODE(os.stat(folder / ".live" / "state.json").st_mode) == 0o600
    assert stat.S_IMODE(os.stat(folder / ".live").st_mode) == 0o700
    assert sorted(p.name for p in (folder / ".live").iterdir()) == ["admin-token", "state.json", "state.tmp"]


def test_a_state_file_that_is_a_link_is_replaced_not_followed(tmp_path):
    folder = forged_folder(tmp_path)
    precious = tmp_path / "precious.json"
    precious.write_text((folder / ".live" / "state.json").read_text())
    (folder / ".live" / "state.json").unlink()
    (folder / ".live" / "state.json").symlink_to(precious)
    before = precious.read_text()
    L.write_state(folder, {**json.loads(before), "stopped": True})
    assert precious.read_text() == before
    assert not (folder / ".live" / "state.json").is_symlink()


def test_state_is_not_written_into_a_linked_live_folder(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / ".live").symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="not a folder of this drill"):
        L.write_state(folder, {"anchor": 1.0, "speed": 5.0, "processes": {}})
    assert list(elsewhere.iterdir()) == []


# -- D3: processes identified by binary, the drill's own folder and start time, never argv alone --------


def test_drill_stop_leaves_an_unrelated_process_alone(tmp_path, spawn):
    victim = spawn(["sleep", "60"])
    argv = identity(victim)["cmdline"]
    folder = forged_folder(
        tmp_path,
        processes={
            "engine": {"name": "engine", "pid": victim.pid, "cmdline": argv, "started": None},
            "clock": {"name": "clock", "pid": victim.pid, **identity(victim)},  # start time copied too
        },
    )
    res = perfkit("drill", "stop", "drill-01", "-o", folder)
    time.sleep(0.3)
    assert victim.poll() is None, "an unrelated process was killed"
    assert "engine: malformed entry: no start time was recorded" in res.stdout
    assert (
        f"clock: pid {victim.pid} is not this drill's clock (it runs 'sleep 60': it is not python"
        in res.stdout
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr  # the state was malformed


def test_drill_stop_stops_the_drills_own_process_and_only_it(tmp_path, spawn):
    """A stand-in whose argv is the supervisor's (this Python, ``supervise <folder>/.live``) is
    stopped; the same program on another drill's folder is not."""
    folder = forged_folder(tmp_path)
    live = folder.resolve() / ".live"
    code = "import time; time.sleep(60)"
    mine = spawn([sys.executable, "-c", code, "supervise", str(live)])
    other = spawn([sys.executable, "-c", code, "supervise", str(tmp_path / "other" / ".live")])
    state = json.loads((live / "state.json").read_text())
    state["processes"] = {
        "clock": {"name": "clock", "pid": mine.pid, **identity(mine)},
        "engine": {"name": "engine", "pid": other.pid, **identity(other)},
    }
    (live / "state.json").write_text(json.dumps(state))
    res = perfkit("drill", "stop", "drill-01", "-o", folder)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"stopped clock (pid {mine.pid})" in res.stdout
    assert (
        f"engine: pid {other.pid} is not this drill's engine" in res.stdout
        and "does not run on" in res.stdout
    )
    assert mine.wait(timeout=10) is not None
    assert other.poll() is None


def test_a_prometheus_entry_naming_another_data_dir_is_refused(tmp_path, spawn):
    other = tmp_path / "lab" / "tsdb"
    prom = spawn(["prometheus", "-c", "import time; time.sleep(60)", f"--storage.tsdb.path={other}"],
                 executable=sys.executable)  # fmt: skip
    rec = {"engine": "prometheus", "url": "http://127.0.0.1:9", "pid": prom.pid, "data_dir": str(other),
           "log": "x", **identity(prom)}  # fmt: skip
    folder = forged_folder(tmp_path, processes={"prometheus": rec})
    res = perfkit("drill", "stop", "drill-01", "-o", folder)
    assert res.returncode == 2 and "is not this drill's" in res.stdout
    assert prom.poll() is None


# -- C3 / U: a malformed state is one line and a non-zero exit -----------------------------------------


@pytest.mark.parametrize(
    ("over", "said"),
    [
        ({"processes": []}, "'processes' is not a mapping of process names"),
        ({"speed": "fast"}, "'speed' is not a number"),
        ({"anchor": None}, "'anchor' is not a number"),
        ({"plan": {"v0": 1}}, "'plan' lacks its virtual seconds"),
        ({"urls": {"engine": 5}}, "'urls' is not a mapping of URLs"),
    ],
)
def test_a_malformed_state_is_refused_in_one_line(tmp_path, over, said):
    folder = forged_folder(tmp_path, **over)
    for command in ("stop", "status"):
        res = perfkit("drill", command, "drill-01", "-o", folder)
        assert res.returncode == 2, (command, res.stdout, res.stderr)
        assert said in res.stderr and "Traceback" not in res.stderr
        assert len(res.stderr.strip().splitlines()) == 1


def test_a_malformed_process_entry_says_so_and_exits_non_zero(tmp_path):
    folder = forged_folder(
        tmp_path,
        processes={"engine": {"pid": "1", "bogus": True}, "load": [1, 2], "evil": {"pid": 1}},
    )
    res = perfkit("drill", "stop", "drill-01", "-o", folder)
    assert res.returncode == 2
    out = res.stdout + res.stderr
    assert "Traceback" not in out and "__init__" not in out and "TypeError" not in out
    assert "engine: malformed entry (fields: bogus, pid); nothing signalled" in res.stdout
    assert "load: not a process of a live drill (list); nothing signalled" in res.stdout
    assert "evil: not a process of a live drill (dict); nothing signalled" in res.stdout


# -- messages ---------------------------------------------------------------------------------------------


def test_a_drill_started_without_live_says_which_commands_apply(tmp_path):
    folder = tmp_path / "r"
    res = CliRunner().invoke(cli, ["drill", "start", "drill-01", "-o", str(folder)])
    assert res.exit_code == 0, res.output
    status = CliRunner().invoke(cli, ["drill", "status", "drill-01", "-o", str(folder)])
    assert status.exit_code == 2
    assert "a drill started without --live" in status.output and "no live drill here" not in status.output
    assert f"perfkit drill check drill-01 -o {folder} --answer DIRECTION" in status.output
    assert "perfkit lab down prometheus-drill-01" in status.output


def test_a_drill_without_live_prints_a_run_command_the_cli_takes(tmp_path):
    folder = tmp_path / "r"
    res = CliRunner().invoke(cli, ["drill", "start", "drill-01", "-o", str(folder)])
    line = next(x.strip() for x in res.output.splitlines() if x.strip().startswith("perfkit run "))
    words = shlex.split(line)
    assert words[:3] == ["perfkit", "run", "inference_latency"]
    assert words[words.index("--bundle") + 1] == str((folder / "evidence").resolve())
    ctx = cli.commands["run"].make_context("run", words[2:])  # parsed as the CLI would, not executed
    assert ctx.params["bundle"] == str((folder / "evidence").resolve())
    assert ctx.params["out"] == str(folder / "run")


# -- the drill clock: long enough to fix, capped when the machine cannot keep up ------------------------


def test_a_drill_lasts_long_enough_in_wall_time_to_fix_it():
    t = Timing()
    for speed in (1.0, 5.0, 30.0, L.MAX_SPEED):
        life = life_for(speed, t)
        assert life >= t.duration and life / speed >= MIN_LIFE_WALL_S
        # the clock never overtakes the wall clock over the life and the supervisor's grace
        from perfkit.app.drills.live_clock import GRACE_S

        wall = (life + GRACE_S) / speed
        assert offset_for(speed, t) >= wall * speed - wall


def test_the_speed_is_capped_to_what_was_sustained():
    assert capped_speed(30.0, 29.0, 0.9) is None  # held
    assert capped_speed(30.0, 18.0, 0.9) == 14.0  # four fifths of what the machine kept
    assert capped_speed(5.0, 0.5, 0.9) == 1.0  # never under real time


def test_status_warns_when_the_load_has_stopped(tmp_path, spawn):
    gone = spawn([sys.executable, "-c", "pass", "--replay=x"])
    gone.wait(timeout=10)
    rec = {"name": "load", "pid": gone.pid, "cmdline": [sys.executable, "-c", "pass"], "started": 1}
    folder = forged_folder(tmp_path, processes={"load": rec})
    res = perfkit("drill", "status", "drill-01", "-o", folder)
    assert res.returncode == 0, res.stderr
    assert "load: not running" in res.stdout
    assert "warning: the drill's load has stopped" in res.stdout
