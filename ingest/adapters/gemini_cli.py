"""Gemini CLI session JSON -> export.

A Gemini CLI session (``~/.gemini/tmp/<project hash>/chats/session-*.json``) is one JSON
object ``{sessionId, projectHash, startTime, lastUpdated, messages}``. Each message has
``id``, ``timestamp``, ``type`` and ``content`` (a string, or a list of parts with
``text``). ``user`` messages are the user's turns; each ``gemini`` message is one model
response, so one model request, whose context is every record before it (user turns,
earlier responses, their tool calls and results, all included verbatim, in order). Its
``tokens.input`` is the request's recorded input tokens; ``model`` its model. The
response's ``toolCalls`` (``id``, ``name``, ``args``, ``status``, ``timestamp``) become tool
calls, answered by the ``functionResponse`` of their ``result`` list; ``status`` ``error``
or ``cancelled`` marks the call failed. ``info`` / ``error`` / ``warning`` messages are
shown to the user by the CLI and never sent to the model: they are stored as system
messages that no request includes. ``thoughts`` (the model's reasoning summaries) are not
sent back either and are not stored.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

from ..errors import ContextlensError
from .builder import AdaptResult, Builder, Rec
from .common import EPOCH, as_text, blocks_text, parse_ts
from .files import Sample
from .jsonread import loads_document
from .tokens import TokenEstimator

FORMAT = "gemini-cli"
TYPES = {"user", "gemini", "info", "error", "warning"}
NOTICES = {"info", "error", "warning"}
FAILED = {"error", "cancelled"}
DONE = {"success", *FAILED}
# a session over the sniff limit is not parsed whole: decided on the keys of its head
_HEAD_KEYS = (
    re.compile(rb'^\s*\{'),
    re.compile(rb'"sessionId"\s*:'),
    re.compile(rb'"messages"\s*:\s*\['),
    re.compile(rb'"type"\s*:\s*"gemini"'),
)


def sniff_document(doc: Any) -> str | None:
    if not isinstance(doc, dict) or "sessionId" not in doc:
        return 'not a JSON object with "sessionId"'
    msgs = doc.get("messages")
    if not isinstance(msgs, list):
        return 'no "messages" list'
    typed = [m for m in msgs if isinstance(m, dict) and isinstance(m.get("type"), str)]
    if not typed or any(m["type"] not in TYPES for m in typed[:50]):
        return 'messages have no "type" user/gemini/info/error'
    return None


def _recorded(tokens: Any) -> int | None:
    v = tokens.get("input") if isinstance(tokens, dict) else None
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e12:
        return int(v)
    return None


def _response_text(call: dict[str, Any]) -> tuple[str, bool]:
    """(result text, the response says error) of a tool call's ``result`` parts."""
    parts = call.get("result") if isinstance(call.get("result"), list) else []
    texts: list[str] = []
    error = False
    found = False
    for p in parts:
        fr = p.get("functionResponse") if isinstance(p, dict) else None
        if not isinstance(fr, dict):
            if p is not None:
                found = True
                texts.append(blocks_text(p))
            continue
        found = True
        resp = fr.get("response")
        if isinstance(resp, dict) and set(resp) <= {"output", "error"}:
            if resp.get("error") is not None:
                error = True
                texts.append(as_text(resp["error"]))
            if resp.get("output") is not None:
                texts.append(as_text(resp["output"]))
        else:
            texts.append(as_text(resp))
    if not found and call.get("resultDisplay") is not None:
        texts.append(as_text(call["resultDisplay"]))
    return "\n".join(t for t in texts if t), error


