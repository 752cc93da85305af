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


def test_a_file_like_nothing_known_says_so(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"hello": "world"}), encoding="utf-8")
    with pytest.raises(ContextlensError, match="not a known transcript format"):
        detect_format(path)
