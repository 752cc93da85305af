"""The reference assembler: ``assemble(snapshot, request, policy) -> Assembly``.

It is the oracle every faster path is checked against. This module keeps the graph index,
the candidates and the stage loop; each stage's rule lives in its family's module of
``replay/rules/`` (reason codes, deciding keys, detail sentences, this reference step and
the columnar form side by side), walked in ``replay.rules.STAGES`` order.

A pure, deterministic function of its inputs: no clock, no I/O, and every ordering uses
stable keys (never set or dict iteration order of unordered data). It works on the graph
**as of** ``request.assembled_at``. The stages, in order (``step`` is the stage number),
each record a PolicyDecision for every record they touch:

 1 window/not_yet_created  Candidates are the conversation's messages, tool calls, artifacts
                           and memories created at or before ``assembled_at``, plus the
                           skill states and checkpoints of the request's own run. An artifact
                           of a call requested before the assembly but written after it is a
                           candidate omitted as ``not_yet_created``.
 2 retention               Artifacts whose retention_class is in retention.removed_classes.
 3 branch                  A record must lie on the active branch lineage (the branch, then
                           each ancestor up to its fork message's time). A conversation-scoped
                           memory elsewhere may fill in (shared_fill -> conversation_shared).
 4 visibility/ownership    audit_only scope is omitted; a participant_private record whose
                           owner cannot be resolved (no owner participant, nor one through its
                           owner run, that is a participant of the conversation) is omitted as
                           owner_unknown whatever the policy says; records of a subagent run
                           below the requesting participant (a child, a child's child, ...)
                           go to the promotion stage; other participants' participant_private
                           records are omitted unless ``shared_with`` names the requester. Tool
                           calls are private to the participant of their run.
 5 privacy                 Raw artifacts of a class in raw_blocked_classes; artifacts and
                           memories of a class blocked for the request's provider.
 6 contradiction           A memory superseded by a live candidate is omitted (superseded);
                           the link counts in either direction: the old memory's
                           ``superseded_by`` or the new one's ``supersedes``. Conflicting
                           memories: both shown (show_both_sides) or the lower-confidence one
                           omitted as redundant. A memory whose replacement exists but is
                           hidden from this request (stages 4-5) is not current: a stale marker
                           (freshness.stale_action mark) or omitted as superseded.
 7 freshness               Memories whose source artifact ids name a missing artifact: omit
                           (broken_provenance) or mark (stale_marker, rendered as
                           revalidation_hint). A memory older than the window of its
                           freshness class (hours; a class without a window never goes stale)
                           is marked (stale_marker) or omitted (stale); else compact_memory.
                           The policy window decides, not the producer's ``stale_after``.
 8 promotion/rehydration   Child records: memories enter as promoted_child_output when
                           promoted at each step of the subagent chain (under ``explicit`` the
                           ``promoted`` flag lifts a memory one level only, so a grandchild's
                           memory stays out); everything else is child_not_promoted. Artifacts
                           named in exact_evidence_ids are rehydrated raw within the policy's
                           rehydration.byte_budget; another settled artifact with a derived
                           memory is raw_replaced_by_memory only if that memory ends up in the
                           prompt (decided after the budget); otherwise it is shown as a
                           reference and budgeted last. Settled tool calls are redundant.
 9 recovery                Unresolved calls and their artifacts in protected_states are
                           protected (kept even over budget). A call's state at T: pending or
                           deferred until completed_at; failed until a later identical call
                           succeeded. Resolved pending/failed artifacts are redundant. Skill
                           states (skill_active) and checkpoints (checkpoint_restore) enter.
10 window                  The newest max_messages live messages enter (in_window on the
                           active branch, lineage on an ancestor, speaker_context for other
                           speakers in an autonomous discussion); older are outside_window.
11 budget                  The budget is the policy's budget.token_budget, capped by the
                           request's context_limit (the model's context window), minus
                           reserve_tokens; the request's recorded token_budget is not used.
                           Each record costs its tokens as rendered (replay.render: a stale
                           marker its memory and its words, a reference its own text).
                           Protected records count first, then the rest in ranking order
                           (messages newest first, memories by confidence): a record that
                           does not fit is over_budget, so the lowest-ranked go first. The
                           history keeps no holes: once a message does not fit, every older
                           message is over_budget too, while later-ranked kinds may still
                           fill what is left.

Each candidate's row in assembly_records is its last decision. Prompt order: checkpoints,
skill states, memories, messages, tool calls, artifacts; each by created_at, then id.
The baseline (history replay) is every message, tool call and artifact on the lineage
created by ``assembled_at``, replayed raw.

Other assemblers plug in through the entry point group ``contextlens.assemblers``
(see docs/assemblers.md): an object with ``name``, ``version`` and
``assemble(snapshot, request, policy) -> Assembly``.

(The stage summary above is the map; a stage's code is in ``replay/rules/<family>.py``.)
"""

