"""The OpenTelemetry spans adapter (format ``otel``): each model-call span is a request whose
included records are exactly the messages it sent, with its recorded usage, from GenAI
semantic-convention spans (current attributes, OpenLLMetry's indexed attributes, log-based
events), OpenInference spans, and a Phoenix span export; what a request left out of its
chain's history is omitted (and drifts); bad spans are warnings naming them; the
``contextlens.assembly.*`` decisions of a runtime that governs its context become its rows.

The fixtures (tests/otel_fixtures/) are hand-made in the shapes the conventions document and
their instrumentations write; the expected texts below are read off them by eye."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.sql import sql

from ingest.adapters import adapt, detect_format
from ingest.errors import ContextlensError
from ingest.store import Store, ingest
from readmodel import ReadModel
from replay.policy import load_registry

FIX = Path(__file__).resolve().parents[1] / "otel_fixtures"
T0 = 1_767_225_600_000_000_000  # 2026-01-01T00:00:00Z in unix nanoseconds


# --------------------------------------------------------------------------- helpers


def _value(x: Any) -> dict[str, Any]:
    if isinstance(x, bool):
        return {"boolValue": x}
    if isinstance(x, int):
        return {"intValue": str(x)}
    if isinstance(x, list):
        return {"arrayValue": {"values": [_value(i) for i in x]}}
    if isinstance(x, dict):
        return {"kvlistValue": {"values": [{"key": k, "value": _value(v)} for k, v in x.items()]}}
    return {"stringValue": x}


def span(trace: str, span_id: str, name: str, start: float, end: float, attributes: dict[str, Any],
         parent: str | None = None, events: list[tuple[str, dict[str, Any]]] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {
        "traceId": trace, "spanId": span_id, "name": name, "kind": 3,
        "startTimeUnixNano": str(T0 + int(start * 1e9)), "endTimeUnixNano": str(T0 + int(end * 1e9)),
        "attributes": [{"key": k, "value": _value(v)} for k, v in attributes.items()],
        "events": [{"name": n, "timeUnixNano": str(T0), "attributes": [
            {"key": k, "value": _value(v)} for k, v in a.items()]} for n, a in events]}
    if parent:
        out["parentSpanId"] = parent
    return out


def document(*spans: dict[str, Any]) -> str:
    return json.dumps({"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [
        {"scope": {"name": "test"}, "spans": list(spans)}]}]})


def chat(trace: str, span_id: str, start: float, messages: list[tuple[str, str]], answer: str,
         input_tokens: int, **extra: Any) -> dict[str, Any]:
    """A GenAI chat span that sent ``messages`` ((role, text)) and answered ``answer``."""
    return span(trace, span_id, "chat gpt-4o", start, start + 0.5, {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
        "gen_ai.input.messages": json.dumps([{"role": r, "parts": [{"type": "text", "content": t}]}
                                             for r, t in messages]),
        "gen_ai.output.messages": json.dumps([{"role": "assistant", "parts": [
            {"type": "text", "content": answer}]}]),
        "gen_ai.usage.input_tokens": input_tokens, **extra})


def load(path: Path, tmp_path: Path, fmt: str | None = None) -> tuple[Path, Any]:
    res = adapt(path, tmp_path / "export", fmt=fmt)
    assert res.format == "otel"
    db = tmp_path / "store.duckdb"
    loaded = ingest(res.export_dir, db)
    assert loaded.warnings == []  # every reference between the rows resolves
    return db, res


def requests(db: Path) -> list[dict[str, Any]]:
    """Per request, in time order: its included records as (kind, text) in prompt order, its
    omitted records' (reason, text), its recorded size, tags and policy."""
    rows = sql(db, """
        select a.assembly_id, a.assembled_tokens, a.tags, a.policy_version, r.decision, r.position,
               r.record_kind, r.reason_code,
               coalesce(m.role || ': ' || m.content, c.tool_name, t.result_preview)
        from context_assemblies a left join assembly_records r using (assembly_id)
        left join messages m on r.record_kind = 'message' and m.message_id = r.record_id
        left join tool_calls c on r.record_kind = 'tool_call' and c.tool_call_id = r.record_id
        left join tool_artifacts t on r.record_kind = 'tool_artifact' and t.artifact_id = r.record_id
        order by a.assembled_at, a.assembly_id, r.decision, r.position, r.record_id""")
    out: dict[str, dict[str, Any]] = {}
    for aid, tokens, tags, policy, decision, _, kind, reason, text in rows:
        req = out.setdefault(aid, {"id": aid, "tokens": tokens, "tags": list(tags), "policy": policy,
                                   "included": [], "omitted": []})
        if decision == "included":
            req["included"].append((kind, text))
        elif decision == "omitted":
            req["omitted"].append((reason, text))
    return list(out.values())


