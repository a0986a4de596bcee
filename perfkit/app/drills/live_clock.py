"""The supervisor of a live drill (the ``clock`` process of :mod:`perfkit.app.drills.live`).

One small asyncio process, started detached by ``drill start --live`` as ``python -m
perfkit.app.drills.live supervise FOLDER/.live`` (nothing on its command line names the fault: it reads
the 0600 state file), that does three things until SIGTERM:

* **the drill clock**: ``GET /metrics`` on its 127.0.0.1 port fetches the simulator's ``/metrics`` and
  adds to every sample the timestamp ``anchor + virtual seconds`` (the simulator's own
  ``perfkit_lab_servesim_virtual_seconds`` in the same exposition, so every sample of a scrape is on
  one instant). Prometheus honours a target's timestamps, so a 15-virtual-second scrape interval and
  every rate over it mean what they mean at ``--speed 1``. Timestamps only move forward (a clock the
  engine held back by a few ms is not sent twice). Once the drill clock would pass the wall clock
  (the drill outlived its planned length) it answers 503: Prometheus refuses future samples anyway;
* **the logs**: the simulator's log lines are copied to ``evidence/logs/vllm.log`` with their stamps
  moved onto the drill clock (the simulator stamps at its own start + virtual seconds), every
  :data:`TICK_S`, whole lines only, at most :data:`LOG_CHUNK` bytes a tick;
* **the fault**: once the virtual clock reaches the plan's ``fault_at``, ``POST /admin/faults`` with
  the state's fault body and the admin token; the virtual second it took effect goes to
  ``.live/supervisor.json`` (a failure is recorded there and retried next tick).

Its pace (virtual seconds per wall second over the last :data:`LAG_WINDOW_S`) goes to
``supervisor.json`` for ``drill status``.

This module also identifies and stops the drill's processes (:func:`stop_processes`, for ``drill
stop``, a failed start and the supervisor: binary, the argument naming this drill's ``.live``, argv
and a recorded start time, through :func:`perfkit.lab.servers.identity_refusal`), and keeps its load
going through a fix's after window (:func:`keep_load`).

A forgotten drill does not run for ever: once the virtual clock passes the plan's end by
:data:`GRACE_S` (the drill clock would soon overtake the wall clock), or when the drill's folder is
gone, the supervisor stops the load generator, the simulator and Prometheus by PID (as ``drill
stop`` does; the evidence stays) and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from perfkit.app.drills.live_specs import Traffic, request_log
from perfkit.app.drills.live_state import (
    _VIRTUAL,
    STATE_DIR,
    _message,
    _start_load,
    http,
    iso_at,
    loopback_url,
    read_state,
    state_path,
    virtual_now,
    write_private,
    write_state,
)
from perfkit.errors import ConfigError, SourceError

TICK_S = 0.25
"""How often the log is copied and the fault's time checked: 0.25 wall s is 7.5 virtual s at --speed 30,
well inside the fault's minute."""
GRACE_S = 540.0
"""Virtual seconds past the plan's end before the supervisor ends the drill: inside the ten minutes
the drill clock's anchor leaves (``live_drill.offset_for``), so Prometheus never sees the future."""
SILENT_S = 60.0
"""Wall seconds without an answer from the simulator after which the drill is over (it was stopped or
died): the other processes are stopped rather than left serving nothing."""
LOG_CHUNK = 1 << 20  # a stats line every 10 virtual s is ~200 B: 1 MiB a tick is never the limit
FETCH_TIMEOUT_S = 5.0
LAG_WINDOW_S = 10.0
"""Wall seconds over which the supervisor measures how fast the drill clock runs (``.live/
supervisor.json`` ``rate``): ``drill status`` warns when it falls behind ``--speed``."""
_LOG_STAMP = re.compile(r"^(\(\S+ pid=\d+\) \w+ )(\d\d-\d\d \d\d:\d\d:\d\d)( .*)$", re.DOTALL)
# SGLang's "[2026-12-02 10:00:00 TP0] ..." and a launcher's "2026-12-02 10:00:00 launcher: ..." (the
# simulator's other dialects, perfkit.lab.sim.dialects): a full date
_FULL_STAMP = re.compile(r"^(\[?)(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)([ \]].*)$", re.DOTALL)


