"""The Gemini CLI session adapter: a hand-written session, real sessions (counts computed
here from the raw JSON, independently of the adapter), detection, and the command line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from support.cli import run, run_json
from support.sql import sql

from ingest.adapters import adapt, detect_format
from ingest.errors import ContextlensError
from ingest.store import ingest

FIX = Path(__file__).parents[1] / "adapter_fixtures"
SESSION = FIX / "gemini_session.json"
REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
REAL = [
    REALDATA / "gemini-cli-entire" / "f7633853-session.json",
    REALDATA / "codemie-code" / "session-2025-12-01T21-45-5b959dae.json",
]


def _load(path: Path, tmp_path: Path) -> Path:
    res = adapt(path, tmp_path / "export")
    assert res.format == "gemini-cli"
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    return db


def _included(db: Path, run_id_order: int) -> list[tuple[str, str]]:
    """(record kind, content or tool name) of one request's included records, in order."""
    return sql(
        db,
        f"""
        with a as (select assembly_id from context_assemblies order by assembled_at
                   limit 1 offset {run_id_order})
        select r.record_kind,
               coalesce(m.content, c.tool_name, t.result_preview)
        from assembly_records r join a using (assembly_id)
        left join messages m on r.record_kind = 'message' and m.message_id = r.record_id
        left join tool_calls c on r.record_kind = 'tool_call' and c.tool_call_id = r.record_id
        left join tool_artifacts t on r.record_kind = 'tool_artifact' and t.artifact_id = r.record_id
        where r.decision = 'included' order by r.position
        """,
    )


def test_fixture_requests_history_tools_and_failures(tmp_path: Path) -> None:
    assert detect_format(SESSION) == "gemini-cli"
    db = _load(SESSION, tmp_path)
    asm = sql(db, "select assembled_tokens, model, tags from context_assemblies order by assembled_at")
    assert [a[0] for a in asm] == [5000, 5200]  # the recorded tokens.input
    assert all(a[1] == "gemini-2.5-pro" and "tokens:recorded" in a[2] for a in asm)
    assert any(t.startswith("unattributed_tokens:") for t in asm[1][2])
    calls = sql(db, "select tool_name, status, arguments_json from tool_calls order by tool_name")
    assert [(c[0], c[1]) for c in calls] == [("read_file", "failed"), ("run_shell_command", "succeeded")]
    assert json.loads(calls[1][2]) == {"command": "wc -l notes.txt"}
    arts = dict(sql(db, "select tool_name, result_preview from tool_artifacts"))
    assert arts["run_shell_command"] == "42 notes.txt"
    assert "File not found" in arts["read_file"]
    assert sql(db, "select error from tool_artifacts where status = 'failed'")[0][0].startswith("File not found")
    # the first request sees the user's question; the second everything before it, tool
    # results included, but not the CLI's info notice (never sent to the model)
    assert _included(db, 0) == [("message", "How many lines are in notes.txt? Also read missing.txt.")]
    second = _included(db, 1)
    assert [k for k, _ in second] == ["message", "message", "tool_call", "tool_artifact", "tool_call", "tool_artifact"]
    assert second[1][1] == "I will count the lines and read the other file."
    assert all("update available" not in (v or "") for _, v in second)
    assert sql(db, "select count(*) from messages where content = 'Gemini CLI update available!'")[0][0] == 1
    # thoughts are not stored
    assert sql(db, "select count(*) from messages where content like '%count lines first%'")[0][0] == 0


