"""Paced arrivals (:mod:`perfkit.lab.servesim.clock`): a client keeping to the wall clock x speed runs
ahead of an engine that fell behind; while pacing is on, each request is admitted at the virtual
second its client meant, so the virtual load is the client's at any speed the machine keeps.

The lateness is made the way the engine makes it (a step in flight past its wall time, then
``hold``), on the real clock and the real asyncio waker; the admin endpoint on a real simulator."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request

from perfkit.lab.serve import Waker, serving
from perfkit.lab.servesim.clock import Arrivals, VirtualClock

TOKEN = "test-admin-token-0123456789"


def late(clock: VirtualClock, wall_s: float) -> None:
    """The engine runs a step ``wall_s`` past its end (a busy machine): the clock holds that long."""
    end = clock.now() + 0.001
    clock.run_until(end)
    time.sleep(wall_s)
    clock.hold(end)


def run(coro) -> None:
    error: list[BaseException] = []

    def target() -> None:
        try:
            asyncio.run(coro)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            error.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout=20.0)
    assert not thread.is_alive(), "the scenario hung"
    if error:
        raise error[0]


def test_a_paced_request_waits_for_the_virtual_second_its_client_meant():
    seen: dict[str, float] = {}

    async def scenario() -> None:
        clock = VirtualClock(1000.0)  # 1 ms of wall time is a virtual second
        waker = Waker(asyncio.get_running_loop())
        arrivals = Arrivals(lambda: clock, waker.sleep_until)
        task = asyncio.create_task(arrivals.run())
        clock.pace(True)
        late(clock, 0.05)  # the engine fell ~50 virtual seconds behind its wall-clock client
        meant = clock.arrival()
        seen["lag"] = meant - clock.now()
        t0 = time.monotonic()
        await arrivals.wait()
        seen["waited"] = time.monotonic() - t0
        seen["admitted_at"], seen["meant"] = clock.now(), meant
        # unpaced, the same lag admits at once, at the engine's own now
        clock.pace(False)
        late(clock, 0.02)
        assert clock.arrival() <= clock.now() + 1.0
        t0 = time.monotonic()
        await arrivals.wait()
        seen["unpaced"] = time.monotonic() - t0
        task.cancel()
        waker.close()

    run(scenario())
    assert seen["lag"] > 40.0  # ~50 virtual s of the client's time the engine has not yet reached
    assert seen["admitted_at"] >= seen["meant"]  # not before it was meant
    assert seen["admitted_at"] - seen["meant"] < 20.0  # and promptly once the clock got there
    assert 0.035 < seen["waited"] < 1.0
    assert seen["unpaced"] < 0.01


def test_pacing_counts_from_when_it_was_turned_on():
    clock = VirtualClock(1000.0)
    late(clock, 0.03)  # behind before pacing began: not owed to anyone
    clock.pace(True)
    assert clock.arrival() - clock.now() < 5.0
    late(clock, 0.03)
    assert clock.arrival() - clock.now() > 20.0


def test_paced_requests_are_admitted_in_order_and_a_gone_client_is_skipped():
    order: list[int] = []

    async def scenario() -> None:
        clock = VirtualClock(1000.0)
        waker = Waker(asyncio.get_running_loop())
        arrivals = Arrivals(lambda: clock, waker.sleep_until)
        task = asyncio.create_task(arrivals.run())
        clock.pace(True)
        late(clock, 0.03)

        async def one(i: int) -> None:
            await arrivals.wait()
            order.append(i)

        waiting = []
        for i in range(5):
            waiting.append(asyncio.create_task(one(i)))
            await asyncio.sleep(0.002)  # each meant two virtual seconds after the one before
        waiting[2].cancel()  # its client went away
        await asyncio.gather(*waiting, return_exceptions=True)
        task.cancel()
        waker.close()

    run(scenario())
    assert order == [0, 1, 3, 4]


def test_the_pace_endpoint_needs_the_admin_token(tmp_path, monkeypatch):
    monkeypatch.setenv("PERFKIT_LAB_ADMIN_TOKEN", TOKEN)
    config = tmp_path / "engine.yaml"
    config.write_text("model: llama-3.1-8b\ngpu: h100-sxm\nserved_model_name: sim\n")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def post(url: str, body: object, token: str | None) -> tuple[int, dict]:
        req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
        req.add_header("Content-Type", "application/json")
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with opener.open(req, timeout=10) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            return exc.code, {}

    with serving(engine_config=config, speed=10, admin_token_env="PERFKIT_LAB_ADMIN_TOKEN") as url:
        assert post(f"{url}/admin/pace", {"on": True}, None)[0] == 401
        assert post(f"{url}/admin/pace", {"on": True}, "wrong")[0] == 401
        assert post(f"{url}/admin/pace", {"on": "yes"}, TOKEN)[0] == 400
        status, body = post(f"{url}/admin/pace", {"on": True}, TOKEN)
        assert status == 200 and body["paced"] is True and body["virtual_s"] >= 0
        # a request on a paced engine is still served (the engine keeps up: admitted at once)
        t0 = time.monotonic()
        req = urllib.request.Request(
            f"{url}/v1/completions",
            data=json.dumps({"model": "sim", "prompt": "hi there", "max_tokens": 4}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with opener.open(req, timeout=10) as resp:
            assert resp.status == 200 and json.loads(resp.read())["usage"]["completion_tokens"] == 4
        assert time.monotonic() - t0 < 5.0
