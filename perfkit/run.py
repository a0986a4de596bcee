"""Execute a runbook with papermill (explicit kernel and timeouts), scrub it, and write the postmortem."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perfkit.errors import ConfigError, RunbookError
from perfkit.secrets import check_parameters, known_secrets, scrub

REPO = Path(__file__).resolve().parents[1]
RUNBOOKS = REPO / "runbooks"
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


def parse_parameter(text: str) -> tuple[str, Any]:
    """``name=value`` → (name, value); numbers and booleans are converted, the rest stays text."""
    if "=" not in text:
        raise ConfigError(f"parameter {text!r} must be name=value")
    name, raw = text.split("=", 1)
    name = name.strip()
    if not name.isidentifier():
        raise ConfigError(f"parameter name {name!r} is not an identifier")
    value: Any = raw
    if raw.lower() in ("true", "false"):
        value = raw.lower() == "true"
    else:
        for cast in (int, float):
            try:
                value = cast(raw)
                break
            except ValueError:
                continue
    return name, value


def runbook_parameters(path: Path) -> dict[str, Any]:
    _fast_nbformat_import()
    import papermill

    return dict(papermill.inspect_notebook(str(path)))


@dataclass
class RunResult:
    notebook: Path
    outputs: dict[str, Path] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    error: str | None = None


def execute(runbook: str, out_dir: Path, parameters: dict[str, Any], *, render: bool = True) -> RunResult:
    """Run ``runbook`` into ``out_dir/<runbook>.ipynb``, scrub secrets, then render the postmortem there.

    Raises ConfigError (unknown parameter), SecretLeak (a secret passed by value) before running
    anything. A runbook cell that fails still leaves the executed notebook and its postmortem.
    """
    t0 = time.perf_counter()
    path = find_runbook(runbook)
    check_parameters(parameters)
    bundle = parameters.get("bundle")
    if bundle and not Path(str(bundle)).is_dir():
        raise ConfigError(f"{bundle}: bundle folder not found")
    if parameters.get("start") and parameters.get("end"):
        from perfkit.incident import make_window

        make_window(parameters["start"], parameters["end"], what="window")
    if parameters.get("baseline_start") and parameters.get("baseline_end"):
        from perfkit.incident import make_window

        make_window(parameters["baseline_start"], parameters["baseline_end"], what="baseline")
    known = runbook_parameters(path)
    unknown = sorted(set(parameters) - set(known))
    if unknown:
        raise ConfigError(
            f"unknown runbook parameter(s) {', '.join(unknown)} for {path.stem}: known are {', '.join(known)}"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / f"{path.stem}.ipynb"
    result = RunResult(output)
    result.timings["prepare_s"] = time.perf_counter() - t0
    import papermill

    t1 = time.perf_counter()
    from jupyter_client.manager import KernelManager

    # IPC sockets, not TCP: the kernel is reachable only through files in the runtime dir.
    km = KernelManager(kernel_name=KERNEL, transport="ipc")
    try:
        papermill.execute_notebook(
            str(path),
            str(output),
            parameters=parameters,
            kernel_name=KERNEL,
            km=km,
            progress_bar=False,
            log_output=False,
            execution_timeout=CELL_TIMEOUT_S,
            start_timeout=START_TIMEOUT_S,
            cwd=str(REPO),
        )
    except papermill.PapermillExecutionError as exc:
        result.error = f"cell {exc.cell_index}: {exc.ename}: {exc.evalue}"
    except Exception as exc:  # kernel died, timeout: keep what was written
        result.error = f"{type(exc).__name__}: {exc}"
    finally:
        if km.has_kernel and km.is_alive():  # a kernel we handed in is ours to stop
            km.shutdown_kernel(now=True)
    result.timings["execute_s"] = time.perf_counter() - t1
    if output.exists():
        secrets = known_secrets(parameters)
        nb = json.loads(output.read_text(encoding="utf-8"))
        clean, hits = scrub(nb, secrets)
        if hits:
            output.write_text(json.dumps(clean, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        if result.error:
            result.error = scrub(result.error, secrets)[0]
    elif result.error:
        raise RunbookError(f"{path.stem}: {result.error}")
    if render and output.exists():
        t2 = time.perf_counter()
        from perfkit.report import render_postmortem

        result.outputs = render_postmortem(output, out_dir)
        result.timings["render_s"] = time.perf_counter() - t2
    result.timings["total_s"] = time.perf_counter() - t0
    return result
