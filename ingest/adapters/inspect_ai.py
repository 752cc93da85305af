"""inspect_ai eval logs (``.json``, and the ``.eval`` zip archive) -> export.

(One format, one module: both containers and every event kind read below share the mapping
of one sample to one conversation, so they are kept together.)

An eval log holds one task's run: ``eval`` (task, model, dataset), ``plan``, ``results``,
``stats`` and ``samples``. A ``.eval`` file is a zip of the same parts: ``header.json`` (the
log without samples; ``_journal/start.json`` while a run is unfinished), one
``samples/<id>_epoch_<n>.json`` per sample, ``summaries.json``, ``reductions.json``.

Each sample (one dataset item in one epoch) is one conversation, so epochs stay apart. Its
``events`` are read in order (events nested in ``tool`` / ``subtask`` events of older logs
too). What is read:

- ``model`` events: one model request each, whose ``input`` is the exact list of messages
  sent (newer logs store it once per sample in ``events_data.messages`` and refer to it
  with ``input_refs`` ranges). The request's included records are exactly those messages,
  in order; one message repeated across requests is one record, identified by its ``id``
  (with its content: an edited message is a new record), else by role, content and
  occurrence. Records of the sample seen before the request but not in its input are
  omitted (``evicted``, or ``compacted`` after a ``compaction`` event). The assembly is
  tagged ``input:exact``. ``output.choices[0].message`` is the response (assistant message,
  ``tool_calls`` -> tool calls); ``usage`` (else the provider's own ``call.response.usage``)
  gives the recorded input tokens; ``tools`` are the tool schemas (estimated, tagged).
  ``error`` on the event or its output marks the run failed.
- Tool messages in an input answer the tool call with their ``tool_call_id``: an artifact
  holding what the model was sent, failed when the message carries ``error``. ``tool``
  events give the call's completion time and error, and the result of a call that no later
  input shows (``result``).
- ``compaction`` events: records before them are ``compacted`` (not ``evicted``) when a
  later input leaves them out.
- Scorers (``step`` events of type scorer, or ``span_begin``/``span_end`` of type scorer):
  their model calls (a grader's prompt) are a thread of their own, not the sample's.
- ``attachment://<hash>`` strings anywhere are replaced by ``attachments[hash]``.
- Other events (``sample_init``, ``state``, ``store``, ``sandbox``, ``span_*``, ``score``,
  ``info``, ``logger``, ``approval``, ``input``, ``error``, ``step``, ...) carry no model
  input: they are skipped (counted in ``stats``). An event of unknown kind is a warning,
  counted once per kind.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
import struct
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import ContextlensError
from .builder import AdaptResult, Builder, Placement, Rec
from .common import EPOCH, after, as_text, parse_ts, parts_text
from .files import Sample, read_source
from .jsonread import json_error, loads_document, read_document
from .tokens import DEFAULT_ESTIMATOR, TokenEstimator, exact_estimator

FORMAT = "inspect-ai"
ATTACHMENT = "attachment://"
LEGACY_ATTACHMENT = "tc://"
EXACT_TAG = "input:exact"
# events that never hold a model call's input: read past without a warning
KNOWN_EVENTS = {
    "sample_init", "sample_limit", "sandbox", "state", "store", "tool", "approval", "input",
    "score", "score_edit", "error", "logger", "info", "step", "subtask", "span_begin",
    "span_end", "compaction", "checkpoint", "interrupt", "branch", "review", "model",
}
# an archive whose parts would inflate past these is refused (a zip bomb is not a log)
MAX_ENTRY_BYTES = 2 << 30
MAX_TOTAL_BYTES = 8 << 30
# deflated JSON shrinks 5 to 20 times, 100 for very repetitive logs; a zip bomb 1,000 times:
# an entry inflating more than MAX_RATIO times is refused (small entries are never bombs)
MAX_RATIO = 200
RATIO_FREE_BYTES = 1 << 20
_SAMPLE_ENTRY = re.compile(r"^samples/(?P<id>.+)_epoch_(?P<epoch>\d+)\.json$")
_HEAD = (re.compile(rb'^\s*\{\s*"version"\s*:\s*\d+'), re.compile(rb'"eval"\s*:\s*\{'))


# --------------------------------------------------------------------------- reading


def _zip_names_in_head(head: bytes) -> list[str]:
    """Entry names of the local file headers found in the first bytes of a zip."""
    names = []
    at = head.find(b"PK\x03\x04")
    while at >= 0 and len(names) < 200:
        if at + 30 > len(head):
            break
        n, extra = struct.unpack("<HH", head[at + 26: at + 30])
        names.append(head[at + 30: at + 30 + n].decode("utf-8", "replace"))
        at = head.find(b"PK\x03\x04", at + 30 + n + extra)
    return names


def _is_log_entry(name: str) -> bool:
    return name in ("header.json", "_journal/start.json") or bool(_SAMPLE_ENTRY.match(name))


def sniff_document(doc: Any) -> str | None:
    if not isinstance(doc, dict) or not isinstance(doc.get("eval"), dict):
        return 'not a JSON object with an "eval" object'
    if "version" not in doc and "samples" not in doc:
        return 'no "version" nor "samples" beside "eval"'
    return None


def _read_entry(zf: zipfile.ZipFile, path: Path, info: zipfile.ZipInfo) -> Any:
    if info.flag_bits & 0x1:
        raise ContextlensError(f"{path}: archive entry {info.filename} is encrypted; "
                               "an inspect_ai log is never encrypted, so it is not read")
    if info.file_size > MAX_ENTRY_BYTES:
        raise ContextlensError(f"{path}: archive entry {info.filename} inflates to "
                               f"{info.file_size} bytes, over the {MAX_ENTRY_BYTES >> 30} GB limit")
    if info.file_size > RATIO_FREE_BYTES and info.file_size > MAX_RATIO * max(info.compress_size, 1):
        raise ContextlensError(
            f"{path}: archive entry {info.filename} inflates {info.compress_size} bytes to "
            f"{info.file_size}, over {MAX_RATIO} times (a zip bomb, not a log)")
    try:
        raw = _read_at_most(zf, info, info.file_size)
    except MemoryError:
        raise ContextlensError(f"{path}: archive entry {info.filename} ({info.file_size} bytes) "
                               "does not fit in memory") from None
    except NotImplementedError:
        raise ContextlensError(
            f"{path}: archive entry {info.filename} uses zip compression method "
            f"{info.compress_type}, which this Python cannot read"
        ) from None
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as err:
        raise ContextlensError(f"{path}: archive entry {info.filename} is damaged ({err})") from None
    try:
        return loads_document(path, raw)
    except MemoryError:
        raise ContextlensError(f"{path}: archive entry {info.filename} ({len(raw)} bytes) "
                               "does not fit in memory once parsed") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise ContextlensError(
            f"{path}: archive entry {info.filename} is not JSON ({json_error(err)})"
        ) from None


def _read_at_most(zf: zipfile.ZipFile, info: zipfile.ZipInfo, cap: int) -> bytes:
    """The entry's bytes, never more than ``cap`` (its declared size): what inflates past
    it is not read (zipfile then reports a bad CRC, a damaged entry)."""
    chunks: list[bytes] = []
    total = 0
    with zf.open(info) as f:
        while True:
            chunk = f.read(min(1 << 20, cap + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > cap:
                raise zipfile.BadZipFile(f"inflates past its declared {cap} bytes")
    return b"".join(chunks)


def _sample_order(name: str) -> tuple[int, int, str]:
    m = _SAMPLE_ENTRY.match(name)
    assert m is not None
    sid = m.group("id")
    return (int(m.group("epoch")), int(sid) if sid.isdigit() else 1 << 62, sid)


def read_archive(path: Path) -> tuple[dict[str, Any], Iterator[tuple[str, Any]]]:
    """(the log header, each sample as (entry name, parsed JSON)) of a ``.eval`` archive.
    Samples are read one at a time, in epoch then id order."""
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as err:
        raise ContextlensError(f"{path}: not a readable inspect_ai .eval archive ({err})") from None
    infos = {i.filename: i for i in zf.infolist()}
    if sum(i.file_size for i in infos.values()) > MAX_TOTAL_BYTES:
        zf.close()
        raise ContextlensError(f"{path}: archive inflates to over {MAX_TOTAL_BYTES >> 30} GB")
    header_name = next((n for n in ("header.json", "_journal/start.json") if n in infos), None)
    samples = sorted((n for n in infos if _SAMPLE_ENTRY.match(n)), key=_sample_order)
    if header_name is None and not samples:
        zf.close()
        raise ContextlensError(f"{path}: a zip without header.json or samples/, not an inspect_ai .eval archive")
    header = _read_entry(zf, path, infos[header_name]) if header_name else {}
    if not isinstance(header, dict):
        zf.close()
        raise ContextlensError(f"{path}: archive entry {header_name} is not a JSON object")

    def each() -> Iterator[tuple[str, Any]]:
        with zf:
            for name in samples:
                yield name, _read_entry(zf, path, infos[name])

    return header, each()


# --------------------------------------------------------------------------- content


def _resolver(attachments: Any) -> Callable[[Any], Any]:
    table = attachments if isinstance(attachments, dict) else {}

    def resolve(value: Any) -> Any:
        if isinstance(value, str):
            if value.startswith(LEGACY_ATTACHMENT):
                value = ATTACHMENT + value[len(LEGACY_ATTACHMENT):]
            if value.startswith(ATTACHMENT):
                found = table.get(value[len(ATTACHMENT):])
                return found if isinstance(found, str) else value
            return value
        if isinstance(value, list):
            return [resolve(v) for v in value]
        if isinstance(value, dict):
            return {k: resolve(v) for k, v in value.items()}
        return value

    return resolve


def content_text(content: Any, unknown: Callable[[str], None] | None = None) -> str:
    """A message's ``content`` (a string, or a list of Content parts) as the text shown."""

    def part(kind: Any, c: dict[str, Any]) -> str:
        if kind == "text":
            return as_text(c.get("text"))
        if kind == "reasoning":
            if c.get("redacted"):
                return "[reasoning: redacted]"
            return "[reasoning] " + as_text(c.get("summary") or c.get("reasoning"))
        if kind in ("image", "audio", "video"):
            return f"[{kind}]"
        if kind == "document":
            return f"[document {as_text(c.get('filename'))}]".replace(" ]", "]")
        if kind == "data":
            return "[data] " + as_text(c.get("data"))
        if kind == "tool_use":
            return (f"[tool use {as_text(c.get('name'))}] {as_text(c.get('arguments'))}"
                    + (f" -> {as_text(c.get('result'))}" if c.get("result") is not None else ""))
        if unknown is not None:
            unknown(f"content part {kind!r}")
        return f"[{kind}] {as_text(c)}"

    return parts_text(content, part)


