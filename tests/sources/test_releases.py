"""Release history from files, a real git repository built in the test, and an info metric."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import polars as pl
import pytest

from perfkit.core.frames import EVENTS_SCHEMA, Window
from perfkit.engine.local import LocalEngine
from perfkit.errors import BundleError, SourceError
from perfkit.sources.openmetrics import parse_text
from perfkit.sources.releases import git_releases, info_metric_releases, merge_releases, read_release_file

WINDOW = Window("2026-11-30T01:00:00Z", "2026-11-30T03:00:00Z")


def t(hh: int, mm: int, ss: int = 0) -> datetime:
    return datetime(2026, 11, 30, hh, mm, ss, tzinfo=UTC)


# -- files -----------------------------------------------------------------------------------------


def test_csv_is_events_csv(tmp_path):
    path = tmp_path / "events.csv"
    path.write_text(
        "ts,kind,service,version,detail\n"
        '2026-11-30T02:04:00Z,deploy,vllm-chat,v0.33.0,"rollout 3/3, canary skipped"\n'
        "1796000400,rollback,vllm-chat,v0.32.1,\n"
    )
    assert read_release_file(path).rows() == [
        (t(1, 0), "rollback", "vllm-chat", "v0.32.1", None),
        (t(2, 4), "deploy", "vllm-chat", "v0.33.0", "rollout 3/3, canary skipped"),
    ]
    path.write_text(
        "ts,kind,service,version,detail\n2026-11-30T02:04:00Z,deploy,a,b,c\nyesterday,deploy,a,b,c\n"
    )
    with pytest.raises(BundleError) as info:
        read_release_file(path)
    assert info.value.path == str(path) and info.value.line == 3
    assert f"{path}:3: unparseable ts 'yesterday'" in str(info.value)


def test_json_list(tmp_path):
    path = tmp_path / "releases.json"
    path.write_text(
        """[
  {"ts": "2026-11-30T02:04:00Z", "kind": "deploy", "service": "vllm-chat", "version": "v0.33.0",
   "detail": "rollout <b>3/3</b>"},
  {"ts": 1796000400, "service": "vllm-chat", "version": 1.10},
  {"ts": "2026-11-30T02:30:00+01:00", "kind": "CONFIG", "detail": "max_num_seqs 256 -> 512"}
]"""
    )
    frame = read_release_file(path)
    assert frame.schema == pl.Schema(EVENTS_SCHEMA)
    assert frame.rows() == [
        (t(1, 0), "deploy", "vllm-chat", "1.10", None),  # kind defaults to deploy; 1.10 kept as written
        (t(1, 30), "config", None, None, "max_num_seqs 256 -> 512"),
        (t(2, 4), "deploy", "vllm-chat", "v0.33.0", "rollout <b>3/3</b>"),
    ]


def test_yaml_list_keeps_versions_and_times_as_written(tmp_path):
    path = tmp_path / "releases.yaml"
    path.write_text(
        "# deploy log\n"
        "- ts: 2026-11-30T02:04:00Z\n"
        "  service: vllm-chat\n"
        "  version: 1.10\n"
        "  detail: rollout 3/3\n"
        "- {ts: 2026-11-30 01:15:00, kind: scale, service: vllm-chat, version: ~, detail: 4 -> 8 replicas}\n"
        "- ts: '1796000400'\n"
        "  kind: note\n"
        "  version: 2026.11\n"
        "  detail: yes\n"
    )
    assert read_release_file(path).rows() == [
        (t(1, 0), "note", None, "2026.11", "yes"),
        (t(1, 15), "scale", "vllm-chat", None, "4 -> 8 replicas"),  # naive time is UTC
        (t(2, 4), "deploy", "vllm-chat", "1.10", "rollout 3/3"),
    ]
    empty = tmp_path / "empty.yml"
    empty.write_text("# nothing yet\n")
    assert read_release_file(empty).height == 0


@pytest.mark.parametrize(
    ("name", "text", "message", "line"),
    [
        ("a.json", '[{"ts": "2026-11-30T02:04:00Z"},\n {"ts": }]', "invalid JSON: Expecting value", 2),
        ("b.json", '{"ts": "2026-11-30T02:04:00Z"}', "want a list of release objects, found dict", None),
        ("c.json", '[{"ts": "2026-11-30T02:04:00Z"}, {"kind": "deploy"}]', "item 2: no ts", None),
        ("d.json", '[{"ts": "tomorrow"}]', "item 1: unparseable ts 'tomorrow'", None),
        ("e.json", '[{"ts": true}]', "item 1: unparseable ts True", None),
        (
            "f.json",
            '[{"ts": "2026-11-30T02:04:00Z", "kind": "launch"}]',
            "item 1: unknown kind 'launch'",
            None,
        ),
        (
            "g.json",
            '[{"ts": "2026-11-30T02:04:00Z", "verison": "v1"}]',
            "item 1: unknown key(s) verison",
            None,
        ),
        (
            "h.json",
            '[{"ts": "2026-11-30T02:04:00Z", "version": ["v1"]}]',
            "item 1: version must be text",
            None,
        ),
        ("i.json", '["2026-11-30T02:04:00Z"]', "item 1: want an object", None),
        ("j.yaml", "- ts: 2026-11-30T02:04:00Z\n  version: [v1\n", "invalid YAML", 3),
        ("k.yaml", "- ts: 2026-11-30T02:04:00Z\n- kind: deploy\n", "item 2: no ts", None),
        ("l.toml", "", "unknown release file type '.toml'", None),
    ],
)
def test_bad_files_name_the_file(tmp_path, name, text, message, line):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(BundleError) as info:
        read_release_file(path)
    assert info.value.path == str(path)
    assert message in str(info.value)
    assert info.value.line == line


def test_missing_file(tmp_path):
    with pytest.raises(BundleError, match="no such release file"):
        read_release_file(tmp_path / "releases.yaml")


# -- git -------------------------------------------------------------------------------------------

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="needs git")


def git(repo: Path, *args: str, when: str | None = None) -> str:
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(repo.parent),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Release Bot",
        "GIT_AUTHOR_EMAIL": "bot@example.invalid",
        "GIT_COMMITTER_NAME": "Release Bot",
        "GIT_COMMITTER_EMAIL": "bot@example.invalid",
    }
    if when:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = when
    done = subprocess.run(
        ["git", "-C", str(repo), *args], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path):
    """A repository whose commits and tags have known dates around WINDOW (01:00-03:00Z)."""
    path = tmp_path / "service"
    path.mkdir()
    git(path, "init", "-q", "-b", "main")
    git(path, "commit", "-q", "--allow-empty", "-m", "initial import", when="2026-11-29T12:00:00Z")
    git(path, "tag", "-a", "v0.9.0", "-m", "first release", when="2026-11-29T12:05:00Z")  # before the window
    # committed at 02:30 in UTC+1 = 01:30Z
    git(
        path,
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "raise max_num_seqs to 512",
        "-m",
        "body",
        when="2026-11-30T02:30:00+01:00",
    )
    git(
        path,
        "tag",
        "-a",
        "v1.0.0",
        "-m",
        "release v1.0.0: chunked prefill on",
        "-m",
        "notes",
        when="2026-11-30T01:45:00Z",
    )
    git(path, "commit", "-q", "--allow-empty", "-m", "fix tokenizer cache", when="2026-11-30T02:10:00Z")
    git(path, "tag", "v1.0.1")  # lightweight: dated by its commit
    git(path, "tag", "old-light", "HEAD~2")  # lightweight on the 2026-11-29 commit: outside
    # annotated tag made inside the window on an old commit: dated by the tagger
    git(path, "tag", "-a", "hotfix-redeploy", "HEAD~2", "-m", "redeploy v0.9.0", when="2026-11-30T02:40:00Z")
    git(path, "commit", "-q", "--allow-empty", "-m", "later work", when="2026-11-30T04:00:00Z")
    git(path, "tag", "-a", "v1.1.0", "-m", "release v1.1.0", when="2026-11-30T04:05:00Z")  # after the window
    return path


@needs_git
def test_git_tags_in_window(repo):
    assert git_releases(repo, WINDOW, service="vllm-chat").rows() == [
        (t(1, 45), "deploy", "vllm-chat", "v1.0.0", "release v1.0.0: chunked prefill on"),
        (t(2, 10), "deploy", "vllm-chat", "v1.0.1", "fix tokenizer cache"),
        (t(2, 40), "deploy", "vllm-chat", "hotfix-redeploy", "redeploy v0.9.0"),
    ]


@needs_git
def test_git_commits_in_window(repo):
    c2, c3 = git(repo, "rev-parse", "--short", "HEAD~2"), git(repo, "rev-parse", "--short", "HEAD~1")
    frame = git_releases(repo, WINDOW, include_commits=True)
    assert frame.rows() == [
        (t(1, 30), "note", None, c2, "raise max_num_seqs to 512"),
        (t(1, 45), "deploy", None, "v1.0.0", "release v1.0.0: chunked prefill on"),
        (t(2, 10), "deploy", None, "v1.0.1", "fix tokenizer cache"),
        (t(2, 10), "note", None, c3, "fix tokenizer cache"),
        (t(2, 40), "deploy", None, "hotfix-redeploy", "redeploy v0.9.0"),
    ]
    # the window is closed: a commit exactly at its end counts
    edge = git_releases(repo, Window("2026-11-30T02:00:00Z", "2026-11-30T02:10:00Z"), include_commits=True)
    assert edge["version"].to_list() == ["v1.0.1", c3]


@needs_git
def test_git_empty_repository(tmp_path):
    path = tmp_path / "empty"
    path.mkdir()
    git(path, "init", "-q")
    assert git_releases(path, WINDOW, include_commits=True).height == 0


@needs_git
def test_git_errors(tmp_path):
    with pytest.raises(SourceError, match="no such directory"):
        git_releases(tmp_path / "nope", WINDOW)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(SourceError, match=r"plain: not a git repository \(fatal: not a git repository"):
        git_releases(plain, WINDOW)


def test_git_not_installed(tmp_path):
    def runner(*args, **kwargs):
        raise FileNotFoundError("git")

    with pytest.raises(SourceError, match="git is not installed"):
        git_releases(tmp_path, WINDOW, runner=runner)


def test_git_commands_use_utc_and_strict_iso(tmp_path):
    calls = []

    def runner(cmd, **kwargs):
        calls.append((cmd, kwargs["env"]["TZ"]))
        return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")

    git_releases(tmp_path, WINDOW, runner=runner, include_commits=True)
    log = next(cmd for cmd, _ in calls if "log" in cmd)
    assert "--since=2026-11-30T01:00:00+00:00" in log and "--until=2026-11-30T03:00:00+00:00" in log
    refs = next(cmd for cmd, _ in calls if "for-each-ref" in cmd)
    assert "%(taggerdate:iso-strict)" in next(a for a in refs if a.startswith("--format="))
    assert {tz for _, tz in calls} == {"UTC"}


# -- info metric -----------------------------------------------------------------------------------

B = 1_796_000_400  # 2026-11-30T01:00:00Z


def build_info_text() -> str:
    lines = ["# TYPE build_info gauge"]
    for k in range(0, 121):  # every 15 s from 00:55 to 01:25
        ts = B - 300 + 15 * k
        version = "v1" if ts <= B + 600 else "v2"  # v1 until 01:10:00, v2 from 01:10:15
        lines.append(f'build_info{{job="vllm",version="{version}"}} 1 {ts}')
    lines.append("# TYPE other_info gauge")
    for k in range(0, 40):  # appears inside the window (01:05), never changes
        lines.append(f'other_info{{version="x1"}} 1 {B + 300 + 15 * k}')
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


def test_info_metric_change_is_a_deploy():
    engine = LocalEngine(parse_text(build_info_text(), require_eof=True))
    window = Window(t(1, 0), t(1, 30))
    frame = info_metric_releases(engine, "build_info", "version", window, step_s=60, service="vllm-chat")
    # v2's first sample is at 01:10:15: the first 60 s step that sees it is 01:11:00
    assert frame.rows() == [(t(1, 11), "deploy", "vllm-chat", "v2", "version v1 -> v2 (build_info)")]
    # with 15 s steps the change is seen at the sample itself
    fine = info_metric_releases(engine, "build_info", "version", window, step_s=15)
    assert fine["ts"].to_list() == [t(1, 10, 15)]


def test_info_metric_first_appearance_and_absence_give_nothing():
    engine = LocalEngine(parse_text(build_info_text(), require_eof=True))
    window = Window(t(1, 0), t(1, 30))
    assert info_metric_releases(engine, "other_info", "version", window).height == 0
    assert info_metric_releases(engine, "build_info", "no_such_label", window).height == 0
    assert info_metric_releases(engine, "missing_info", "version", window).height == 0
    # a window that ends before v2 sees no change
    assert info_metric_releases(engine, "build_info", "version", Window(t(1, 0), t(1, 10))).height == 0


def _engine(series: dict[str, Callable[[int], str | None]]) -> LocalEngine:
    """build_info samples every 15 s from 01:00 to 01:30; each series gives its version (or None) at ts."""
    lines = ["# TYPE build_info gauge"]
    for k in range(0, 121):
        ts = B + 15 * k
        for pod, version_at in series.items():
            version = version_at(ts)
            if version:
                lines.append(f'build_info{{pod="{pod}",version="{version}"}} 1 {ts}')
    return LocalEngine(parse_text("\n".join([*lines, "# EOF"]) + "\n", require_eof=True))


def test_info_metric_rollback():
    # v1 until 01:05, v2 01:05-01:15, v1 again from 01:15
    engine = _engine({"a": lambda ts: "v2" if B + 300 <= ts < B + 900 else "v1"})
    frame = info_metric_releases(engine, "build_info", "version", Window(t(1, 0), t(1, 30)), step_s=60)
    assert frame.select("ts", "version", "detail").rows() == [
        (t(1, 5), "v2", "version v1 -> v2 (build_info)"),
        # v1's last sample (01:04:45) is out of the 5 min lookback from 01:10 on, so the rollback
        # at 01:15 brings v1 back as a new value
        (t(1, 15), "v1", "version v2 -> v1 (build_info)"),
    ]


def test_info_metric_rolling_update():
    # pod a moves to v2 at 01:05; pod b stays on v1 until it stops at 01:10 (lookback keeps v1 to 01:14:45)
    engine = _engine(
        {
            "a": lambda ts: "v2" if ts >= B + 300 else "v1",
            "b": lambda ts: "v1" if ts < B + 600 else None,
        }
    )
    frame = info_metric_releases(engine, "build_info", "version", Window(t(1, 0), t(1, 30)), step_s=60)
    # one row when v2 appears; v1 disappearing is not a deploy
    assert frame.select("ts", "version").rows() == [(t(1, 5), "v2")]


# -- merge -----------------------------------------------------------------------------------------


def test_merge_sorts_and_deduplicates():
    file_rows = pl.DataFrame(
        {
            "ts": [t(2, 10), t(1, 45)],
            "kind": ["deploy", "deploy"],
            "service": ["vllm-chat", "vllm-chat"],
            "version": ["v1.0.1", "v1.0.0"],
            "detail": ["from the deploy log", "from the deploy log"],
        },
        schema=EVENTS_SCHEMA,
    )
    git_rows = pl.DataFrame(
        {
            "ts": [t(1, 45), t(2, 10), t(2, 10)],
            "kind": ["deploy", "note", "deploy"],
            "service": [None, None, None],
            "version": ["v1.0.0", "abc1234", "v1.0.2"],
            "detail": ["tag", "commit", "tag"],
        },
        schema=EVENTS_SCHEMA,
    )
    merged = merge_releases(file_rows, git_rows, pl.DataFrame(schema=EVENTS_SCHEMA))
    assert merged.rows() == [
        (t(1, 45), "deploy", "vllm-chat", "v1.0.0", "from the deploy log"),  # first frame wins
        (t(2, 10), "deploy", "vllm-chat", "v1.0.1", "from the deploy log"),
        (t(2, 10), "note", None, "abc1234", "commit"),
        (t(2, 10), "deploy", None, "v1.0.2", "tag"),  # same time, other version: kept
    ]
    assert merge_releases().schema == pl.Schema(EVENTS_SCHEMA)
