"""The simulator's live clock, and the pacing of arrivals on it (:mod:`perfkit.lab.servesim.server`).

**The clock** (:class:`VirtualClock`): virtual seconds are wall seconds x ``--speed``, standing
still while the engine runs late (its own work, a busy machine), so steps run back to back in
virtual time.

**Paced arrivals** (``POST /admin/pace``, what a live drill turns on): a client that sends on the wall
clock (``perfkit bench --replay --time-scale S``) runs ahead of an engine that fell behind, and its
requests would land denser in virtual time than it meant: a machine too slow for ``--speed`` would
change the drill's load, not only its pace. While arrivals are paced, a request is admitted at the
virtual second the client meant (:meth:`VirtualClock.arrival`: wall time since pacing began x S),
waiting in :class:`Arrivals` until the engine's clock reaches it; the virtual load is then the
client's at any speed the machine keeps, and only the wall time stretches. A request that comes
late is admitted at once (nothing is moved earlier).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections.abc import Callable, Coroutine
from typing import Any


class VirtualClock:
    """Virtual seconds since start: ``(monotonic() - w0) * speed``, standing still while the engine
    is late. While a step is in flight (:meth:`run_until`) no reading passes its end: a request that
    arrives while the engine runs late arrives at the step's end, as it would in an engine whose
    step had taken no longer, and is scheduled at or after its arrival. (Before, such a request was
    stamped past the step's end and the clock was then set back to it: its queue time came out
    negative, vLLM's queue-time ``_sum`` fell, and Prometheus read each fall as a counter reset, 45 in
    a 25-minute drill window, tripling the mean queue time ``increase()`` gave.)"""

    def __init__(self, speed: float) -> None:
        self.speed, self.w0, self.held = speed, time.monotonic(), 0.0
        self.cap: float | None = None  # the in-flight step's end
        self.paced_from: float | None = None  # ``held`` when pacing began (None: arrivals are now)

    def now(self) -> float:
        v = (time.monotonic() - self.w0) * self.speed
        return v if self.cap is None else min(v, self.cap)

    def wall(self, v: float) -> float:
        """The ``time.monotonic()`` at which virtual time reaches ``v`` (if nothing holds it)."""
        return self.w0 + v / self.speed

    def run_until(self, v: float) -> None:
        """A step ending at virtual ``v`` is in flight: time goes no further until :meth:`hold`."""
        self.cap = v

    def hold(self, v: float) -> None:
        """The step that ended at ``v`` is delivered: time continues from ``v``, the wall time the
        engine was late by given up (counted in ``held``)."""
        late = time.monotonic() - self.wall(v)
        if late > 0:
            self.w0 += late
            self.held += late
        self.cap = None

    def pace(self, on: bool) -> None:
        """Pace arrivals from now (:meth:`arrival`), or stop pacing them."""
        self.paced_from = self.held if on else None

    def arrival(self) -> float:
        """The virtual second a request arriving now is due: now, or, while arrivals are paced, the
        virtual time a client keeping to the wall clock x ``speed`` is at: ahead of :meth:`now` by
        what the engine fell behind since pacing began (the clock it held)."""
        v = (time.monotonic() - self.w0) * self.speed
        return v if self.paced_from is None else v + (self.held - self.paced_from) * self.speed


class Arrivals:
    """Requests waiting for their virtual arrival (:meth:`VirtualClock.arrival`), admitted in order by
    one task (:meth:`run`) as the clock reaches each: ``await arrivals.wait()`` before admitting."""

    def __init__(
        self, clock: Callable[[], VirtualClock], sleep_until: Callable[[float], Coroutine[Any, Any, None]]
    ) -> None:
        self.clock, self.sleep_until = clock, sleep_until
        self.due: list[tuple[float, int, asyncio.Future[None]]] = []
        self.added = asyncio.Event()
        self._seq = itertools.count()

    async def wait(self) -> None:
        """Return once the engine's clock has reached this request's arrival (at once when not paced)."""
        clock = self.clock()
        u = clock.arrival()
        if clock.paced_from is None or u <= clock.now():
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self.due, (u, next(self._seq), fut))
        self.added.set()
        await fut

    async def run(self) -> None:
        while True:
            if not self.due:
                self.added.clear()
                await self.added.wait()
                continue
            clock, u = self.clock(), self.due[0][0]
            if clock.now() < u:
                await self.sleep_until(clock.wall(u))
                if clock.now() < u:  # a late step holds the clock: wait for it, never spin
                    await asyncio.sleep(0.001)
                continue
            fut = heapq.heappop(self.due)[2]
            if not fut.done():  # its client may have gone
                fut.set_result(None)