def adapt_gemini_cli(path: Path, out_dir: Path, estimator: TokenEstimator | None = None) -> AdaptResult:
    data = path.read_bytes()
    try:
        doc = loads_document(path, data)
    except (ValueError, UnicodeDecodeError) as err:
        raise ContextlensError(f"{path}: not a Gemini CLI session (not JSON: {str(err)[:80]})") from None
    why = sniff_document(doc)
    if why is not None:
        raise ContextlensError(f"{path}: not a Gemini CLI session ({why})")
    b = Builder(FORMAT, path, data, estimator)
    clock = [parse_ts(doc.get("startTime")) or EPOCH]

    def ts(value: Any) -> dt.datetime:
        t = parse_ts(value)
        if t is None:
            t = clock[0] + dt.timedelta(seconds=1)
        clock[0] = max(clock[0], t)
        return t

    msgs = doc["messages"]
    first_user = next(
        (blocks_text(m.get("content")) for m in msgs if isinstance(m, dict) and m.get("type") == "user"),
        "",
    )
    cid = b.conversation(first_user or f"Gemini CLI session {as_text(doc.get('sessionId'))}", clock[0])
    user = b.user_of[cid]
    records: list[Rec] = []
    last_user: str | None = None
    for i, m in enumerate(msgs):
        label = f"{path.name} message {i}"
        kind = m.get("type") if isinstance(m, dict) else None
        if kind not in TYPES:
            b.warn(f"{label}: not a session message (type {kind!r}), skipped")
            continue
        t = ts(m.get("timestamp"))
        text = blocks_text(m.get("content"))
        if kind == "user":
            rec = b.message(cid, "user", text, t, participant_id=user)
            records.append(rec)
            last_user = rec.id
        elif kind in NOTICES:
            b.message(cid, "system", text, t, speaker_label=f"gemini-cli {kind}")
        else:
            _response(b, cid, m, label, t, text, records, last_user, ts)
    return b.write(out_dir)


def _response(
    b: Builder, cid: str, m: dict[str, Any], label: str, t: dt.datetime, text: str,
    records: list[Rec], last_user: str | None, ts: Any,
) -> None:
    model = m.get("model") if isinstance(m.get("model"), str) and m["model"] else "unknown"
    pid = b.participant(cid, f"model:{model}", model, "model", "google", model)
    rid = b.run(cid, pid, "google", model, t, ended_at=t, trigger_message_id=last_user)
    b.assembly(rid, list(records), [], _recorded(m.get("tokens")))
    t = t + dt.timedelta(microseconds=1)  # produced after the request was assembled
    if text or not m.get("toolCalls"):
        records.append(
            b.message(cid, "assistant", text, t, participant_id=pid, model_run_id=rid,
                      speaker_label=model, parent_message_id=last_user)
        )
    calls = m.get("toolCalls") if isinstance(m.get("toolCalls"), list) else []
    made: list[str] = []
    for j, tc in enumerate(calls):
        if not isinstance(tc, dict):
            b.warn(f"{label}: tool call {j} is not an object, skipped")
            continue
        call = b.tool_call(rid, str(tc.get("name") or "unknown"), tc.get("args", {}), t)
        records.append(call)
        made.append(call.id)
        status = tc.get("status")
        body, says_error = _response_text(tc)
        if status in DONE or body:
            failed = status in FAILED or (status not in DONE and says_error)
            done = max(ts(tc.get("timestamp")), t)
            records.append(b.tool_result(call.id, body, failed, done))
    if len(made) >= 2:
        for tid in made:
            b.call_row(tid)["parallel_group"] = f"{rid}:parallel"
        b.bump("parallel_groups")


class GeminiCliAdapter:
    """The ``gemini-cli`` adapter (entry point of ``contextlens.adapters``)."""

    name = FORMAT
    description = "Gemini CLI session JSON {sessionId, messages: [{type: user|gemini, ...}]}"

    def sniff(self, sample: Sample) -> str | None:
        if sample.document is not None:
            return sniff_document(sample.document)
        if not sample.complete and all(k.search(sample.head) for k in _HEAD_KEYS):
            return None
        if sample.lines is not None and not sample.complete:
            return 'not a JSON object with "sessionId" and "messages"'
        return sample.not_json_reason() if not sample.is_json else 'not a JSON object with "sessionId"'

    def adapt(self, path: Path, out_dir: Path, estimator: TokenEstimator) -> AdaptResult:
        return adapt_gemini_cli(path, out_dir, estimator)
