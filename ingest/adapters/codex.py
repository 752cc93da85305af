"""Codex CLI rollout JSONL (``~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<id>.jsonl``) -> export.

(One format, one module, longer than most: every rollout item kind Codex defines is mapped
here, in the order listed below, so the whole format reads top to bottom.)

Every line is ``{timestamp, type, payload}``. What is read (the rollout's ``RolloutItem``
kinds, as the Codex source defines them):

- ``session_meta``: the session (id, cwd, ``model_provider``); its ``base_instructions``
  text is what Codex sends as the request's ``instructions``: a system record included
  first in every request.
- ``turn_context``: the settings of the turn that follows (``model``, ``approval_policy``,
  ``sandbox_policy``, ``effort``). Each request is made with the newest one's model; its
  policies are tags of the request.
- ``response_item``: one item of the history Codex sends with every request, in wire order.
  ``message`` (role ``user`` -> a user message, ``developer``/``system`` -> a system
  message, ``assistant`` -> the response's text), ``reasoning`` (a message of the response,
  speaker ``reasoning``: its summary text and, when encrypted, only a marker saying so),
  ``function_call`` / ``custom_tool_call`` / ``local_shell_call`` / ``tool_search_call`` ->
  tool calls, answered by ``function_call_output`` / ``custom_tool_call_output`` /
  ``tool_search_output`` with the same ``call_id``; ``web_search_call`` and
  ``image_generation_call`` are run by the server (a call completed with no result
  recorded); ``compaction`` (an encrypted summary) -> a system record shown as a marker.
  ``ghost_snapshot`` is never sent to the model and is not read. An item of a type not
  listed here is skipped and counted in one warning per type.
- ``event_msg``: ``token_count`` closes a model response: ``info.last_token_usage.
  input_tokens`` (cached input included, as the Responses API counts it) is that request's
  recorded input, ``info.model_context_window`` its window. Codex repeats the last count
  after tool outputs: a count whose running total (``total_token_usage``) did not move, or
  whose input is 0 (the reset after a compaction), is not another request.
  ``user_message`` is the user's turn (a user record only when the rollout lacks the
  ``response_item`` of it), ``context_compacted`` is counted, ``thread_rolled_back``
  (``num_turns``) drops the newest user turns from later requests (omitted as
  ``superseded``), ``exec_command_end`` / ``patch_apply_end`` / ``mcp_tool_call_end``
  give exit codes and failures by ``call_id``. Other events are display-only.
- ``compacted``: the history is replaced. With ``replacement_history`` those items are the
  new history (new records, sent from then on); without it (older rollouts) the user
  messages stay and the summary ``message`` becomes a user message. Everything else before
  it is omitted from later requests with reason ``compacted``.

One model request per model response: consecutive model-output items (reasoning, assistant
messages, tool calls) with no input item (user/developer message, tool output) between
them and no new ``token_count`` closing them. Each request's recorded assembly is the base
instructions then the history since the last compaction, in wire order, all verbatim. A
tool output says the call failed when the output carries ``success: false``, an exit code
other than 0 (``Process exited with code N``, ``Exit code: N``, ``metadata.exit_code``, or
the call's ``exec_command_end`` event), or is Codex's ``aborted`` for an interrupted call.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from .builder import AdaptResult, Builder, Rec
from .common import EPOCH, after, as_text, blocks_text, parse_ts, token_count, unreadable_counts
from .files import Sample, read_source
from .jsonread import iter_jsonl, loads_document
from .tokens import DEFAULT_ESTIMATOR, TokenEstimator, exact_estimator

FORMAT = "codex"
LINE_TYPES = {"session_meta", "turn_context", "response_item", "event_msg", "compacted"}
# response items the model produced (a request's output) and the calls among them
OUTPUT_ITEMS = {
    "reasoning", "function_call", "custom_tool_call", "local_shell_call", "tool_search_call",
    "web_search_call", "image_generation_call",
}
CALL_ITEMS = {"function_call", "custom_tool_call", "local_shell_call", "tool_search_call"}
SERVER_CALLS = {"web_search_call": "web_search", "image_generation_call": "image_generation"}
OUTPUT_OF_CALL = {"function_call_output", "custom_tool_call_output", "tool_search_output",
                  "mcp_tool_call_output", "local_shell_call_output"}
COMPACTION_ITEMS = {"compaction", "compaction_summary", "context_compaction"}
IGNORED_ITEMS = {"ghost_snapshot", "compaction_trigger", "additional_tools", "other"}
# text Codex injects as user messages that are context, not the user's turn
CONTEXT_PREFIXES = (
    "<environment_context>", "<user_instructions>", "# AGENTS.md instructions", "<INSTRUCTIONS>",
    "<user_shell_command>", "<turn_aborted>", "<skill>", "<permissions instructions>",
    "<collaboration_mode>", "<personality_spec>",
)
_EXIT = (
    re.compile(r"^Process exited with code (-?\d+)\s*$", re.M),
    re.compile(r"^Exit code: (-?\d+)\s*$", re.M),
)


def _usage(payload: dict[str, Any]) -> tuple[Any, dict[str, Any] | None, int | None]:
    """(running-total key, last usage, context window) of a token_count payload."""
    info = payload.get("info")
    if isinstance(info, dict):
        last = info.get("last_token_usage")
        total = info.get("total_token_usage")
        window = info.get("model_context_window")
        key = json.dumps(total, sort_keys=True) if isinstance(total, dict) else None
        return key, last if isinstance(last, dict) else None, _int(window)
    if "input_tokens" in payload:  # older rollouts: the usage itself, no running total
        return None, payload, None
    return None, None, None


def _int(v: Any) -> int | None:
    return token_count(v)


def exit_code(body: str) -> int | None:
    """The exit code an exec tool's output reports in its header, or in its JSON form."""
    head = body[:2000]
    cut = head.find("\nOutput:")
    if cut >= 0:
        head = head[:cut]
    for pattern in _EXIT:
        m = pattern.search(head)
        if m:
            return int(m.group(1))
    if body.lstrip().startswith("{"):
        try:
            doc = json.loads(body)
        except ValueError:
            return None
        meta = doc.get("metadata") if isinstance(doc, dict) else None
        code = meta.get("exit_code") if isinstance(meta, dict) else None
        if isinstance(code, int) and not isinstance(code, bool):
            return code
    return None


