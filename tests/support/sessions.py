"""A home folder laid out as the agent runtimes lay out theirs, filled with copies of the
real sessions in ../shared/realdata, and what each session holds, counted here from the
file itself (not by the code under test)."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
CLAUDE = REALDATA / "claude-code-spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
CODEX = REALDATA / "codex-localpush" / "rollout-2026-02-23T12-54-34-019c8a59-e9dd-71f0-9ae3-4079fe9726a9.jsonl"
GEMINI = REALDATA / "gemini-cli-entire" / "f7633853-session.json"
# a value the secret detector masks (tests/support/secrets.py holds the same kind)
SECRET = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"
GEMINI_PROJECT = "/home/someone/colors"
# every variable that moves a runtime's place: unset, so only HOME decides
PLACE_VARIABLES = ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME", "INSPECT_LOG_DIR",
                   "MSWEA_GLOBAL_CONFIG_DIR", "XDG_CONFIG_HOME")
BASE_TIME = 1_760_000_000  # 2025-10-09: the sessions' modification times count up from it


@dataclass(frozen=True)
class Session:
    runtime: str
    path: Path
    project: str
    started: dt.datetime
    last_written: dt.datetime
    size: int
    requests: int


def require_realdata() -> None:
    if not REALDATA.is_dir():
        pytest.skip(f"the development data is absent ({REALDATA})")


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _ts(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(dt.timezone.utc)


def _claude_requests(path: Path) -> int:
    """Model requests of one Claude Code transcript: its API responses (one response is
    written as several assistant lines sharing requestId), the client's own lines aside."""
    ids = {d.get("requestId") or d["message"].get("id") for d in _lines(path)
           if d.get("type") == "assistant" and d["message"].get("model") != "<synthetic>"}
    return len(ids)


def _codex_requests(path: Path) -> int:
    """Model responses of a Codex rollout: token_count events whose running total moved
    (Codex repeats the last count after tool outputs)."""
    totals, last = 0, None
    for d in _lines(path):
        p = d.get("payload") or {}
        if d.get("type") == "event_msg" and p.get("type") == "token_count" and p.get("info"):
            total = json.dumps(p["info"]["total_token_usage"], sort_keys=True)
            if total != last and p["info"]["last_token_usage"]["input_tokens"]:
                totals += 1
            last = total
    return totals


def _touch(path: Path, seconds: int) -> dt.datetime:
    os.utime(path, (BASE_TIME + seconds, BASE_TIME + seconds))
    return dt.datetime.fromtimestamp(BASE_TIME + seconds, tz=dt.timezone.utc)


def claude_secret_session(folder: Path) -> Path:
    """A short Claude Code session whose first prompt holds a token."""
    session = "5ec2e7a1-0000-4000-8000-000000000001"
    common = {"cwd": "/home/someone/deploy", "sessionId": session, "version": "2.1.39",
              "isSidechain": False, "userType": "external"}
    lines = [
        {**common, "type": "user", "uuid": "u1", "parentUuid": None,
         "timestamp": "2026-03-01T10:00:00.000Z",
         "message": {"role": "user", "content": f"deploy with token {SECRET} to prod"}},
        {**common, "type": "assistant", "uuid": "a1", "parentUuid": "u1",
         "timestamp": "2026-03-01T10:00:02.000Z", "requestId": "req_1",
         "message": {"id": "msg_1", "role": "assistant", "model": "claude-sonnet-4-5",
                     "content": [{"type": "text", "text": "Deploying."}],
                     "usage": {"input_tokens": 10, "output_tokens": 3}}},
    ]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{session}.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    return path


def fake_home(home: Path, runtimes: tuple[str, ...] = ("claude-code", "codex", "gemini-cli"),
              secret: bool = False) -> dict[str, Session]:
    """``home`` with the sessions of ``runtimes`` where each runtime writes them (and, with
    ``secret``, a Claude Code session whose first prompt holds a token), by runtime (the
    secret one as "secret"). Newest first: Claude Code, Codex, Gemini CLI, the secret one."""
    if runtimes:
        require_realdata()
    out: dict[str, Session] = {}
    if "claude-code" in runtimes:
        project = home / ".claude" / "projects" / "-home-USER-projects-spotter-worktrees-spotter-gqc"
        project.mkdir(parents=True)
        main = Path(shutil.copy2(CLAUDE, project / CLAUDE.name))
        agents = Path(shutil.copytree(CLAUDE.with_suffix(""), project / CLAUDE.stem)) / "subagents"
        files = [main, *sorted(agents.glob("agent-*.jsonl"))]
        for f in files[1:]:
            _touch(f, 10)  # written before the session's last line
        lines = _lines(main)
        cwds = {d["cwd"] for d in lines if "cwd" in d}
        assert len(cwds) == 1
        out["claude-code"] = Session(
            "claude-code", main, cwds.pop(),
            next(_ts(d["timestamp"]) for d in lines if "timestamp" in d), _touch(main, 300),
            sum(f.stat().st_size for f in files), sum(_claude_requests(f) for f in files))
    if "codex" in runtimes:
        day = home / ".codex" / "sessions" / "2026" / "02" / "23"
        day.mkdir(parents=True)
        path = Path(shutil.copy2(CODEX, day / CODEX.name))
        meta = next(d["payload"] for d in _lines(path) if d["type"] == "session_meta")
        out["codex"] = Session("codex", path, meta["cwd"], _ts(meta["timestamp"]),
                               _touch(path, 200), path.stat().st_size, _codex_requests(path))
    if "gemini-cli" in runtimes:
        folder = home / ".gemini" / "tmp" / "colors"
        (folder / "chats").mkdir(parents=True)
        # the ownership marker Gemini CLI writes beside a project's chats
        (folder / ".project_root").write_text(GEMINI_PROJECT, encoding="utf-8")
        path = Path(shutil.copy2(GEMINI, folder / "chats" / "session-2026-01-15T20-51-f7633853.json"))
        doc = json.loads(path.read_text(encoding="utf-8"))
        out["gemini-cli"] = Session(
            "gemini-cli", path, GEMINI_PROJECT, _ts(doc["startTime"]), _touch(path, 100),
            path.stat().st_size, sum(1 for m in doc["messages"] if m["type"] == "gemini"))
    if secret:
        path = claude_secret_session(home / ".claude" / "projects" / "-home-someone-deploy")
        out["secret"] = Session("claude-code", path, "/home/someone/deploy",
                                _ts("2026-03-01T10:00:00Z"), _touch(path, 50),
                                path.stat().st_size, 1)
    return out


def newest_first(sessions: dict[str, Session]) -> list[Session]:
    return sorted(sessions.values(), key=lambda s: s.last_written, reverse=True)


def use_home(monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
    """This process sees ``home`` as its home folder and current folder, and no variable
    that would move a runtime's place."""
    monkeypatch.setenv("HOME", str(home))
    for name in PLACE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(home)
