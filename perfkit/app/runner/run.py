"""Execute a runbook with papermill (a private kernel, explicit timeouts), scrub it, and write the
record and postmortem into the output folder in one move."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfkit.core.resources import shipped
from perfkit.core.scrub import known_secrets, scrub
from perfkit.core.secrets import check_parameters
from perfkit.errors import ConfigError, RunbookError

RUNBOOKS = shipped("runbooks")
KERNEL = "python3"
CELL_TIMEOUT_S = 600
START_TIMEOUT_S = 120


def _fast_nbformat_import() -> None:
    """nbformat's schema validator pulls rfc3987_syntax, which builds a grammar at import (~2.5 s).
    Its URI-format check is the only user and degrades gracefully when the module is absent."""
    if "rfc3987_syntax" not in sys.modules:
        sys.modules["rfc3987_syntax"] = None  # type: ignore[assignment]


def list_runbooks() -> list[str]:
    return sorted(p.stem for p in RUNBOOKS.glob("*.ipynb"))


def find_runbook(name: str) -> Path:
    """A runbook by name (``inference_latency``, ``inference-latency``) or by path."""
    p = Path(name)
    if p.suffix == ".ipynb" and p.exists():
        return p
    candidate = RUNBOOKS / f"{name.replace('-', '_')}.ipynb"
    if candidate.exists():
        return candidate
    raise ConfigError(
        f"unknown runbook {name!r}: choose one of {', '.join(list_runbooks())} or give a .ipynb path"
    )


def runbook_parameters(path: Path) -> dict[str, Any]:
    _fast_nbformat_import()
    import papermill

    return dict(papermill.inspect_notebook(str(path)))


@dataclass
class RunResult:
    """What one run wrote, and how it ended.

    ``error`` is set when the run failed: a cell raised, the evidence source could not be opened
    (every section then says "not run"), or it was interrupted. ``missing`` lists the sections
    that ran but lacked evidence (the run still succeeded). ``folder`` is where the record went:
    the output folder, or beside it when a failed run met a good record there.
    """

    notebook: Path
    folder: Path
    outputs: dict[str, Path] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    error: str | None = None
    missing: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    failure: RunbookError | None = None  # the failing cell, when one raised

    @property
    def ok(self) -> bool:
        return self.error is None


class Interrupted(RunbookError):
    """SIGINT or SIGTERM arrived during a run; the partial record was scrubbed and written first."""

    def __init__(self, signum: int, result: RunResult) -> None:
        self.signum = signum
        self.result = result
        name = signal.Signals(signum).name
        super().__init__(f"interrupted by {name}; the partial record is in {result.folder}")


#: The parameters that point a runbook at its evidence, each with how the command line gives it.
EVIDENCE_PARAMETERS = (
    ("bundle", "--bundle DIR|NAME"),
    ("prometheus_url", "--prometheus URL"),
    ("result", "-p result=FILE"),
    ("url", "-p url=URL"),
)
#: ``--bundle demo``: the runbook's own embedded demo (its default evidence), asked for by name.
DEMO = "demo"


def missing_evidence(
    path: Path, parameters: dict[str, Any], known: dict[str, Any] | None = None
) -> str | None:
    """Why ``parameters`` name no evidence for the runbook at ``path`` (None: they do, or it needs none).

    A runbook's defaults point at its embedded demo, which is right in JupyterLab and wrong for a
    command: ``perfkit run inference_latency -o out`` with nothing else would write the demo's
    postmortem for an engineer who forgot ``--bundle``. The demo runs when asked for (``--bundle demo``).
    """
    known = runbook_parameters(path) if known is None else known
    kinds = [(name, spelled) for name, spelled in EVIDENCE_PARAMETERS if name in known]
    if not kinds or any(parameters.get(name) not in (None, "") for name, _ in kinds):
        return None
    return (
        f"{path.stem}: no evidence given: use {' or '.join(spelled for _, spelled in kinds)} "
        f"(the runbook's embedded demo runs only when asked for: --bundle {DEMO})"
    )


def check_run_parameters(
    path: Path, parameters: dict[str, Any], *, source: str = "parameters", require_evidence: bool = False
) -> dict[str, Any]:
    """Validate ``parameters`` for the runbook at ``path`` before anything runs; return the plain copy.

    Raises ConfigError (not plain data, unknown parameter, unreadable time, missing bundle, and with
    ``require_evidence`` no evidence at all: see :func:`missing_evidence`) or SecretLeak (a secret
    passed by value, a password in a URL, a token where a variable name belongs).
    """
    from perfkit.app.runner.parameters import plain_parameters
    from perfkit.core.incident import make_window

    params = plain_parameters(parameters, source=source)
    check_parameters(params)
    if params.get("prometheus_url") and params.get("bundle"):
        raise ConfigError("give a bundle or prometheus_url (live sources), not both")
    known = runbook_parameters(path)
    if require_evidence:
        if params.get("bundle") == DEMO and "bundle" in known:
            params["bundle"] = known["bundle"]["default"].strip("\"'") or DEMO  # the runbook's own demo
        elif params.get("bundle") == DEMO:  # a runbook without bundles (baseline_capture): its demo
            del params["bundle"]
        else:
            why = missing_evidence(path, params, known)
            if why:
                raise ConfigError(why)
    if params.get("prometheus_url"):
        params["bundle"] = ""  # live: never fall back to the runbook's default bundle
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown runbook parameter(s) {', '.join(unknown)} for {path.stem}: known are {', '.join(known)}"
        )
    if params.get("bundle"):  # a folder, or an embedded incident's name (simulated on first use)
        from perfkit.app.runner.embedded import bundle_path

        params["bundle"] = str(bundle_path(str(params["bundle"])))
    for key in ("start", "end", "baseline_start", "baseline_end"):
        if params.get(key) not in (None, ""):
            _check_time(key, params[key])
    if params.get("start") and params.get("end"):
        make_window(params["start"], params["end"], what="window")
    if params.get("baseline_start") and params.get("baseline_end"):
        make_window(params["baseline_start"], params["baseline_end"], what="baseline")
    if params.get("since"):
        from perfkit.sources.live import parse_since

        parse_since(str(params["since"]))
    return params


def _check_time(key: str, value: Any) -> None:
    from perfkit.core.frames import utc

    try:
        utc(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ConfigError(f"parameter {key}: cannot read {str(value)[:40]!r} as a UTC time ({exc})") from None


def execute(
    runbook: str,
    out_dir: Path,
    parameters: dict[str, Any],
    *,
    render: bool = True,
    force: bool = False,
    source: str = "parameters",
    require_evidence: bool = False,
    progress: Progress | None = None,
) -> RunResult:
    """Run ``runbook`` and write ``out_dir/<runbook>.ipynb`` and its postmortem, scrubbed of secrets.

    Raises ConfigError / SecretLeak before anything runs (see :func:`check_run_parameters`, and
    :func:`perfkit.app.runner.records.check_target` for the output folder). The kernel is private to this run
    (its own connection file and sockets in a 0700 temporary folder, removed afterwards), so runs
    in parallel never meet. Everything is written to a private staging folder, scrubbed, then moved
    into place: a failed run never replaces a good record. SIGINT/SIGTERM interrupt the kernel, then
    the partial record is scrubbed and written and :class:`Interrupted` is raised.
    """
    from perfkit.app.runner import records

    t0 = time.perf_counter()
    path = find_runbook(runbook)
    params = check_run_parameters(path, parameters, source=source, require_evidence=require_evidence)
    # absolute, symlinks followed: `-o .` names a folder, and moving a run into place must not
    # replace a link with a folder
    out_dir = out_dir.resolve()
    records.check_target(out_dir, force=force, protected=[RUNBOOKS, path])
    staging = records.staging_folder(out_dir)
    output = staging / f"{path.stem}.ipynb"
    result = RunResult(out_dir / output.name, out_dir)
    result.warnings = _warnings(params)
    result.timings["prepare_s"] = time.perf_counter() - t0
    try:
        t1 = time.perf_counter()
        signum = _run_papermill(path, output, params, result, progress)
        result.timings["execute_s"] = time.perf_counter() - t1
        if not output.exists():
            raise RunbookError(f"{path.stem}: {result.error or 'the kernel wrote no notebook'}")
        secrets = known_secrets(params)
        nb = json.loads(output.read_text(encoding="utf-8"))
        clean, hits = scrub(nb, secrets)
        if hits:
            output.write_text(json.dumps(clean, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        if result.error:
            result.error = scrub(result.error, secrets)[0]
        if result.failure is not None:
            f = result.failure
            result.failure = RunbookError(
                result.error or str(f),
                cell=f.cell,
                source=scrub(f.source, secrets)[0],
                ename=f.ename,
                evalue=scrub(f.evalue, secrets)[0],
            )
        _read_verdicts(clean, result)
        if render:
            t2 = time.perf_counter()
            from perfkit.report import render_postmortem

            rendered = render_postmortem(output, staging)
            result.timings["render_s"] = time.perf_counter() - t2
        else:
            rendered = {}
        records.write_marker(staging, runbook=path.stem, status="ok" if result.ok else "failed")
        folder = records.publish(staging, out_dir, ok=result.ok, force=force)
    except BaseException:
        records.discard(staging)
        raise
    result.folder = folder
    result.notebook = folder / output.name
    result.outputs = {k: folder / v.relative_to(staging) for k, v in rendered.items()}
    result.timings["total_s"] = time.perf_counter() - t0
    if signum is not None:
        raise Interrupted(signum, result)
    return result


def _warnings(params: dict[str, Any]) -> list[str]:
    from perfkit.core.secrets import parameter_warnings

    return parameter_warnings(params)


def _read_verdicts(nb: dict[str, Any], result: RunResult) -> None:
    """A run whose evidence could not be opened failed, even though every cell ran."""
    from perfkit.core.findings import findings_from_notebook

    try:
        findings = findings_from_notebook(nb)
    except (KeyError, TypeError, ValueError, AttributeError):
        return
    not_run = [f for f in findings.values() if isinstance(f.data, dict) and f.data.get("not_run")]
    if not_run and not result.error:
        result.error = f"no evidence: {not_run[0].data['not_run']}"
    result.missing = [f.key for f in findings.values() if f.status == "missing" and f not in not_run]


#: ``progress(index, count, title, elapsed_s)``: a code cell starts (``title`` is its section's heading).
Progress = Callable[[int, int, str, float], None]


def cell_titles(cells: list[Any]) -> dict[int, str]:
    """Each code cell's title: the heading of the Markdown cell before it (a runbook's section)."""
    titles: dict[int, str] = {}
    heading = "parameters"
    for i, cell in enumerate(cells):
        source = (
            "".join(cell.get("source", ""))
            if isinstance(cell.get("source"), list)
            else cell.get("source", "")
        )
        if cell.get("cell_type") == "markdown":
            for line in str(source).splitlines():
                if line.lstrip().startswith("#"):
                    heading = line.lstrip("# ").strip()[:60]
                    break
        elif cell.get("cell_type") == "code":
            titles[i] = heading
    return titles


def _progress_engine() -> str:
    """Register (once) a papermill engine that reports each code cell's start to ``progress``."""
    from papermill.engines import NBClientEngine, papermill_engines

    class ProgressEngine(NBClientEngine):
        @classmethod
        def execute_managed_notebook(cls, nb_man: Any, kernel_name: str, **kwargs: Any) -> Any:
            progress: Progress | None = kwargs.pop("progress", None)
            if progress is not None:
                titles = cell_titles(nb_man.nb.cells)
                order = {index: n for n, index in enumerate(sorted(titles))}
                started = time.perf_counter()
                cell_start = nb_man.cell_start

                def reporting_start(cell: Any, cell_index: int | None = None, **kw: Any) -> Any:
                    if cell_index in titles:
                        progress(
                            order[cell_index] + 1,
                            len(titles),
                            titles[cell_index],
                            time.perf_counter() - started,
                        )
                    return cell_start(cell, cell_index, **kw)

                nb_man.cell_start = reporting_start
            return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)

    papermill_engines.register(PROGRESS_ENGINE, ProgressEngine)
    return PROGRESS_ENGINE


