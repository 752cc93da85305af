"""ESAA event logs (``activity.jsonl``) -> export.

ESAA (Event-Sourced Agent Architecture) agents never talk to each other: each appends events
to one shared, append-only log, and each reads back what the log shows it. Two event shapes
are read, line by line:

- ESAA-Conversational (``conversation-esaa``): ``{event_id, ts, event, actor, agent_id,
  source, workspace_root, text, summary, ...}``; ``event`` is ``conversation_turn``,
  ``decision.recorded``, ``task.created``, ...; ``actor`` is ``user`` or ``assistant`` (the
  agent is ``agent_id``; ``source`` is the agent whose session the turn was captured from);
- ESAA core (``.roadmap/activity.jsonl``): ``{schema_version, event_id, event_seq, ts, actor,
  runner, action, payload}``; ``actor`` is ``orchestrator`` or an agent (``agent-impl``,
  ``codex``, ...), ``action`` ``claim`` / ``complete`` / ``review`` / ``issue.report`` / ...

Each workspace (``workspace_root``; one for a log without it) is a conversation; each actor
is a participant (``user``, the orchestrator as ``moderator``, each agent as ``model``). Every
event is a message: the user's as ``user``, an agent's as ``assistant``, the orchestrator's as
``system``. The log holds no tool calls and no token counts.

Each agent event is one request of that agent, assembled by **ESAA's context rule**, the
seed's ``context --agent A --last N``: the events visible to agent A are those whose
``agent_id`` or ``source`` is A (core events: whose ``actor`` is A), and the last N of them
before the event are its context, included in log order. The other earlier events are
omitted: visible but older (``outside_window``) or not visible to A (``participant_private``).
N is 20, the handoff window ESAA's CLI hands a cold agent (the log records no other); the
assembly is tagged ``runtime:esaa.last_n=<N>`` and ``runtime:esaa.visibility=agent``.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .builder import AdaptResult, Builder, Rec
from .common import EPOCH, as_text, parse_ts
from .files import Sample, read_source
from .jsonread import iter_jsonl
from .tokens import TokenEstimator

FORMAT = "esaa"
LAST_N = 20
USERS = {"user", "human", "operator"}
SYSTEMS = {"orchestrator", "system", "esaa"}


@dataclass
class Event:
    line: int
    event_id: str
    ts: dt.datetime
    kind: str
    actor: str  # the participant: "user", an orchestrator, or the agent
    role: str  # message role
    text: str
    agents: frozenset[str]  # the agents this event is visible to under the context rule
    workspace: str


def _is_event(d: Any) -> bool:
    return (isinstance(d, dict) and isinstance(d.get("actor"), str) and "ts" in d
            and isinstance(d.get("event") or d.get("action"), str))


def sniff(lines: list[Any]) -> str | None:
    first = [d for d in lines[:50] if isinstance(d, dict)]
    if not first:
        return "no JSON object lines"
    hits = sum(1 for d in first if _is_event(d))
    if hits == 0 or hits * 2 < len(first):
        return 'lines are not events with "actor", "ts" and "event" or "action"'
    if not any("event_id" in d or "event_seq" in d for d in first):
        return 'no line has "event_id" or "event_seq"'
    return None


def _text(d: dict[str, Any]) -> str:
    """What the event says: its text (conversational), else its action and payload (core)."""
    if isinstance(d.get("text"), str) and d["text"]:
        return d["text"]
    kind = as_text(d.get("event") or d.get("action"))
    payload = d.get("payload")
    parts = [kind]
    for k in ("summary", "decision", "rationale", "title", "status"):
        if isinstance(d.get(k), str) and d[k]:
            parts.append(f"{k}: {d[k]}")
    if payload is not None:
        parts.append(json.dumps(payload, ensure_ascii=False, sort_keys=True))
    return "\n".join(parts)


def _event(n: int, d: dict[str, Any], last: dt.datetime) -> Event:
    actor = d["actor"]
    agent_id = d.get("agent_id") if isinstance(d.get("agent_id"), str) and d.get("agent_id") else None
    source = d.get("source") if isinstance(d.get("source"), str) and d.get("source") else None
    low = actor.lower()
    if low in USERS:
        who, role = "user", "user"
    elif low in SYSTEMS:
        who, role = actor, "system"
    elif low == "assistant":
        who, role = agent_id or source or "assistant", "assistant"
    else:  # ESAA core: the actor is the agent itself
        who, role = actor, "assistant"
    agents = {x for x in (agent_id, source) if x}
    if role == "assistant":
        agents.add(who)
    ts = parse_ts(d.get("ts")) or last + dt.timedelta(milliseconds=1)
    eid = as_text(d.get("event_id") or d.get("event_seq")) or f"line {n}"
    return Event(n, eid, ts, as_text(d.get("event") or d.get("action")), who, role, _text(d),
                 frozenset(agents), as_text(d.get("workspace_root")))


def adapt_esaa(path: Path, out_dir: Path, estimator: TokenEstimator | None = None) -> AdaptResult:
    data = read_source(path)
    b = Builder(FORMAT, path, data, estimator)
    events: list[Event] = []
    last = EPOCH
    for n, d in iter_jsonl(path, data, b):
        if not _is_event(d):
            b.warn(f"{path.name} line {n}: not an ESAA event (no actor, ts and event/action), skipped")
            continue
        ev = _event(n, d, last)
        last = max(last, ev.ts)
        events.append(ev)
        b.bump(f"events.{ev.kind}")
    spaces: dict[str, list[Event]] = {}
    for ev in events:
        spaces.setdefault(ev.workspace, []).append(ev)
    for workspace, evs in spaces.items():
        _workspace(b, path, workspace, evs, len(spaces) > 1)
    return b.write(out_dir)


def _workspace(b: Builder, path: Path, workspace: str, events: list[Event], several: bool) -> None:
    title = f"ESAA event log {path.stem}" + (f" (workspace {workspace})" if several or workspace else "")
    start = min(ev.ts for ev in events)
    cid = b.conversation(title, start)
    records: list[tuple[Event, Rec]] = []
    last_user: str | None = None
    for ev in events:
        if ev.role == "user":
            rec = b.message(cid, "user", ev.text, ev.ts, participant_id=b.user_of[cid], speaker_label=ev.kind)
            last_user = rec.id
        elif ev.role == "system":
            pid = b.participant(cid, f"actor:{ev.actor}", ev.actor, "moderator")
            rec = b.message(cid, "system", ev.text, ev.ts, participant_id=pid, speaker_label=f"{ev.actor} {ev.kind}")
        else:
            rec = _action(b, cid, ev, records, last_user)
        records.append((ev, rec))
        # who sees the event under the context rule: what the esaa runtime policy replays
        b.fact(rec.id, agents=sorted(ev.agents))
    b.thread(cid, [r for _, r in records])


def _action(b: Builder, cid: str, ev: Event, records: list[tuple[Event, Rec]], last_user: str | None) -> Rec:
    """One agent event: a request of that agent, assembled by the context rule."""
    agent = ev.actor
    pid = b.participant(cid, f"actor:{agent}", agent, "model", "esaa", agent)
    started = ev.ts - dt.timedelta(microseconds=1)
    rid = b.run(cid, pid, "esaa", agent, started, ended_at=ev.ts, trigger_message_id=last_user,
                runtime_kind="multi_model")
    visible = [(e, r) for e, r in records if agent in e.agents]
    window = visible[-LAST_N:]
    kept = {r.id for _, r in window}
    omitted = []
    for e, r in records:
        if r.id in kept:
            continue
        if agent in e.agents:
            omitted.append((r, "outside_window", "window",
                            f"older than the last {LAST_N} events visible to {agent} "
                            f"(ESAA context --agent {agent} --last {LAST_N})"))
        else:
            who = ", ".join(sorted(e.agents)) or "no agent"
            omitted.append((r, "participant_private", "visibility",
                            f"not visible to {agent}: an event of {who} "
                            f"(ESAA context --agent {agent} shows only its own events)"))
    tags = [f"runtime:esaa.last_n={LAST_N}", "runtime:esaa.visibility=agent", f"esaa_event:{ev.event_id}",
            f"esaa_action:{ev.kind}"]
    b.runtime, b.runtime_settings = "esaa", {"agent": agent, "last_n": LAST_N}
    b.assembly(rid, [r for _, r in window], omitted, None, extra_tags=tags)
    return b.message(cid, "assistant", ev.text, ev.ts, participant_id=pid, model_run_id=rid,
                     speaker_label=f"{agent} {ev.kind}", parent_message_id=last_user)


class EsaaAdapter:
    """The ``esaa`` adapter (entry point of ``contextlens.adapters``)."""

    name = FORMAT
    description = "ESAA event log (activity.jsonl): events of several agents, ESAA's last-N context rule"

    def sniff(self, sample: Sample) -> str | None:
        if sample.document is not None and not isinstance(sample.document, dict):
            return "a single JSON document, not JSON lines"
        if sample.lines is None:
            return sample.not_json_reason()
        return sniff(sample.lines)

    def adapt(self, path: Path, out_dir: Path, estimator: TokenEstimator) -> AdaptResult:
        return adapt_esaa(path, out_dir, estimator)
