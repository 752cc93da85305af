"""The ESAA event log adapter: real logs of both event shapes (every expected number is
computed here from the raw lines, independently of the adapter), ESAA's context rule on a
hand-written log, and detection."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.sql import sql

from ingest.adapters import adapt, detect_format
from ingest.store import ingest

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata" / "conversation-esaa"
REAL = sorted(REALDATA.glob("*.jsonl")) if REALDATA.is_dir() else []


def _load(path: Path, tmp_path: Path) -> Path:
    res = adapt(path, tmp_path / "export")
    assert res.format == "esaa"
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    return db


def _agent(d: dict[str, Any]) -> str | None:
    """The agent acting in an event, None for the user and the orchestrator."""
    if d["actor"] in ("user", "orchestrator"):
        return None
    return d.get("agent_id") or d.get("source") if d["actor"] == "assistant" else d["actor"]


def _sees(agent: str, d: dict[str, Any]) -> bool:
    return agent in (d.get("agent_id"), d.get("source"), _agent(d))


def _expected(path: Path) -> list[tuple[str, int, int]]:
    """Per agent event, in log order: (agent, included, omitted) by `context --agent A --last 20`
    over the earlier events of its workspace."""
    events = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    out = []
    for i, d in enumerate(events):
        agent = _agent(d)
        if agent is None:
            continue
        before = [e for e in events[:i] if e.get("workspace_root") == d.get("workspace_root")]
        visible = [e for e in before if _sees(agent, e)]
        out.append((agent, min(len(visible), 20), len(before) - min(len(visible), 20)))
    return out


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_real_logs_one_request_per_agent_event_by_the_context_rule(path: Path, tmp_path: Path) -> None:
    assert detect_format(path) == "esaa"
    db = _load(path, tmp_path)
    rows = sql(db, """select p.label, a.included_count, a.omitted_count, a.tags from (
                        select a.assembly_id, a.participant_id, a.assembled_at, a.tags,
                               count(*) filter (where r.decision = 'included') as included_count,
                               count(*) filter (where r.decision = 'omitted') as omitted_count
                        from context_assemblies a left join assembly_records r using (assembly_id)
                        group by all) a
                      join participants p using (participant_id)
                      order by a.assembled_at, length(a.assembly_id), a.assembly_id""")
    assert [(who, inc, om) for who, inc, om, _ in rows] == _expected(path)
    assert all("runtime:esaa.last_n=20" in tags and "tokens:estimated" in tags for *_, tags in rows)
    lines = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    assert sql(db, "select count(*) from messages")[0][0] == len(lines)
    assert sql(db, "select count(*) from conversations")[0][0] == len({d.get("workspace_root") for d in lines})
    assert sql(db, "select count(*) from tool_calls")[0][0] == 0


def _turn(i: int, actor: str, agent: str | None, source: str | None, text: str) -> dict[str, Any]:
    return {"event_id": f"e{i}", "ts": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z", "event": "conversation_turn",
            "actor": actor, "agent_id": agent, "source": source, "workspace_root": "w", "text": text}


def test_context_is_the_last_20_events_visible_to_the_agent(tmp_path: Path) -> None:
    lines = [_turn(0, "user", None, "codex", "start")]
    lines += [_turn(i, "assistant", "grok", "grok", f"grok {i}") for i in range(1, 25)]
    lines += [_turn(25, "assistant", "codex", "codex", "codex acts")]
    lines += [{"event_id": "e26", "ts": "2026-01-01T00:00:26Z", "event": "decision.recorded", "actor": "assistant",
               "agent_id": "grok", "workspace_root": "w", "decision": "Use hooks", "rationale": "simpler"}]
    path = tmp_path / "activity.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    db = _load(path, tmp_path)
    last = sql(db, """select r.decision, r.reason_code, m.content from context_assemblies a
                      join assembly_records r using (assembly_id) join messages m on m.message_id = r.record_id
                      where 'esaa_event:e26' in a.tags order by r.decision, r.position, m.created_at""")
    included = [c for d, _, c in last if d == "included"]
    assert included == [f"grok {i}" for i in range(5, 25)]  # the last 20 of grok's, in order
    reasons = {c: reason for d, reason, c in last if d == "omitted"}
    assert reasons["grok 4"] == "outside_window" and reasons["codex acts"] == "participant_private"
    assert reasons["start"] == "participant_private"  # captured from codex's session
    codex = sql(db, """select m.content from context_assemblies a join assembly_records r using (assembly_id)
                       join messages m on m.message_id = r.record_id
                       where 'esaa_event:e25' in a.tags and r.decision = 'included'""")
    assert codex == [("start",)]
    decision = sql(db, "select content from messages where content like 'decision.recorded%'")[0][0]
    assert "decision: Use hooks" in decision and "rationale: simpler" in decision


def test_lines_that_are_not_events_are_warnings(tmp_path: Path) -> None:
    path = tmp_path / "activity.jsonl"
    good = {"event_id": "EV-1", "event_seq": 1, "ts": "2026-01-01T00:00:00Z", "actor": "agent-impl",
            "action": "claim", "payload": {"task_id": "T-1"}}
    path.write_text(json.dumps(good) + "\n{broken\n" + json.dumps({"hello": 1}) + "\n")
    res = adapt(path, tmp_path / "export")
    assert res.format == "esaa" and res.stats["requests"] == 1
    assert any("line 2: malformed JSON" in w for w in res.warnings)
    assert any("line 3: not an ESAA event" in w for w in res.warnings)