def _output(payload: dict[str, Any]) -> tuple[str, bool | None]:
    """(text sent to the model, the success flag when the output has one)."""
    out = payload.get("output")
    success: bool | None = None
    if isinstance(out, dict):  # {content, success} or {content_items}
        if isinstance(out.get("success"), bool):
            success = out["success"]
        out = out.get("content") if out.get("content") is not None else out.get("content_items")
    if payload.get("type") == "tool_search_output" and out is None:
        out = payload.get("tools")
    if isinstance(out, list):
        return blocks_text(out), success
    return as_text(out), success


def reasoning_text(payload: dict[str, Any]) -> str:
    """A reasoning item as it can be shown: its summary and readable content, and a marker
    for encrypted content (never decrypted, nothing invented)."""
    parts = [blocks_text(payload.get("summary"))]
    if isinstance(payload.get("content"), list):
        parts.append(blocks_text(payload["content"]))
    enc = payload.get("encrypted_content")
    if isinstance(enc, str) and enc:
        parts.append(f"[encrypted reasoning: {len(enc)} characters, not readable]")
    return "\n".join(p for p in parts if p)


def _message_text(payload: dict[str, Any]) -> str:
    return blocks_text(payload.get("content"))


def is_context_message(payload: dict[str, Any]) -> bool:
    """A user-role message Codex injects (environment, AGENTS.md, shell output), not a turn."""
    return _message_text(payload).lstrip().startswith(CONTEXT_PREFIXES)


@dataclass
class _Response:
    run_id: str
    included: list[Rec]
    omitted: list[tuple[Rec, str, str, str]]
    tags: list[str]
    calls: list[str] = field(default_factory=list)
    inputs_after: bool = False  # an input item came after this response's output
    recorded: int | None = None
    window: int | None = None
    counted: bool = False  # its token_count was read
    last_ts: dt.datetime = EPOCH


