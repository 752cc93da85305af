"""The inspect_ai eval log adapter (.json and .eval): real logs (every expected number is
computed here from the raw file with plain json / zipfile, independently of the adapter),
hand-built logs of newer versions (message pool, attachments, compaction, epochs), and
detection."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from support.cli import run, run_json
from support.sql import sql

from ingest.adapters import adapt, detect_format
from ingest.errors import ContextlensError
from ingest.store import ingest

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata" / "inspect-ai"
JSON_LOG = REALDATA / "2025-05-12T20-27-36-04-00_browser.json"
EVAL_LOG = next(iter(sorted(REALDATA.glob("*.eval"))), REALDATA / "absent.eval") if REALDATA.is_dir() else REALDATA
real = pytest.mark.skipif(not (JSON_LOG.is_file() and EVAL_LOG.is_file()),
                          reason=f"real inspect_ai logs absent ({REALDATA})")


def _load(path: Path, tmp_path: Path) -> Path:
    res = adapt(path, tmp_path / "export")
    assert res.format == "inspect-ai"
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    return db


def _included_texts(db: Path) -> list[list[tuple[str, str]]]:
    """Per request (in time order): (kind, text) of its included records, in prompt order.
    A tool artifact's text is its blob body's preview, a tool call's its name."""
    rows = sql(db, """
        select a.assembly_id, r.position, r.record_kind,
               coalesce(m.content, c.tool_name, t.result_preview)
        from context_assemblies a join assembly_records r using (assembly_id)
        left join messages m on r.record_kind = 'message' and m.message_id = r.record_id
        left join tool_calls c on r.record_kind = 'tool_call' and c.tool_call_id = r.record_id
        left join tool_artifacts t on r.record_kind = 'tool_artifact' and t.artifact_id = r.record_id
        where r.decision = 'included' order by a.assembled_at, a.assembly_id, r.position""")
    out: dict[str, list[tuple[str, str]]] = {}
    for aid, _, kind, text in rows:
        out.setdefault(aid, []).append((kind, text or ""))
    return list(out.values())


def _resolve(value: Any, attachments: dict[str, str]) -> Any:
    if isinstance(value, str) and value.startswith("attachment://"):
        return attachments.get(value[len("attachment://"):], value)
    if isinstance(value, list):
        return [_resolve(v, attachments) for v in value]
    if isinstance(value, dict):
        return {k: _resolve(v, attachments) for k, v in value.items()}
    return value


def _expected_inputs(sample: dict[str, Any]) -> list[list[tuple[str, str]]]:
    """What each model event was sent, as (kind, text) records: a message, then a tool call
    per tool_calls entry of an assistant message; a tool message is the call's result."""
    att = sample.get("attachments") or {}
    out = []
    for e in sample["events"]:
        if e["event"] != "model":
            continue
        recs = []
        for m in _resolve(e["input"], att):
            text = m["content"] if isinstance(m["content"], str) else "\n".join(
                c["text"] for c in m["content"] if c.get("type") == "text")
            if m["role"] == "tool":
                recs.append(("tool_artifact", text[:400]))
            else:
                recs.append(("message", text))
                recs += [("tool_call", c["function"]) for c in m.get("tool_calls") or []]
        out.append(recs)
    return out


# --------------------------------------------------------------------------- real logs


@real
def test_real_json_log_requests_are_exactly_their_recorded_inputs(tmp_path: Path) -> None:
    raw = json.loads(JSON_LOG.read_text())
    samples = raw["samples"]
    events = [e for s in samples for e in s["events"] if e["event"] == "model"]
    db = _load(JSON_LOG, tmp_path)
    assert sql(db, "select count(*) from conversations")[0][0] == len(samples)
    assert sql(db, "select count(*) from model_runs")[0][0] == len(events)
    # recorded input tokens: the provider's own prompt_tokens of each call
    got = [t for (t,) in sql(db, "select assembled_tokens from context_assemblies order by assembled_at")]
    assert got == [e["call"]["response"]["usage"]["prompt_tokens"] for e in events]
    assert all("input:exact" in tags and "tokens:recorded" in tags
               for (tags,) in sql(db, "select tags from context_assemblies"))
    # tool calls: one per tool_calls entry of a model output; failures from tool errors
    calls = [c for e in events for ch in e["output"]["choices"] for c in ch["message"].get("tool_calls") or []]
    assert sql(db, "select count(*) from tool_calls")[0][0] == len(calls)
    errors = sum(1 for s in samples for e in s["events"] if e["event"] == "tool" and e.get("error"))
    assert sql(db, "select count(*) from tool_calls where status = 'failed'")[0][0] == errors
    assert sql(db, "select count(*) from tool_calls where status = 'pending'")[0][0] == 0
    # each request's included records are its recorded input, in order, attachments resolved
    assert _included_texts(db) == [r for s in samples for r in _expected_inputs(s)]
    # one message sent to five requests is one record
    first_user = samples[0]["messages"][0]["id"]
    assert sql(db, "select count(*) from messages where role = 'user'")[0][0] == 1, first_user


