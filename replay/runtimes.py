"""Runtime policies: the rules real agent runtimes build each request with, replayable.

A transcript (``ingest/adapters``) records, for every request, the runtime policy it ran
under as its ``policy_version`` and, in the graph's transcript facts
(``ingest.contract.TRANSCRIPT_FACTS``), what the rule needs: each record's thread and place
in it, each request's history bounds and the settings it ran with, compaction markers,
cleared results, SWE-agent history entries. This module replays a request from those facts
alone, so replay, diff, verify, compare, bisect and why work on transcripts as on exports.

Families (``RUNTIMES``), each a version of the registry (``PolicyRegistry.get``):

- ``claude-code``: the whole history of the request's thread (the session, or one
  subagent's transcript) since the last compaction, in wire order; records before a
  compaction boundary are omitted (``compacted``); a tool result cleared by a
  microcompaction is sent as its placeholder from then on (``elided``, rendering
  ``cleared``); a response's thinking is sent within its tool-use loop and omitted
  (``outside_window``) after the next user turn; the compaction summariser is first sent the
  parent's history up to the compaction (its thinking stripped). Keys: ``compaction`` (bool:
  the session's recorded compactions happen), ``microcompaction`` (bool: its recorded
  clearings happen), ``compact_at`` (tokens: also compact before a request that would carry
  more, measured on the size it would have had, see ``_simulated_cuts``).
- ``swe-agent``: every history entry, after the trajectory's history processors
  (``ingest.adapters.swe_agent.HistoryProcessors``, the one home of that rule). Keys:
  ``last_n_observations.n``, ``last_n_observations.polling`` (a trajectory without that
  processor gets one when ``n`` is set), ``history_processors`` (``false``: none run).
- ``chat-full-history``: every earlier record of the conversation, verbatim (OpenAI chat
  loops, tau-bench, mini-swe-agent, Anthropic messages, Gemini CLI). No keys.

A version is ``<family>`` (each request replayed with the values it ran with) or
``<family>:<key>=<value>[,<key>=<value>...]`` (a counterfactual: those keys changed), e.g.
``swe-agent:last_n_observations.n=3`` or ``claude-code:microcompaction=false``.

Token counts are the transcript's own (calibrated) counts; what the records do not explain
(the recorded ``unattributed_tokens``: system prompt, tool schemas) is carried over to the
replay unchanged, so a counterfactual's token delta is what its records change. History a
mid-session log lacks is a record (``history_before_file``), so a what-if compaction drops it
and ``compaction=false`` sends it again. Whether a replay still fits the model's window is
``replay.diff.over_context_window``.
"""

from __future__ import annotations

import json
from bisect import bisect_right
from itertools import accumulate
from dataclasses import dataclass, field
from typing import Any

from ingest.adapters.claude_code import THINKING_STRIPPED
from ingest.adapters.swe_agent import HistoryProcessors
from ingest.contract import TRANSCRIPT_FACTS, selection_hash, sent_as
from ingest.errors import ContextlensError
from ingest.tags import FIXED_OVERHEAD_TOKENS, UNATTRIBUTED_TOKENS, int_tag

from .assembler import Assembly
from .policy import RUNTIME_RULES as RULES, RUNTIMES, RuntimePolicy
from .snapshot import Request, Snapshot

__all__ = ["assemble_runtime"]

# with compaction=false the session never compacts, so no summary of it is ever written
NO_COMPACTION = "a compaction's summary: with compaction=false the session never compacts, so it is never written"

# --------------------------------------------------------------------------- the graph


@dataclass
class _Rec:
    kind: str
    id: str
    seq: int
    tokens: int
    facts: dict[str, Any]
    row: dict[str, Any]

    @property
    def boundary(self) -> bool:
        return self.facts.get("role") == "compact_boundary"


@dataclass
class _Threads:
    """One conversation's transcript facts: its threads in order, its runs' facts."""

    threads: dict[str, list[_Rec]] = field(default_factory=dict)
    runs: dict[str, dict[str, Any]] = field(default_factory=dict)
    cache: dict[Any, Any] = field(default_factory=dict)  # per-thread results of counterfactuals
    seqs: dict[str, list[int]] = field(default_factory=dict)  # per thread, its records' seqs


