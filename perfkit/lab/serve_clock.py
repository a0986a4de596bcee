"""The reference server's clocks: when a request arrived, and waking at exact deadlines.

* :class:`Arrivals` stamps the moment a request's first bytes are read from its socket. A request's
  clock starts there, not when its handler starts: 64 requests that arrive together are parsed and
  handled one after another (80-100 µs each on one core), and a clock started by the handler would
  hide that queue from the server's own timing while every client sees it. With the arrival stamp,
  the server's lateness (``perfkit_lab_serve_chunk_lateness_seconds``) includes it.
* :class:`Waker` wakes coroutines at absolute deadlines within about 0.1 ms (Linux ``timerfd``).
* :class:`Histogram` is a Prometheus histogram for ``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import heapq
import itertools
import math
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator
from typing import Any


class Arrivals:
    """A protocol factory wrapping aiohttp's (``runner.server``) that notes when each request's first
    bytes were read: :meth:`take` gives a request's arrival (``time.monotonic()``) once.

    Every protocol callback is passed through unchanged; only the time of the first ``data_received``
    after the previous request was taken is kept (a body that arrives in several reads keeps the time
    of its first). A connection that closes drops its entry."""

    def __init__(self, factory: Callable[[], asyncio.Protocol]) -> None:
        self.factory = factory
        self.pending: dict[int, float] = {}

    def __call__(self) -> asyncio.Protocol:
        return _Stamping(self.factory(), self.pending)

    def take(self, protocol: Any) -> float | None:
        return self.pending.pop(id(protocol), None)


class _Stamping(asyncio.Protocol):
    def __init__(self, inner: asyncio.Protocol, pending: dict[int, float]) -> None:
        self.inner, self.pending, self.key = inner, pending, id(inner)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        self.pending.setdefault(self.key, time.monotonic())
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.pending.pop(self.key, None)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class Histogram:
    """A Prometheus histogram: ``le`` buckets (a value equal to a bound counts in it), sum and count."""

    def __init__(self, bounds: list[float]) -> None:
        self.bounds, self.counts, self.sum = bounds, [0] * (len(bounds) + 1), 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def lines(self, name: str, labels: str) -> Iterator[str]:
        cumulative = 0
        for bound, count in zip([*self.bounds, math.inf], self.counts, strict=True):
            cumulative += count
            le = "+Inf" if bound == math.inf else repr(float(bound))
            yield f'{name}_bucket{{{labels},le="{le}"}} {float(cumulative)!r}'
        yield f"{name}_count{{{labels}}} {float(cumulative)!r}"
        yield f"{name}_sum{{{labels}}} {self.sum!r}"


class _Itimerspec(ctypes.Structure):  # struct itimerspec: two struct timespec (interval, value)
    _fields_ = [(name, ctypes.c_long) for name in ("interval_s", "interval_ns", "value_s", "value_ns")]


class Waker:
    """Wakes coroutines at absolute ``time.monotonic()`` deadlines, never early.

    The event loops' timers have 1 ms resolution (epoll's timeout is in ms; uvloop's clock is libuv's
    ``uv_now``, whole ms, and its timers may fire up to 1 ms early): chunks would leave 0 to 2 ms late.
    On Linux one ``timerfd`` (CLOCK_MONOTONIC, the clock ``time.monotonic`` reads, armed at an
    absolute time in ns) wakes the loop for the earliest of a heap of deadlines: chunks leave within
    about 0.1 ms of their due time. Elsewhere: the loop's timers, rounded up to whole ms and repeated
    until the deadline has passed.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.fd, self.armed = loop, -1, math.inf
        self.heap: list[tuple[float, int, asyncio.Future[None]]] = []
        self.seq = itertools.count()
        with contextlib.suppress(OSError, AttributeError, TypeError):  # no timerfd here: ms timers
            libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
            self._settime = libc.timerfd_settime
            fd = libc.timerfd_create(time.CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC)
            if fd >= 0:
                loop.add_reader(fd, self._fire)
                self.fd = fd

    def close(self) -> None:
        if self.fd >= 0:
            self.loop.remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1

    def _arm(self, when: float) -> None:
        """Arm the timer at ``when`` (absolute; inf disarms). Arming also clears the descriptor's
        expiry count, so it is never read."""
        self.armed, spec = when, _Itimerspec()
        if when < math.inf:
            spec.value_s = sec = int(when)
            spec.value_ns = min(999_999_999, max(1, int((when - sec) * 1e9)))
        if self._settime(self.fd, 1, ctypes.byref(spec), None):  # 1: TFD_TIMER_ABSTIME
            raise OSError(ctypes.get_errno(), "timerfd_settime failed")

    def _fire(self) -> None:
        now, heap = time.monotonic(), self.heap
        while heap and heap[0][0] <= now:
            future = heapq.heappop(heap)[2]
            if not future.done():  # a cancelled request leaves its entry behind
                future.set_result(None)
        self._arm(heap[0][0] if heap else math.inf)

    async def sleep_until(self, deadline: float) -> None:
        if self.fd < 0:
            while (left := deadline - time.monotonic()) > 0:
                await asyncio.sleep(math.ceil(left * 1e3) / 1e3)
        elif deadline > time.monotonic():
            future = self.loop.create_future()
            heapq.heappush(self.heap, (deadline, next(self.seq), future))
            if deadline < self.armed:
                self._arm(deadline)
            await future