@real
def test_real_eval_archive_one_conversation_per_sample(tmp_path: Path) -> None:
    with zipfile.ZipFile(EVAL_LOG) as z:
        samples = [json.loads(z.read(n)) for n in z.namelist() if n.startswith("samples/")]
    events = [e for s in samples for e in s["events"] if e["event"] == "model"]
    db = _load(EVAL_LOG, tmp_path)
    assert sql(db, "select count(*) from conversations")[0][0] == len(samples)
    assert sql(db, "select count(*) from model_runs")[0][0] == len(events)
    got = sorted(t for (t,) in sql(db, "select assembled_tokens from context_assemblies"))
    assert got == sorted(e["output"]["usage"]["input_tokens"] for e in events)
    # every conversation's request is sent its system prompt and the sample's question
    by_conv = sql(db, "select a.conversation_id, count(*) from context_assemblies a "
                      "join assembly_records r using (assembly_id) where r.decision = 'included' group by all")
    assert sorted(n for _, n in by_conv) == sorted(len(e["input"]) for e in events)
    titles = {t for (t,) in sql(db, "select title from conversations")}
    assert all(t.startswith("popularity sample ") and " epoch 1: " in t for t in titles)


@real
def test_real_logs_are_detected_and_listed(capsys, tmp_path: Path) -> None:
    assert detect_format(JSON_LOG) == "inspect-ai"
    assert detect_format(EVAL_LOG) == "inspect-ai"
    db = tmp_path / "s.duckdb"
    code, _, err = run(capsys, "ingest", str(EVAL_LOG), "--db", str(db))
    assert code == 0, err
    rows = run_json(capsys, "list", "--db", str(db))
    with zipfile.ZipFile(EVAL_LOG) as z:
        n = sum(1 for name in z.namelist() if name.startswith("samples/"))
    assert len(rows) == n


# --------------------------------------------------------------------------- newer versions


def _msg(mid: str | None, role: str, content: Any, **kw: Any) -> dict[str, Any]:
    m = {"role": role, "content": content, **kw}
    if mid is not None:
        m["id"] = mid
    return m


def _model_event(ts: str, refs: list[list[int]] | None, inp: list[Any] | None, out: dict[str, Any],
                 usage: dict[str, int], **kw: Any) -> dict[str, Any]:
    e = {"event": "model", "timestamp": ts, "model": "anthropic/claude-sonnet-4", "tools": [],
         "tool_choice": "auto", "config": {}, "input": inp or [],
         "output": {"model": "claude-sonnet-4", "choices": [{"message": out, "stop_reason": "stop"}],
                    "usage": usage}, **kw}
    if refs is not None:
        e["input_refs"] = refs
    return e


LONG = "x" * 300
SYSTEM = _msg("s1", "system", "You are careful.")
USER = _msg("u1", "user", "attachment://aaa")
A1 = _msg("a1", "assistant", [{"type": "reasoning", "reasoning": "think", "redacted": False},
                              {"type": "text", "text": "Let me look."}],
          tool_calls=[{"id": "call_1", "function": "bash", "arguments": {"cmd": "ls"}},
                      {"id": "call_2", "function": "bash", "arguments": {"cmd": "false"}}])
T1 = _msg("t1", "tool", "file.txt", tool_call_id="call_1", function="bash")
T2 = _msg("t2", "tool", "", tool_call_id="call_2", function="bash",
          error={"type": "unknown", "message": "exit status 1"})
SUMMARY = _msg("sum", "user", "Summary of the work so far: listed files.")
A2 = _msg("a2", "assistant", "Done.")