def verdicts(db: Path, policies: dict[str, str] | None = None) -> dict[str, int]:
    from replay.policy import PolicyRegistry

    registry = PolicyRegistry.from_texts(policies) if policies else load_registry(None)
    with Store.open(db) as store:
        result = ReadModel(store, registry).verify()
    return {"faithful": result.faithful, "drifted": result.drifted,
            "inconsistent": result.inconsistent, "not_replayable": result.not_replayable}


# --------------------------------------------------------------------------- the conventions


def test_genai_agent_each_request_holds_exactly_what_its_call_sent(tmp_path: Path) -> None:
    db, res = load(FIX / "genai_agent.jsonl", tmp_path)
    first, second = requests(db)
    system = ("message", "system: You answer weather questions. Use get_weather.")
    question = ("message", "user: What is the weather in Paris?")
    assert first["included"] == [system, question]
    assert second["included"] == [system, question, ("message", "assistant: Let me look that up."),
                                  ("tool_call", "get_weather"), ("tool_artifact", "sunny, 21 C")]
    assert [r["tokens"] for r in (first, second)] == [61, 97]  # gen_ai.usage.input_tokens
    for r in (first, second):
        assert {"input:exact", "tokens:recorded", "agent:weather"} <= set(r["tags"])
        assert r["omitted"] == [] and r["policy"] == "chat-full-history"
    # one conversation (gen_ai.conversation.id), titled by its question; the answer is the
    # second run's; the tool span gave the call its completion time
    assert sql(db, "select title from conversations") == [("What is the weather in Paris?",)]
    assert sql(db, """select m.content from messages m join model_runs r using (model_run_id)
                      order by r.started_at""") == [("Let me look that up.",),
                                                    ("It is sunny in Paris, 21 C.",)]
    done = sql(db, "select status, epoch_us(completed_at) - epoch_us(requested_at) from tool_calls")
    assert done == [("succeeded", 300_000)]  # answered at 1.0 s, the tool span ended at 1.3 s
    assert sql(db, "select label from participants where kind = 'model'") == [("gpt-4o (weather)",)]
    assert verdicts(db) == {"faithful": 2, "drifted": 0, "inconsistent": 0, "not_replayable": 0}
    assert res.warnings == []


def test_older_forms_indexed_prompt_attributes_and_log_events(tmp_path: Path) -> None:
    db, res = load(FIX / "genai_events.jsonl", tmp_path)
    calc = [r for r in requests(db) if "trace:0af7651916cd43dd8448eb211c80319c" in r["tags"]]
    events = [r for r in requests(db) if "trace:5b8efff798038103d269b633813fc60c" in r["tags"]]
    # OpenLLMetry's gen_ai.prompt.N.* / gen_ai.completion.N.*, gen_ai.usage.prompt_tokens
    assert [r["tokens"] for r in calc] == [30, 52]
    assert calc[1]["included"] == [("message", "system: You are terse."), ("message", "user: Add 2 and 3."),
                                   ("message", "assistant: "), ("tool_call", "add"),
                                   ("tool_artifact", "5")]
    # log records (eventName gen_ai.*.message, gen_ai.choice) read as the span's events
    assert events[0]["included"] == [("message", "system: You translate to French."),
                                     ("message", "user: Good morning")]
    assert ("Bonjour",) in sql(db, "select content from messages where role = 'assistant'")
    assert len(sql(db, "select * from conversations")) == 2  # one per trace
    assert verdicts(db)["faithful"] == 3
    assert res.warnings == []


