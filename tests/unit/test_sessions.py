"""Finding the agent sessions on this machine (ingest.sessions, readmodel.local_sessions):
each runtime's own layout and variables, newest first, subagents inside their session,
bounded reading, unreadable files skipped with a note, secrets in a first prompt masked."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ingest import sessions as discovery
from ingest.sessions import find_sessions
from readmodel import local_sessions
from support.sessions import (
    REALDATA, SECRET, claude_secret_session, fake_home, newest_first, require_realdata,
)


def test_each_runtime_is_found_in_its_own_layout_newest_first(tmp_path: Path) -> None:
    home = tmp_path / "home"
    expected = fake_home(home)
    found = find_sessions(env={"HOME": str(home)}, cwd=home)

    assert [(s.runtime, s.path) for s in found.sessions] == [
        (e.runtime, e.path) for e in newest_first(expected)]
    for s, e in zip(found.sessions, newest_first(expected)):
        assert (s.project, s.started, s.last_written, s.size, s.requests) == (
            e.project, e.started, e.last_written, e.size, e.requests), s.runtime
    # a subagent's transcript is part of its session, never a session of its own
    assert not any("subagents" in s.path.parts for s in found.sessions)
    assert found.notes == ()
    present = {p.runtime for p in found.places if p.present}
    assert present == {"claude-code", "codex", "gemini-cli"}


def test_the_runtimes_variables_move_their_places(tmp_path: Path) -> None:
    moved = tmp_path / "moved"
    expected = fake_home(moved)
    # each runtime's sessions moved where its own variable says, the home folder empty
    (moved / ".claude").rename(tmp_path / "claude-config")
    (moved / ".codex").rename(tmp_path / "codex-home")
    (tmp_path / "gemini-home").mkdir()
    (moved / ".gemini").rename(tmp_path / "gemini-home" / ".gemini")
    home = tmp_path / "home"
    home.mkdir()
    assert find_sessions(env={"HOME": str(home)}, cwd=home).sessions == ()

    env = {"HOME": str(home), "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config"),
           "CODEX_HOME": str(tmp_path / "codex-home"),
           "GEMINI_CLI_HOME": str(tmp_path / "gemini-home")}
    found = find_sessions(env=env, cwd=home)
    assert [(s.runtime, s.requests) for s in found.sessions] == [
        (e.runtime, e.requests) for e in newest_first(expected)]

    only = find_sessions("codex", env=env, cwd=home)
    assert [s.runtime for s in only.sessions] == ["codex"]
    assert {p.runtime for p in only.places} == {"codex"}


def test_inspect_logs_and_the_last_mini_swe_agent_run(tmp_path: Path) -> None:
    require_realdata()
    home = tmp_path / "home"
    logs = home / "logs" / "run1"  # inspect_ai's default log dir, ./logs, listed recursively
    logs.mkdir(parents=True)
    log = REALDATA / "inspect-ai" / "2025-05-12T20-27-36-04-00_browser.json"
    shutil.copy2(log, logs / log.name)
    (logs / "notes.json").write_text("{}")  # not a log's name: not listed
    mini = tmp_path / "mini"
    mini.mkdir()
    shutil.copy2(REALDATA / "mini-swe-agent" / "astropy__astropy-12907.traj.json",
                 mini / "last_mini_run.traj.json")

    found = find_sessions(env={"HOME": str(home), "MSWEA_GLOBAL_CONFIG_DIR": str(mini)}, cwd=home)
    rows = {s.runtime: s for s in found.sessions}
    assert set(rows) == {"inspect-ai", "openai-chat"}
    assert rows["inspect-ai"].path == logs / log.name
    assert rows["inspect-ai"].requests == log.read_text().count('"event": "model"')
    assert rows["inspect-ai"].started.isoformat() == "2025-05-13T00:27:36+00:00"  # -04:00
    assert rows["openai-chat"].requests == 20  # its assistant messages, one per model call


def test_a_large_session_is_listed_from_its_head_without_a_count(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    expected = fake_home(home, ("claude-code",))["claude-code"]
    monkeypatch.setattr(discovery, "COUNT_BYTES", 64 << 10)  # the session is larger
    monkeypatch.setattr(discovery, "HEAD_BYTES", 16 << 10)
    (row,) = find_sessions(env={"HOME": str(home)}, cwd=home).sessions
    assert row.requests is None  # counting it would mean reading all of it
    assert (row.project, row.started, row.size) == (expected.project, expected.started, expected.size)
    assert row.first_prompt


def test_an_unreadable_file_is_skipped_with_a_note(tmp_path: Path) -> None:
    home = tmp_path / "home"
    fake_home(home, ("gemini-cli",))
    project = home / ".claude" / "projects" / "-tmp-x"
    project.mkdir(parents=True)
    (project / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    (project / "not-json.jsonl").write_bytes(b"\x00\xff not a transcript\n")
    os.mkfifo(project / "pipe.jsonl")  # opening it would block: never a session

    found = find_sessions(env={"HOME": str(home)}, cwd=home)
    assert [s.runtime for s in found.sessions] == ["claude-code", "gemini-cli"]
    assert found.sessions[0].path.name == "not-json.jsonl"  # listed, nothing read from it
    assert found.sessions[0].requests == 0 and found.sessions[0].first_prompt is None
    assert len(found.notes) == 1 and "gone.jsonl" in found.notes[0]


def test_a_secret_in_a_first_prompt_is_masked_unless_revealed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    claude_secret_session(home / ".claude" / "projects" / "-home-someone-deploy")
    where = {"env": {"HOME": str(home)}, "cwd": home}
    (row,) = local_sessions(**where).rows
    assert SECRET not in row.first_prompt and SECRET[:10] not in row.first_prompt
    assert row.first_prompt.startswith("deploy with token ")
    (shown,) = local_sessions(reveal=True, **where).rows
    assert SECRET in shown.first_prompt


def test_a_first_prompt_is_one_safe_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = claude_secret_session(home / ".claude" / "projects" / "-p")
    text = path.read_text().replace(f"deploy with token {SECRET} to prod",
                                    "line one\\n\\u001b[31mred\\u001b[0m " + "x" * 200)
    path.write_text(text)
    (row,) = local_sessions(env={"HOME": str(home)}, cwd=home).rows
    assert "\n" not in row.first_prompt and "\x1b" not in row.first_prompt
    assert row.first_prompt.startswith("line one \\x1b[31mred")
    assert len(row.first_prompt) <= 80 and row.first_prompt.endswith("…")


def test_a_slash_command_is_not_taken_for_the_first_prompt(tmp_path: Path) -> None:
    """Claude Code records /exit and its output as user lines of markup: the first prompt is
    what the user typed next (a real session that began with /exit)."""
    session = REALDATA / "claude-code-entire" / "198393f2-compact-midsession.jsonl"
    require_realdata()
    folder = tmp_path / "home" / ".claude" / "projects" / "-p"
    folder.mkdir(parents=True)
    shutil.copyfile(session, folder / "198393f2-0000-0000-0000-000000000000.jsonl")
    (row,) = find_sessions(env={"HOME": str(tmp_path / "home")}, cwd=tmp_path).sessions
    assert row.first_prompt.startswith("for the change in cmd/entire/cli/hooks_claudecode")