class _Rollout:
    def __init__(self, b: Builder, path: Path, lines: list[tuple[int, Any]]) -> None:
        self.b = b
        self.path = path
        self.lines = lines
        self.cid = ""
        self.agent = ""
        self.provider = "openai"
        self.model = "unknown"
        self.turn_tags: list[str] = []
        self.window: int | None = None
        self.system: Rec | None = None
        self.history: list[Rec] = []
        self.user_turns: list[int] = []  # history index of each real user message
        self.dropped: list[tuple[Rec, str, str, str]] = []
        self.calls: dict[str, str] = {}  # call_id -> tool_call id
        self.exits: dict[str, int] = {}  # call_id -> exit code from exec_command_end
        self.failed_ids: set[str] = set()  # call_ids an end event says failed
        self.resp: _Response | None = None
        self.last_key: Any = None
        self.last_usage: Any = None
        self.last_ts = EPOCH
        self.last_rec_ts = EPOCH
        self.unknown: dict[str, int] = {}
        self.compactions = 0
        # every record in the order the rollout wrote them: the thread the runtime
        # policy (codex: the whole history since the last compaction) replays
        self.thread: list[Rec] = []
        self.pending_compaction: dict[str, Any] | None = None
        # user turns seen as events and as response items since the model last spoke
        self.user_events: list[tuple[str, dt.datetime]] = []
        self.user_items = 0

    # -- helpers
    def _ts(self, line: dict[str, Any]) -> dt.datetime:
        t = parse_ts(line.get("timestamp"))
        if t is None:
            t = self.last_ts + dt.timedelta(milliseconds=1)
        self.last_ts = max(self.last_ts, t)
        return t

    def _add(self, rec: Rec, ts: dt.datetime) -> None:
        self.history.append(rec)
        self.last_rec_ts = max(self.last_rec_ts, ts)
        self.thread.append(rec)
        if self.pending_compaction is not None:
            # the first record of the history a compaction wrote: the runtime policy
            # drops what came before it (but what it kept) from here on
            self.b.fact(rec.id, compacts=self.pending_compaction)
            self.pending_compaction = None

    # -- the file
    def read(self) -> None:
        # the title: the user's first turn as the CLI showed it (the event), else the first
        # user message that is not injected context
        events = [as_text(d["payload"].get("message")).strip() for _, d in self.lines
                  if isinstance(d, dict) and d.get("type") == "event_msg"
                  and isinstance(d.get("payload"), dict) and d["payload"].get("type") == "user_message"]
        items = [_message_text(d["payload"]).strip() for _, d in self.lines
                 if isinstance(d, dict) and d.get("type") == "response_item"
                 and isinstance(d.get("payload"), dict) and d["payload"].get("type") == "message"
                 and d["payload"].get("role") == "user" and not is_context_message(d["payload"])]
        first_user = next((t for t in events + items if t), None)
        start = next((parse_ts(d.get("timestamp")) for _, d in self.lines if isinstance(d, dict)
                      and parse_ts(d.get("timestamp"))), None) or EPOCH
        self.last_ts = start
        meta = next((d["payload"] for _, d in self.lines if isinstance(d, dict)
                     and d.get("type") == "session_meta" and isinstance(d.get("payload"), dict)), {})
        self.provider = str(meta.get("model_provider") or "openai")
        title = first_user or f"Codex session {as_text(meta.get('id')) or self.path.stem}"
        self.cid = self.b.conversation(title, start)
        self._pre_scan()
        for n, d in self.lines:
            if not isinstance(d, dict):
                self.b.warn(f"{self.path.name} line {n}: not a JSON object, skipped")
                continue
            try:
                self._line(n, d)
            except (KeyError, TypeError, AttributeError, ValueError) as err:
                self.b.warn(f"{self.path.name} line {n}: unexpected {d.get('type')} line skipped "
                            f"({type(err).__name__}: {err})")
        self._flush_user_events()
        self._close()
        self.b.thread(self.cid, ([self.system] if self.system else []) + self.thread)
        for kind, count in sorted(self.unknown.items()):
            self.b.warn(f"{self.path.name}: {count} {kind} skipped (a type this adapter does not know)")
            self.b.bump("unknown_items", count)

    def _pre_scan(self) -> None:
        """Exit codes and failures the end events give by call_id (they may come before or
        after the output item they describe)."""
        for _, d in self.lines:
            if not isinstance(d, dict) or d.get("type") != "event_msg":
                continue
            p = d.get("payload")
            if not isinstance(p, dict) or not isinstance(p.get("call_id"), str):
                continue
            t = p.get("type")
            if t == "exec_command_end" and isinstance(p.get("exit_code"), int):
                self.exits[p["call_id"]] = p["exit_code"]
            elif t == "patch_apply_end" and p.get("success") is False:
                self.failed_ids.add(p["call_id"])
            elif t == "mcp_tool_call_end":
                res = p.get("result")  # Rust's Result: {"Ok": CallToolResult} or {"Err": text}
                ok = res.get("Ok") if isinstance(res, dict) else None
                if (isinstance(res, dict) and "Err" in res) or (
                        isinstance(ok, dict) and (ok.get("isError") is True or ok.get("is_error") is True)):
                    self.failed_ids.add(p["call_id"])

    def _line(self, n: int, d: dict[str, Any]) -> None:
        kind = d.get("type")
        p = d.get("payload")
        if "payload" not in d and kind not in LINE_TYPES:
            # the first rollout shape (2025): the meta line bare, then bare response items
            if is_legacy_meta(d) and self.system is None:
                self._ts(d)
                return
            if kind is None and d.get("record_type") == "state":
                return
            if isinstance(kind, str):
                self._item(n, d, self._ts(d))
                return
        if not isinstance(p, dict):
            if kind in LINE_TYPES:
                self.b.warn(f"{self.path.name} line {n}: {kind} without a payload object, skipped")
            else:
                self._unknown("line(s) without a type")
            return
        ts = self._ts(d)
        if kind == "session_meta":
            self._session_meta(p, ts)
        elif kind == "turn_context":
            self._turn_context(p)
        elif kind == "response_item":
            self._item(n, p, ts)
        elif kind == "event_msg":
            self._event(n, p, ts)
        elif kind == "compacted":
            self._compacted(p, ts)
        else:
            self._unknown(f"line(s) of type {kind!r}")

    def _unknown(self, what: str) -> None:
        self.unknown[what] = self.unknown.get(what, 0) + 1

    def _session_meta(self, p: dict[str, Any], ts: dt.datetime) -> None:
        if self.system is not None:
            return  # a resumed or forked session repeats its meta
        base = p.get("base_instructions")
        text = base.get("text") if isinstance(base, dict) else base
        if isinstance(text, str) and text:
            self.system = self.b.message(self.cid, "system", text, ts, speaker_label="base_instructions")

    def _turn_context(self, p: dict[str, Any]) -> None:
        if isinstance(p.get("model"), str) and p["model"]:
            self.model = p["model"]
        tags = []
        if isinstance(p.get("approval_policy"), str):
            tags.append(f"codex:approval:{p['approval_policy']}")
        sandbox = p.get("sandbox_policy")
        mode = sandbox.get("type") or sandbox.get("mode") if isinstance(sandbox, dict) else sandbox
        if isinstance(mode, str):
            tags.append(f"codex:sandbox:{mode}")
        if isinstance(p.get("effort"), str):
            tags.append(f"codex:effort:{p['effort']}")
        self.turn_tags = tags

    # -- responses
    def _open(self, ts: dt.datetime) -> _Response:
        """The response the next model-output item belongs to (a new one when the last
        was closed by its token_count or followed by input)."""
        r = self.resp
        if r is not None and not r.counted and not r.inputs_after:
            return r
        self._close()
        self._flush_user_events()
        started = max(ts - dt.timedelta(microseconds=1), self.last_rec_ts)
        pid = self.b.participant(self.cid, "agent:codex", "Codex", "model", self.provider, self.model)
        rid = self.b.run(self.cid, pid, self.provider, self.model, started, ended_at=after(ts, started),
                         trigger_message_id=self._last_user_id())
        included = ([self.system] if self.system else []) + list(self.history)
        tags = list(self.turn_tags)
        if self.compactions:
            tags.append(f"after_compaction:{self.compactions}")
        self.resp = _Response(rid, included, list(self.dropped), tags, last_ts=ts)
        return self.resp

    def _last_user_id(self) -> str | None:
        return self.history[self.user_turns[-1]].id if self.user_turns else None

    def _close(self) -> None:
        r = self.resp
        if r is None:
            return
        self.resp = None
        self.b.assembly(r.run_id, r.included, r.omitted, r.recorded, extra_tags=r.tags,
                        context_window_tokens=r.window or self.window)
        if len(r.calls) >= 2:
            for tid in r.calls:
                self.b.call_row(tid)["parallel_group"] = f"{r.run_id}:parallel"
            self.b.bump("parallel_groups")

    def _after(self, r: _Response, ts: dt.datetime) -> dt.datetime:
        run = self.b.run_row(r.run_id)
        t = after(ts, run["started_at"])
        run["ended_at"] = max(t, run["ended_at"] or t)
        r.last_ts = t
        return t

    def _input(self) -> None:
        if self.resp is not None:
            self.resp.inputs_after = True

    # -- items
    def _item(self, n: int, p: dict[str, Any], ts: dt.datetime) -> None:
        t = p.get("type")
        if t == "message":
            self._message(p, ts)
        elif t == "reasoning":
            r = self._open(ts)
            at = self._after(r, ts)
            rec = self.b.message(self.cid, "assistant", reasoning_text(p), at,
                                 participant_id=self.b.run_row(r.run_id)["participant_id"],
                                 model_run_id=r.run_id, speaker_label="reasoning",
                                 parent_message_id=self._last_user_id())
            self._add(rec, at)
            if isinstance(p.get("encrypted_content"), str) and p["encrypted_content"]:
                self.b.bump("encrypted_reasoning")
        elif t in CALL_ITEMS:
            self._call(n, p, ts)
        elif t in SERVER_CALLS:
            self._server_call(p, ts)
        elif t in OUTPUT_OF_CALL:
            self._result(n, p, ts)
        elif t in COMPACTION_ITEMS:
            self._input()
            enc = p.get("encrypted_content")
            size = len(enc) if isinstance(enc, str) else 0
            rec = self.b.message(self.cid, "system",
                                 f"[encrypted compaction summary: {size} characters, not readable]",
                                 ts, speaker_label=str(t))
            self._add(rec, ts)
        elif t in IGNORED_ITEMS:
            self.b.bump(f"items_not_sent.{t}")
        else:
            self._unknown(f"response_item(s) of type {t!r}")

    def _message(self, p: dict[str, Any], ts: dt.datetime) -> None:
        role = p.get("role")
        text = _message_text(p)
        if role == "assistant":
            r = self._open(ts)
            at = self._after(r, ts)
            rec = self.b.message(self.cid, "assistant", text, at,
                                 participant_id=self.b.run_row(r.run_id)["participant_id"],
                                 model_run_id=r.run_id, speaker_label=self.model,
                                 parent_message_id=self._last_user_id())
            self._add(rec, at)
            return
        self._input()
        if role == "user":
            context = is_context_message(p)
            rec = self.b.message(self.cid, "user", text, ts, participant_id=self.b.user_of[self.cid],
                                 speaker_label="context" if context else None)
            if not context:
                self.user_turns.append(len(self.history))
                self.user_items += 1
        else:
            rec = self.b.message(self.cid, "system", text, ts, speaker_label=str(role or "system"))
        self._add(rec, ts)

    def _call(self, n: int, p: dict[str, Any], ts: dt.datetime) -> None:
        t = p["type"]
        r = self._open(ts)
        at = self._after(r, ts)
        if t == "function_call":
            name = str(p.get("name") or "unknown")
            if isinstance(p.get("namespace"), str) and p["namespace"]:
                name = f"{p['namespace']}.{name}"
            args: Any = p.get("arguments", {})
        elif t == "custom_tool_call":
            name, args = str(p.get("name") or "unknown"), as_text(p.get("input"))
        elif t == "local_shell_call":
            name, args = "local_shell", p.get("action", {})
        else:
            name, args = "tool_search", p.get("arguments", p.get("query", {}))
        rec = self.b.tool_call(r.run_id, name, args, at)
        r.calls.append(rec.id)
        self._add(rec, at)
        call_id = p.get("call_id") or p.get("id")
        if isinstance(call_id, str):
            if call_id in self.calls:
                self.b.warn(f"{self.path.name} line {n}: call_id {call_id!r} used twice; "
                            "outputs go to the newer call")
            self.calls[call_id] = rec.id

    def _server_call(self, p: dict[str, Any], ts: dt.datetime) -> None:
        """A call the server ran (web search, image generation): no output item follows."""
        r = self._open(ts)
        at = self._after(r, ts)
        t = p["type"]
        if t == "web_search_call":
            args: Any = p.get("action") if p.get("action") is not None else {}
        else:
            args = {"revised_prompt": p.get("revised_prompt")}
        rec = self.b.tool_call(r.run_id, SERVER_CALLS[t], args, at)
        r.calls.append(rec.id)
        self._add(rec, at)
        status = p.get("status")
        row = self.b.call_row(rec.id)
        if status in (None, "completed"):
            row["status"], row["completed_at"] = "succeeded", at
        elif status in ("failed", "incomplete"):
            row["status"], row["completed_at"] = "failed", at
            self.b.bump("tool_errors")
        self.b.bump("server_calls")

    def _result(self, n: int, p: dict[str, Any], ts: dt.datetime) -> None:
        self._input()
        call_id = p.get("call_id")
        body, success = _output(p)
        tid = self.calls.get(call_id) if isinstance(call_id, str) else None
        if tid is None or self.b.call_row(tid)["status"] != "pending":
            why = "answers no call of this rollout" if tid is None else "answers a call already answered"
            self.b.warn(f"{self.path.name} line {n}: {p.get('type')} {call_id!r} {why}; "
                        "kept as a tool message")
            self._add(self.b.message(self.cid, "tool", body, ts, speaker_label=str(p.get("type"))), ts)
            return
        code = self.exits.get(call_id)
        if code is None:
            code = exit_code(body)
        failed = (success is False or (code is not None and code != 0)
                  or call_id in self.failed_ids or body.strip() == "aborted")
        rec = self.b.tool_result(tid, body, failed, ts)
        self._add(rec, self.b.call_row(tid)["completed_at"])

    # -- events
    def _event(self, n: int, p: dict[str, Any], ts: dt.datetime) -> None:
        t = p.get("type")
        if t == "token_count":
            self._token_count(n, p, ts)
        elif t == "user_message":
            self._input()
            self.user_events.append((as_text(p.get("message")), ts))
        elif t in ("task_started", "turn_started"):
            w = _int(p.get("model_context_window"))
            if w:
                self.window = w
        elif t == "context_compacted":
            self.b.bump("context_compacted_events")
        elif t == "thread_rolled_back":
            self._rollback(p, ts)

    def _token_count(self, n: int, p: dict[str, Any], ts: dt.datetime) -> None:
        key, last, window = _usage(p)
        if last is None:
            return
        recorded = _int(last.get("input_tokens"))
        problem = unreadable_counts(last, ("input_tokens",))
        if problem is not None:  # not a reset: a recorded figure we cannot read
            self.b.warn(f"{self.path.name} line {n}: token_count {problem}, not a whole number "
                        "of tokens; the request's input is estimated")
            return
        if key is None:
            key = json.dumps(last, sort_keys=True)
            if key == self.last_usage:
                return
        elif key == self.last_key:
            return  # the same count repeated: not another response
        self.last_key = key
        self.last_usage = json.dumps(last, sort_keys=True)
        if not recorded:
            return  # a reset (after a compaction), not a request
        if window:
            self.window = window
        r = self.resp
        if r is None or r.counted:
            # a response with no recorded item (a compaction prompt, an empty answer)
            r = self._open(ts)
            r.tags.append("codex:no_output_recorded")
            self.b.bump("requests_without_output")
        r.recorded, r.window, r.counted = recorded, window, True
        self.b.bump("token_counts")

    def _flush_user_events(self) -> None:
        """User turns recorded only as events (no response_item of them): records now."""
        extra = self.user_events[self.user_items:] if len(self.user_events) > self.user_items else []
        for text, ts in extra:
            self._input()
            rec = self.b.message(self.cid, "user", text, ts, participant_id=self.b.user_of[self.cid])
            self.user_turns.append(len(self.history))
            self._add(rec, ts)
            self.b.bump("user_messages_from_events")
        self.user_events, self.user_items = [], 0

    def _rollback(self, p: dict[str, Any], ts: dt.datetime) -> None:
        n = _int(p.get("num_turns")) or 0
        self._flush_user_events()
        if n <= 0 or not self.user_turns:
            return
        self._close()
        cut = self.user_turns[-min(n, len(self.user_turns))]
        # a rollback rewrites the history: the requests after it are not the runtime
        # policy's (it models compaction only), so they stay observed
        self.b.runtime = "observed"
        detail = f"rolled back at {ts.isoformat()} (thread_rolled_back, {n} turns)"
        self.dropped += [(r, "superseded", "window", detail) for r in self.history[cut:]]
        del self.history[cut:]
        self.user_turns = [i for i in self.user_turns if i < cut]
        self.b.bump("rollbacks")

    def _compacted(self, p: dict[str, Any], ts: dt.datetime) -> None:
        self._flush_user_events()
        self._close()
        self.compactions += 1
        k = self.compactions
        replacement = p.get("replacement_history")
        old = self.history
        if isinstance(replacement, list):
            kept: list[Rec] = []
            how = f"replaced by {len(replacement)} items of replacement_history"
        else:
            kept = [old[i] for i in self.user_turns]
            how = "replaced by the user messages and the summary"
        keep_ids = {r.id for r in kept}
        detail = f"dropped by compaction #{k} at {ts.isoformat()} ({how})"
        # the base instructions are sent with every request, compacted or not
        system = [self.system.id] if self.system else []
        self.pending_compaction = {"detail": detail, "keeps": sorted(keep_ids) + system}
        self.dropped += [(r, "compacted", "window", detail) for r in old if r.id not in keep_ids]
        self.history, self.user_turns = list(kept), list(range(len(kept)))
        if isinstance(replacement, list):
            for item in replacement:
                self._replayed(item, ts)
        else:
            summary = as_text(p.get("message"))
            rec = self.b.message(self.cid, "user", summary, ts, participant_id=self.b.user_of[self.cid],
                                 speaker_label="compaction summary")
            self._add(rec, ts)
        self.b.bump("compactions")

    def _replayed(self, item: Any, ts: dt.datetime) -> None:
        """One item of a compaction's replacement history: sent from now on, made by no
        request of this rollout (the assistant text in it repeats earlier answers)."""
        if not isinstance(item, dict):
            return
        t = item.get("type")
        if t == "message":
            role = item.get("role")
            text = _message_text(item)
            if role == "user":
                context = is_context_message(item)
                rec = self.b.message(self.cid, "user", text, ts, participant_id=self.b.user_of[self.cid],
                                     speaker_label="context" if context else "replacement history")
                if not context:
                    self.user_turns.append(len(self.history))
            elif role == "assistant":
                rec = self.b.message(self.cid, "assistant", text, ts, speaker_label="replacement history")
            else:
                rec = self.b.message(self.cid, "system", text, ts, speaker_label=str(role or "system"))
        elif t in COMPACTION_ITEMS:
            enc = item.get("encrypted_content")
            size = len(enc) if isinstance(enc, str) else 0
            rec = self.b.message(self.cid, "system",
                                 f"[encrypted compaction summary: {size} characters, not readable]",
                                 ts, speaker_label=str(t))
        elif t == "reasoning":
            rec = self.b.message(self.cid, "assistant", reasoning_text(item), ts, speaker_label="reasoning")
        elif t in IGNORED_ITEMS:
            return
        else:
            rec = self.b.message(self.cid, "system", as_text(item), ts, speaker_label=f"replacement {t}")
        self._add(rec, ts)