from __future__ import annotations

import datetime as dt
import functools
from bisect import bisect_right
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from ingest.contract import selection_hash  # noqa: F401  (the contract's rule, re-exported)
from ingest.errors import ContextlensError

from .policy import Policy, RuntimePolicy
from .rules import STAGES
from .rules.budget import call_tokens, shown
from .snapshot import Request, Snapshot
from .visibility import RequestView, VisibilityRules, owner_of

__all__ = [
    "Assembly",
    "AssemblerPlugin",
    "ENTRY_POINT_GROUP",
    "ReferenceAssembler",
    "assemble",
    "available_assemblers",
    "get_assembler",
    "selection_hash",
    "call_tokens",
]

ENTRY_POINT_GROUP = "contextlens.assemblers"
REFERENCE_VERSION = "1.0.0"
KIND_ORDER = {"checkpoint": 0, "skill_state": 1, "tool_memory": 2, "message": 3,
              "tool_call": 4, "tool_artifact": 5}

# --------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Assembly:
    """One assembled (or recorded) context: every candidate's final row and the decisions."""

    assembly_id: str
    policy_version: str
    assembler: str  # "name/version", e.g. "reference/1.0.0"; "recorded/<assembler_version>"
    records: list[dict[str, Any]]  # assembly_records rows (contract keys, no export_id)
    decisions: list[dict[str, Any]]  # policy_decisions rows (contract keys, no export_id)
    selection_hash: str
    assembled_tokens: int
    baseline_tokens: int
    baseline_message_count: int
    included_count: int
    omitted_count: int

    @classmethod
    def from_rows(cls, assembly_id: str, policy_version: str, assembler: str,
                  records: list[dict[str, Any]], decisions: list[dict[str, Any]],
                  baseline_tokens: int, baseline_message_count: int) -> "Assembly":
        inc = [r for r in records if r["decision"] == "included"]
        return cls(
            assembly_id=assembly_id, policy_version=policy_version, assembler=assembler,
            records=records, decisions=decisions, selection_hash=selection_hash(records),
            assembled_tokens=sum(int(r["tokens"]) for r in inc),
            baseline_tokens=baseline_tokens, baseline_message_count=baseline_message_count,
            included_count=len(inc), omitted_count=len(records) - len(inc),
        )

    def included(self) -> list[dict[str, Any]]:
        """Included records in prompt order."""
        return sorted((r for r in self.records if r["decision"] == "included"),
                      key=lambda r: r["position"])

    def record(self, record_id: str, record_kind: str | None = None) -> dict[str, Any]:
        for r in self.records:
            if r["record_id"] == record_id and (record_kind is None or r["record_kind"] == record_kind):
                return r
        raise KeyError(record_id)

    def decisions_of(self, record_id: str) -> list[dict[str, Any]]:
        return [d for d in self.decisions if d["record_id"] == record_id]


@runtime_checkable
class AssemblerPlugin(Protocol):
    """What an entry point of ``contextlens.assemblers`` provides (a class or an instance)."""

    name: str
    version: str

    def assemble(self, snapshot: Snapshot, request: Request, policy: Policy) -> Assembly: ...


# --------------------------------------------------------------------------- helpers


