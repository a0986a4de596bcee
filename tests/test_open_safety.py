"""`perfkit open` keeps the engineer's notes and keeps JupyterLab's token out of `ps`.

* Re-opening an incident re-opens its notebook (notes kept); ``fresh`` starts over and keeps
  the old notebook beside the new one; writes are atomic.
* JupyterLab (the real one) gets its token from a private config file, neither in argv nor in
  its environment (which its kernels inherit); the API answers with the token and refuses without
  it; terminals are off unless asked for.
* SIGTERM or SIGHUP to ``perfkit open`` stops its JupyterLab too (no orphan left serving).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest
import requests
from nbformat.v4 import new_markdown_cell

from perfkit.app.runner.lab_open import free_port, lab_command, launch_lab, write_parameterized
from perfkit.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "data" / "scenarios"
BUNDLE = str(SCENARIOS / "release-regression")
NOTES = "my notes: the v2.4.0 deploy lines up with the TTFT jump"
BACKUP = re.compile(r"^inference_latency\.\d{8}-\d{6}(-\d+)?\.ipynb$")


def has_notes(path: Path) -> bool:
    nb = nbformat.read(str(path), as_version=4)
    return any(c.cell_type == "markdown" and NOTES in c.source for c in nb.cells)


def add_notes(path: Path) -> None:
    nb = nbformat.read(str(path), as_version=4)
    nb.cells.append(new_markdown_cell(NOTES))
    nbformat.write(nb, str(path))


def injected(path: Path) -> str:
    nb = nbformat.read(str(path), as_version=4)
    return "".join(c.source for c in nb.cells if "injected-parameters" in c.metadata.get("tags", []))


def test_reopening_keeps_the_notes(tmp_path: Path) -> None:
    said: list[str] = []
    first = write_parameterized("inference_latency", tmp_path, {"bundle": BUNDLE}, say=said.append)
    assert first == tmp_path / "inference_latency.ipynb" and not said
    add_notes(first)

    again = write_parameterized("inference_latency", tmp_path, {"bundle": BUNDLE}, say=said.append)
    assert again == first and has_notes(first)
    assert said == [f"re-opening the existing notebook {first} (your notes are kept); --fresh starts over"]

    # other parameters: still re-opened, and it says which were not applied
    said.clear()
    other = {"bundle": BUNDLE, "start": "2026-11-18T13:50:00Z"}
    write_parameterized("inference_latency", tmp_path, other, say=said.append)
    assert has_notes(first) and "2026-11-18T13:50:00Z" not in injected(first)
    assert len(said) == 2 and 'start: (not set) → "2026-11-18T13:50:00Z"' in said[1]
    assert "NOT applied" in said[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inference_latency.ipynb"]  # no temp files


def test_fresh_starts_over_and_keeps_the_old_one_beside_it(tmp_path: Path) -> None:
    target = write_parameterized("inference_latency", tmp_path, {"bundle": BUNDLE})
    add_notes(target)
    said: list[str] = []
    new = {"bundle": BUNDLE, "start": "2026-11-18T13:50:00Z"}
    assert write_parameterized("inference_latency", tmp_path, new, fresh=True, say=said.append) == target
    assert not has_notes(target) and 'start = "2026-11-18T13:50:00Z"' in injected(target)
    backups = [p for p in tmp_path.iterdir() if BACKUP.match(p.name)]
    assert len(backups) == 1 and has_notes(backups[0])
    assert backups[0].name in said[0]

    # again at once (same second): a second copy, the first one untouched
    add_notes(target)
    write_parameterized("inference_latency", tmp_path, new, fresh=True, say=said.append)
    backups = sorted(p for p in tmp_path.iterdir() if BACKUP.match(p.name))
    assert len(backups) == 2 and all(has_notes(b) for b in backups)
    assert not has_notes(target)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temp files left


def test_untouched_notebook_takes_new_parameters(tmp_path: Path) -> None:
    # what `perfkit drill start --live` does: write for the bundle, then again for the lab server
    target = write_parameterized("inference_latency", tmp_path, {"bundle": BUNDLE})
    said: list[str] = []
    live = {"bundle": "", "prometheus_url": "http://127.0.0.1:9090"}
    write_parameterized("inference_latency", tmp_path, live, say=said.append)
    assert 'prometheus_url = "http://127.0.0.1:9090"' in injected(target)
    assert "held no notes" in said[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["inference_latency.ipynb"]


def test_the_notebook_itself_as_runbook_is_reopened(tmp_path: Path) -> None:
    target = write_parameterized("inference_latency", tmp_path, {"bundle": BUNDLE})
    add_notes(target)
    assert write_parameterized(str(target), tmp_path, {}, say=lambda _: None) == target
    assert has_notes(target)
    with pytest.raises(ConfigError, match="is the incident notebook itself"):
        write_parameterized(str(target), tmp_path, {}, fresh=True)


def test_unreadable_existing_notebook_is_left_alone(tmp_path: Path) -> None:
    target = tmp_path / "inference_latency.ipynb"
    target.write_text("{half a notebook")
    with pytest.raises(ConfigError, match="cannot read the existing notebook"):
        write_parameterized("inference_latency", tmp_path, {"bundle": BUNDLE})
    assert target.read_text() == "{half a notebook"


def test_lab_command_never_carries_the_token(tmp_path: Path) -> None:
    off = lab_command(tmp_path, 8888)
    assert "--ServerApp.terminals_enabled=False" in off
    assert not [a for a in off if "token" in a.lower()]
    assert "--ServerApp.terminals_enabled=False" not in lab_command(tmp_path, 8888, terminals=True)
    with_config = lab_command(tmp_path, 8888, config=tmp_path / "c.json")
    assert f"--config={tmp_path / 'c.json'}" in with_config


def children(pid: int) -> list[int]:
    """The PIDs of ``pid``'s child processes (Linux /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        with contextlib.suppress(OSError):
            found += [int(c) for c in task.read_text().split()]
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (not gone, not a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] not in ("Z", "X")