_KINDS = (("messages", "message", "message_id"), ("tool_calls", "tool_call", "tool_call_id"),
          ("tool_artifacts", "tool_artifact", "artifact_id"))


def _facts(row: dict[str, Any]) -> dict[str, Any] | None:
    raw = row.get(TRANSCRIPT_FACTS)
    if not raw:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _threads(snapshot: Snapshot) -> _Threads:
    cached = snapshot._indexes.get("runtime")
    if cached is not None:
        return cached
    out = _Threads()
    for table, kind, key in _KINDS:
        for row in snapshot.tables.get(table, []):
            f = _facts(row)
            if f is None or not isinstance(f.get("thread"), str) or not isinstance(f.get("seq"), int):
                continue
            out.threads.setdefault(f["thread"], []).append(
                _Rec(kind, row[key], f["seq"], int(f.get("tokens") or 0), f, row))
    for recs in out.threads.values():
        recs.sort(key=lambda r: r.seq)
    for row in snapshot.tables.get("model_runs", []):
        f = _facts(row)
        if f is not None:
            out.runs[row["model_run_id"]] = f
    snapshot._indexes["runtime"] = out
    return out


# --------------------------------------------------------------------------- replay


@dataclass
class _Out:
    included: list[tuple[_Rec, str, str, str, int]] = field(default_factory=list)  # rec, rendering, reason, detail, tokens
    omitted: list[tuple[_Rec, str, str]] = field(default_factory=list)  # rec, reason, detail


def _history(th: _Threads, thread: str | None, upto: int) -> list[_Rec]:
    """The thread's records up to ``seq`` ``upto``, in order (a slice: a long session's
    requests each take their prefix without a scan)."""
    recs = th.threads.get(thread or "", [])
    seqs = th.seqs.get(thread or "")
    if seqs is None:
        seqs = th.seqs[thread or ""] = [r.seq for r in recs]
    return recs[:bisect_right(seqs, upto)]


def _simulated_cuts(th: _Threads, thread: str, limit: int, recorded: bool,
                    micro: bool) -> list[tuple[int, int, str]]:
    """Where Claude Code would also have compacted with ``compact_at=limit``: walking the
    thread's requests in order, a request that would have carried more than ``limit`` tokens
    comes after a compaction of everything the previous request was sent.

    The size a request would have had is measured on its real size: what it carried (its
    recorded input, ``carried``), minus what its recorded records were sent as, plus what
    the what-if sends of them (the records since its last compaction, cleared results as
    their placeholders when ``micro``). What no record explains (system prompt, tools, the
    estimator's error) stays as recorded; history from before the file is a record
    (``history_before_file``), dropped with the rest. Each cut: (cut seq: records at or
    before it are dropped, the seq of the request that triggered it, detail)."""
    key = ("cuts", thread, limit, recorded, micro)
    cached = th.cache.get(key)
    if cached is not None:
        return cached
    recs = [r for r in th.threads.get(thread, []) if not r.boundary]
    seqs = [r.seq for r in recs]
    total = [0, *accumulate(r.tokens for r in recs)]  # tokens of recs[:i]
    # (seq, cleared from seq, tokens saved) of every result a microcompaction cleared
    cleared = [(r.seq, int(r.facts["cleared"].get("after", -1)),
                r.tokens - int(r.facts["cleared"].get("tokens") or 0))
               for r in recs if isinstance(r.facts.get("cleared"), dict)]

    def sent(after: int, upto: int, clearing: bool) -> int:
        """The tokens the records with after < seq <= upto were sent as."""
        n = total[bisect_right(seqs, upto)] - total[bisect_right(seqs, after)]
        if clearing:
            n -= sum(saved for seq, at, saved in cleared if after < seq <= upto and at <= upto)
        return n

    bounds = [r.seq for r in th.threads.get(thread, []) if r.boundary]
    runs = [f for f in th.runs.values() if f.get("thread") == thread and "inherits" not in f]
    carried: dict[int, int] = {}  # the largest request made at each point of the thread
    for f in runs:
        upto = int(f.get("upto", -1))
        carried[upto] = max(carried.get(upto, 0), int(f.get("carried") or 0))
    cuts: list[tuple[int, int, str]] = []
    cut = -1
    # the requests before a mid-session file were sent the history it lacks: a first request
    # already over the limit comes after a compaction of that history
    previous = max((r.seq for r in recs if r.facts.get("role") == "history_before_file"), default=-1)
    for upto in sorted(carried):
        recorded_cut = max((b for b in bounds if b <= upto), default=-1)
        if recorded:
            cut = max(cut, recorded_cut)
        # the recorded size, less what its records were sent as, plus what the what-if sends
        base = carried[upto] - sent(recorded_cut, upto, True)
        size = base + sent(cut, upto, micro)
        if size > limit and previous > cut:
            cut = previous
            after = base + sent(cut, upto, micro)
            cuts.append((cut, upto, f"dropped by a compaction at {limit:,} tokens (counterfactual: "
                                    f"the request would have carried {size:,}, {after:,} after "
                                    f"it; its summary is not known: counted as empty)"))
        previous = upto
    th.cache[key] = cuts
    return cuts


