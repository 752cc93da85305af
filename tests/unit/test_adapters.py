"""Transcript adapters on small hand-written files: each malformed-input case, pending and
failed tools, compaction, Anthropic request logs, determinism, the pluggable estimator."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support.sql import sql

from ingest.adapters import FORMATS, AdaptResult, ByteEstimator, adapt, detect_format
from ingest.adapters.common import canonical_json
from ingest.errors import ContextlensError
from ingest.store import Store, ingest

FIX = Path(__file__).parents[1] / "adapter_fixtures"


def _load(name: str, tmp_path: Path, **kw) -> tuple[Path, AdaptResult]:
    res = adapt(FIX / name, tmp_path / "export", **kw)
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    return db, res


def test_formats_constant() -> None:
    assert FORMATS == ("claude-code", "openai-chat", "anthropic-messages", "gemini-cli", "codex", "inspect-ai", "letta", "esaa",
                       "otel", "export")


@pytest.mark.parametrize(
    "name,fmt",
    [
        ("bad_line.jsonl", "claude-code"),
        ("pending_and_error.jsonl", "claude-code"),
        ("compaction.jsonl", "claude-code"),
        ("openai_pending.json", "openai-chat"),
        ("anthropic_log.jsonl", "anthropic-messages"),
    ],
)
def test_detect(name: str, fmt: str) -> None:
    assert detect_format(FIX / name) == fmt


def test_detect_export_folder(tmp_path: Path) -> None:
    res = adapt(FIX / "bad_line.jsonl", tmp_path / "exp")
    assert detect_format(res.export_dir) == "export"
    assert adapt(res.export_dir, tmp_path / "unused").export_dir == res.export_dir


def test_bad_json_line_is_a_warning_and_the_rest_is_adapted(tmp_path: Path) -> None:
    db, res = _load("bad_line.jsonl", tmp_path)
    assert len(res.warnings) == 1
    assert "bad_line.jsonl line 3" in res.warnings[0]
    with Store.open(db) as s:
        rows = s.list_assemblies().to_pylist()
    assert [r["assembled_tokens"] for r in rows] == [1005, 1023]
    assert sql(db, "select status from tool_calls") == [("succeeded",)]


def test_unknown_format_names_the_file_and_every_format(tmp_path: Path) -> None:
    with pytest.raises(ContextlensError) as err:
        detect_format(FIX / "unknown.json")
    msg = str(err.value)
    assert "unknown.json" in msg
    for fmt in FORMATS:
        assert fmt in msg
    with pytest.raises(ContextlensError):
        adapt(FIX / "unknown.json", tmp_path / "x")


def test_empty_file(tmp_path: Path) -> None:
    with pytest.raises(ContextlensError, match="empty"):
        detect_format(FIX / "empty.jsonl")
    with pytest.raises(ContextlensError, match="empty"):
        adapt(FIX / "empty.jsonl", tmp_path / "x", fmt="claude-code")


def test_unknown_format_name(tmp_path: Path) -> None:
    with pytest.raises(ContextlensError, match="unknown format"):
        adapt(FIX / "bad_line.jsonl", tmp_path / "x", fmt="nope")


def test_pending_failed_and_parallel(tmp_path: Path) -> None:
    db, res = _load("pending_and_error.jsonl", tmp_path)
    got = dict(sql(db, "select tool_name, status from tool_calls"))
    assert got == {"Read": "succeeded", "Bash": "failed", "Grep": "pending"}
    groups = sql(db, "select distinct parallel_group from tool_calls")
    assert len(groups) == 1 and groups[0][0]
    art = sql(db, "select tool_name, status, error, result_preview from tool_artifacts order by tool_name")
    assert art == [("Bash", "failed", "Exit code 1", "Exit code 1"), ("Read", "succeeded", None, "hello")]
    mem = sql(db, "select summary, source_artifact_ids, freshness_class, confidence, promoted from tool_memories order by summary")
    assert mem[0][0] == "Bash failed, 11 B, first lines: Exit code 1"
    assert all(m[2] == "session" and m[3] == 1.0 and m[4] for m in mem)
    # sha256 and size of the body; the blob is stored and checks out
    sha, size, ref = sql(db, "select sha256, byte_size, storage_ref from tool_artifacts where tool_name='Read'")[0]
    assert sha == hashlib.sha256(b"hello").hexdigest() and size == 5
    assert (res.export_dir / ref).read_bytes() == b"hello"


def test_compaction(tmp_path: Path) -> None:
    db, res = _load("compaction.jsonl", tmp_path)
    asm = [a for (a,) in sql(db, "select assembly_id from context_assemblies order by assembled_at")]
    assert len(asm) == 2
    recs = sql(
        db,
        f"select decision, reason_code, policy_family, detail from assembly_records where assembly_id='{asm[1]}' order by decision, position",
    )
    omitted = [r for r in recs if r[0] == "omitted"]
    assert len(omitted) == 2  # the first user message and the reply (the marker is not content)
    assert all(r[1] == "compacted" and r[2] == "window" and "preTokens 5000" in r[3] for r in omitted)
    included = sql(
        db,
        f"select m.speaker_label from assembly_records r join messages m on m.message_id = r.record_id where r.assembly_id='{asm[1]}' and r.decision='included'",
    )
    assert included == [("compact summary",)]
    tokens = sql(db, f"select assembled_tokens, baseline_tokens from context_assemblies where assembly_id='{asm[1]}'")[0]
    assert tokens[0] == 24
    assert tokens[1] > tokens[0] - res.unattributed_tokens[asm[1]]


def test_selection_hash_is_the_documented_rule(tmp_path: Path) -> None:
    db, _ = _load("anthropic_log.jsonl", tmp_path)
    for (aid, h) in sql(db, "select assembly_id, selection_hash from context_assemblies"):
        rows = sql(
            db,
            f"select record_kind, record_id, decision, rendering, position from assembly_records where assembly_id='{aid}' order by record_kind, record_id",
        )
        assert h == hashlib.sha256(canonical_json([list(r) for r in rows]).encode()).hexdigest()


def test_openai_pending_and_recorded_usage(tmp_path: Path) -> None:
    db, res = _load("openai_pending.json", tmp_path)
    assert dict(sql(db, "select json_extract_string(arguments_json, '$.city'), status from tool_calls")) == {
        "Paris": "succeeded",
        "Rome": "pending",
    }
    with Store.open(db) as s:
        rows = s.list_assemblies(sort="assembled_at").to_pylist()
    assert rows[0]["included_count"] == 2  # system + user
    assert rows[1]["assembled_tokens"] == 95  # recorded prompt_tokens
    assert f"unattributed_tokens:{res.unattributed_tokens[rows[1]['assembly_id']]}" in rows[1]["tags"]
    assert rows[1]["token_budget"] == 128_000


def test_anthropic_request_log(tmp_path: Path) -> None:
    db, res = _load("anthropic_log.jsonl", tmp_path)
    assert res.warnings == []
    assert sql(db, "select count(*) from conversations")[0][0] == 2
    with Store.open(db) as s:
        rows = s.list_assemblies(sort="assembled_at").to_pylist()
    assert [r["assembled_tokens"] for r in rows[:2]] == [420, 480]
    # the second request reuses the first one's records and adds its own
    assert rows[0]["included_count"] == 1
    assert rows[1]["included_count"] == 1 + 1 + 2 + 2  # user, reply, 2 calls, 2 results
    assert rows[0]["conversation_id"] == rows[1]["conversation_id"] != rows[2]["conversation_id"]
    # the third request has no response: estimated tokens, including the system-less body
    assert "tokens:estimated" in rows[2]["tags"]
    got = {k: v for k, v in sql(db, "select tool_name || coalesce(json_extract_string(arguments_json, '$.path'), ''), status from tool_calls")}
    assert got == {"read_fileMakefile": "succeeded", "grep": "failed", "read_filemain.c": "pending"}
    par = sql(db, "select count(*) from tool_calls where parallel_group is not null")[0][0]
    assert par == 2
    # the system prompt is not a record: it is part of the unattributed tokens
    assert sql(db, "select count(*) from messages where role='system'")[0][0] == 0
    assert all(v > 0 for v in res.unattributed_tokens.values())


def test_deterministic_and_idempotent(tmp_path: Path) -> None:
    a = adapt(FIX / "pending_and_error.jsonl", tmp_path / "a")
    b = adapt(FIX / "pending_and_error.jsonl", tmp_path / "b")
    ma = json.loads((a.export_dir / "manifest.json").read_text())
    mb = json.loads((b.export_dir / "manifest.json").read_text())
    assert ma == mb
    db = tmp_path / "s.duckdb"
    assert ingest(a.export_dir, db).changed
    assert not ingest(b.export_dir, db).changed


def test_two_transcripts_share_a_store(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    for name in ("pending_and_error.jsonl", "compaction.jsonl", "openai_pending.json", "anthropic_log.jsonl"):
        res = adapt(FIX / name, tmp_path / name)
        assert ingest(res.export_dir, db).warnings == []
    with Store.open(db) as s:
        assert s.count_assemblies() == 1 + 2 + 2 + 3


def test_pluggable_estimator(tmp_path: Path) -> None:
    class Chars:
        def count(self, text: str) -> int:
            return len(text)

    db, _ = _load("compaction.jsonl", tmp_path, estimator=Chars())
    assert sql(db, "select content_tokens from messages where content='start'") == [(5,)]
    assert ByteEstimator().count("abcde") == 2
    assert ByteEstimator().count("") == 0


def test_forced_wrong_format_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ContextlensError, match="no openai-chat messages"):
        adapt(FIX / "bad_line.jsonl", tmp_path / "x", fmt="openai-chat")
    assert not (tmp_path / "x").exists()


# --------------------------------------------------------------------------- bounded reading


@pytest.mark.parametrize(
    "text,lone",
    [
        (r'"a \ud83d\ude00 pair"', None),  # a valid surrogate pair: an emoji
        (r'"plain \\ud800 text"', None),  # the backslash is escaped: six characters of text
        (r'"high \ud83d alone"', r"\ud83d"),
        (r'"low \uDC00 alone"', r"\uDC00"),
        (r'"escaped backslash then \\\ud800"', r"\ud800"),
        (r'"high \ud83d then \\ude00 text"', r"\ud83d"),
    ],
)
def test_lone_surrogate_escapes(text: str, lone: str | None) -> None:
    from ingest.adapters.jsonread import lone_surrogate

    data = text.encode()
    at = lone_surrogate(data)
    assert (None if at is None else data[at: at + 6].decode()) == lone
    # the same verdict as Python's own encoder on the parsed string
    try:
        json.loads(data).encode("utf-8")
        encodable = True
    except UnicodeEncodeError:
        encodable = False
    assert encodable == (lone is None)


def test_sniffing_reads_a_bounded_head_ending_on_a_line(monkeypatch, tmp_path: Path) -> None:
    from ingest.adapters import files

    monkeypatch.setattr(files, "SNIFF_BYTES", 1000)
    monkeypatch.setattr(files, "SNIFF_LINE_CAP", 5000)
    path = tmp_path / "t.jsonl"
    first = json.dumps({"type": "user", "uuid": "u1", "text": "x" * 1500}).encode() + b"\n"
    path.write_bytes(first + b"y" * 3000 + b"\n")
    head, complete, long_line = files.read_head(path)
    assert head == first and not complete and not long_line  # the first line, whole
    sample = files.read_sample(path)
    assert sample.document is None and sample.lines == [json.loads(first)]

    path.write_bytes(b"z" * 20_000)  # no line ends within the cap: read no further
    head, complete, long_line = files.read_head(path)
    assert len(head) == 5000 and not complete and long_line
    with pytest.raises(ContextlensError, match="no line ends in the first"):
        detect_format(path)

    path.write_bytes(b"[1]\n" * 100)  # small: read whole
    assert files.read_head(path) == (b"[1]\n" * 100, True, False)


def test_claude_code_session_with_a_first_line_over_8mb(tmp_path: Path) -> None:
    lines = (FIX / "compaction.jsonl").read_text().splitlines()
    first = json.loads(lines[0])
    first["message"]["content"] = "start " + "A" * (9 << 20)
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join([json.dumps(first), *lines[1:]]) + "\n")
    assert detect_format(path) == "claude-code"
    db = tmp_path / "s.duckdb"
    ingest(adapt(path, tmp_path / "exp").export_dir, db)
    assert sql(db, "select max(length(content)) from messages")[0][0] > 9 << 20


def test_a_folder_is_refused_by_type_for_a_transcript_format(tmp_path: Path) -> None:
    with pytest.raises(ContextlensError, match="not a file .format claude-code reads one transcript file"):
        adapt(tmp_path, tmp_path / "x", fmt="claude-code")


def test_a_list_entry_without_messages_is_named_not_dropped_silently(tmp_path: Path) -> None:
    # tau-bench's results are a list of {task_id, traj, ...}; one whose traj is not a list of
    # messages (damaged) is left out with a warning naming it, the others are read
    good = {"task_id": 0, "traj": [{"role": "user", "content": "Book a flight."},
                                   {"role": "assistant", "content": "Where to?"}]}
    bad = {"task_id": 1, "traj": {"role": "user", "content": "not a list"}}
    path = tmp_path / "results.json"
    path.write_text(json.dumps([good, bad, good]))
    res = adapt(path, tmp_path / "export")
    assert res.stats["requests"] == 2
    assert any("results.json entry 1: no list of chat messages" in w for w in res.warnings), res.warnings


@pytest.mark.parametrize(("fixture", "count", "line"), [
    ("codex_rollout.jsonl", '"last_token_usage": {"input_tokens": 5000', "line "),
    ("compaction.jsonl", '"input_tokens":10', "line "),
    ("anthropic_log.jsonl", '"input_tokens": 120', "line "),
    ("openai_pending.json", '"prompt_tokens": 95', "message "),
])
@pytest.mark.parametrize("bad", ['"5000"', "true", "-5", "12.5"])
def test_a_recorded_token_count_that_is_not_a_number_is_named_not_dropped_silently(
        tmp_path: Path, fixture: str, count: str, line: str, bad: str) -> None:
    text = (FIX / fixture).read_text()
    assert count in text
    head, _, number = count.rpartition(":")
    path = tmp_path / fixture
    path.write_text(text.replace(count, f"{head}: {bad}", 1))
    key = head.rpartition("{")[2].strip()
    res = adapt(path, tmp_path / "export")
    named = [w for w in res.warnings if "not a whole number of tokens" in w]
    assert len(named) == 1, res.warnings
    assert named[0].startswith(fixture) and line in named[0]
    assert f"{key.strip(chr(34))} is {bad}" in named[0]


def _sse(*events: dict) -> str:
    return "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)


def test_a_claude_trace_log_of_streamed_responses_keeps_usage_and_answers(tmp_path: Path) -> None:
    """claude-trace logs each HTTP exchange: {request: {timestamp, body}, response:
    {timestamp, status_code, body_raw}, logged_at}; Claude Code streams, so the response is
    its server-sent events. The answer is the request's own (not a run of its own), the
    usage is recorded, and the times are the exchange's."""
    system = [{"type": "text", "text": "You are Claude Code."}]
    user = {"role": "user", "content": [{"type": "text", "text": "list files"}]}
    answer = {"role": "assistant", "content": [
        {"type": "text", "text": "Listing."},
        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]}
    result = {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py\nb.py"}]}
    streamed = _sse(
        {"type": "message_start", "message": {
            "id": "msg_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4",
            "content": [], "usage": {"input_tokens": 4, "cache_creation_input_tokens": 12000,
                                     "cache_read_input_tokens": 0, "output_tokens": 1}}},
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Listing."}},
        {"type": "content_block_start", "index": 1,
         "content_block": {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}},
        {"type": "content_block_delta", "index": 1,
         "delta": {"type": "input_json_delta", "partial_json": '{"command": "ls"}'}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 40}},
        {"type": "message_stop"})
    pairs = [
        {"request": {"timestamp": 1751963400.0, "method": "POST", "url": "https://api.anthropic.com/v1/messages",
                     "headers": {}, "body": {"model": "claude-sonnet-4", "system": system,
                                             "messages": [user], "stream": True}},
         "response": {"timestamp": 1751963403.5, "status_code": 200,
                      "headers": {"content-type": "text/event-stream"}, "body_raw": streamed},
         "logged_at": "2025-07-08T08:30:03.600Z"},
        {"request": {"timestamp": 1751963404.0, "method": "POST", "url": "https://api.anthropic.com/v1/messages",
                     "headers": {}, "body": {"model": "claude-sonnet-4", "system": system,
                                             "messages": [user, answer, result], "stream": True}},
         "response": {"timestamp": 1751963406.0, "status_code": 200, "headers": {},
                      "body_raw": _sse({"type": "message_start", "message": {
                          "id": "msg_2", "type": "message", "role": "assistant", "content": [],
                          "usage": {"input_tokens": 12080}}})},
         "logged_at": "2025-07-08T08:30:06.100Z"},
    ]
    path = tmp_path / "log-2025-07-08.jsonl"
    path.write_text("".join(json.dumps(p) + "\n" for p in pairs))
    res = adapt(path, tmp_path / "export")
    assert res.format == "anthropic-messages"
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    runs = sql(db, "SELECT model_run_id, started_at < ended_at, year(started_at) FROM model_runs "
                   "ORDER BY started_at")
    assert [(ok, year) for _, ok, year in runs] == [(True, 2025), (True, 2025)]  # no run of its own
    assert sql(db, "SELECT assembled_tokens FROM context_assemblies ORDER BY assembled_at") == [
        (12004,), (12080,)]
    first = runs[0][0]
    assert sql(db, "SELECT count(*) FROM messages WHERE role = 'assistant' "
                   f"AND model_run_id = '{first}'") == [(1,)]
    assert sql(db, "SELECT tool_name, status FROM tool_calls") == [("Bash", "succeeded")]


