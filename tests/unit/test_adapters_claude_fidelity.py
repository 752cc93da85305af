"""Claude Code sessions reconstructed as the API saw them: parallel calls in wire order, the
compaction boundary is not content, the compaction summariser is sent the parent's history."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from support.sql import sql

from ingest.adapters import adapt
from ingest.store import ingest


def _line(kind: str, uuid: str, parent: str | None, minute: int, **extra: Any) -> dict[str, Any]:
    return {"type": kind, "sessionId": "s", "uuid": uuid, "parentUuid": parent,
            "timestamp": f"2025-06-01T09:{minute:02d}:00Z", **extra}


def _assistant(uuid: str, parent: str, minute: int, req: str, block: dict[str, Any]) -> dict[str, Any]:
    return _line("assistant", uuid, parent, minute, requestId=req, message={
        "id": f"msg_{req}", "model": "claude-sonnet-4-5", "role": "assistant", "content": [block],
        "usage": {"input_tokens": 100, "output_tokens": 5}})


def _result(uuid: str, parent: str, minute: int, use_id: str, body: str) -> dict[str, Any]:
    return _line("user", uuid, parent, minute, message={"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": use_id, "content": body}]})


def _store(tmp_path: Path, lines: list[dict[str, Any]], name: str = "session.jsonl") -> Path:
    path = tmp_path / name
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    res = adapt(path, tmp_path / "export")
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    return db


def _included(db: Path, assembly_like: str) -> list[tuple[str, str]]:
    """(kind, content or tool name) of one assembly's included records in prompt order."""
    return [(k, v) for k, v in sql(db, f"""
        SELECT r.record_kind, coalesce(m.content, c.tool_name, a.result_preview)
        FROM assembly_records r
        LEFT JOIN messages m ON r.record_kind = 'message' AND m.message_id = r.record_id
        LEFT JOIN tool_calls c ON r.record_kind = 'tool_call' AND c.tool_call_id = r.record_id
        LEFT JOIN tool_artifacts a ON r.record_kind = 'tool_artifact' AND a.artifact_id = r.record_id
        WHERE r.assembly_id LIKE '{assembly_like}' AND r.decision = 'included'
        ORDER BY r.position""")]


def test_parallel_calls_are_in_wire_order_although_a_result_was_written_between_them(
        tmp_path: Path) -> None:
    lines = [
        _line("user", "u0", None, 0, message={"role": "user", "content": "read both files"}),
        _assistant("a1", "u0", 1, "r1", {"type": "tool_use", "id": "tu_a", "name": "Read",
                                          "input": {"file_path": "/a.py"}}),
        _result("t1", "a1", 2, "tu_a", "alpha"),  # written before the second tool_use line
        _assistant("a2", "t1", 3, "r1", {"type": "tool_use", "id": "tu_b", "name": "Read",
                                          "input": {"file_path": "/b.py"}}),
        _result("t2", "a2", 4, "tu_b", "beta"),
        _assistant("a3", "t2", 5, "r2", {"type": "text", "text": "done"}),
    ]
    db = _store(tmp_path, lines)
    runs = [r for (r,) in sql(db, "SELECT assembly_id FROM context_assemblies ORDER BY assembled_at")]
    assert _included(db, runs[1]) == [
        ("message", "read both files"), ("message", ""),  # the user turn, the response's text
        ("tool_call", "Read"), ("tool_call", "Read"),  # every tool_use block first
        ("tool_artifact", "alpha"), ("tool_artifact", "beta"),  # then the results
    ]


def _compacted_session(tmp_path: Path) -> Path:
    """A main session compacted once; its summariser file holds a hook reminder of the main
    session (parentUuid in the main file) and the summary prompt."""
    main = [
        _line("user", "u0", None, 0, message={"role": "user", "content": "fix the parser"}),
        _assistant("a1", "u0", 1, "r1", {"type": "tool_use", "id": "tu_a", "name": "Edit",
                                          "input": {"file_path": "/p.py"}}),
        _result("t1", "a1", 2, "tu_a", "edited"),
        _assistant("a2", "t1", 4, "r2", {"type": "text", "text": "edited the parser"}),
        _line("system", "b1", "a2", 6, subtype="compact_boundary",
              compactMetadata={"trigger": "auto", "preTokens": 900}),
        _line("user", "s1", "b1", 7, isCompactSummary=True,
              message={"role": "user", "content": "Summary: the parser was fixed."}),
        _assistant("a3", "s1", 8, "r3", {"type": "text", "text": "continuing"}),
    ]
    summariser = [
        _line("user", "h1", "t1", 3, isMeta=True, message={
            "role": "user", "content": "<system-reminder>PostToolUse:Edit hook: lint ok</system-reminder>"}),
        _line("user", "q1", "a2", 5, message={"role": "user", "content": "Summarise the conversation."}),
        _assistant("z1", "q1", 5, "rs", {"type": "text", "text": "Summary: the parser was fixed."}),
    ]
    folder = tmp_path / "session" / "subagents"
    folder.mkdir(parents=True)
    (folder / "agent-acompact-1.jsonl").write_text(
        "".join(json.dumps(dict(line, agentId="acompact-1")) + "\n" for line in summariser))
    return _store(tmp_path, main)