@dataclass(frozen=True)
class _Drop:
    """A compaction before a request: records before ``cut`` are dropped, but ``keeps``."""

    cut: int
    detail: str
    keeps: frozenset[str] = frozenset()


def _setting(policy: RuntimePolicy, key: str, default: Any) -> Any:
    return policy.setting(key) if key in RUNTIMES[policy.runtime] else default


def _since_compaction(policy: RuntimePolicy, th: _Threads, run: dict[str, Any], out: _Out,
                      overhead: int) -> None:
    """The whole history of the request's thread since the last compaction (Claude Code,
    Codex, Gemini CLI). A compaction is a boundary marker (Claude Code: dropped with
    everything before it) or a record with ``compacts`` facts (the first record of a
    replacement history: everything before it is dropped but what it ``keeps``)."""
    rule = RULES[policy.runtime]
    compaction = _setting(policy, "compaction", True)
    micro = _setting(policy, "microcompaction", True)
    limit = _setting(policy, "compact_at", None)
    upto = int(run.get("upto", -1))
    if run.get("inherits"):
        # the summariser: the parent's history up to the compaction, since its last one (a
        # what-if compaction of the parent before then included: it follows the parent)
        parent, parent_upto = str(run["inherits"]), int(run.get("inherits_upto", -1))
        inherited = _history(th, parent, parent_upto)
        cut = max((r.seq for r in inherited if r.boundary), default=-1) if compaction else -1
        detail = ""
        if limit is not None:
            for c, at, d in _simulated_cuts(th, parent, limit, compaction, micro):
                if at <= parent_upto and c > cut:
                    cut, detail = c, d
        for r in inherited:
            if r.boundary:
                continue
            if r.seq <= cut:
                if detail:
                    out.omitted.append((r, "compacted", detail))
                continue
            if not compaction and r.facts.get("compact_summary"):
                out.omitted.append((r, "not_yet_created", NO_COMPACTION))
                continue
            if r.facts.get("role") == "thinking":  # the summariser's request is a new turn
                out.omitted.append((r, "outside_window", THINKING_STRIPPED))
                continue
            out.included.append((r, "verbatim", "in_window",
                                 f"{rule} (the summariser is sent the parent's conversation)", r.tokens))
    hist = _history(th, run.get("thread"), upto)
    drops: list[_Drop] = []
    if compaction:
        for r in hist:
            if r.boundary:
                drops.append(_Drop(r.seq, str(r.facts.get("detail") or "compacted")))
            elif isinstance(r.facts.get("compacts"), dict):
                c = r.facts["compacts"]
                drops.append(_Drop(r.seq, str(c.get("detail") or "compacted"),
                                   frozenset(str(k) for k in c.get("keeps") or [])))
    if limit is not None and not run.get("inherits"):
        drops += [_Drop(c + 1, d) for c, at, d in _simulated_cuts(
            th, str(run.get("thread")), limit, compaction, micro) if at <= upto]
    drops.sort(key=lambda d: d.cut)
    # thinking is sent back only within its tool-use loop (ingest/adapters/claude_code.py)
    turn = max((r.seq for r in hist if r.facts.get("user_turn")), default=-1)
    for r in hist:
        if r.boundary:
            continue  # an event, not content
        dropper = next((d for d in drops if d.cut > r.seq and r.id not in d.keeps), None)
        if dropper is not None:
            out.omitted.append((r, "compacted", dropper.detail))
            continue
        if not compaction and r.facts.get("compact_summary"):
            out.omitted.append((r, "not_yet_created", NO_COMPACTION))
            continue
        if r.seq < turn and r.facts.get("role") == "thinking":
            out.omitted.append((r, "outside_window", THINKING_STRIPPED))
            continue
        cleared = r.facts.get("cleared")
        if micro and isinstance(cleared, dict) and int(cleared.get("after", -1)) <= upto:
            out.included.append((r, "cleared", "elided", str(cleared.get("detail") or ""),
                                 int(cleared.get("tokens") or 0)))
        else:
            out.included.append((r, "verbatim", "in_window", rule, r.tokens))


