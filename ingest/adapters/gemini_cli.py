"""Gemini CLI session -> export.

Two shapes, both under ``~/.gemini/tmp/<project hash>/chats/``:

- ``session-*.json`` (older CLIs): one JSON object ``{sessionId, projectHash, startTime,
  lastUpdated, messages}``, rewritten whole after every change;
- ``session-*.jsonl`` (newer CLIs): an append-only log. Its first line is the metadata
  ``{sessionId, projectHash, startTime, lastUpdated, kind}``; then every change appends one
  line: a message record (appended again, whole, each time it changes: tokens or tool
  results arriving later, so the last version of an id wins and it keeps the place of its
  first line), ``{"$rewindTo": id}`` (the user rewound: that message and everything after
  it is gone from the conversation), or ``{"$set": {...}}`` (metadata; a ``messages`` list
  there is the history after the CLI compressed or masked it, which replaces the
  conversation).

Each message has ``id``, ``timestamp``, ``type`` and ``content`` (a string, or a list of
parts with ``text``). ``user`` messages are the user's turns; each ``gemini`` message is one
model response, so one model request, whose context is every record of the conversation
before it (user turns, earlier responses, their tool calls and results, all included
verbatim, in order). Its ``tokens.input`` (``promptTokenCount``, cached input included) is
the request's recorded input tokens, unless the CLI recorded no usage (``tokens`` null, or
all zero); ``model`` its model. The response's ``toolCalls`` (``id``, ``name``, ``args``,
``status``, ``timestamp``) become tool calls, answered by the ``functionResponse`` of their
``result`` list; ``status`` ``error`` or ``cancelled``, an ``error`` in the response, or a
shell result reporting ``Exit Code: N`` other than 0 marks the call failed. ``info`` /
``error`` / ``warning`` messages are shown to the user by the CLI and never sent to the
model: they are stored as system messages that no request includes. ``thoughts`` (the
model's reasoning summaries) are not sent back either and are not stored.

Records a rewind removed are omitted from later requests as ``superseded``; records a
compression dropped as ``compacted``; the turns a compression wrote (its summary) are new
records, sent from then on, and made by no request.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Any

from ..errors import ContextlensError
from .builder import AdaptResult, Builder, Rec
from .common import EPOCH, as_text, parse_ts, parts_text
from .files import Sample, read_source
from .jsonread import iter_jsonl, loads_document
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
# the shell tool's result reports the command's exit code on a line of its own
_EXIT_CODE = re.compile(r"^Exit Code: (-?\d+)\s*$", re.M)


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


def _is_meta(line: Any) -> bool:
    return isinstance(line, dict) and "sessionId" in line and "id" not in line and "$set" not in line


def _is_message(line: Any) -> bool:
    return isinstance(line, dict) and isinstance(line.get("id"), str) and line.get("type") in TYPES


def sniff_lines(lines: list[Any]) -> str | None:
    """None if these JSON lines are a Gemini CLI session log (metadata line first)."""
    if not lines or not _is_meta(lines[0]) or "projectHash" not in lines[0]:
        return 'first line is not the session metadata {"sessionId", "projectHash", …}'
    rest = lines[1:50]
    if any(not (_is_message(x) or (isinstance(x, dict) and ("$set" in x or "$rewindTo" in x)))
           for x in rest):
        return 'lines after the metadata are not messages with "type" user/gemini/info/error'
    return None


def _recorded(tokens: Any) -> int | None:
    """The recorded input tokens; None when the CLI recorded no usage (it writes zeros
    when the response carried none)."""
    if not isinstance(tokens, dict):
        return None
    v = tokens.get("input")
    if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1e12:
        return int(v)
    return None


def _part_text(_kind: Any, part: dict[str, Any]) -> str:
    """One Gemini ``Part`` as the text shown: its text; media (``inlineData``, whose
    ``data`` is base64, or ``fileData``) as a short marker such as ``[image]``, the way the
    other formats show an image block, not as its bytes; any other part as JSON."""
    if isinstance(part.get("text"), str):
        return part["text"]
    media = part.get("inlineData", part.get("fileData"))
    if isinstance(media, dict):
        mime = media.get("mimeType")
        major = mime.split("/", 1)[0] if isinstance(mime, str) else ""
        return f"[{major if major in ('image', 'audio', 'video') else 'file'}]"
    return as_text(part)


def content_text(content: Any) -> str:
    """A message's ``content`` (a string, a Part, or a list of Parts and strings) as text."""
    return parts_text([content] if isinstance(content, dict) else content, _part_text)


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
                texts.append(content_text(p))
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


def _exit_failed(body: str) -> bool:
    m = _EXIT_CODE.search(body)
    return m is not None and m.group(1) != "0"