def restamp(line: str, shift_s: float) -> str:
    """A log line with its stamp moved by ``shift_s`` seconds: vLLM's ``MM-DD HH:MM:SS`` (the year is
    this year's: the format has none), or SGLang's and a launcher's full date; other lines unchanged."""
    full = _FULL_STAMP.match(line)
    if full:
        try:
            when = datetime.strptime(full.group(2), "%Y-%m-%d %H:%M:%S")
        except ValueError:
            return line
        return f"{full.group(1)}{when + timedelta(seconds=shift_s):%Y-%m-%d %H:%M:%S}{full.group(3)}"
    m = _LOG_STAMP.match(line)
    if not m:
        return line
    year = datetime.now(UTC).year
    try:
        when = datetime.strptime(f"{year}-{m.group(2)}", "%Y-%m-%d %H:%M:%S")
    except ValueError:
        return line
    moved = when + timedelta(seconds=shift_s)
    return f"{m.group(1)}{moved:%m-%d %H:%M:%S}{m.group(3)}"


# -- the drill's processes: identified, stopped, the load kept going (drill stop, fix, the supervisor) --


def running_processes(folder: Path, state: dict[str, Any]) -> dict[str, bool]:
    """Each recorded process: whether it runs and is this drill's (:func:`_ours`)."""
    from perfkit.lab.servers import process_identity

    out = {}
    for key, rec in state["processes"].items():
        proc, why, _ = _ours(folder, key, rec)
        out[key] = proc is not None and why is None and process_identity(proc.pid) is not None
    return out


#: the argument naming this drill's own ``.live`` folder in each process's argv (its "data dir")
_MARKS = {
    "engine": "--engine-config={live}/engine.yaml",
    "clock": "{live}",
    "load": "--replay={live}/traffic.jsonl",
}


def _ours(folder: Path, key: str, rec: Any) -> tuple[Any, str | None, bool]:
    """(the process object, why it is not this drill's process or None, whether the entry is
    malformed). Identified as ``perfkit lab down`` does (:func:`perfkit.lab.servers.identity_refusal`):
    the binary (Python; Prometheus), the argument naming this folder's ``.live`` (computed from the
    folder, never read from the state), the recorded argv, and a start time, which must be recorded:
    never by argv alone. A process that has exited is no refusal (it is not running)."""
    from perfkit.lab.servers import LabServer, Spawned, identity_refusal, process_identity

    live = folder.resolve() / STATE_DIR
    kind = "load" if re.fullmatch(r"load(-\d{1,3})?", key) else key
    if kind not in (*_MARKS, "prometheus") or not isinstance(rec, dict):
        return None, f"not a process of a live drill ({type(rec).__name__}); nothing signalled", True
    proc: Any
    try:
        proc = LabServer(**rec) if kind == "prometheus" else Spawned(**rec)
    except TypeError:
        fields = ", ".join(sorted(map(str, rec))[:8])
        return None, f"malformed entry (fields: {fields[:120]}); nothing signalled", True
    problem = proc.problem()
    if (
        problem is None
        and kind == "prometheus"
        and (proc.engine != "prometheus" or proc.data_dir != str(live / "prometheus" / "tsdb"))
    ):
        problem = f"its data_dir {str(proc.data_dir)[:80]!r} is not this drill's"
    if problem is None and not isinstance(proc.started, int):
        problem = "no start time was recorded (a process is never identified by its argv alone)"
    if problem:
        return None, f"malformed entry: {problem}; nothing signalled", True
    identity = process_identity(proc.pid)
    if identity is None:
        return proc, None, False
    if kind == "prometheus":
        return proc, proc._refusal(*identity), False
    python = Path(proc.cmdline[0]).name
    binary = python if re.fullmatch(r"python[0-9.]*", python) else Path(sys.executable).name
    mark = _MARKS[kind].format(live=live)
    why = identity_refusal(
        identity[0], identity[1], binary=binary, data_arg=mark, data_dir=str(live),
        cmdline=proc.cmdline, recorded_started=proc.started, need_started=True,
    )  # fmt: skip
    if why:
        runs = " ".join(identity[0])[:80]
        why = f"pid {proc.pid} is not this drill's {key} (it runs {runs!r}: {why}); left alone"
    return proc, why, False