def _swe_agent(policy: RuntimePolicy, th: _Threads, run: dict[str, Any], out: _Out,
               overhead: int) -> None:
    hist = _history(th, run.get("thread"), int(run.get("upto", -1)))
    settings = run.get("settings") or {}
    steps: list[dict[str, Any]] = []
    if policy.setting("history_processors"):
        steps = [dict(p) for p in settings.get("history_processors") or [] if isinstance(p, dict)]
        n = policy.setting("last_n_observations.n")
        polling = policy.setting("last_n_observations.polling")
        if n is not None or polling is not None:
            lno = next((p for p in steps if p.get("type") == "last_n_observations"), None)
            if lno is None:
                lno = {"type": "last_n_observations", "n": n if n is not None else 0}
                steps.append(lno)
            if n is not None:
                lno["n"] = n
            if polling is not None:
                lno["polling"] = polling
    entries = [r for r in hist if isinstance(r.facts.get("entry"), dict)]
    elided = HistoryProcessors(steps=steps).elided([r.facts["entry"] for r in entries]) if steps else {}
    shown = {entries[i].id: (text, why, int(entries[i].facts["entry"].get("elided_tokens") or 0))
             for i, (text, why) in elided.items()}
    for r in hist:
        if r.id in shown:
            text, why, tokens = shown[r.id]
            out.included.append((r, "cleared", "elided", why + sent_as(text), tokens))
        else:
            out.included.append((r, "verbatim", "in_window", RULES["swe-agent"], r.tokens))


def _chat(policy: RuntimePolicy, th: _Threads, run: dict[str, Any], out: _Out,
          overhead: int) -> None:
    for r in _history(th, run.get("thread"), int(run.get("upto", -1))):
        out.included.append((r, "verbatim", "in_window", RULES["chat-full-history"], r.tokens))


def _esaa(policy: RuntimePolicy, th: _Threads, run: dict[str, Any], out: _Out,
          overhead: int) -> None:
    """ESAA's context rule (``context --agent A --last N``): of the earlier events, the
    last N visible to the agent (its own: ``agents`` facts), in log order; older visible
    ones are outside the window, the others not visible to it."""
    settings = run.get("settings") or {}
    agent = str(settings.get("agent") or "")
    n = int(policy.setting("last_n", settings.get("last_n")) or 0)
    shared = policy.setting("shared")
    hist = _history(th, run.get("thread"), int(run.get("upto", -1)))
    visible = [r for r in hist if shared or agent in (r.facts.get("agents") or [])]
    window = {r.id for r in visible[-n:]} if n > 0 else set()
    for r in hist:
        if r.id in window:
            out.included.append((r, "verbatim", "in_window", f"{RULES['esaa']} (the last {n})", r.tokens))
        elif shared or agent in (r.facts.get("agents") or []):
            out.omitted.append((r, "outside_window", f"older than the last {n} events visible to {agent} "
                                f"(ESAA context --agent {agent} --last {n})"))
        else:
            who = ", ".join(sorted(r.facts.get("agents") or [])) or "no agent"
            out.omitted.append((r, "participant_private", f"not visible to {agent}: an event of {who} "
                                f"(ESAA context --agent {agent} shows only its own events)"))