def _calls_of(msg: dict[str, Any]) -> list[dict[str, Any]]:
    calls = msg.get("tool_calls")
    return [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)


def _content_key(msg: dict[str, Any]) -> str:
    """What identifies a message by content: role, content, tool calls, the call answered."""
    calls = [(c.get("id"), c.get("function"), c.get("arguments")) for c in _calls_of(msg)]
    key = [msg.get("role"), msg.get("content"), calls, msg.get("tool_call_id")]
    return hashlib.sha256(_canonical(key).encode("utf-8", "replace")).hexdigest()


def recorded_input(usage: Any, response: Any) -> int | None:
    """The input tokens of one model call. The provider's own usage (``call.response``) when
    the event kept it: OpenAI ``prompt_tokens``; Anthropic ``input_tokens`` plus its cache
    tokens; OpenAI Responses ``input_tokens``; Gemini ``promptTokenCount``. Else inspect's
    ``ModelUsage``, whose ``input_tokens`` excludes the cache counts for some providers and
    versions and includes them for others: the form whose parts add up to ``total_tokens``
    is the one used."""

    def num(d: Any, k: str) -> int | None:
        v = d.get(k) if isinstance(d, dict) else None
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1e12 else None

    raw = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(raw, dict) and isinstance(response, dict):
        raw = response.get("usageMetadata") or response.get("usage_metadata")
    if isinstance(raw, dict):
        if num(raw, "prompt_tokens") is not None:
            return num(raw, "prompt_tokens")
        if num(raw, "promptTokenCount") is not None or num(raw, "prompt_token_count") is not None:
            return num(raw, "promptTokenCount") or num(raw, "prompt_token_count")
        if num(raw, "input_tokens") is not None:
            return sum(num(raw, k) or 0 for k in ("input_tokens", "cache_creation_input_tokens",
                                                 "cache_read_input_tokens"))
    if not isinstance(usage, dict) or num(usage, "input_tokens") is None:
        return None
    inp = num(usage, "input_tokens") or 0
    out = num(usage, "output_tokens") or 0
    total = num(usage, "total_tokens")
    cached = (num(usage, "input_tokens_cache_read") or 0) + (num(usage, "input_tokens_cache_write") or 0)
    reasoning = num(usage, "reasoning_tokens") or 0
    if total is not None and cached and inp + cached + out in (total, total - reasoning):
        return inp + cached  # cache counts apart from input_tokens (Anthropic, newer OpenAI)
    return inp


