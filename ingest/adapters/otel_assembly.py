"""Assembly decisions over OpenTelemetry: the ``contextlens.assembly.*`` span attributes and
``contextlens.assembly.record`` events by which a runtime that governs its context records,
on the model-call span, every candidate record it included or left out (docs/otel.md).

On the span:

- ``contextlens.assembly.policy_version`` (string, required): the policy version the
  request was assembled under; its presence makes the span's assembly the runtime's own.
- ``contextlens.assembly.assembler_version``, ``contextlens.assembly.token_budget``,
  ``contextlens.assembly.byte_budget``, ``contextlens.assembly.context_limit``,
  ``contextlens.assembly.tags`` (string[]): the assembly's columns of the same names.
- ``contextlens.assembly.records`` (optional): the same records as a JSON array of objects
  with the event attributes' keys less their prefix, for a runtime whose candidates outnumber
  the SDK's span event limit (``OTEL_SPAN_EVENT_COUNT_LIMIT``, 128 by default).

One event ``contextlens.assembly.record`` per candidate, its attributes
``contextlens.record.`` + ``kind`` (record_kind, default message), ``id`` (required; the
runtime's id, the same in every request of the conversation), ``decision`` (included or
omitted), ``reason`` (reason_code), ``family`` (policy_family), ``rendering`` (included only,
default verbatim), ``position`` (included only: the prompt position), ``tokens`` (the
runtime's count), ``detail``, ``role`` (a message's), ``content`` (the record's text),
``input_index`` (an included message's index in ``gen_ai.input.messages``: its text is taken
from there when ``content`` is absent), ``tool_name``, ``created_at`` (unix nanoseconds or
ISO 8601).

The enums are the contract's (``ingest/contract.py``): an unknown value is a warning naming
the span and the value; an included record keeps its place with the neutral reason
``in_window`` / family ``window``, an omitted one whose reason or family is unknown is left
out of the assembly (nothing can be said of why).
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..contract import ENUMS, INCLUDED_REASONS, OMITTED_REASONS
from .builder import Builder, Rec, Shown
from .common import as_text, parse_ts, token_count
from .otel_spans import Span, unix_nanos

if TYPE_CHECKING:  # pragma: no cover
    from .otel_messages import Message, ModelCall

__all__ = ["Decision", "Governed", "GovernedConversation", "RECORD_EVENT", "build_governed",
           "parse_governed"]

PREFIX = "contextlens.assembly."
RECORD_EVENT = "contextlens.assembly.record"
RECORD = "contextlens.record."


@dataclass
class Decision:
    kind: str
    rid: str
    decision: str
    reason: str
    family: str
    rendering: str | None
    position: int | None
    tokens: int | None
    detail: str
    role: str | None
    content: str | None
    input_index: int | None
    tool_name: str | None
    tool_call_id: str | None  # a tool result's: the runtime's id of its call record
    created_at: dt.datetime | None
    order: int  # the event's order on the span


@dataclass
class Governed:
    policy_version: str
    assembler_version: str | None
    token_budget: int | None
    byte_budget: int | None
    context_limit: int | None
    tags: list[str]
    decisions: list[Decision]

    @property
    def included(self) -> list[Decision]:
        """Included records in prompt order: their positions, then the events' order."""
        inc = [d for d in self.decisions if d.decision == "included"]
        return sorted(inc, key=lambda d: (d.position if d.position is not None else 1 << 62, d.order))

    @property
    def omitted(self) -> list[Decision]:
        return [d for d in self.decisions if d.decision == "omitted"]


def _int(value: Any) -> int | None:
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return token_count(value)


def _created(value: Any) -> dt.datetime | None:
    if value is None:
        return None
    if isinstance(value, (int, float)) or (isinstance(value, str) and value.strip().isdigit()):
        return unix_nanos(value)
    return parse_ts(value)


