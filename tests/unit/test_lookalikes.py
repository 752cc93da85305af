"""A file no adapter reads gets one line naming the closest known format and the evidence,
not only the list of formats tried."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest

from ingest.adapters import detect_format
from ingest.errors import ContextlensError

CASES = {
    "rollout.jsonl": ("a Codex CLI rollout (session_meta on line 1)",
                      '{"timestamp":"2026-02-23T11:54:52Z","type":"session_meta","payload":{"id":"x"}}\n'
                      '{"timestamp":"2026-02-23T11:54:53Z","type":"response_item","payload":{}}\n'),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_error_names_the_closest_format(tmp_path: Path, name: str) -> None:
    looks, text = CASES[name]
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ContextlensError) as err:
        detect_format(path)
    message = str(err.value)
    assert f"looks like {looks}" in message and "\n" not in message
    assert "(tried claude-code:" in message  # what was tried is still said


def test_a_file_like_nothing_known_says_so(tmp_path: Path) -> None:
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"hello": "world"}), encoding="utf-8")
    with pytest.raises(ContextlensError, match="not a known transcript format"):
        detect_format(path)
