"""The agent sessions on this machine, found where each runtime writes them (headless).

``contextlens sessions`` and the app's Sessions screen list what :func:`find_sessions`
finds. Each runtime we read that has a standard place is looked for there, by the rule of
its own source or documentation (cited beside each locator below), honouring the
variables that move it:

| runtime (format) | where |
|---|---|
| ``claude-code`` | ``$CLAUDE_CONFIG_DIR/projects/<project>/<session>.jsonl`` (else ``~/.claude``); a session's subagent transcripts belong to it and are not listed |
| ``codex`` | ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`` (else ``~/.codex``), the flat ``sessions/rollout-*.jsonl`` of the first Rust CLIs, and the TypeScript CLI's ``~/.codex/sessions/rollout-*.json`` |
| ``gemini-cli`` | ``$GEMINI_CLI_HOME/.gemini/tmp/<project>/chats/session-*.json[l]`` (else the home folder) |
| ``inspect-ai`` | ``$INSPECT_LOG_DIR`` (else ``./logs``, from the current folder), as inspect_ai lists its logs |
| ``openai-chat`` | mini-swe-agent's last run, ``last_mini_run.traj.json`` in ``$MSWEA_GLOBAL_CONFIG_DIR`` (else its user config folder) |

A runtime whose place is absent is simply not listed; a file that cannot be read is
skipped with a note. Reading is bounded: a session whose files together hold at most
``COUNT_BYTES`` is read whole, and only then are its model requests counted (that is what
"cheap" means here: lines are picked by a byte test and only those are parsed, never an
adapt); of a larger one only the first ``HEAD_BYTES`` are read, for its project, start and
first prompt, and its request count is None. Rows hold the log's own text (the first
prompt's head, the project folder): the read model masks and cuts them
(``readmodel/sessions.py``).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from .adapters.claude_code import session_of
from .adapters.common import blocks_text, parse_ts
from .errors import ContextlensError

__all__ = ["COUNT_BYTES", "HEAD_BYTES", "RUNTIMES", "Discovery", "Place", "SessionFile",
           "find_sessions"]

# A session whose files together hold at most this many bytes is read whole and its
# requests counted; of a larger one only the head is read.
COUNT_BYTES = 4 << 20
HEAD_BYTES = 1 << 20
# of the first user prompt, at most this many characters are kept (a row shows ~80)
PROMPT_CHARS = 1000
# a small side file (Gemini CLI's .project_root, projects.json) is read up to this size
SIDE_FILE_BYTES = 1 << 20

# the runtimes listed, by the adapter format that reads their sessions, in listing order
RUNTIMES = ("claude-code", "codex", "gemini-cli", "inspect-ai", "openai-chat")
UTC = dt.timezone.utc


@dataclass(frozen=True)
class SessionFile:
    """One session found: ``path`` is what ``contextlens open`` takes. ``size`` and
    ``last_written`` cover its companion files too (a Claude Code session's subagent
    transcripts); ``first_prompt`` is the head of the log's own text (not masked);
    ``requests`` is None when counting was not cheap."""

    runtime: str
    path: Path
    project: str | None
    first_prompt: str | None
    started: dt.datetime | None
    last_written: dt.datetime
    size: int
    requests: int | None


@dataclass(frozen=True)
class Place:
    """A place a runtime's sessions are looked for, and whether it is there."""

    runtime: str
    path: Path
    present: bool


@dataclass(frozen=True)
class Discovery:
    """Every session found, newest first (by last written), the places looked in, and a
    note for each file skipped."""

    sessions: tuple[SessionFile, ...]
    places: tuple[Place, ...]
    notes: tuple[str, ...]


@dataclass
class _Facts:
    project: str | None = None
    started: dt.datetime | None = None
    prompt: str | None = None
    requests: int | None = None


@dataclass
class _Found:
    """A session file a locator found, before it is read."""

    runtime: str
    path: Path
    read: Callable[[list[tuple[Path, bytes, bool]]], _Facts]
    companions: list[Path] = field(default_factory=list)
    project: str | None = None  # known from the place (Gemini CLI's project folder)