def _request_contents(db: Path, where: str) -> list[str]:
    (aid,) = sql(db, f"SELECT assembly_id FROM context_assemblies WHERE {where}")[0]
    return [v for _, v in _included(db, aid)]


def test_the_compaction_summariser_is_sent_the_parent_history(tmp_path: Path) -> None:
    db = _compacted_session(tmp_path)
    sent = _request_contents(db, "list_contains(tags, 'compaction_summariser')")
    # the main conversation up to the compaction, then its own prompt
    assert sent[0] == "fix the parser" and "edited" in sent and "edited the parser" in sent
    assert sent[-1] == "Summarise the conversation."
    # one participant for the main agent and its summariser: nothing it is sent is foreign
    assert sql(db, "SELECT count(*) FROM participants WHERE kind = 'subagent'") == [(0,)]


def test_a_hook_reminder_in_the_summariser_file_belongs_to_the_main_session(tmp_path: Path) -> None:
    db = _compacted_session(tmp_path)
    reminder = "<system-reminder>PostToolUse:Edit hook: lint ok</system-reminder>"
    # sent with the main request after the Edit result, where its parentUuid points
    second = _request_contents(db, "assembled_at = (SELECT min(assembled_at) FROM context_assemblies "
                                   "WHERE assembled_at > TIMESTAMPTZ '2025-06-01 09:03:00+00')")
    assert reminder in second


def test_the_compaction_marker_is_not_listed_as_dropped_content(tmp_path: Path) -> None:
    db = _compacted_session(tmp_path)
    dropped = sql(db, "SELECT m.speaker_label, m.content FROM assembly_records r JOIN messages m "
                      "ON m.message_id = r.record_id WHERE r.reason_code = 'compacted'")
    assert dropped and all(label != "compact_boundary" for label, _ in dropped)
    assert ("compact summary", "Summary: the parser was fixed.") not in dropped


def test_microcompaction_clears_the_listed_results_from_its_boundary_on(tmp_path: Path) -> None:
    big = "line of a long file\n" * 200
    lines = [
        _line("user", "u0", None, 0, message={"role": "user", "content": "look at both"}),
        _assistant("a1", "u0", 1, "r1", {"type": "tool_use", "id": "tu_big", "name": "Read",
                                          "input": {"file_path": "/big.txt"}}),
        _result("t1", "a1", 2, "tu_big", big),
        _assistant("a2", "t1", 3, "r2", {"type": "tool_use", "id": "tu_small", "name": "Read",
                                          "input": {"file_path": "/small.txt"}}),
        _result("t2", "a2", 4, "tu_small", "tiny"),
        _line("system", "mc", "t2", 5, subtype="microcompact_boundary", microcompactMetadata={
            "trigger": "auto", "preTokens": 5000, "tokensSaved": 1234,
            "compactedToolIds": ["tu_big"]}),
        _assistant("a3", "mc", 6, "r3", {"type": "text", "text": "both read"}),
    ]
    db = _store(tmp_path, lines)
    runs = [r for (r,) in sql(db, "SELECT assembly_id FROM context_assemblies ORDER BY assembled_at")]
    rows = {aid: sql(db, "SELECT r.rendering, r.reason_code, r.tokens, r.detail FROM assembly_records r "
                         "JOIN tool_artifacts a ON a.artifact_id = r.record_id "
                         f"WHERE r.assembly_id = '{aid}' AND a.result_preview LIKE 'line of%'")
            for aid in runs}
    full_tokens = rows[runs[1]][0][2]
    assert rows[runs[1]][0][:2] == ("verbatim", "in_window")  # before the boundary: in full
    rendering, reason, tokens, detail = rows[runs[2]][0]  # after it: a placeholder
    assert (rendering, reason) == ("cleared", "elided")
    assert tokens < 20 < full_tokens
    assert "tokensSaved 1234 recorded" in detail and f"{full_tokens - tokens} estimated" in detail
    # the small result was not listed: still sent in full
    small = sql(db, "SELECT r.rendering FROM assembly_records r JOIN tool_artifacts a ON "
                    f"a.artifact_id = r.record_id WHERE r.assembly_id = '{runs[2]}' "
                    "AND a.result_preview = 'tiny'")
    assert small == [("verbatim",)]
    # the prompt as sent shows the placeholder, not the body
    from ingest.contract import CLEARED_PLACEHOLDER
    from ingest.store import Store
    from replay.render import render_prompt
    with Store.open(db) as store:
        bodies = [p.body for p in render_prompt(store, runs[2])]
    assert CLEARED_PLACEHOLDER in bodies and big not in bodies