def test_per_message_events_in_their_three_places(tmp_path: Path) -> None:
    """The same conversation recorded as span events carrying ``gen_ai.event.content``, as
    pydantic-ai's version-1 ``events`` attribute, and as an operation-details log record with
    structured (not JSON string) messages: the same records each time."""
    sent = [("system", "Be brief."), ("user", "Capital of France?")]
    body = [{"role": r, "content": t} for r, t in sent]
    names = {"system": "gen_ai.system.message", "user": "gen_ai.user.message"}
    on_events = span("6" * 32, "a" * 16, "chat gpt-4o", 0, 1, {"gen_ai.operation.name": "chat"}, events=[
        *((names[m["role"]], {"gen_ai.event.content": json.dumps(m)}) for m in body),
        ("gen_ai.choice", {"gen_ai.event.content": json.dumps(
            {"index": 0, "message": {"role": "assistant", "content": "Paris."}})})])
    pydantic_v1 = span("7" * 32, "b" * 16, "chat gpt-4o", 0, 1, {
        "gen_ai.operation.name": "chat", "events": json.dumps(
            [{"event.name": names[m["role"]], **m} for m in body]
            + [{"event.name": "gen_ai.choice", "index": 0, "message": {"role": "assistant", "content": "Paris."}}])})
    details = span("8" * 32, "c" * 16, "chat gpt-4o", 0, 1, {"gen_ai.operation.name": "chat"})
    log = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{
        "traceId": "8" * 32, "spanId": "c" * 16, "eventName": "gen_ai.client.inference.operation.details",
        "attributes": [{"key": "gen_ai.input.messages", "value": _value(
            [{"role": r, "parts": [{"type": "text", "content": t}]} for r, t in sent])},
            {"key": "gen_ai.output.messages", "value": _value(
                [{"role": "assistant", "parts": [{"type": "text", "content": "Paris."}]}])}]}]}]}]}
    f = tmp_path / "events.jsonl"
    f.write_text("\n".join([document(on_events, pydantic_v1), document(details), json.dumps(log)]) + "\n")
    db, res = load(f, tmp_path)
    assert [r["included"] for r in requests(db)] == [
        [("message", "system: Be brief."), ("message", "user: Capital of France?")]] * 3
    assert sql(db, "select count(*) from messages where role = 'assistant' and content = 'Paris.'") == [(3,)]
    assert res.warnings == []


def test_openinference_llm_tool_and_retriever_spans(tmp_path: Path) -> None:
    db, _ = load(FIX / "openinference.json", tmp_path)
    first, second = requests(db)
    assert [r["tokens"] for r in (first, second)] == [88, 131]  # llm.token_count.prompt
    assert second["included"][2:] == [("message", "assistant: "), ("tool_call", "reset_router"),
                                      ("tool_artifact", "router reset; light is green")]
    assert "trace:a3ce929d0e0e47364bf92f3577b34da6" in first["tags"]  # base64 ids read as hex
    # the TOOL span ran the model's call (tool_call.id): no second call; the retriever's two
    # documents are artifacts of a call of their own, candidates of no request
    calls = sql(db, "select tool_name, arguments_json from tool_calls order by tool_name")
    assert calls == [("reset_router", '{"seconds": 10}'),
                     ("retrieve", '{"query": "My router blinks red. What do I do?"}')]
    docs = sql(db, """select result_preview from tool_artifacts a join tool_calls c using (tool_call_id)
                      where c.tool_name = 'retrieve' order by result_preview""")
    assert [d[0].splitlines()[0] for d in docs] == ["document manual-12 (score 0.91)",
                                                    "document manual-3 (score 0.42)"]
    assert sql(db, """select count(*) from assembly_records r join tool_artifacts a
                      on r.record_id = a.artifact_id join tool_calls c using (tool_call_id)
                      where c.tool_name = 'retrieve'""") == [(0,)]
    assert sql(db, "select title from conversations") == [("My router blinks red. What do I do?",)]


