"""Start a real Prometheus or VictoriaMetrics on 127.0.0.1 with a bundle's metrics loaded, or a real
Prometheus scraping local targets; stop it by PID.

* Prometheus: the bundle's OpenMetrics files are merged and backfilled with
  ``promtool tsdb create-blocks-from openmetrics`` into a fresh data dir, then Prometheus starts on
  it with a 10-year retention (retention counts from the newest block, so old incidents survive).
* VictoriaMetrics: starts empty, then the samples are imported through ``/api/v1/import/prometheus``
  (Prometheus text with millisecond timestamps) and flushed so queries see them at once.
* :func:`start_scraping`: Prometheus on an empty data dir scraping ``127.0.0.1`` targets (a live
  drill's simulator) every few seconds.
* :class:`Spawned`: any other process perfkit started detached (a simulator, a load generator),
  recorded by PID, argv and start time and stopped only while it is still that process.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import requests

from perfkit.errors import ConfigError, SourceError
from perfkit.lab.processes import DidNotExit as DidNotExit
from perfkit.lab.processes import NotOurProcess as NotOurProcess
from perfkit.lab.processes import identity_refusal as identity_refusal
from perfkit.lab.processes import pidfd as _pidfd
from perfkit.lab.processes import process_identity as process_identity
from perfkit.lab.processes import reap as _reap
from perfkit.lab.processes import spawned_identity as _spawned
from perfkit.lab.processes import terminate as _terminate

ENGINES = {
    "prometheus": ("prometheus", "apt-get install -y --no-install-recommends prometheus"),
    "victoriametrics": ("victoria-metrics", "apt-get install -y --no-install-recommends victoria-metrics"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def binary(engine: str) -> str:
    """Path of the engine's system binary, or ConfigError with the install command."""
    if engine not in ENGINES:
        raise ConfigError(f"unknown engine {engine!r}: choose prometheus or victoriametrics")
    name, install = ENGINES[engine]
    path = shutil.which(name)
    if not path:
        raise ConfigError(f"{name} is not installed: {install}")
    return path


# the flag each engine's server is started with, naming its data dir (see start_prometheus and
# start_victoriametrics): a lab server's command line always carries ``<flag>=<data_dir>``
DATA_DIR_FLAGS = {"prometheus": "--storage.tsdb.path", "victoriametrics": "-storageDataPath"}