# --------------------------------------------------------------------------- one sample


@dataclass
class _Sample:
    b: Builder
    cid: str
    where: str
    resolve: Callable[[Any], Any]
    pool: list[Any]
    history: list[Rec] = field(default_factory=list)  # every record, in order first seen
    by_id: dict[tuple[str, str], Rec] = field(default_factory=dict)
    by_content: dict[str, list[Rec]] = field(default_factory=dict)
    extra: dict[str, list[Rec]] = field(default_factory=dict)  # message record -> its call records
    calls: dict[str, str] = field(default_factory=dict)  # tool call id -> our tool_call_id
    results: dict[str, Rec] = field(default_factory=dict)  # our tool_call_id -> its artifact
    tool_events: dict[str, dict[str, Any]] = field(default_factory=dict)
    ran: list[str] = field(default_factory=list)  # ids of the tool events met so far, in order
    compacted_before: int = 0  # history records older than the last compaction event
    compactions: int = 0
    roles: dict[str, str] = field(default_factory=dict)  # message record id -> role
    last_time: dt.datetime = EPOCH
    # a scorer's model calls (a grader's prompt) are a conversation of their own, not the
    # sample's: while a scorer runs, ``history`` is its own thread, the sample's is kept here
    scorer: str | None = None
    _sample_history: list[Rec] = field(default_factory=list)
    _sample_compacted: int = 0
    scorer_threads: list[list[Rec]] = field(default_factory=list)

    def enter_scorer(self, name: str) -> None:
        if self.scorer is None:
            self.scorer = name
            self._sample_history, self._sample_compacted = self.history, self.compacted_before
            self.history, self.compacted_before = [], 0
            self.scorer_threads.append(self.history)

    def leave_scorer(self) -> None:
        if self.scorer is not None:
            self.history, self.compacted_before = self._sample_history, self._sample_compacted
            self.scorer = None

    def warn_once(self, what: str) -> None:
        key = f"unknown:{what}"
        if not self.b.stats.get(key):
            self.b.warn(f"{self.where}: {what} is not read (counted in stats '{key}')")
        self.b.bump(key)

    def ts(self, value: Any, floor: dt.datetime | None = None) -> dt.datetime:
        t = parse_ts(value)
        if t is None:
            t = self.last_time + dt.timedelta(milliseconds=1)
        if floor is not None and t < floor:
            t = floor
        self.last_time = max(self.last_time, t)
        return t

    def _remember(self, msg: dict[str, Any], rec: Rec, extra: list[Rec], in_history: bool = True) -> None:
        self.roles[rec.id] = str(msg.get("role"))
        mid = msg.get("id")
        if isinstance(mid, str) and mid:
            self.by_id[(mid, _content_key(msg))] = rec
        self.by_content.setdefault(_content_key(msg), []).append(rec)
        self.extra[rec.id] = extra
        if in_history:
            self.history.append(rec)
            self.history.extend(extra)

    def _lookup(self, msg: dict[str, Any], seen: dict[str, int]) -> Rec | None:
        mid = msg.get("id")
        key = _content_key(msg)
        if isinstance(mid, str) and mid:
            return self.by_id.get((mid, key))
        n = seen.get(key, 0)
        seen[key] = n + 1
        recs = self.by_content.get(key, [])
        return recs[n] if n < len(recs) else None

    # -- records
    def input_records(self, messages: list[Any], t: dt.datetime, label: str) -> list[Rec]:
        """The records of one request's input, in order, made the first time one is seen."""
        out: list[Rec] = []
        seen: dict[str, int] = {}
        # where results sat (for lint): a run of tool messages is one message of results;
        # text sent after the calling assistant message comes before them
        block: str | None = None
        index = 0
        text_after_call = False
        for i, msg in enumerate(messages):
            if not isinstance(msg, dict):
                self.b.warn(f"{label} input {i}: not a message object, skipped")
                continue
            placement = None
            if msg.get("role") == "tool":
                if block is None:
                    block, index = f"{label} input {i}", 0
                placement = Placement(block, index, text_after_call)
                index += 1
            else:
                block = None
                if msg.get("role") == "assistant":
                    text_after_call = False
                elif content_text(msg.get("content")).strip():
                    text_after_call = True
            rec = self._lookup(msg, seen)
            if rec is None:
                rec = self._new_message(msg, t, placement)
            out.append(rec)
            out.extend(self.extra.get(rec.id, []))
        return out

    def _new_message(self, msg: dict[str, Any], t: dt.datetime, placement: Placement | None = None) -> Rec:
        b = self.b
        role = msg.get("role")
        text = content_text(msg.get("content"), self.warn_once)
        if role == "tool":
            tid = self.calls.get(msg.get("tool_call_id")) if isinstance(msg.get("tool_call_id"), str) else None
            if tid is not None and tid in self.results:
                # its tool event's result, stored when a compaction came first: the same record
                rec = self.results[tid]
                self._remember(msg, rec, [], in_history=False)
                return rec
            if tid is not None:
                rec = self._result(tid, msg.get("tool_call_id"), text, msg.get("error"), t, placement)
                self._remember(msg, rec, [])
                return rec
            rec = b.message(self.cid, "tool", text, t, speaker_label=str(msg.get("function") or "tool"))
        elif role == "assistant":
            # an assistant turn no recorded model event produced (a prefilled or replayed turn):
            # its tool calls are shown in its text, since no run made them
            calls = "\n".join(f"[tool call {as_text(c.get('function'))}] {as_text(c.get('arguments'))}"
                              for c in _calls_of(msg))
            rec = b.message(self.cid, "assistant", "\n".join(x for x in (text, calls) if x), t,
                            speaker_label=str(msg.get("model") or "assistant"))
        elif role in ("system", "developer"):
            rec = b.message(self.cid, "system", text, t, speaker_label=str(role))
        else:
            if role != "user":
                self.warn_once(f"message role {role!r}")
            rec = b.message(self.cid, "user", text, t, participant_id=b.user_of[self.cid])
        self._remember(msg, rec, [])
        return rec

    def _result(self, tid: str, call_id: Any, text: str, error: Any, t: dt.datetime,
                placement: Placement | None = None) -> Rec:
        ev = self.tool_events.get(call_id, {}) if isinstance(call_id, str) else {}
        done = parse_ts(ev.get("completed")) or parse_ts(ev.get("timestamp")) or t
        failed = bool(error) or bool(ev.get("error")) or ev.get("failed") is True
        if error and not text:
            text = as_text(error.get("message") if isinstance(error, dict) else error)
        rec = self.b.tool_result(tid, text, failed, done, placement=placement)
        self.results[tid] = rec
        return rec

    def output(self, rid: str, out: dict[str, Any], t: dt.datetime, model: str, pid: str,
               trigger: str | None) -> None:
        b = self.b
        choices = out.get("choices") if isinstance(out.get("choices"), list) else []
        msg = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
        if not isinstance(msg, dict):
            return
        text = content_text(msg.get("content"), self.warn_once)
        rec = b.message(self.cid, "assistant", text, t, participant_id=pid, model_run_id=rid,
                        speaker_label=str(msg.get("model") or out.get("model") or model),
                        parent_message_id=trigger)
        made: list[Rec] = []
        for c in _calls_of(msg):
            call = b.tool_call(rid, str(c.get("function") or "unknown"), c.get("arguments", {}), t)
            if isinstance(c.get("id"), str):
                self.calls[c["id"]] = call.id
            made.append(call)
        if len(made) >= 2:
            for c in made:
                b.call_row(c.id)["parallel_group"] = f"{rid}:parallel"
            b.bump("parallel_groups")
        self._remember(msg, rec, made)

    def ran_tools(self, t: dt.datetime) -> None:
        """Results of the tools that ran before ``t`` that no input has shown yet: they exist
        (in the sample's history) whether or not the next request is sent them."""
        for call_id in self.ran:
            tid = self.calls.get(call_id)
            ev = self.tool_events.get(call_id, {})
            if tid is not None and tid not in self.results:
                self._result(tid, call_id, _result_text(ev.get("result")), ev.get("error"), t)
                self.history.append(self.results[tid])
        self.ran.clear()

    def finish(self, messages: Any, t: dt.datetime) -> None:
        """The sample's final history: messages no request was sent (the last tool results,
        a final user turn) are stored too; calls answered only by a tool event get its result."""
        seen: dict[str, int] = {}
        for msg in self.resolve(messages) if isinstance(messages, list) else []:
            if isinstance(msg, dict) and self._lookup(msg, seen) is None:
                self._new_message(msg, t)
        self.ran_tools(t)


