"""``perfkit open``: a parameterized copy of a runbook in an incident folder, opened in JupyterLab.

The incident notebook is the engineer's working record: opening the same incident again
re-opens it (notes and outputs kept) instead of replacing it; ``fresh=True`` starts over and
keeps the previous notebook beside the new one as ``<name>.<YYYYmmdd-HHMMSS>.ipynb`` (UTC).

JupyterLab gets its token through a private config file (mode 0600, in a 0700 temporary folder,
removed once the server has read it), never on its command line (which every local user can read
with ``ps``) nor in its environment (which its kernels inherit: a cell printing ``os.environ``
would write the token into the notebook). It runs without terminals unless asked for them.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets as _secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perfkit.app.runner.run import _fast_nbformat_import, find_runbook, runbook_parameters
from perfkit.core.secrets import check_parameters
from perfkit.errors import ConfigError
from perfkit.lab.servers import free_port

# -- the incident notebook ----------------------------------------------------------------------


def write_parameterized(
    runbook: str,
    folder: Path,
    parameters: dict[str, Any],
    *,
    fresh: bool = False,
    say: Callable[[str], Any] = print,
) -> Path:
    """``folder/<runbook>.ipynb``: a copy of ``runbook`` with ``parameters`` injected (papermill's
    injected-parameters cell), written atomically. Returns its path.

    When that notebook already exists it is re-opened, not replaced: nothing is written and
    ``say`` tells so (and, when ``parameters`` differ from the ones it was written with, that
    they were not applied). The one exception is a notebook nobody has touched (its cells are
    still exactly what perfkit wrote, without outputs): it holds no notes, so it is rewritten
    with the new parameters. ``fresh=True`` starts over: the existing notebook is kept beside the
    new one as ``<name>.<YYYYmmdd-HHMMSS>.ipynb`` (never overwriting an earlier copy).
    """
    path = find_runbook(runbook)
    check_parameters(parameters)
    known = runbook_parameters(path)
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        raise ConfigError(f"unknown runbook parameter(s) {', '.join(unknown)}: known are {', '.join(known)}")
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / path.name
    if not target.exists():
        _write_atomic(_parameterized(path, parameters), target)
        return target
    if path.resolve() == target.resolve():
        if fresh:
            raise ConfigError(
                f"{target} is the incident notebook itself: name the runbook (e.g. {path.stem}) to start over"
            )
        say(f"re-opening the existing notebook {target} (your notes are kept)")
        return target
    if fresh:
        backup = _keep_beside(target)
        _write_atomic(_parameterized(path, parameters), target)
        say(f"started over in {target}; the previous notebook is kept as {backup.name}")
        return target
    existing = _read_notebook(target)
    recorded = _recorded_parameters(existing)
    changes = _parameter_changes(recorded, parameters) if parameters else []
    if changes and _untouched(existing, _parameterized(path, recorded)):
        _write_atomic(_parameterized(path, parameters), target)
        say(f"rewrote {target} with the new parameters ({'; '.join(changes)}): it held no notes or outputs")
        return target
    say(f"re-opening the existing notebook {target} (your notes are kept); --fresh starts over")
    if changes:
        say(
            f"  it was written with other parameters, which were NOT applied: {'; '.join(changes)}"
            " (use --fresh to start over with them, or edit the injected-parameters cell)"
        )
    return target


def _parameterized(path: Path, parameters: dict[str, Any]) -> Any:
    _fast_nbformat_import()
    from papermill.iorw import load_notebook_node  # adds the metadata papermill's parameterizer needs
    from papermill.parameterize import parameterize_notebook

    nb = load_notebook_node(str(path))
    if parameters:
        nb = parameterize_notebook(nb, parameters, kernel_name="python3")
    return nb


def _read_notebook(target: Path) -> Any:
    _fast_nbformat_import()
    import nbformat

    try:
        return nbformat.read(str(target), as_version=4)
    except Exception as err:  # any unreadable notebook: say so, and keep it
        raise ConfigError(
            f"{target}: cannot read the existing notebook ({type(err).__name__}); it was left as it is: "
            "--fresh starts over and keeps it beside the new one"
        ) from None


def _recorded_parameters(nb: Any) -> dict[str, Any]:
    papermill = nb.get("metadata", {}).get("papermill", {}) or {}
    recorded = papermill.get("parameters") or {}
    return dict(recorded) if isinstance(recorded, dict) else {}


def _parameter_changes(recorded: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    """``name: old → new`` for each parameter that differs (as JSON values)."""

    def shown(value: Any) -> str:
        text = json.dumps(value, default=str, ensure_ascii=False) if value is not _ABSENT else "(not set)"
        return text if len(text) <= 60 else text[:59] + "…"

    def norm(value: Any) -> Any:
        return json.loads(json.dumps(value, default=str)) if value is not _ABSENT else value

    changes = []
    for name in sorted(set(recorded) | set(wanted)):
        old, new = recorded.get(name, _ABSENT), wanted.get(name, _ABSENT)
        if norm(old) != norm(new):
            changes.append(f"{name}: {shown(old)} → {shown(new)}")
    return changes


_ABSENT = object()


def _untouched(existing: Any, written: Any) -> bool:
    """Whether ``existing`` is still exactly what perfkit wrote (``written``): same cells, no outputs."""

    def cells(nb: Any) -> list[tuple[str, str]]:
        return [(c.get("cell_type", ""), _source(c.get("source", ""))) for c in nb.get("cells", [])]

    no_outputs = all(not c.get("outputs") and not c.get("execution_count") for c in existing.get("cells", []))
    return no_outputs and cells(existing) == cells(written)


def _source(source: Any) -> str:
    return "".join(source) if isinstance(source, list) else str(source)


def _keep_beside(target: Path) -> Path:
    """Keep ``target`` as ``<stem>.<YYYYmmdd-HHMMSS>.ipynb`` beside it (``-2``, ``-3`` … when taken)."""
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    for n in range(1, 1000):
        backup = target.with_name(f"{target.stem}.{stamp}{'' if n == 1 else f'-{n}'}{target.suffix}")
        try:
            os.link(target, backup)  # never replaces an existing file
        except FileExistsError:
            continue
        except OSError:  # no hard links here: copy into a file that must not exist yet
            try:
                with target.open("rb") as src, backup.open("xb") as dst:
                    shutil.copyfileobj(src, dst)
            except FileExistsError:
                continue
        return backup
    raise ConfigError(f"{target}: too many copies named {target.stem}.{stamp}*; move some away")


def _write_atomic(nb: Any, target: Path) -> None:
    """Write a notebook through a temporary file in the same folder, then ``os.replace`` it in."""
    _fast_nbformat_import()
    import nbformat

    tmp = target.with_name(f".{target.name}.{_secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            nbformat.write(nb, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# -- JupyterLab ---------------------------------------------------------------------------------


@dataclass
class Lab:
    """A JupyterLab server started by :func:`launch_lab` (stop it with :meth:`stop`)."""

    proc: subprocess.Popen = field(repr=False)
    port: int
    token: str = field(repr=False)
    notebook: str  # path of the notebook, relative to the server's root
    config_dir: Path | None = field(default=None, repr=False)  # the private folder holding the token

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def notebook_url(self) -> str:
        return f"{self.url}/lab/tree/{self.notebook}?token={self.token}"

    def stop(self, timeout_s: float = 15.0) -> None:
        """SIGTERM the server this object started (its own Popen), then SIGKILL if it lingers;
        the private config folder (the token) is removed in any case. Ctrl-C, SIGTERM and SIGHUP
        arriving meanwhile are held until it is done, so they cannot cut it short."""
        with _signals_held():
            try:
                if self.proc.poll() is not None:
                    return
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait(timeout=timeout_s)
            finally:
                self.forget_config()

    def forget_config(self) -> None:
        """Remove the private config folder (JupyterLab reads it once, at start)."""
        if self.config_dir is not None:
            shutil.rmtree(self.config_dir, ignore_errors=True)


@contextlib.contextmanager
def _signals_held() -> Any:
    """Block SIGINT, SIGTERM and SIGHUP in this thread while inside (where the platform can); one
    that arrives meanwhile is delivered, and its Python handler runs, on the way out."""
    mask = getattr(signal, "pthread_sigmask", None)
    if mask is None:
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}
    previous = mask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        mask(signal.SIG_SETMASK, previous)


def jupyter_command() -> str:
    return shutil.which("jupyter") or str(Path(sys.executable).with_name("jupyter"))


def lab_command(folder: Path, port: int, *, terminals: bool = False, config: Path | None = None) -> list[str]:
    """JupyterLab's argv: 127.0.0.1 only, no browser, terminals off unless asked, and no token
    (that goes in the private ``config`` file: see :func:`launch_lab`)."""
    cmd = [
        jupyter_command(),
        "lab",
        "--no-browser",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        f"--ServerApp.root_dir={folder.resolve()}",
    ]
    if config is not None:
        cmd.append(f"--config={config}")
    if not terminals:
        cmd.append("--ServerApp.terminals_enabled=False")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return cmd


def launch_lab(
    folder: Path,
    notebook: Path,
    *,
    port: int = 0,
    terminals: bool = False,
    log: Path | None = None,
    ready_timeout_s: float = 90.0,
) -> Lab:
    """Start JupyterLab on 127.0.0.1 serving ``folder`` and return once it answers.

    The token is random, written to ``IdentityProvider.token`` in a JSON config file (mode 0600,
    in a private 0700 temporary folder) passed with ``--config``: never in argv, and never in the
    server's environment, which its kernels inherit. The folder is removed as soon as the server
    answers (it reads its config once, at start), and by :meth:`Lab.stop` in any case. The
    user's own ``jupyter_server_config`` is not read (``--config`` replaces it); ``jupyter_config``
    still is. Output goes to ``log`` (default: this terminal). Raises :class:`ConfigError` when
    the server exits or does not answer in ``ready_timeout_s``; the server is stopped when this
    fails or is interrupted (Ctrl-C, or an exception raised by a signal handler) before it returns.
    """
    import requests

    port = port or free_port()
    token = _secrets.token_hex(24)
    # neither variable reaches the server: a token there would reach every kernel too
    env = {k: v for k, v in os.environ.items() if k not in ("JUPYTER_TOKEN", "JUPYTER_TOKEN_FILE")}
    try:
        relative = notebook.resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        relative = notebook.name
    private = Path(tempfile.mkdtemp(prefix="perfkit-lab-"))  # mode 0700
    lab: Lab | None = None
    try:
        config = _write_token_config(private, token)
        out = log.open("ab") if log is not None else None
        try:
            lab = Lab(
                subprocess.Popen(
                    lab_command(folder, port, terminals=terminals, config=config),
                    env=env,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT if out is not None else None,
                ),
                port,
                token,
                relative,
                private,
            )
        finally:
            if out is not None:
                out.close()
        deadline = time.monotonic() + ready_timeout_s
        while True:
            if lab.proc.poll() is not None:
                raise ConfigError(f"JupyterLab exited with status {lab.proc.returncode} before it was ready")
            try:
                resp = requests.get(
                    f"{lab.url}/api/status", headers={"Authorization": f"token {token}"}, timeout=2
                )
                if resp.status_code == 200:
                    lab.forget_config()
                    return lab
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise ConfigError(f"JupyterLab did not answer on {lab.url} within {ready_timeout_s:g} s")
            time.sleep(0.2)
    except BaseException:
        if lab is not None:
            lab.stop()
        shutil.rmtree(private, ignore_errors=True)
        raise


def _write_token_config(private: Path, token: str) -> Path:
    """``private/jupyter_server_config.json`` (mode 0600) setting the server's token."""
    config = private / "jupyter_server_config.json"
    fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"IdentityProvider": {"token": token}}, fh)
    return config


