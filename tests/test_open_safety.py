"""`perfkit open` keeps the engineer's notes and keeps JupyterLab's token out of `ps`.

* Re-opening an incident re-opens its notebook (notes kept); ``fresh`` starts over and keeps
  the old notebook beside the new one; writes are atomic.
* JupyterLab (the real one) gets its token from the environment, not argv; the API answers with
  the token and refuses without it; terminals are off unless asked for.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
import requests
from nbformat.v4 import new_markdown_cell

from perfkit.errors import ConfigError
from perfkit.lab_open import free_port, lab_command, launch_lab, write_parameterized

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "scenarios"
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
    finally:
        lab.stop()
    assert lab.proc.poll() is not None