def _result_text(body: Any) -> str:
    """A tool event's ``result``: a string, a list of content parts, or any JSON value."""
    if isinstance(body, str):
        return body
    return content_text(body) if isinstance(body, list) else as_text(body)


def _events(events: Any) -> Iterator[dict[str, Any]]:
    """Events in order, with the ones nested in tool / subtask events of older logs."""
    for e in events if isinstance(events, list) else []:
        if not isinstance(e, dict):
            continue
        yield e
        if e.get("event") in ("tool", "subtask") and isinstance(e.get("events"), list):
            yield from _events(e["events"])


def _input_of(event: dict[str, Any], pool: list[Any]) -> list[Any]:
    inp = event.get("input")
    refs = event.get("input_refs")
    if (not inp) and isinstance(refs, list) and pool:
        out: list[Any] = []
        for r in refs:
            if isinstance(r, (list, tuple)) and len(r) == 2 and all(isinstance(x, int) for x in r):
                out.extend(pool[r[0]: r[1]])
        return out
    return inp if isinstance(inp, list) else []


def _provider(model: str) -> str:
    return model.split("/", 1)[0] if "/" in model else "unknown"


def _model_name(model: str) -> str:
    """inspect_ai names a model ``<provider>/<model>``; the run keeps the provider apart."""
    return model.split("/", 1)[1] if "/" in model else model


