"""The adapters on real third-party logs (../shared/realdata beside the clone).

Every expected number is computed here from the raw file with plain json parsing,
independently of the adapter, and compared with what the adapter wrote after ingesting it
into a store.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Callable

import duckdb
import pytest
from support.sql import sql

from ingest.adapters.tokens import exact_estimator
from ingest.adapters import adapt, detect_format
from ingest.store import Store, ingest

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
pytestmark = pytest.mark.skipif(
    not REALDATA.is_dir(), reason=f"real transcripts not present ({REALDATA} is absent)"
)

CLAUDE = sorted((REALDATA / "claude-code-spotter").glob("*.jsonl")) if REALDATA.is_dir() else []
OPENAI = (
    [REALDATA / "tau-bench" / "gpt-4o-airline.first3.json", *sorted((REALDATA / "swe-agent").glob("*.traj"))]
    if REALDATA.is_dir()
    else []
)


def _load(path: Path, tmp_path: Path) -> tuple[Path, object]:
    res = adapt(path, tmp_path / "export")
    db = tmp_path / "store.duckdb"
    ing = ingest(res.export_dir, db)
    assert ing.changed
    return db, res


def _lines(path: Path) -> list[dict]:
    out = []
    for raw in path.read_bytes().splitlines():
        try:
            d = json.loads(raw)
        except ValueError:
            continue
        if isinstance(d, dict):
            out.append(d)
    return out


def _claude_expected(path: Path) -> dict:
    files = [path]
    sub = path.parent / path.stem / "subagents"
    subfiles = sorted(sub.glob("agent-*.jsonl")) if sub.is_dir() else []
    usage: dict[tuple[str, str], int] = {}
    calls: dict[str, str] = {}  # tool_use id -> request key
    results: dict[str, bool] = {}
    per_req_calls: Counter = Counter()
    boundaries = 0
    after_compaction = 0
    child_requests = 0
    tasks = 0
    for f in files + subfiles:
        seen_boundary = False
        for d in _lines(f):
            if d.get("type") == "system" and d.get("subtype") == "compact_boundary":
                boundaries += 1
                seen_boundary = True
            msg = d.get("message") if isinstance(d.get("message"), dict) else {}
            if d.get("type") == "assistant" and msg.get("model") != "<synthetic>":
                key = (f.name, d.get("requestId") or msg.get("id"))
                if key not in usage:
                    u = msg.get("usage") or {}
                    usage[key] = sum(
                        u.get(k, 0)
                        for k in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
                    )
                    if f in subfiles:
                        child_requests += 1
                    elif seen_boundary:
                        after_compaction += 1
                for b in msg.get("content") or []:
                    if isinstance(b, dict) and b.get("type") == "tool_use" and b["id"] not in calls:
                        calls[b["id"]] = key
                        per_req_calls[key] += 1
                        tasks += b.get("name") == "Task"
            if d.get("type") == "user" and isinstance(msg.get("content"), list):
                for b in msg["content"]:
                    if isinstance(b, dict) and b.get("type") == "tool_result":
                        results.setdefault(b.get("tool_use_id"), bool(b.get("is_error")))
    answered = {k: v for k, v in results.items() if k in calls}
    return {
        "requests": len(usage),
        "tokens": sorted(usage.values()),
        "tool_calls": len(calls),
        "failed": sum(answered.values()),
        "pending": len(calls) - len(answered),
        "parallel_groups": sum(1 for n in per_req_calls.values() if n >= 2),
        # the compaction summariser works for the main agent: not a subagent participant
        "subagent_files": sum(1 for f in subfiles if not f.name.startswith("agent-acompact")),
        "summarisers": sum(1 for f in subfiles if f.name.startswith("agent-acompact")),
        "child_requests": child_requests,
        "compactions": boundaries,
        "after_compaction": after_compaction,
        "tasks": tasks,
    }


@pytest.mark.parametrize("path", CLAUDE, ids=lambda p: p.name)
def test_claude_code_real(path: Path, tmp_path: Path) -> None:
    assert detect_format(path) == "claude-code"
    exp = _claude_expected(path)
    db, res = _load(path, tmp_path)
    assert res.format == "claude-code"
    with Store.open(db) as s:
        rows = s.list_assemblies().to_pylist()
    assert len(rows) == exp["requests"]
    assert sorted(r["assembled_tokens"] for r in rows) == exp["tokens"]
    assert all("source:claude-code" in r["tags"] and f"transcript:{path.name}" in r["tags"] for r in rows)
    assert all(r["policy_version"] == "claude-code" for r in rows)
    assert sql(db, "select count(*) from tool_calls")[0][0] == exp["tool_calls"]
    status = dict(sql(db, "select status, count(*) from tool_calls group by all"))
    assert status.get("failed", 0) == exp["failed"]
    assert status.get("pending", 0) == exp["pending"]
    assert sql(db, "select count(distinct parallel_group) from tool_calls")[0][0] == exp["parallel_groups"]
    # one artifact and one mechanical memory per answered call
    answered = exp["tool_calls"] - exp["pending"]
    assert sql(db, "select count(*) from tool_artifacts")[0][0] == answered
    assert sql(db, "select count(*) from tool_memories where trust_source = 'mechanical'")[0][0] == answered
    # subagents: child runs linked to a parent run, owned by subagent participants
    kinds = dict(sql(db, "select runtime_kind, count(*) from model_runs group by all"))
    assert kinds.get("subagent_child", 0) == exp["child_requests"]
    assert sql(
        db, "select count(*) from model_runs where runtime_kind='subagent_child' and parent_model_run_id is null"
    )[0][0] == 0
    assert sql(db, "select count(*) from participants where kind='subagent'")[0][0] == exp["subagent_files"]
    # the main session is one agent whatever model each request used
    assert sql(db, "select count(*) from participants where kind='model'")[0][0] == 1
    # the compaction summariser is sent the parent's history up to the compaction: at
    # least everything the last main request before it was sent, but the thinking of its
    # tool-use loop (the summariser's request is a new user turn: the API strips it)
    for (summariser, at) in sql(db, "select assembly_id, assembled_at from context_assemblies "
                                    "where list_contains(tags, 'compaction_summariser')"):
        earlier = sql(db, "select assembly_id from context_assemblies where runtime_kind <> "
                          f"'subagent_child' and assembled_at < '{at}' "
                          "order by assembled_at desc limit 1")
        before = earlier[0][0] if earlier else None
        sent = set(sql(db, "select record_kind, record_id from assembly_records where "
                           f"assembly_id = '{summariser}' and decision = 'included'"))
        if before is not None:
            parent = set(sql(db, "select record_kind, record_id from assembly_records where "
                                 f"assembly_id = '{before}' and decision = 'included'"))
            stripped = set(sql(db, "select record_kind, record_id from assembly_records where "
                                   f"assembly_id = '{summariser}' and reason_code = 'outside_window'"))
            assert parent and parent - stripped <= sent
    assert len(sql(db, "select 1 from context_assemblies where list_contains(tags, "
                       "'compaction_summariser')")) == exp["summarisers"]
    # compaction: each request after a boundary omits earlier records as compacted
    compacted = sql(
        db, "select count(distinct assembly_id) from assembly_records where reason_code='compacted'"
    )[0][0]
    assert compacted == exp["after_compaction"]
    assert res.stats.get("compactions", 0) == exp["compactions"]
    if exp["compactions"]:
        detail = sql(db, "select any_value(detail) from assembly_records where reason_code='compacted'")[0][0]
        assert "preTokens" in detail
        summary = sql(
            db,
            "select count(*) from assembly_records r join messages m on r.record_id = m.message_id "
            "where m.speaker_label = 'compact summary' and r.decision = 'included'",
        )[0][0]
        assert summary == exp["after_compaction"]
    # unattributed tokens: recorded input minus the included records' estimate, in the tags
    for r in rows:
        tag = next(t for t in r["tags"] if t.startswith("unattributed_tokens:"))
        assert res.unattributed_tokens[r["assembly_id"]] == int(tag.split(":")[1])


def _est(text: str) -> int:
    return math.ceil(len(text.encode("utf-8")) / 4)


def _text(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if isinstance(p, dict))


def _openai_expected(path: Path, est: Callable[[str], int]) -> dict:
    raw = json.loads(path.read_text())
    convs = [e.get("traj") or e.get("messages") for e in raw] if isinstance(raw, list) else [raw.get("history") or raw.get("messages")]
    requests, tokens, calls, failed, parallel, pending = 0, [], 0, 0, 0, 0
    for msgs in convs:
        running = 0
        ids: set[str] = set()
        for m in msgs:
            if m["role"] == "assistant":
                requests += 1
                tokens.append(running)
            tcs = m.get("tool_calls") or []
            calls += len(tcs)
            parallel += len(tcs) >= 2
            running += est(_text(m.get("content")))
            for tc in tcs:
                ids.add(tc["id"])
                args = tc["function"]["arguments"]
                running += est(tc["function"]["name"] + " " + args)
            if m["role"] == "tool":
                answered = [m["tool_call_id"]] if m.get("tool_call_id") else m.get("tool_call_ids", [])
                ids -= set(answered)
                failed += _text(m.get("content")).lstrip().lower().startswith("error")
        pending += len(ids)
        if isinstance(raw, dict) and isinstance(raw.get("trajectory"), list):
            # SWE-agent 1.x writes the step that ends the run (its submit) to the trajectory
            # only: one more model call, sent the whole history
            for step in raw["trajectory"][sum(m["role"] == "assistant" for m in msgs):]:
                requests += 1
                tokens.append(running)
                running += est(step["response"])
    return dict(requests=requests, tokens=sorted(tokens), calls=calls, failed=failed,
                parallel=parallel, pending=pending, conversations=len(convs))


@pytest.mark.parametrize("path", OPENAI, ids=lambda p: p.name)
def test_openai_chat_real(path: Path, tmp_path: Path) -> None:
    assert detect_format(path) == "openai-chat"
    # SWE-agent names its model (gpt-4o) in replay_config: counted with its own tokenizer
    exact = exact_estimator(["gpt-4o"]) if path.suffix == ".traj" else None
    exp = _openai_expected(path, exact.count if exact else _est)
    db, res = _load(path, tmp_path)
    assert res.warnings == []
    with Store.open(db) as s:
        rows = s.list_assemblies().to_pylist()
        assert len(s.conversations()) == exp["conversations"]
    assert len(rows) == exp["requests"]
    assert sorted(r["assembled_tokens"] for r in rows) == exp["tokens"]
    assert all("tokens:estimated" in r["tags"] for r in rows)
    assert all(("tokens:exact:o200k_base" in r["tags"]) == (exact is not None) for r in rows)
    assert all(r["omitted_count"] == 0 for r in rows)
    assert sql(db, "select count(*) from tool_calls")[0][0] == exp["calls"]
    status = dict(sql(db, "select status, count(*) from tool_calls group by all"))
    assert status.get("failed", 0) == exp["failed"]
    assert status.get("pending", 0) == exp["pending"]
    assert sql(db, "select count(distinct parallel_group) from tool_calls")[0][0] == exp["parallel"]
    stats = (json.loads(path.read_text()).get("info") or {}).get("model_stats") if path.suffix == ".traj" else None
    if stats:
        # SWE-agent's own count of its model calls and of the tokens it sent them: every
        # call is a request (the last one too), and the reconstructed inputs add up
        assert len(rows) == stats["api_calls"]
        assert abs(sum(r["assembled_tokens"] for r in rows) - stats["tokens_sent"]) <= stats["tokens_sent"] // 100


MINI = sorted((REALDATA / "mini-swe-agent").glob("*.traj.json")) if REALDATA.is_dir() else []


@pytest.mark.parametrize("path", MINI, ids=lambda p: p.name)
def test_mini_swe_agent_real(path: Path, tmp_path: Path) -> None:
    """Each request's recorded input is the usage of the provider response the trajectory
    kept (extra.response), with that response's model, in the file's order."""
    raw = json.loads(path.read_text())
    responses = [m["extra"]["response"] for m in raw["messages"]
                 if m.get("role") == "assistant" and isinstance(m.get("extra"), dict)]
    assert responses
    db, res = _load(path, tmp_path)
    assert res.format == "openai-chat"
    rows = sql(db, "select a.assembled_tokens, a.tags, r.model from context_assemblies a "
                   "join model_runs r on r.model_run_id = a.model_run_id order by a.assembled_at, a.assembly_id")
    assert [t for t, _, _ in rows] == [r["usage"]["prompt_tokens"] for r in responses]
    assert all("tokens:recorded" in tags for _, tags, _ in rows)
    assert {m for _, _, m in rows} == {r["model"] for r in responses}


def test_claude_code_2_0_subagents_beside_the_session(tmp_path: Path) -> None:
    # Claude Code 2.0 kept a session's subagent transcripts beside it, agent-<id>.jsonl in
    # the project folder with other sessions' agents; 2.1 moved them to <session>/subagents/.
    # Both layouts give the same requests; another session's agent beside it is not read,
    # and a session whose subagents are nowhere says so.
    session = REALDATA / "claude-code-spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    agent = session.parent / session.stem / "subagents" / "agent-a881341.jsonl"
    folder = adapt(session, tmp_path / "folder")
    assert folder.stats["subagents"] >= 1

    project = tmp_path / "project"
    project.mkdir()
    (project / session.name).write_bytes(session.read_bytes())
    for f in agent.parent.glob("agent-*.jsonl"):
        (project / f.name).write_bytes(f.read_bytes())
    # a first line over 1 MB (a prompt with a pasted file): its session is still found
    lines = (project / agent.name).read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    first["toolUseResult"] = "x" * (3 << 19)
    (project / agent.name).write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n",
                                      encoding="utf-8")
    other = [json.dumps({**d, "sessionId": "another-session", "agentId": "b000001"})
             for d in _lines(agent)]
    (project / "agent-b000001.jsonl").write_text("\n".join(other) + "\n", encoding="utf-8")
    beside = adapt(project / session.name, tmp_path / "beside")
    child = "select count(*) from context_assemblies where runtime_kind = 'subagent_child'"
    folder_db, beside_db = tmp_path / "f.duckdb", tmp_path / "b.duckdb"
    ingest(folder.export_dir, folder_db)
    ingest(beside.export_dir, beside_db)
    assert sql(beside_db, child) == sql(folder_db, child) != [(0,)]
    assert not any("b000001" in w for w in beside.warnings)

    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / session.name).write_bytes(session.read_bytes())
    res = adapt(alone / session.name, tmp_path / "alone-export")
    assert any("subagent call(s) without a transcript" in w and "not in the store" in w
               for w in res.warnings), res.warnings