def stop_processes(folder: Path, state: dict[str, Any], say: Any, skip: tuple[str, ...] = ()) -> bool:
    """Stop the recorded processes by PID, the load first (SIGINT: the load generator writes what
    it measured), then the supervisor, the simulator and Prometheus, each only once identified as
    this drill's (:func:`_ours`); ``skip``: keys left running. True when an entry was malformed."""
    import signal

    from perfkit.lab.servers import DidNotExit, NotOurProcess

    procs = state.get("processes")
    if not isinstance(procs, dict):
        say("the state names no processes (malformed); nothing signalled")
        return True
    order = {"clock": 1, "engine": 2, "prometheus": 3}
    malformed = False
    for key in sorted(procs, key=lambda k: (order.get(k, 0), k)):
        if key in skip:
            continue
        proc, why, bad = _ours(folder, key, procs[key])
        malformed |= bad
        if why is not None:
            say(f"{key[:40]}: {why}")
            continue
        try:
            if key.startswith("load"):
                was = proc.stop(timeout_s=15.0, first=signal.SIGINT)
            else:
                was = proc.stop(timeout_s=10.0)
        except (NotOurProcess, DidNotExit) as exc:
            say(f"{key}: {exc}")
            continue
        say(f"stopped {key} (pid {proc.pid})" if was else f"{key} was not running (pid {proc.pid})")
    return malformed


