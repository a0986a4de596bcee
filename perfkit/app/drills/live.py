"""Live drills (``perfkit drill start DRILL --live``): the drill's incident happens now, on the
serving-engine simulator, and the trainee works it on a real Prometheus, applies a fix and sees the
before/after.

**What runs** (detached, on free 127.0.0.1 ports, recorded in ``<folder>/.live/state.json`` (0600, in
a 0700 folder, written through a fresh temporary file) by PID, argv and start time; stopped only once
identified as ``perfkit lab down`` identifies its servers: binary, the argument naming this drill's
``.live``, argv and start time (:mod:`perfkit.app.drills.live_clock`)):

* ``engine``: ``perfkit lab serve --engine-config .live/engine.yaml --speed S`` (the drill's engine,
  :mod:`perfkit.app.drills.live_specs`), its admin token generated here, handed to it in the
  environment variable :data:`TOKEN_ENV`, kept in ``.live/admin-token`` (0600) and sent to loopback
  URLs only (:func:`loopback_url`);
* ``load``: ``perfkit bench --replay .live/traffic.jsonl --time-scale S``: the drill's requests, for
  at least 15 wall minutes (``live_specs.life_for``); a fix whose after window the load would
  not cover schedules more of it;
* ``clock``: the supervisor (``python -m perfkit.app.drills.live supervise .live``): serves the engine's
  ``/metrics`` stamped with the drill clock, copies the engine's log into ``evidence/logs/vllm.log``
  on that clock, switches the fault on at its minute, and measures the clock's pace. The fault is
  read from the state file, never from a command line, so ``ps`` names no answer;
* ``prometheus``: a real Prometheus scraping the supervisor every 15 virtual seconds.

**The drill clock.** The simulator runs S times faster than the wall clock (``--speed``); when the
machine cannot keep up its clock stands still for what it is late by, and the wall-timed load then
lands denser in virtual time than the drill's. ``drill start`` watches the clock for
:data:`PROBE_S` under the load and, when it kept less than :data:`HOLD_MIN` of S, starts again at a
speed it did keep (and says so). Prometheus stores each sample at ``anchor + virtual seconds`` (the
supervisor stamps them); it refuses samples from the future, so the anchor lies in the past by what
the clock gains over the drill's life and ten minutes. Windows, the fault's time and fixes are on
the drill clock. **Names**: the folder, the incident id, the runbook and the process titles carry
the drill's id only; what names the cause is in the 0600 state file until ``drill check``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from perfkit.app.drills.live_specs import (
    REMEDIES,
    LiveSpec,
    Timing,
    capped_speed,
    is_number,
    life_for,
    offset_for,
    request_log,
    spec_for,
)
from perfkit.app.drills.live_state import (
    DEFAULT_SPEED,
    FIRST_SCRAPE_S,
    HOLD_MIN,
    MAX_SPEED,
    PROBE_S,
    STARTUP_S,
    STATE_DIR,
    TOKEN_ENV,
    _message,
    _spawn,
    _start_load,
    http,
    instant_query,
    iso_at,
    loopback_url,
    read_state,
    scraped_through,
    supervisor_facts,
    virtual_now,
    write_state,
)
from perfkit.core.resources import SCENARIOS
from perfkit.engine import dialects
from perfkit.errors import ConfigError, SourceError


@dataclass
class Started:
    label: str
    folder: Path
    runbook: Path
    params: dict[str, Any]
    first_scrape_s: float
    state: dict[str, Any]


def start(
    name: str,
    out: Path | None = None,
    *,
    speed: float = DEFAULT_SPEED,
    seed: int | None = None,
    timing: Timing | None = None,
    root: Path = SCENARIOS,
    engine: str = "vllm",
) -> Started:
    """Start drill ``name`` live (see the module docstring); returns once Prometheus holds the
    engine's first sample and the traffic has reached the engine. Anything that fails on the way is
    stopped again by PID."""
    import shutil

    from perfkit.app.drills.live_clock import measure_pace, stop_processes
    from perfkit.app.drills.recorded import DEFAULT_FOLDER, live_runbook, resolve, runbook_for

    t0 = time.monotonic()
    if not 1.0 <= speed <= MAX_SPEED:
        raise ConfigError(f"--speed must be in [1, {MAX_SPEED:g}]: got {speed:g}")
    drill, label = resolve(name, root)
    spec = spec_for(drill.name, training=runbook_for(drill.path) == "training_step", engine=engine)
    timing = timing or spec.timing
    seed = secrets.randbelow(2**31) if seed is None else int(seed)
    folder = out if out is not None else DEFAULT_FOLDER / label
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ConfigError(f"{folder}: not empty (a drill starts in a fresh folder)")
    from perfkit.lab.servers import binary

    binary("prometheus")  # a missing server fails before anything is written
    asked, first_pace = speed, speed
    while True:
        (folder / STATE_DIR).mkdir(parents=True, mode=0o700)
        (folder / "evidence" / "logs").mkdir(parents=True)
        state: dict[str, Any] = {"label": label, "seed": seed, "speed": speed, "processes": {}, "fixes": []}
        try:
            _launch(spec, timing, folder, state)
            first = time.monotonic() - t0
            state["first_scrape_s"] = round(first, 2)
            _plan(spec, timing, folder, state)
            state["sustained"] = round(measure_pace(state["urls"]["engine"], PROBE_S), 2)
            lower = capped_speed(speed, state["sustained"], HOLD_MIN) if speed == asked else None
            if lower is None or lower >= speed:
                if speed != asked:
                    state.update(speed_asked=asked, sustained_asked=first_pace)
                runbook, params = live_runbook(drill, label, folder, state, root)
                return Started(label, folder, runbook, params, first, state)
        except BaseException as exc:
            stop_processes(folder, state, lambda _line: None)
            kept = _set_aside(folder)
            again = "the drill can be started again" if kept != folder else "remove it to start again"
            exc.add_note(f"the failed start's files are in {kept}; {again}")
            raise
        # the machine did not hold the speed asked: start again, once, at one it sustains
        stop_processes(folder, state, lambda _line: None)
        shutil.rmtree(folder)
        speed, t0, first_pace = float(lower or 1.0), time.monotonic(), state["sustained"]


def _set_aside(folder: Path) -> Path:
    """Move a failed start's folder (empty before: it holds only what the start wrote) to a new sibling
    ``<name>.failed-<UTC time>``: its logs stay, the drill's folder is free. Replaces nothing."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in range(100):
        kept = folder.with_name(f"{folder.name}.failed-{stamp}" + (f"-{n}" if n else ""))
        if not kept.exists():
            with contextlib.suppress(OSError):
                folder.rename(kept)
                return kept
            break
    return folder