def test_a_tau2_bench_results_file_is_one_conversation_per_simulation(tmp_path: Path) -> None:
    """tau2-bench writes {timestamp, info, tasks, simulations: [{task_id, messages}]}; its
    orchestrator opens every simulation with a fixed greeting of cost 0 that no model wrote."""
    greeting = {"role": "assistant", "content": "Hi! How can I help you today?",
                "tool_calls": None, "turn_idx": 0, "cost": 0.0, "usage": None}

    def simulation(task: str, ask: str, tokens: int) -> dict:
        return {"id": f"sim-{task}", "task_id": task, "trial": 0, "messages": [
            greeting,
            {"role": "user", "content": ask, "turn_idx": 1, "cost": 0.001,
             "usage": {"prompt_tokens": 900, "completion_tokens": 15}},  # the user simulator's
            {"role": "assistant", "content": None, "turn_idx": 2, "cost": 0.01,
             "usage": {"prompt_tokens": tokens, "completion_tokens": 20},
             "tool_calls": [{"id": "call_1", "name": "find_user", "arguments": {"zip": "19122"},
                             "requestor": "assistant"}]},
            {"role": "tool", "id": "call_1", "content": "user_42", "requestor": "assistant",
             "turn_idx": 3, "error": False},
            {"role": "assistant", "content": "Found you.", "turn_idx": 4, "cost": 0.01,
             "usage": {"prompt_tokens": tokens + 60, "completion_tokens": 5}}]}

    results = {"timestamp": "2025-10-31T07:16:00", "tasks": [],
               "info": {"agent_info": {"implementation": "llm_agent", "llm": "claude-sonnet-4-5"},
                        "user_info": {"llm": "gpt-4.1"}},
               "simulations": [simulation("7", "exchange my order", 3100),
                               simulation("8", "cancel my order", 2900)]}
    path = tmp_path / "tau2-retail.json"
    path.write_text(json.dumps(results))
    res = adapt(path, tmp_path / "export")
    assert res.format == "openai-chat" and not res.warnings, res.warnings
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    assert sql(db, "SELECT count(*) FROM conversations") == [(2,)]
    # two requests per simulation: the greeting is the agent's text, not a model call
    assert sql(db, "SELECT model, assembled_tokens FROM context_assemblies "
                   "ORDER BY conversation_id, assembled_at") == [
        ("claude-sonnet-4-5", 3100), ("claude-sonnet-4-5", 3160),
        ("claude-sonnet-4-5", 2900), ("claude-sonnet-4-5", 2960)]
    assert sql(db, "SELECT count(*) FROM messages WHERE role = 'assistant' "
                   "AND model_run_id IS NULL") == [(2,)]


