"""The Codex CLI rollout adapter: a hand-written rollout, real rollouts (counts computed here
from the raw JSON lines, independently of the adapter), detection, lint and the command line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.cli import run, run_json
from support.sql import sql

from ingest.adapters import adapt, detect_format
from ingest.store import ingest

FIX = Path(__file__).parents[1] / "adapter_fixtures"
ROLLOUT = FIX / "codex_rollout.jsonl"
REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
REAL = sorted((REALDATA / "codex-localpush").glob("rollout-*.jsonl")) + sorted(
    (REALDATA / "codemie-code").glob("rollout-*.jsonl")) if REALDATA.is_dir() else []


def _load(path: Path, tmp_path: Path) -> Path:
    res = adapt(path, tmp_path / "export")
    assert res.format == "codex"
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    return db


def _records(db: Path, n: int, decision: str = "included") -> list[tuple[str, str, str]]:
    """(record kind, speaker or tool name, content or preview) of request n's records."""
    return sql(db, f"""
        with a as (select assembly_id from context_assemblies order by assembled_at
                   limit 1 offset {n})
        select r.record_kind, coalesce(m.speaker_label, m.role, c.tool_name, t.tool_name),
               coalesce(m.content, c.arguments_json, t.result_preview)
        from assembly_records r join a using (assembly_id)
        left join messages m on r.record_kind = 'message' and m.message_id = r.record_id
        left join tool_calls c on r.record_kind = 'tool_call' and c.tool_call_id = r.record_id
        left join tool_artifacts t on r.record_kind = 'tool_artifact' and t.artifact_id = r.record_id
        where r.decision = '{decision}' order by r.position, r.record_id""")


def test_fixture_requests_tokens_tools_and_compaction(tmp_path: Path) -> None:
    assert detect_format(ROLLOUT) == "codex"
    res = adapt(ROLLOUT, tmp_path / "export")
    # an unknown item type is skipped and counted; a stray output is kept, with a warning
    assert any("2 response_item(s) of type 'future_item' skipped" in w for w in res.warnings)
    assert any("'call_zzz' answers no call" in w for w in res.warnings)
    db = tmp_path / "s.duckdb"
    ingest(res.export_dir, db)
    asm = sql(db, "select assembled_tokens, model, tags from context_assemblies order by assembled_at")
    # one request per model response; the repeated count and the reset after compaction are not
    assert [a[0] for a in asm] == [5000, 5400, 5600, 1200]
    assert all(a[1] == "gpt-5-codex" and "tokens:recorded" in a[2] for a in asm)
    assert "codex:approval:on-request" in asm[0][2] and "codex:approval:never" in asm[3][2]
    assert "tokens:exact:o200k_base" in asm[0][2]
    # request 1: the base instructions, then the history in wire order
    first = _records(db, 0)
    assert [(k, who) for k, who, _ in first] == [
        ("message", "base_instructions"), ("message", "developer"), ("message", "context"),
        ("message", "user")]
    assert first[0][2] == "You are Codex, a coding agent."
    # request 2 sees request 1's reasoning (summary and a marker, never decrypted), its text,
    # both calls and both results
    second = _records(db, 1)
    assert [k for k, _, _ in second[4:]] == ["message", "message", "tool_call", "tool_call",
                                            "tool_artifact", "tool_artifact"]
    assert second[4][2] == "**Looking at the tests**\n[encrypted reasoning: 100 characters, not readable]"
    calls = sql(db, "select tool_name, status, parallel_group is not null from tool_calls order by requested_at, tool_call_id")
    assert calls == [("exec_command", "failed", True), ("exec_command", "succeeded", True),
                     ("web_search", "succeeded", True), ("apply_patch", "succeeded", True),
                     ("shell", "pending", False)]
    # after the compaction: the instructions and the replacement history, nothing else
    last = _records(db, 3)
    assert [(k, who) for k, who, _ in last] == [
        ("message", "base_instructions"), ("message", "replacement history"),
        ("message", "replacement history"), ("message", "compaction")]
    assert last[3][2] == "[encrypted compaction summary: 30 characters, not readable]"
    dropped = _records(db, 3, "omitted")
    assert len(dropped) == 14 and all(
        r == "compacted" for (r,) in sql(db, """select reason_code from assembly_records
            where assembly_id = (select assembly_id from context_assemblies order by assembled_at
                                 limit 1 offset 3) and decision = 'omitted'"""))
    assert "after_compaction:1" in asm[3][2]