_FAMILIES = {"claude-code": _since_compaction, "codex": _since_compaction,
             "gemini-cli": _since_compaction, "swe-agent": _swe_agent, "chat-full-history": _chat,
             "esaa": _esaa}


def assemble_runtime(snapshot: Snapshot, request: Request, policy: RuntimePolicy) -> Assembly:
    """``request`` re-assembled by its runtime's rule under ``policy`` (records in the same
    shape as a recorded transcript assembly's)."""
    th = _threads(snapshot)
    run = th.runs.get(request.model_run_id)
    if run is None or "upto" not in run:
        raise ContextlensError(
            f"request '{request.assembly_id}' has no transcript facts: runtime policies "
            f"({', '.join(RUNTIMES)}) replay requests of transcripts ingested by this version")
    out = _Out()
    # what the records do not explain (system prompt, tool schemas) is sent as recorded
    unexplained = int_tag(request.tags, UNATTRIBUTED_TOKENS) or 0
    overhead = int_tag(request.tags, FIXED_OVERHEAD_TOKENS)
    fixed = overhead if overhead is not None else max(unexplained, 0)
    _FAMILIES[policy.runtime](policy, th, run, out, fixed)
    records: list[dict[str, Any]] = []
    decisions: list[dict[str, Any]] = []
    sel: list[tuple[str, str, str, str | None, int | None]] = []
    seen: set[tuple[str, str]] = set()
    full = 0

    def add(r: _Rec, decision: str, rendering: str | None, reason: str, detail: str,
            tokens: int, family: str = "window") -> None:
        # included records all come first: the count so far is the prompt position
        position = len(sel) if decision == "included" else None
        records.append({"assembly_id": request.assembly_id, "record_kind": r.kind,
                        "record_id": r.id, "decision": decision, "rendering": rendering,
                        "position": position, "policy_family": family, "reason_code": reason,
                        "detail": detail, "tokens": tokens})
        decisions.append({"decision_id": f"{request.assembly_id}:replay:d{len(decisions)}",
                          "assembly_id": request.assembly_id, "step": len(decisions),
                          "record_kind": r.kind, "record_id": r.id, "policy_family": family,
                          "outcome": "allow" if decision == "included" else "deny",
                          "reason_code": reason, "detail": detail})
        sel.append((r.kind, r.id, decision, rendering, position))

    included_tokens = 0
    messages_in = 0
    for r, rendering, reason, detail, tokens in out.included:
        if (r.kind, r.id) in seen:
            continue
        seen.add((r.kind, r.id))
        add(r, "included", rendering, reason, detail, tokens)
        included_tokens += tokens
        full += r.tokens
        messages_in += r.kind == "message"
    messages_all = messages_in
    for r, reason, detail in out.omitted:
        if (r.kind, r.id) in seen:
            continue
        seen.add((r.kind, r.id))
        add(r, "omitted", None, reason, detail, r.tokens,
            "visibility" if reason == "participant_private" else "window")
        full += r.tokens
        messages_all += r.kind == "message"
    included_count = sum(1 for s in sel if s[2] == "included")
    return Assembly(
        assembly_id=request.assembly_id,
        policy_version=policy.version,
        assembler=f"runtime/{policy.runtime}",
        records=records,
        decisions=decisions,
        selection_hash=selection_hash(sel),
        assembled_tokens=included_tokens + unexplained,
        baseline_tokens=full + unexplained,  # as the recording's (adapters/calibration.py)
        baseline_message_count=messages_all,
        included_count=included_count,
        omitted_count=len(sel) - included_count,
    )