@dataclass
class LabServer:
    """A lab server perfkit started, as recorded in its state file (``as_dict`` / ``LabServer(**state)``).

    ``cmdline`` and ``started`` are the process's argv and start time, read right after it was
    spawned; :meth:`stop` signals the PID only while it runs the engine's binary on this server's
    ``data_dir`` and, when they were recorded, exactly that argv with that start time. State
    files written before they were recorded still load. Loading does not check field types (a
    state file is JSON anyone may edit): :meth:`stop` does, and refuses a malformed state with
    :class:`NotOurProcess`.
    """

    engine: str
    url: str
    pid: int
    data_dir: str
    log: str
    bundle: str = ""
    cmdline: list[str] = field(default_factory=list)
    started: int | None = None

    def stop(self, timeout_s: float = 10.0) -> bool:
        """SIGTERM the process we started (by PID), then SIGKILL if it lingers.

        Returns True when it was running and has been stopped, False when it was not running.
        Raises :class:`NotOurProcess` (nothing signalled) when the PID now runs another program,
        or when the state itself is malformed (a field of the wrong type: see :meth:`problem`).
        """
        problem = self.problem()
        if problem:
            raise NotOurProcess(f"malformed lab state: {problem}; nothing signalled")
        handle = _pidfd(self.pid)  # pins the process: a PID reused after this check is not signalled
        try:
            identity = process_identity(self.pid)
            if identity is None:
                _reap(self.pid)  # gone, or exited and not yet reaped by us
                return False
            refusal = self._refusal(*identity)
            if refusal:
                raise NotOurProcess(refusal)
            return _terminate(handle, self.pid, identity[1], signal.SIGTERM, timeout_s)
        finally:
            if handle is not None:
                os.close(handle)

    def problem(self) -> str | None:
        """What is wrong with this state's fields (``None`` when nothing): a state file is read
        back as JSON, so any field may hold any type."""

        def is_int(v: object) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        if not isinstance(self.engine, str) or self.engine not in DATA_DIR_FLAGS:
            return f"engine {self.engine!r} is not one of {', '.join(DATA_DIR_FLAGS)}"
        if not is_int(self.pid) or not 1 < self.pid < 2**31:
            return f"pid {self.pid!r} is not a process id (an integer > 1)"
        if not isinstance(self.data_dir, str) or not self.data_dir:
            return f"data_dir {self.data_dir!r} is not a path"
        if not isinstance(self.cmdline, list) or not all(isinstance(a, str) for a in self.cmdline):
            return f"cmdline {_short(repr(self.cmdline))} is not a list of strings"
        if self.started is not None and (not is_int(self.started) or self.started < 0):
            return f"started {self.started!r} is not a start time (an integer, or null)"
        return None

    def _refusal(self, argv: list[str], started: int | None) -> str | None:
        """Why the running PID is not this server (None: it is), :func:`identity_refusal`; a state
        without a start time (older, or no /proc) is taken on the binary and data dir alone."""
        flag = f"{DATA_DIR_FLAGS[self.engine]}={self.data_dir}"
        why = identity_refusal(
            argv, started, binary=ENGINES[self.engine][0], data_arg=flag, data_dir=self.data_dir,
            cmdline=self.cmdline, recorded_started=self.started,
        )  # fmt: skip
        runs, what = _short(" ".join(argv)), f"the {self.engine} server perfkit started"
        return why and f"pid {self.pid} is no longer {what} (it runs {runs!r}: {why}); not signalled"

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _wait_ready(url: str, path: str, proc: subprocess.Popen, log: Path, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-400:] if log.exists() else ""
            raise SourceError(
                f"{url}: the server exited with status {proc.returncode}: {tail.strip()[-200:]}", url=url
            )
        try:
            if requests.get(f"{url}{path}", timeout=1).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.05)
    proc.terminate()
    raise SourceError(f"{url}: not ready after {timeout_s:g} s", url=url)


def metric_files(bundle: Path) -> list[Path]:
    """The bundle's metrics/*.om files, or ConfigError when there are none to load."""
    files = sorted((bundle / "metrics").glob("*.om"))
    if not files:
        raise ConfigError(f"{bundle}: no metrics/*.om to load")
    return files


def merged_openmetrics(metric_files: list[Path], out: Path) -> Path:
    """One OpenMetrics file from several (families stay contiguous; a single '# EOF' at the end)."""
    with out.open("w", encoding="utf-8") as fh:
        for path in metric_files:
            for line in path.read_text(encoding="utf-8").splitlines():
                if line.strip() != "# EOF":
                    fh.write(line + "\n")
        fh.write("# EOF\n")
    return out


def _popen(cmd: list[str], log: Path, detach: bool) -> subprocess.Popen:
    fh = log.open("w")
    return subprocess.Popen(
        cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=detach
    )


def start_prometheus(bundle: Path, workdir: Path, *, port: int = 0, detach: bool = False) -> LabServer:
    prom = binary("prometheus")
    promtool = shutil.which("promtool")
    if not promtool:
        raise ConfigError("promtool is not installed: apt-get install -y --no-install-recommends prometheus")
    files = metric_files(bundle)
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "tsdb"
    merged = merged_openmetrics(files, workdir / "bundle.om")
    res = subprocess.run(
        [
            promtool,
            "tsdb",
            "create-blocks-from",
            "openmetrics",
            "--max-block-duration=24h",
            str(merged),
            str(data),
        ],
        capture_output=True,
        text=True,
    )
    if res.returncode != 0:
        raise SourceError(f"promtool could not backfill {bundle}: {res.stderr.strip()[-300:]}")
    merged.unlink()
    cfg = workdir / "prometheus.yml"
    cfg.write_text("global: {scrape_interval: 15s, evaluation_interval: 15s}\nscrape_configs: []\n")
    return _run_prometheus(prom, cfg, data, workdir, port, detach, source=str(bundle))