class _Terminated(BaseException):
    """Raised in the main thread by the SIGTERM/SIGHUP handler :func:`open_runbook` installs."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _terminate_on_signals() -> Any:
    """While inside: SIGTERM and SIGHUP raise :class:`_Terminated` in the main thread (once: a
    later one is ignored), so ``finally`` blocks stop the lab instead of leaving it orphaned. The previous handlers are restored on the way out. Outside
    the main thread (where handlers cannot be installed) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def handler(signum: int, frame: Any) -> None:
        if not received:
            received.append(signum)
            raise _Terminated(signum)

    wanted = [s for s in (getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if s is not None]
    previous = {s: signal.signal(s, handler) for s in wanted}
    try:
        yield
    finally:
        for s, old in previous.items():
            signal.signal(s, old)


def open_runbook(
    runbook: str,
    folder: Path,
    parameters: dict[str, Any],
    *,
    port: int = 0,
    start_lab: bool = True,
    fresh: bool = False,
    terminals: bool = False,
) -> Path:
    """Write (or re-open) the incident notebook, then serve it in JupyterLab until Ctrl-C."""
    target = write_parameterized(runbook, folder, parameters, fresh=fresh)
    print(f"runbook: {target}", flush=True)
    if not start_lab:
        return target
    lab: Lab | None = None
    try:
        with _terminate_on_signals():  # SIGTERM/SIGHUP stop the lab too, instead of orphaning it
            try:
                lab = launch_lab(folder, target, port=port, terminals=terminals)  # stops it if interrupted
                print(f"JupyterLab: {lab.notebook_url}")
                print("terminals are on" if terminals else "terminals are off (--terminals turns them on)")
                print("stop it with Ctrl-C", flush=True)
                with contextlib.suppress(KeyboardInterrupt):
                    lab.proc.wait()
            finally:
                if lab is not None:
                    lab.stop()
    except _Terminated as stopped:
        raise SystemExit(128 + stopped.signum) from None
    return target