def parse_governed(span: Span, warn: Callable[[str], None]) -> Governed | None:
    """The runtime's assembly recorded on ``span``, or None when the span has none."""
    attrs = span.attributes
    rows: list[dict[str, Any]] = [e.attributes for e in span.events if e.name == RECORD_EVENT]
    listed = attrs.get(PREFIX + "records")
    if listed is not None:
        parsed = listed
        if isinstance(listed, str):
            try:
                parsed = json.loads(listed)
            except ValueError:
                parsed = None
        if isinstance(parsed, list):
            rows += [{RECORD + k: v for k, v in r.items()} for r in parsed if isinstance(r, dict)]
        else:
            warn(f"{span.label}: {PREFIX}records is not a JSON array of records, not read")
    version = attrs.get(PREFIX + "policy_version")
    if version is None and not rows:
        return None
    if not version:
        warn(f"{span.label}: {len(rows)} assembly records without {PREFIX}policy_version; "
             "the request is recorded as observed")
        version = "observed"
    tags = attrs.get(PREFIX + "tags")
    gov = Governed(
        str(version), as_text(attrs.get(PREFIX + "assembler_version")) or None,
        _int(attrs.get(PREFIX + "token_budget")), _int(attrs.get(PREFIX + "byte_budget")),
        _int(attrs.get(PREFIX + "context_limit")),
        [str(t) for t in tags] if isinstance(tags, list) else ([str(tags)] if tags else []), [])
    seen: set[tuple[str, str]] = set()
    for n, row in enumerate(rows):
        d = _decision(span, n, row, warn)
        if d is None:
            continue
        if (d.kind, d.rid) in seen:
            warn(f"{span.label}: record {d.kind} {d.rid!r} is decided twice; the first decision kept")
            continue
        seen.add((d.kind, d.rid))
        gov.decisions.append(d)
    return gov


def _enum(span: Span, n: int, name: str, value: Any, enum: str, allowed: frozenset[str] | None,
          warn: Callable[[str], None]) -> str | None:
    text = "" if value is None else str(value)
    known = allowed if allowed is not None else frozenset(ENUMS[enum])
    if text in known:
        return text
    shown = text if len(text) <= 40 else text[:39] + "…"
    warn(f"{span.label}: assembly record {n}: {name} {shown!r} is not one of the contract's "
         f"{enum} values")
    return None


def _decision(span: Span, n: int, row: dict[str, Any], warn: Callable[[str], None]) -> Decision | None:
    def get(key: str) -> Any:
        return row.get(RECORD + key)

    rid = get("id")
    if rid is None or rid == "":
        warn(f"{span.label}: assembly record {n} has no {RECORD}id, not read")
        return None
    kind = _enum(span, n, "kind", get("kind") or "message", "record_kind", None, warn)
    decision = _enum(span, n, "decision", get("decision"), "decision", None, warn)
    if kind is None or decision is None:
        return None
    included = decision == "included"
    reasons = INCLUDED_REASONS if included else OMITTED_REASONS
    reason = _enum(span, n, "reason", get("reason"), "reason_code", frozenset(reasons), warn)
    family = _enum(span, n, "family", get("family"), "policy_family", None, warn)
    if not included and (reason is None or family is None):
        return None  # why it was left out is unknown: nothing true can be said of it
    rendering = None
    if included:
        raw = get("rendering")
        rendering = "verbatim" if raw in (None, "") else _enum(span, n, "rendering", raw, "rendering", None, warn)
    role = get("role")
    if role is not None and str(role) not in ENUMS["message_role"]:
        warn(f"{span.label}: assembly record {n}: role {as_text(role)[:40]!r} is not a message role; "
             "read as user")
        role = "user"
    content = get("content")
    return Decision(
        kind, str(rid), decision, reason or "in_window", family or "window",
        rendering or ("verbatim" if included else None), _int(get("position")), _int(get("tokens")),
        as_text(get("detail")), str(role) if role is not None else None,
        None if content is None else (content if isinstance(content, str) else as_text(content)),
        _int(get("input_index")), as_text(get("tool_name")) or None,
        as_text(get("tool_call_id")) or None, _created(get("created_at")), n)