class _Where:
    """The environment the places are worked out from (the real one unless a test or a
    caller says otherwise)."""

    def __init__(self, env: Mapping[str, str] | None, home: Path | None, cwd: Path | None) -> None:
        self.env = os.environ if env is None else env
        self.home = Path(home) if home is not None else Path(self.env.get("HOME") or Path.home())
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()
        self.notes: list[str] = []

    def var(self, name: str) -> str | None:
        value = self.env.get(name)
        return value if value else None  # set but empty counts as unset, as the runtimes do


# ----------------------------------------------------------------------------- reading


def _lines(data: bytes, whole: bool) -> Iterator[bytes]:
    """The non-blank lines of ``data``, found as they are asked for (the first few are
    usually all that is wanted); when ``data`` is a head, not its last (cut) line."""
    start, size = 0, len(data)
    while start < size:
        end = data.find(b"\n", start)
        if end < 0:
            if not whole:
                return
            end = size
        raw = data[start:end]
        start = end + 1
        if raw.strip():
            yield raw


def _lines_with(data: bytes, needle: bytes) -> Iterator[bytes]:
    """The lines of ``data`` (read whole) that hold ``needle``: found by a byte search, so
    a line without it costs nothing (most lines of a session are not the ones counted)."""
    at = data.find(needle)
    while at >= 0:
        start = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        yield data[start:end]
        at = data.find(needle, end)