def keep_load(folder: Path, state: dict[str, Any], v: float, until: float) -> str:
    """Make sure the drill's load runs through a fix's after window (ending at virtual ``until``):
    when the load has stopped, or its replay ends sooner, a new replay of the drill's traffic (same
    rate and lengths; Poisson arrivals are memoryless) runs from the fix to the window's end, in
    place of what is left of the old one. Returns what was done ("" when the running load covers
    it), and says when the drill itself ends before the window does."""
    running = [k for k, alive in running_processes(folder, state).items() if k.startswith("load") and alive]
    covered = float(state.get("load_until_v") or 0.0)
    if running and covered >= until:
        return ""
    last = float(state["plan"]["end"]) + GRACE_S - 60.0  # the supervisor ends the drill past this
    length = min(until + 2 * float(state["timing"]["scrape"]), last) - v
    short = (
        f"; the drill ends at {iso_at(state, last)} (its clock would pass the wall clock), before the "
        "after window closes: start again with a lower --speed to have time for a fix"
        if until > last
        else ""
    )
    if length <= 0:
        return "the load cannot be extended" + short
    if running:  # its replay ends too soon: the new one takes over from now
        stop_processes(folder, {"processes": {k: state["processes"][k] for k in running}}, lambda _l: None)
    seed = int(state.get("seed") or 0) + 7919 * len(state.get("fixes", []))
    rows = request_log(Traffic(**state.get("traffic", {})), length, seed)
    write_private(folder / STATE_DIR, "traffic.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    for key in running:
        state["processes"].pop(key, None)
    pace_arrivals(folder, state)  # the new replay's times count from now
    _start_load(folder, state, f"bench-fix-{len(state.get('fixes', []))}.json", length=length)
    was = "had stopped" if not running else f"would end at {iso_at(state, covered)}"
    return f"the drill's load {was}: it is replayed from the fix until {iso_at(state, v + length)}" + short


def pace_arrivals(folder: Path, state: dict[str, Any]) -> None:
    """From now on the engine admits each request at the virtual second its wall-clock load
    generator meant (``POST /admin/pace``, :mod:`perfkit.lab.servesim.clock`): on a machine that
    cannot keep ``--speed`` the drill's load stays the drill's, only the wall time stretches."""
    url = loopback_url(state["urls"]["engine"], "refusing to send the admin token to")
    token = (folder / STATE_DIR / "admin-token").read_text().strip()
    status, text = http(f"{url}/admin/pace", body={"on": True}, token=token)
    if status != 200:
        raise SourceError(f"{url}/admin/pace: HTTP {status}: {_message(text)}", url=url, status=status)


def measure_pace(engine: str, seconds: float) -> float:
    """Virtual seconds per wall second the simulator at ``engine`` kept over ``seconds``: its
    ``--speed`` when the machine holds it, less when it runs late (its clock then stands still)."""
    t0, v0 = time.monotonic(), virtual_now(engine)
    time.sleep(seconds)
    t1, v1 = time.monotonic(), virtual_now(engine)
    return (v1 - v0) / max(t1 - t0, 1e-3)


# -- the supervisor --------------------------------------------------------------------------------


class Supervisor:
    def __init__(self, live: Path) -> None:
        self.live, self.folder = live, live.parent
        self.state = read_state(self.folder)
        self.mtime = 0.0
        self.token = (live / "admin-token").read_text().strip()
        self.engine = loopback_url(self.state["urls"]["engine"], "the engine's URL")  # gets the token
        self.readings: list[tuple[float, float]] = []  # (monotonic, virtual): the clock's pace
        self.rate_at = time.monotonic()
        self.last_ms = 0
        self.v = 0.0
        self.v_at = time.monotonic()  # when the clock was last read (from the start: the grace begins)
        self.facts: dict[str, Any] = {}
        self.log_pos, self.log_rest = 0, b""
        self.session: aiohttp.ClientSession | None = None

    # -- the drill clock ------------------------------------------------------------------------

    async def _engine_metrics(self) -> tuple[str, float] | None:
        assert self.session is not None
        try:
            timeout = aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S)
            async with self.session.get(f"{self.engine}/metrics", timeout=timeout) as resp:
                if resp.status != 200:
                    return None
                text = await resp.text()
        except (aiohttp.ClientError, TimeoutError):
            return None
        m = _VIRTUAL.search(text)
        if m is None:
            return None
        self.v, self.v_at = float(m.group(1)), time.monotonic()
        self.readings = [r for r in self.readings if r[0] > self.v_at - LAG_WINDOW_S] + [(self.v_at, self.v)]
        return text, self.v

    def _pace(self) -> None:
        """Every few seconds: how fast the drill clock ran over the last :data:`LAG_WINDOW_S`
        (virtual seconds per wall second), into ``supervisor.json`` for ``drill status``."""
        now = time.monotonic()
        if now - self.rate_at < LAG_WINDOW_S / 2 or len(self.readings) < 2:
            return
        (t0, v0), (t1, v1) = self.readings[0], self.readings[-1]
        if t1 - t0 >= LAG_WINDOW_S / 2:
            self.facts.update(rate=round((v1 - v0) / (t1 - t0), 2), rate_wall=time.time())
            self._write_facts()
        self.rate_at = now

    async def metrics(self, request: web.Request) -> web.Response:
        if not self.state.get("anchor"):  # the simulator is still starting: no clock to stamp with
            self._reload()
            if not self.state.get("anchor"):
                return web.Response(status=503, text="the drill clock is not set yet\n")
        got = await self._engine_metrics()
        if got is None:
            return web.Response(status=502, text="the simulated engine does not answer\n")
        text, v = got
        ts = int((self.state["anchor"] + v) * 1000)
        if ts > time.time() * 1000:
            return web.Response(
                status=503, text="the drill clock has caught up with the wall clock: the drill is over\n"
            )
        ts = max(ts, self.last_ms + 1)
        self.last_ms = ts
        lines = (ln if not ln or ln.startswith("#") else f"{ln} {ts}" for ln in text.splitlines())
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    # -- the tick: state, logs, fault ------------------------------------------------------------

    def _reload(self) -> None:
        path = self.live / "state.json"
        with contextlib.suppress(OSError, ConfigError):  # an edited state: keep the last good one
            mtime = path.stat().st_mtime
            if mtime != self.mtime:
                self.state, self.mtime = read_state(self.folder), mtime

    def _copy_log(self) -> None:
        if not state_path(self.folder).is_file():
            return
        src, dst = self.live / "engine.log", self.folder / "evidence" / "logs" / "vllm.log"
        try:
            with src.open("rb") as fh:
                fh.seek(self.log_pos)
                data = fh.read(LOG_CHUNK)
        except OSError:
            return
        self.log_pos += len(data)
        data = self.log_rest + data
        whole, _, self.log_rest = data.rpartition(b"\n")
        if not whole:
            self.log_rest = data
            return
        shift = -float(self.state.get("offset_s") or 0.0)
        text = "\n".join(restamp(line, shift) for line in whole.decode(errors="replace").split("\n"))
        with dst.open("a", encoding="utf-8") as out:
            out.write(text + "\n")

    async def _fault(self) -> None:
        plan = self.state.get("plan")
        if not plan or "injected_v" in self.facts or self.session is None:
            return
        if time.monotonic() - self.v_at > 2 * TICK_S:
            await self._engine_metrics()
        if self.v < plan["fault_at"]:
            return
        try:
            async with self.session.post(
                f"{self.engine}/admin/faults",
                json=self.state["fault"],
                headers={"Authorization": f"Bearer {self.token}"},
                timeout=aiohttp.ClientTimeout(total=FETCH_TIMEOUT_S),
            ) as resp:
                ok, said = resp.status == 200, (await resp.text())[:300]
        except (aiohttp.ClientError, TimeoutError) as exc:
            ok, said = False, str(exc)[:300]
        if ok:
            self.facts.update(injected_v=self.v, injected_wall=time.time())
            self.facts.pop("error", None)
        else:
            self.facts["error"] = said
        self._write_facts()

    def _write_facts(self) -> None:
        with contextlib.suppress(OSError, ConfigError):  # the folder is gone: the drill ends next tick
            write_private(self.live, "supervisor.json", json.dumps(self.facts))

    def _over(self) -> str:
        """Why the drill should end now ("" while it runs)."""
        if not state_path(self.folder).is_file():
            return "its folder is gone"
        if self.state.get("anchor") and time.monotonic() - self.v_at > SILENT_S:
            return f"the simulator has not answered for {SILENT_S:g} s"
        plan = self.state.get("plan")
        if plan and self.v > plan["end"] + GRACE_S:
            return "its planned length has passed"
        return ""

    def _end(self, why: str) -> None:
        lines: list[str] = []
        stop_processes(self.folder, self.state, lines.append, skip=("clock",))
        self.facts["ended"] = f"the drill ended itself: {why}; " + "; ".join(lines)
        if state_path(self.folder).is_file():
            self.state["stopped"] = True
            write_state(self.folder, self.state)
            self._write_facts()

    async def ticks(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            self._reload()
            self._copy_log()
            await self._fault()
            if time.monotonic() - self.v_at > 2.0:  # no scrape lately (Prometheus gone): read it here
                await self._engine_metrics()
            self._pace()
            why = self._over()
            if why:
                await asyncio.get_running_loop().run_in_executor(None, self._end, why)
                return
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), TICK_S)
        self._copy_log()


async def run_supervisor(live: Path) -> None:
    sup = Supervisor(live)
    port = int(sup.state["urls"]["clock"].rsplit(":", 1)[1])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    app = web.Application()
    app.router.add_get("/metrics", sup.metrics)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    async with aiohttp.ClientSession() as session:  # trust_env off: loopback, never a proxy
        sup.session = session
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            await sup.ticks(stop)
        finally:
            await runner.cleanup()
