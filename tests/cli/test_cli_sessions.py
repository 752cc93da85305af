"""`contextlens sessions` on a home folder laid out as the runtimes lay out theirs: each
session with its runtime, project, times and request count, newest first; --runtime
filters; a runtime whose folder is absent is absent; a secret in a first prompt is masked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support.cli import run
from support.sessions import PLACE_VARIABLES, SECRET, fake_home, newest_first, use_home


def test_sessions_json_lists_every_session_newest_first(tmp_path: Path) -> None:
    home = tmp_path / "home"
    expected = fake_home(home, ("claude-code", "codex"))
    # as a user runs it: a process whose HOME is the fake one
    env = {k: v for k, v in os.environ.items() if k not in PLACE_VARIABLES}
    env["HOME"] = str(home)
    done = subprocess.run([sys.executable, "-m", "inspector.cli", "sessions", "--json"],
                          cwd=home, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert [(r["runtime"], r["path"], r["project"], r["started"], r["last_written"],
             r["size"], r["requests"]) for r in rows] == [
        (e.runtime, str(e.path), e.project, e.started.isoformat(), e.last_written.isoformat(),
         e.size, e.requests) for e in newest_first(expected)]
    assert all(r["first_prompt"] for r in rows)
    assert "gemini-cli" not in {r["runtime"] for r in rows}  # its folder is absent
    assert done.stderr == ""


def test_runtime_filters_and_the_table_names_each_session(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    expected = fake_home(home, ("codex", "gemini-cli"))
    use_home(monkeypatch, home)

    code, out, _ = run(capsys, "sessions", "--json", "--runtime", "gemini-cli")
    assert code == 0
    assert [(r["runtime"], r["requests"]) for r in json.loads(out)] == [
        ("gemini-cli", expected["gemini-cli"].requests)]

    code, out, _ = run(capsys, "sessions")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[:6] == ["last", "written", "(UTC)", "started", "(UTC)", "runtime"]
    gemini, codex = expected["gemini-cli"], expected["codex"]
    assert str(codex.path) in lines[1] and str(gemini.path) in lines[2]  # newest first
    assert lines[1].startswith(codex.last_written.strftime("%Y-%m-%d %H:%M:%S  ")
                               + codex.started.strftime("%Y-%m-%d %H:%M:%S"))
    assert f" {gemini.requests} " in lines[2] and gemini.project in lines[2]
    assert lines[-1].startswith("2 sessions")

    code, out, err = run(capsys, "sessions", "--runtime", "claude-code")
    assert code == 0 and err == ""
    assert out.startswith("no agent sessions found; looked in claude-code: ")
    assert str(home / ".claude" / "projects") in out


def test_a_secret_in_a_first_prompt_is_masked_unless_revealed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    fake_home(home, (), secret=True)
    use_home(monkeypatch, home)
    for argv in (("sessions",), ("sessions", "--json")):
        code, out, _ = run(capsys, *argv)
        assert code == 0 and "deploy with token" in out
        assert SECRET not in out and SECRET[:10] not in out
    code, out, _ = run(capsys, "sessions", "--json", "--reveal")
    assert SECRET in json.loads(out)[0]["first_prompt"]