def _title(log: dict[str, Any], sample: dict[str, Any]) -> str:
    task = as_text((log.get("eval") or {}).get("task")) if isinstance(log.get("eval"), dict) else ""
    inp = sample.get("input")
    first = inp if isinstance(inp, str) else next(
        (content_text(m.get("content")) for m in inp or [] if isinstance(m, dict) and m.get("role") == "user"), "")
    head = f"{task} sample {as_text(sample.get('id'))} epoch {as_text(sample.get('epoch'))}".strip()
    return f"{head}: {first}" if first else head


def _scorer_bounds(s: _Sample, e: dict[str, Any], scorer_spans: set[Any]) -> None:
    """Where a scorer starts and ends: a ``step`` event (``action`` begin/end, ``type``
    scorer) in older logs, a ``span_begin`` / ``span_end`` pair (``type`` scorer, matched by
    ``id``) in newer ones."""
    kind = e.get("event")
    if kind == "step" and e.get("type") == "scorer":
        if e.get("action") == "begin":
            s.enter_scorer(as_text(e.get("name")) or "scorer")
        elif e.get("action") == "end":
            s.leave_scorer()
    elif kind == "span_begin" and e.get("type") == "scorer":
        scorer_spans.add(e.get("id"))
        s.enter_scorer(as_text(e.get("name")) or "scorer")
    elif kind == "span_end" and e.get("id") in scorer_spans:
        scorer_spans.discard(e.get("id"))
        s.leave_scorer()


