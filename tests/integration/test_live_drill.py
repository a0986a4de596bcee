"""A live drill end to end, as a trainee works it: ``drill start --live`` (the simulator, a real
Prometheus, the load generator, the supervisor), the fault at its seeded minute, perfkit's triage on
the live Prometheus naming the drill's direction, ``drill fix``, the before/after comparison,
``drill check``, ``drill stop`` leaving no process behind, and a folder that names no answer.

The simulator runs at 30x (a 25-minute window in under a minute of wall time; the load generator's
replay is time-scaled by the same factor, so the virtual load is the drill's)."""

from __future__ import annotations

import json
import os
import stat
import time

import pytest
from click.testing import CliRunner
from live_drills import wait_for_virtual
from servers import require_binary
from test_drills import ID_OF, grep_folder, prometheus_serves_the_bundle, spoilers

from perfkit.app.cli.main import cli
from perfkit.app.drills import live as L
from perfkit.lab.servers import process_identity

SPEED = 30.0
SEED = 7


def invoke(*args: str):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def live_triage(params: dict) -> dict:
    """``perfkit triage`` on the live Prometheus with the runbook's own parameters."""
    res = invoke(
        "triage", "--prometheus", params["prometheus_url"], "--start", params["start"],
        "--end", params["end"], "--baseline-start", params["baseline_start"],
        "--baseline-end", params["baseline_end"], "--logs", params["logs"],
        "--release-metric", params["release_metric"], "--format", "json",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


@pytest.mark.integration
@pytest.mark.slow
def test_a_live_drill_from_start_to_stop(tmp_path):
    require_binary("prometheus")
    folder = tmp_path / "d"
    drill = ID_OF["decode-thermal-throttle"]
    res = invoke("drill", "start", drill, "--live", "-o", folder, "--speed", SPEED, "--seed", SEED)
    state: dict = {}
    try:
        assert res.exit_code == 0, res.output
        state = L.read_state(folder)
        print(f"\nfirst scrape {state['first_scrape_s']:.1f} s after drill start (target < 10 s)")
        print(
            f"speed {state['speed']:g}x (asked {SPEED:g}x; the clock kept {state['sustained']:g}x at start)"
        )
        assert state["first_scrape_s"] < 10.0
        # the speed is one the machine kept at start (a busy one gets less, and is told so); the
        # engine admits the load on its own clock (paced), so the drill's load holds even if not
        if state["speed"] < SPEED:
            assert state["speed_asked"] == SPEED and f"it runs at {state['speed']:g}x instead" in res.output
        if state["sustained"] < L.HOLD_MIN * state["speed"]:
            assert "warning: this machine keeps the drill clock at only" in res.output
        # deadlines from the pace the clock keeps: the window's end, and a loaded machine's slack
        pace = max(1.0, min(state["speed"], state["sustained"]))
        deadline = time.monotonic() + min(
            500.0, (state["plan"]["window"][1] - state["plan"]["v0"]) / pace * 1.5 + 30
        )
        assert "first scrape" in res.output and state["params"]["prometheus_url"] in res.output
        assert spoilers(res.output) == []
        for name in ("state.json", "admin-token"):
            assert stat.S_IMODE(os.stat(folder / ".live" / name).st_mode) == 0o600, name
        # every process is ours, on 127.0.0.1, and its command line names neither the answer nor the fault
        for key, rec in state["processes"].items():
            argv = " ".join(rec["cmdline"])
            assert spoilers(argv) == [] and state["fault"]["fault"] not in argv, (key, argv)
            assert process_identity(rec["pid"]) is not None, key
        for url in state["urls"].values():
            assert url.startswith("http://127.0.0.1:")

        # the admin endpoint refuses a wrong token and a missing one (real HTTP to the simulator)
        engine = state["urls"]["engine"]
        off = {"fault": "thermal", "on": False}
        assert L.http(f"{engine}/admin/faults", body=off, token="not-the-token")[0] == 401
        assert L.http(f"{engine}/admin/faults", body=off)[0] == 401
        assert L.http(f"{engine}/admin/config", body={"set": {"max_num_seqs": 8}}, token="x")[0] == 401

        # status before the fault: due, not named
        status = invoke("drill", "status", drill, "-o", folder)
        assert status.exit_code == 0 and "running" in status.output
        assert spoilers(status.output) == [] and "thermal" not in status.output

        plan = state["plan"]
        minute = (plan["fault_at"] - plan["window"][0]) / 60
        assert minute == int(minute) and 1 <= minute <= 4  # the seeded random minute, inside the window
        wait_for_virtual(state, plan["window"][1], deadline)
        sup = L.supervisor_facts(folder)
        assert sup["injected_v"] >= plan["fault_at"]  # injected at its minute (a tick late at most)
        assert sup["injected_v"] - plan["fault_at"] < 60.0
        assert "the incident began at" in invoke("drill", "status", drill, "-o", folder).output

        # the runbook's triage on the live Prometheus names the drill's direction
        found = live_triage(state["params"])
        top = found["directions"][0]
        print(f"live triage: rank 1 {top['id']} ({top['verdict']}): {top['verification']['why']}")
        assert (top["id"], top["verdict"]) == ("decode_efficiency", "confirmed")

        # a setting the engine does not have is refused, naming it; the remedy applies
        bad = CliRunner().invoke(cli, ["drill", "fix", drill, "-o", str(folder), "--set", "max_batch=4"])
        assert bad.exit_code == 2 and "max_batch" in bad.output
        # the load generator is lost (a trainee's slow triage outlived it, a killed process): status
        # says so, and the fix replays the drill's traffic through its after window
        from perfkit.lab.servers import Spawned

        assert Spawned(**state["processes"]["load"]).stop(timeout_s=15.0) is True
        warned = invoke("drill", "status", drill, "-o", folder)
        assert "warning: the drill's load has stopped" in warned.output
        fixed = invoke("drill", "fix", drill, "-o", folder, "--remedy", "drain")
        assert fixed.exit_code == 0, fixed.output
        assert "the drill's load had stopped: it is replayed from the fix until" in fixed.output
        state = L.read_state(folder)
        assert state["fixes"][-1]["remedies"] == ["drain"]
        assert state["load_until_v"] >= state["fixes"][-1]["v"] + 60 + 480
        assert "warning: the drill's load" not in invoke("drill", "status", drill, "-o", folder).output
        compare = next(line.strip() for line in fixed.output.splitlines() if "perfkit compare" in line)
        after = min(300.0, (60 + 480 + 30) / pace * 1.5 + 30)
        wait_for_virtual(state, state["fixes"][-1]["v"] + 60 + 480, time.monotonic() + after)
        verdict = invoke(*compare.split()[1:])
        print(verdict.output.splitlines()[0])
        assert verdict.exit_code == 0, verdict.output  # the fix worked
        assert "TPOT p50" in verdict.output.splitlines()[0]

        graded = CliRunner().invoke(
            cli, ["drill", "check", drill, "-o", str(folder), "--answer", "decode_efficiency"]
        )
        assert graded.exit_code == 0 and graded.output.startswith("CORRECT")
        assert "live: the simulator's thermal fault" in graded.output
        # the triage quoted is the live one (the same the trainee ran above), not the recorded bundle's
        assert (
            f"perfkit's triage on the live Prometheus ({state['params']['prometheus_url']}): rank 1"
            in graded.output
        )
        assert f"rank 1 {top['id']} ({top['verdict']})" in graded.output
    finally:
        stopped = invoke("drill", "stop", drill, "-o", folder)
    assert stopped.exit_code == 0, stopped.output
    for key, rec in state.get("processes", {}).items():
        assert process_identity(rec["pid"]) is None, f"{key} (pid {rec['pid']}) still runs"
    assert L.read_state(folder)["stopped"] is True
    assert (folder / "evidence" / "logs" / "vllm.log").stat().st_size > 0  # the evidence stays
    assert grep_folder(folder) == {}


@pytest.mark.integration
@pytest.mark.slow
@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_a_live_drill_on_another_engine_is_graded_right(tmp_path, engine):
    """The same live drill on a simulator that speaks SGLang's or trtllm-serve's names and log lines
    (issue 24): its triage on the live Prometheus reads that engine and names the drill's direction."""
    require_binary("prometheus")
    folder = tmp_path / engine
    drill = ID_OF["decode-thermal-throttle"]
    res = invoke(
        "drill", "start", drill, "--live", "--engine", engine, "-o", folder, "--speed", SPEED, "--seed", SEED
    )
    state: dict = {}
    try:
        assert res.exit_code == 0, res.output
        state = L.read_state(folder)
        pace = max(1.0, min(state["speed"], state["sustained"]))
        plan = state["plan"]
        wait_for_virtual(
            state,
            plan["window"][1],
            time.monotonic() + min(500.0, (plan["window"][1] - plan["v0"]) / pace * 1.5 + 30),
        )
        found = live_triage(state["params"])
        assert found["engine"]["name"] == engine
        top = found["directions"][0]
        assert (top["id"], top["verdict"]) == ("decode_efficiency", "confirmed"), top
        graded = CliRunner().invoke(
            cli, ["drill", "check", drill, "-o", str(folder), "--answer", "decode_efficiency"]
        )
        assert graded.exit_code == 0 and graded.output.startswith("CORRECT")
    finally:
        stopped = invoke("drill", "stop", drill, "-o", folder)
    assert stopped.exit_code == 0, stopped.output
    for key, rec in state.get("processes", {}).items():
        assert process_identity(rec["pid"]) is None, f"{key} (pid {rec['pid']}) still runs"


@pytest.mark.integration
def test_recorded_drill_serves_the_evidence_from_prometheus(tmp_path, monkeypatch):
    """The replay of the recorded evidence through a local Prometheus stays reachable (--recorded)."""
    require_binary("prometheus")
    require_binary("promtool")
    monkeypatch.setenv("PERFKIT_LAB_DIR", str(tmp_path / "lab"))
    drill = ID_OF["queueing-traffic-surge"]
    res = invoke("drill", "start", drill, "-o", tmp_path / "d", "--recorded")
    try:
        assert res.exit_code == 0, res.output
        nb = json.loads((tmp_path / "d" / "inference_latency.ipynb").read_text())
        cell = next(c for c in nb["cells"] if "injected-parameters" in c["metadata"]["tags"])
        text = "".join(cell["source"])
        assert 'prometheus_url = "http://127.0.0.1:' in text and 'bundle = ""' in text
        # what it serves at the window's end is the recorded evidence's (a dead URL fails here)
        for name in ("vllm:generation_tokens_total", "vllm:num_requests_running"):
            prometheus_serves_the_bundle(
                tmp_path / "d" / "inference_latency.ipynb", tmp_path / "d" / "evidence" / "metrics", name
            )
        assert not (tmp_path / "d" / ".live").exists()  # no simulator for a recorded drill
        assert grep_folder(tmp_path / "d") == {}
    finally:
        res = invoke("lab", "down")
    assert f"stopped prometheus-{drill}" in res.output


def test_live_and_recorded_exclude_each_other(tmp_path):
    res = CliRunner().invoke(
        cli, ["drill", "start", "drill-11", "--live", "--recorded", "-o", str(tmp_path / "x")]
    )
    assert res.exit_code == 2 and "choose one" in res.output
    res = CliRunner().invoke(cli, ["drill", "start", "drill-11", "--speed", "5", "-o", str(tmp_path / "x")])
    assert res.exit_code == 2 and "--live" in res.output
    assert not (tmp_path / "x").exists()


def test_live_is_refused_plainly_for_a_drill_without_a_live_form(tmp_path):
    res = CliRunner().invoke(
        cli, ["drill", "start", ID_OF["allreduce-scaling-64gpu"], "--live", "-o", str(tmp_path / "t")]
    )
    assert res.exit_code == 2
    assert "no live form" in res.output and "training" in res.output and "--recorded" in res.output
    assert not (tmp_path / "t").exists()
    res = CliRunner().invoke(
        cli, ["drill", "start", ID_OF["kv-pressure-shared-gpu"], "--live", "-o", str(tmp_path / "k")]
    )
    assert res.exit_code == 2 and "no live form" in res.output and spoilers(res.output) == []
    assert "prefix" not in res.output and "kv" not in res.output.lower()


def test_a_missing_prometheus_fails_before_anything_is_written(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))  # no prometheus on it
    for how in ("--live", "--recorded"):
        res = CliRunner().invoke(cli, ["drill", "start", "drill-11", how, "-o", str(tmp_path / "d")])
        assert res.exit_code == 2 and "prometheus is not installed" in res.output, res.output
        assert not (tmp_path / "d").exists()


