"""Stage 4, visibility and ownership, and stage 8's promotion of a subagent's record.

audit_only scope is omitted (visibility.audit_only_excluded); a participant_private record
whose owner cannot be resolved (``owner_of``) is omitted as owner_unknown whatever the
policy says; a record of a subagent run below the requester (a child, a child's child, ...)
waits for promotion; another participant's participant_private record is omitted unless
``shared_with`` names the requester (ownership.participant_isolation). Tool calls are
private to the participant of their run.

Promotion (stage 8) runs through each run of the subagent chain: ``promotion_decision``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ._kit import S_AUDIT, S_PRIVATE
from ._kit import column
from .family import Family

if TYPE_CHECKING:  # pragma: no cover
    from ..policy import Policy
    from ..assembler import _Index, _Run
    from ..columnar import Rows
    from ..visibility import Decision, RequestView

FAMILY = Family(
    "visibility", ("visibility", "ownership", "promotion"),
    ("audit_only", "owner_unknown", "participant_private", "child_not_promoted",
     "promoted_child_output"),
    {"audit_only": "visibility.audit_only_excluded",
     "participant_private": "ownership.participant_isolation",
     "child_not_promoted": "ownership.child_promotion",
     "promoted_child_output": "ownership.child_promotion"})

# the stages that hide a record from a request (a record denied at stage 3 is not in its
# history at all, and one created later not yet)
HIDING_STEPS = (4, 5)

# subagent chains: run r0 (a subagent child) up through its parents while they are
# subagent children; its depth below a participant is the first level that participant runs
CHILD_SQL = """
WITH RECURSIVE
runs AS (SELECT graph_conversation_id AS cid, model_run_id, participant_id, runtime_kind,
                parent_model_run_id FROM g_model_runs),
nruns AS (SELECT cid, count(*) AS n FROM runs GROUP BY cid),
anc(cid, start, cur, d) AS (
    SELECT cid, model_run_id, model_run_id, 0 FROM runs WHERE runtime_kind = 'subagent_child'
    UNION ALL
    SELECT a.cid, a.start, r.parent_model_run_id, a.d + 1
    FROM anc a
    JOIN runs r ON r.cid = a.cid AND r.model_run_id = a.cur AND r.runtime_kind = 'subagent_child'
    JOIN runs p ON p.cid = r.cid AND p.model_run_id = r.parent_model_run_id
    JOIN nruns ON nruns.cid = a.cid
    WHERE a.d <= nruns.n)