def test_lint_finds_the_call_never_answered(capsys, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    assert run(capsys, "ingest", str(ROLLOUT), "--db", str(db))[0] == 0
    findings = run_json(capsys, "lint", "--db", str(db), "--json")
    pending = [f for f in findings if f["rule"] == "tool_call_without_result"]
    assert len(pending) == 1 and "shell call" in pending[0]["detail"]
    rows = run_json(capsys, "list", "--db", str(db))
    assert [r["assembled_tokens"] for r in rows] == [5000, 5400, 5600, 1200]


def test_a_large_rollout_is_detected_on_its_head(tmp_path: Path) -> None:
    """Detection reads a bounded head: a rollout far over it is decided on its first lines."""
    path = tmp_path / "rollout-big.jsonl"
    head = ROLLOUT.read_text(encoding="utf-8")
    filler = json.dumps({"timestamp": "2026-03-01T11:00:00Z", "type": "response_item",
                         "payload": {"type": "message", "role": "user",
                                     "content": [{"type": "input_text", "text": "x" * 100_000}]}})
    with path.open("w", encoding="utf-8") as f:
        f.write(head)
        for _ in range(100):
            f.write(filler + "\n")
    assert path.stat().st_size > 9_000_000
    assert detect_format(path) == "codex"


# ------------------------------------------------------------------ real rollouts


def _expected(path: Path) -> dict:
    """Counts from the raw rollout. A model response ends at a token_count whose running
    total moved (with input), or, in a rollout without token counts, where an input item
    (or the user's turn) follows model output."""
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    items = [(d["type"], d["payload"]) for d in lines]
    tokens, seen = [], set()
    for kind, p in items:
        if kind == "event_msg" and p.get("type") == "token_count" and p.get("info"):
            total = json.dumps(p["info"]["total_token_usage"], sort_keys=True)
            last = p["info"]["last_token_usage"]["input_tokens"]
            if total not in seen and last > 0:
                seen.add(total)
                tokens.append(last)
    output = {"reasoning", "function_call", "custom_tool_call", "web_search_call", "local_shell_call"}
    responses, in_output = 0, False
    for kind, p in items:
        if kind == "event_msg" and p.get("type") == "user_message":
            in_output = False  # the user's turn: input, whether or not an item records it
        if kind != "response_item":
            continue
        t = p.get("type")
        if t in output or (t == "message" and p.get("role") == "assistant"):
            responses += not in_output
            in_output = True
        else:
            in_output = False
    outputs = [p for k, p in items if k == "response_item"
               and p.get("type") in ("function_call_output", "custom_tool_call_output")]
    codes = [re.search(r"^(?:Process exited with code|Exit code:) (-?\d+)$", p["output"], re.M)
             for p in outputs if isinstance(p.get("output"), str)]
    return {
        "requests": len(tokens) if tokens else responses,
        "tokens": tokens,
        "tool_calls": sum(1 for k, p in items if k == "response_item" and p.get("type") in
                          ("function_call", "custom_tool_call", "web_search_call", "local_shell_call")),
        "results": len(outputs),
        "failed": sum(1 for m in codes if m and m.group(1) != "0"),
        "compacted_at": [i for i, (k, _) in enumerate(items) if k == "compacted"],
    }


@pytest.mark.skipif(not REAL, reason=f"real rollouts absent ({REALDATA})")
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.parent.name)
def test_real_rollouts(path: Path, tmp_path: Path) -> None:
    assert detect_format(path) == "codex"
    exp = _expected(path)
    db = _load(path, tmp_path)
    asm = sql(db, "select assembled_tokens, tags from context_assemblies order by assembled_at")
    assert len(asm) == exp["requests"]
    if exp["tokens"]:
        # every request's recorded input is its token_count's last_token_usage.input_tokens
        assert [a[0] for a in asm] == exp["tokens"]
        assert all("tokens:recorded" in a[1] for a in asm)
    assert sql(db, "select count(*) from tool_calls")[0][0] == exp["tool_calls"]
    assert sql(db, "select count(*) from tool_artifacts")[0][0] == exp["results"]
    assert sql(db, "select count(*) from tool_calls where status = 'failed'")[0][0] == exp["failed"]
    sizes = sql(db, """
        select count(r.record_id) filter (where r.decision = 'included'),
               count(r.record_id) filter (where r.reason_code = 'compacted')
        from context_assemblies a join assembly_records r using (assembly_id)
        group by a.assembly_id, a.assembled_at order by a.assembled_at""")
    if exp["compacted_at"]:
        # before the compaction nothing is dropped and history only grows; after it, the
        # requests omit what it dropped and send less
        cut = next(i for i, (_, dropped) in enumerate(sizes) if dropped)
        assert all(d == 0 for _, d in sizes[:cut]) and all(d > 0 for _, d in sizes[cut:])
        assert sizes[cut][0] < sizes[cut - 1][0]
    else:
        assert all(b[0] > a[0] for a, b in zip(sizes, sizes[1:]))


@pytest.mark.skipif(not REAL, reason=f"real rollouts absent ({REALDATA})")
def test_real_rollout_lists_in_the_cli(capsys, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    code, out, err = run(capsys, "ingest", str(REAL[0]), "--db", str(db))
    assert code == 0, err
    code, out, err = run(capsys, "list", "--db", str(db))
    assert code == 0, err
    assert len([ln for ln in out.splitlines() if ":asm" in ln]) == _expected(REAL[0])["requests"]


def _write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(d) + "\n" for d in lines), encoding="utf-8")
    return path


