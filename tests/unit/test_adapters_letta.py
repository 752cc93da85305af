"""The Letta agent file adapter: real v1 and v2 files (every expected number is computed here
from the raw JSON, independently of the adapter) and a hand-written v2 file with evicted
messages and a failed tool return."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.sql import sql

from ingest.adapters import adapt, detect_format
from ingest.store import ingest

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata" / "letta-agent-file"
V1 = REALDATA / "memgpt_agent_with_convo.af"
V2 = REALDATA / "lettabot-builder.af"
real = pytest.mark.skipif(not (V1.is_file() and V2.is_file()), reason=f"real agent files absent ({REALDATA})")


def _load(path: Path, tmp_path: Path) -> Path:
    res = adapt(path, tmp_path / "export")
    assert res.format == "letta"
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    return db


def _current(db: Path) -> list[tuple[str, str, str, str, int]]:
    """(conversation, decision, reason, kind, position) of the current-context records."""
    return sql(db, """select a.conversation_id, r.decision, r.reason_code, r.record_kind, r.position
                      from context_assemblies a join assembly_records r using (assembly_id)
                      order by a.conversation_id, r.decision, r.position""")


def _text(m: dict[str, Any]) -> str:
    return "\n".join(c.get("text", "") for c in m.get("content") or [] if c.get("type") == "text")


@real
def test_real_v1_file_current_context_is_its_in_context_messages(tmp_path: Path) -> None:
    raw = json.loads(V1.read_text())
    msgs = raw["messages"]
    db = _load(V1, tmp_path)
    steps = [m for m in msgs if m["role"] == "assistant"]
    calls = sum(len(m.get("tool_calls") or []) for m in steps)
    # one run per past LLM step, plus the agent's next request (its current context)
    assert sql(db, "select count(*) from model_runs")[0][0] == len(steps) + 1
    assert sql(db, "select count(*) from context_assemblies")[0][0] == 1
    assert sql(db, "select count(*) from tool_calls")[0][0] == calls
    inside = [m for m in msgs if m["in_context"]]
    in_calls = sum(len(m.get("tool_calls") or []) for m in inside if m["role"] == "assistant")
    blocks = len(raw["core_memory"])
    rows = _current(db)
    included = [r for r in rows if r[1] == "included"]
    assert len(included) == len(inside) + in_calls + blocks
    omitted = [r for r in rows if r[1] == "omitted"]
    assert len(omitted) == len(msgs) - len(inside)
    # the evicted part of this file is the older system prompts, recompiled on memory edits
    assert {r[2] for r in omitted} == {"superseded"}
    # the system prompt in context comes first, then the memory blocks, counted in it
    prompt = next(_text(m) for m in inside if m["role"] == "system" and not _text(m).startswith("{"))
    first = sql(db, """select m.content, r.tokens, m.speaker_label from assembly_records r
                       join messages m on m.message_id = r.record_id
                       where r.decision = 'included' order by r.position limit 3""")
    assert first[0][0] == prompt
    assert [(t, s) for _, t, s in first[1:]] == [(0, f"core memory: {b['label']}") for b in raw["core_memory"]]
    tags = sql(db, "select tags from context_assemblies")[0][0]
    assert "input:exact" in tags and "tokens:estimated" in tags
    assert sql(db, "select token_budget from context_assemblies")[0][0] == raw["llm_config"]["context_window"]


@real
def test_real_v2_file_one_conversation_per_agent_in_context_order(tmp_path: Path) -> None:
    raw = json.loads(V2.read_text())
    assert detect_format(V2) == "letta"
    db = _load(V2, tmp_path)
    agents = raw["agents"]
    assert sql(db, "select count(*) from conversations")[0][0] == len(agents)
    steps = sum(1 for a in agents for m in a["messages"] if m["role"] == "assistant")
    assert sql(db, "select count(*) from model_runs")[0][0] == steps + len(agents)
    calls = sum(len(m.get("tool_calls") or []) for a in agents for m in a["messages"])
    assert sql(db, "select count(*) from tool_calls")[0][0] == calls
    failed = sum(1 for a in agents for m in a["messages"] for r in m.get("tool_returns") or []
                 if r.get("status") == "error")
    assert sql(db, "select count(*) from tool_calls where status = 'failed'")[0][0] == failed
    for a in agents:
        byid = {m["id"]: m for m in a["messages"]}
        ctx = [byid[i] for i in a["in_context_message_ids"]]
        want = len(ctx) + sum(len(m.get("tool_calls") or []) for m in ctx) + len(a["block_ids"])
        got = sql(db, f"""select count(*) from context_assemblies a join assembly_records r using (assembly_id)
                          join conversations c on c.conversation_id = a.conversation_id
                          where r.decision = 'included' and c.title like 'Letta agent {a["name"]}%'""")[0][0]
        assert got == want, a["name"]


def _v2(messages: list[dict[str, Any]], in_context: list[str]) -> dict[str, Any]:
    return {"agents": [{"id": "agent-0", "name": "helper", "system": "base", "agent_type": "letta_v1_agent",
                        "llm_config": {"model": "claude-sonnet-4", "model_endpoint_type": "anthropic",
                                       "context_window": 50000},
                        "block_ids": ["block-0"], "messages": messages, "in_context_message_ids": in_context}],
            "blocks": [{"id": "block-0", "label": "human", "value": "Name: Ada", "limit": 5000}],
            "tools": [], "groups": [], "created_at": "2026-03-01T00:00:00Z"}


def _m(mid: str, role: str, text: str, t: str, **kw: Any) -> dict[str, Any]:
    return {"id": mid, "role": role, "content": [{"type": "text", "text": text}], "created_at": t, **kw}


def test_evicted_messages_are_omitted_and_failed_returns_fail(tmp_path: Path) -> None:
    msgs = [
        _m("m0", "system", "base\n<memory_blocks><human>Name: Ada</human></memory_blocks>", "2026-01-01T00:00:00Z"),
        _m("m1", "user", '{"type": "user_message", "message": "hi"}', "2026-01-01T00:00:01Z"),
        _m("m2", "assistant", "greeting", "2026-01-01T00:00:02Z",
           tool_calls=[{"id": "c1", "type": "function", "function": {"name": "send_message", "arguments": "{}"}}]),
        _m("m3", "tool", '{"status": "OK"}', "2026-01-01T00:00:03Z", tool_call_id="c1"),
        _m("m4", "user", '{"type": "system_alert", "message": "prior messages have been hidden"}',
           "2026-01-01T00:01:00Z"),
        _m("m5", "user", '{"type": "user_message", "message": "run it"}', "2026-01-01T00:01:01Z"),
        _m("m6", "assistant", "", "2026-01-01T00:01:02Z",
           tool_calls=[{"id": "c2", "type": "function", "function": {"name": "run", "arguments": "{}"}}]),
        _m("m7", "tool", "Traceback: boom", "2026-01-01T00:01:03Z", tool_call_id="c2",
           tool_returns=[{"tool_call_id": "c2", "status": "error", "stderr": ["boom"]}]),
    ]
    path = tmp_path / "agent.af"
    path.write_text(json.dumps(_v2(msgs, ["m0", "m4", "m5", "m6", "m7"])))
    assert detect_format(path) == "letta"
    db = _load(path, tmp_path)
    rows = sql(db, """select r.decision, r.reason_code, coalesce(m.content, c.tool_name, t.result_preview)
                      from assembly_records r
                      left join messages m on m.message_id = r.record_id
                      left join tool_calls c on c.tool_call_id = r.record_id
                      left join tool_artifacts t on t.artifact_id = r.record_id
                      order by r.decision, r.position, r.record_id""")
    included = [text for d, _, text in rows if d == "included"]
    assert included == [msgs[0]["content"][0]["text"], "Name: Ada", msgs[4]["content"][0]["text"],
                        msgs[5]["content"][0]["text"], "", "run", "Traceback: boom"]
    evicted = sorted(text for d, reason, text in rows if d == "omitted" and reason == "evicted")
    assert evicted == sorted([msgs[1]["content"][0]["text"], "greeting", "send_message", '{"status": "OK"}'])
    assert dict(sql(db, "select tool_name, status from tool_calls")) == {"send_message": "succeeded", "run": "failed"}
    assert sql(db, "select token_budget, model from context_assemblies")[0] == (50000, "claude-sonnet-4")


def test_an_agent_file_with_no_messages_nor_blocks_is_refused_in_one_line(tmp_path: Path) -> None:
    """Nothing to show is an error naming the file, not an empty request at an invented time."""
    from ingest.errors import ContextlensError

    path = tmp_path / "empty.af"
    path.write_text(json.dumps({"agents": [{"name": "a", "messages": []}], "tools": []}))
    assert detect_format(path) == "letta"
    with pytest.raises(ContextlensError) as err:
        adapt(path, tmp_path / "export")
    assert str(err.value) == f"{path}: no Letta agent with messages or memory blocks"
    assert not (tmp_path / "export").exists()


@real
def test_an_agent_file_encoded_as_a_json_string_reads_as_the_file(tmp_path: Path) -> None:
    # letta-ai/agent-file publishes some agents (workflow_agent) as the JSON text of the
    # file encoded once more: one JSON string. It is the same agent file.
    wrapped = tmp_path / "wrapped.af"
    wrapped.write_text(json.dumps(V2.read_text(encoding="utf-8")), encoding="utf-8")
    assert detect_format(wrapped) == "letta"
    plain, twice = tmp_path / "plain", tmp_path / "twice"
    plain.mkdir()
    twice.mkdir()
    # the same context, record for record (ids are made from the file's bytes: not compared)
    assert [r[1:] for r in _current(_load(wrapped, twice))] == [r[1:] for r in _current(_load(V2, plain))]