def test_token_estimates_are_calibrated_on_the_recorded_growth(tmp_path: Path) -> None:
    """The runtime counts twice what bytes/4 estimates: fitted on the requests' recorded
    growth, the records' counts double and what is left unexplained is the fixed overhead
    (the first request's), not a gap growing with the conversation."""
    def est(text: str) -> int:
        return -(-len(text.encode()) // 4)

    overhead, sent, lines, parent = 3000, 0, [], None
    for i in range(6):
        ask = f"question {i}: " + "please look at this part of the code " * (i + 3)
        answer = f"answer {i}: " + "here is what the code does " * (i + 5)
        lines.append(_line("user", f"u{i}", parent, 2 * i, message={"role": "user", "content": ask}))
        sent += est(ask)
        lines.append(_line("assistant", f"a{i}", f"u{i}", 2 * i + 1, requestId=f"r{i}", message={
            "id": f"m{i}", "model": "claude-sonnet-4-5", "role": "assistant",
            "content": [{"type": "text", "text": answer}],
            "usage": {"input_tokens": overhead + 2 * sent, "output_tokens": 5}}))
        sent += est(answer)
        parent = f"a{i}"
    db = _store(tmp_path, lines)
    rows = sql(db, "SELECT assembly_id, tags FROM context_assemblies ORDER BY assembled_at")
    for aid, tags in rows:
        assert "tokens:calibrated:x2.00/5pairs" in tags
        assert f"fixed_overhead_tokens:{overhead}" in tags
        assert "estimator_residual_tokens:0" in tags and f"unattributed_tokens:{overhead}" in tags
    # every count of the transcript is scaled the same way: the store agrees with itself
    assert sql(db, "SELECT count(*) FROM assembly_records r JOIN messages m ON m.message_id = "
                   "r.record_id WHERE r.tokens <> m.content_tokens") == [(0,)]
    first_ask = sql(db, "SELECT content, content_tokens FROM messages WHERE role = 'user' "
                        "ORDER BY created_at LIMIT 1")[0]
    assert first_ask[1] == 2 * est(first_ask[0])


def test_too_little_growth_leaves_the_estimates_and_says_so(tmp_path: Path) -> None:
    lines = [_line("user", "u0", None, 0, message={"role": "user", "content": "hi"}),
             _assistant("a0", "u0", 1, "r0", {"type": "text", "text": "hello"})]
    db = _store(tmp_path, lines)
    (tags,) = sql(db, "SELECT tags FROM context_assemblies")[0]
    assert "tokens:uncalibrated" in tags and "fixed_overhead_tokens:" + str(100 - 1) in tags


def test_openai_models_are_counted_with_their_own_tokenizer_offline() -> None:
    from ingest.adapters.tokens import exact_estimator, public_encoding

    assert public_encoding("gpt-4o") == "o200k_base" and public_encoding("gpt-4") == "cl100k_base"
    assert public_encoding("claude-sonnet-4-5") is None and public_encoding(None) is None
    o200k, cl100k = exact_estimator(["gpt-4o", "openai/gpt-4o-mini"]), exact_estimator(["gpt-4"])
    assert o200k is not None and cl100k is not None
    # OpenAI's published token ids: the real encodings, read without a network
    assert o200k.encoding.encode("hello world") == [24912, 2375]
    assert cl100k.encoding.encode("hello world") == [15339, 1917]
    assert exact_estimator(["gpt-4o", "gpt-4"]) is None  # two tokenizers: no single count
    assert exact_estimator(["gpt-4o", None]) is None


def test_omitted_records_are_listed_in_time_order_not_id_text_order(tmp_path: Path) -> None:
    lines, parent = [], None
    for i in range(12):  # 24 records before the compaction: ids m0 .. m23
        lines.append(_line("user", f"u{i}", parent, i, message={"role": "user", "content": f"turn {i}"}))
        lines.append(_assistant(f"a{i}", f"u{i}", i, f"r{i}", {"type": "text", "text": f"reply {i}"}))
        parent = f"a{i}"
    lines += [_line("system", "b", parent, 30, subtype="compact_boundary", compactMetadata={"trigger": "auto"}),
              _line("user", "s", "b", 31, isCompactSummary=True, message={"role": "user", "content": "summary"}),
              _assistant("z", "s", 32, "rz", {"type": "text", "text": "go on"})]
    db = _store(tmp_path, lines)
    from ingest.store import Store
    with Store.open(db) as store:
        aid = store.list_assemblies().to_pylist()[-1]["assembly_id"]
        omitted = store.assembly_records(aid, "omitted").to_pylist()
    users = [r["label"] for r in omitted if r["label"].startswith("user")]
    assert users == [f"user: turn {i}" for i in range(12)]  # turn 10 after turn 9, not after 1


def _task_call(uuid: str, parent: str, minute: int, req: str, use_id: str) -> dict[str, Any]:
    """An assistant line calling Task (Explore, "look around")."""
    return _assistant(uuid, parent, minute, req, {
        "type": "tool_use", "id": use_id, "name": "Task",
        "input": {"prompt": "look around", "subagent_type": "Explore"}})


# the user refused Task call tu_1 (made by line a1): an error, no agent id
_REFUSED = _line("user", "t1", "a1", 2, message={"role": "user", "content": [
    {"type": "tool_result", "tool_use_id": "tu_1", "is_error": True,
     "content": "The user doesn't want to proceed with this tool use."}]})


def test_a_task_call_refused_before_a_subagent_ran_is_not_a_missing_transcript(
        tmp_path: Path) -> None:
    """A Task call the user refused (or interrupted before it started) is answered with an
    error and no agent id: no subagent ran, so none is missing. A Task call that ran and whose
    transcript is nowhere still says so."""
    task, refused = _task_call, _REFUSED
    ran = _line("user", "t2", "a2", 4, toolUseResult={"agentId": "a0c1d2e", "status": "completed"},
                message={"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "tu_2", "content": "found it"}]})
    lines = [
        _line("user", "u0", None, 0, message={"role": "user", "content": "explore"}),
        task("a1", "u0", 1, "r1", "tu_1"), refused,
        task("a2", "t1", 3, "r2", "tu_2"), ran,
        _assistant("a3", "t2", 5, "r3", {"type": "text", "text": "done"}),
    ]
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    res = adapt(path, tmp_path / "export")
    missing = [w for w in res.warnings if "without a transcript" in w]
    assert len(missing) == 1 and "1 subagent call(s)" in missing[0], res.warnings


def test_a_sidechain_belongs_to_the_task_call_that_ran_not_the_refused_one(tmp_path: Path) -> None:
    """An older session keeps its subagent's lines in the main file (isSidechain) without an
    agent id: they are matched to a Task call by prompt, and never to one the user refused."""
    task, refused = _task_call, _REFUSED
    side = [_line("user", "s1", None, 4, isSidechain=True,
                  message={"role": "user", "content": "look around"}),
            dict(_assistant("s2", "s1", 5, "rs", {"type": "text", "text": "found main.py"}),
                 isSidechain=True)]
    ran = _result("t2", "a2", 6, "tu_2", "found main.py")
    lines = [_line("user", "u0", None, 0, message={"role": "user", "content": "explore"}),
             task("a1", "u0", 1, "r1", "tu_1"), refused, task("a2", "t1", 3, "r2", "tu_2"),
             *side, ran, _assistant("a3", "t2", 7, "r3", {"type": "text", "text": "done"})]
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    res = adapt(path, tmp_path / "export")
    assert not [w for w in res.warnings if "without a transcript" in w], res.warnings
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    (parent,) = sql(db, "SELECT parent_model_run_id FROM model_runs "
                        "WHERE parent_model_run_id IS NOT NULL")[0]
    # the parent is the run that made the second Task call, the one answered without error
    second = sql(db, "SELECT model_run_id FROM tool_calls WHERE status = 'succeeded'")
    assert [(parent,)] == second