# --------------------------------------------------------------------------- building


@dataclass
class GovernedConversation:
    """One conversation's records as the runtime names them."""

    records: dict[tuple[str, str], Rec] = field(default_factory=dict)  # (kind, runtime id) -> ours
    answers: list[tuple[Rec, "Message"]] = field(default_factory=list)  # answers not yet named
    last_run: str | None = None


_US = dt.timedelta(microseconds=1)


def _row(b: Builder, table: str, key: str, value: str) -> dict[str, Any] | None:
    for row in reversed(b.rows.get(table, [])):
        if row[key] == value:
            return row
    return None


def _set_tokens(b: Builder, rec: Rec, tokens: int) -> None:
    """A record's count is the runtime's: what its tokenizer counted is what it budgeted."""
    table, key = {"message": ("messages", "message_id"), "tool_artifact": ("tool_artifacts", "artifact_id"),
                  "tool_memory": ("tool_memories", "memory_id"), "skill_state": ("skill_states", "skill_state_id"),
                  "checkpoint": ("checkpoints", "checkpoint_id")}.get(rec.kind, ("", ""))
    row = _row(b, table, key, rec.id) if table else None
    if row is not None:
        row["content_tokens"] = tokens
    if rec.id in b.facts:
        b.facts[rec.id]["tokens"] = tokens


def _create(b: Builder, cid: str, conv: GovernedConversation, d: Decision, call: "ModelCall",
            run_id: str, t: dt.datetime) -> Rec:
    text = d.content
    role = d.role
    if text is None and d.input_index is not None and call.input and 0 <= d.input_index < len(call.input):
        sent = call.input[d.input_index]
        text = sent.text or "\n".join(r.text for r in sent.responses)
        role = role or sent.role
    if text is None:
        b.warn(f"{call.span.label}: assembly record {d.kind} {d.rid!r} has neither content nor "
               "an input_index: stored without its text")
        text = ""
    owner = conv.last_run or run_id  # what an earlier request produced: that request's run
    if d.kind == "message":
        role = role if role in ("system", "user", "assistant", "tool") else "user"
        for i, (rec, answer) in enumerate(conv.answers):
            if role == "assistant" and answer.text == text:
                del conv.answers[i]  # the answer a request of ours produced, named now
                return rec
        return b.message(cid, role, text, t, participant_id=b.user_of[cid] if role == "user" else None,
                         speaker_label=None if role == "user" else role)
    if d.kind == "tool_call":
        return b.tool_call(owner, d.tool_name or "tool", text or {}, t)
    if d.kind == "tool_artifact":
        call_rec = conv.records.get(("tool_call", d.tool_call_id)) if d.tool_call_id else None
        tid = call_rec.id if call_rec is not None else b.tool_call(owner, d.tool_name or "tool", {}, t).id
        return b.tool_result(tid, text, False, t)
    tokens = d.tokens if d.tokens is not None else b.count(text)
    if d.kind == "tool_memory":
        mid = b.new_id("mem")
        b.rows.setdefault("tool_memories", []).append({
            "memory_id": mid, "conversation_id": cid, "branch_id": b.branch_of[cid],
            "source_artifact_ids": [], "source_tool_names": [d.tool_name] if d.tool_name else [],
            "summary": text, "structured_json": None, "content_tokens": tokens, "confidence": 1.0,
            "trust_source": "runtime", "ambiguity_notes": None, "privacy_class": "internal",
            "freshness_class": "session", "observed_at": t, "stale_after": None,
            "revalidation_tools": [], "provenance_locators": [], "conflicts_with": [],
            "supersedes": [], "superseded_by": None, "promotion_policy": "auto", "promoted": True,
            "visibility_scope": "conversation", "owner_participant_id": None,
            "owner_model_run_id": None, "created_at": t})
        return Rec("tool_memory", mid, tokens)
    if d.kind == "skill_state":
        sid = b.new_id("skill")
        b.rows.setdefault("skill_states", []).append({
            "skill_state_id": sid, "model_run_id": run_id, "loaded_skills": [d.tool_name or text[:80]],
            "active_profiles": [], "direct_tools": [], "content_tokens": tokens, "created_at": t})
        return Rec("skill_state", sid, tokens)
    kid = b.new_id("ckpt")
    b.rows.setdefault("checkpoints", []).append({
        "checkpoint_id": kid, "model_run_id": run_id, "kind": "continuation",
        "state_json": json.dumps({"content": text}), "content_tokens": tokens, "created_at": t})
    return Rec("checkpoint", kid, tokens)


