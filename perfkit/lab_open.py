"""``perfkit open``: a parameterized copy of a runbook in an incident folder, opened in JupyterLab."""

from __future__ import annotations

import contextlib
import secrets as _secrets
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from perfkit.errors import ConfigError
from perfkit.run import _fast_nbformat_import, find_runbook, runbook_parameters
from perfkit.secrets import check_parameters


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_parameterized(runbook: str, folder: Path, parameters: dict[str, Any]) -> Path:
    """Copy ``runbook`` into ``folder`` with ``parameters`` injected (papermill's injected-parameters cell)."""
    path = find_runbook(runbook)
    check_parameters(parameters)
    known = runbook_parameters(path)
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        raise ConfigError(f"unknown runbook parameter(s) {', '.join(unknown)}: known are {', '.join(known)}")
    _fast_nbformat_import()
    import nbformat
    from papermill.parameterize import parameterize_notebook

    folder.mkdir(parents=True, exist_ok=True)
    from papermill.iorw import load_notebook_node  # adds the metadata papermill's parameterizer needs

    nb = load_notebook_node(str(path))
    if parameters:
        nb = parameterize_notebook(nb, parameters, kernel_name="python3")
    target = folder / path.name
    nbformat.write(nb, str(target))
    return target


def open_runbook(
    runbook: str, folder: Path, parameters: dict[str, Any], *, port: int = 0, start_lab: bool = True
) -> Path:
    target = write_parameterized(runbook, folder, parameters)
    print(f"runbook: {target}")
    if not start_lab:
        return target
    jupyter = shutil.which("jupyter") or str(Path(sys.executable).with_name("jupyter"))
    port = port or free_port()
    token = _secrets.token_hex(16)
    cmd = [
        jupyter,
        "lab",
        "--no-browser",
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        f"--ServerApp.root_dir={folder.resolve()}",
        f"--IdentityProvider.token={token}",
    ]
    import os

    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    print(f"JupyterLab: http://127.0.0.1:{port}/lab/tree/{target.name}?token={token}")
    print("stop it with Ctrl-C")
    with contextlib.suppress(KeyboardInterrupt):
        subprocess.run(cmd, check=False)
    return target