def test_phoenix_span_export(tmp_path: Path) -> None:
    assert detect_format(FIX / "phoenix_spans.parquet") == "otel"
    db, res = load(FIX / "phoenix_spans.parquet", tmp_path)
    first, second = requests(db)
    assert first["included"] == [("message", "system: You plan trips. Be brief."),
                                 ("message", "user: Plan a day in Lyon.")]
    assert second["included"][2:] == [("message", "assistant: "), ("tool_call", "weather"),
                                      ("tool_artifact", "rain all day")]
    assert [r["tokens"] for r in (first, second)] == [40, 66]
    # the TOOL span (no call id) ran the model's weather call: matched by name, not doubled
    assert sql(db, "select count(*) from tool_calls where tool_name = 'weather'") == [(1,)]
    assert sql(db, "select count(*) from tool_calls where tool_name = 'guide search'") == [(1,)]
    assert verdicts(db)["faithful"] == 2
    assert res.warnings == []


def test_detection_names_spans_and_leaves_other_formats_theirs(tmp_path: Path) -> None:
    for name in ("genai_agent.jsonl", "genai_events.jsonl", "openinference.json"):
        assert detect_format(FIX / name) == "otel"
    assert detect_format(FIX.parent / "adapter_fixtures" / "compaction.jsonl") == "claude-code"
    # a Parquet file that is not a span export (a contract table) is refused by its columns
    table = Path(__file__).resolve().parents[2] / "sample_data" / "messages.parquet"
    with pytest.raises(ContextlensError, match=r"otel: a Parquet file without context\.span_id"):
        detect_format(table)
    near = tmp_path / "spans.json"
    near.write_text(json.dumps({"traceId": "ab" * 16, "spanId": "cd" * 8, "name": "chat"}))
    with pytest.raises(ContextlensError, match="looks like OpenTelemetry spans .* but does not match otel"):
        detect_format(near)


# --------------------------------------------------------------------------- chains and runtime


def test_a_request_that_left_history_out_omits_it_and_drifts(tmp_path: Path) -> None:
    tr = "1" * 32
    f = tmp_path / "trimmed.jsonl"
    f.write_text(document(
        chat(tr, "a" * 16, 0, [("user", "first question")], "first answer", 10),
        chat(tr, "b" * 16, 1, [("user", "first question"), ("assistant", "first answer"),
                               ("user", "second question")], "second answer", 20),
        # a history processor kept the last question only
        chat(tr, "c" * 16, 2, [("user", "second question"), ("assistant", "second answer"),
                               ("user", "third question")], "third answer", 15)) + "\n")
    db, _ = load(f, tmp_path)
    third = requests(db)[2]
    assert third["included"] == [("message", "user: second question"),
                                 ("message", "assistant: second answer"),
                                 ("message", "user: third question")]
    assert third["omitted"] == [("evicted", "user: first question"),
                                ("evicted", "assistant: first answer")]
    assert verdicts(db) == {"faithful": 2, "drifted": 1, "inconsistent": 0, "not_replayable": 0}


def test_a_rewritten_history_stays_observed(tmp_path: Path) -> None:
    tr = "2" * 32
    f = tmp_path / "rewritten.jsonl"
    f.write_text(document(
        chat(tr, "a" * 16, 0, [("user", "q1")], "a1", 10),
        # the earlier turns sent again in another order
        chat(tr, "b" * 16, 1, [("assistant", "a1"), ("user", "q1"), ("user", "q2")], "a2", 20)) + "\n")
    db, _ = load(f, tmp_path)
    second = requests(db)[1]
    assert second["policy"] == "observed" and "otel:history_rewritten" in second["tags"]
    assert verdicts(db)["not_replayable"] == 1


def test_two_agents_of_one_trace_are_chains_of_their_own(tmp_path: Path) -> None:
    """A planner and a researcher (same system prompt, interleaved calls) in one trace: each
    request sent its own agent's history, so none omits the other's and all are faithful."""
    tr = "3" * 32
    sys_ = ("system", "You are helpful.")
    f = tmp_path / "agents.jsonl"
    f.write_text(document(
        chat(tr, "a" * 16, 0, [sys_, ("user", "plan a trip")], "step 1", 10),
        chat(tr, "b" * 16, 1, [sys_, ("user", "find trains")], "train at 9", 11),
        chat(tr, "c" * 16, 2, [sys_, ("user", "plan a trip"), ("assistant", "step 1"),
                               ("user", "go on")], "step 2", 20),
        chat(tr, "d" * 16, 3, [sys_, ("user", "find trains"), ("assistant", "train at 9"),
                               ("user", "later ones?")], "train at 11", 21)) + "\n")
    db, _ = load(f, tmp_path)
    assert all(r["omitted"] == [] for r in requests(db))
    assert verdicts(db)["faithful"] == 4
    assert len(sql(db, "select * from conversations")) == 1