def _sample(b: Builder, log: dict[str, Any], raw: Any, where: str, start: dt.datetime) -> None:
    if not isinstance(raw, dict):
        b.warn(f"{where}: not a sample object, skipped")
        return
    legacy = raw.get("transcript") if isinstance(raw.get("transcript"), dict) else {}
    # logs before events were a sample field kept them as transcript {events, content}
    resolve = _resolver(raw.get("attachments") or legacy.get("content"))
    data = raw.get("events_data") if isinstance(raw.get("events_data"), dict) else {}
    pool = data.get("messages") if isinstance(data.get("messages"), list) else raw.get("message_pool") or []
    events = list(_events(raw.get("events") if "events" in raw else legacy.get("events")))
    first = next((parse_ts(e.get("timestamp")) for e in events if parse_ts(e.get("timestamp"))), None)
    cid = b.conversation(_title(log, {**raw, "input": resolve(raw.get("input"))}), first or start)
    s = _Sample(b, cid, where, resolve, pool if isinstance(pool, list) else [])
    s.last_time = first or start
    for e in events:
        if e.get("event") == "tool" and isinstance(e.get("id"), str):
            s.tool_events[e["id"]] = resolve(e)
    scorer_spans: set[Any] = set()
    for n, e in enumerate(events):
        kind = e.get("event")
        if kind == "model":
            _model_event(s, e, f"{where} event {n}")
        elif kind == "tool" and isinstance(e.get("id"), str):
            s.ran.append(e["id"])
            b.bump("events.tool")
        elif kind in ("step", "span_begin", "span_end"):
            _scorer_bounds(s, e, scorer_spans)
            b.bump(f"events.{kind}")
        elif kind == "compaction":
            s.ran_tools(s.ts(e.get("timestamp")))
            s.compacted_before = len(s.history)
            s.compactions += 1
            b.bump("compactions")
        elif kind in KNOWN_EVENTS:
            b.bump(f"events.{kind}")
        else:
            s.warn_once(f"event kind {kind!r}")
    s.leave_scorer()  # a scorer step the log never ended
    s.finish(raw.get("messages"), s.last_time + dt.timedelta(milliseconds=1))
    # the sample's history in the order it grew: what a plain agent loop resends whole
    # (chat-full-history); verify holds each request's exact input against it. Each
    # scorer's model calls are a thread of their own (the grader resends its own prompt).
    b.thread(cid, s.history)
    for k, scored in enumerate(s.scorer_threads):
        b.thread(f"{cid}#scorer{k}", scored)
    b.bump("samples")