def test_a_failed_live_start_keeps_its_files_aside_and_can_be_retried(tmp_path, monkeypatch):
    def broken(spec, timing, folder, state):
        (folder / ".live" / "engine.out").write_text("the simulator's last words\n")
        raise L.SourceError("http://127.0.0.1:1: the simulator exited with status 1")

    monkeypatch.setattr(L, "_launch", broken)
    monkeypatch.setattr("perfkit.lab.servers.binary", lambda engine: "/usr/bin/prometheus")  # not run here
    folder = tmp_path / "d"
    for attempt in (1, 2):
        res = CliRunner().invoke(cli, ["drill", "start", "drill-11", "--live", "-o", str(folder)])
        assert res.exit_code == 2 and "exited with status 1" in res.output, res.output
        assert not folder.exists()  # free for the next try, not "not empty"
        kept = sorted(tmp_path.glob("d.failed-*"))
        assert len(kept) == attempt  # each failure keeps its own files; none replaced
        assert f"the failed start's files are in {kept[-1]}" in res.output
        assert (kept[-1] / ".live" / "engine.out").read_text() == "the simulator's last words\n"


def test_fix_status_and_stop_need_a_live_drill(tmp_path):
    res = CliRunner().invoke(cli, ["drill", "status", "drill-11", "-o", str(tmp_path)])
    assert res.exit_code == 2 and "no live drill here" in res.output
    res = CliRunner().invoke(cli, ["drill", "fix", "drill-11", "-o", str(tmp_path), "--set", "a=b"])
    assert res.exit_code == 2 and "no live drill here" in res.output