PROGRESS_ENGINE = "perfkit-progress"


def _run_papermill(
    path: Path, output: Path, params: dict[str, Any], result: RunResult, progress: Progress | None = None
) -> int | None:
    """Execute with a kernel of this run's own; return the signal that interrupted it, if one did."""
    _fast_nbformat_import()
    import papermill
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_core.utils import run_sync

    kernel_dir = Path(tempfile.mkdtemp(prefix="perfkit-kernel-", dir=_short_tmp()))
    # IPC sockets, not TCP: reachable only through files in this 0700 folder, which no other run shares.
    # async, as nbclient expects: with a blocking client its wait for output never notices a dead kernel
    km = AsyncKernelManager(
        kernel_name=KERNEL,
        transport="ipc",
        ip=str(kernel_dir / "ipc"),
        connection_file=str(kernel_dir / "kernel.json"),
    )
    stop = _Stopper(km)
    try:
        with stop.installed():
            papermill.execute_notebook(
                str(path),
                str(output),
                parameters=params,
                kernel_name=KERNEL,
                km=km,
                progress_bar=False,
                log_output=False,
                engine_name=_progress_engine(),
                progress=progress,
                execution_timeout=CELL_TIMEOUT_S,
                start_timeout=START_TIMEOUT_S,
                cwd=str(Path.cwd()),
                # no IPython history: it would keep every cell (and any secret it printed) in ~/.ipython
                extra_arguments=["--HistoryManager.enabled=False"],
            )
    except papermill.PapermillExecutionError as exc:
        result.failure = RunbookError.from_cell(
            exc.exec_count, exc.source, exc.ename, exc.evalue, list(exc.traceback or [])
        )
        result.error = str(result.failure)
    except Exception as exc:  # kernel died, timeout: keep what was written
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if km.has_kernel:  # a kernel we handed in is ours to stop
            with contextlib.suppress(Exception):
                run_sync(km.shutdown_kernel)(now=True)
        with contextlib.suppress(Exception):
            run_sync(km.cleanup_resources)()
        shutil.rmtree(kernel_dir, ignore_errors=True)
    if stop.signum is not None:
        result.error = f"interrupted by {signal.Signals(stop.signum).name}" + (
            f" ({result.error})" if result.error else ""
        )
    return stop.signum