class _Cand:
    """One candidate record of one assembly (plain slots: thousands are made per assembly)."""

    __slots__ = ("kind", "rid", "row", "created", "tokens", "branch", "decisions", "alive",
                 "rendering", "protected", "child")

    def __init__(self, kind: str, rid: str, row: dict[str, Any], created: dt.datetime,
                 tokens: int, branch: str) -> None:
        self.kind = kind
        self.rid = rid
        self.row = row
        self.created = created
        self.tokens = tokens
        self.branch = branch
        self.decisions: list[tuple[int, str, str, str, str]] = []
        self.alive = True
        self.rendering: str | None = None
        self.protected = False
        self.child = False

    def add(self, step: int, family: str, outcome: str, reason: str, detail: str) -> None:
        self.decisions.append((step, family, outcome, reason, detail))
        if outcome == "deny":
            self.alive = False


class _Index:
    """One conversation's rows of a snapshot, indexed (built once per snapshot)."""

    def __init__(self, snapshot: Snapshot, conversation_id: str) -> None:
        t = snapshot.tables
        conv = conversation_id
        self.branches = {b["branch_id"]: b for b in t.get("branches", [])
                         if b["conversation_id"] == conv}
        self.runs = {r["model_run_id"]: r for r in t.get("model_runs", [])
                     if r["conversation_id"] == conv}
        self.participants = {p["participant_id"] for p in t.get("participants", [])
                             if p["conversation_id"] == conv}
        self.msgs = {m["message_id"]: m for m in t.get("messages", [])
                     if m["conversation_id"] == conv}
        self.calls = {c["tool_call_id"]: c for c in t.get("tool_calls", [])
                      if c["model_run_id"] in self.runs}
        self.arts = {a["artifact_id"]: a for a in t.get("tool_artifacts", [])
                     if a["branch_id"] in self.branches or a["tool_call_id"] in self.calls
                     or a["owner_model_run_id"] in self.runs}
        self.mems = {m["memory_id"]: m for m in t.get("tool_memories", [])
                     if m["conversation_id"] == conv}
        self.skills = [s for s in t.get("skill_states", []) if s["model_run_id"] in self.runs]
        self.checkpoints = [k for k in t.get("checkpoints", []) if k["model_run_id"] in self.runs]
        self.skills_by_run: dict[str, list[dict[str, Any]]] = {}
        for s in self.skills:
            self.skills_by_run.setdefault(s["model_run_id"], []).append(s)
        self.checkpoints_by_run: dict[str, list[dict[str, Any]]] = {}
        for k in self.checkpoints:
            self.checkpoints_by_run.setdefault(k["model_run_id"], []).append(k)
        self._pool: _Pool | None = None
        self.mem_by_source: dict[str, list[str]] = {}
        for mid in sorted(self.mems):
            for a in self.mems[mid]["source_artifact_ids"] or []:
                self.mem_by_source.setdefault(a, []).append(mid)
        self.arts_by_call: dict[str, list[str]] = {}
        for aid in sorted(self.arts):
            self.arts_by_call.setdefault(self.arts[aid]["tool_call_id"], []).append(aid)
        # identical calls (same tool and arguments), for "a later identical call succeeded"
        self.same_calls: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for cid in sorted(self.calls):
            c = self.calls[cid]
            self.same_calls.setdefault((c["tool_name"], c["arguments_json"]), []).append(c)
        # who supersedes whom, from both directions of the link
        self.replaced_by: dict[str, list[str]] = {}
        for mid in sorted(self.mems):  # the old memory's own pointer first
            if self.mems[mid]["superseded_by"]:
                self.replaced_by.setdefault(mid, []).append(self.mems[mid]["superseded_by"])
        for mid in sorted(self.mems):
            for old in self.mems[mid]["supersedes"] or []:
                if mid not in self.replaced_by.setdefault(old, []):
                    self.replaced_by[old].append(mid)

    def pool(self) -> "_Pool":
        if self._pool is None:
            self._pool = _Pool(self)
        return self._pool

    # ---- graph facts
    def lineage(self, branch_id: str) -> dict[str, tuple[dt.datetime, str] | None]:
        """Branches on the lineage of ``branch_id``, each with the (time, fork point) after
        which its records are not inherited (None for the active branch)."""
        out: dict[str, tuple[dt.datetime, str] | None] = {}
        cutoff: tuple[dt.datetime, str] | None = None
        b = self.branches.get(branch_id)
        if b is None:
            return {branch_id: None}
        while b is not None and b["branch_id"] not in out:
            out[b["branch_id"]] = cutoff
            parent = b["parent_branch_id"]
            if parent is None:
                break
            fork = self.msgs.get(b["fork_message_id"] or "")
            here = (fork["created_at"], fork["message_id"]) if fork else (b["created_at"], b["branch_id"])
            cutoff = here if cutoff is None or here[0] < cutoff[0] else cutoff
            b = self.branches.get(parent)
        return out

    def call_state(self, call: dict[str, Any], at: dt.datetime) -> str:
        done = call["completed_at"]
        if done is None or done > at:
            return "deferred" if call["status"] == "deferred" else "pending"
        if call["status"] == "failed":
            for other in self.same_calls.get((call["tool_name"], call["arguments_json"]), []):
                if (other["requested_at"] > call["requested_at"]
                        and other["status"] == "succeeded"
                        and other["completed_at"] is not None and other["completed_at"] <= at):
                    return "resolved"
            return "failed"
        return call["status"]

    def artifact_call_state(self, art: dict[str, Any], at: dt.datetime) -> tuple[str, str, bool]:
        """(state, tool name, retryable) of the call behind an artifact; an artifact whose
        call is missing stands for itself."""
        call = self.calls.get(art["tool_call_id"])
        if call is None:
            return art["status"], art["tool_name"], False
        return self.call_state(call, at), call["tool_name"], bool(call["retryable"])

    def owner(self, c: _Cand) -> tuple[str | None, str | None, str, list[str]]:
        """(owner participant, owner run, visibility scope, shared_with) of a candidate
        (``replay.visibility.owner_of``)."""
        return owner_of(self, c.kind, c.row)

    def child_chain(self, owner_run: str | None, participant: str) -> list[dict[str, Any]]:
        """The subagent runs between ``participant`` and a record of ``owner_run``: [] unless
        the run is a subagent child (or a child of a child, ...) of a run of ``participant``;
        else the runs from the owner run up to the one just below the participant's run."""
        chain: list[dict[str, Any]] = []
        r = self.runs.get(owner_run or "")
        seen: set[str] = set()
        while (r is not None and r["runtime_kind"] == "subagent_child"
               and r["participant_id"] != participant and r["model_run_id"] not in seen):
            seen.add(r["model_run_id"])
            chain.append(r)
            parent = self.runs.get(r["parent_model_run_id"] or "")
            if parent is not None and parent["participant_id"] == participant:
                return chain
            r = parent
        return []


