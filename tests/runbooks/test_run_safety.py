"""`perfkit run` under real use (issue 7): private kernels for parallel runs, signals that still
scrub and write, output folders that are never lost, parameters that are only data, honest exits.

Most tests execute a tiny notebook (a parameters cell and one cell that prints an environment
variable), so the kernel start, the scrub and the move into place are real and fast; the honest-exit
test runs the shipped runbook against a metrics server that does not answer.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from perfkit.errors import ConfigError

pytestmark = pytest.mark.notebook
REPO = Path(__file__).resolve().parents[2]
PERFKIT = [sys.executable, "-m", "perfkit"]
SECRET = "s3cr3t-Value-4-tests-only-0042"

CELL = """\
import os, pathlib, signal, time
print("token is", os.environ.get("PERFKIT_TEST_TOKEN", ""))
if ignore_sigint:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
if marker:
    pathlib.Path(marker).write_text("ready")
time.sleep(sleep_s)
if fail:
    raise RuntimeError("asked to fail")
print("done", label)
"""


def _tiny(path: Path) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = nbformat.v4.new_code_cell(
        'label = "x"\nsleep_s = 0.0\nmarker = ""\nfail = False\nignore_sigint = False\nwhen = ""'
    )
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell(CELL)]
    nbformat.write(nb, str(path))
    return path


@pytest.fixture
def tiny(tmp_path) -> Path:
    return _tiny(tmp_path / "tiny.ipynb")


def _env(tmp_path: Path) -> dict[str, str]:
    tmpdir = tmp_path / "tmpdir"
    tmpdir.mkdir(exist_ok=True)
    return {**os.environ, "PERFKIT_TEST_TOKEN": SECRET, "TMPDIR": str(tmpdir)}


def _run(args: list[str], cwd: Path, env: dict[str, str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*PERFKIT, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, **kw
    )


def _digests(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_four_parallel_runs_have_private_kernels_and_leave_nothing_behind(tmp_path, tiny):
    """Row 1: kernels over IPC shared `kernel-ipc-N` in papermill's cwd; parallel runs collided."""
    env = _env(tmp_path)
    procs = [
        subprocess.Popen(
            [*PERFKIT, "run", str(tiny), "-o", str(tmp_path / f"out{i}"), "-p", f"label=run{i}"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(4)
    ]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outputs
    for i in range(4):
        nb = (tmp_path / f"out{i}" / "tiny.ipynb").read_text()
        assert f"done run{i}" in nb
        assert (tmp_path / f"out{i}" / "postmortem.md").exists()
    leftovers = [p.name for p in (*tmp_path.iterdir(), *REPO.iterdir()) if p.name.startswith("kernel-ipc")]
    assert leftovers == []
    assert list((tmp_path / "tmpdir").iterdir()) == []  # the private kernel folders were removed
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["tiny.ipynb", "tmpdir", "out0", "out1", "out2", "out3"]
    )


def _wait(proc: subprocess.Popen) -> str:
    """Output of ``proc`` once it ends; killed (with its kernel, by PID) if it outlives the test."""
    try:
        return proc.communicate(timeout=60)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise


def _start_in_cell(tmp_path: Path, tiny: Path, *params: str) -> subprocess.Popen:
    """``perfkit run`` of the tiny notebook, returned once its cell has printed the secret and sleeps."""
    ready = tmp_path / "ready"
    args = ["run", str(tiny), "-o", str(tmp_path / "out"), "-p", f"marker={ready}"]
    for p in params:
        args += ["-p", p]
    proc = subprocess.Popen(
        [*PERFKIT, *args],
        cwd=tmp_path,
        env=_env(tmp_path),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ready.exists(), "the cell never started"
    return proc


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_interrupts_the_cell_and_the_partial_record_is_scrubbed(tmp_path, tiny, sig):
    """Row 5: SIGINT waited for the cell to end; neither signal scrubbed or wrote a postmortem."""
    proc = _start_in_cell(tmp_path, tiny, "sleep_s=120")
    t0 = time.monotonic()
    proc.send_signal(sig)
    out = _wait(proc)
    assert time.monotonic() - t0 < 20
    assert proc.returncode == 128 + sig, out
    record = tmp_path / "out"
    for name in ("tiny.ipynb", "postmortem.md", "postmortem.html", "findings.json"):
        text = (record / name).read_text()
        assert SECRET not in text, name
    assert "token is [redacted]" in (record / "tiny.ipynb").read_text()
    assert json.loads((record / ".perfkit-run.json").read_text())["status"] == "failed"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.")]  # no staging left


@pytest.mark.slow
def test_a_cell_that_ignores_sigint_is_stopped_after_the_grace_period(tmp_path, tiny):
    proc = _start_in_cell(tmp_path, tiny, "sleep_s=300", "ignore_sigint=true")
    t0 = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out = _wait(proc)
    assert proc.returncode == 130, out
    assert time.monotonic() - t0 < 30
    assert SECRET not in (tmp_path / "out" / "tiny.ipynb").read_text()


def test_the_shipped_runbooks_folder_and_its_parents_are_refused(tmp_path, tiny):
    """Row 8: `-o runbooks/` overwrote the shipped runbook with the executed copy."""
    before = _digests(REPO / "runbooks")
    for target in (REPO / "runbooks", REPO):
        res = _run(["run", str(tiny), "-o", str(target), "--force"], tmp_path, _env(tmp_path))
        assert res.returncode == 2, res.stderr
        assert "perfkit ships" in res.stderr
    # a user's own runbook is protected the same way: its folder is not an output folder
    res = _run(["run", str(tiny), "-o", str(tmp_path)], tmp_path, _env(tmp_path))
    assert res.returncode == 2 and "perfkit ships" in res.stderr
    assert _digests(REPO / "runbooks") == before


def test_a_folder_perfkit_did_not_write_is_refused_even_with_force(tmp_path, tiny):
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    res = _run(["run", str(tiny), "-o", str(out)], tmp_path, _env(tmp_path))
    assert res.returncode == 2 and "not written by perfkit" in res.stderr
    res = _run(["run", str(tiny), "-o", str(out), "--force"], tmp_path, _env(tmp_path))
    assert res.returncode == 2 and "notes.txt" in res.stderr
    assert (out / "notes.txt").read_text() == "my notes"
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]


def test_rerun_replaces_its_own_record_but_not_an_edited_one_and_force_clears_stale_figures(tmp_path, tiny):
    env = _env(tmp_path)
    out = tmp_path / "out"
    assert _run(["run", str(tiny), "-o", str(out), "-p", "label=first"], tmp_path, env).returncode == 0
    res = _run(["run", str(tiny), "-o", str(out), "-p", "label=second"], tmp_path, env)
    assert res.returncode == 0, res.stderr
    assert "done second" in (out / "tiny.ipynb").read_text()
    # an engineer's notes in the executed notebook, and a figure perfkit did not write this time
    nb = out / "tiny.ipynb"
    nb.write_text(nb.read_text().replace("done second", "done second (my note: see ticket 7)"))
    (out / "figures").mkdir(exist_ok=True)
    (out / "figures" / "stale.png").write_bytes(b"\x89PNG old")
    res = _run(["run", str(tiny), "-o", str(out), "-p", "label=third"], tmp_path, env)
    assert res.returncode == 2 and "changed since perfkit wrote it" in res.stderr
    assert "my note" in nb.read_text()
    res = _run(["run", str(tiny), "-o", str(out), "-p", "label=third", "--force"], tmp_path, env)
    assert res.returncode == 0, res.stderr
    assert "done third" in nb.read_text()
    assert not (out / "figures" / "stale.png").exists()


def test_a_failed_run_never_replaces_a_good_record(tmp_path, tiny):
    """Row 1, second half: with the same -o, the failed run's postmortem replaced the good one."""
    env = _env(tmp_path)
    out = tmp_path / "out"
    assert _run(["run", str(tiny), "-o", str(out), "-p", "label=good"], tmp_path, env).returncode == 0
    good = _digests(out)
    res = _run(["run", str(tiny), "-o", str(out), "-p", "fail=true"], tmp_path, env)
    assert res.returncode == 1
    # the failing cell as JupyterLab numbers it, and the line that raised (issue 8: structured errors)
    assert 'cell In [3] (raise RuntimeError("asked to fail")): RuntimeError: asked to fail' in res.stderr
    assert _digests(out) == good
    beside = [p for p in tmp_path.iterdir() if p.name.startswith("out.failed-")]
    assert len(beside) == 1 and "asked to fail" in (beside[0] / "tiny.ipynb").read_text()
    assert str(beside[0].name) in res.stderr


def test_parameters_are_plain_data(tiny, tmp_path):
    """Row 2: papermill writes non-str values unescaped into the injected cell."""
    from datetime import UTC, datetime

    from perfkit.app.runner.run import execute

    payload = b'"+__import__("os").system("touch PWNED")+"'
    with pytest.raises(ConfigError, match="bytes value is not allowed"):
        execute(str(tiny), tmp_path / "out", {"label": payload})
    with pytest.raises(ConfigError, match="finite"):
        execute(str(tiny), tmp_path / "out", {"sleep_s": float("nan")})
    assert not (tmp_path / "out").exists() and not (REPO / "PWNED").exists()
    result = execute(str(tiny), tmp_path / "out", {"when": datetime(2026, 11, 30, 2, tzinfo=UTC)})
    cells = json.loads(result.notebook.read_text())["cells"]
    injected = next(c for c in cells if "injected-parameters" in c["metadata"].get("tags", []))
    assert 'when = "2026-11-30T02:00:00Z"' in "".join(injected["source"])


def _dead_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when we return: nothing listens there


@pytest.mark.slow
def test_an_unreachable_metrics_server_or_an_invalid_start_is_a_failure(tmp_path):
    """Row 10: Prometheus unreachable, or an invalid start, gave exit 0 and 'ok'."""
    env = _env(tmp_path)
    url = f"http://127.0.0.1:{_dead_port()}"
    res = _run(
        ["run", "inference_latency", "--prometheus", url, "--since", "1h", "--timeout", "1", "-o", "out"],
        tmp_path,
        env,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    assert "runbook failed: no evidence" in res.stderr and "cannot connect" in res.stderr
    assert (tmp_path / "out" / "postmortem.md").exists()  # the record still says what happened
    res = _run(
        ["run", "inference_latency", "--bundle", str(REPO / "data/scenarios/release-regression")]
        + ["--start", "yesterday-ish", "-o", "out2"],
        tmp_path,
        env,
    )
    assert res.returncode == 2 and "parameter start" in res.stderr
    assert not (tmp_path / "out2").exists()


def test_an_output_folder_given_as_a_symlink_stays_a_symlink(tmp_path, tiny):
    real = tmp_path / "records" / "inc-1"
    real.mkdir(parents=True)
    link = tmp_path / "latest"
    link.symlink_to(real)
    res = _run(["run", str(tiny), "-o", str(link)], tmp_path, _env(tmp_path))
    assert res.returncode == 0, res.stderr
    assert link.is_symlink() and (real / "tiny.ipynb").exists()


def test_force_never_deletes_a_notebook_perfkit_did_not_record(tmp_path, tiny):
    """Review of row 7: `run --force` on a `perfkit open` folder deleted the engineer's notes."""
    env = _env(tmp_path)
    out = tmp_path / "inc"
    out.mkdir()
    (out / "tiny.ipynb").write_text(tiny.read_text().replace('label = \\"x\\"', 'label = \\"my notes\\"'))
    (out / "tiny.20261130-020000.ipynb").write_text(tiny.read_text())  # an `open --fresh` backup
    res = _run(["run", str(tiny), "-o", str(out), "--force"], tmp_path, env)
    assert res.returncode == 2 and "tiny.20261130-020000.ipynb" in res.stderr
    assert "my notes" in (out / "tiny.ipynb").read_text()


def test_the_current_folder_as_output(tmp_path, tiny):
    """Review of row 8: `-o .` in an empty folder failed at the end and lost the record."""
    here = tmp_path / "here"
    here.mkdir()
    res = _run(["run", str(tiny), "-o", "."], here, _env(tmp_path))
    assert res.returncode == 0, res.stderr
    assert (here / "tiny.ipynb").exists() and (here / "postmortem.md").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["here", "tiny.ipynb", "tmpdir"]


@pytest.mark.slow
def test_live_parameters_never_fall_back_to_the_default_bundle(tmp_path):
    """Review of row 10: `-p prometheus_url=` (or a batch entry without bundle) ran on the demo bundle."""
    env = _env(tmp_path)
    url = f"http://127.0.0.1:{_dead_port()}"
    window = ["-p", "start=2026-11-30T01:55:00Z", "-p", "end=2026-11-30T02:35:00Z", "-p", "timeout_s=1"]
    res = _run(
        ["run", "inference_latency", "-o", "out", "-p", f"prometheus_url={url}", *window], tmp_path, env
    )
    assert res.returncode == 1 and "no evidence" in res.stderr, res.stdout + res.stderr
    nb = (tmp_path / "out" / "inference_latency.ipynb").read_text()
    assert "p95-prefill-interference" not in nb.split('"injected-parameters"', 1)[1].split('"source"', 2)[1]
    res = _run(
        [
            "run",
            "inference_latency",
            "-o",
            "out2",
            "--bundle",
            str(REPO / "data/scenarios/release-regression"),
        ]
        + ["--prometheus", url, "--since", "1h"],
        tmp_path,
        env,
    )
    assert res.returncode == 2 and "not both" in res.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-p", "gpu_count=" + "9" * 30], "integer out of range"),
        (["--since", "99999999d", "--prometheus", "http://127.0.0.1:9"], "not between 1 s and 10 years"),
    ],
)
def test_out_of_range_values_are_one_line_errors(tmp_path, args, message):
    res = _run(["run", "inference_latency", "-o", "out", *args], tmp_path, _env(tmp_path))
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr


def test_evidence_text_is_inert_in_the_executed_notebook(tmp_path, scenario_copy):
    """Review of row 12: the notebook's own Markdown and table outputs carried live images and HTML."""
    bundle = scenario_copy("release-regression")
    inc = bundle / "incident.yaml"
    inc.write_text(
        inc.read_text().replace(
            "title: Token latency up after the afternoon releases",
            'title: "![x](http://evil.example/x.png) <img src=x onerror=alert(1)>"',
        )
    )
    with (bundle / "events.csv").open("a") as fh:
        fh.write(
            '2026-11-18T14:20:00Z,config,assist-api,,"<img src=y onerror=alert(2)> ![y](http://evil.example/y)"\n'
        )
    args = ["run", "inference_latency", "--bundle", str(bundle), "-o", "out", "-p", "predict_fix=false"]
    res = _run(args, tmp_path, _env(tmp_path))
    assert res.returncode == 0, res.stderr
    nb = json.loads((tmp_path / "out" / "inference_latency.ipynb").read_text())
    outputs = [o for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", [])]
    markdown = "".join("".join(o.get("data", {}).get("text/markdown", "")) for o in outputs)
    html = "".join("".join(o.get("data", {}).get("text/html", "")) for o in outputs)
    assert "evil.example" in markdown + html  # the text is shown ...
    for raw in ("![x](http://evil.example/x.png)", "![y](http://evil.example/y)", "<img src="):
        assert raw not in markdown  # ... but cannot load anything
    assert "<img src=x" not in html and "<img src=y" not in html
