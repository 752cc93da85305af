"""A file no adapter reads gets one line naming the closest known format and the evidence,
not only the list of formats tried."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ingest.adapters import detect_format
from ingest.errors import ContextlensError

# files close to a format an installed adapter reads, but not it: the error says which
# format, the evidence, and that adapter's reason
NEAR = {
    "rollout.jsonl": (
        "looks like a Codex CLI rollout (session_meta on line 1) but does not match codex "
        '(no line is {"type": session_meta/response_item/event_msg, "payload": …})',
        '{"timestamp":"2026-02-23T11:54:52Z","type":"session_meta","meta":{"id":"x"}}\n'
        '{"timestamp":"2026-02-23T11:54:53Z","type":"response","item":{}}\n'),
    "session.json": (
        "looks like a Gemini CLI session (top-level keys sessionId and messages) but does not "
        'match gemini-cli (messages have no "type" user/gemini/info/error',
        json.dumps({"sessionId": "s", "messages": [{"type": "model", "content": "hi"}]})),
    "chat.json": (
        'looks like OpenAI chat messages (a list of messages with "role" and "content") but does '
        "not match openai-chat",
        json.dumps({"messages": [{"role": "bot", "content": "hi"}]})),
    "claude.jsonl": (
        "looks like a Claude Code session (a user line with a message on line 1) but does not "
        "match claude-code",
        '{"type":"user","message":{"role":"user","content":"hi"}}\n'),
}


@pytest.mark.parametrize("name", sorted(NEAR))
def test_a_near_miss_names_the_format_and_why_not(tmp_path: Path, name: str) -> None:
    expected, text = NEAR[name]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ContextlensError) as err:
        detect_format(path)
    message = str(err.value)
    assert message.startswith(f"{path}: {expected}") and "\n" not in message, message
    assert "(tried claude-code:" in message


def test_a_real_rollout_is_no_longer_a_lookalike(tmp_path: Path) -> None:
    path = tmp_path / "rollout.jsonl"
    path.write_text(
        '{"timestamp":"2026-02-23T11:54:52Z","type":"session_meta","payload":{"id":"x"}}\n'
        '{"timestamp":"2026-02-23T11:54:53Z","type":"response_item","payload":{"type":"message",'
        '"role":"user","content":[{"type":"input_text","text":"hi"}]}}\n', encoding="utf-8")
    assert detect_format(path) == "codex"


def test_a_file_like_nothing_known_says_so_and_shows_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"hello": "world"}), encoding="utf-8")
    with pytest.raises(ContextlensError) as err:
        detect_format(path)
    assert str(err.value).startswith(
        f"{path}: not a known transcript format, no known format has its keys (hello) (tried ")


# files no recogniser places: the closest format is the one whose keys they share most
CLOSEST = {
    # an inspect_ai log cut before its samples (still "started")
    "started.json": ({"eval": {"task": "t"}, "status": "started", "plan": {}},
                     'closest: an inspect_ai eval log (shares eval, plan, status; no "version" '
                     'nor "samples" beside "eval")'),
    # JSON lines with a type and a time, but no payload: events of some other CLI
    "cli.jsonl": ([{"timestamp": "2026-02-23T11:54:52Z", "type": "event", "data": {}}],
                  "closest: a Codex CLI rollout (shares timestamp, type; no line is "),
    # ESAA events without the fields that make one (no id, no sequence)
    "events.jsonl": ([{"actor": "a", "ts": "2026-01-01T00:00:00Z", "note": "x"}],
                     "closest: an ESAA event log (shares actor, ts; "),
}


@pytest.mark.parametrize("name", sorted(CLOSEST))
def test_an_unknown_file_names_the_closest_format(tmp_path: Path, name: str) -> None:
    body, expected = CLOSEST[name]
    path = tmp_path / name
    text = ("\n".join(json.dumps(line) for line in body) + "\n" if name.endswith(".jsonl")
            else json.dumps(body))
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ContextlensError) as err:
        detect_format(path)
    message = str(err.value)
    assert message.startswith(f"{path}: not a known transcript format, {expected}"), message
    assert "\n" not in message


def test_a_session_cut_short_says_what_it_was_and_where_it_stops(tmp_path: Path) -> None:
    # a Gemini CLI session whose JSON ends in the middle of a string (a copy cut short):
    # not JSON for every JSON format, said once for all of them, with the line and column
    # where the parser stopped, and the format its keys are closest to
    whole = (Path(__file__).parents[1] / "adapter_fixtures" / "gemini_session.json").read_text()
    cut = whole[: whole.index('"content"', len(whole) // 2) + 14]
    path = tmp_path / "session.json"
    path.write_text(cut, encoding="utf-8")
    with pytest.raises(ContextlensError) as err:
        detect_format(path)
    message = str(err.value)
    line = cut.count("\n") + 1
    assert message.startswith(f"{path}: not a known transcript format, closest: a Gemini CLI "
                              "session (shares "), message
    assert f"Unterminated string starting at line {line} column" in message
    tried = message[message.index("(tried "):]
    assert tried.count("not JSON nor JSON lines") == 1, tried
    assert "claude-code, openai-chat, anthropic-messages, gemini-cli, codex" in tried
    assert "\n" not in message