def _models(lines: list[tuple[int, Any]]) -> Iterator[str | None]:
    for _, d in lines:
        if isinstance(d, dict) and d.get("type") == "turn_context" and isinstance(d.get("payload"), dict):
            m = d["payload"].get("model")
            yield m if isinstance(m, str) and m else None


def adapt_codex(path: Path, out_dir: Path, estimator: TokenEstimator | None = None) -> AdaptResult:
    data = read_source(path)
    b = Builder(FORMAT, path, data, estimator)
    b.runtime = "codex"  # the whole history since the last compaction (replay/runtimes.py)
    first = ts_rollout_lines(_document(path, data))
    lines = list(enumerate(first, 1)) if first is not None else list(iter_jsonl(path, data, b))
    if estimator is None or estimator is DEFAULT_ESTIMATOR:
        # an OpenAI model's own tokenizer counts exactly; others are calibrated on the recording
        models = list(_models(lines))
        if models:
            b.use_exact(exact_estimator(models))
    _Rollout(b, path, lines).read()
    return b.write(out_dir)


def _document(path: Path, data: bytes) -> Any:
    """The file as one JSON value when it is one object (None otherwise)."""
    if not data.lstrip()[:1] == b"{":
        return None
    try:
        return loads_document(path, data)
    except (ValueError, UnicodeDecodeError):
        return None