def _events(path: Path, data: bytes, b: Builder) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """(session metadata, events in file order): ("msg", final record) at each message's
    first line, ("rewind", id), ("replace", messages)."""
    try:
        doc = loads_document(path, data)
    except (ValueError, UnicodeDecodeError):
        doc = None
    if _is_meta(doc) and "messages" not in doc:
        doc = None  # the metadata line of a log with nothing else yet
    if doc is not None:
        why = sniff_document(doc)
        if why is not None:
            raise ContextlensError(f"{path}: not a Gemini CLI session ({why})")
        return doc, [("msg", m) for m in doc["messages"]]
    lines = list(iter_jsonl(path, data, b))
    why = sniff_lines([v for _, v in lines])
    if why is not None:
        raise ContextlensError(f"{path}: not a Gemini CLI session ({why})")
    meta: dict[str, Any] = dict(lines[0][1])
    latest: dict[str, Any] = {}
    for _, v in lines[1:]:
        if _is_message(v):
            latest[v["id"]] = v  # appended again on every change: the last one wins
    events: list[tuple[str, Any]] = []
    live: list[str] = []  # ids in the conversation now: a line of one of them is an update
    for n, v in lines[1:]:
        if _is_message(v):
            if v["id"] not in live:
                live.append(v["id"])
                events.append(("msg", latest[v["id"]]))
        elif isinstance(v, dict) and isinstance(v.get("$rewindTo"), str):
            events.append(("rewind", v["$rewindTo"]))
            # as the CLI reloads it: from that id on, or everything when it is unknown
            at = live.index(v["$rewindTo"]) if v["$rewindTo"] in live else 0
            del live[at:]
        elif isinstance(v, dict) and isinstance(v.get("$set"), dict):
            update = v["$set"]
            if isinstance(update.get("messages"), list) and update["messages"]:
                events.append(("replace", update["messages"]))
                live = [m["id"] for m in update["messages"] if _is_message(m)]
            meta.update({k: x for k, x in update.items() if k != "messages"})
        elif isinstance(v, dict) and isinstance(v.get("type"), str) and "id" in v:
            events.append(("msg", v))  # an unknown type: reported where messages are read
        else:
            b.warn(f"{path.name} line {n}: not a session record, skipped")
    return meta, events


class _Session:
    def __init__(self, b: Builder, path: Path, meta: dict[str, Any]) -> None:
        self.b = b
        self.path = path
        self.clock = [parse_ts(meta.get("startTime")) or EPOCH]
        self.order: list[str] = []  # ids of the live conversation, in order
        self.recs: dict[str, list[Rec]] = {}  # message id -> its records
        self.dropped: list[tuple[Rec, str, str, str]] = []
        self.last_user: str | None = None
        self.cid = ""
        self.user = ""
        # every record in the order it was written: the thread the runtime policy
        # (gemini-cli: the whole history since the last compression) replays
        self.thread: list[Rec] = []
        self.pending_compression: dict[str, Any] | None = None

    def ts(self, value: Any) -> dt.datetime:
        t = parse_ts(value)
        if t is None:
            t = self.clock[0] + dt.timedelta(seconds=1)
        self.clock[0] = max(self.clock[0], t)
        return t

    def history(self) -> list[Rec]:
        return [r for mid in self.order for r in self.recs.get(mid, [])]

    def message(self, i: int, m: Any, synthetic: bool = False) -> None:
        label = f"{self.path.name} message {i}"
        kind = m.get("type") if isinstance(m, dict) else None
        if kind not in TYPES:
            self.b.warn(f"{label}: not a session message (type {kind!r}), skipped")
            return
        mid = m.get("id") if isinstance(m.get("id"), str) else f"#{i}"
        if mid in self.recs:
            mid = f"{mid}#{i}"  # an id used twice: two messages all the same
        t = self.ts(m.get("timestamp"))
        text = content_text(m.get("content"))
        recs: list[Rec] = []
        if kind == "user":
            rec = self.b.message(self.cid, "user", text, t, participant_id=self.user,
                                 speaker_label="compression" if synthetic else None)
            recs.append(rec)
            self.last_user = rec.id
        elif kind in NOTICES:
            self.b.message(self.cid, "system", text, t, speaker_label=f"gemini-cli {kind}")
            return  # shown to the user, never sent: no record of the conversation
        elif synthetic:
            recs.append(self.b.message(self.cid, "assistant", text, t, speaker_label="compression"))
        else:
            self._response(m, label, t, text, recs)
        self.order.append(mid)
        self.recs[mid] = recs
        self.thread += recs
        if recs and self.pending_compression is not None:
            # the first record a compression wrote: what came before it is dropped from
            # here on, but the turns it kept
            self.b.fact(recs[0].id, compacts=self.pending_compression)
            self.pending_compression = None

    def _response(self, m: dict[str, Any], label: str, t: dt.datetime, text: str,
                  recs: list[Rec]) -> None:
        b = self.b
        model = m.get("model") if isinstance(m.get("model"), str) and m["model"] else "unknown"
        pid = b.participant(self.cid, f"model:{model}", model, "model", "google", model)
        rid = b.run(self.cid, pid, "google", model, t, ended_at=t, trigger_message_id=self.last_user)
        tags = ["after_compaction:%d" % b.stats["compressions"]] if b.stats.get("compressions") else []
        b.assembly(rid, self.history(), list(self.dropped), _recorded(m.get("tokens")), extra_tags=tags)
        t = t + dt.timedelta(microseconds=1)  # produced after the request was assembled
        if text or not m.get("toolCalls"):
            recs.append(
                b.message(self.cid, "assistant", text, t, participant_id=pid, model_run_id=rid,
                          speaker_label=model, parent_message_id=self.last_user)
            )
        calls = m.get("toolCalls") if isinstance(m.get("toolCalls"), list) else []
        made: list[str] = []
        for j, tc in enumerate(calls):
            if not isinstance(tc, dict):
                b.warn(f"{label}: tool call {j} is not an object, skipped")
                continue
            call = b.tool_call(rid, str(tc.get("name") or "unknown"), tc.get("args", {}), t)
            recs.append(call)
            made.append(call.id)
            status = tc.get("status")
            body, says_error = _response_text(tc)
            if status in DONE or body:
                failed = status in FAILED or says_error or _exit_failed(body)
                done = max(self.ts(tc.get("timestamp")), t)
                recs.append(b.tool_result(call.id, body, failed, done))
        if len(made) >= 2:
            for tid in made:
                b.call_row(tid)["parallel_group"] = f"{rid}:parallel"
            b.bump("parallel_groups")

    def rewind(self, mid: str) -> None:
        """The user rewound to before message ``mid``: it and what followed are gone."""
        at = self.order.index(mid) if mid in self.order else 0
        detail = f"removed by a rewind to before message {mid}"
        for gone in self.order[at:]:
            self.dropped += [(r, "superseded", "window", detail) for r in self.recs.get(gone, [])]
        del self.order[at:]
        self.b.runtime = "observed"  # a rewound history is not the runtime policy's
        self.b.bump("rewinds")

    def replace(self, messages: list[Any]) -> None:
        """The history after a compression: kept ids keep their records, dropped ones are
        omitted from now on, new turns (the summary) are new records."""
        keep = [m.get("id") for m in messages if isinstance(m, dict)]
        if keep == self.order:
            return  # the same history rewritten (masked content): nothing dropped
        k = self.b.stats.get("compressions", 0) + 1
        detail = f"dropped by chat compression #{k}"
        for mid in self.order:
            if mid not in keep:
                self.dropped += [(r, "compacted", "window", detail) for r in self.recs.get(mid, [])]
        known = set(self.recs)
        kept = [r.id for mid in keep if mid in known for r in self.recs.get(mid, [])]
        self.pending_compression = {"detail": detail, "keeps": kept}
        self.order = []
        wrote = False
        for i, m in enumerate(messages):
            if not isinstance(m, dict):
                continue
            if m.get("id") in known:
                if wrote:
                    # a kept turn after the summary: not the order the records were written
                    # in, which the runtime policy replays
                    self.b.runtime = "observed"
                self.order.append(m["id"])
            else:
                self.message(i, m, synthetic=True)
                wrote = True
        self.b.bump("compressions")


