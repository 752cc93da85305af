"""Claude Code session JSONL (``~/.claude/projects/<project>/<session>.jsonl``) -> export.

(One format, one module: the event kinds it reads are listed below, in the order it meets them.)

One line per event. What is read:

- ``assistant`` lines: one API response is split over several lines sharing ``requestId`` /
  ``message.id``; they are merged into ONE model run and one assistant message (text
  blocks); each ``tool_use`` block is a tool call. The main session is one participant (the
  agent) whatever model each request used: a model switch is on the run, not a new
  participant. Calls of one
  response share a ``parallel_group`` when there are two or more, and are placed in wire
  order (all of a response's tool_use blocks, then the results) even when the file has a
  result line between two of its tool_use lines.
- ``user`` lines: text -> a user message (``isMeta`` lines are marked ``meta``);
  ``tool_result`` blocks -> one tool artifact each (``is_error`` -> failed); a call never
  answered stays ``pending``.
- ``system`` ``compact_boundary`` (``compactMetadata.preTokens``): the compaction event.
  Every record before it is omitted from later requests with reason ``compacted`` (the
  boundary marker itself is an event, not content, and is not listed); the
  ``isCompactSummary`` user line that follows is an ordinary, included message.
- ``Task`` (or ``Agent``) tool calls start subagents whose transcripts are
  ``<session>/subagents/agent-<agentId>.jsonl``; each of their requests is a child run
  (runtime_kind ``subagent_child``, parent = the run that called Task), owned by a
  participant of kind ``subagent``. ``agent-acompact-*.jsonl`` is the compaction summariser:
  it works for the main agent (its participant) and is sent the main conversation up to the
  line its prompt's ``parentUuid`` names, then its own prompt. Hook output in a subagent
  file (``isMeta`` user lines such as ``<system-reminder>``) whose ``parentUuid`` is a main
  line belongs to the main session, right after that line.
  Sidechain lines kept inside the main file (older versions) are handled the same way.
- ``progress``, ``file-history-snapshot``, ``queue-operation`` and other lines are ignored;
  a malformed line is a warning naming file and line, and is skipped.

Each request's recorded assembly holds everything before it in its own transcript (a
subagent's records are not candidates of the parent; the Task result is), included verbatim
in order, except what a compaction dropped. ``assembled_tokens`` is the recorded
``usage.input_tokens + cache_creation_input_tokens + cache_read_input_tokens``.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..contract import CLEARED_PLACEHOLDER, sent_as
from .builder import AdaptResult, Builder, Placement, Rec, Shown
from .common import EPOCH, after, as_text, blocks_text, parse_ts, token_count, unreadable_counts
from .jsonread import iter_jsonl
from .files import Sample, read_source
from .tokens import TokenEstimator

FORMAT = "claude-code"
TASK_TOOLS = ("Task", "Agent")
THINKING = "thinking"  # the speaker label of a response's thinking record
THINKING_STRIPPED = ("thinking of an earlier turn: the API strips it from the context after "
                     "the next user turn (it is sent back only within its tool-use loop)")


# what a Messages API request was sent, in its response's usage
USAGE_INPUT_KEYS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def recorded_input(usage: Any) -> int | None:
    """The input tokens a Messages response's usage records (input, cache creation and
    cache reads); None when none is recorded, or one of them cannot be read (a part is
    not the whole: the request is then estimated)."""
    if not isinstance(usage, dict) or unreadable_counts(usage, USAGE_INPUT_KEYS) is not None:
        return None
    total = 0
    found = False
    for k in USAGE_INPUT_KEYS:
        v = token_count(usage.get(k))
        if v is not None:
            total += v
            found = True
    return total if found else None


@dataclass
class _Request:
    run_id: str
    message: Rec
    row: dict[str, Any]
    calls: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    # the response's thinking (thinking text, redacted thinking's data): one record
    thinking: list[str] = field(default_factory=list)
    thinking_rec: Rec | None = None
    # where the response's next tool_use goes in the stream's records: right after its
    # message and earlier calls, before any result already written (wire order: every
    # tool_use block of a response, then the results)
    end: int = 0


@dataclass
class _Task:
    tool_call_id: str
    run_id: str
    prompt: str
    subagent_type: str
    agent_id: str | None = None
    matched: bool = False
    # answered with an error and no agent id: refused by the user or interrupted before a
    # subagent started, so there is no transcript to look for
    never_ran: bool = False


class _Ctx:
    """State shared by the streams of one session."""

    def __init__(self, b: Builder, cid: str) -> None:
        self.b = b
        self.cid = cid
        self.tool_ids: dict[str, str] = {}  # tool_use id -> tool_call_id
        self.tasks: list[_Task] = []
        self.task_by_call: dict[str, _Task] = {}
        self.seen_uuids: set[str] = set()
        # main-stream compactions, in order: (run before the boundary, boundary time)
        self.compactions: list[tuple[str | None, dt.datetime]] = []


class _Stream:
    """One transcript (the main session, or one subagent) read line by line."""

    def __init__(
        self,
        ctx: _Ctx,
        file_name: str,
        runtime_kind: str = "chat",
        parent_run: str | None = None,
        agent_id: str | None = None,
        agent_label: str | None = None,
        extra_tags: tuple[str, ...] = (),
    ) -> None:
        self.ctx = ctx
        self.b = ctx.b
        self.file_name = file_name
        self.runtime_kind = runtime_kind
        self.parent_run = parent_run
        self.agent_id = agent_id
        self.agent_label = agent_label
        self.extra_tags = extra_tags
        self.records: list[Rec] = []
        self.boundaries: list[tuple[int, str]] = []  # (records before it, detail)
        self.boundary_ids: set[str] = set()  # compaction markers: events, not content
        # the newest record once each line was read, by line uuid: what a line pointing at
        # that uuid (the compaction summariser's prompt) was sent with
        self.last_record_at: dict[str, Rec | None] = {}
        # records of another stream this one was sent first (the summariser: the parent's
        # history up to the compaction)
        self.inherited: list[Rec] = []
        # tool results cleared in place by a microcompaction: artifact id -> how it is sent
        self.cleared: dict[str, Shown] = {}
        self.result_of: dict[str, Rec] = {}  # tool_call_id -> its result's record
        self.requests: dict[str, _Request] = {}
        self.last_user: str | None = None
        self.user_turn: Rec | None = None  # the newest user turn (a prompt, not tool results)
        self.last_key: str | None = None  # the newest response's request key
        # hook output (meta user lines) held until the open tool-result group is complete
        self.held_hooks: list[tuple[int, dict[str, Any]]] = []
        self.before_file: Rec | None = None  # stands for history a mid-session log lacks
        self.last_run: str | None = None
        self.last_ts: dt.datetime = EPOCH
        self.first_ts: dt.datetime | None = None
        self.last_rec_ts: dt.datetime = EPOCH  # newest record of this stream
        # the user turn since the last request: Claude Code writes each tool_result on its own
        # line, and the API request joins the lines of one turn into one user message
        self.turn_key: str | None = None
        self.turn_blocks = 0
        self.turn_text = False
        # a subagent's own transcript is private to it; only the Task result is shared
        self.visibility = "participant_private" if agent_id else "conversation"
        self.pid: str | None = None
        if agent_id is not None and agent_id.startswith("acompact"):
            # the compaction summariser works for the main agent on its own history: the
            # main agent's participant, so the parent's records it is sent are its own
            self.pid = self.b.participant(
                ctx.cid, "agent:claude-code", "Claude Code", "model", "anthropic", None
            )
        elif agent_id is not None:
            self.pid = self.b.participant(
                ctx.cid, f"subagent:{agent_id}", agent_label or f"subagent {agent_id}",
                "subagent", "anthropic", None,
            )

    # -- helpers
    def _ts(self, line: dict[str, Any]) -> dt.datetime:
        t = parse_ts(line.get("timestamp"))
        if t is None:
            t = self.last_ts + dt.timedelta(milliseconds=1)
        self.last_ts = max(self.last_ts, t)
        if self.first_ts is None:
            self.first_ts = t
        return t

    def _participant(self, model: str) -> str:
        """The participant making this stream's requests. The main session is one agent
        whatever model each request used (a model switch is not another participant: the
        model is on the run); a subagent is its own participant."""
        if self.pid is None:
            return self.b.participant(
                self.ctx.cid, "agent:claude-code", "Claude Code", "model", "anthropic", model
            )
        row = next(r for r in self.b.rows["participants"] if r["participant_id"] == self.pid)
        if row["model"] is None:
            row["model"] = model
        return self.pid

    # -- lines
    def feed(self, n: int, line: Any) -> None:
        if not isinstance(line, dict):
            self.b.warn(f"{self.file_name} line {n}: not a JSON object, skipped")
            return
        uuid = line.get("uuid")
        if isinstance(uuid, str):
            if uuid in self.ctx.seen_uuids:
                return  # a resumed session repeats earlier lines
            self.ctx.seen_uuids.add(uuid)
        try:
            self._read(n, line)
        finally:
            if isinstance(uuid, str):
                self.last_record_at[uuid] = self.records[-1] if self.records else None

    def _read(self, n: int, line: dict[str, Any]) -> None:
        kind = line.get("type")
        try:
            if kind == "assistant":
                self._assistant(n, line)
            elif kind == "user":
                self._user(n, line)
                self._answered()
            elif kind == "system" and line.get("subtype") == "compact_boundary":
                self._compact(n, line)
            elif kind == "system" and line.get("subtype") == "microcompact_boundary":
                self._microcompact(n, line)
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            self.b.warn(f"{self.file_name} line {n}: unexpected {kind} line skipped ({err})")

    def _assistant(self, n: int, line: dict[str, Any]) -> None:
        msg = line.get("message")
        if not isinstance(msg, dict):
            self.b.warn(f"{self.file_name} line {n}: assistant line without message, skipped")
            return
        ts = self._ts(line)
        model = str(msg.get("model") or "unknown")
        content = msg.get("content")
        blocks = content if isinstance(content, list) else [{"type": "text", "text": as_text(content)}]
        if model == "<synthetic>" or line.get("isApiErrorMessage"):
            # written by the client (API error, interruption), not by a model request
            text = blocks_text(blocks)
            self.b.message(
                self.ctx.cid, "assistant", text, ts, speaker_label="synthetic", visibility=self.visibility
            )
            return
        key = line.get("requestId") or msg.get("id") or line.get("uuid") or f"line{n}"
        req = self.requests.get(key)
        if req is None:
            self._flush_hooks()  # a group left unanswered: its held hook output goes first
            self.last_key = key
            started = max(ts - dt.timedelta(microseconds=1), self.last_rec_ts)
            rid = self.b.run(
                self.ctx.cid,
                self._participant(model),
                "anthropic",
                model,
                started,
                ended_at=after(ts, started),
                trigger_message_id=self.last_user,
                runtime_kind=self.runtime_kind,
                parent_model_run_id=self.parent_run,
                subagent_batch_id=f"{self.parent_run}:subagents" if self.parent_run else None,
            )
            problem = unreadable_counts(msg.get("usage"), USAGE_INPUT_KEYS)
            if problem is not None:
                self.b.warn(f"{self.file_name} line {n}: usage {problem}, not a whole number "
                            "of tokens; the request's input is estimated")
            self._assemble(rid, recorded_input(msg.get("usage")))
            rec = self.b.message(
                self.ctx.cid,
                "assistant",
                "",
                after(ts, started),
                participant_id=self.b.run_row(rid)["participant_id"],
                model_run_id=rid,
                speaker_label=model,
                parent_message_id=self.last_user,
                visibility=self.visibility,
            )
            row = self.b.rows["messages"][-1]
            req = _Request(rid, rec, row)
            self.requests[key] = req
            self.turn_key, self.turn_blocks, self.turn_text = None, 0, False
            self.records.append(rec)
            req.end = len(self.records)
            self.last_run = rid
        run = self.b.run_row(req.run_id)
        ts = after(ts, run["started_at"])
        run["ended_at"] = max(ts, run["ended_at"] or ts)
        self.last_rec_ts = max(self.last_rec_ts, ts)
        if msg.get("stop_reason") == "error":
            run["status"] = "failed"
        for blk in blocks:
            if not isinstance(blk, dict):
                continue
            t = blk.get("type")
            if t == "text" and isinstance(blk.get("text"), str):
                req.text.append(blk["text"])
            elif t in ("thinking", "redacted_thinking"):
                body = blk.get("thinking") if t == "thinking" else blk.get("data")
                if isinstance(body, str) and body:
                    self._thinking(req, body, ts)
            elif t == "tool_use":
                use_id = blk.get("id")
                if isinstance(use_id, str) and use_id in self.ctx.tool_ids:
                    continue
                name = str(blk.get("name") or "unknown")
                rec = self.b.tool_call(req.run_id, name, blk.get("input"), ts)
                req.calls.append(rec.id)
                self._insert(req, rec)
                if isinstance(use_id, str):
                    self.ctx.tool_ids[use_id] = rec.id
                if name in TASK_TOOLS:
                    inp = blk.get("input") if isinstance(blk.get("input"), dict) else {}
                    task = _Task(
                        rec.id,
                        req.run_id,
                        as_text(inp.get("prompt")),
                        str(inp.get("subagent_type") or inp.get("description") or "agent"),
                    )
                    self.ctx.tasks.append(task)
                    self.ctx.task_by_call[rec.id] = task
        text = "\n".join(x for x in req.text if x.strip()).strip("\n")
        req.row["content"] = text
        req.row["content_tokens"] = req.message.tokens = self.b.count(text)

    def _thinking(self, req: _Request, body: str, ts: dt.datetime) -> None:
        """The response's thinking (a redacted block counted from the data the log holds),
        one record placed first among its blocks. Sent back only while the tool-use loop it
        began runs: ``_assemble`` omits it from requests after the next user turn."""
        req.thinking.append(body)
        text = "\n".join(req.thinking)
        if req.thinking_rec is None:
            req.thinking_rec = self.b.message(
                self.ctx.cid, "assistant", text, after(ts, self.b.run_row(req.run_id)["started_at"]),
                participant_id=self.b.run_row(req.run_id)["participant_id"],
                model_run_id=req.run_id, speaker_label=THINKING, visibility=self.visibility)
            self.b.fact(req.thinking_rec.id, role="thinking")
            self._insert(req, req.thinking_rec)
            self.b.bump("thinking_blocks")
            return
        row = next(r for r in reversed(self.b.rows["messages"])
                   if r["message_id"] == req.thinking_rec.id)
        row["content"] = text
        row["content_tokens"] = req.thinking_rec.tokens = self.b.count(text)

    def _insert(self, req: _Request, rec: Rec) -> None:
        """A tool call of ``req`` in wire order (Claude Code may write a result line between
        two tool_use lines of one response)."""
        at = req.end
        self.records.insert(at, rec)
        req.end = at + 1
        self.boundaries = [(i + 1 if i > at else i, d) for i, d in self.boundaries]

    def _pending_calls(self) -> bool:
        """The newest response has calls not answered yet (its tool-result group is open)."""
        req = self.requests.get(self.last_key) if self.last_key is not None else None
        return req is not None and any(self.b.call_row(t)["status"] == "pending" for t in req.calls)

    def _flush_hooks(self) -> None:
        held, self.held_hooks = self.held_hooks, []
        for n, line in held:
            self._user(n, line, held=True)

    def _user(self, n: int, line: dict[str, Any], held: bool = False) -> None:
        msg = line.get("message")
        if not isinstance(msg, dict):
            self.b.warn(f"{self.file_name} line {n}: user line without message, skipped")
            return
        content = msg.get("content")
        if (not held and line.get("isMeta") and self._pending_calls()
                and not any(isinstance(b, dict) and b.get("type") == "tool_result"
                            for b in (content if isinstance(content, list) else []))):
            # hook output written while the response's parallel calls are being answered:
            # Claude Code sends it after the whole tool-result group (the Messages API takes
            # tool results first in their message), so it is placed there
            self.held_hooks.append((n, line))
            return
        ts = self._ts(line)
        content = msg.get("content")
        texts: list[str] = []
        results: list[tuple[dict[str, Any], Placement]] = []
        if self.turn_key is None:
            self.turn_key = f"{self.file_name} line {n}"
        if isinstance(content, list):
            for blk in content:
                if isinstance(blk, dict) and blk.get("type") == "tool_result":
                    results.append((blk, Placement(self.turn_key, self.turn_blocks, self.turn_text)))
                else:
                    t = blocks_text([blk])
                    if t:
                        texts.append(t)
                        self.turn_text = self.turn_text or bool(t.strip())
                self.turn_blocks += 1
        else:
            texts.append(as_text(content))
            self.turn_text = self.turn_text or bool(texts[-1].strip())
            self.turn_blocks += 1
        tur = line.get("toolUseResult")
        for blk, placement in results:
            use_id = blk.get("tool_use_id")
            tid = self.ctx.tool_ids.get(use_id) if isinstance(use_id, str) else None
            if tid is None:
                self.b.warn(
                    f"{self.file_name} line {n}: tool_result for unknown tool_use {use_id!r}, skipped"
                )
                continue
            if self.b.call_row(tid)["status"] != "pending":
                continue  # a second answer to the same call
            body = blocks_text(blk.get("content"))
            rec = self.b.tool_result(
                tid, body, bool(blk.get("is_error")), ts, visibility=self.visibility,
                placement=placement,
            )
            self.last_rec_ts = max(self.last_rec_ts, self.b.call_row(tid)["completed_at"])
            self.records.append(rec)
            self.result_of[tid] = rec
            task = self.ctx.task_by_call.get(tid)
            if task is not None and isinstance(tur, dict) and tur.get("agentId"):
                task.agent_id = str(tur["agentId"])
            elif task is not None and blk.get("is_error"):
                task.never_ran = True
        text = "\n".join(texts).strip("\n")
        if text or not results:
            compact = bool(line.get("isCompactSummary"))
            label = "compact summary" if compact else ("meta" if line.get("isMeta") else None)
            rec = self.b.message(
                self.ctx.cid,
                "user",
                text,
                ts,
                participant_id=self.pid or self.b.user_of[self.ctx.cid],
                speaker_label=label,
                visibility=self.visibility,
            )
            self.records.append(rec)
            if compact:  # written by a compaction: a replay without compactions never sends it
                self.b.fact(rec.id, compact_summary=True)
            self.last_rec_ts = max(self.last_rec_ts, ts)
            if not line.get("isMeta"):
                self.last_user = rec.id
                if not results:
                    # a user turn (not tool results): the thinking before it is stripped
                    self.user_turn = rec
                    self.b.fact(rec.id, user_turn=True)

    def _answered(self) -> None:
        """After a user line: hook output held back goes in once the group is complete."""
        if self.held_hooks and not self._pending_calls():
            self._flush_hooks()

    def _compact(self, n: int, line: dict[str, Any]) -> None:
        ts = self._ts(line)
        meta = line.get("compactMetadata") if isinstance(line.get("compactMetadata"), dict) else {}
        trigger = meta.get("trigger", "unknown")
        pre = meta.get("preTokens")
        k = len(self.boundaries) + 1
        detail = (
            f"dropped by compaction #{k} at {ts.isoformat()} "
            f"(trigger {trigger}, preTokens {pre if pre is not None else 'unknown'})"
        )
        rec = self.b.message(
            self.ctx.cid,
            "system",
            f"[compaction #{k}: conversation compacted, trigger {trigger}, preTokens {pre}]",
            ts,
            speaker_label="compact_boundary",
            visibility=self.visibility,
        )
        self.records.append(rec)
        self.boundary_ids.add(rec.id)
        self.b.fact(rec.id, role="compact_boundary", detail=detail)
        self.last_rec_ts = max(self.last_rec_ts, ts)
        self.boundaries.append((len(self.records), detail))
        self.b.bump("compactions")
        if self.agent_id is None:
            self.ctx.compactions.append((self.last_run, ts))

    def _microcompact(self, n: int, line: dict[str, Any]) -> None:
        """Claude Code cleared old tool results in place: from here on each listed result
        is sent as a short placeholder. Our estimate of what that saved is set beside the
        recorded ``tokensSaved``."""
        ts = self._ts(line)
        meta = line.get("microcompactMetadata")
        meta = meta if isinstance(meta, dict) else {}
        ids = meta.get("compactedToolIds") if isinstance(meta.get("compactedToolIds"), list) else []
        k = self.b.stats.get("microcompactions", 0) + 1
        placeholder = self.b.count(CLEARED_PLACEHOLDER)
        cleared = []
        for use_id in ids:
            tid = self.ctx.tool_ids.get(use_id) if isinstance(use_id, str) else None
            rec = self.result_of.get(tid) if tid else None
            if rec is None or rec.id in self.cleared:
                continue
            cleared.append(rec)
        saved = sum(max(r.tokens - placeholder, 0) for r in cleared)
        recorded = meta.get("tokensSaved")
        detail = (
            f"cleared by microcompaction #{k} at {ts.isoformat()} (trigger "
            f"{meta.get('trigger', 'unknown')}; {len(cleared)} results; tokensSaved "
            f"{recorded if recorded is not None else 'unknown'} recorded, {saved} estimated)"
            + sent_as(CLEARED_PLACEHOLDER)
        )
        newest = self.records[-1].id if self.records else None
        for rec in cleared:
            self.cleared[rec.id] = Shown("cleared", "elided", detail,
                                         min(placeholder, rec.tokens))
            # replayed: cleared in the requests whose history reaches the newest record
            self.b.fact(rec.id, cleared={"after": newest, "tokens": min(placeholder, rec.tokens),
                                         "detail": detail})
        missing = len([i for i in ids if isinstance(i, str)]) - len(cleared)
        if missing > 0 and self.before_file is not None and self.before_file.id not in self.cleared:
            # results of the history before this file: that history is sent cleared from
            # here on (the Builder measures what is left of it on the recording)
            left = (f"cleared by microcompaction #{k} at {ts.isoformat()}: {missing} of its tool "
                    "results (the rest of this history is measured on the requests after it)")
            self.cleared[self.before_file.id] = Shown("cleared", "elided", left, 0)
            self.b.fact(self.before_file.id, cleared={"after": newest, "tokens": 0, "detail": left})
        elif missing > 0:
            self.b.warn(f"{self.file_name} line {n}: microcompaction lists {missing} tool results "
                        "not in this transcript")
        self.b.bump("microcompactions")
        self.b.bump("microcompact_results", len(cleared))
        if isinstance(recorded, (int, float)) and not isinstance(recorded, bool):
            self.b.bump("microcompact_tokens_saved_recorded", int(recorded))
        self.b.bump("microcompact_tokens_saved_estimated", saved)

    def _assemble(self, run_id: str, recorded: int | None) -> None:
        cut = self.boundaries[-1][0] if self.boundaries else 0
        omitted = []
        bi = 0
        for i, r in enumerate(self.records[:cut]):
            while self.boundaries[bi][0] <= i:
                bi += 1
            if r.id not in self.boundary_ids:  # the marker itself was never content
                omitted.append((r, "compacted", "window", self.boundaries[bi][1]))
        # thinking is sent back only within the tool-use loop it began: the API strips the
        # thinking of earlier turns from the context and does not count it ("Context
        # windows", extended thinking with tool use, platform.claude.com/docs/en/
        # build-with-claude/context-windows). The summariser's request starts a new turn:
        # none of its inherited thinking is sent.
        turn = next((i for i in range(len(self.records) - 1, cut - 1, -1)
                     if self.records[i] is self.user_turn), cut)
        sent: list[Rec] = []
        for r in self.inherited:
            if self.b.facts.get(r.id, {}).get("role") == "thinking":
                omitted.append((r, "outside_window", "window", THINKING_STRIPPED))
            else:
                sent.append(r)
        for i, r in enumerate(self.records[cut:], cut):
            if i < turn and self.b.facts.get(r.id, {}).get("role") == "thinking":
                omitted.append((r, "outside_window", "window", THINKING_STRIPPED))
            else:
                sent.append(r)
        tags = list(self.extra_tags)
        if self.boundaries:
            tags.append(f"after_compaction:{len(self.boundaries)}")
        if self.cleared:
            tags.append(f"microcompacted:{len(self.cleared)}")
        self.b.assembly(run_id, sent, omitted, recorded, extra_tags=tags, shown_as=self.cleared)

    def history_until(self, uuid: str) -> list[Rec] | None:
        """What a request made right after line ``uuid`` was sent: the records since the
        last compaction before it, up to the newest record once that line was read (None
        when the line is not in this stream)."""
        if uuid not in self.last_record_at:
            return None
        last = self.last_record_at[uuid]
        end = next((i + 1 for i, r in enumerate(self.records) if r is last), 0)
        cut = max((i for i, _ in self.boundaries if i <= end), default=0)
        return [r for r in self.records[cut:end] if r.id not in self.boundary_ids]

    def finish(self) -> None:
        self._flush_hooks()
        # one thread per transcript (sidechains kept in the main file are their own)
        self.b.thread(f"{self.file_name}#{self.agent_id}" if self.agent_id else self.file_name,
                      self.records)
        for req in self.requests.values():
            if len(req.calls) >= 2:
                group = f"{req.run_id}:parallel"
                for tid in req.calls:
                    self.b.call_row(tid)["parallel_group"] = group
                self.b.bump("parallel_groups")


def _subagent_files(path: Path, sessions: set[str]) -> list[tuple[str, Path]]:
    """(name shown, file) of the session's subagent transcripts. Claude Code 2.1 writes
    them to ``<session>/subagents/agent-<id>.jsonl``; 2.0 wrote them beside the session,
    ``agent-<id>.jsonl`` in the project folder among other sessions' agents, so there one
    is the session's when its lines carry one of the session's ``sessionId`` (a resumed
    session's file can hold more than one)."""
    folder = path.parent / path.stem / "subagents"
    found = ([(f"{path.stem}/subagents/{p.name}", p) for p in sorted(folder.glob("agent-*.jsonl"))
              if p.is_file()] if folder.is_dir() else [])
    if not sessions or path.name.startswith("agent-"):
        return found
    names = {p.name for _, p in found}
    found += [(p.name, p) for p in sorted(path.parent.glob("agent-*.jsonl"))
              if p.name not in names and p.is_file() and session_of(p) in sessions]
    return found


_SESSION_ID = re.compile(rb'"sessionId"\s*:\s*"([^"\\]{1,200})"')


def session_of(path: Path) -> str | None:
    """The ``sessionId`` an agent transcript names first, found in its first MB without
    parsing it (a project folder can hold many agent files, and a first line can be a
    pasted file of several MB: the field comes early in every line)."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 20)
    except OSError:
        return None
    m = _SESSION_ID.search(head)
    return m.group(1).decode("utf-8", "replace") if m else None


def _starts_mid_session(lines: list[tuple[int, Any]], uuids: set[Any]) -> bool:
    """True when the log's first linked line points at a line the file does not hold: it
    begins mid-session (a new session's first line has no parent)."""
    for _, d in lines:
        if isinstance(d, dict) and "parentUuid" in d and not d.get("isSidechain"):
            parent = d.get("parentUuid")
            return isinstance(parent, str) and parent not in uuids
    return False


def _first_prompt(lines: list[tuple[int, Any]]) -> str:
    for _, d in lines:
        if isinstance(d, dict) and d.get("type") == "user" and isinstance(d.get("message"), dict):
            return blocks_text(d["message"].get("content")).strip()
    return ""


def adapt_claude_code(
    path: Path, out_dir: Path, estimator: TokenEstimator | None = None
) -> AdaptResult:
    # the parsed lines, the streams and the file's bytes are gone once it is read: a long
    # session's are hundreds of MB, and writing (calibration's DuckDB queries, the export's
    # Arrow batches) comes after, in the same peak
    return _read(path, estimator).write(out_dir)


def _read(path: Path, estimator: TokenEstimator | None) -> Builder:
    """The Builder holding every row of the transcript ``path`` (and its subagents')."""
    data = read_source(path)
    b = Builder(FORMAT, path, data, estimator)
    b.runtime = "claude-code"
    lines = list(iter_jsonl(path, data, b))
    title = ""
    first_ts: dt.datetime | None = None
    for _, d in lines:
        if not isinstance(d, dict):
            continue
        if first_ts is None:
            first_ts = parse_ts(d.get("timestamp"))
        if d.get("type") == "summary" and isinstance(d.get("summary"), str) and not title:
            title = d["summary"]
    if not title:
        for _, d in lines:
            if (
                isinstance(d, dict)
                and d.get("type") == "user"
                and not d.get("isMeta")
                and isinstance(d.get("message"), dict)
                and isinstance(d["message"].get("content"), str)
                and not d["message"]["content"].lstrip().startswith("<")
            ):
                title = d["message"]["content"]
                break
    cid = b.conversation(title or path.stem, first_ts or EPOCH)
    ctx = _Ctx(b, cid)

    # subagents: their own files first, then sidechains kept in the main file
    sources: list[tuple[str, str, list[tuple[int, Any]]]] = []
    sessions = {d["sessionId"] for _, d in lines
                if isinstance(d, dict) and isinstance(d.get("sessionId"), str)}
    for shown, f in _subagent_files(path, sessions):
        try:
            raw = f.read_bytes()
        except OSError as err:
            b.warn(f"{f.name}: unreadable ({err})")
            continue
        sub_lines = list(iter_jsonl(f, raw, b))
        agent = f.stem[len("agent-"):]
        for _, d in sub_lines:
            if isinstance(d, dict) and d.get("agentId"):
                agent = str(d["agentId"])
                break
        sources.append((shown, agent, sub_lines))

    # hook output (meta user lines, e.g. <system-reminder>) that a subagent file holds but
    # whose parentUuid is a line of the main session belongs to the main session, there
    main_uuids = {d.get("uuid") for _, d in lines if isinstance(d, dict) and isinstance(d.get("uuid"), str)}
    hooks: dict[str, list[tuple[int, Any]]] = {}
    for i, (fname, agent, sub_lines) in enumerate(sources):
        kept = []
        for n, d in sub_lines:
            if (isinstance(d, dict) and d.get("type") == "user" and d.get("isMeta")
                    and d.get("parentUuid") in main_uuids):
                hooks.setdefault(d["parentUuid"], []).append((n, d))
            else:
                kept.append((n, d))
        sources[i] = (fname, agent, kept)

    main = _Stream(ctx, path.name)
    if _starts_mid_session(lines, main_uuids):
        # a slice of a longer session (a checkpoint, a resumed log): its first requests
        # carried history this file does not hold; a record stands for it (Builder)
        main.before_file = b.history_before_file(cid, first_ts or EPOCH)
        main.records.append(main.before_file)
    side: dict[str, list[tuple[int, Any]]] = {}
    for n, d in lines:
        if isinstance(d, dict) and d.get("isSidechain") and d.get("type") in ("user", "assistant"):
            side.setdefault(str(d.get("agentId") or "sidechain"), []).append((n, d))
            continue
        main.feed(n, d)
        for hn, hd in hooks.get(d.get("uuid") if isinstance(d, dict) else None, ()):
            main.feed(hn, hd)
    main.finish()
    for agent, sl in side.items():
        sources.append((path.name, agent, sl))

    compact_i = 0
    for fname, agent, sl in sources:
        task = next((t for t in ctx.tasks if t.agent_id == agent and not t.matched), None)
        # a call that never ran has no transcript: never the one a transcript belongs to
        if task is None:
            prompt = _first_prompt(sl)
            task = next(
                (t for t in ctx.tasks if not t.matched and not t.never_ran and t.prompt.strip()
                 and t.prompt.strip() == prompt),
                None,
            )
        if task is None and agent == "sidechain":
            task = next((t for t in ctx.tasks if not t.matched and not t.never_ran), None)
        tags: tuple[str, ...] = (f"subagent:{agent}",)
        if task is not None:
            task.matched = True
            parent = task.run_id
            label = f"subagent {task.subagent_type} ({agent})"
        elif agent.startswith("acompact"):
            parent = None
            if compact_i < len(ctx.compactions):
                parent = ctx.compactions[compact_i][0]
                compact_i += 1
            label = f"compaction summariser ({agent})"
            tags += ("compaction_summariser",)
        else:
            parent = None
            label = f"subagent {agent}"
            b.warn(f"{fname}: no Task call in {path.name} matches subagent {agent}; kept without parent")
        stream = _Stream(ctx, fname, "subagent_child", parent, agent, label, tags)
        if agent.startswith("acompact"):
            # the summariser is sent the parent's conversation up to the compaction: its
            # first prompt line points at the last main line before the boundary
            first = next((d for _, d in sl if isinstance(d, dict) and d.get("type") == "user"), {})
            stream.inherited = main.history_until(str(first.get("parentUuid"))) or []
        for n, d in sl:
            stream.feed(n, d)
        stream.finish()
        b.bump("subagents")
    missing = [t for t in ctx.tasks if not t.matched and not t.never_ran]
    if missing:
        b.bump("subagents_without_transcript", len(missing))
        b.warn(f"{path.name}: {len(missing)} subagent call(s) without a transcript "
               f"({', '.join(t.tool_call_id for t in missing[:3])}{', …' if len(missing) > 3 else ''}; "
               f"looked in {path.stem}/subagents/"
               + (" and for agent-*.jsonl of this session beside it" if sessions else "")
               + "): what those subagents were sent is not in the store")
    return b


_SNIFF_TYPES = {"user", "assistant", "system", "progress", "summary", "file-history-snapshot"}
_UUIDish = re.compile(r"^[0-9a-fA-F-]{8,}$")


def sniff(objs: list[Any]) -> str | None:
    """None if these parsed JSONL lines look like Claude Code, else why not."""
    if not objs:
        return "no JSON lines"
    hits = 0
    for d in objs:
        if isinstance(d, dict) and d.get("type") == "gemini":
            # a Gemini CLI session log whose messages carry its sessionId (some tools write
            # them so): Claude Code never writes a "gemini" line
            return 'lines of type "gemini" (a Gemini CLI session)'
        if (
            isinstance(d, dict)
            and isinstance(d.get("type"), str)
            and d.get("type") in _SNIFF_TYPES
            and ("sessionId" in d or "uuid" in d or "leafUuid" in d)
        ):
            hits += 1
    if hits == 0:
        return 'no line has "type" user/assistant/system/progress with "sessionId" or "uuid"'
    return None


class ClaudeCodeAdapter:
    """The ``claude-code`` adapter (entry point of ``contextlens.adapters``)."""

    name = FORMAT
    description = "Claude Code session JSONL, with its <session>/subagents/ folder"

    def sniff(self, sample: Sample) -> str | None:
        if sample.document is None and sample.lines is None:
            return sample.not_json_reason()
        if sample.document is not None:
            return "a single JSON document, not JSON lines"
        return sniff(sample.lines or [])

    def adapt(self, path: Path, out_dir: Path, estimator: TokenEstimator) -> AdaptResult:
        return adapt_claude_code(path, out_dir, estimator)

    def companions(self, path: Path) -> list[Path]:
        """Files read beside the session that can change while it runs: its subagent
        transcripts (both layouts of ``_subagent_files``), which a follower watches."""
        folder = path.parent / path.stem / "subagents"
        found = sorted(folder.glob("agent-*.jsonl")) if folder.is_dir() else []
        if not path.name.startswith("agent-"):
            found += sorted(path.parent.glob("agent-*.jsonl"))
        return found
