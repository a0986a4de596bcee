"""What every part of a live drill shares: the drill's state file (``.live/state.json``, 0600, written
through a fresh temporary file), the drill clock read from the engine, loopback-only HTTP with the
admin token, and starting the load generator. :mod:`perfkit.app.drills.live` starts and fixes a live
drill, :mod:`perfkit.app.drills.live_clock` supervises it, :mod:`perfkit.app.drills.recorded` lists
and checks drills; all three stand on this module, which imports none of them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import stat as stat_
import subprocess
import sys
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perfkit.app.drills.live_specs import state_problem
from perfkit.errors import ConfigError, SourceError

STATE_DIR = ".live"
TOKEN_ENV = "PERFKIT_DRILL_ADMIN_TOKEN"
DEFAULT_SPEED = 5.0
"""A 25-minute window in 5 wall minutes, the whole 90-minute drill in 18: time to think, and the
simulator and load generator far below a core."""
MAX_SPEED = 60.0
"""At 60x a 15 s scrape is every 0.25 s and the engine streams ~9,000 tokens per wall second: about
what one core runs for the simulator and the load generator together."""
FIRST_SCRAPE_S = 30.0
"""How long ``drill start`` waits for Prometheus to hold the engine's first sample before giving up
(the target is 10 s: this is the error path on a loaded machine)."""
STARTUP_S = 30.0  # the simulator's start: importing aiohttp and numpy takes 1-3 s on a busy laptop
_VIRTUAL = re.compile(r"^perfkit_lab_servesim_virtual_seconds ([0-9.eE+-]+)$", re.MULTILINE)
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
PROBE_S = 3.0
"""Wall seconds ``drill start`` watches the drill clock under the drill's load: a machine that runs
it slower than ``--speed`` (the simulator's clock held back) gets a lower speed it does sustain."""
HOLD_MIN = 0.9  # the share of --speed the clock must keep to count as held
MAX_STATE_BYTES = 4 << 20


# -- small shared pieces --------------------------------------------------------------------------


def _opener() -> urllib.request.OpenerDirector:
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy


def loopback_url(url: Any, what: str) -> str:
    """``url`` when it is ``http://`` on 127.0.0.1, ::1 or localhost, else ConfigError: a drill talks
    to its own local processes only, and its admin token goes nowhere else (a state file that
    names another host was edited)."""
    from urllib.parse import urlsplit

    host = None
    if isinstance(url, str):
        with contextlib.suppress(ValueError):
            parts = urlsplit(url)
            _ = parts.port  # a port that is no number: ValueError
            host = parts.hostname if parts.scheme == "http" and not parts.username else None
    if host not in LOOPBACK_HOSTS:
        shown = repr(url)[:80] if isinstance(url, str) else type(url).__name__
        raise ConfigError(
            f"{what} {shown}: not a loopback URL (http://127.0.0.1, [::1] or localhost); a live drill "
            "sends its admin token and its queries to its own local processes only"
        )
    return str(url).rstrip("/")


def http(url: str, *, body: Any = None, token: str = "", timeout: float = 5.0) -> tuple[int, str]:
    """(status, text) of a GET (or a JSON POST when ``body`` is given) to a local server (a
    loopback URL, :func:`loopback_url`, checked before anything is sent); SourceError naming the URL
    when it cannot be reached."""
    import urllib.error

    loopback_url(url, "refusing to send the admin token to" if token else "refusing to query")
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method="GET" if body is None else "POST")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with _opener().open(req, timeout=timeout) as resp:
            return resp.status, resp.read(4 << 20).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(64 << 10).decode(errors="replace")
    except OSError as exc:
        raise SourceError(f"{url}: cannot reach it ({exc})", url=url) from None


def virtual_now(engine_url: str) -> float:
    """The simulator's virtual seconds since it started (its ``/metrics`` gauge)."""
    status, text = http(f"{engine_url}/metrics")
    m = _VIRTUAL.search(text) if status == 200 else None
    if m is None:
        raise SourceError(f"{engine_url}/metrics: HTTP {status}, no virtual clock", url=engine_url)
    return float(m.group(1))


def instant_query(state: dict[str, Any], query: str, at_v: float, timeout: float = 5.0) -> list[Any] | None:
    """The result of PromQL ``query`` on the drill's Prometheus at virtual second ``at_v`` (the drill
    clock: samples are stamped ``anchor + v``); None when it answers with an error status or no result
    list."""
    import urllib.parse

    prom = loopback_url(state.get("urls", {}).get("prometheus"), "refusing to query")
    q = urllib.parse.urlencode({"query": query, "time": f"{float(state['anchor']) + at_v:.3f}"})
    status, text = http(f"{prom}/api/v1/query?{q}", timeout=timeout)
    if status != 200:
        return None
    try:
        result = json.loads(text)["data"]["result"]
    except (ValueError, KeyError, TypeError):
        return None
    return result if isinstance(result, list) else None


def scraped_through(state: dict[str, Any], v_now: float) -> float | None:
    """The virtual second of the newest sample Prometheus holds of the engine (the simulator's clock
    gauge as last scraped), asked at the drill clock's ``v_now``; None when it holds none in the hour
    before or cannot answer. On a busy machine Prometheus's scrapes (every 15 virtual seconds: half a
    wall second at 30x) fall behind the clock, and a window read before they catch up is judged on its
    first minutes only: its counters barely moved."""
    result = instant_query(state, "max(max_over_time(perfkit_lab_servesim_virtual_seconds[1h]))", v_now)
    with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
        v = float(result[0]["value"][1]) if result else math.nan
        return v if math.isfinite(v) else None
    return None