def adapt_gemini_cli(path: Path, out_dir: Path, estimator: TokenEstimator | None = None) -> AdaptResult:
    data = read_source(path)
    b = Builder(FORMAT, path, data, estimator)
    meta, events = _events(path, data, b)
    s = _Session(b, path, meta)
    first_user = next(
        (content_text(m.get("content")) for kind, m in events
         if kind == "msg" and isinstance(m, dict) and m.get("type") == "user"),
        "",
    )
    s.cid = b.conversation(first_user or f"Gemini CLI session {as_text(meta.get('sessionId'))}",
                           s.clock[0])
    s.user = b.user_of[s.cid]
    b.runtime = "gemini-cli"  # the whole history since the last compression (replay/runtimes.py)
    for i, (kind, value) in enumerate(events):
        if kind == "msg":
            s.message(i, value)
        elif kind == "rewind":
            s.rewind(value)
        else:
            s.replace(value)
    b.thread(s.cid, s.thread)
    return b.write(out_dir)


class GeminiCliAdapter:
    """The ``gemini-cli`` adapter (entry point of ``contextlens.adapters``)."""

    name = FORMAT
    description = "Gemini CLI session JSON {sessionId, messages: [...]} or its JSONL log"

    def sniff(self, sample: Sample) -> str | None:
        if sample.document is not None and not (isinstance(sample.document, dict)
                                                and _is_meta(sample.document)
                                                and "messages" not in sample.document):
            return sniff_document(sample.document)
        if sample.lines and _is_meta(sample.lines[0]):
            return sniff_lines(sample.lines)
        if not sample.complete and all(k.search(sample.head) for k in _HEAD_KEYS):
            return None
        if sample.lines is not None and not sample.complete:
            return 'not a JSON object with "sessionId" and "messages"'
        return sample.not_json_reason() if not sample.is_json else 'not a JSON object with "sessionId"'

    def adapt(self, path: Path, out_dir: Path, estimator: TokenEstimator) -> AdaptResult:
        return adapt_gemini_cli(path, out_dir, estimator)