def _launch(spec: LiveSpec, timing: Timing, folder: Path, state: dict[str, Any]) -> None:
    import yaml

    from perfkit.app.drills.live_clock import pace_arrivals
    from perfkit.lab.servers import Spawned, free_port, start_scraping
    from perfkit.lab.servesim.config import load_config

    live, speed = folder.resolve() / STATE_DIR, float(state["speed"])  # argv names it whole: stop checks it
    life = life_for(speed, timing)
    token = secrets.token_urlsafe(32)
    fd = os.open(live / "admin-token", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token)
    engine_yaml = live / "engine.yaml"
    engine_yaml.write_text(yaml.safe_dump(spec.engine, sort_keys=False))
    cfg = load_config(engine_yaml)  # a spec the simulator would refuse fails here, naming the field
    with (live / "traffic.jsonl").open("w") as fh:
        for row in request_log(spec.traffic, life, state["seed"]):
            fh.write(json.dumps(row) + "\n")
    ports = {k: free_port() for k in ("engine", "clock")}
    urls = {k: f"http://127.0.0.1:{p}" for k, p in ports.items()}
    state.update(urls=urls, engine=spec.engine, fault=spec.fault, timing=asdict(timing), plan=None)
    state["traffic"] = asdict(spec.traffic)  # more of it is replayed after a fix if the load stopped
    state.update(model=cfg.served_model_name, gpu=cfg.gpu.name, gpus=cfg.tensor_parallel_size)
    state.update(offset_s=offset_for(speed, timing), anchor=0.0, life=life)  # anchor 0: not known yet
    write_state(folder, state)
    engine = _spawn(
        [sys.executable, "-m", "perfkit.app.cli.serve", f"--engine-config={engine_yaml}",
         f"--speed={speed:g}", f"--port={ports['engine']}", f"--admin-token-env={TOKEN_ENV}",
         f"--log-file={live / 'engine.log'}", f"--seed={state['seed']}"],
        live / "engine.out",
        env={**os.environ, TOKEN_ENV: token},
    )  # fmt: skip
    state["processes"]["engine"] = Spawned.of("engine", engine).as_dict()
    write_state(folder, state)
    # the supervisor and Prometheus start while the simulator imports (it answers 503 until the
    # anchor is known): the first scrape comes ~1 s after the simulator answers, not 3 s
    clock = _spawn(
        [sys.executable, "-m", "perfkit.app.drills.live", "supervise", str(live)], live / "clock.out"
    )
    state["processes"]["clock"] = Spawned.of("clock", clock).as_dict()
    write_state(folder, state)
    interval = min(60.0, max(0.2, timing.scrape / speed))
    prom = start_scraping(
        [urls["clock"].removeprefix("http://")],
        live / "prometheus",
        interval_s=interval,
        detach=True,
        past_s=state["offset_s"],
    )
    state["processes"]["prometheus"] = prom.as_dict()
    state["urls"]["prometheus"] = prom.url
    write_state(folder, state)
    v = _wait_healthy(urls["engine"], engine)
    state["anchor"] = time.time() - v / speed - state["offset_s"]
    write_state(folder, state)
    pace_arrivals(folder, state)
    (live / "load").mkdir(mode=0o700)
    _start_load(folder, state, "bench.json")
    _wait_first_sample(state)