def _index(snapshot: Snapshot, conversation_id: str) -> _Index:
    cache = getattr(snapshot, "_indexes", None)
    if cache is None:
        return _Index(snapshot, conversation_id)
    idx = cache.get(conversation_id)
    if idx is None:
        idx = cache[conversation_id] = _Index(snapshot, conversation_id)
    return idx


# --------------------------------------------------------------------------- the stages


def _candidates(ix: _Index, req: Request, branch_of_run: str) -> list[_Cand]:
    at = req.assembled_at
    pool = ix.pool()
    # every pooled row whose entry time is at or before the assembly (a bisect over the pool,
    # sorted by entry time), back in (kind, id) order through its precomputed rank
    n = bisect_right(pool.times, at)
    picked = sorted(pool.entries[:n], key=_rank_of)
    out = [_Cand(e[2], e[3], e[4], e[5], e[6], e[7]) for e in picked]
    run = req.model_run_id
    extra: list[_Cand] = []
    for s in ix.skills_by_run.get(run, ()):
        if s["created_at"] <= at:
            extra.append(_Cand("skill_state", s["skill_state_id"], s, s["created_at"],
                               int(s["content_tokens"]), branch_of_run))
    for k in ix.checkpoints_by_run.get(run, ()):
        if k["created_at"] <= at:
            extra.append(_Cand("checkpoint", k["checkpoint_id"], k, k["created_at"],
                               int(k["content_tokens"]), branch_of_run))
    if extra:
        out.extend(extra)
        out.sort(key=_kind_rid)
    return out


def _step_of(chain: tuple[Any, ...]) -> int:
    return chain[0]


def _rank_of(entry: tuple[Any, ...]) -> int:
    return entry[1]