def _loads(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def _prompt(text: Any) -> str | None:
    text = text.strip() if isinstance(text, str) else ""
    return text[:PROMPT_CHARS] or None


def _string(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _dicts(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON list (nothing, when it is not a list)."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


# ----------------------------------------------------------------------------- Claude Code


def _claude_prompt(line: dict[str, Any]) -> str | None:
    """The user's own text of a ``user`` line: not a hook's or the CLI's meta line, not a
    compaction summary, not tool results."""
    msg = line.get("message")
    if line.get("isMeta") or line.get("isCompactSummary") or not isinstance(msg, dict):
        return None
    content = msg.get("content")
    if isinstance(content, list) and content and all(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content):
        return None
    text = blocks_text(content)
    if text.lstrip().startswith(_CLI_MARKUP):
        return None  # the CLI's record of a slash command (/exit, /clear) or of its output
    return _prompt(text)


# What Claude Code writes as a user line for a slash command and its local output, not text
# the user typed as a prompt.
_CLI_MARKUP = ("<command-name>", "<command-message>", "<local-command-stdout>",
               "<local-command-stderr>", "<command-args>")


def _claude_facts(files: list[tuple[Path, bytes, bool]]) -> _Facts:
    """Project (the ``cwd`` the lines carry), start (the first timestamp), first prompt, and
    the requests as the adapter makes them (ingest/adapters/claude_code.py): per file, the
    distinct ``requestId`` (else ``message.id``) of the assistant lines that are not the
    client's own (``<synthetic>``, API errors), a line repeated by a resume counted once."""
    facts = _Facts()
    _, head, complete = files[0]
    for raw in _lines(head, complete):
        d = _loads(raw)
        if not isinstance(d, dict):
            continue
        facts.project = facts.project or _string(d.get("cwd"))
        facts.started = facts.started or parse_ts(d.get("timestamp"))
        if facts.prompt is None and d.get("type") == "user":
            facts.prompt = _claude_prompt(d)
        if facts.project and facts.started and facts.prompt:
            break
    if not all(w for _, _, w in files):
        return facts
    seen: set[str] = set()  # a line repeated (a resumed session) is read once
    total = 0
    for _, data, _ in files:
        keys: set[str] = set()
        for raw in _lines_with(data, b'"assistant"'):
            d = _loads(raw)
            msg = d.get("message") if isinstance(d, dict) else None
            if not isinstance(msg, dict) or d.get("type") != "assistant":
                continue
            uuid = d.get("uuid")
            if isinstance(uuid, str):
                if uuid in seen:
                    continue
                seen.add(uuid)
            if msg.get("model") == "<synthetic>" or d.get("isApiErrorMessage"):
                continue
            keys.add(str(d.get("requestId") or msg.get("id") or uuid or raw))
        total += len(keys)
    facts.requests = total
    return facts




def _claude_code(where: _Where) -> tuple[list[Place], list[_Found]]:
    # Claude Code's documentation ("Explore the .claude directory", code.claude.com/docs/
    # en/claude-directory): everything under ~/.claude moves under $CLAUDE_CONFIG_DIR when
    # it is set; transcripts are projects/<project>/<session id>.jsonl. Subagent
    # transcripts are <session id>/subagents/agent-<id>.jsonl (2.1), or agent-<id>.jsonl
    # beside the sessions naming their sessionId (2.0): both belong to their session, as
    # the adapter reads them (ingest/adapters/claude_code.py, _subagent_files).
    config = where.var("CLAUDE_CONFIG_DIR")
    root = (Path(config) if config else where.home / ".claude") / "projects"
    place = Place("claude-code", root, root.is_dir())
    found: list[_Found] = []
    for project in _folders(root, where):
        files = _files(project, "*.jsonl", where)
        agents = [p for p in files if p.name.startswith("agent-")]
        by_session: dict[str, list[Path]] = {}
        for agent in agents:
            sid = session_of(agent)
            if sid:
                by_session.setdefault(sid, []).append(agent)
        for path in files:
            if path.name.startswith("agent-"):
                continue
            folder = path.parent / path.stem / "subagents"
            companions = _files(folder, "agent-*.jsonl", where) if folder.is_dir() else []
            companions += by_session.get(path.stem, [])
            found.append(_Found("claude-code", path, _claude_facts, companions))
    return [place], found


# ----------------------------------------------------------------------------- Codex CLI


def _codex_usage_key(payload: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
    info = payload.get("info")
    if isinstance(info, dict):
        last, total = info.get("last_token_usage"), info.get("total_token_usage")
        key = json.dumps(total, sort_keys=True) if isinstance(total, dict) else None
        return key, last if isinstance(last, dict) else None
    if "input_tokens" in payload:  # older rollouts: the usage itself, no running total
        return None, payload
    return None, None


def _codex_facts(files: list[tuple[Path, bytes, bool]]) -> _Facts:
    """Project (``session_meta.cwd``), start, first user turn, and the requests as the
    adapter counts recorded ones (ingest/adapters/codex.py): each ``token_count`` whose
    running total moved and whose input is not 0. None when the rollout has no
    token_count at all (an older CLI: its responses are not counted cheaply)."""
    from .adapters.codex import is_context_message, is_legacy_meta

    _, data, whole = files[0]
    facts = _Facts()
    for raw in _lines(data, whole):
        if facts.prompt is not None and facts.started is not None:
            break
        d = _loads(raw)
        if not isinstance(d, dict):
            continue
        kind, p = d.get("type"), d.get("payload")
        p = p if isinstance(p, dict) else {}
        if kind == "session_meta":
            facts.project = facts.project or _string(p.get("cwd"))
            facts.started = facts.started or parse_ts(p.get("timestamp"))
        elif is_legacy_meta(d):
            facts.started = facts.started or parse_ts(d.get("timestamp"))
        facts.started = facts.started or parse_ts(d.get("timestamp"))
        item = p if kind == "response_item" else d if "payload" not in d else {}
        if (facts.prompt is None and item.get("type") == "message" and item.get("role") == "user"
                and not is_context_message(item)):
            facts.prompt = _prompt(blocks_text(item.get("content")))
        if kind == "event_msg" and p.get("type") == "user_message" and facts.prompt is None:
            facts.prompt = _prompt(p.get("message"))
    if not whole:
        return facts
    count, seen_count = 0, False
    last_key: str | None = None
    last_usage: str | None = None
    for raw in _lines_with(data, b'"token_count"'):
        d = _loads(raw)
        p = d.get("payload") if isinstance(d, dict) else None
        if isinstance(p, dict) and d.get("type") == "event_msg" and p.get("type") == "token_count":
            key, last = _codex_usage_key(p)
            if last is None:
                continue
            seen_count = True
            if key is None:
                key = json.dumps(last, sort_keys=True)
                if key == last_usage:
                    continue
            elif key == last_key:
                continue
            last_key, last_usage = key, json.dumps(last, sort_keys=True)
            value = last.get("input_tokens")
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                count += 1
    facts.requests = count if seen_count else None
    return facts


def _codex_ts_facts(files: list[tuple[Path, bytes, bool]]) -> _Facts:
    """A TypeScript Codex CLI rollout, one JSON document ``{session, items}``: its start and
    first user message (no cwd, no usage is recorded in it)."""
    _, data, whole = files[0]
    facts = _Facts()
    doc = _loads(data) if whole else None
    if not isinstance(doc, dict):
        return facts
    session = doc.get("session")
    if isinstance(session, dict):
        facts.started = parse_ts(session.get("timestamp"))
    for item in _dicts(doc.get("items")):
        if item.get("type") == "message" and item.get("role") == "user":
            facts.prompt = _prompt(blocks_text(item.get("content")))
            break
    return facts


_DAY = re.compile(r"^\d{4}$|^\d{2}$")


def _codex(where: _Where) -> tuple[list[Place], list[_Found]]:
    # codex-rs/utils/home-dir/src/lib.rs (find_codex_home): $CODEX_HOME when set and not
    # empty, else ~/.codex. codex-rs/core/src/rollout/recorder.rs (precompute_log_file_info):
    # <codex home>/sessions/YYYY/MM/DD/rollout-<YYYY-MM-DDThh-mm-ss>-<id>.jsonl; the first
    # Rust CLIs wrote sessions/rollout-*.jsonl (the example in that file's doc comment).
    # codex-cli/src/utils/storage/save-rollout.ts (the TypeScript CLI, 2025): always
    # ~/.codex/sessions/rollout-<date>-<id>.json, whatever CODEX_HOME says.
    home = where.var("CODEX_HOME")
    root = (Path(home) if home else where.home / ".codex") / "sessions"
    legacy = where.home / ".codex" / "sessions"
    places = [Place("codex", root, root.is_dir())]
    if legacy != root:
        places.append(Place("codex", legacy, legacy.is_dir()))
    found: list[_Found] = []
    for year in _folders(root, where, _DAY):
        for month in _folders(year, where, _DAY):
            for day in _folders(month, where, _DAY):
                found += [_Found("codex", p, _codex_facts)
                          for p in _files(day, "rollout-*.jsonl", where)]
    found += [_Found("codex", p, _codex_facts) for p in _files(root, "rollout-*.jsonl", where)]
    found += [_Found("codex", p, _codex_ts_facts) for p in _files(legacy, "rollout-*.json", where)]
    return places, found


# ----------------------------------------------------------------------------- Gemini CLI


def _gemini_facts(files: list[tuple[Path, bytes, bool]]) -> _Facts:
    """Start (``startTime``), first user message, and the requests as the adapter makes
    them (ingest/adapters/gemini_cli.py): one per ``gemini`` message (JSON lines: per
    distinct id, a message being appended again as it changes)."""
    from .adapters.gemini_cli import content_text

    path, data, whole = files[0]
    facts = _Facts()
    if path.suffix == ".json":
        doc = _loads(data) if whole else None
        if not isinstance(doc, dict):
            m = re.search(rb'"startTime"\s*:\s*"([^"\\]{1,64})"', data)
            facts.started = parse_ts(m.group(1).decode()) if m else None
            return facts
        facts.started = parse_ts(doc.get("startTime"))
        messages = _dicts(doc.get("messages"))
        users = [m for m in messages if m.get("type") == "user"]
        facts.prompt = _prompt(content_text(users[0].get("content"))) if users else None
        facts.requests = sum(1 for m in messages if m.get("type") == "gemini")
        return facts
    ids: set[str] = set()
    for raw in _lines(data, whole):
        if not whole and facts.prompt is not None and facts.started is not None:
            break
        d = _loads(raw)
        if not isinstance(d, dict):
            continue
        if "sessionId" in d and "id" not in d:  # the metadata line
            facts.started = facts.started or parse_ts(d.get("startTime"))
        elif isinstance(d.get("id"), str):
            if d.get("type") == "user" and facts.prompt is None:
                facts.prompt = _prompt(content_text(d.get("content")))
            elif d.get("type") == "gemini":
                ids.add(d["id"])
    facts.requests = len(ids) if whole else None
    return facts


def _gemini_projects(gemini: Path) -> dict[str, str]:
    """Project folder name (a short id, or the older sha256 of the path) -> project root,
    from ~/.gemini/projects.json ({"projects": {root: short id}})."""
    data = _read_small(gemini / "projects.json")
    doc = _loads(data) if data else None
    projects = doc.get("projects") if isinstance(doc, dict) else None
    out: dict[str, str] = {}
    if isinstance(projects, dict):
        for root, short in projects.items():
            if isinstance(root, str) and isinstance(short, str):
                out[short] = root
                out[hashlib.sha256(root.encode("utf-8", "surrogatepass")).hexdigest()] = root
    return out


def _gemini_cli(where: _Where) -> tuple[list[Place], list[_Found]]:
    # google-gemini/gemini-cli, packages/core/src/utils/paths.ts (homedir: $GEMINI_CLI_HOME
    # when set, else the user's home) and config/storage.ts: <home>/.gemini/tmp/<project
    # id>/chats/. The project id is a short id that config/projectRegistry.ts keeps in
    # ~/.gemini/projects.json and in an ownership marker, tmp/<id>/.project_root, holding
    # the project root (older CLIs named the folder by the sha256 of the root: getProjectHash).
    # services/chatRecordingService.ts names a session chats/session-<time>-<id8>.jsonl
    # (.json before); a subagent's chat is chats/<parent session id>/<id>.jsonl, part of
    # its parent's folder, not listed.
    base = where.var("GEMINI_CLI_HOME")
    gemini = (Path(base) if base else where.home) / ".gemini"
    root = gemini / "tmp"
    place = Place("gemini-cli", root, root.is_dir())
    projects: dict[str, str] | None = None
    found: list[_Found] = []
    for folder in _folders(root, where):
        chats = folder / "chats"
        if not chats.is_dir():
            continue
        files = [p for p in _files(chats, "session-*", where) if p.suffix in (".json", ".jsonl")]
        if not files:
            continue
        marker = _read_small(folder / ".project_root")
        project = marker.decode("utf-8", "replace").strip() if marker else None
        if not project:
            if projects is None:
                projects = _gemini_projects(gemini)
            project = projects.get(folder.name)
        found += [_Found("gemini-cli", p, _gemini_facts, project=project or None) for p in files]
    return [place], found


# ----------------------------------------------------------------------------- inspect_ai

# inspect_ai/log/_file.py (is_log_file): a .eval file, or a .json one whose name starts
# with the eval's creation time (_log_file_key: created, with ":" written "-")
_INSPECT_NAME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})T(\d{2})[:-](\d{2})[:-](\d{2})(?:([+-])(\d{2})[:-](\d{2}))?")
_MODEL_EVENT = re.compile(rb'"event"\s*:\s*"model"')


def _inspect_started(name: str) -> dt.datetime | None:
    m = _INSPECT_NAME.match(name)
    if not m:
        return None
    y, mo, d, h, mi, s = (int(x) for x in m.groups()[:6])
    zone = UTC
    if m.group(7):
        offset = dt.timedelta(hours=int(m.group(8)), minutes=int(m.group(9)))
        zone = dt.timezone(offset if m.group(7) == "+" else -offset)
    try:
        return dt.datetime(y, mo, d, h, mi, s, tzinfo=zone).astimezone(UTC)
    except ValueError:
        return None


def _inspect_facts(files: list[tuple[Path, bytes, bool]]) -> _Facts:
    """Start (the file name's creation time); of a JSON log read whole, its first sample's
    input and its requests as the adapter makes them (ingest/adapters/inspect_ai.py: one per
    ``model`` event, counted as bytes: a string in JSON cannot hold an unescaped quote). An
    ``.eval`` archive is a zip: nothing in it is counted cheaply."""
    path, data, whole = files[0]
    facts = _Facts(started=_inspect_started(path.name))
    if path.suffix != ".json" or not whole:
        return facts
    facts.requests = len(_MODEL_EVENT.findall(data))
    doc = _loads(data)
    samples = doc.get("samples") if isinstance(doc, dict) else None
    if isinstance(samples, list) and samples and isinstance(samples[0], dict):
        given = samples[0].get("input")
        if isinstance(given, list):
            users = [m for m in given if isinstance(m, dict) and m.get("role") == "user"]
            given = users[0].get("content") if users else None
        facts.prompt = _prompt(blocks_text(given))
    return facts


def _inspect_ai(where: _Where) -> tuple[list[Place], list[_Found]]:
    # inspect_ai/log/_file.py (list_eval_logs): log_dir = $INSPECT_LOG_DIR, else "./logs"
    # (relative to the current folder), listed recursively. A remote log dir (s3://…) is
    # not this machine's.
    given = where.var("INSPECT_LOG_DIR")
    if given and re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*://", given) and not given.startswith("file://"):
        return [], []
    if given and given.startswith("file://"):
        given = given[len("file://"):]
    root = where.cwd / (given or "logs")
    place = Place("inspect-ai", root, root.is_dir())
    found: list[_Found] = []
    if place.present:
        for path in _walk(root, where):
            name = path.name
            if name.endswith(".eval") or (name.endswith(".json") and _INSPECT_NAME.match(name)):
                found.append(_Found("inspect-ai", path, _inspect_facts))
    return [place], found


# ----------------------------------------------------------------------------- mini-swe-agent


def _mini_facts(files: list[tuple[Path, bytes, bool]]) -> _Facts:
    """First user message, the environment's cwd when recorded, and the requests as the
    adapter makes them (ingest/adapters/openai_chat.py): one per assistant message."""
    _, data, whole = files[0]
    facts = _Facts()
    doc = _loads(data) if whole else None
    if not isinstance(doc, dict):
        return facts
    messages = _dicts(doc.get("messages"))
    users = [m for m in messages if m.get("role") == "user"]
    facts.prompt = _prompt(blocks_text(users[0].get("content"))) if users else None
    facts.requests = sum(1 for m in messages if m.get("role") == "assistant")
    info = doc.get("info")
    config = info.get("config") if isinstance(info, dict) else None
    env = config.get("environment") if isinstance(config, dict) else None
    facts.project = _string(env.get("cwd")) if isinstance(env, dict) else None
    return facts


def _user_config_dir(where: _Where, app: str) -> Path:
    """platformdirs' user_config_dir(app) (what mini-swe-agent calls), for this machine."""
    if sys.platform == "darwin":
        return where.home / "Library" / "Application Support" / app
    if sys.platform == "win32":
        local = where.var("LOCALAPPDATA")
        return Path(local) / app / app if local else where.home / "AppData" / "Local" / app / app
    xdg = where.var("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else where.home / ".config") / app


def _mini_swe_agent(where: _Where) -> tuple[list[Place], list[_Found]]:
    # mini-swe-agent, src/minisweagent/__init__.py (global_config_dir =
    # $MSWEA_GLOBAL_CONFIG_DIR or platformdirs' user_config_dir("mini-swe-agent")) and
    # run/mini.py (DEFAULT_OUTPUT = global_config_dir / "last_mini_run.traj.json"): `mini`
    # writes its last run there, a trajectory the openai-chat adapter reads.
    given = where.var("MSWEA_GLOBAL_CONFIG_DIR")
    path = (Path(given) if given else _user_config_dir(where, "mini-swe-agent")) \
        / "last_mini_run.traj.json"
    present = _is_file(path)
    found = [_Found("openai-chat", path, _mini_facts)] if present else []
    return [Place("openai-chat", path, present)], found


LOCATORS: dict[str, Callable[[_Where], tuple[list[Place], list[_Found]]]] = {
    "claude-code": _claude_code,
    "codex": _codex,
    "gemini-cli": _gemini_cli,
    "inspect-ai": _inspect_ai,
    "openai-chat": _mini_swe_agent,
}


# ----------------------------------------------------------------------------- the file system


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def _entries(folder: Path, where: _Where) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as it:
            return list(it)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as err:
        if folder.exists():
            where.notes.append(f"{folder}: folder skipped, cannot list it ({_reason(err)})")
        return []


def _folders(folder: Path, where: _Where, name: re.Pattern[str] | None = None) -> list[Path]:
    out = []
    for e in _entries(folder, where):
        try:
            is_dir = e.is_dir()
        except OSError:
            continue
        if is_dir and (name is None or name.match(e.name)):
            out.append(Path(e.path))
    return sorted(out)


def _files(folder: Path, pattern: str, where: _Where) -> list[Path]:
    """The regular files of ``folder`` (not below it) whose name matches ``pattern``: a
    FIFO or a device never is a session (opening one could block)."""
    import fnmatch

    out = []
    for e in _entries(folder, where):
        if not fnmatch.fnmatchcase(e.name, pattern):
            continue
        try:
            if stat.S_ISREG(e.stat().st_mode):
                out.append(Path(e.path))
        except OSError as err:  # a dangling link, a file gone since it was listed
            where.notes.append(f"{e.path}: skipped, cannot read it ({_reason(err)})")
    return sorted(out)


def _walk(root: Path, where: _Where) -> Iterator[Path]:
    """Every regular file below ``root`` (symlinked folders not followed: no cycles)."""
    stack = [root]
    while stack:
        folder = stack.pop()
        for e in _entries(folder, where):
            try:
                if e.is_dir(follow_symlinks=False):
                    stack.append(Path(e.path))
                elif stat.S_ISREG(e.stat().st_mode):
                    yield Path(e.path)
            except OSError:
                continue


def _read_small(path: Path) -> bytes | None:
    if not _is_file(path):
        return None
    try:
        with open(path, "rb") as f:
            return f.read(SIDE_FILE_BYTES)
    except OSError:
        return None


def _reason(err: BaseException) -> str:
    return getattr(err, "strerror", None) or type(err).__name__


def _read(found: _Found, where: _Where) -> SessionFile | None:
    """The session's row: its files stat'ed, read whole when small enough (else the main
    file's head), and its facts read from those bytes. None (with a note) when the main
    file cannot be read; a companion that cannot be read leaves the count unknown."""
    try:
        st = os.stat(found.path)
    except OSError as err:
        where.notes.append(f"{found.path}: skipped, cannot read it ({_reason(err)})")
        return None
    stats = [(found.path, st)]
    for companion in found.companions:
        try:
            stats.append((companion, os.stat(companion)))
        except OSError:
            continue  # gone since it was listed (a live session): counted as it is now
    size = sum(s.st_size for _, s in stats)
    whole = size <= COUNT_BYTES
    files: list[tuple[Path, bytes, bool]] = []
    try:
        for path, s in (stats if whole else stats[:1]):
            with open(path, "rb") as f:
                data = f.read(s.st_size if whole else HEAD_BYTES)
            files.append((path, data, whole and len(data) >= s.st_size))
    except OSError as err:
        if not files:
            where.notes.append(f"{found.path}: skipped, cannot read it ({_reason(err)})")
            return None
        files.append((path, b"", False))  # the count is then unknown
    try:
        facts = found.read(files)
    except (RecursionError, MemoryError, ValueError, TypeError, AttributeError) as err:
        # a file of some other shape under a session's name: listed nowhere, said once
        where.notes.append(f"{found.path}: skipped, cannot read it ({type(err).__name__})")
        return None
    mtime = max(s.st_mtime for _, s in stats)
    return SessionFile(
        runtime=found.runtime,
        path=found.path,
        project=facts.project or found.project,
        first_prompt=facts.prompt,
        started=facts.started,
        last_written=dt.datetime.fromtimestamp(mtime, tz=UTC),
        size=size,
        requests=facts.requests,
    )


def find_sessions(runtime: str | None = None, env: Mapping[str, str] | None = None,
                  home: Path | None = None, cwd: Path | None = None) -> Discovery:
    """The sessions of ``runtime`` (every runtime when None) on this machine, newest first.

    ``env``, ``home`` and ``cwd`` default to this process's environment, home folder and
    current folder (where inspect_ai's ``./logs`` is)."""
    if runtime is not None and runtime not in LOCATORS:
        raise ContextlensError(
            f"unknown runtime '{runtime}': sessions are listed for {', '.join(RUNTIMES)}")
    where = _Where(env, home, cwd)
    places: list[Place] = []
    rows: list[SessionFile] = []
    for name in RUNTIMES:
        if runtime is not None and name != runtime:
            continue
        looked, found = LOCATORS[name](where)
        places += looked
        for f in found:
            row = _read(f, where)
            if row is not None:
                rows.append(row)
    rows.sort(key=lambda r: (r.last_written, str(r.path)), reverse=True)
    return Discovery(tuple(rows), tuple(places), tuple(where.notes))