def test_a_tau_bench_file_whose_every_task_failed_says_its_trajectories_are_empty(
        tmp_path: Path) -> None:
    # tau-bench writes traj [] and info.error for a task that raised
    path = tmp_path / "results.json"
    path.write_text(json.dumps([{"task_id": i, "reward": 0.0, "traj": [], "trial": 0,
                                 "info": {"error": "EOF when reading a line"}} for i in range(3)]))
    with pytest.raises(ContextlensError) as info:
        adapt(path, tmp_path / "export")
    assert "every entry's messages/traj/history/conversation list is empty" in str(info.value)
    assert "EOF when reading a line" in str(info.value)


def test_a_streamed_response_with_odd_usage_keeps_what_it_can_read() -> None:
    from ingest.adapters.anthropic_messages import streamed_message
    from ingest.adapters.claude_code import recorded_input

    start = {"type": "message_start", "message": {"id": "m", "type": "message", "content": [],
                                                  "usage": {"input_tokens": 4,
                                                            "cache_creation_input_tokens": 12000}}}
    # a delta leaving counts null keeps the start's (the SDK merges them so)
    nulls = {"type": "message_delta", "delta": {"stop_reason": "end_turn"},
             "usage": {"input_tokens": None, "cache_creation_input_tokens": None, "output_tokens": 40}}
    message = streamed_message(_sse(start, nulls))
    assert recorded_input(message["usage"]) == 12004 and message["usage"]["output_tokens"] == 40
    # a usage that is not an object is no usage; a data line nested too deep is skipped
    odd = {**start, "message": {**start["message"], "usage": "n/a"}}
    deep = "data: " + "[" * 100_000 + "\n\n"
    message = streamed_message(_sse(odd, {"type": "message_delta", "delta": {"usage": "zz"},
                                          "usage": {"output_tokens": 3}}) + deep)
    assert message is not None and message["usage"] == {"output_tokens": 3}
    assert recorded_input(message["usage"]) is None
    # one unreadable part of the input count: not recorded at all (4 would be an undercount)
    assert recorded_input({"input_tokens": 4, "cache_read_input_tokens": "12000"}) is None