def ts_rollout_lines(document: Any) -> list[Any] | None:
    """A rollout of the TypeScript Codex CLI (``codex-cli/src/utils/storage/save-rollout.ts``,
    2025: one JSON document ``{session: {timestamp, id, instructions}, items: [...]}``) as the
    lines of the first JSONL shape that followed it: the session, then its response items.
    None for anything else."""
    if not isinstance(document, dict) or not isinstance(document.get("items"), list):
        return None
    session = document.get("session")
    if not isinstance(session, dict) or not is_legacy_meta({"instructions": "", **session}):
        return None
    return [{"instructions": "", **session}, *document["items"]]


def is_legacy_meta(d: Any) -> bool:
    """The first line of a rollout of the first shape: the session itself, no type."""
    return (isinstance(d, dict) and "type" not in d and "payload" not in d
            and isinstance(d.get("id"), str) and "timestamp" in d
            and ("instructions" in d or "git" in d))


ITEM_TYPES = OUTPUT_ITEMS | OUTPUT_OF_CALL | COMPACTION_ITEMS | {"message"}


def sniff(lines: list[Any]) -> str | None:
    """None if these parsed JSON lines look like a Codex rollout, else why not."""
    if not lines:
        return "no JSON lines"
    if is_legacy_meta(lines[0]):
        rest = [d for d in lines[1:] if isinstance(d, dict) and d.get("record_type") != "state"]
        if rest and all(d.get("type") in ITEM_TYPES for d in rest[:50]):
            return None
        if not rest:
            return "a session line and no response item"
    typed = [d for d in lines if isinstance(d, dict) and "payload" in d]
    kinds = {d.get("type") for d in typed}
    if not typed or not kinds & LINE_TYPES:
        return 'no line is {"type": session_meta/response_item/event_msg, "payload": …}'
    if not kinds & {"session_meta", "response_item", "turn_context"}:
        return "no session_meta, turn_context or response_item line"
    stray = [d for d in typed if d.get("type") not in LINE_TYPES]
    if len(stray) > len(typed) // 2:
        return f"most lines are not rollout lines (e.g. type {stray[0].get('type')!r})"
    return None


class CodexAdapter:
    """The ``codex`` adapter (entry point of ``contextlens.adapters``)."""

    name = FORMAT
    description = "Codex CLI rollout JSONL (session_meta, turn_context, response_item, event_msg)"

    def sniff(self, sample: Sample) -> str | None:
        if sample.document is None and sample.lines is None:
            return sample.not_json_reason()
        first = ts_rollout_lines(sample.document)
        if first is not None:
            return sniff(first)
        if sample.document is not None and not (sample.lines and len(sample.lines) == 1
                                                and isinstance(sample.document, dict)):
            return "a single JSON document, not JSON lines"
        return sniff(sample.lines or [])

    def adapt(self, path: Path, out_dir: Path, estimator: TokenEstimator) -> AdaptResult:
        return adapt_codex(path, out_dir, estimator)
