"""Claude Code thinking, hook output and cleared results, as the runtime sends them: a
response's thinking is sent back within its tool-use loop and stripped after the next user
turn; hook output written between two parallel tool results goes after the group
(ingest/adapters/claude_code.py); the history replay sends a result a microcompaction
cleared in full (ingest/adapters/calibration.py)."""

from __future__ import annotations

import json
from pathlib import Path

from support.cli import run, run_json

THOUGHT = "Let me weigh the options carefully. " * 400  # about 14,400 characters


def _write(path: Path, lines: list[dict]) -> Path:
    parent = None
    for i, line in enumerate(lines):
        line.setdefault("uuid", f"u{i}")
        line.setdefault("parentUuid", parent)
        line.setdefault("sessionId", "s")
        line.setdefault("timestamp", f"2025-06-01T09:00:{i:02d}Z")
        parent = line["uuid"]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def _assistant(rid: str, blocks: list[dict], tokens: int) -> dict:
    return {"type": "assistant", "requestId": rid, "message": {
        "id": f"msg_{rid}", "model": "claude-sonnet-4-5", "role": "assistant", "content": blocks,
        "usage": {"input_tokens": tokens, "output_tokens": 5}}}


def _result(use_id: str, text: str) -> dict:
    return {"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": use_id, "content": text}]}}


def _session(tmp_path: Path) -> Path:
    return _write(tmp_path / "s.jsonl", [
        {"type": "user", "message": {"role": "user", "content": "look at both files"}},
        _assistant("r0", [{"type": "thinking", "thinking": THOUGHT, "signature": "sig"},
                          {"type": "tool_use", "id": "tu1", "name": "Read", "input": {"file_path": "a"}},
                          {"type": "tool_use", "id": "tu2", "name": "Read", "input": {"file_path": "b"}}],
                   20_000),
        _result("tu1", "contents of a"),
        {"type": "user", "isMeta": True, "message": {"role": "user", "content":
            "<system-reminder>PostToolUse hook: a was read</system-reminder>"}},
        _result("tu2", "contents of b"),
        _assistant("r1", [{"type": "text", "text": "Both read."}], 24_000),
        {"type": "user", "message": {"role": "user", "content": "thanks, now summarise"}},
        _assistant("r2", [{"type": "text", "text": "Summary."}], 20_300),
    ])


def _store(capsys, path: Path, tmp_path: Path) -> Path:
    db = tmp_path / "store.duckdb"
    code, out, err = run(capsys, "ingest", str(path), "--db", str(db))
    assert code == 0, out + err
    return db


def _requests(capsys, db: Path) -> list[dict]:
    return sorted(run_json(capsys, "list", "--db", str(db)), key=lambda r: r["assembled_at"])


def test_thinking_is_sent_within_its_tool_use_loop_and_stripped_after(capsys, tmp_path: Path) -> None:
    db = _store(capsys, _session(tmp_path), tmp_path)
    _first, loop, after = (run_json(capsys, "show", r["assembly_id"], "--db", str(db))
                           for r in _requests(capsys, db))
    thinking = [r for r in loop["included"] if r["tokens"] > 2_000]
    assert len(thinking) == 1, loop["included"]  # the tool-result request carries it back
    (stripped,) = [r for r in after["omitted"] if r["record_id"] == thinking[0]["record_id"]]
    assert stripped["reason_code"] == "outside_window" and "user turn" in stripped["detail"]
    code, out, err = run(capsys, "verify", "--db", str(db))
    assert code == 0 and "3 faithful" in out, out + err


def test_thinking_explains_the_growth_it_caused(capsys, tmp_path: Path) -> None:
    """The request after the thinking grew by 4,000 recorded tokens; with the thinking as a
    record, what no record explains stays near the first request's (the fixed overhead)."""
    db = _store(capsys, _session(tmp_path), tmp_path)
    first, loop, _after = (run_json(capsys, "show", r["assembly_id"], "--db", str(db))
                           for r in _requests(capsys, db))
    grew = loop["unattributed_tokens"] - first["unattributed_tokens"]
    # without the thinking record the whole ~3,600 estimated tokens of thinking would show here
    assert grew < 1_000, (first["unattributed_tokens"], loop["unattributed_tokens"])


def test_hook_output_between_parallel_results_goes_after_the_group(capsys, tmp_path: Path) -> None:
    db = _store(capsys, _session(tmp_path), tmp_path)
    code, out, err = run(capsys, "lint", "--db", str(db))
    assert "results_split_or_after_text" not in out + err, out
    loop = run_json(capsys, "show", _requests(capsys, db)[1]["assembly_id"], "--db", str(db))
    kinds = [r["record_kind"] for r in sorted(loop["included"], key=lambda r: r["position"])]
    results = [i for i, k in enumerate(kinds) if k == "tool_artifact"]
    hook = max(i for i, k in enumerate(kinds) if k == "message")
    assert results == [results[0], results[0] + 1] and hook > results[-1], kinds


def test_history_replay_baseline_sends_a_cleared_result_in_full(capsys, tmp_path: Path) -> None:
    """A microcompaction's saving is counted: the history replay (baseline) of the request
    after it sends the cleared result's whole body, the request only its placeholder."""
    body = "line of a long file\n" * 400
    path = _write(tmp_path / "m.jsonl", [
        {"type": "user", "message": {"role": "user", "content": "read it"}},
        _assistant("r0", [{"type": "tool_use", "id": "tu1", "name": "Read", "input": {"file_path": "a"}}],
                   20_000),
        _result("tu1", body),
        _assistant("r1", [{"type": "tool_use", "id": "tu2", "name": "Read", "input": {"file_path": "b"}}],
                   22_000),
        _result("tu2", "tiny"),
        {"type": "system", "subtype": "microcompact_boundary", "microcompactMetadata": {
            "trigger": "auto", "preTokens": 22_000, "tokensSaved": 1_900, "compactedToolIds": ["tu1"]}},
        _assistant("r2", [{"type": "text", "text": "done"}], 20_150),
    ])
    db = _store(capsys, path, tmp_path)
    last = _requests(capsys, db)[-1]
    shown = run_json(capsys, "show", last["assembly_id"], "--db", str(db))
    (cleared,) = [r for r in shown["included"] if r["rendering"] == "cleared"]
    before = run_json(capsys, "show", _requests(capsys, db)[1]["assembly_id"], "--db", str(db))
    full = next(r["tokens"] for r in before["included"] if r["record_id"] == cleared["record_id"])
    assert full > 10 * cleared["tokens"]
    assert last["baseline_tokens"] - last["assembled_tokens"] >= full - cleared["tokens"], last
    (total,) = [r for r in run_json(capsys, "report", "tokens", "--db", str(db)) if r["scenario"] == "(all)"]
    assert total["reduction"] > 0, total