def _newer_sample(epoch: int) -> dict[str, Any]:
    """A sample as inspect_ai >= 0.3.1xx writes it: inputs pooled in events_data and referred
    to by input_refs, long text in attachments, a compaction between the two requests."""
    pool = [SYSTEM, USER, A1, T1, T2, SUMMARY]
    # anthropic usage: input_tokens excludes the cache counts, total adds them all
    u1 = {"input_tokens": 100, "output_tokens": 20, "total_tokens": 1120, "input_tokens_cache_write": 1000}
    u2 = {"input_tokens": 50, "output_tokens": 5, "total_tokens": 1055, "input_tokens_cache_read": 1000}
    return {
        "id": "q1", "epoch": epoch, "input": "attachment://aaa", "target": "", "messages": [
            SYSTEM, SUMMARY, A2], "output": {}, "metadata": {}, "attachments": {"aaa": LONG},
        "events_data": {"messages": pool, "calls": []},
        "events": [
            {"event": "sample_init", "timestamp": "2026-01-01T10:00:00Z", "sample": {}, "state": {}},
            _model_event("2026-01-01T10:00:01Z", [[0, 2]], None, A1, u1, completed="2026-01-01T10:00:02Z"),
            {"event": "tool", "timestamp": "2026-01-01T10:00:03Z", "id": "call_1", "function": "bash",
             "arguments": {"cmd": "ls"}, "result": "file.txt", "completed": "2026-01-01T10:00:04Z"},
            {"event": "tool", "timestamp": "2026-01-01T10:00:03Z", "id": "call_2", "function": "bash",
             "arguments": {"cmd": "false"}, "result": "", "error": {"type": "unknown", "message": "exit status 1"},
             "completed": "2026-01-01T10:00:04Z"},
            {"event": "compaction", "timestamp": "2026-01-01T10:00:05Z", "tokens_before": 900,
             "tokens_after": 100, "source": "inspect"},
            {"event": "brand_new_kind", "timestamp": "2026-01-01T10:00:05Z"},
            _model_event("2026-01-01T10:00:06Z", [[0, 1], [5, 6]], None, A2, u2),
        ],
    }


def _newer_log() -> dict[str, Any]:
    return {"version": 2, "status": "success",
            "eval": {"task": "demo", "model": "anthropic/claude-sonnet-4", "created": "2026-01-01T10:00:00Z"},
            "plan": {}, "results": {}, "stats": {}, "samples": [_newer_sample(1), _newer_sample(2)]}


def _check_newer(db: Path) -> None:
    # epochs are kept apart: one conversation each, two requests each
    assert sql(db, "select count(*) from conversations")[0][0] == 2
    assert sql(db, "select count(*) from model_runs")[0][0] == 4
    texts = _included_texts(db)
    reasoning_text = "[reasoning] think\nLet me look."
    first = [("message", "You are careful."), ("message", LONG)]
    second = [("message", "You are careful."), ("message", "Summary of the work so far: listed files.")]
    assert texts == [first, first, second, second]  # the epochs run at the same times
    # anthropic-style usage: input plus cache reads and writes
    got = [t for (t,) in sql(db, "select assembled_tokens from context_assemblies order by assembled_at, assembly_id")]
    assert got == [1100, 1100, 1050, 1050]
    # the second request left out what the compaction dropped: compacted, not merely evicted
    reasons = sql(db, """select r.reason_code, count(*) from assembly_records r join context_assemblies a
                         using (assembly_id) where r.decision = 'omitted' group by all""")
    assert dict(reasons) == {"compacted": 2 * 6}  # user, assistant, 2 calls, 2 results per epoch
    assert sql(db, f"select count(*) from messages where content = '{reasoning_text}'")[0][0] == 2
    status = dict(sql(db, "select status, count(*) from tool_calls group by all"))
    assert status == {"succeeded": 2, "failed": 2}
    assert sql(db, "select count(distinct parallel_group) from tool_calls")[0][0] == 2
    # the final history's last answer is stored although no request was sent it
    assert sql(db, "select count(*) from messages where content = 'Done.'")[0][0] == 2


def test_newer_json_log_with_pool_attachments_and_compaction(tmp_path: Path) -> None:
    path = tmp_path / "log.json"
    path.write_text(json.dumps(_newer_log()))
    assert detect_format(path) == "inspect-ai"
    res = adapt(path, tmp_path / "export")
    assert any("brand_new_kind" in w for w in res.warnings)
    assert res.stats["unknown:event kind 'brand_new_kind'"] == 2
    db = tmp_path / "s.duckdb"
    ingest(res.export_dir, db)
    _check_newer(db)


def test_eval_archive_of_the_same_log(tmp_path: Path) -> None:
    log = _newer_log()
    path = tmp_path / "run.eval"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("_journal/start.json", json.dumps({"version": 2, "eval": log["eval"], "plan": {}}))
        for s in reversed(log["samples"]):
            z.writestr(f"samples/{s['id']}_epoch_{s['epoch']}.json", json.dumps(s))
        z.writestr("header.json", json.dumps({k: v for k, v in log.items() if k != "samples"}))
    assert detect_format(path) == "inspect-ai"
    db = _load(path, tmp_path)
    _check_newer(db)
    titles = [t for (t,) in sql(db, "select title from conversations order by created_at, title")]
    assert titles == [f"demo sample q1 epoch 1: {LONG}"[:117] + "…", f"demo sample q1 epoch 2: {LONG}"[:117] + "…"]


