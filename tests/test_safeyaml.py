"""perfkit.sources.safeyaml: YAML from outside is parsed safely and within bounds, and refusals name file and line."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from pathlib import Path

import pytest
import yaml

from perfkit.errors import BundleError, ConfigError
from perfkit.sources.incident_file import read_incident
from perfkit.sources.releases import read_release_file

SCENARIOS = Path(__file__).resolve().parents[1] / "data" / "scenarios"
MAX_NODES = (
    1_000_000  # perfkit.sources.safeyaml.MAX_NODES (imported per test: the readers' tests run without it)
)


def laughs(levels: int = 9, refs: int = 9, key: str = "lol") -> str:
    """The classic "billion laughs": each level a list of ``refs`` aliases to the level before."""
    lines = [f"a0: &a0 [{', '.join(['lol'] * refs)}]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * refs)}]")
    lines.append(f"{key}: *a{levels - 1}")
    return "\n".join(lines) + "\n"


def expanded_scalars(data: object, cap: int) -> int:
    """How many scalars walking ``data`` visits (shared references walked again), stopping past ``cap``."""
    count, stack = 0, [data]
    while stack and count <= cap:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        else:
            count += 1
    return count


def test_max_nodes_here_is_the_module_cap():
    from perfkit.sources.safeyaml import MAX_NODES as cap

    assert cap == MAX_NODES


def test_the_bomb_is_real_with_plain_safe_load():
    """What the cap protects from: safe_load builds the bomb at once (shared lists), and anything
    that walks the result (json.dumps, papermill parameters) sees 9^9 strings."""
    data = yaml.safe_load(laughs())
    assert expanded_scalars(data, MAX_NODES) > MAX_NODES


def test_billion_laughs_is_refused_fast_with_file_and_line(tmp_path):
    from perfkit.sources.safeyaml import YamlError, load_yaml

    path = tmp_path / "batch.yaml"
    path.write_text(laughs())
    t = time.perf_counter()
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    assert time.perf_counter() - t < 1.0
    message = str(info.value)
    assert message.startswith(f"{path}:")
    assert "aliases are expanded" in message
    line = info.value.line
    assert isinstance(info.value, YamlError) and line is not None
    # the line named is where the document passes the cap: one of the alias lines
    assert path.read_text().splitlines()[line - 1].startswith(f"a{line - 1}: &a{line - 1} [*a")


def test_wide_alias_fan_out_is_refused():
    from perfkit.sources.safeyaml import YamlError, loads_yaml

    text = "base: &b [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\nmany: [" + ", ".join(["*b"] * 200_000) + "]\n"
    t = time.perf_counter()
    with pytest.raises(YamlError, match="aliases are expanded") as info:
        loads_yaml(text, source="wide.yaml")
    assert info.value.line == 2
    assert time.perf_counter() - t < 5.0


def test_normal_documents_load_as_safe_load_does(tmp_path):
    from perfkit.sources.safeyaml import load_yaml, loads_yaml

    for source in (
        SCENARIOS / "p95-prefill-interference" / "incident.yaml",
        *SCENARIOS.glob("*/answer.yaml"),
    ):
        assert load_yaml(source) == yaml.safe_load(source.read_text())
    # aliases and merge keys within the caps still work
    text = "base: &b {gpu: H100, count: 8}\nnode1: {<<: *b, count: 4}\nnodes: [*b, *b]\n"
    assert loads_yaml(text, source="x.yaml") == yaml.safe_load(text)
    (tmp_path / "empty.yaml").write_text("")
    assert load_yaml(tmp_path / "empty.yaml") is None
    # a small bomb under the cap is fine: 5 levels of 9 is 59,049 strings
    assert expanded_scalars(loads_yaml(laughs(levels=5))["lol"], MAX_NODES) == 9**5


def test_oversized_file_is_refused_without_reading_it(tmp_path):
    from perfkit.sources.safeyaml import load_yaml

    path = tmp_path / "huge.yaml"
    with path.open("wb") as fh:  # sparse: 1 GiB that would take seconds and gigabytes to read
        fh.truncate(2**30)
    t = time.perf_counter()
    with pytest.raises(ConfigError, match=r"over the 8 MiB limit") as info:
        load_yaml(path)
    assert str(info.value).startswith(f"{path}: ")
    assert time.perf_counter() - t < 1.0
    small = tmp_path / "small.yaml"
    small.write_text("a: " + "x" * 2000 + "\n")
    with pytest.raises(ConfigError, match="over the 1000 bytes limit"):
        load_yaml(small, max_bytes=1000)


def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path):
    from perfkit.sources.safeyaml import load_yaml, loads_yaml

    path = tmp_path / "deep.yaml"
    path.write_text("a:\n  b: " + "[" * 500 + "]" * 500 + "\n")
    with pytest.raises(ConfigError, match=r"nested deeper than 100 levels") as info:
        load_yaml(path)
    assert info.value.line == 2
    path.write_text("a:\n  b: " + "[" * 50_000 + "]" * 50_000 + "\n")
    with pytest.raises(ConfigError, match=rf"^{path}:2: "):
        load_yaml(path)
    assert loads_yaml("[" * 90 + "]" * 90) is not None


def test_recursive_alias_is_refused():
    from perfkit.sources.safeyaml import YamlError, loads_yaml

    with pytest.raises(YamlError, match="recursive"):
        loads_yaml("a: &a\n  b: *a\n", source="r.yaml")


def test_invalid_yaml_names_file_and_line(tmp_path):
    from perfkit.sources.safeyaml import load_yaml

    path = tmp_path / "bad.yaml"
    path.write_text("ok: 1\nlist: [1, 2\n")
    with pytest.raises(ConfigError) as info:
        load_yaml(path)
    assert str(info.value).startswith(f"{path}:3: invalid YAML (")
    path.write_bytes(b"a: 1\nb: \xff\xfe\n")
    with pytest.raises(ConfigError, match=r":2: not UTF-8"):
        load_yaml(path)


def test_fifo_and_device_are_refused_without_blocking(tmp_path):
    from perfkit.sources.safeyaml import load_yaml

    fifo = tmp_path / "fifo.yaml"
    os.mkfifo(fifo)
    # without the check, opening a FIFO blocks until a writer comes; this one comes after 5 s
    unblock = threading.Timer(5.0, _open_writer, args=(fifo,))
    unblock.start()
    try:
        t = time.perf_counter()
        with pytest.raises(ConfigError, match=r"not a regular file \(a FIFO\)"):
            load_yaml(fifo)
        assert time.perf_counter() - t < 1.0
    finally:
        unblock.cancel()
    zero = tmp_path / "zero.yaml"
    zero.symlink_to("/dev/zero")
    with pytest.raises(ConfigError, match=r"not a regular file \(a character device\)"):
        load_yaml(zero)
    with pytest.raises(FileNotFoundError):
        load_yaml(tmp_path / "missing.yaml")


def _open_writer(path: Path) -> None:
    with contextlib.suppress(OSError):  # no reader waiting: nobody to unblock
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))


def test_incident_yaml_bomb_is_a_bundle_error_with_the_line(tmp_path):
    path = tmp_path / "incident.yaml"
    incident = (SCENARIOS / "p95-prefill-interference" / "incident.yaml").read_text()
    path.write_text(incident + laughs(key="extra"))
    t = time.perf_counter()
    with pytest.raises(BundleError) as info:
        read_incident(path)
    assert time.perf_counter() - t < 1.0
    assert info.value.path == str(path) and info.value.line is not None
    assert "aliases are expanded" in str(info.value)
    path.write_text(incident)
    assert json.dumps(read_incident(path).as_dict(), default=str)  # a normal one still reads


def test_deploy_history_bomb_is_a_bundle_error(tmp_path):
    path = tmp_path / "deploys.yaml"
    bomb = laughs().replace("lol: *a8", "")
    path.write_text(bomb + "items:\n  - {ts: 2026-11-30T02:04:00Z, detail: *a8}\n")
    with pytest.raises(BundleError, match="aliases are expanded") as info:
        read_release_file(path)
    assert info.value.path == str(path) and info.value.line is not None


def test_pure_python_parser_has_the_same_caps(monkeypatch, tmp_path):
    """PyYAML built without libyaml: the pure-Python parser gets the same composer and caps."""
    import perfkit.sources.safeyaml as safeyaml

    monkeypatch.setattr(safeyaml, "_CParser", None)
    monkeypatch.setattr(safeyaml, "_LOADERS", {})
    with pytest.raises(safeyaml.YamlError, match="aliases are expanded"):
        safeyaml.loads_yaml(laughs())
    with pytest.raises(safeyaml.YamlError, match="nested deeper than 100 levels"):
        safeyaml.loads_yaml("[" * 50_000 + "]" * 50_000)
    source = SCENARIOS / "p95-prefill-interference" / "incident.yaml"
    assert safeyaml.load_yaml(source) == yaml.safe_load(source.read_text())
    assert "CParser" not in str(safeyaml._capped(yaml.SafeLoader, 10, 10).__mro__)


def test_deploy_history_that_is_a_device_is_refused_by_name(tmp_path):
    path = tmp_path / "deploys.yaml"
    path.symlink_to("/dev/zero")
    with pytest.raises(BundleError, match=r"refused: not a regular file \(a character device\)") as info:
        read_release_file(path)
    assert info.value.path == str(path)