def _run_prometheus(
    prom: str, cfg: Path, data: Path, workdir: Path, port: int | None, detach: bool, *,
    source: str, extra: list[str] | None = None,
) -> LabServer:  # fmt: skip
    """Prometheus on 127.0.0.1 (``port``, else a free one) over ``cfg`` and the TSDB ``data``, its log
    in ``workdir``; returns once it answers ``/-/ready``."""
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    log = workdir / "prometheus.log"
    argv = [
        prom,
        f"--config.file={cfg}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=3650d",
        *(extra or []),
    ]
    proc = _popen(argv, log, detach)
    cmdline, started = _spawned(proc)
    _wait_ready(url, "/-/ready", proc, log)
    return LabServer("prometheus", url, proc.pid, str(data), str(log), source, cmdline, started)


def prometheus_text_ms(metric_files: list[Path]) -> str:
    """The bundle's samples as Prometheus text lines with millisecond timestamps (VictoriaMetrics import)."""
    from perfkit.sources.openmetrics import read_files

    store = read_files(metric_files)
    out: list[str] = []
    for name, frame in store.frames.items():
        labels = [c for c in frame.columns if c not in ("ts", "value")]
        ts = frame["ts"].cast(int).to_list()
        values = frame["value"].to_list()
        cols = [frame[c].to_list() for c in labels]
        for i in range(frame.height):
            pairs = ",".join(
                f'{k}="{_esc(col[i])}"' for k, col in zip(labels, cols, strict=True) if col[i] is not None
            )
            out.append(f"{name}{{{pairs}}} {values[i]!r} {ts[i]}")
    return "\n".join(out) + "\n"


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def start_victoriametrics(bundle: Path, workdir: Path, *, port: int = 0, detach: bool = False) -> LabServer:
    vm = binary("victoriametrics")
    files = metric_files(bundle)
    workdir.mkdir(parents=True, exist_ok=True)
    data = workdir / "vmdata"
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    log = workdir / "victoria-metrics.log"
    proc = _popen(
        [
            vm,
            f"-storageDataPath={data}",
            f"-httpListenAddr=127.0.0.1:{port}",
            "-retentionPeriod=100y",
            "-search.disableCache",
            "-search.latencyOffset=0s",
        ],
        log,
        detach,
    )
    cmdline, started = _spawned(proc)
    _wait_ready(url, "/health", proc, log)
    body = prometheus_text_ms(files).encode()
    step, at = 8 << 20, 0
    while at < len(body):  # pieces of about 8 MiB, each cut at a line end
        end = len(body) if at + step >= len(body) else body.rfind(b"\n", at, at + step) + 1 or at + step
        resp = requests.post(f"{url}/api/v1/import/prometheus", data=body[at:end], timeout=120)
        if resp.status_code >= 300:
            raise SourceError(
                f"{url}/api/v1/import/prometheus: HTTP {resp.status_code}: {resp.text[:200]}",
                url=url,
                status=resp.status_code,
            )
        at = end
    _wait_stored(url, sum(1 for line in body.splitlines() if line and not line.startswith(b"#")), proc, log)
    return LabServer("victoriametrics", url, proc.pid, str(data), str(log), str(bundle), cmdline, started)