def test_the_request_log_is_seeded_and_bounded():
    from perfkit.app.drills.live_specs import SPECS, request_log

    traffic = SPECS["decode-thermal-throttle"].traffic
    rows = request_log(traffic, 600.0, 3)
    assert rows == request_log(traffic, 600.0, 3) and rows != request_log(traffic, 600.0, 4)
    assert all(0 <= r["arrival_s"] <= 600.0 for r in rows)
    assert all(1 <= r["prompt_tokens"] <= traffic.prompt_max for r in rows)
    assert all(traffic.output_min <= r["output_tokens"] <= traffic.output_max for r in rows)
    rate = len(rows) / 600.0  # Poisson at 1.5/s: 900 +- 30 in 10 minutes
    assert abs(rate - traffic.rate) < 4 * (traffic.rate / 600.0) ** 0.5


def test_restamp_moves_log_stamps_only():
    line = "(APIServer pid=7) INFO 12-01 10:00:05 [loggers.py:123] Engine 000: Avg prompt throughput: 1.0"
    from perfkit.app.drills.live_clock import restamp

    assert restamp(line, -3605.0) == line.replace("12-01 10:00:05", "12-01 09:00:00")
    assert restamp("no stamp here", -60.0) == "no stamp here"
    sglang = "[2026-12-01 10:00:05 TP0] Decode batch, #running-req: 3, "  # SGLang's record (issue 24)
    assert restamp(sglang, -3605.0) == sglang.replace("10:00:05", "09:00:00")


