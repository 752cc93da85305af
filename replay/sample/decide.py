"""The decisions the sample records: a small, rule-for-rule statement of assembly.

The sample's assemblies are computed here from the graph and a resolved policy, so every
recorded selection is what a correct assembler would produce (except the drift build, see
``invert_supersession``). The rules, in stage order (``step`` is the stage number):

 1 window/not_yet_created  Candidates are the conversation's messages, tool calls, artifacts
                           and memories created at or before ``assembled_at``, plus the
                           skill states and checkpoints of the request's own run. An artifact
                           of a call requested before the assembly but written after it is a
                           candidate omitted as ``not_yet_created``.
 2 retention               Artifacts whose retention_class is in retention.removed_classes.
 3 branch                  A record must lie on the active branch lineage (the branch, then
                           each ancestor up to its fork message's time). A conversation-scoped
                           memory elsewhere may fill in (shared_fill -> conversation_shared).
 4 visibility/ownership    audit_only scope is omitted; records of a subagent child run of the
                           requesting participant go to the promotion stage; other
                           participants' participant_private records are omitted unless
                           ``shared_with`` names the requester. Tool calls are private to the
                           participant of their run.
 5 privacy                 Raw artifacts of a class in raw_blocked_classes; artifacts and
                           memories of a class blocked for the request's provider.
 6 contradiction           A memory whose ``superseded_by`` names a live candidate is omitted
                           (superseded). Conflicting memories: both shown (show_both_sides) or
                           the lower-confidence one omitted as redundant.
 7 freshness               Memories whose source artifact ids name a missing artifact: omit
                           (broken_provenance) or mark (stale_marker, rendered as
                           revalidation_hint). A memory older than the window of its
                           freshness class (hours; durable/permanent never go stale) is
                           marked (stale_marker) or omitted (stale); else compact_memory.
                           The policy window decides, not the producer's ``stale_after``.
 8 promotion/rehydration   Child records: memories enter as promoted_child_output when
                           promoted, everything else is child_not_promoted. Artifacts named in
                           exact_evidence_ids are rehydrated raw within the request's byte
                           budget; other settled artifacts with a derived memory are
                           raw_replaced_by_memory; settled tool calls are redundant.
 9 recovery                Unresolved calls and their artifacts in protected_states are
                           protected (kept even over budget). A call's state at T: pending or
                           deferred until completed_at; failed until a later identical call
                           succeeded. Resolved pending/failed artifacts are redundant. Skill
                           states (skill_active) and checkpoints (checkpoint_restore) enter.
10 window                  The newest max_messages live messages enter (in_window on the
                           active branch, lineage on an ancestor, speaker_context for other
                           speakers in an autonomous discussion); older are outside_window.
11 budget                  token_budget - reserve_tokens: protected records count first, then
                           the rest in ranking order (messages newest first, memories by
                           confidence); a record that does not fit is over_budget.

Each candidate's row in assembly_records is its last decision. Prompt order: checkpoints,
skill states, memories, messages, tool calls, artifacts; each by created_at, then id.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from .graph import Graph, Request, call_tokens

MARKER_TOKENS = 24  # a stale marker / revalidation hint is short whatever the memory
KIND_ORDER = {"checkpoint": 0, "skill_state": 1, "tool_memory": 2, "message": 3,
              "tool_call": 4, "tool_artifact": 5}


def fmt_ts(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%MZ")


def fmt_age(delta: dt.timedelta) -> str:
    hours = int(delta.total_seconds() // 3600)
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h" if days else f"{hours}h"


@dataclass
class Cand:
    kind: str
    rid: str
    row: dict[str, Any]
    created: dt.datetime
    tokens: int
    branch: str
    decisions: list[tuple[int, str, str, str, str]] = field(default_factory=list)
    alive: bool = True
    rendering: str | None = None
    protected: bool = False
    child: bool = False

    def add(self, step: int, family: str, outcome: str, reason: str, detail: str) -> None:
        self.decisions.append((step, family, outcome, reason, detail))
        if outcome == "deny":
            self.alive = False


@dataclass
class Outcome:
    records: list[dict[str, Any]]
    decisions: list[dict[str, Any]]
    baseline_tokens: int
    baseline_message_count: int


class Assembler:
    """Indexes a graph once; ``assemble`` is then a pure function of (request, policy)."""

    def __init__(self, g: Graph) -> None:
        self.g = g
        t = g.tables
        self.runs = {r["model_run_id"]: r for r in t.get("model_runs", [])}
        self.calls = {c["tool_call_id"]: c for c in t.get("tool_calls", [])}
        self.arts = {a["artifact_id"]: a for a in t.get("tool_artifacts", [])}
        self.mems = {m["memory_id"]: m for m in t.get("tool_memories", [])}
        self.msgs = {m["message_id"]: m for m in t.get("messages", [])}
        self.branches = {b["branch_id"]: b for b in t.get("branches", [])}
        self.mem_by_source: dict[str, list[str]] = {}
        for m in t.get("tool_memories", []):
            for a in m["source_artifact_ids"]:
                self.mem_by_source.setdefault(a, []).append(m["memory_id"])

    # ------------------------------------------------------------------ graph facts
    def lineage(self, branch_id: str) -> dict[str, tuple[dt.datetime, str] | None]:
        """Branches on the lineage of ``branch_id``, each with the (time, fork point) after
        which its records are not inherited (None for the active branch)."""
        out: dict[str, tuple[dt.datetime, str] | None] = {}
        cutoff: tuple[dt.datetime, str] | None = None
        b: dict[str, Any] | None = self.branches[branch_id]
        while b is not None:
            out[b["branch_id"]] = cutoff
            parent = b["parent_branch_id"]
            if parent is None:
                break
            fork = self.msgs.get(b["fork_message_id"] or "")
            here = (fork["created_at"], fork["message_id"]) if fork else (b["created_at"], b["branch_id"])
            cutoff = here if cutoff is None or here[0] < cutoff[0] else cutoff
            b = self.branches[parent]
        return out

    def call_state(self, call: dict[str, Any], at: dt.datetime) -> str:
        done = call["completed_at"]
        if done is None or done > at:
            return "deferred" if call["status"] == "deferred" else "pending"
        if call["status"] == "failed":
            for other in self.calls.values():
                if (other["tool_name"] == call["tool_name"]
                        and other["arguments_json"] == call["arguments_json"]
                        and other["requested_at"] > call["requested_at"]
                        and other["status"] == "succeeded"
                        and other["completed_at"] is not None and other["completed_at"] <= at):
                    return "resolved"
            return "failed"
        return call["status"]

    def _candidates(self, req: Request, run: dict[str, Any]) -> list[Cand]:
        conv, at = run["conversation_id"], req.assembled_at
        out: list[Cand] = []
        for m in self.msgs.values():
            if m["conversation_id"] == conv and m["created_at"] <= at:
                out.append(Cand("message", m["message_id"], m, m["created_at"],
                                m["content_tokens"], m["branch_id"]))
        for c in self.calls.values():
            r = self.runs[c["model_run_id"]]
            if r["conversation_id"] == conv and c["requested_at"] <= at:
                out.append(Cand("tool_call", c["tool_call_id"], c, c["requested_at"],
                                call_tokens(c["arguments_json"]), r["branch_id"]))
        for a in self.arts.values():
            c = self.calls[a["tool_call_id"]]
            if self.runs[c["model_run_id"]]["conversation_id"] != conv:
                continue
            if a["created_at"] <= at or c["requested_at"] <= at:
                out.append(Cand("tool_artifact", a["artifact_id"], a, a["created_at"],
                                a["content_tokens"], a["branch_id"]))
        for m in self.mems.values():
            if m["conversation_id"] == conv and m["created_at"] <= at:
                out.append(Cand("tool_memory", m["memory_id"], m, m["created_at"],
                                m["content_tokens"], m["branch_id"]))
        for s in self.g.tables.get("skill_states", []):
            if s["model_run_id"] == req.model_run_id and s["created_at"] <= at:
                out.append(Cand("skill_state", s["skill_state_id"], s, s["created_at"],
                                s["content_tokens"], run["branch_id"]))
        for k in self.g.tables.get("checkpoints", []):
            if k["model_run_id"] == req.model_run_id and k["created_at"] <= at:
                out.append(Cand("checkpoint", k["checkpoint_id"], k, k["created_at"],
                                k["content_tokens"], run["branch_id"]))
        out.sort(key=lambda c: (c.kind, c.rid))
        return out

    def _owner(self, c: Cand) -> tuple[str | None, str | None, str, list[str]]:
        """(owner participant, owner run, visibility scope, shared_with) of a candidate."""
        row = c.row
        if c.kind == "message":
            return row["participant_id"], row["model_run_id"], row["visibility_scope"], []
        if c.kind == "tool_call":
            run = self.runs[row["model_run_id"]]
            return run["participant_id"], run["model_run_id"], "participant_private", []
        if c.kind == "tool_artifact":
            return (row["owner_participant_id"], row["owner_model_run_id"],
                    row["visibility_scope"], row["shared_with"])
        if c.kind == "tool_memory":
            return (row["owner_participant_id"], row["owner_model_run_id"],
                    row["visibility_scope"], [])
        run = self.runs[row["model_run_id"]]
        return run["participant_id"], run["model_run_id"], "participant_private", []

    def _is_child_of(self, owner_run: str | None, participant: str) -> bool:
        r = self.runs.get(owner_run or "")
        if r is None or r["runtime_kind"] != "subagent_child" or r["participant_id"] == participant:
            return False
        parent = self.runs.get(r["parent_model_run_id"] or "")
        return parent is not None and parent["participant_id"] == participant

    # ------------------------------------------------------------------ assembly
    def assemble(self, req: Request, policy: dict[str, Any],
                 invert_supersession: bool = False) -> Outcome:
        run = self.runs[req.model_run_id]
        at = req.assembled_at
        me = run["participant_id"]
        cands = self._candidates(req, run)
        by_id = {(c.kind, c.rid): c for c in cands}
        live = lambda: [c for c in cands if c.alive]  # noqa: E731

        # 1 not yet created
        for c in cands:
            if c.created > at:
                c.add(1, "window", "deny", "not_yet_created",
                      f"created {c.created:%Y-%m-%dT%H:%M:%SZ}, after the assembly at "
                      f"{at:%Y-%m-%dT%H:%M:%SZ}")

        # 2 retention
        removed = set(policy["retention"]["removed_classes"])
        for c in live():
            if c.kind == "tool_artifact" and c.row["retention_class"] in removed:
                c.add(2, "retention", "deny", "retention_removed",
                      f"retention class {c.row['retention_class']}: raw body not kept")

        # 3 branch lineage
        lineage = self.lineage(run["branch_id"])
        baseline_tokens = 0
        baseline_messages = 0
        for c in cands:
            cut = lineage.get(c.branch)
            on = c.branch in lineage and (cut is None or c.created <= cut[0])
            if on and c.created <= at and c.kind in ("message", "tool_call", "tool_artifact"):
                baseline_tokens += c.tokens
                baseline_messages += c.kind == "message"
            if not c.alive or on or not policy["branch"]["lineage_only"]:
                continue
            if (c.kind == "tool_memory" and c.row["visibility_scope"] == "conversation"
                    and policy["branch"]["shared_fill"]):
                c.add(3, "branch", "allow", "conversation_shared",
                      f"conversation-scoped memory from branch {c.branch}")
                continue
            if cut is not None:
                c.add(3, "branch", "deny", "sibling_branch",
                      f"on {c.branch} after the fork at {cut[1]}")
            else:
                c.add(3, "branch", "deny", "sibling_branch", f"sibling branch {c.branch}")

        # 4 visibility and ownership
        for c in live():
            if c.kind in ("skill_state", "checkpoint"):
                continue
            owner, owner_run, scope, shared = self._owner(c)
            if scope == "audit_only" and policy["visibility"]["audit_only_excluded"]:
                c.add(4, "visibility", "deny", "audit_only", "audit-only record")
            elif self._is_child_of(owner_run, me):
                c.child = True
            elif (scope == "participant_private" and owner is not None and owner != me
                  and me not in shared and policy["ownership"]["participant_isolation"]):
                c.add(4, "ownership", "deny", "participant_private", f"private to {owner}")

        # 5 privacy and provider
        blocked_raw = set(policy["privacy"]["raw_blocked_classes"])
        providers = policy["privacy"].get("providers", {})
        blocked_here = set(providers.get(run["provider"], {}).get("blocked_classes", []))
        for c in live():
            if c.kind not in ("tool_artifact", "tool_memory"):
                continue
            cls = c.row["privacy_class"]
            if c.kind == "tool_artifact" and cls in blocked_raw:
                c.add(5, "privacy", "deny", "privacy_restricted",
                      f"raw {cls} body is never sent; a safe summary may be")
            elif cls in blocked_here:
                c.add(5, "privacy", "deny", "provider_restricted",
                      f"{cls} data is not sent to {run['provider']}")

        # 6 contradiction and supersession
        live_mems = {c.rid: c for c in live() if c.kind == "tool_memory"}
        con = policy["contradiction"]
        omit_obsolete = con["supersession"] == "omit_obsolete"
        for c in sorted(live_mems.values(), key=lambda c: c.rid):
            m = c.row
            if not omit_obsolete:
                break
            if invert_supersession:
                # the drift build read `supersedes` as if it pointed at the replacement
                targets = [s for s in m["supersedes"] if s in live_mems]
                if targets:
                    c.add(6, "contradiction", "deny", "superseded", f"superseded by {targets[0]}")
            elif m["superseded_by"] in live_mems:
                c.add(6, "contradiction", "deny", "superseded", f"superseded by {m['superseded_by']}")
        for c in sorted(live_mems.values(), key=lambda c: c.rid):
            if not c.alive:
                continue
            peers = [p for p in c.row["conflicts_with"] if p in live_mems and live_mems[p].alive]
            if not peers:
                continue
            if con["show_both_sides"]:
                c.add(6, "contradiction", "allow", "conflict_both_sides",
                      f"conflicts with {', '.join(peers)}; both sides shown")
            else:
                best = max([c] + [live_mems[p] for p in peers],
                           key=lambda x: (x.row["confidence"], x.rid))
                if best is not c:
                    c.add(6, "contradiction", "deny", "redundant",
                          f"conflicts with {best.rid} (confidence {best.row['confidence']:.2f}"
                          f" over {c.row['confidence']:.2f})")

        # 7 freshness and provenance
        fresh = policy["freshness"]
        for c in live():
            if c.kind != "tool_memory":
                continue
            m = c.row
            missing = [a for a in m["source_artifact_ids"] if a not in self.arts]
            tools = ", ".join(m["revalidation_tools"]) or "its source tool"
            if missing:
                if fresh["broken_provenance"] == "mark":
                    c.add(7, "freshness", "mark", "stale_marker",
                          f"source {', '.join(missing)} is missing (broken provenance); "
                          f"revalidate with {tools}")
                    c.rendering = "revalidation_hint"
                else:
                    c.add(7, "freshness", "deny", "broken_provenance",
                          f"source {', '.join(missing)} is missing")
                continue
            window = fresh.get(m["freshness_class"])
            age = at - m["observed_at"]
            if window is not None and age > dt.timedelta(hours=window):
                since = m["observed_at"] + dt.timedelta(hours=window)
                what = f"stale since {fmt_ts(since)} ({m['freshness_class']}, {window}h window)"
                if fresh["stale_action"] == "mark":
                    c.add(7, "freshness", "mark", "stale_marker", f"{what}; revalidate with {tools}")
                    c.rendering = "stale_marker"
                else:
                    c.add(7, "freshness", "deny", "stale", what)
            elif not c.decisions:
                span = f"within the {window}h {m['freshness_class']} window" if window is not None \
                    else f"{m['freshness_class']}: does not go stale"
                c.add(7, "freshness", "allow", "compact_memory",
                      f"observed {fmt_age(age)} ago, {span}")

        # 8 promotion and rehydration
        mode = policy["ownership"]["child_promotion"]
        bytes_left = req.byte_budget if req.byte_budget is not None else policy["rehydration"]["byte_budget"]
        exact = set(req.exact_evidence_ids) if policy["rehydration"]["trigger"] == "exact_evidence" else set()
        for c in live():
            if c.child:
                owner_run = self._owner(c)[1]
                ok = c.kind == "tool_memory" and c.row["promotion_policy"] != "never" and (
                    mode == "auto" or (mode == "explicit" and c.row["promoted"]))
                if ok:
                    c.add(8, "promotion", "allow", "promoted_child_output",
                          f"promoted from child run {owner_run}")
                    c.rendering = c.rendering or "compact_memory"
                else:
                    c.add(8, "promotion", "deny", "child_not_promoted",
                          f"output of child run {owner_run}, not promoted to the parent")
                continue
            if c.kind == "tool_artifact":
                settled = c.row["status"] == "succeeded"
                if c.rid in exact and settled:
                    if c.row["byte_size"] <= bytes_left:
                        bytes_left -= c.row["byte_size"]
                        c.add(8, "rehydration", "rehydrate", "rehydrated_exact",
                              f"exact evidence requested; {c.row['byte_size']} bytes raw")
                        c.rendering = "rehydrated_raw"
                    else:
                        c.add(8, "rehydration", "deny", "byte_budget_exceeded",
                              f"needs {c.row['byte_size']} bytes, {bytes_left} left of the byte budget")
                elif settled:
                    derived = [m for m in self.mem_by_source.get(c.rid, [])
                               if self.mems[m]["created_at"] <= at]
                    if derived:
                        c.add(8, "rehydration", "replace", "raw_replaced_by_memory",
                              f"replaced by compact memory {derived[0]}")
                        c.alive = False
                    else:
                        c.add(8, "rehydration", "allow", "lineage",
                              "no compact memory derived; shown as a reference")
                        c.rendering = "reference"
            elif c.kind == "tool_call" and self.call_state(c.row, at) == "succeeded":
                arts = sorted(a for a, r in self.arts.items() if r["tool_call_id"] == c.rid)
                c.add(8, "rehydration", "deny", "redundant",
                      f"result carried by {', '.join(arts) or 'its artifact'}")

        # 9 recovery protection
        protected_states = set(policy["recovery"]["protected_states"])
        for c in live():
            if c.kind == "skill_state":
                c.add(9, "recovery", "allow", "skill_active",
                      "skills: " + ", ".join(c.row["loaded_skills"]))
                c.rendering = "summary"
            elif c.kind == "checkpoint":
                c.add(9, "recovery", "allow", "checkpoint_restore",
                      f"{c.row['kind']} checkpoint restored")
                c.rendering = "summary"
            elif c.kind in ("tool_call", "tool_artifact"):
                call = c.row if c.kind == "tool_call" else self.calls[c.row["tool_call_id"]]
                state = self.call_state(call, at)
                if state in protected_states:
                    extra = ", retryable" if call["retryable"] else ""
                    c.add(9, "recovery", "protect", "recovery_protected",
                          f"unresolved {call['tool_name']} call ({state}{extra})")
                    c.rendering = "verbatim"
                    c.protected = True
                elif c.kind == "tool_call" or c.row["status"] != "succeeded":
                    c.add(9, "recovery", "deny", "redundant",
                          f"{call['tool_name']} call {state}; nothing left to recover")

        # 10 window
        msgs = sorted((c for c in live() if c.kind == "message"),
                      key=lambda c: (c.created, c.rid), reverse=True)
        limit = policy["window"]["max_messages"]
        for i, c in enumerate(msgs):
            if i >= limit:
                c.add(10, "window", "deny", "outside_window", f"older than the last {limit} messages")
                continue
            m = c.row
            if (run["runtime_kind"] == "autonomous_discussion" and m["role"] == "assistant"
                    and m["participant_id"] != me):
                c.add(10, "window", "allow", "speaker_context",
                      f"said by {m['speaker_label'] or m['participant_id']}")
            elif c.branch == run["branch_id"]:
                c.add(10, "window", "allow", "in_window", f"message {i + 1} of the last {limit}")
            else:
                c.add(10, "window", "allow", "lineage", f"inherited from {c.branch}")
            c.rendering = "verbatim"

        # 11 budget
        budget = req.token_budget if req.token_budget is not None else policy["budget"]["token_budget"]
        available = budget - policy["budget"]["reserve_tokens"]
        rank = {k: i for i, k in enumerate(policy["ranking"]["order"])}

        def shown(c: Cand) -> int:
            if c.rendering in ("stale_marker", "revalidation_hint"):
                return min(c.tokens, MARKER_TOKENS)
            return c.tokens

        used = sum(shown(c) for c in live() if c.protected)
        if used > available:
            for c in live():
                if c.protected:
                    step, fam, out, reason, detail = c.decisions[-1]
                    c.decisions[-1] = (step, fam, out, reason,
                                       f"{detail}; kept although over budget by {used - available} tokens")

        def order(c: Cand) -> tuple[Any, ...]:
            key = "exact_evidence" if c.rendering == "rehydrated_raw" else c.kind
            conf = -c.row["confidence"] if c.kind == "tool_memory" else 0.0
            return (rank.get(key, len(rank)), conf, -c.created.timestamp(), c.rid)

        for c in sorted((c for c in live() if not c.protected), key=order):
            if c.rendering is None:
                c.rendering = "compact_memory" if c.kind == "tool_memory" else "verbatim"
            t = shown(c)
            if used + t <= available:
                used += t
            else:
                c.add(11, "budget", "deny", "over_budget",
                      f"over budget by {used + t - available} tokens")

        # final rows
        records: list[dict[str, Any]] = []
        included = sorted((c for c in cands if c.alive),
                          key=lambda c: (KIND_ORDER[c.kind], c.created, c.rid))
        pos = {id(c): i for i, c in enumerate(included)}
        decisions: list[dict[str, Any]] = []
        for c in cands:
            if not c.decisions:
                raise AssertionError(f"{req.assembly_id}: no decision for {c.kind} {c.rid}")
            step, fam, out, reason, detail = c.decisions[-1]
            records.append({
                "assembly_id": req.assembly_id, "record_kind": c.kind, "record_id": c.rid,
                "decision": "included" if c.alive else "omitted",
                "rendering": c.rendering if c.alive else None,
                "position": pos[id(c)] if c.alive else None,
                "policy_family": fam, "reason_code": reason, "detail": detail,
                "tokens": shown(c) if c.alive else c.tokens})
            for d in c.decisions:
                decisions.append((d[0], c.kind, c.rid, d))
        decisions.sort(key=lambda x: (x[0], x[1], x[2]))
        drows = [{
            "decision_id": f"{req.assembly_id}/d{i + 1:03d}", "assembly_id": req.assembly_id,
            "step": step, "record_kind": kind, "record_id": rid, "policy_family": d[1],
            "outcome": d[2], "reason_code": d[3], "detail": d[4]}
            for i, (step, kind, rid, d) in enumerate(decisions)]
        return Outcome(records, drows, baseline_tokens, baseline_messages)