def _wait_stored(url: str, rows: int, proc: subprocess.Popen, log: Path, timeout_s: float = 60.0) -> None:
    """Return once VictoriaMetrics has added all ``rows`` imported samples to its storage and made
    them searchable. An import returns when the rows are buffered, not stored: on a busy machine a
    query right after it saw part of the data (``vm_rows_added_to_storage_total`` says how much is in)."""
    deadline = time.monotonic() + timeout_s
    added = 0.0
    while time.monotonic() < deadline:
        requests.get(f"{url}/internal/force_flush", timeout=30)
        page = requests.get(f"{url}/metrics", timeout=30).text
        added = sum(
            float(line.rsplit(" ", 1)[1])
            for line in page.splitlines()
            if line.startswith("vm_rows_added_to_storage_total")
        )
        if added >= rows:
            return
        if proc.poll() is not None:
            break
        time.sleep(0.2)
    raise SourceError(
        f"{url}: {added:.0f} of {rows} imported samples stored after {timeout_s:g} s (see {log})", url=url
    )


def start(engine: str, bundle: Path, workdir: Path, *, port: int = 0, detach: bool = False) -> LabServer:
    if engine == "prometheus":
        return start_prometheus(bundle, workdir, port=port, detach=detach)
    if engine == "victoriametrics":
        return start_victoriametrics(bundle, workdir, port=port, detach=detach)
    binary(engine)  # raises the clear error
    raise AssertionError("unreachable")


# -- a Prometheus scraping live local targets ----------------------------------------------------------

MIN_SCRAPE_S = 0.2
"""The shortest scrape interval :func:`start_scraping` takes: a scrape of a simulator's /metrics (a few
hundred series) costs ~10 ms of its CPU; five a second is already 5 % of a core."""
MAX_SCRAPE_S = 60.0
"""Prometheus' own default (``global.scrape_interval: 1m``); rarer scrapes leave rate() with too few points."""


def _loopback_target(target: str) -> str:
    """``127.0.0.1:PORT`` (or ``localhost:PORT``), else ConfigError: a lab Prometheus scrapes this host only."""
    host, sep, port = target.rpartition(":")
    if not sep or host not in ("127.0.0.1", "localhost") or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"scrape target {target[:80]!r}: a lab Prometheus scrapes 127.0.0.1:PORT only")
    return target


def scrape_config(targets: list[str], interval_s: float, job: str = "engine") -> str:
    """A ``prometheus.yml`` scraping ``targets`` every ``interval_s`` seconds (ms resolution), its
    samples' own timestamps honoured (``honor_timestamps``, Prometheus' default, stated)."""
    if not MIN_SCRAPE_S <= interval_s <= MAX_SCRAPE_S:
        raise ConfigError(
            f"scrape interval {interval_s!r} s: expected {MIN_SCRAPE_S:g} to {MAX_SCRAPE_S:g} seconds"
        )
    if not targets:
        raise ConfigError("a scraping Prometheus needs at least one 127.0.0.1 target")
    if not job.replace("_", "").replace("-", "").isalnum():
        raise ConfigError(f"scrape job {job[:40]!r}: letters, digits, - and _ only")
    ms = max(1, round(interval_s * 1000))
    listed = ", ".join(f'"{_loopback_target(t)}"' for t in targets)
    return (
        f"global: {{scrape_interval: {ms}ms, scrape_timeout: {ms}ms, evaluation_interval: {ms}ms}}\n"
        "scrape_configs:\n"
        f"  - job_name: {job}\n"
        "    honor_timestamps: true\n"
        f"    static_configs: [{{targets: [{listed}]}}]\n"
    )