def test_cli_ingests_and_lists_a_gemini_session(capsys, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    code, out, err = run(capsys, "ingest", str(SESSION), "--db", str(db))
    assert code == 0, err
    rows = run_json(capsys, "list", "--db", str(db))
    assert sorted(r["assembled_tokens"] for r in rows) == [5000, 5200]
    code, out, err = run(capsys, "list", "--db", str(db))
    assert code == 0, err
    assert "gemini-2.5-pro" in out


def test_not_a_session_is_refused_by_name(tmp_path: Path) -> None:
    f = tmp_path / "chat.json"
    f.write_text(json.dumps({"sessionId": "x", "messages": [{"type": "tool_output", "content": "hi"}]}))
    with pytest.raises(ContextlensError, match="gemini-cli: messages have no \"type\" user/gemini"):
        detect_format(f)
    with pytest.raises(ContextlensError, match=r"chat\.json: not a Gemini CLI session"):
        adapt(f, tmp_path / "out", fmt="gemini-cli")


def _failed(tc: dict) -> bool:
    outputs = [r["functionResponse"]["response"] for r in tc.get("result") or []
               if isinstance(r, dict) and "functionResponse" in r]
    texts = [o.get("output") or "" for o in outputs if isinstance(o, dict)]
    return (tc.get("status") in ("error", "cancelled")
            or any(isinstance(o, dict) and o.get("error") for o in outputs)
            or any(re.search(r"^Exit Code: [1-9]\d*$", t, re.M) for t in texts))


def _expected(path: Path) -> dict:
    doc = json.loads(path.read_text(encoding="utf-8"))
    gem = [m for m in doc["messages"] if m.get("type") == "gemini"]
    calls = [tc for m in gem for tc in (m.get("toolCalls") or [])]
    return {
        "requests": len(gem),
        # a response the CLI recorded no usage for has zeros (or null): not a recorded count
        "tokens": sorted(m["tokens"]["input"] for m in gem if (m.get("tokens") or {}).get("input")),
        "tool_calls": len(calls),
        "failed": sum(_failed(tc) for tc in calls),
        "results": sum(bool(tc.get("result")) for tc in calls),
        "models": {m["model"] for m in gem},
    }


@pytest.mark.skipif(not all(p.is_file() for p in REAL), reason=f"real sessions absent ({REALDATA})")
@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_sessions(path: Path, tmp_path: Path) -> None:
    assert detect_format(path) == "gemini-cli"
    exp = _expected(path)
    db = _load(path, tmp_path)
    asm = sql(db, "select assembled_tokens, model, list_contains(tags, 'tokens:recorded') from context_assemblies")
    assert len(asm) == exp["requests"]
    assert sorted(a[0] for a in asm if a[2]) == exp["tokens"]
    assert {a[1] for a in asm} == exp["models"]
    assert sql(db, "select count(*) from tool_calls")[0][0] == exp["tool_calls"]
    assert sql(db, "select count(*) from tool_calls where status = 'failed'")[0][0] == exp["failed"]
    assert sql(db, "select count(*) from tool_artifacts")[0][0] == exp["results"]
    # full history: each request includes more records than the one before it
    sizes = [n for (n,) in sql(db, """
        select count(r.record_id) from context_assemblies a
        left join assembly_records r on r.assembly_id = a.assembly_id and r.decision = 'included'
        group by a.assembly_id, a.assembled_at order by a.assembled_at""")]
    assert sizes[0] >= 1 and all(b > a for a, b in zip(sizes, sizes[1:]))


LOG = FIX / "gemini_session.jsonl"


def test_jsonl_log_updates_rewinds_and_compression(tmp_path: Path) -> None:
    """The newer CLIs' append-only log: a message appended again is one message (its last
    version), a rewind drops the turns after it, a compression replaces the history."""
    assert detect_format(LOG) == "gemini-cli"
    db = _load(LOG, tmp_path)
    asm = sql(db, "select assembled_tokens, model, list_contains(tags, 'tokens:recorded') "
                  "from context_assemblies order by assembled_at")
    # g1 got its usage in a later line; every response is one request
    assert [(a[0], a[1]) for a in asm] == [(3000, "gemini-2.5-pro"), (3200, "gemini-2.5-pro"),
                                          (3300, "gemini-2.5-pro"), (900, "gemini-2.5-flash")]
    assert all(a[2] for a in asm)
    # the shell call whose command exited 1 failed, though the CLI's status says success
    assert sql(db, "select tool_name, status from tool_calls order by requested_at, tool_call_id") == [
        ("run_shell_command", "succeeded"), ("run_shell_command", "failed")]
    # the request after the rewind and the compression: the compression's turns and the
    # user's question only
    assert [v for _, v in _included(db, 3)] == [
        "<state_snapshot>the user listed files</state_snapshot>",
        "Got it. Thanks for the additional context!", "Summarise a.txt"]
    omitted = sql(db, """
        select r.reason_code, count(*) from assembly_records r
        where r.assembly_id = (select assembly_id from context_assemblies order by assembled_at
                               limit 1 offset 3) and r.decision = 'omitted' group by 1 order by 1""")
    # compacted: u1, g1's two calls and results, g2; superseded by the rewind: u2, g3
    assert omitted == [("compacted", 6), ("superseded", 2)]
    # no request made the compression's turns, and the CLI's notice is never sent
    assert sql(db, "select count(*) from messages where speaker_label = 'compression'")[0][0] == 2
    assert sql(db, "select count(*) from messages where model_run_id is null and role = 'assistant'")[0][0] == 1


def test_a_log_whose_lines_are_not_messages_is_refused(tmp_path: Path) -> None:
    f = tmp_path / "session-x.jsonl"
    f.write_text(json.dumps({"sessionId": "s", "projectHash": "p"}) + "\n"
                 + json.dumps({"kind": "other"}) + "\n")
    with pytest.raises(ContextlensError) as err:
        detect_format(f)
    assert str(err.value).startswith(
        f"{f}: looks like a Gemini CLI session (session metadata (sessionId, projectHash) on line 1) "
        "but does not match gemini-cli (lines after the metadata are not messages")


def test_media_parts_are_markers_not_their_base64(tmp_path: Path) -> None:
    # a screenshot attached to the prompt and a PDF that read_file returned: Gemini Parts
    # with inlineData (base64) or fileData, which the model receives as media, not text
    blob = "iVBORw0KGgo" * 4000  # 44 KB of base64
    session = {
        "sessionId": "s-media", "projectHash": "p", "startTime": "2026-04-01T09:00:00.000Z",
        "lastUpdated": "2026-04-01T09:01:00.000Z",
        "messages": [
            {"id": "u1", "timestamp": "2026-04-01T09:00:01.000Z", "type": "user",
             "content": [{"text": "What is in this screenshot?"},
                         {"inlineData": {"mimeType": "image/png", "data": blob}},
                         {"fileData": {"mimeType": "video/mp4", "fileUri": "gs://b/clip.mp4"}}]},
            {"id": "g1", "timestamp": "2026-04-01T09:00:02.000Z", "type": "gemini",
             "content": "", "model": "gemini-2.5-pro",
             "tokens": {"input": 1800, "output": 10, "total": 1810},
             "toolCalls": [{"id": "c1", "name": "read_file", "args": {"path": "spec.pdf"},
                            "status": "success", "timestamp": "2026-04-01T09:00:03.000Z",
                            "result": [{"functionResponse": {"id": "c1", "name": "read_file",
                                        "response": {"output": "Binary content provided (1 item(s))."}}},
                                       {"inlineData": {"mimeType": "application/pdf", "data": blob}}]}]},
            {"id": "g2", "timestamp": "2026-04-01T09:00:10.000Z", "type": "gemini",
             "content": "A login form.", "model": "gemini-2.5-pro",
             "tokens": {"input": 2900, "output": 5, "total": 2905}},
        ],
    }
    path = tmp_path / "session.json"
    path.write_text(json.dumps(session), encoding="utf-8")
    db = _load(path, tmp_path)
    prompt, tokens = sql(db, "select content, content_tokens from messages where role = 'user'")[0]
    assert prompt == "What is in this screenshot?\n[image]\n[video]"
    assert tokens < 30
    preview, art_tokens = sql(db, "select result_preview, content_tokens from tool_artifacts")[0]
    assert "[file]" in preview and "iVBOR" not in preview
    assert art_tokens < 30


def test_a_log_whose_messages_carry_the_session_id_is_still_gemini(tmp_path: Path) -> None:
    # some tools write the sessionId on every message line too; a user line with a
    # sessionId is also what a Claude Code line looks like, but a "gemini" line is not
    lines = (FIX / "gemini_session.jsonl").read_text(encoding="utf-8").splitlines()
    tagged = [lines[0]] + [json.dumps({**json.loads(ln), "sessionId": "s-1"}) for ln in lines[1:]
                           if ln.strip() and "type" in json.loads(ln)]
    path = tmp_path / "session.jsonl"
    path.write_text("\n".join(tagged) + "\n", encoding="utf-8")
    assert detect_format(path) == "gemini-cli"
    res = adapt(path, tmp_path / "export")
    assert res.stats["requests"] == adapt(FIX / "gemini_session.jsonl", tmp_path / "plain").stats["requests"]
