"""The README and docs/ as tests (issue 21): what they cite exists in the repository, every command
in the README's shell blocks is run by a test (here or the one named) or needs the reader's own
servers, and the figures the README prints are the ones the commands print.

The figures are read from the README's own text, so a README edited without re-running its
commands fails here, and so does a command whose output drifted from what the README promises.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import requests
from click.testing import CliRunner

from perfkit.app.cli.main import cli

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = {
    p.relative_to(REPO).as_posix(): p.read_text(encoding="utf-8")
    for p in sorted((REPO / "docs").glob("*.md"))
}
TOP = ("perfkit/", "docs/", "data/", "runbooks/", "templates/", "tests/", "benchmarks/", ".ci/")


def _cited_paths(text: str) -> set[str]:
    """Repository paths written in backticks: `perfkit/sources/bundle.py`, `docs/bundle.md` ..."""
    found = set()
    for token in re.findall(r"`([^`\s]+)`", text):
        token = token.rstrip(".,:;)")
        if token.startswith(TOP) and not re.search(r"[<>*{}\[\]|]|NN|\.\.\.", token):
            found.add(token.split("#")[0].split(":")[0])
    return found


@pytest.mark.parametrize("name", ["README.md", *DOCS])
def test_docs_cite_only_files_in_the_repository(name):
    text = README if name == "README.md" else DOCS[name]
    missing = sorted(p for p in _cited_paths(text) if not (REPO / p).exists())
    assert missing == [], f"{name} cites files that are not in the repository: {missing}"
    outside = re.findall(r"\.\./shared|DESIGN\.md|reference/[\w-]+\.md(?!`? \(grafana)", text)
    assert outside == [], f"{name} cites the team's own machines: {outside}"


def _shell_commands(text: str) -> list[str]:
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            for part in re.split(r";\s*|&&", line):
                part = part.strip().rstrip("&").strip()
                if part:
                    commands.append(re.sub(r"\s+", " ", part))
    return commands


#: Each README shell command, by its first words: the test that runs it, or why none here can.
COVERED = {
    "make demo": "tests/test_wheel.py (perfkit run inference_latency --bundle demo, as make demo does)",
    "make test": "CI itself (.ci/run calls make test-all)",
    "perfkit triage --prometheus http://prometheus:9090": "needs the reader's Prometheus; the same "
    "options on a real one: tests/integration/test_live_runbook.py",
    "perfkit run inference_latency --prometheus URL": "needs the reader's Prometheus; "
    "tests/integration/test_live_runbook.py runs the runbook live",
    "perfkit triage --prometheus URL --since 2h --scope": "needs the reader's Prometheus; scoped live "
    "triage: tests/integration/test_scope_live.py",
    "perfkit run training_step --bundle bundles/inc-7": "a reader's bundle; --scope on bundles: tests/triage/",
    "perfkit triage --bundle bundles/inc-9": "a reader's bundle; --scope/--hosts on bundles: tests/triage/",
    "perfkit capture --prometheus URL": "tests/integration/test_capture_lab.py",
    "perfkit lab up data/scenarios/release-regression": "tests/integration/test_capture_lab.py",
    "perfkit lab down": "tests/integration/test_capture_lab.py",
    "perfkit lab serve --port 8000 --ttft-ms": "the gate example: tests/loadgen/test_gate_cli.py",
    "perfkit bench --url http://127.0.0.1:8000 --model perfkit-lab --concurrency 16": "the gate example: "
    "tests/loadgen/test_gate_cli.py",
    "perfkit baseline add base.json": "tests/loadgen/test_gate_cli.py",
    "kill %1": "shell job control",
    "perfkit gate new.json": "tests/loadgen/test_gate_cli.py",
    "echo $?": "shell",
    "perfkit bench --url http://127.0.0.1:8000 --model perfkit-lab --replay": "tests/loadgen/test_bench.py",
    "export PERFKIT_LAB_ADMIN_TOKEN": "test_simulator_admin_example_as_written (here)",
    "perfkit lab serve --engine-config engine.yaml": "test_simulator_admin_example_as_written (here)",
    "perfkit bench --url http://127.0.0.1:8000 --model llama-3.1-8b": "tests/lab/test_servesim_server.py",
    'curl -H "Authorization: Bearer $PERFKIT_LAB_ADMIN_TOKEN"': "test_simulator_admin_example_as_written (here)",
    "perfkit lab whatif --replay data/scenarios/p95-prefill-interference": "test_whatif_figures (here)",
    "perfkit drill ": "tests/test_drills.py and tests/integration/test_live_drill.py",
    "perfkit run inference_latency -o out/drills/drill-NN/run": "tests/integration/test_live_drill.py",
    "perfkit compare --prometheus http://127.0.0.1:PORT": "tests/integration/test_live_drill.py",
}


def test_every_readme_command_is_run_by_a_test_or_needs_your_servers():
    unclaimed = [c for c in _shell_commands(README) if not any(c.startswith(k) for k in COVERED)]
    assert unclaimed == [], f"README commands no test runs (add one, or say why in COVERED): {unclaimed}"
    for where in COVERED.values():
        for path in re.findall(r"tests/[\w/]+\.py", where):
            assert (REPO / path).is_file(), f"COVERED names {path}, which is not there"


def _invoke(*args: str):
    res = CliRunner().invoke(cli, list(args))
    assert res.exit_code in (0, 1), res.output
    return res


def _seconds(text: str) -> float:
    value, unit = re.fullmatch(r"([\d.]+) ?(ms|s)", text.strip()).groups()
    return float(value) / (1000 if unit == "ms" else 1)


def test_compare_figures():
    """README: release-regression vs rolled-back 'worked (ITL p95 181 → 94 ms)'; the §5.3 case vs
    its chunked-prefill run 'mixed: TTFT p95 4.25 → 1.32 s, but ITL p95 91 → 148 ms'."""
    said = re.search(r"says `(\w+)`\s+\(ITL p95 (\d+) → (\d+) ms\)", README)
    said2 = re.search(r"says `(\w+)`: TTFT p95 ([\d.]+) →\s+([\d.]+) s, but ITL p95 (\d+) → (\d+) ms", README)
    assert said and said2, "the README's compare figures moved: update this test's reading of them"
    for (before, after), verdict, figures in (
        (
            ("release-regression", "release-regression-rolled-back"),
            said.group(1),
            {"itl_p95": said.groups()[1:]},
        ),
        (
            ("p95-prefill-interference", "p95-prefill-interference-chunked"),
            said2.group(1),
            {"ttft_p95": said2.groups()[1:3], "itl_p95": said2.groups()[3:]},
        ),
    ):
        res = _invoke("compare", before, after, "--format", "json")
        doc = json.loads(res.output)
        assert doc["verdict"] == verdict
        metrics = {m["metric"]: m for m in doc["metrics"]}
        for metric, (b, a) in figures.items():
            scale = 1000 if metric == "itl_p95" else 1
            digits = 0 if scale == 1000 else 2
            assert round(metrics[metric]["before"] * scale, digits) == float(b), metric
            assert round(metrics[metric]["after"] * scale, digits) == float(a), metric


def test_scaling_figures():
    said = re.search(
        r"32 → 64 GPUs give ([\d.]+)x \(efficiency\s+([\d.]+)\).*?\((\d+) % → (\d+) % of the step\)",
        README,
        re.S,
    )
    assert said, "the README's scaling figures moved"
    doc = json.loads(_invoke("scaling", "allreduce-scaling-64gpu", "--format", "json").output)
    assert f"{doc['speedup']:.2f}" == said.group(1) and f"{doc['efficiency']:.2f}" == said.group(2)
    assert f"({said.group(3)}% -> {said.group(4)}% of the step)" in doc["headline"]


def test_whatif_figures():
    said = re.search(
        r"replay's TTFT p95 is ([\d.]+) s with the recorded config, ([\d.]+) s with chunked prefill alone.*?"
        r"and ([\d.]+) s with a\s+512-token",
        README,
        re.S,
    )
    assert said, "the README's what-if figures moved"
    block = re.search(r"```bash\n(perfkit lab whatif .*?)```", README, re.S).group(1)
    args = block.replace("\\\n", " ").split()[1:]
    args = args[: args.index("--plot")] if "--plot" in args else args
    doc = json.loads(_invoke(*args, "--format", "json").output)
    rows = {
        (c["set"]["enable_chunked_prefill"], c["set"]["long_prefill_token_threshold"]): c
        for c in doc["configs"]
    }
    for key, want in (((False, 0), said.group(1)), ((True, 0), said.group(2)), ((True, 512), said.group(3))):
        assert f"{rows[key]['ttft_p95_ms'] / 1000:.2f}" == want, (key, rows[key]["ttft_p95_ms"])


def test_simulator_admin_example_as_written(tmp_path):
    """The README's admin calls work in the shell they are typed in: the token is exported, so the
    server and curl read the same variable (it was set for the server only: curl got 401)."""
    from perfkit.lab.servers import free_port

    block = re.search(r"```bash\n(export PERFKIT_LAB_ADMIN_TOKEN=.*?)```", README, re.S).group(1)
    assert block.startswith("export ") and "--admin-token-env" not in block.split("\n")[1]
    yaml_text = re.search(r"```yaml\n(# engine\.yaml.*?)```", README, re.S).group(1)
    (tmp_path / "engine.yaml").write_text(yaml_text)
    import subprocess
    import sys
    import time

    port = free_port()
    env = {**os.environ, "PERFKIT_LAB_ADMIN_TOKEN": "t0ken-for-the-readme-test"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "perfkit", "lab", "serve", "--engine-config", str(tmp_path / "engine.yaml"),
         "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if requests.get(url + "/health", timeout=1).ok:
                    break
            except requests.ConnectionError:
                time.sleep(0.1)
        headers = {"Authorization": f"Bearer {env['PERFKIT_LAB_ADMIN_TOKEN']}"}
        for line in re.findall(
            r"curl (.*?)\s+(http://127\.0\.0\.1:8000/admin/\w+)", block.replace("\\\n", " ")
        ):
            body = re.search(r"-d '(.*?)'", line[0]).group(1)
            r = requests.post(line[1].replace(":8000", f":{port}"), data=body, headers=headers, timeout=10)
            assert r.status_code == 200, (line[1], r.status_code, r.text)
        assert requests.post(url + "/admin/faults", data="{}", timeout=10).status_code == 401  # no token
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_batch_example_reads(tmp_path, monkeypatch):
    """The README's batch file: every item's bundle resolves and every parameter is the runbook's."""
    from perfkit.app.runner.batch import load_batch
    from perfkit.app.runner.run import check_run_parameters, find_runbook

    text = re.search(r"```yaml\n(# incidents\.yaml.*?)```", README, re.S).group(1)
    monkeypatch.chdir(REPO)  # the README's paths are relative to the checkout
    path = tmp_path / "incidents.yaml"
    path.write_text(text)
    items = load_batch(path)
    assert len(items) == 3
    for item in items:
        params = {**item.parameters, "bundle": item.bundle}
        checked = check_run_parameters(find_runbook(item.runbook), params, require_evidence=True)
        assert Path(checked["bundle"]).is_dir()


def test_embedded_names_work_wherever_a_bundle_is_taken():
    """Issue 21: `--replay demo` was refused by bench and what-if while `--bundle demo` worked."""
    from perfkit.app.runner.embedded import replay_source
    from perfkit.errors import ConfigError

    assert replay_source("demo").name == "p95-prefill-interference"
    assert replay_source(str(REPO / "data" / "scenarios" / "release-regression")).is_dir()
    with pytest.raises(ConfigError, match="nor an embedded incident"):
        replay_source("no-such-incident")
    doc = json.loads(_invoke("lab", "whatif", "--replay", "demo", "--set", "enable_chunked_prefill=true",
                             "--minutes", "2", "--no-calibration", "--format", "json").output)  # fmt: skip
    assert doc["configs"][0]["set"] == {"enable_chunked_prefill": True}
    res = CliRunner().invoke(
        cli, ["lab", "whatif", "--replay", "no-such-incident", "--set", "max_num_seqs=8"]
    )
    assert res.exit_code == 2 and "nor an embedded incident" in res.output