SELECT a.cid, a.start, p.participant_id AS who, min(a.d) AS depth
FROM anc a JOIN runs p ON p.cid = a.cid AND p.model_run_id = a.cur
WHERE a.d >= 1 GROUP BY ALL
"""


def owner_of(ix: "_Index", kind: str, row: dict[str, Any]) -> tuple[str | None, str | None, str, list[str]]:
    """(owner participant, owner run, visibility scope, shared_with) of a graph row.

    A record without an owner participant is owned by the participant of its owner run; the
    owner is None when neither resolves to a participant of the conversation. A tool call
    is private to the participant of its run. (The columnar form: the ``owner`` column of
    ``replay.columnar``'s sources.)"""
    if kind == "message":
        owner, run, scope, shared = (row["participant_id"], row["model_run_id"],
                                     row["visibility_scope"], [])
    elif kind == "tool_artifact":
        owner, run, scope, shared = (row["owner_participant_id"], row["owner_model_run_id"],
                                     row["visibility_scope"], list(row["shared_with"] or []))
    elif kind == "tool_memory":
        owner, run, scope, shared = (row["owner_participant_id"], row["owner_model_run_id"],
                                     row["visibility_scope"], [])
    else:
        owner, run, scope, shared = (None, row["model_run_id"], "participant_private", [])
    if owner is None:
        owner = (ix.runs.get(run or "") or {}).get("participant_id")
    if owner not in ix.participants:
        owner = None
    return owner, run, scope, shared


def decide(view: "RequestView", kind: str,
           row: dict[str, Any]) -> "tuple[Decision | None, list[dict[str, Any]]]":
    """A record's stage 4 decision (None, or a deny) and its subagent chain ([] unless a run
    below the requester's owns it)."""
    rules = view.rules
    owner, owner_run, scope, shared = owner_of(view.ix, kind, row)
    if scope == "audit_only" and rules.audit_only_excluded:
        return (4, "visibility", "deny", "audit_only", "audit-only record"), []
    if scope == "participant_private" and owner is None:
        # fail closed whatever the policy says: nobody can be shown to own it
        return (4, "ownership", "deny", "owner_unknown",
                "participant-private, but its owner participant cannot be resolved"), []
    chain = view.ix.child_chain(owner_run, view.me)
    if (not chain and scope == "participant_private" and owner != view.me
            and view.me not in shared and rules.participant_isolation):
        return (4, "ownership", "deny", "participant_private", f"private to {owner}"), []
    return None, chain


def reference(run: "_Run") -> None:
    for c in run.live():
        if c.kind in ("skill_state", "checkpoint"):  # the request's own run's: always its own
            continue
        d, chain = decide(run.view, c.kind, c.row)
        if d is not None:
            c.add(*d)
        elif chain:
            run.chains_of[id(c)] = chain
            c.child = True


def columnar(s: "Rows") -> None:
    cand, scope = s.cand, s.cand["scope"]
    m4 = s.alive & ~(s.is_skill | s.is_ckpt)
    audit = m4 & (scope == S_AUDIT) & s.P["audit_excluded"][s.pol]
    s.add(audit, 4, "visibility", "audit_only", True)
    m4 &= ~audit
    unknown = m4 & (scope == S_PRIVATE) & cand["owner_null"]
    s.add(unknown, 4, "ownership", "owner_unknown", True)
    m4 &= ~unknown
    s.depth = cand["depth"].astype(np.int64)
    s.child = m4 & (s.depth > 0)
    m4 &= ~s.child
    s.add(m4 & (scope == S_PRIVATE) & ~cand["owner_me"] & ~cand["shared_me"]
          & s.P["isolation"][s.pol], 4, "ownership", "participant_private", True)


# --------------------------------------------------------------------------- stage 8: promotion

def promotion_decision(kind: str, row: dict[str, Any], chain: list[dict[str, Any]],
                       mode: str) -> "tuple[Decision, bool]":
    """Stage 8 for a record of a subagent run below the requester: (its decision, whether
    it enters). Promotion runs through each run of its chain (owner run first): under
    ``explicit`` a memory's ``promoted`` flag lifts it one level, to the run that spawned its
    owner; reaching further up needs that run to promote it again (its own promoted memory),
    so a grandchild's memory does not reach its grandparent."""
    owner_run = chain[0]["model_run_id"]
    path = " through ".join(r["model_run_id"] for r in chain)
    ok = kind == "tool_memory" and row["promotion_policy"] != "never" and (
        mode == "auto" or (mode == "explicit" and row["promoted"]))
    if ok and mode == "explicit" and len(chain) > 1:
        return (8, "promotion", "deny", "child_not_promoted",
                f"output of run {owner_run}, promoted to {chain[1]['model_run_id']} only; "
                f"not promoted further up to this run"), False
    if ok:
        return (8, "promotion", "allow", "promoted_child_output", f"promoted from child run {path}"), True
    return (8, "promotion", "deny", "child_not_promoted",
            f"output of child run {owner_run}, not promoted to the parent"), False


def reference_promotion(run: "_Run") -> None:
    mode = run.policy.ownership.child_promotion
    for c in run.live():
        if c.child:
            decision, enters = promotion_decision(c.kind, c.row, run.chains_of[id(c)], mode)
            c.add(*decision)
            if enters:
                c.rendering = c.rendering or "compact_memory"


def columnar_promotion(s: "Rows") -> None:
    cand = s.cand
    ch = s.alive & s.child
    mode = s.P["promotion"][s.pol]
    ok = s.is_mem & (cand["promo"] != 2) & ((mode == 0) | ((mode == 1) & cand["promoted"]))
    one_level_only = ch & ok & (mode == 1) & (s.depth > 1)
    promoted = ch & ok & ~one_level_only
    s.add(ch & ~promoted, 8, "promotion", "child_not_promoted", True)
    s.add(promoted, 8, "promotion", "promoted_child_output", False)
    s.render(promoted & s.unrendered(), "compact_memory")


def settings(policies: list["Policy"]) -> dict[str, np.ndarray]:
    return {
        "audit_excluded": column(policies, lambda p: p.visibility.audit_only_excluded),
        "isolation": column(policies, lambda p: p.ownership.participant_isolation),
        "promotion": column(policies, lambda p: ("auto", "explicit", "never").index(
            p.ownership.child_promotion), np.int64),
    }