jupyter = Path(sys.executable).with_name("jupyter")


@pytest.mark.integration
@pytest.mark.skipif(not (jupyter.exists() or shutil.which("jupyter")), reason="JupyterLab is not installed")
def test_real_jupyterlab_token_not_in_argv_and_terminals_off(tmp_path: Path) -> None:
    pytest.importorskip("jupyterlab")
    folder = tmp_path / "inc"
    target = write_parameterized("inference_latency", folder, {"bundle": BUNDLE})
    lab = launch_lab(folder, target, port=free_port(), log=tmp_path / "lab.log")
    try:
        argv = Path(f"/proc/{lab.proc.pid}/cmdline").read_bytes().split(b"\0")
        assert lab.token.encode() not in b" ".join(argv)
        assert b"--ServerApp.terminals_enabled=False" in argv
        # nor in its environment, which every kernel inherits
        environ = Path(f"/proc/{lab.proc.pid}/environ").read_bytes()
        assert lab.token.encode() not in environ
        assert b"JUPYTER_TOKEN=" not in environ
        # the private config file it was read from is gone once the server answered
        config = [a.decode().partition("=")[2] for a in argv if a.startswith(b"--config=")]
        assert len(config) == 1 and not Path(config[0]).exists() and not Path(config[0]).parent.exists()
        assert lab.token in lab.notebook_url and lab.notebook_url.endswith(
            f"/lab/tree/inference_latency.ipynb?token={lab.token}"
        )

        ok = requests.get(f"{lab.url}/api/status", params={"token": lab.token}, timeout=10)
        assert ok.status_code == 200, ok.text
        assert requests.get(f"{lab.url}/api/status", timeout=10).status_code == 403
        wrong = requests.get(f"{lab.url}/api/status", params={"token": "0" * 48}, timeout=10)
        assert wrong.status_code == 403

        auth = {"Authorization": f"token {lab.token}"}
        terminal = requests.post(f"{lab.url}/api/terminals", headers=auth, timeout=10)
        assert terminal.status_code == 404, terminal.text
        # the notebook is served from the incident folder
        contents = requests.get(f"{lab.url}/api/contents/{target.name}", headers=auth, timeout=10)
        assert contents.status_code == 200 and contents.json()["type"] == "notebook"

        # a kernel's environment (what a cell printing os.environ shows) holds no token either
        before = set(children(lab.proc.pid))
        kernel = requests.post(f"{lab.url}/api/kernels", headers=auth, json={"name": "python3"}, timeout=30)
        assert kernel.status_code == 201, kernel.text
        deadline = time.monotonic() + 30
        while not (new := set(children(lab.proc.pid)) - before) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert new, "no kernel process appeared"
        for pid in new:
            assert lab.token.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
        requests.delete(f"{lab.url}/api/kernels/{kernel.json()['id']}", headers=auth, timeout=30)
    finally:
        lab.stop()
    assert lab.proc.poll() is not None


@pytest.mark.integration
@pytest.mark.skipif(not (jupyter.exists() or shutil.which("jupyter")), reason="JupyterLab is not installed")
@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGHUP"])
def test_signalled_perfkit_open_stops_its_jupyterlab(tmp_path: Path, sig: str) -> None:
    pytest.importorskip("jupyterlab")
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_TOKEN", "JUPYTER_TOKEN_FILE")}
    with (tmp_path / "err.log").open("wb") as err:
        perfkit = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "perfkit",
                "open",
                "inference_latency",
                "--bundle",
                BUNDLE,
                "-o",
                str(tmp_path / "inc"),
            ],
            cwd=ROOT,
            env={**env, "PYTHONUNBUFFERED": "1"},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
    lab_pids: list[int] = []
    try:
        assert perfkit.stdout is not None
        deadline = time.monotonic() + 120
        line = ""
        while not line.startswith("JupyterLab: "):
            line = perfkit.stdout.readline()
            assert line or perfkit.poll() is None, (tmp_path / "err.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "no JupyterLab URL line"
        lab_pids = children(perfkit.pid)
        assert lab_pids, "no JupyterLab child process"
        assert all(running(p) for p in lab_pids)

        perfkit.send_signal(getattr(signal, sig))
        assert perfkit.wait(timeout=15) == 128 + getattr(signal, sig)
        deadline = time.monotonic() + 15
        while any(running(p) for p in lab_pids) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(running(p) for p in lab_pids), f"JupyterLab orphaned: {lab_pids}"
    finally:
        if perfkit.poll() is None:
            perfkit.kill()
            perfkit.wait(timeout=10)
        for pid in lab_pids:  # only if the test failed: what perfkit left behind, by its own PID
            if running(pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