def _kind_rid(c: _Cand) -> tuple[str, str]:
    return (c.kind, c.rid)


class _Pool:
    """The conversation's messages, tool calls, artifacts and memories as candidate entries
    (entry time, rank in (kind, id) order, kind, id, row, created, tokens, branch), sorted by
    entry time: an assembly's candidates are a prefix."""

    __slots__ = ("entries", "times")

    def __init__(self, ix: _Index) -> None:
        raw: list[tuple[Any, ...]] = []
        for m in ix.msgs.values():
            raw.append((m["created_at"], "message", m["message_id"], m, m["created_at"],
                        int(m["content_tokens"]), m["branch_id"]))
        for c in ix.calls.values():
            raw.append((c["requested_at"], "tool_call", c["tool_call_id"], c, c["requested_at"],
                        call_tokens(c["arguments_json"]), ix.runs[c["model_run_id"]]["branch_id"]))
        for a in ix.arts.values():
            call = ix.calls.get(a["tool_call_id"])
            enter = a["created_at"]
            if call is not None and call["requested_at"] < enter:
                enter = call["requested_at"]
            raw.append((enter, "tool_artifact", a["artifact_id"], a, a["created_at"],
                        int(a["content_tokens"]), a["branch_id"]))
        for m in ix.mems.values():
            raw.append((m["created_at"], "tool_memory", m["memory_id"], m, m["created_at"],
                        int(m["content_tokens"]), m["branch_id"]))
        # rank: the (kind, id) order, ties (none: ids are dict keys per kind) by insertion
        order = sorted(range(len(raw)), key=lambda i: (raw[i][1], raw[i][2]))
        rank = [0] * len(raw)
        for r, i in enumerate(order):
            rank[i] = r
        entries = [(e[0], rank[i]) + e[1:] for i, e in enumerate(raw)]
        entries.sort(key=lambda e: (e[0], e[1]))
        self.entries = entries
        self.times = [e[0] for e in entries]


class _Run:
    """One assembly while the stages run: its request, policy, candidates and what one
    family's step leaves for a later one (the subagent chains, the baseline, the raw
    artifacts waiting for their memory)."""

    def __init__(self, ix: _Index, req: Request, policy: Policy, cands: list[_Cand],
                 invert_supersession: bool) -> None:
        self.ix = ix
        self.req = req
        self.policy = policy
        self.cands = cands
        self.invert_supersession = invert_supersession
        self.at = req.assembled_at
        self.me = req.participant_id
        self.branch = req.branch_id
        # what this request may see, by the one definition safety judges by too
        self.view = RequestView(ix, req.branch_id, req.participant_id, req.provider,
                                VisibilityRules.of(policy, req.provider))
        self.baseline_tokens = 0
        self.baseline_messages = 0
        self.chains_of: dict[int, list[dict[str, Any]]] = {}  # id(cand) -> its subagent chain
        self.mem_cands = {c.rid: c for c in cands if c.kind == "tool_memory"}
        self.replaceable: list[tuple[_Cand, list[str]]] = []  # raw artifacts that wait for their memory

    def live(self) -> list[_Cand]:
        return [c for c in self.cands if c.alive]


def _assemble(snapshot: Snapshot, req: Request, policy: Policy, assembler: str,
              invert_supersession: bool = False) -> Assembly:
    ix = _index(snapshot, req.conversation_id)
    run = _Run(ix, req, policy, _candidates(ix, req, req.branch_id), invert_supersession)
    for _stage, _family, reference, _columnar in STAGES:  # replay.rules: one module per family
        reference(run)
    return _finish(run, assembler)


