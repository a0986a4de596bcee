"""One command-line grammar (issue 21, docs/cli.md): the same option means the same thing and is
checked the same way in every command."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from perfkit.app.cli.main import cli


@pytest.mark.parametrize(
    "args",
    [
        ["lab", "whatif", "--replay", "demo", "--set", "max_num_seqs=8"],
        ["lab", "serve"],
        ["drill", "start", "drill-01", "--live"],
        ["bench", "--url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "1", "-o", "r.json"],
    ],
)
def test_a_negative_seed_is_a_usage_error_everywhere(args, tmp_path, monkeypatch):
    """`--seed -1` was a traceback in bench, what-if, serve and drills (issue 22 C3)."""
    monkeypatch.chdir(tmp_path)
    res = CliRunner().invoke(cli, [*args, "--seed", "-1"])
    assert res.exit_code == 2, res.output
    assert "--seed" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "r.json").exists()


def _commands(group=cli, prefix=()):
    """Every leaf command of perfkit's tree, with its path ('baseline add', 'lab whatif' ...)."""
    import click

    for name, cmd in group.commands.items():
        if isinstance(cmd, click.Group):
            yield from _commands(cmd, (*prefix, name))
        else:
            yield " ".join((*prefix, name)), cmd


COMMANDS = dict(_commands())


def _options(cmd):
    import click

    return [p for p in cmd.params if isinstance(p, click.Option)]


def test_docs_cli_lists_every_command():
    from pathlib import Path

    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    listed = text.split("## Every command", 1)[1]
    assert [c for c in COMMANDS if f"`{c}`" not in listed and f"`{c.split()[-1]}`" not in listed] == []


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_each_command_follows_the_grammar(path):
    import click

    problems = []
    for opt in _options(COMMANDS[path]):
        names = set(opt.opts) | set(opt.secondary_opts)
        if "-o" in names and "--out" not in names:
            problems.append("-o without --out")
        if "--json" in names and not opt.hidden:
            problems.append("--json shown: the spelling is --format json")
        if "--format" in names and set(opt.type.choices) != {"table", "json"}:
            problems.append(f"--format {opt.type.choices}")
        if "--seed" in names and not (isinstance(opt.type, click.IntRange) and opt.type.min == 0):
            problems.append("--seed is not 0..2^63-1")
        if "--force" in names and path in ("gate", "compare"):
            problems.append("--force: accepting an invalid run is --allow-invalid")
        for n in names:
            if n.endswith("-env") and opt.is_flag:
                problems.append(f"{n} is a flag")
    assert problems == [], f"perfkit {path}: {problems}"


def test_accepting_an_invalid_run_is_one_option():
    for path in ("gate", "compare", "baseline add"):
        assert any("--allow-invalid" in o.opts for o in _options(COMMANDS[path])), path