def test_the_drill_clock_stays_behind_the_wall_clock():
    from perfkit.app.drills.live_specs import Timing

    t = Timing()
    assert L.offset_for(1.0, t) == 0.0
    for speed in (2.0, 5.0, 30.0, L.MAX_SPEED):
        wall = (t.duration + 600.0) / speed  # the drill's length and ten minutes, in wall seconds
        gained = wall * speed - wall  # what the virtual clock gains on the wall over it
        assert L.offset_for(speed, t) >= gained


def test_scrape_config_refuses_targets_off_this_host(tmp_path):
    from perfkit.errors import ConfigError
    from perfkit.lab.servers import scrape_config

    assert "127.0.0.1:9000" in scrape_config(["127.0.0.1:9000"], 0.5)
    for bad in ("10.0.0.1:9000", "example.com:80", "127.0.0.1", "127.0.0.1:0"):
        with pytest.raises(ConfigError, match="127.0.0.1:PORT"):
            scrape_config([bad], 1.0)
    with pytest.raises(ConfigError, match="scrape interval"):
        scrape_config(["127.0.0.1:9000"], 0.01)


@pytest.mark.slow  # ~10-35 s: in make test-all and CI, not make test
@pytest.mark.integration
def test_a_forgotten_drill_whose_folder_is_removed_stops_itself(tmp_path):
    """The supervisor stops the simulator, the load and Prometheus by PID once the drill's folder is
    gone (a test's tmp dir cleaned, a trainee's rm -rf), and exits: nothing keeps running unowned."""
    import shutil

    require_binary("prometheus")
    folder = tmp_path / "gone"
    started = L.start(ID_OF["decode-thermal-throttle"], folder, speed=SPEED, seed=1)
    procs = started.state["processes"]
    assert all(process_identity(rec["pid"]) is not None for rec in procs.values())
    shutil.rmtree(folder)
    deadline = time.monotonic() + 40.0
    alive = dict(procs)
    while alive and time.monotonic() < deadline:
        alive = {k: r for k, r in alive.items() if process_identity(r["pid"]) is not None}
        time.sleep(0.2)
    for key, rec in alive.items():  # not stopped by the supervisor: stop it here, by PID, and fail
        from perfkit.lab.servers import LabServer, Spawned

        (LabServer(**rec) if key == "prometheus" else Spawned(**rec)).stop()
    assert alive == {}, f"still running after the folder was removed: {sorted(alive)}"
