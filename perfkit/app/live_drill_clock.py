"""The supervisor of a live drill (the ``clock`` process of :mod:`perfkit.app.live_drill`).

One small asyncio process, started detached by ``drill start --live`` as ``python -m
perfkit.app.live_drill supervise FOLDER/.live`` (nothing on its command line names the fault: it reads
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

A forgotten drill does not run for ever: once the virtual clock passes the plan's end by
:data:`GRACE_S` (the drill clock would soon overtake the wall clock), or when the drill's folder is
gone, the supervisor stops the load generator, the simulator and Prometheus by PID (as ``drill
stop`` does; the evidence stays) and exits.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from perfkit.app.live_drill import _VIRTUAL, _stop_all, read_state, restamp, state_path, write_state

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


class Supervisor:
    def __init__(self, live: Path) -> None:
        self.live, self.folder = live, live.parent
        self.state = read_state(self.folder)
        self.mtime = 0.0
        self.token = (live / "admin-token").read_text().strip()
        self.engine = self.state["urls"]["engine"]
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
        return text, self.v

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
        with contextlib.suppress(OSError):
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
        path = self.live / "supervisor.json"
        tmp = path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(self.facts, fh)
        os.replace(tmp, path)

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
        _stop_all(self.folder, self.state, lines.append, skip=("clock",))
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
