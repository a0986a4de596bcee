"""Runtime faults of the live simulator, switched by ``POST /admin/faults`` (see :mod:`.server`).

A body is ``{"fault": NAME, "on": true|false, PARAM: value, ...}``; ``on`` with no parameters takes
the defaults below. Each fault, what it does, and the triage row (perfkit/triage/rows.py) whose
direction it should confirm:

=====================  ===============================================  ===================================
fault (parameters)     effect                                           triage row -> direction
=====================  ===============================================  ===================================
``thermal``            decode (memory/clock-bound) time x               ``tpot_high`` -> decode_efficiency:
(decode_slowdown 1.6,  ``decode_slowdown``; DCGM SM clock x (1 -        TPOT/ITL up at the same load; DCGM
clock_drop 0.2)        ``clock_drop``), temperature at the slowdown     shows the clock drop
                       point, power down
``kv_pressure``        ``kv_reserved_frac`` of the KV blocks taken by   ``ttft_high_prefill_slow`` ->
(kv_reserved_frac      another tenant's memory: preemptions, KV usage   kv_cache_allocation (KV usage high,
0.5)                   near 1; DCGM FB_USED up by the tenant's bytes    preemptions recompute prompts)
``long_prompt_tenant`` the server adds requests of ``prompt_tokens``    ``tail_latency_divergence`` ->
(rate 0.5/s,           at ``rate`` per virtual second (Poisson), as a   prefill_decode_interference (P95
prompt_tokens 8192,    tenant behind the same engine: without chunked   TTFT and ITL stalls up, P50 near
max_tokens 16)         prefill their prefills stall every decode        its baseline); fix: chunked prefill
``deploy``             every step x ``step_slowdown``; the build        ``post_deploy_shift`` ->
(step_slowdown 1.3,    version becomes ``version`` (default: the        release_regression (a change point
version)               running one + ``+perfkit.N``); off rolls back    at the version change)
                       to the version and speed before it
``surge``              the server adds requests of ``prompt_tokens``/   ``latency_surge_under_load`` ->
(rate 5/s,             ``max_tokens`` at ``rate`` per virtual second    scheduler_queueing (queue time and
prompt_tokens 512,                                                      waiting requests up)
max_tokens 128)
``network_delay``      each streamed chunk leaves ``delay_ms`` (virtual none on the server: its histograms
(delay_ms 200)         ms) late, as behind a slow gateway; the          do not see it; the client's TTFT
                       server's own histograms do not see it            and the server's disagree
=====================  ===============================================  ===================================

Switching a fault on again replaces its parameters (a ``deploy`` on top of a deploy bumps the version
again; each ``off`` rolls back one). Parameters are checked against the bounds in :data:`FAULTS`; an
unknown fault or parameter, a wrong type or an out-of-range value is refused naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: fault -> parameter -> (default, low, high); high bounds are physical/sanity limits
FAULTS: dict[str, dict[str, tuple[float, float, float]]] = {
    # a throttled GPU rarely loses more than half its clock; 10x is far past any real slowdown
    "thermal": {"decode_slowdown": (1.6, 1.0, 10.0), "clock_drop": (0.2, 0.0, 0.9)},
    "kv_pressure": {"kv_reserved_frac": (0.5, 0.0, 0.95)},  # some blocks must stay for one sequence
    "long_prompt_tenant": {
        "rate": (0.5, 0.001, 100.0),
        "prompt_tokens": (8192, 1, 10_000_000),  # checked against max_model_len by the server
        "max_tokens": (16, 1, 16_384),
    },
    "deploy": {"step_slowdown": (1.3, 0.1, 10.0)},  # a release may also make steps faster (< 1)
    "surge": {
        "rate": (5.0, 0.001, 1000.0),
        "prompt_tokens": (512, 1, 10_000_000),
        "max_tokens": (128, 1, 16_384),
    },
    "network_delay": {"delay_ms": (200.0, 0.0, 60_000.0)},
}
INTEGER_PARAMS = frozenset({"prompt_tokens", "max_tokens"})
TRAFFIC = ("long_prompt_tenant", "surge")  # faults that add requests
MAX_VERSION_CHARS = 128


class FaultError(Exception):
    """A refused admin call: the HTTP status and a message naming the field."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class FaultBoard:
    """Which faults are on, with their parameters, and the build version a deploy changes."""

    base_version: str
    active: dict[str, dict[str, Any]] = field(default_factory=dict)
    deployed: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (version, params), newest last
    deploys: int = 0  # ever made: numbers the versions

    @property
    def version(self) -> str:
        return self.deployed[-1][0] if self.deployed else self.base_version

    def apply(self, body: Any) -> str:
        """Apply one admin body; returns the fault's name. :class:`FaultError` (400) when invalid."""
        if not isinstance(body, dict):
            raise FaultError(400, "the body must be a JSON object {fault: NAME, on: true|false, ...}")
        name = body.get("fault")
        if not isinstance(name, str) or name not in FAULTS:
            raise FaultError(400, f"fault: must be one of {', '.join(FAULTS)}; got {str(name)[:60]!r}")
        on = body.get("on", True)
        if not isinstance(on, bool):
            raise FaultError(400, "on: must be true or false")
        params = {k: v for k, v in body.items() if k not in ("fault", "on")}
        if not on:
            if params:
                raise FaultError(400, f"{sorted(params)[0]}: parameters are given with on=true only")
            self._off(name)
            return name
        self.active[name] = self._params(name, params)
        if name == "deploy":
            self.deploys += 1
            version = params.get("version") or f"{self.base_version.split('+')[0]}+perfkit.{self.deploys}"
            self.deployed.append((version, self.active[name]))
        return name

    def _params(self, name: str, given: dict[str, Any]) -> dict[str, Any]:
        spec = FAULTS[name]
        out: dict[str, Any] = {key: default for key, (default, _, _) in spec.items()}
        for key, value in given.items():
            if name == "deploy" and key == "version":
                if (
                    not isinstance(value, str)
                    or not 0 < len(value) <= MAX_VERSION_CHARS
                    or not value.isprintable()
                ):
                    raise FaultError(400, f"version: must be 1 to {MAX_VERSION_CHARS} printable characters")
                if '"' in value or "\\" in value:
                    raise FaultError(400, "version: must not contain quotes or backslashes")
                continue
            if key not in spec:
                known = ", ".join([*spec, *(["version"] if name == "deploy" else [])])
                raise FaultError(400, f"{key[:60]}: not a parameter of {name} (it takes {known})")
            _, low, high = spec[key]
            integer = key in INTEGER_PARAMS
            kinds = int if integer else int | float
            if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
                what = "an integer" if integer else "a number"
                raise FaultError(
                    400, f"{name}.{key}: must be {what} in [{low:g}, {high:g}]; got {value!r}"[:200]
                )
            out[key] = value
        return out

    def _off(self, name: str) -> None:
        if name == "deploy" and self.deployed:  # roll back one deploy
            self.deployed.pop()
            if self.deployed:  # the deploy before it is back, with its speed
                self.active[name] = self.deployed[-1][1]
                return
        self.active.pop(name, None)

    def get(self, name: str, key: str) -> Any:
        """A parameter of an active fault; ``None`` when the fault is off."""
        params = self.active.get(name)
        return None if params is None else params[key]

    def listing(self) -> dict[str, Any]:
        """``GET /admin/faults``: every fault, on or off, its parameters and the build version."""
        faults = {name: {"on": name in self.active, **self.active.get(name, {})} for name in FAULTS}
        return {
            "faults": faults,
            "version": self.version,
            "defaults": {n: {k: d for k, (d, _, _) in s.items()} for n, s in FAULTS.items()},
        }