def _ri(t: str, payload: dict) -> dict:
    return {"timestamp": t, "type": "response_item", "payload": payload}


def _user(text: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}


def test_variants_events_rollback_and_summary_compaction(tmp_path: Path) -> None:
    """A rollout whose user turns are events only, an exit code from exec_command_end, an
    output with success false, a rollback and an older compaction (summary text, no
    replacement history); no token counts: every request is estimated."""
    t = "2026-03-02T08:00:%02dZ"
    ev = lambda i, p: {"timestamp": t % i, "type": "event_msg", "payload": p}  # noqa: E731
    path = _write(tmp_path / "rollout-v.jsonl", [
        {"timestamp": t % 0, "type": "session_meta", "payload": {"id": "v", "cwd": "/r"}},
        ev(1, {"type": "user_message", "message": "run the build"}),
        _ri(t % 2, {"type": "function_call", "name": "shell", "arguments": '{"command":["make"]}',
                    "call_id": "c1"}),
        ev(3, {"type": "exec_command_end", "call_id": "c1", "exit_code": 2}),
        _ri(t % 3, {"type": "function_call_output", "call_id": "c1", "output": "make: *** [all] Error 2"}),
        _ri(t % 4, {"type": "function_call", "name": "mcp__db__query", "arguments": "{}", "call_id": "c2"}),
        _ri(t % 5, {"type": "function_call_output", "call_id": "c2",
                    "output": {"content": "err: timeout", "success": False}}),
        _ri(t % 6, {"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": "The build fails."}]}),
        ev(7, {"type": "user_message", "message": "try again"}),
        _ri(t % 8, {"type": "message", "role": "assistant",
                    "content": [{"type": "output_text", "text": "Retrying."}]}),
        ev(9, {"type": "thread_rolled_back", "num_turns": 1}),
        {"timestamp": t % 10, "type": "compacted", "payload": {"message": "The user builds; make fails."}},
        ev(11, {"type": "user_message", "message": "what now?"}),
        _ri(t % 12, {"type": "message", "role": "assistant",
                     "content": [{"type": "output_text", "text": "Fix the Makefile."}]}),
    ])
    res = adapt(path, tmp_path / "export")
    assert res.stats["user_messages_from_events"] == 3 and res.stats["rollbacks"] == 1
    db = tmp_path / "s.duckdb"
    ingest(res.export_dir, db)
    assert sql(db, "select count(*) from context_assemblies where list_contains(tags, 'tokens:estimated')")[0][0] == 5
    assert sql(db, "select tool_name, status from tool_calls order by requested_at") == [
        ("shell", "failed"), ("mcp__db__query", "failed")]
    last = _records(db, 4)
    # the user's turns kept by the compaction (not the rolled-back one), its summary, the question
    assert [c for _, _, c in last] == ["run the build", "The user builds; make fails.", "what now?"]
    reasons = dict(sql(db, """select reason_code, count(*) from assembly_records
        where assembly_id = (select assembly_id from context_assemblies order by assembled_at
                             limit 1 offset 4) and decision = 'omitted' group by 1"""))
    assert reasons == {"compacted": 5, "superseded": 2}


def test_the_first_rollout_shape_is_read(tmp_path: Path) -> None:
    """2025 rollouts: the session line bare, then bare response items, no timestamps."""
    path = _write(tmp_path / "rollout-old.jsonl", [
        {"id": "o1", "timestamp": "2025-05-01T10:00:00Z", "instructions": None, "git": {}},
        {"record_type": "state"},
        _user("hello"),
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "abc"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hi"}]},
        {"record_type": "state"},
    ])
    assert detect_format(path) == "codex"
    db = _load(path, tmp_path)
    assert [c for _, _, c in _records(db, 0)] == ["hello"]
    assert sql(db, "select count(*) from model_runs")[0][0] == 1


def test_a_rollout_of_the_typescript_codex_cli_is_read(tmp_path: Path) -> None:
    """The TypeScript Codex CLI (2025) saved a session as one JSON document, {session,
    items}: its items are the Responses API items of the JSONL rollouts that followed it."""
    from ingest.adapters import detect_format

    items = [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "show main.py"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "read it"}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "shell",
         "arguments": json.dumps({"command": ["cat", "main.py"]})},
        {"type": "function_call_output", "call_id": "call_1",
         "output": json.dumps({"output": "print('hi')\n", "metadata": {"exit_code": 0}})},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It prints hi."}]},
    ]
    path = tmp_path / "rollout-2025-04-20-1a2b3c4d.json"
    path.write_text(json.dumps({"session": {"timestamp": "2025-04-20T10:11:12.345Z",
                                            "id": "1a2b3c4d", "instructions": ""},
                                "items": items}, indent=2))
    assert detect_format(path) == "codex"
    res = adapt(path, tmp_path / "export")
    assert not res.warnings, res.warnings
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    assert sql(db, "SELECT count(*) FROM context_assemblies") == [(2,)]  # the call, the answer
    assert sql(db, "SELECT tool_name, status FROM tool_calls") == [("shell", "succeeded")]