def _wait_healthy(url: str, proc: subprocess.Popen) -> float:
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SourceError(
                f"{url}: the simulator exited with status {proc.returncode} (see .live/engine.out)"
            )
        try:
            if http(f"{url}/health", timeout=1.0)[0] == 200:
                return virtual_now(url)
        except SourceError:
            pass
        time.sleep(0.02)
    raise SourceError(f"{url}/health: the simulator did not answer within {STARTUP_S:g} s", url=url)


def _names(*pairs: tuple[str, str]) -> str:
    """An alternation of every serving engine's names for these (kind, signal) pairs (engine.dialects)."""
    names = [n for d in dialects.DIALECTS for kind, sig in pairs for n in getattr(d, kind).get(sig, ())]
    return "|".join(re.escape(n) for n in names)


#: the simulator's own series in any dialect it speaks (vllm:, sglang:, trtllm_), for Prometheus' regex
_ENGINE_FAMILIES = "(vllm|sglang):.+|trtllm_.+"
_BUSY = re.compile(rf"^(?:{_names(('gauges', 'running'), ('gauges', 'waiting'))})\{{[^}}]*\}} [1-9]", re.M)
_DONE = re.compile(rf"^(?:{_names(('counters', 'request_success'))})\{{[^}}]*\}} [1-9]", re.M)


def _wait_first_sample(state: dict[str, Any]) -> None:
    """Until Prometheus answers a query for the engine's series at the drill clock's now."""
    prom, engine = state["urls"]["prometheus"], state["urls"]["engine"]
    deadline = time.monotonic() + FIRST_SCRAPE_S
    query = f'count({{job="engine",__name__=~"{_ENGINE_FAMILIES}"}})'
    while time.monotonic() < deadline:
        if instant_query(state, query, virtual_now(engine), timeout=2.0):
            return
        time.sleep(0.05)
    raise SourceError(
        f"{prom}: no sample of the engine after {FIRST_SCRAPE_S:g} s (see .live/clock.out)", url=prom
    )


def _plan(spec: LiveSpec, timing: Timing, folder: Path, state: dict[str, Any]) -> None:
    """Once traffic reaches the engine: the windows and the fault's minute, on the virtual clock."""
    import random

    engine, deadline = state["urls"]["engine"], time.monotonic() + STARTUP_S
    while True:  # the first request: the load generator has started (its imports take a second or two)
        status, text = http(f"{engine}/metrics")
        if status == 200 and (_BUSY.search(text) or _DONE.search(text)):
            break
        if time.monotonic() > deadline:
            break
        time.sleep(0.02)
    v0 = virtual_now(engine)
    base0 = v0 + timing.warmup
    win0 = base0 + timing.baseline
    minute = random.Random(state["seed"]).randint(timing.fault_lo, timing.fault_hi)
    state["plan"] = {
        "v0": v0,
        "baseline": [base0, win0],
        "window": [win0, win0 + timing.window],
        "fault_at": win0 + 60.0 * minute,
        "end": v0 + float(state.get("life") or timing.duration),
    }
    write_state(folder, state)


# -- fix, status, stop ----------------------------------------------------------------------------


