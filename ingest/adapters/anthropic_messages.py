"""Anthropic Messages API request logs -> export.

Accepted: a JSON object, a JSON list, or JSON lines, of entries that are either a request
body ``{model, system?, messages, tools?, max_tokens?, ...}`` or a wrapper
``{"request": body, "response": response?}`` (``body`` may itself be nested under
``"body"``; an entry may carry ``timestamp``). Each entry is one model request whose
context is exactly its ``messages``, all included verbatim in order. The ``system`` prompt
and ``tools`` schemas are sent but are not records: they are estimated and reported as
``unattributed_tokens`` when the response records usage.

Consecutive requests of one conversation (each request's messages extend the previous
request's messages, ``cache_control`` marks ignored) share one conversation and reuse its
records; a request that extends none starts a new conversation. An assistant message is
attributed to the request whose response it is: the logged response, else the previous
request of the conversation when its response was not logged; assistant turns older than
the log get a run of their own without an assembly. ``tool_use`` blocks are tool calls
(two or more in one message share a parallel group); ``tool_result`` blocks are artifacts
(``is_error`` -> failed); a ``tool_use`` never answered stays ``pending``.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .claude_code import USAGE_INPUT_KEYS, recorded_input
from .builder import AdaptResult, Builder, Placement, Rec
from .common import EPOCH, as_text, blocks_text, canonical_json, parse_ts, unreadable_counts
from .jsonread import iter_jsonl, loads_document
from .files import Sample, read_source
from .tokens import TokenEstimator

FORMAT = "anthropic-messages"


def _unwrap(entry: Any) -> tuple[dict[str, Any] | None, Any]:
    """(request body, response or None) of one log entry. A response logged as the HTTP
    exchange (claude-trace: ``{timestamp, status_code, headers, body?, body_raw?}``) is read
    for its message: the JSON ``body``, or the server-sent events of a streamed one
    (``body_raw``), which Claude Code always asks for."""
    if not isinstance(entry, dict):
        return None, None
    body: Any = entry
    response = None
    for k in ("request", "req", "input"):
        if isinstance(entry.get(k), dict):
            body = entry[k]
            response = entry.get("response") or entry.get("output")
            break
    if isinstance(body, dict) and not isinstance(body.get("messages"), list) and isinstance(body.get("body"), dict):
        body = body["body"]
    if isinstance(response, dict):
        message = response.get("body")
        if not isinstance(message, dict) and isinstance(response.get("body_raw"), str):
            message = streamed_message(response["body_raw"])
        if isinstance(message, dict):
            # the exchange's time stands for the message's
            response = {"timestamp": response.get("timestamp"), **message}
    if isinstance(body, dict) and isinstance(body.get("messages"), list):
        return body, response
    return None, None


def streamed_message(events: str) -> dict[str, Any] | None:
    """The message a streamed Messages response sent, rebuilt from its server-sent events
    (``message_start`` with the input usage, content blocks and their deltas,
    ``message_delta`` with the stop reason and output usage; an ``error`` event is the
    error); None when the text holds no message."""
    message: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, str] = {}
    for line in events.splitlines():
        if not line.startswith("data:"):
            continue
        try:
            data = json.loads(line[5:])
        except (ValueError, RecursionError):
            continue
        if not isinstance(data, dict):
            continue
        kind = data.get("type")
        if kind == "message_start" and isinstance(data.get("message"), dict):
            message = {**data["message"], "content": []}
            if not isinstance(message.get("usage"), dict):
                message.pop("usage", None)
        elif kind == "error":
            return {"type": "error", "error": data.get("error")}
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            blocks[_index(data)] = dict(data["content_block"])
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            block, delta = blocks.setdefault(_index(data), {}), data["delta"]
            for field_name, key in (("text", "text"), ("thinking", "thinking")):
                if isinstance(delta.get(key), str):
                    block[field_name] = str(block.get(field_name) or "") + delta[key]
            if isinstance(delta.get("partial_json"), str):
                partial[_index(data)] = partial.get(_index(data), "") + delta["partial_json"]
        elif kind == "message_delta" and message is not None:
            if isinstance(data.get("delta"), dict):
                message.update({k: v for k, v in data["delta"].items()
                                if v is not None and k not in ("usage", "content")})
            if isinstance(data.get("usage"), dict):
                # a count the delta leaves null keeps the start's (as the SDK merges them)
                message["usage"] = {**(message.get("usage") or {}),
                                    **{k: v for k, v in data["usage"].items() if v is not None}}
    if message is None:
        return None
    for index, text in partial.items():
        try:
            blocks.setdefault(index, {})["input"] = json.loads(text) if text else {}
        except ValueError:
            blocks[index]["input"] = {"_unparsed": text}
    message["content"] = [blocks[i] for i in sorted(blocks)]
    return message


def _index(event: dict[str, Any]) -> int:
    index = event.get("index")
    return index if isinstance(index, int) and not isinstance(index, bool) else 0


def _entries(values: Any) -> list[Any]:
    if isinstance(values, dict):
        return [values]
    if isinstance(values, list):
        return values
    return []


def sniff(values: Any) -> str | None:
    entries = _entries(values)
    bodies = [_unwrap(e) for e in entries]
    bodies = [(bd, r) for bd, r in bodies if bd is not None]
    if not bodies:
        return 'no request body with a "messages" list (bare or under "request")'
    score = 0
    for bd, resp in bodies[:200]:
        msgs = bd["messages"]
        for m in msgs:
            if not isinstance(m, dict):
                continue
            if m.get("role") in ("system", "tool", "developer", "function") or "tool_calls" in m:
                return "messages use OpenAI roles/tool_calls (system/tool roles in the list)"
            c = m.get("content")
            if isinstance(c, list) and any(
                isinstance(x, dict) and x.get("type") in ("tool_use", "tool_result") for x in c
            ):
                score += 1
        if "system" in bd or str(bd.get("model", "")).startswith("claude") or "max_tokens" in bd:
            score += 1
        if isinstance(resp, dict) and (resp.get("type") == "message" or isinstance(resp.get("content"), list)):
            score += 1
    if score == 0:
        return "no tool_use/tool_result blocks, no system prompt, no Claude model, no response"
    return None


def _norm(m: Any) -> str:
    """A message's identity for prefix matching: canonical JSON, text shorthand expanded,
    cache_control marks dropped."""

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k != "cache_control"}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    if isinstance(m, dict):
        c = m.get("content")
        if isinstance(c, str):
            c = [{"type": "text", "text": c}]
        return canonical_json({"role": m.get("role"), "content": strip(c)})
    return canonical_json(strip(m))


@dataclass
class _Conv:
    cid: str
    keys: list[str] = field(default_factory=list)  # one per message position
    recs: list[list[Rec]] = field(default_factory=list)
    req_len: int = 0  # messages in the last request
    last_run: str | None = None
    last_run_answered: bool = True
    tool_ids: dict[str, str] = field(default_factory=dict)
    last_user: str | None = None
    every: list[Rec] = field(default_factory=list)  # every record of the conversation, in order
    rewritten: bool = False  # a request changed an earlier message: not one linear history


def adapt_anthropic_messages(
    path: Path, out_dir: Path, estimator: TokenEstimator | None = None
) -> AdaptResult:
    data = read_source(path)
    b = Builder(FORMAT, path, data, estimator)
    try:
        values: Any = loads_document(path, data)
        numbered = [(f"entry {i}", e) for i, e in enumerate(_entries(values))]
    except (ValueError, UnicodeDecodeError):
        numbered = [(f"line {n}", v) for n, v in iter_jsonl(path, data, b)]
    convs: list[_Conv] = []
    clock = EPOCH
    for where, entry in numbered:
        body, resp = _unwrap(entry)
        if body is None:
            b.warn(f"{path.name} {where}: not a Messages request body (no messages list), skipped")
            continue
        request = entry.get("request") if isinstance(entry.get("request"), dict) else {}
        t = parse_ts(entry.get("timestamp") or entry.get("created_at") or entry.get("time")
                     or request.get("timestamp") or entry.get("logged_at"))
        if t is None:
            t = clock + dt.timedelta(seconds=1)
        clock = max(clock, t)
        try:
            _request(b, path, where, body, resp, t, convs)
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            b.warn(f"{path.name} {where}: request skipped ({type(err).__name__}: {err})")
    for conv in convs:
        b.thread(conv.cid, conv.every)
    return b.write(out_dir)


def _request(
    b: Builder, path: Path, where: str, body: dict[str, Any], resp: Any, t: dt.datetime, convs: list[_Conv]
) -> None:
    msgs = [m for m in body["messages"] if isinstance(m, dict)]
    if len(msgs) != len(body["messages"]):
        b.warn(f"{path.name} {where}: non-object messages skipped")
    keys = [_norm(m) for m in msgs]
    conv = None
    for c in reversed(convs):
        if c.req_len and c.req_len <= len(keys) and c.keys[: c.req_len] == keys[: c.req_len]:
            conv = c
            break
    model = str(body.get("model") or (resp or {}).get("model") if isinstance(resp, dict) else body.get("model") or "unknown")
    if conv is None:
        title = next((blocks_text(m.get("content")) for m in msgs if m.get("role") == "user"), "")
        conv = _Conv(b.conversation(title or path.stem, t))
        convs.append(conv)
    cid = conv.cid
    pid = b.participant(cid, f"model:{model}", model, "model", "anthropic", model)
    where_l = f"{path.name} {where}"
    # records of the request's messages, reusing the conversation's where they match
    for i, (m, k) in enumerate(zip(msgs, keys)):
        if i < len(conv.keys) and conv.keys[i] == k:
            continue
        conv.rewritten = conv.rewritten or i < len(conv.keys)
        del conv.keys[i:], conv.recs[i:]
        producer = None
        if m.get("role") == "assistant":
            if conv.last_run is not None and not conv.last_run_answered:
                producer = conv.last_run
                conv.last_run_answered = True
            else:
                producer = b.run(cid, pid, "anthropic", model, t, ended_at=t, trigger_message_id=conv.last_user)
        conv.keys.append(k)
        conv.recs.append(_records(b, conv, m, producer, t, f"{where_l} message {i}"))
        conv.every += conv.recs[-1]
    if conv.last_run is not None and not conv.last_run_answered:
        b.run_row(conv.last_run)["status"] = "succeeded"  # continued, so it had answered
    included = [r for rs in conv.recs[: len(msgs)] for r in rs]
    run_status = "running"
    ended = None
    if isinstance(resp, dict):
        run_status = "failed" if resp.get("type") == "error" or resp.get("error") else "succeeded"
        ended = parse_ts(resp.get("timestamp")) or t
    rid = b.run(cid, pid, "anthropic", model, t, ended_at=ended, trigger_message_id=conv.last_user, status=run_status)
    system_tokens = b.count(blocks_text(body.get("system"))) if body.get("system") else 0
    tool_tokens = b.count(json.dumps(body["tools"])) if body.get("tools") else 0
    recorded = recorded_input(resp.get("usage")) if isinstance(resp, dict) else None
    problem = unreadable_counts(resp.get("usage"), USAGE_INPUT_KEYS) if isinstance(resp, dict) else None
    if problem is not None:
        b.warn(f"{path.name} {where}: usage {problem}, not a whole number of tokens; the "
               "request's input is estimated")
    tags = [f"system_prompt_tokens_estimate:{system_tokens}", f"tool_schema_tokens_estimate:{tool_tokens}",
            "input:exact"]
    # the logged body is the request's exact input; a client that resends the whole
    # conversation is the chat loop's rule, one that rewrote an earlier message is not
    b.runtime = "observed" if conv.rewritten else "chat-full-history"
    b.assembly(rid, included, [], recorded, overhead_estimate=system_tokens + tool_tokens, extra_tags=tags)
    conv.req_len = len(msgs)
    del conv.keys[len(msgs):], conv.recs[len(msgs):]
    conv.last_run = rid
    conv.last_run_answered = isinstance(resp, dict)
    if isinstance(resp, dict) and isinstance(resp.get("content"), list):
        m = {"role": "assistant", "content": resp["content"]}
        conv.keys.append(_norm(m))
        produced = (ended or t) if (ended or t) > t else t + dt.timedelta(microseconds=1)
        conv.recs.append(_records(b, conv, m, rid, produced, f"{where_l} response"))
        conv.every += conv.recs[-1]


def _records(
    b: Builder, conv: _Conv, m: dict[str, Any], producer: str | None, t: dt.datetime, label: str
) -> list[Rec]:
    cid = conv.cid
    role = m.get("role")
    content = m.get("content")
    blocks = content if isinstance(content, list) else [{"type": "text", "text": as_text(content)}]
    out: list[Rec] = []
    if role == "assistant" and producer is not None:
        run = b.run_row(producer)
        text = blocks_text([x for x in blocks if isinstance(x, dict) and x.get("type") not in ("tool_use",)])
        out.append(
            b.message(cid, "assistant", text, t, participant_id=run["participant_id"],
                      model_run_id=producer, speaker_label=run["model"], parent_message_id=conv.last_user)
        )
        made = []
        for x in blocks:
            if isinstance(x, dict) and x.get("type") in ("tool_use", "server_tool_use"):
                rec = b.tool_call(producer, str(x.get("name") or "unknown"), x.get("input"), t)
                out.append(rec)
                made.append(rec.id)
                if isinstance(x.get("id"), str):
                    conv.tool_ids[x["id"]] = rec.id
        if len(made) >= 2:
            for tid in made:
                b.call_row(tid)["parallel_group"] = f"{producer}:parallel"
            b.bump("parallel_groups")
        return out
    texts: list[str] = []
    text_before = False  # text came before this block in the message
    for i, x in enumerate(blocks):
        if isinstance(x, dict) and x.get("type") == "tool_result":
            use_id = x.get("tool_use_id")
            tid = conv.tool_ids.get(use_id) if isinstance(use_id, str) else None
            body = blocks_text(x.get("content"))
            if tid is None or b.call_row(tid)["status"] != "pending":
                b.warn(f"{label}: tool_result for unknown tool_use {x.get('tool_use_id')!r}; kept as text")
                texts.append(body)
                continue
            out.append(b.tool_result(tid, body, bool(x.get("is_error")), t,
                                     placement=Placement(label, i, text_before)))
        else:
            s = blocks_text([x])
            if s:
                texts.append(s)
                text_before = text_before or bool(s.strip())
    if texts or not out:
        rec = b.message(cid, "user" if role != "system" else "system", "\n".join(texts), t,
                        participant_id=b.user_of[cid] if role != "system" else None)
        out.insert(0, rec) if not out else out.append(rec)
        if role == "user":
            conv.last_user = rec.id
    return out


class AnthropicMessagesAdapter:
    """The ``anthropic-messages`` adapter (entry point of ``contextlens.adapters``)."""

    name = FORMAT
    description = "Anthropic Messages API request bodies, optionally with their responses"

    def sniff(self, sample: Sample) -> str | None:
        if sample.document is None and sample.lines is None:
            return sample.not_json_reason()
        return sniff(sample.document if sample.document is not None else sample.lines)

    def adapt(self, path: Path, out_dir: Path, estimator: TokenEstimator) -> AdaptResult:
        return adapt_anthropic_messages(path, out_dir, estimator)