def test_ids_stay_as_spans_arrive(tmp_path: Path) -> None:
    """A followed journal grows by lines: the requests read from its first line keep their
    ids and rows when the second arrives."""
    lines = (FIX / "genai_agent.jsonl").read_bytes().splitlines(keepends=True)
    part = tmp_path / "a" / "spans.jsonl"
    whole = tmp_path / "b" / "spans.jsonl"
    part.parent.mkdir()
    whole.parent.mkdir()
    part.write_bytes(lines[0])
    whole.write_bytes(b"".join(lines))
    db_part, _ = load(part, tmp_path / "a")
    db_whole, _ = load(whole, tmp_path / "b")
    def kept(db: Path) -> list[tuple[Any, ...]]:  # what a later span cannot change
        return [(r["id"], r["tokens"], r["policy"], r["included"], r["omitted"]) for r in requests(db)]

    assert kept(db_part) == kept(db_whole)[:1]


# --------------------------------------------------------------------------- bad input


def test_bad_spans_are_warnings_naming_them(tmp_path: Path) -> None:
    tr = "4" * 32
    good = chat(tr, "a" * 16, 0, [("user", "hello")], "hi", 5)
    clash = chat(tr, "a" * 16, 9, [("user", "another")], "other", 5)  # the same span id
    backwards = chat(tr, "b" * 16, 1, [("user", "hello"), ("assistant", "hi"), ("user", "odd")], "ok", 9)
    backwards["endTimeUnixNano"] = str(T0)  # ends before it starts
    shapeless = span(tr, "c" * 16, "chat gpt-4o", 2, 3, {
        "gen_ai.operation.name": "chat",
        "gen_ai.input.messages": json.dumps([{"text": "no role, no parts"},
                                             {"role": "user", "parts": [{"type": "hologram", "x": 1}]}]),
        "gen_ai.usage.input_tokens": "many"})
    huge = span(tr, "d" * 16, "chat gpt-4o", 4, 5, {
        "gen_ai.operation.name": "chat", "gen_ai.input.messages": json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": "x" * (5 << 20)}]}])})
    f = tmp_path / "bad.jsonl"
    f.write_text("\n".join([document(good, backwards), document(good), document(clash),
                            document(shapeless, huge)]) + '\n{"resourceSpans": [{"scopeSp')
    db, res = load(f, tmp_path)
    said = "\n".join(res.warnings)
    assert f"span {'a' * 16} of trace {tr}: the span id is used again" in said
    assert "1 span appear more than once, identical" in said
    assert f"span {'b' * 16} of trace {tr} ('chat gpt-4o'): ends before it starts" in said
    assert f"span {'c' * 16} of trace {tr}" in said and "not the documented shape" in said
    assert "'hologram'" in said and "gen_ai.usage.input_tokens is 'many'" in said
    assert f"span {'d' * 16} of trace {tr}: attribute gen_ai.input.messages holds 5.0 MB" in said
    assert "bad.jsonl line 5: malformed JSON skipped" in said
    # nothing stopped the rest: four requests, the shapeless message kept as its JSON text
    assert len(requests(db)) == 4
    assert sql(db, "select count(*) from messages where content like '%no role, no parts%'") == [(1,)]


@pytest.mark.parametrize("content, error", [
    ('{"resourceSpans": []}', "OpenTelemetry data without spans"),
    ('{"messages": [{"role": "user", "content": "hi"}]}', "not OpenTelemetry spans"),
])
def test_nothing_readable_is_one_error(tmp_path: Path, content: str, error: str) -> None:
    f = tmp_path / "x.json"
    f.write_text(content)
    with pytest.raises(ContextlensError, match=error):
        adapt(f, tmp_path / "export", fmt="otel")


# --------------------------------------------------------------------------- assembly decisions


def _record(rid: str, decision: str, reason: str, family: str = "window", **more: Any) -> tuple[str, dict[str, Any]]:
    return ("contextlens.assembly.record", {
        "contextlens.record.id": rid, "contextlens.record.decision": decision,
        "contextlens.record.reason": reason, "contextlens.record.family": family,
        **{f"contextlens.record.{k}": v for k, v in more.items()}})


def test_assembly_decisions_become_the_request_s_rows(tmp_path: Path) -> None:
    tr = "5" * 32
    governed = span(tr, "a" * 16, "chat gpt-4o", 1, 2, {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "gpt-4o",
        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "now?"}]}]),
        "gen_ai.usage.input_tokens": 40,
        "contextlens.assembly.policy_version": "v7", "contextlens.assembly.token_budget": 3000,
        "contextlens.assembly.tags": ["scenario:otel"]}, events=[
        _record("mem-1", "included", "compact_memory", "freshness", kind="tool_memory",
                content="calendar: dentist at 3pm", tokens=6, rendering="compact_memory", position=0),
        _record("u-2", "included", "in_window", role="user", input_index=0, tokens=2, position=1),
        _record("key-9", "omitted", "privacy_restricted", "privacy", kind="tool_artifact",
                content="API_KEY=abc", detail="secret-adjacent body", tokens=4),
        _record("u-1", "omitted", "because", role="user", content="old"),  # not a reason code
        _record("u-3", "included", "fancy", "nonsense", role="user", content="hi", tokens=2),
    ])
    f = tmp_path / "governed.jsonl"
    f.write_text(document(governed) + "\n")
    db, res = load(f, tmp_path)
    said = "\n".join(res.warnings)
    assert f"span {'a' * 16} of trace {tr}: assembly record 3: reason 'because'" in said
    assert "reason 'fancy'" in said and "family 'nonsense'" in said
    rows = sql(db, """select r.record_kind, r.decision, r.reason_code, r.policy_family, r.rendering,
                             r.position, r.tokens, r.detail from assembly_records r order by r.decision, r.position""")
    assert rows == [
        ("tool_memory", "included", "compact_memory", "freshness", "compact_memory", 0, 6,
         "the runtime's decision (its record mem-1)"),
        ("message", "included", "in_window", "window", "verbatim", 1, 2, "the runtime's decision (its record u-2)"),
        ("message", "included", "in_window", "window", "verbatim", 2, 2, "the runtime's decision (its record u-3)"),
        ("tool_artifact", "omitted", "privacy_restricted", "privacy", None, None, 4, "secret-adjacent body"),
    ]
    assert sql(db, "select policy_version, token_budget, list_contains(tags, 'scenario:otel') "
                   "from context_assemblies") == [("v7", 3000, True)]
    assert sql(db, "select content, content_tokens from messages where role = 'user' order by content") == [
        ("hi", 2), ("now?", 2)]  # the runtime's count is the record's