def build_governed(b: Builder, cid: str, conv: GovernedConversation, gov: Governed,
                   call: "ModelCall", run_id: str, t0: dt.datetime, tags: list[str]) -> str:
    """The request's assembly rows from the runtime's own decisions; its id."""
    label = call.span.label
    new = [d for d in [*gov.omitted, *gov.included] if (d.kind, d.rid) not in conv.records]
    for i, d in enumerate(new):
        # first met here: created just before the request, older ones (left out) first,
        # unless the runtime said when
        t = d.created_at or t0 - (len(new) - i) * _US
        rec = _create(b, cid, conv, d, call, run_id, t)
        if d.tokens is not None:
            _set_tokens(b, rec, d.tokens)
            rec = Rec(rec.kind, rec.id, d.tokens)
        conv.records[(d.kind, d.rid)] = rec
    positions = [d.position for d in gov.included]
    if any(p is not None for p in positions) and sorted(p for p in positions if p is not None) != list(
            range(len(gov.included))):
        b.warn(f"{label}: the included records' positions are not 0 to {len(gov.included) - 1}; "
               "taken in the order they give")

    def rec_of(d: Decision) -> Rec:
        rec = conv.records[(d.kind, d.rid)]
        if d.tokens is not None and d.tokens != rec.tokens:
            b.warn(f"{label}: record {d.kind} {d.rid!r} counted {d.tokens} tokens here, "
                   f"{rec.tokens} when first met; the first count is the record's")
        return Rec(rec.kind, rec.id, d.tokens if d.tokens is not None else rec.tokens)

    detail = {(d.kind, d.rid): d.detail or f"the runtime's decision (its record {d.rid})" for d in gov.decisions}
    included = [rec_of(d) for d in gov.included]
    shown = {r.id: Shown(d.rendering or "verbatim", d.reason, detail[(d.kind, d.rid)], r.tokens)
             for r, d in zip(included, gov.included)
             if (d.rendering or "verbatim") != "verbatim" or d.reason != "in_window"}
    omitted = [(rec_of(d), d.reason, d.family, detail[(d.kind, d.rid)]) for d in gov.omitted]
    # the family and detail of every row are the runtime's (the builder's defaults are a
    # transcript's: window, "sent in the recorded request")
    by_id = {r.id: d for r, d in zip(included, gov.included)}
    by_id.update({r.id: d for (r, *_), d in zip(omitted, gov.omitted)})
    families = {rid: (d.family, detail[(d.kind, d.rid)]) for rid, d in by_id.items()}
    runtime, b.runtime = b.runtime, "observed"  # the runtime's own version, not a replayed rule
    try:
        aid = b.assembly(run_id, included, omitted, call.input_tokens,
                         extra_tags=[*tags, *gov.tags], shown_as=shown,
                         context_window_tokens=gov.context_limit, families=families)
    finally:
        b.runtime = runtime
    row = _row(b, "context_assemblies", "assembly_id", aid)
    if row is not None:
        row["policy_version"] = gov.policy_version
        row["assembler_version"] = gov.assembler_version or row["assembler_version"]
        if gov.token_budget is not None:
            row["token_budget"] = gov.token_budget
        if gov.byte_budget is not None:
            row["byte_budget"] = gov.byte_budget
    conv.last_run = run_id
    return aid