def _short_tmp() -> str:
    """The temporary folder, unless its path is too long for a Unix socket (108 bytes): then /tmp."""
    tmp = tempfile.gettempdir()
    return tmp if len(tmp) < 60 else "/tmp"


class _Stopper:
    """SIGINT/SIGTERM during a run: interrupt the kernel (the cell raises KeyboardInterrupt); if the
    cell does not end within GRACE_S, or on a second signal, kill the kernel. Either way papermill
    returns with what was executed, and the caller scrubs and writes it."""

    GRACE_S = 5.0

    def __init__(self, km: Any) -> None:
        self.km = km
        self.signum: int | None = None
        self._timer: threading.Timer | None = None

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            if self._timer is not None:
                self._timer.cancel()

    def _pid(self) -> int | None:
        provisioner = getattr(self.km, "provisioner", None)
        pid = getattr(provisioner, "pid", None) or getattr(getattr(provisioner, "process", None), "pid", None)
        return int(pid) if pid else None

    def _signal_kernel(self, sig: int) -> None:
        pid = self._pid()
        if pid:
            with contextlib.suppress(OSError):
                os.kill(pid, sig)

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:  # the second one: stop waiting for the cell
            self._signal_kernel(signal.SIGKILL)
            return
        self.signum = signum
        sys.stderr.write(
            f"perfkit: {signal.Signals(signum).name}: interrupting the runbook; "
            "the partial record and postmortem will be written (again to stop at once)\n"
        )
        self._signal_kernel(signal.SIGINT)
        self._timer = threading.Timer(self.GRACE_S, self._signal_kernel, args=(signal.SIGKILL,))
        self._timer.daemon = True
        self._timer.start()