def test_old_messages_without_ids_repeat_as_one_record_each(tmp_path: Path) -> None:
    """Logs before message ids: a message is known by role, content and occurrence, so two
    identical tool answers stay two records and each is reused by the next request."""
    user = {"role": "user", "content": "go"}
    a1 = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": "f", "arguments": {}}]}
    r1 = {"role": "tool", "content": "same", "tool_call_id": "c1"}
    a2 = {"role": "assistant", "content": "", "tool_calls": [{"id": "c2", "function": "f", "arguments": {}}]}
    r2 = {"role": "tool", "content": "same", "tool_call_id": "c2"}
    u = {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11}
    sample = {"id": 1, "epoch": 1, "input": "go", "target": "", "messages": [], "metadata": {}, "events": [
        _model_event("2025-01-01T00:00:01Z", None, [user], a1, u),
        _model_event("2025-01-01T00:00:02Z", None, [user, a1, r1], a2, u),
        _model_event("2025-01-01T00:00:03Z", None, [user, a1, r1, a2, r2], {"role": "assistant", "content": "ok"}, u),
    ]}
    path = tmp_path / "old.json"
    path.write_text(json.dumps({"version": 2, "eval": {"task": "t"}, "samples": [sample]}))
    db = _load(path, tmp_path)
    assert sql(db, "select count(*) from messages where role = 'user'")[0][0] == 1
    assert sql(db, "select count(*) from tool_artifacts")[0][0] == 2
    assert sql(db, "select count(*) from tool_calls where status = 'succeeded'")[0][0] == 2
    counts = [n for (n,) in sql(db, """select count(*) from context_assemblies a join assembly_records r
                                       using (assembly_id) group by a.assembly_id, a.assembled_at
                                       order by a.assembled_at""")]
    assert counts == [1, 4, 7]  # messages, calls and results: every request was sent it all
    assert sql(db, "select count(*) from assembly_records where decision = 'omitted'")[0][0] == 0


def test_a_zip_that_is_not_a_log_is_not_inspect(tmp_path: Path) -> None:
    path = tmp_path / "other.zip"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("readme.txt", "hello")
    with pytest.raises(ContextlensError) as err:
        detect_format(path)
    assert "inspect-ai: a zip without header.json" in str(err.value)


def test_a_damaged_sample_entry_is_one_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "bad.eval"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("header.json", json.dumps({"version": 2, "eval": {"task": "t"}}))
        z.writestr("samples/1_epoch_1.json", "{not json")
    with pytest.raises(ContextlensError, match=r"bad.eval: archive entry samples/1_epoch_1.json is not JSON"):
        adapt(path, tmp_path / "export")


def test_a_legacy_transcript_field_holds_the_events(tmp_path: Path) -> None:
    """Early logs kept a sample's events and attachments as transcript {events, content}."""
    u = {"input_tokens": 7, "output_tokens": 1, "total_tokens": 8}
    event = _model_event("2024-06-01T00:00:01Z", None, [{"role": "user", "content": "tc://h1"}],
                         {"role": "assistant", "content": "hello"}, u)
    sample = {"id": 1, "epoch": 1, "input": "hi", "target": "", "messages": [], "metadata": {},
              "transcript": {"events": [event], "content": {"h1": "a long question"}}}
    path = tmp_path / "v1.json"
    path.write_text(json.dumps({"version": 1, "eval": {"task": "t"}, "samples": [sample]}))
    db = _load(path, tmp_path)
    assert _included_texts(db) == [[("message", "a long question")]]
    assert sql(db, "select assembled_tokens from context_assemblies")[0][0] == 7


