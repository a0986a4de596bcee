"""`perfkit batch` files are hostile input (issue 7): no code from data, names that stay inside
OUT, bounded YAML, honest rows."""

from __future__ import annotations

import base64
import socket
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from perfkit.app.cli.main import cli
from perfkit.app.runner.batch import load_batch
from perfkit.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
RR = REPO / "data" / "scenarios" / "release-regression"


def test_binary_tag_is_refused_with_file_and_line_and_nothing_runs(tmp_path):
    """Row 2: `service: !!binary <payload>` reached papermill as bytes, written unescaped: it ran."""
    pwned = tmp_path / "PWNED"
    payload = f'"+__import__("os").system("touch {pwned}")+"'.encode()
    f = tmp_path / "batch.yaml"
    f.write_text(
        f"- name: ok\n  bundle: {RR}\n"
        f"- name: evil\n  bundle: {RR}\n  parameters:\n"
        f"    service: !!binary {base64.b64encode(payload).decode()}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_batch(f)
    assert f"{f}:6" in str(err.value) and "bytes value is not allowed" in str(err.value)
    res = CliRunner().invoke(cli, ["batch", str(f), "-o", str(tmp_path / "out")])
    assert res.exit_code == 2 and "bytes value is not allowed" in res.output
    assert not pwned.exists() and not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", ["../../../x", "/tmp/elsewhere", "a/b", "..", ".hidden", "x" * 101, ""])
def test_names_are_one_safe_path_component(tmp_path, name):
    """Row 9: names such as ../../../x or an absolute path were written outside -o, reported ok."""
    f = tmp_path / "batch.yaml"
    f.write_text(f'- name: "{name}"\n  bundle: {RR}\n')
    if name == "":  # empty: the default (the bundle's folder name) is used
        assert load_batch(f)[0].name == "release-regression"
        return
    with pytest.raises(ConfigError, match="not a plain folder name"):
        load_batch(f)


def test_default_names_from_odd_bundle_folders_stay_inside(tmp_path):
    odd = tmp_path / "inc 1042 (copy)"
    odd.mkdir()
    f = tmp_path / "batch.yaml"
    f.write_text(f"- bundle: '{odd}'\n")
    assert load_batch(f)[0].name == "inc-1042-copy"


def test_nested_aliases_are_refused_in_under_a_second(tmp_path):
    """Row 11: a billion-laughs batch file grew to 1.5 GB with no message."""
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 10):
        prev = f"*a{i - 1}"
        lines.append(f"a{i}: &a{i} [{', '.join([prev] * 9)}]")
    f = tmp_path / "batch.yaml"
    f.write_text(
        "- name: x\n  bundle: " + str(RR) + "\n  parameters:\n" + "".join(f"    {x}\n" for x in lines)
    )
    t0 = time.monotonic()
    with pytest.raises(ConfigError):
        load_batch(f)
    assert time.monotonic() - t0 < 1.0


@pytest.mark.notebook
def test_a_batch_row_whose_metrics_source_fails_is_failed_with_the_reason(tmp_path):
    """Row 10: Prometheus unreachable gave 'ok' and exit 0 in batch."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    f = tmp_path / "batch.yaml"
    f.write_text(
        "- name: down\n  parameters:\n    bundle: ''\n"
        f"    prometheus_url: http://127.0.0.1:{port}\n    since: 1h\n    timeout_s: 1\n"
    )
    res = CliRunner().invoke(cli, ["batch", str(f), "-o", str(tmp_path / "out")])
    assert res.exit_code == 1, res.output
    assert "0 ok, 1 failed" in res.output and "no evidence" in res.output
    assert (tmp_path / "out" / "down" / "postmortem.md").exists()  # the record of what happened