def stamp(state: dict[str, Any], v: float) -> datetime:
    """The drill-clock time of virtual second ``v``."""
    return datetime.fromtimestamp(state["anchor"] + v, UTC)


def iso_at(state: dict[str, Any], v: float) -> str:
    return stamp(state, v).strftime("%Y-%m-%dT%H:%M:%SZ")


def state_path(folder: Path) -> Path:
    return folder / STATE_DIR / "state.json"


def read_state(folder: Path) -> dict[str, Any]:
    """The live drill's state, or ConfigError (one line) when ``folder`` holds none or a malformed
    one (a state file is JSON anyone may edit: every field used is checked here)."""
    from perfkit.sources.safeio import RefusedFile, read_capped

    path = state_path(folder)
    try:
        text = read_capped(path, MAX_STATE_BYTES).decode("utf-8", errors="replace")
    except FileNotFoundError:
        raise ConfigError(not_live(folder)) from None
    except (RefusedFile, OSError) as exc:
        raise ConfigError(f"{path}: unreadable live-drill state ({exc})") from None
    try:
        state = json.loads(text)
    except ValueError:
        raise ConfigError(f"{path}: unreadable live-drill state (not JSON)") from None
    if not isinstance(state, dict):
        raise ConfigError(f"{path}: not a live-drill state (a JSON object)")
    problem = state_problem(state, MAX_SPEED)
    if problem:
        raise ConfigError(f"{path}: malformed live-drill state: {problem}; nothing done")
    return state


def write_private(live: Path, name: str, text: str) -> None:
    """``live/name`` replaced atomically: ``text`` goes to a new temporary file (a random name,
    ``O_EXCL | O_NOFOLLOW``, 0600: a link planted there is never followed, nothing is truncated)
    in ``live``, opened once as a real folder of this user and made 0700, then renamed over ``name``."""
    try:
        dfd = os.open(live, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        raise ConfigError(f"{live}: not a folder of this drill ({exc.strerror}); nothing written") from None
    try:
        st = os.fstat(dfd)
        if st.st_uid != os.getuid():
            raise ConfigError(f"{live}: owned by another user; nothing written")
        if stat_.S_IMODE(st.st_mode) != 0o700:
            os.fchmod(dfd, 0o700)  # private: only this user lists, creates or renames in it
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dfd)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, name, src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dfd)
            raise
    finally:
        os.close(dfd)


def write_state(folder: Path, state: dict[str, Any]) -> None:
    """Atomically, 0600, in the 0700 ``.live`` (it holds the fault and the ports): :func:`write_private`."""
    write_private(folder / STATE_DIR, "state.json", json.dumps(state, indent=1))


def supervisor_facts(folder: Path) -> dict[str, Any]:
    """What the supervisor recorded: the fault's injection (virtual second), its last clock reading."""
    try:
        data = json.loads((folder / STATE_DIR / "supervisor.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _spawn(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    with log.open("ab") as fh:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


# -- start ----------------------------------------------------------------------------------------


def _start_load(
    folder: Path, state: dict[str, Any], out: str, *, key: str = "load", length: float = 0.0
) -> None:
    """The load generator replaying ``.live/traffic.jsonl`` (``length`` virtual seconds of it) at the
    drill's speed, recorded as ``key``; ``load_until_v``: the virtual second its replay ends."""
    from perfkit.lab.servers import Spawned

    live, speed, url = folder.resolve() / STATE_DIR, float(state["speed"]), state["urls"]["engine"]
    state["load_until_v"] = virtual_now(url) + (length or float(state["life"]))
    load = _spawn(
        [sys.executable, "-m", "perfkit", "bench", f"--url={url}", f"--model={state['model']}",
         f"--replay={live / 'traffic.jsonl'}", f"--time-scale={speed:g}", "--no-calibrate", "--quiet",
         "--warmup=0", "--no-metrics", "--timeout=3600", f"--out={live / 'load' / out}"],
        live / "load.out",
    )  # fmt: skip
    state["processes"][key] = Spawned.of(key, load).as_dict()
    write_state(folder, state)


def _message(text: str) -> str:
    try:
        return str(json.loads(text)["error"]["message"])[:300]
    except (ValueError, KeyError, TypeError):
        return text[:300]


def not_live(folder: Path) -> str:
    """Why ``folder`` has no live drill: none at all, or a drill started without ``--live`` (its
    label read back from the incident id, ``INC-<date>-<label>``)."""
    import re

    from perfkit.sources.safeyaml import YamlError, load_yaml

    try:
        data = load_yaml(folder / "evidence" / "incident.yaml")
    except (OSError, YamlError):
        return f"{folder}: no live drill here (perfkit drill start DRILL --live)"
    m = re.fullmatch(
        r"INC-\d{8}-([A-Za-z0-9_-]{1,80})", str(data.get("id", "")) if isinstance(data, dict) else ""
    )
    label = m.group(1) if m else "DRILL"
    return (
        f"{folder}: a drill started without --live (its recorded evidence; no simulator runs): drill "
        f"fix, status and stop are for live drills. Work it with the runbook in the folder, grade it "
        f"with perfkit drill check {label} -o {folder} --answer DIRECTION; a --recorded drill's "
        f"Prometheus stops with perfkit lab down prometheus-{label}"
    )
