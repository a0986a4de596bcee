"""What the live-drill tests share: waiting for the drill clock and for Prometheus to hold its samples."""

from __future__ import annotations

import time

from perfkit.app.drills import live as L


def wait_for_virtual(state: dict, v: float, deadline: float) -> None:
    """Until the simulator's clock passes ``v`` by two scrapes and Prometheus holds its samples past
    it: on a busy machine the scrapes (half a wall second apart at 30x) fall behind the clock, and a
    window read before they catch up is judged on its first minutes only."""
    scrape_v = state["timing"]["scrape"]
    while (now := L.virtual_now(state["urls"]["engine"])) < v + 2 * scrape_v or (
        L.scraped_through(state, now) or 0.0
    ) < v + scrape_v:
        assert time.monotonic() < deadline, (
            "the drill clock, or Prometheus's scrapes, did not get there in time"
        )
        time.sleep(1.0)