def fix(folder: Path, changes: dict[str, str], remedies: tuple[str, ...] = ()) -> dict[str, Any]:
    """Apply ``changes`` (engine settings, :data:`~perfkit.lab.servesim.config.SETTABLE`) and
    ``remedies`` (:data:`REMEDIES`) to the running engine; record the fix on the drill clock.
    Returns the fix as recorded, with the before/after windows it implies."""
    from perfkit.lab.servesim.config import config_from_dict, with_changes

    state = read_state(folder)
    if state.get("stopped"):
        raise ConfigError(f"{folder}: the drill was stopped; start a new one to try another fix")
    if not changes and not remedies:
        raise ConfigError("give the fix: --set KEY=VALUE (engine settings) and/or --remedy NAME")
    for remedy in remedies:
        if remedy not in REMEDIES:
            raise ConfigError(f"--remedy {remedy[:40]!r}: one of {', '.join(REMEDIES)}")
    engine = dict(state["engine"])
    for earlier in state.get("fixes", []):
        engine.update(earlier.get("set") or {})
    if changes:  # refused here with the field's name before anything is sent
        with_changes(config_from_dict(engine, "engine config"), dict(changes), "--set")
    url = loopback_url(state.get("urls", {}).get("engine"), "refusing to send the admin token to")
    token = (folder / STATE_DIR / "admin-token").read_text().strip()
    if changes:
        status, text = http(f"{url}/admin/config", body={"set": changes}, token=token)
        if status != 200:
            raise ConfigError(f"{url}/admin/config: HTTP {status}: {_message(text)}")
    for remedy in remedies:
        for fault in REMEDIES[remedy]:
            status, text = http(f"{url}/admin/faults", body={"fault": fault, "on": False}, token=token)
            if status != 200:
                raise SourceError(
                    f"{url}/admin/faults: HTTP {status}: {_message(text)}", url=url, status=status
                )
    v = virtual_now(url)
    record = {"v": v, "at": iso_at(state, v), "set": dict(changes), "remedies": list(remedies)}
    state.setdefault("fixes", []).append(record)
    windows = before_after(state, supervisor_facts(folder), v)
    from perfkit.app.drills.live_clock import keep_load

    record["load"] = keep_load(folder, state, v, windows["after_end_v"])
    write_state(folder, state)
    return {**record, **windows}


def before_after(state: dict[str, Any], sup: dict[str, Any], fix_v: float) -> dict[str, Any]:
    """The before/after windows of a fix at ``fix_v``: before from the fault (a settling minute
    after it, when there is room) to the fix; after from the fix plus ``settle`` for ``after``."""
    t, plan = state["timing"], state["plan"]
    began = sup.get("injected_v") or plan["window"][0]
    before0 = began + t["settle"] if fix_v - began > 2 * t["settle"] else began
    after = (fix_v + t["settle"], fix_v + t["settle"] + t["after"])
    windows = {
        "before": f"{iso_at(state, before0)}/{iso_at(state, fix_v)}",
        "after": f"{iso_at(state, after[0])}/{iso_at(state, after[1])}",
        "baseline": f"{iso_at(state, plan['baseline'][0])}/{iso_at(state, plan['baseline'][1])}",
        "after_end_v": after[1],
    }
    windows["compare"] = (
        f"perfkit compare --prometheus {state['urls']['prometheus']} --before {windows['before']} "
        f"--after {windows['after']} --baseline {windows['baseline']}"
    )
    return windows


def status(folder: Path) -> dict[str, Any]:
    """What runs, the drill clock, the windows, and whether the fault is due or was injected (not
    which fault: that is for ``drill check``)."""
    state = read_state(folder)
    from perfkit.app.drills.live_clock import running_processes

    running = running_processes(folder, state)
    out: dict[str, Any] = {"state": state, "running": running, "v": None}
    out["supervisor"] = supervisor_facts(folder)
    if running.get("engine"):
        with contextlib.suppress(SourceError, ConfigError):
            out["v"] = virtual_now(state["urls"]["engine"])
    out["scraped_v"] = None
    if out["v"] is not None and running.get("prometheus"):
        with contextlib.suppress(SourceError, ConfigError):
            out["scraped_v"] = scraped_through(state, out["v"])
    loads = [alive for key, alive in running.items() if key.startswith("load")]
    until = state.get("load_until_v")
    out["load_stopped"] = (
        bool(loads) and not any(loads) or (out["v"] is not None and is_number(until) and out["v"] > until)
    )
    return out


def stop(folder: Path) -> tuple[list[str], bool]:
    """Stop every process of the drill by PID (the load first, so it writes what it measured); the
    folder, the Prometheus data and the logs stay. Returns a line per process, and whether an
    entry of the state was malformed (nothing signalled for it)."""
    from perfkit.app.drills.live_clock import stop_processes

    state = read_state(folder)
    lines: list[str] = []
    malformed = stop_processes(folder, state, lines.append)
    state["stopped"] = True
    write_state(folder, state)
    return lines, malformed


# -- the supervisor: drill clock, logs, the fault ----------------------------------------------------


def supervise(live: Path) -> None:
    """The ``clock`` process: serve the engine's metrics stamped on the drill clock, copy its log on
    that clock, switch the fault on at its minute. Runs until SIGTERM."""
    import asyncio

    from perfkit.app.drills.live_clock import run_supervisor

    asyncio.run(run_supervisor(live))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "supervise":
        supervise(Path(sys.argv[2]))
    else:
        sys.exit("usage: python -m perfkit.app.drills.live supervise FOLDER/.live")