def _model_event(s: _Sample, e: dict[str, Any], label: str) -> None:
    b = s.b
    model = str(e.get("model") or "unknown")
    role = e.get("role") if isinstance(e.get("role"), str) and e.get("role") else None
    # a scorer's model without a role of its own is that scorer's participant
    who = role if role is not None or s.scorer is None else f"scorer {s.scorer}"
    key = f"model:{who}:{model}" if who else f"model:{model}"
    pid = b.participant(s.cid, key, f"{model} ({who})" if who else model, "model", _provider(model),
                        _model_name(model))
    t0 = s.ts(e.get("timestamp"))
    inp = s.resolve(_input_of(e, s.pool))
    # records first seen in this input were written before it was sent
    included = s.input_records(inp, t0 - dt.timedelta(microseconds=1), label)
    s.ran_tools(t0 - dt.timedelta(microseconds=1))
    out = e.get("output") if isinstance(e.get("output"), dict) else {}
    call = e.get("call") if isinstance(e.get("call"), dict) else {}
    failed = bool(e.get("error")) or bool(out.get("error"))
    t1 = after(s.ts(e.get("completed"), t0), t0)
    trigger = next((r.id for r in reversed(included) if s.roles.get(r.id) == "user"), None)
    rid = b.run(s.cid, pid, _provider(model), _model_name(model), t0, ended_at=t1, trigger_message_id=trigger,
                status="failed" if failed else "succeeded")
    ids = {r.id for r in included}
    damaged = not isinstance(e.get("input"), (list, type(None))) and not e.get("input_refs")
    omitted = [] if damaged else [  # a damaged input is unknown, not empty: nothing was left out
        (r, "compacted" if i < s.compacted_before else "evicted", "window",
         ("dropped by the sample's compaction before this request; not in its recorded input"
          if i < s.compacted_before else
          "in the sample's history but not in this model call's recorded input"))
        for i, r in enumerate(s.history) if r.id not in ids
    ]
    tools = e.get("tools")
    tool_tokens = b.count(_canonical(s.resolve(tools))) if tools else 0
    # the sample within the log (the file itself is the transcript: tag)
    sample = s.where.removeprefix(f"{b.source.name} ")
    tags = [EXACT_TAG, f"tool_schema_tokens_estimate:{tool_tokens}", f"sample:{sample}"]
    if role:
        tags.append(f"model_role:{role}")
    if s.scorer is not None:
        tags.append(f"scorer:{s.scorer}")
    elif s.compactions:
        tags.append(f"after_compaction:{s.compactions}")
    if e.get("cache") in ("read", "write"):
        tags.append(f"inspect_cache:{e['cache']}")  # a cache read made no API call
    recorded = recorded_input(out.get("usage"), call.get("response"))
    if damaged:
        # what it was sent is unknown: recorded as observed, never judged against a replay
        b.warn(f"{label}: input is {type(e['input']).__name__}, not a list of messages; "
               "its request is recorded without its input, not replayed")
    runtime, b.runtime = b.runtime, ("observed" if damaged else b.runtime)
    try:
        b.assembly(rid, included, omitted, recorded, overhead_estimate=tool_tokens, extra_tags=tags)
    finally:
        b.runtime = runtime
    s.output(rid, s.resolve(out), t1, model, pid, trigger)