def test_lint_sees_results_after_text_and_an_unanswered_call(tmp_path: Path) -> None:
    """The input is exact, so where a result sat is known: text sent between a call and its
    result is flagged; a call the next request was sent without any result is an error."""
    from ingest.store import Store
    from replay.lint import lint

    u = {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11}
    user = {"id": "u", "role": "user", "content": "go"}
    a1 = {"id": "a1", "role": "assistant", "content": "", "tool_calls": [{"id": "c1", "function": "f", "arguments": {}}]}
    note = {"id": "n", "role": "user", "content": "Here is the result:"}
    r1 = {"id": "r1", "role": "tool", "content": "42", "tool_call_id": "c1"}
    a2 = {"id": "a2", "role": "assistant", "content": "", "tool_calls": [{"id": "c2", "function": "g", "arguments": {}}]}
    sample = {"id": 1, "epoch": 1, "input": "go", "target": "", "messages": [], "metadata": {}, "events": [
        _model_event("2025-01-01T00:00:01Z", None, [user], a1, u),
        _model_event("2025-01-01T00:00:02Z", None, [user, a1, note, r1], a2, u),
        _model_event("2025-01-01T00:00:03Z", None, [user, a1, note, r1, a2], {"id": "a3", "role": "assistant", "content": "?"}, u),
    ]}
    path = tmp_path / "lint.json"
    path.write_text(json.dumps({"version": 2, "eval": {"task": "t"}, "samples": [sample]}))
    db = _load(path, tmp_path)
    with Store.open(db) as store:
        rules = {(f.rule, f.severity) for f in lint(store)}
    assert ("results_split_or_after_text", "warning") in rules
    assert ("tool_call_without_result", "error") in rules


@pytest.mark.parametrize("bounds", ["step", "span"])
def test_a_scorers_model_call_is_its_own_conversation(capsys, tmp_path: Path, bounds: str) -> None:
    """model_graded_fact asks a grader model with a prompt of its own: that request was not
    sent the sample's messages, and leaving them out is not drift. Scorers are bounded by
    step events (older logs) or span_begin / span_end (newer ones)."""
    from support.cli import run_json

    user = _msg("u1", "user", "What is the capital of France?")
    answer = _msg("a1", "assistant", "Paris.")
    grader = _msg("g1", "user", "Grade this answer: Paris. Reply GRADE: C or GRADE: I.")
    u = {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11}
    if bounds == "step":
        begin = {"event": "step", "action": "begin", "type": "scorer", "name": "model_graded_fact"}
        end = {"event": "step", "action": "end", "type": "scorer", "name": "model_graded_fact"}
    else:
        begin = {"event": "span_begin", "id": "sp2", "type": "scorer", "name": "model_graded_fact"}
        end = {"event": "span_end", "id": "sp2"}
    events = [
        {"event": "step", "action": "begin", "type": "solver", "name": "generate"},
        _model_event("2025-01-01T00:00:01Z", None, [user], answer, u),
        {"event": "step", "action": "end", "type": "solver", "name": "generate"},
        {**begin, "timestamp": "2025-01-01T00:00:02Z"},
        _model_event("2025-01-01T00:00:03Z", None, [grader], _msg("g2", "assistant", "GRADE: C"), u),
        {**end, "timestamp": "2025-01-01T00:00:04Z"},
        {"event": "score", "timestamp": "2025-01-01T00:00:05Z", "score": {"value": "C"}},
    ]
    sample = {"id": 1, "epoch": 1, "input": "q", "target": "Paris", "messages": [user, answer],
              "metadata": {}, "events": events}
    path = tmp_path / "graded.json"
    path.write_text(json.dumps({"version": 2, "eval": {"task": "t"}, "samples": [sample]}))
    db = _load(path, tmp_path)
    assert sql(db, "select count(*) from assembly_records where decision = 'omitted'")[0][0] == 0
    grading = sql(db, "select tags from context_assemblies order by assembled_at")[1][0]
    assert "scorer:model_graded_fact" in grading
    assert sql(db, "select count(*) from participants where label like '%(scorer model_graded_fact)'")[0][0] == 1
    out = run_json(capsys, "verify", "--db", str(db))
    assert (out["faithful"], out["drifted"]) == (2, 0)


def test_a_model_event_whose_input_is_not_a_list_is_named_and_not_replayed(capsys, tmp_path: Path) -> None:
    from support.cli import run_json

    user = _msg("u1", "user", "hi")
    u = {"input_tokens": 10, "output_tokens": 1, "total_tokens": 11}
    sample = {"id": 1, "epoch": 1, "input": "hi", "target": "", "messages": [], "metadata": {}, "events": [
        _model_event("2025-01-01T00:00:01Z", None, [user], _msg("a1", "assistant", "hello"), u),
        {**_model_event("2025-01-01T00:00:02Z", None, None, _msg("a2", "assistant", "again"), u),
         "input": "oops"},
    ]}
    path = tmp_path / "damaged.json"
    path.write_text(json.dumps({"version": 2, "eval": {"task": "t"}, "samples": [sample]}))
    res = adapt(path, tmp_path / "export")
    assert any("event 1: input is str, not a list of messages" in w for w in res.warnings), res.warnings
    db = tmp_path / "s.duckdb"
    ingest(res.export_dir, db)
    out = run_json(capsys, "verify", "--db", str(db))
    assert (out["faithful"], out["drifted"], out["not_replayable"]) == (1, 0, 1)
