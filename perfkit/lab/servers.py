"""Start a real Prometheus or VictoriaMetrics on 127.0.0.1 with a bundle's metrics loaded; stop it by PID.

* Prometheus: the bundle's OpenMetrics files are merged and backfilled with
  ``promtool tsdb create-blocks-from openmetrics`` into a fresh data dir, then Prometheus starts on
  it with a 10-year retention (retention counts from the newest block, so old incidents survive).
* VictoriaMetrics: starts empty, then the samples are imported through ``/api/v1/import/prometheus``
  (Prometheus text with millisecond timestamps) and flushed so queries see them at once.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import requests

from perfkit.errors import ConfigError, SourceError

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


@dataclass
class LabServer:
    engine: str
    url: str
    pid: int
    data_dir: str
    log: str
    bundle: str = ""

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM the process we started (by PID), then SIGKILL if it lingers."""
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return
            try:
                if os.waitpid(self.pid, os.WNOHANG)[0] == self.pid:
                    return
            except ChildProcessError:
                pass
            time.sleep(0.05)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


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
    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    log = workdir / "prometheus.log"
    proc = _popen(
        [
            prom,
            f"--config.file={cfg}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=3650d",
        ],
        log,
        detach,
    )
    _wait_ready(url, "/-/ready", proc, log)
    return LabServer("prometheus", url, proc.pid, str(data), str(log), str(bundle))


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
    _wait_ready(url, "/health", proc, log)
    body = prometheus_text_ms(files).encode()
    step = 8 << 20
    for i in range(0, len(body), step):
        chunk = body[i : i + step]
        if i + step < len(body):  # cut at a line end
            cut = chunk.rfind(b"\n") + 1
            chunk = chunk[:cut]
        resp = requests.post(f"{url}/api/v1/import/prometheus", data=chunk, timeout=120)
        if resp.status_code >= 300:
            raise SourceError(
                f"{url}/api/v1/import/prometheus: HTTP {resp.status_code}: {resp.text[:200]}",
                url=url,
                status=resp.status_code,
            )
    requests.get(f"{url}/internal/force_flush", timeout=30)
    return LabServer("victoriametrics", url, proc.pid, str(data), str(log), str(bundle))


def start(engine: str, bundle: Path, workdir: Path, *, port: int = 0, detach: bool = False) -> LabServer:
    if engine == "prometheus":
        return start_prometheus(bundle, workdir, port=port, detach=detach)
    if engine == "victoriametrics":
        return start_victoriametrics(bundle, workdir, port=port, detach=detach)
    binary(engine)  # raises the clear error
    raise AssertionError("unreachable")