def _finish(run: _Run, assembler: str) -> Assembly:
    """The final rows (one per candidate, its last decision) and the decision chain."""
    req, cands = run.req, run.cands
    included = sorted((c for c in cands if c.alive), key=lambda c: (KIND_ORDER[c.kind], c.created, c.rid))
    pos = {id(c): i for i, c in enumerate(included)}
    records: list[dict[str, Any]] = []
    chains: list[tuple[int, str, str, tuple[int, str, str, str, str]]] = []
    for c in cands:
        if not c.decisions:  # every stage path decides; this is a guard, never a crash
            c.add(11, "budget", "deny", "redundant", "no stage selected this record")
        step, fam, out, reason, detail = c.decisions[-1]
        records.append({
            "assembly_id": req.assembly_id, "record_kind": c.kind, "record_id": c.rid,
            "decision": "included" if c.alive else "omitted",
            "rendering": c.rendering if c.alive else None,
            "position": pos[id(c)] if c.alive else None,
            "policy_family": fam, "reason_code": reason, "detail": detail,
            "tokens": shown(c) if c.alive else c.tokens})
        for d in c.decisions:
            chains.append((d[0], c.kind, c.rid, d))
    # cands are in (kind, id) order, so a stable sort by step alone orders by (step, kind, id)
    chains.sort(key=_step_of)
    width = max(3, len(str(len(chains))))
    aid = req.assembly_id
    prefix = f"{aid}/d"
    decisions = [{
        "decision_id": prefix + str(i).zfill(width), "assembly_id": aid,
        "step": step, "record_kind": kind, "record_id": rid, "policy_family": d[1],
        "outcome": d[2], "reason_code": d[3], "detail": d[4]}
        for i, (step, kind, rid, d) in enumerate(chains, 1)]
    return Assembly.from_rows(req.assembly_id, run.policy.version, assembler, records, decisions,
                              run.baseline_tokens, run.baseline_messages)


# --------------------------------------------------------------------------- plugins


class ReferenceAssembler:
    """The reference assembler as a plugin (entry point ``reference``)."""

    name = "reference"
    version = REFERENCE_VERSION
    invert_supersession = False

    def assemble(self, snapshot: Snapshot, request: Request, policy: Policy) -> Assembly:
        if isinstance(policy, RuntimePolicy):
            # a real runtime's rule (transcripts): replay/runtimes.py is its reference
            from .runtimes import assemble_runtime

            return assemble_runtime(snapshot, request, policy)
        return _assemble(snapshot, request, policy, f"{self.name}/{self.version}",
                         invert_supersession=self.invert_supersession)


def assemble(snapshot: Snapshot, request: Request, policy: Policy) -> Assembly:
    """The reference assembler: pure and deterministic."""
    return _REFERENCE.assemble(snapshot, request, policy)


_REFERENCE = ReferenceAssembler()


@functools.lru_cache(maxsize=1)
def _entry_points() -> tuple[Any, ...]:
    """The group's entry points, read once a process: scanning every installed package's
    metadata took 5 ms, a tenth of one replay + diff (packages do not change mid-run)."""
    from importlib.metadata import entry_points

    try:
        return tuple(entry_points(group=ENTRY_POINT_GROUP))
    except Exception:  # pragma: no cover - broken metadata must not break the built-in
        return ()


def available_assemblers() -> dict[str, AssemblerPlugin]:
    """Assemblers registered under the entry point group ``contextlens.assemblers``, by
    entry point name (the built-in reference is always there)."""
    found: dict[str, AssemblerPlugin] = {}
    for ep in sorted(_entry_points(), key=lambda e: e.name):
        if ep.name in found:
            continue
        try:
            obj = ep.load()
        except Exception as err:
            raise ContextlensError(
                f"assembler plugin '{ep.name}' ({ep.value}) failed to load: {err}"
            ) from None
        plugin = obj() if isinstance(obj, type) else obj
        if not callable(getattr(plugin, "assemble", None)):
            raise ContextlensError(
                f"assembler plugin '{ep.name}' ({ep.value}) has no assemble(snapshot, request, policy)"
            )
        found[ep.name] = plugin
    found.setdefault("reference", _REFERENCE)
    return dict(sorted(found.items()))


def get_assembler(name: str | AssemblerPlugin = "reference") -> AssemblerPlugin:
    """The assembler registered as ``name`` (an AssemblerPlugin object is returned as is)."""
    if not isinstance(name, str):
        return name
    if name == "reference":
        plugins = available_assemblers()
        return plugins.get("reference", _REFERENCE)
    plugins = available_assemblers()
    try:
        return plugins[name]
    except KeyError:
        raise ContextlensError(
            f"unknown assembler '{name}' (known: {', '.join(plugins)})"
        ) from None