# --------------------------------------------------------------------------- adapter


def _models(log: dict[str, Any], samples: list[Any]) -> list[str | None]:
    found: list[str | None] = []
    for raw in samples:
        for e in _events(raw.get("events") if isinstance(raw, dict) else None):
            if e.get("event") == "model":
                found.append(e.get("model") if isinstance(e.get("model"), str) else None)
    return found or [(log.get("eval") or {}).get("model") if isinstance(log.get("eval"), dict) else None]


def adapt_inspect_ai(path: Path, out_dir: Path, estimator: TokenEstimator | None = None) -> AdaptResult:
    data = read_source(path)
    if data[:4] == b"PK\x03\x04":
        log, items = read_archive(path)
        samples = list(items)
        where = [f"{path.name} {name}" for name, _ in samples]
        raws = [raw for _, raw in samples]
    else:
        log = read_document(path, data, "an inspect_ai eval log", sniff_document)
        raws = log.get("samples") if isinstance(log.get("samples"), list) else []
        where = [f"{path.name} sample {i}" for i in range(len(raws))]
    b = Builder(FORMAT, path, data, estimator)
    b.runtime = "chat-full-history"
    if estimator is None or estimator is DEFAULT_ESTIMATOR:
        b.use_exact(exact_estimator(_models(log, raws)))
    if not raws:
        status = log.get("status") if isinstance(log, dict) else None
        b.warn(f"{path.name}: the log holds no samples (status {status!r}; "
               "logged without samples, or the run has not finished one)")
    ev = log.get("eval") if isinstance(log.get("eval"), dict) else {}
    start = parse_ts(ev.get("created")) or EPOCH
    for raw, label in zip(raws, where):
        try:
            _sample(b, log, raw, label, start)
        except (KeyError, TypeError, AttributeError, ValueError) as err:
            b.warn(f"{label}: skipped ({type(err).__name__}: {err})")
    return b.write(out_dir)


class InspectAiAdapter:
    """The ``inspect-ai`` adapter (entry point of ``contextlens.adapters``)."""

    name = FORMAT
    description = "inspect_ai eval log: .json, or the .eval zip archive (header.json, samples/)"

    def sniff(self, sample: Sample) -> str | None:
        if sample.head[:4] == b"PK\x03\x04":
            names = _zip_names_in_head(sample.head)
            if any(_is_log_entry(n) for n in names):
                return None
            return "a zip without header.json, _journal/start.json or samples/<id>_epoch_<n>.json"
        if sample.document is not None:
            return sniff_document(sample.document)
        if not sample.complete and all(k.search(sample.head[:4096]) for k in _HEAD):
            return None
        return sample.not_json_reason() if not sample.is_json else 'not a JSON object with an "eval" object'

    def adapt(self, path: Path, out_dir: Path, estimator: TokenEstimator) -> AdaptResult:
        return adapt_inspect_ai(path, out_dir, estimator)