def test_a_tau2_simulation_without_messages_is_named(tmp_path: Path) -> None:
    ok = {"task_id": "1", "messages": [{"role": "user", "content": "hi"},
                                       {"role": "assistant", "content": "hello", "cost": 0.01}]}
    path = tmp_path / "tau2.json"
    path.write_text(json.dumps({"info": {}, "tasks": [],
                                "simulations": [ok, {"task_id": "2", "messages": []},
                                                {"task_id": "3", "messages": None}]}))
    res = adapt(path, tmp_path / "export")
    assert [w for w in res.warnings if "no list of chat messages" in w] == [
        "tau2.json simulations[1]: no list of chat messages, skipped",
        "tau2.json simulations[2]: no list of chat messages, skipped"]


def test_a_log_of_chat_completions_calls_is_one_request_per_call(tmp_path: Path) -> None:
    """A gateway's log of OpenAI chat completions calls, {request: {model, messages},
    response: {choices, usage}} per line: each line is one request (its answer with the
    recorded usage); the answers it was sent as history are earlier calls', not requests."""
    system = {"role": "system", "content": "You are helpful."}
    ask = {"role": "user", "content": "Weather in Paris?"}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function",
         "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]}
    result = {"role": "tool", "tool_call_id": "call_1", "content": "18C, cloudy"}
    answer = {"role": "assistant", "content": "18C and cloudy in Paris."}

    def exchange(messages: list, reply: dict, tokens: int, created: int) -> dict:
        return {"request": {"model": "gpt-4o", "messages": messages},
                "response": {"id": f"chatcmpl-{created}", "object": "chat.completion",
                             "created": created, "model": "gpt-4o-2024-08-06",
                             "choices": [{"index": 0, "message": reply, "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": tokens, "completion_tokens": 9}}}

    path = tmp_path / "gateway.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in (
        exchange([system, ask], call, 80, 1719000000),
        exchange([system, ask, call, result], answer, 140, 1719000005))))
    res = adapt(path, tmp_path / "export")
    assert res.format == "openai-chat" and not res.warnings, res.warnings
    db = tmp_path / "store.duckdb"
    ingest(res.export_dir, db)
    assert sql(db, "SELECT assembled_tokens, list_contains(tags, 'tokens:recorded') "
                   "FROM context_assemblies ORDER BY assembled_at") == [(80, True), (140, True)]
    # each line is a conversation of its own: the call the first answer made has its result
    # in the second line only (where the call is history, answered)
    assert sql(db, "SELECT status FROM tool_calls ORDER BY status") == [("pending",), ("succeeded",)]
