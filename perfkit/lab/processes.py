"""Which process a PID is, and signalling it only while it still is the one perfkit started.

A PID alone names nothing for long: it is reused once its process exits. :func:`process_identity`
reads a running process' argv and start time, :func:`identity_refusal` says why one is not the
process a state file recorded, and the signal helpers send through a pidfd where the kernel has
them. ``perfkit lab down`` (:mod:`perfkit.lab.servers`) and the live drills both stop processes
through these, never by argv alone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from perfkit.errors import ConfigError


class NotOurProcess(ConfigError):
    """The PID recorded for a lab server is not (or no longer) the server perfkit started: nothing
    was signalled.

    Either the server exited and its PID was reused, or the state file was edited or is malformed
    (wrong field types); in every case its state is stale and can be removed.
    """


def process_identity(pid: int) -> tuple[list[str], int | None] | None:
    """``(argv, start time)`` of a running process; ``None`` when there is none (or only a zombie:
    exited, not yet reaped).

    On Linux: ``/proc/PID/cmdline`` and field 22 of ``/proc/PID/stat`` (clock ticks since boot: a
    reused PID gets a new one). Elsewhere: ``ps -o args=`` split on spaces, with no start time.
    The argv is empty for a kernel thread, and for a moment while a process is being exec'd.
    """
    proc = Path("/proc")
    if (proc / "self").exists():
        try:
            stat = (proc / str(pid) / "stat").read_text(errors="replace")
            raw = (proc / str(pid) / "cmdline").read_bytes()
        except OSError:  # no such process (or not ours to read)
            return None
        fields = stat.rpartition(")")[2].split()  # after "pid (comm)": field 3 (state) onwards
        if not fields or fields[0] in ("Z", "X"):
            return None
        try:
            started: int | None = int(fields[22 - 3])
        except (IndexError, ValueError):
            started = None
        return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]], started
    try:
        res = subprocess.run(
            ["ps", "-o", "stat=", "-o", "args=", "-p", str(pid)], capture_output=True, text=True
        )
    except OSError:
        return None
    state, _, args = res.stdout.strip().partition(" ")
    if res.returncode != 0 or not state or state.startswith("Z"):
        return None
    return args.strip().split(" "), None


def identity_refusal(
    argv: list[str], started: int | None, *, binary: str, data_arg: str, data_dir: str,
    cmdline: list[str], recorded_started: int | None, need_started: bool = False,
) -> str | None:  # fmt: skip
    """Why a running process (``argv``, ``started``: :func:`process_identity`) is not the one perfkit
    started (None: it is): argv[0] is ``binary``, argv carries ``data_arg`` (naming its ``data_dir``),
    the recorded argv and start time match; ``need_started``: a missing start time is refused."""
    if not argv or Path(argv[0]).name != binary:
        return f"it is not {binary}"
    if data_arg not in argv[1:]:
        return f"it does not run on {data_dir}"
    if cmdline and argv != cmdline:
        return "its command line differs"
    if recorded_started is None and need_started:
        return "no start time was recorded for it"
    if recorded_started is not None and started != recorded_started:
        return "it started at another time"
    return None


def pidfd(pid: int) -> int | None:
    """A pidfd for ``pid`` (Linux 5.3+), so signals reach that process even if the PID is reused."""
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


def send_signal(handle: int | None, pid: int, sig: int) -> bool:
    """Send ``sig``; False when the process is already gone."""
    try:
        if handle is not None:
            signal.pidfd_send_signal(handle, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def reap(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.waitpid(pid, os.WNOHANG)


def exited(pid: int, started: int | None) -> bool:
    """Whether the process ``pid`` that started at ``started`` has exited (reaped when it is our child)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return True
    except ChildProcessError:
        pass
    identity = process_identity(pid)
    return identity is None or (started is not None and identity[1] != started)


KILL_WAIT_S = 30.0
"""How long a process may take to go after SIGKILL: it cannot be caught, but a process inside an
uninterruptible write (a TSDB flushing to a slow disk on a loaded machine) dies only when that returns."""


class DidNotExit(RuntimeError):
    """A process perfkit started and signalled was still there :data:`KILL_WAIT_S` after SIGKILL:
    its state is kept, so a later stop finds it again."""


def terminate(handle: int | None, pid: int, started: int | None, first: int, timeout_s: float) -> bool:
    """Send ``first``, wait up to ``timeout_s`` for the process (``pid``, started at ``started``) to
    exit, then SIGKILL it and wait up to :data:`KILL_WAIT_S`. True once it has exited, False when it
    was already gone before ``first``; :class:`DidNotExit` when it is still there after SIGKILL's wait
    (said, not assumed stopped)."""
    if not send_signal(handle, pid, first):
        return False
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if exited(pid, started):
            return True
        time.sleep(0.05)
    send_signal(handle, pid, signal.SIGKILL)
    deadline = time.monotonic() + KILL_WAIT_S
    while time.monotonic() < deadline:
        if exited(pid, started):
            return True
        time.sleep(0.02)
    raise DidNotExit(f"pid {pid} was still running {KILL_WAIT_S:g} s after SIGKILL; its state is kept")


def spawned_identity(proc: subprocess.Popen) -> tuple[list[str], int | None]:
    """The identity of a process we just spawned, read once its exec is complete (Popen can
    return while the kernel is still laying out the new argv); argv as passed if it cannot be read."""
    deadline = time.monotonic() + 2.0
    while True:
        identity = process_identity(proc.pid)
        if identity is not None and identity[0]:
            return identity
        if identity is None or time.monotonic() > deadline:
            return [str(a) for a in proc.args], None  # type: ignore[union-attr]
        time.sleep(0.005)
