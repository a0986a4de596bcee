"""perfkit installed from its wheel, run from a folder that is not a checkout (issue 8 item 6).

The wheel is built from this tree and installed, without its dependencies, into a fresh
virtualenv whose path also reaches this environment's libraries (a ``.pth`` line: the libraries
come from the registry either way; what is tested is what the wheel carries). The kernel papermill
starts is the new virtualenv's own (``JUPYTER_PATH``), so the runbook imports the installed perfkit.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.notebook
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp),
            str(REPO),
        ],
        check=True,
        capture_output=True,
        cwd=tmp,
    )
    wheel = next(tmp.glob("perfkit-*.whl"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    site_packages = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site_packages / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(  # the new virtualenv's own pip: its console script runs its own python
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        check=True,
        capture_output=True,
    )
    subprocess.run(
        [str(py), "-m", "ipykernel", "install", "--prefix", str(venv), "--name", "python3"],
        check=True,
        capture_output=True,
    )
    work = tmp / "elsewhere"
    work.mkdir()
    env = {
        **os.environ,
        "PATH": f"{venv / 'bin'}:{os.environ['PATH']}",
        "JUPYTER_PATH": str(venv / "share" / "jupyter"),
        "PERFKIT_CACHE": str(tmp / "cache"),
        "PYTHONNOUSERSITE": "1",
    }
    env.pop("VIRTUAL_ENV", None)
    return wheel, venv, work, env


def _perfkit(installed, *args: str) -> subprocess.CompletedProcess:
    _, venv, work, env = installed
    return subprocess.run(
        [str(venv / "bin" / "perfkit"), *args], cwd=work, env=env, capture_output=True, text=True, timeout=600
    )


def test_the_wheel_carries_runbooks_and_templates_not_the_bundles(installed):
    wheel = installed[0]
    names = zipfile.ZipFile(wheel).namelist()
    assert any(n.endswith("share/perfkit/runbooks/inference_latency.ipynb") for n in names)
    assert any(n.endswith("share/perfkit/runbooks/training_step.ipynb") for n in names)
    assert any(n.endswith("share/perfkit/templates/postmortem.md.j2") for n in names)
    assert not any("data/scenarios" in n for n in names)


def test_the_installed_perfkit_is_the_wheel_not_this_checkout(installed):
    _, venv, work, env = installed
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import perfkit; print(perfkit.__file__)"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(venv) in where and str(REPO) not in where


@pytest.mark.slow  # ~10-35 s: in make test-all and CI, not make test
def test_demo_runs_from_any_folder(installed):
    res = _perfkit(installed, "run", "inference_latency", "--bundle", "demo", "-o", "out")
    assert res.returncode == 0, res.stdout + res.stderr
    out = installed[2] / "out"
    md = (out / "postmortem.md").read_text()
    assert "prefill_decode_interference" in md
    assert "prefill_decode_interference" in (out / "postmortem.html").read_text()  # the HTML template shipped
    nb = (out / "inference_latency.ipynb").read_text()
    cache = installed[3]["PERFKIT_CACHE"]
    assert cache in nb  # the demo bundle was simulated into the cache, not read from this checkout
    assert str(REPO / "data") not in nb


@pytest.mark.slow  # ~10-35 s: in make test-all and CI, not make test
def test_drills_list_and_start_from_any_folder(installed):
    res = _perfkit(installed, "drill", "list")
    assert res.returncode == 0, res.stderr
    assert "drill-01" in res.stdout and "release-regression" not in res.stdout  # neutral ids only
    res = _perfkit(installed, "drill", "start", "release-regression", "-o", "drill")
    assert res.returncode == 0, res.stdout + res.stderr
    assert (installed[2] / "drill" / "evidence" / "incident.yaml").exists()
    assert not (installed[2] / "drill" / "evidence" / "answer.yaml").exists()


def test_hardware_tables_ship_in_the_wheel(installed):
    """The GPU and model tables (data/hardware) are found from an installed wheel, outside the checkout."""
    _, venv, work, env = installed
    code = "from perfkit.core.hardware import gpu, model, table_dir; print(table_dir()); print(gpu('H100').key, model('llama-3.1-8b').layers)"
    res = subprocess.run(
        [str(venv / "bin" / "python"), "-c", code], cwd=work, env=env, capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr
    where, found = res.stdout.splitlines()
    assert str(REPO) not in where and "share/perfkit/data/hardware" in where
    assert found.split()[1] == "32"  # Llama 3.1 8B's config.json: num_hidden_layers 32