def start_scraping(
    targets: list[str],
    workdir: Path,
    *,
    interval_s: float = 5.0,
    port: int = 0,
    detach: bool = False,
    job: str = "engine",
    past_s: float = 0.0,
) -> LabServer:
    """A real Prometheus on 127.0.0.1 with a fresh data dir under ``workdir``, scraping ``targets``
    (``127.0.0.1:PORT`` each) every ``interval_s`` seconds; stopped by PID like the others
    (:meth:`LabServer.stop`). Returns once ``/-/ready`` answers.

    ``past_s``: how far behind the wall clock the targets' own sample timestamps may lie. Prometheus
    appends to its head block only samples newer than its newest (its own ``up`` series, at the wall
    clock) minus half a block range (``--storage.tsdb.min-block-duration``, 2 h by default, so one
    hour); the block range is raised to twice ``past_s`` plus an hour, in whole hours, when that
    is more than the default. Those flags are Prometheus' own (hidden, ``--help-long`` lists them
    not) and keep their meaning across 2.x."""
    prom = binary("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    cfg = workdir / "prometheus.yml"
    cfg.write_text(scrape_config(targets, interval_s, job))
    data = workdir / "tsdb"
    return _run_prometheus(prom, cfg, data, workdir, port, detach, source="", extra=_block_flags(past_s))


def _block_flags(past_s: float) -> list[str]:
    hours = int(-(-(2 * past_s + 3600) // 3600))
    if hours <= 2:  # Prometheus' default block range already takes it
        return []
    return [f"--storage.tsdb.min-block-duration={hours}h", f"--storage.tsdb.max-block-duration={hours}h"]


# -- any other detached process ---------------------------------------------------------------------


@dataclass
class Spawned:
    """A process perfkit started (``name`` says which), recorded right after it was spawned: its PID,
    argv and start time (clock ticks since boot, Linux). :meth:`stop` signals it only while that PID
    still runs exactly that argv since that time, through a pidfd where there is one."""

    name: str
    pid: int
    cmdline: list[str]
    started: int | None = None

    @classmethod
    def of(cls, name: str, proc: subprocess.Popen) -> Spawned:
        cmdline, started = _spawned(proc)
        return cls(name, proc.pid, cmdline, started)

    def problem(self) -> str | None:
        """What is wrong with the recorded fields (a state file is JSON anyone may edit)."""
        if not isinstance(self.pid, int) or isinstance(self.pid, bool) or not 1 < self.pid < 2**31:
            return f"pid {self.pid!r} is not a process id (an integer > 1)"
        if (
            not isinstance(self.cmdline, list)
            or not self.cmdline
            or not all(isinstance(a, str) for a in self.cmdline)
        ):
            return f"cmdline {_short(repr(self.cmdline))} is not a non-empty list of strings"
        if self.started is not None and (not isinstance(self.started, int) or self.started < 0):
            return f"started {self.started!r} is not a start time (an integer, or null)"
        return None

    def running(self) -> bool:
        """Whether the recorded process still runs (same argv, same start time)."""
        if self.problem():
            return False
        identity = process_identity(self.pid)
        return identity is not None and self._refusal(*identity) is None

    def _refusal(self, argv: list[str], started: int | None) -> str | None:
        if argv != self.cmdline:
            why = "its command line differs"
        elif self.started is not None and started != self.started:
            why = "it started at another time"
        else:
            return None
        return f"pid {self.pid} is no longer the {self.name} perfkit started ({why}); not signalled"

    def stop(self, timeout_s: float = 10.0, first: int = signal.SIGTERM) -> bool:
        """Send ``first`` (SIGTERM; SIGINT lets a load generator write what it measured), then
        SIGKILL after ``timeout_s``. True when it was running and has stopped, False when it was not
        running; :class:`NotOurProcess` (nothing signalled) when the PID now runs something else."""
        problem = self.problem()
        if problem:
            raise NotOurProcess(f"malformed state of {self.name}: {problem}; nothing signalled")
        handle = _pidfd(self.pid)
        try:
            identity = process_identity(self.pid)
            if identity is None:
                _reap(self.pid)
                return False
            refusal = self._refusal(*identity)
            if refusal:
                raise NotOurProcess(refusal)
            return _terminate(handle, self.pid, identity[1], first, timeout_s)
        finally:
            if handle is not None:
                os.close(handle)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)