def test_assembly_records_as_one_json_attribute_past_the_event_limit(tmp_path: Path) -> None:
    """A runtime with more candidates than the SDK keeps events for writes them as one JSON
    attribute; events the SDK dropped are named, not silently missing."""
    records = [{"id": f"m{i}", "role": "user", "content": f"note {i}", "tokens": 2,
                "decision": "omitted" if i < 200 else "included",
                "reason": "over_budget" if i < 200 else "in_window",
                "family": "budget" if i < 200 else "window"} for i in range(202)]
    listed = span("9" * 32, "e" * 16, "chat gpt-4o", 1, 2, {
        "gen_ai.operation.name": "chat", "contextlens.assembly.policy_version": "tight",
        "contextlens.assembly.records": json.dumps(records)})
    dropped = span("9" * 32, "f" * 16, "chat gpt-4o", 3, 4, {
        "gen_ai.operation.name": "chat", "contextlens.assembly.policy_version": "tight"},
        events=[_record("m0", "omitted", "over_budget", "budget")])
    dropped["droppedEventsCount"] = 72
    f = tmp_path / "many.jsonl"
    f.write_text(document(listed, dropped) + "\n")
    db, res = load(f, tmp_path)
    assert sql(db, """select decision, reason_code, policy_family, count(*) from assembly_records
                      where assembly_id like '%r0:asm' group by all order by all""") == [
        ("included", "in_window", "window", 2), ("omitted", "over_budget", "budget", 200)]
    assert any(f"span {'f' * 16} of trace {'9' * 32}" in w and "dropped 72 of its events" in w
               for w in res.warnings)
