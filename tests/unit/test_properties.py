"""Property tests of the reference assembler over random small valid graphs."""

from __future__ import annotations

import copy
import datetime as dt
import random
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.graphs import policies, random_graph

from replay.assembler import Assembly, assemble, selection_hash
from replay.policy import Policy
from replay.snapshot import Request, Snapshot

PROPS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------- oracles
def lineage(snap: Snapshot, branch_id: str) -> dict[str, dt.datetime | None]:
    branches = {b["branch_id"]: b for b in snap.tables["branches"]}
    msgs = {m["message_id"]: m for m in snap.tables["messages"]}
    out: dict[str, dt.datetime | None] = {}
    cutoff = None
    b = branches[branch_id]
    while True:
        out[b["branch_id"]] = cutoff
        if b["parent_branch_id"] is None:
            return out
        fork = msgs.get(b["fork_message_id"] or "")
        here = fork["created_at"] if fork else b["created_at"]
        cutoff = here if cutoff is None else min(cutoff, here)
        b = branches[b["parent_branch_id"]]


def facts(snap: Snapshot, ctx: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """(kind, id) -> branch, created, owner participant, owner run, scope, shared_with."""
    runs = ctx["runs"]
    out = {}
    for m in snap.tables["messages"]:
        out[("message", m["message_id"])] = dict(branch=m["branch_id"], created=m["created_at"],
                                                 owner=m["participant_id"], run=m["model_run_id"],
                                                 scope=m["visibility_scope"], shared=[])
    for c in snap.tables["tool_calls"]:
        r = runs[c["model_run_id"]]
        out[("tool_call", c["tool_call_id"])] = dict(branch=r["branch_id"], created=c["requested_at"],
                                                     owner=r["participant_id"], run=r["model_run_id"],
                                                     scope="participant_private", shared=[])
    for a in snap.tables["tool_artifacts"]:
        out[("tool_artifact", a["artifact_id"])] = dict(branch=a["branch_id"], created=a["created_at"],
                                                        owner=a["owner_participant_id"],
                                                        run=a["owner_model_run_id"],
                                                        scope=a["visibility_scope"], shared=a["shared_with"])
    for m in snap.tables["tool_memories"]:
        out[("tool_memory", m["memory_id"])] = dict(branch=m["branch_id"], created=m["created_at"],
                                                    owner=m["owner_participant_id"],
                                                    run=m["owner_model_run_id"],
                                                    scope=m["visibility_scope"], shared=[])
    return out


def child_depth(run_id: str | None, ctx: dict[str, Any]) -> int:
    """1 for a subagent child run of a run of 'me', 2 for a grandchild, ...; 0 otherwise."""
    r = ctx["runs"].get(run_id or "")
    depth = 0
    while r is not None and r["runtime_kind"] == "subagent_child" and r["participant_id"] != "me":
        depth += 1
        parent = ctx["runs"].get(r["parent_model_run_id"] or "")
        if parent is not None and parent["participant_id"] == "me":
            return depth
        r = parent
    return 0


def is_my_child(run_id: str | None, ctx: dict[str, Any]) -> bool:
    return child_depth(run_id, ctx) > 0


def state_of(call: dict[str, Any], calls: dict[str, dict[str, Any]], at: dt.datetime) -> str:
    if call["completed_at"] is None or call["completed_at"] > at:
        return "deferred" if call["status"] == "deferred" else "pending"
    if call["status"] == "failed":
        retried = any(o["tool_name"] == call["tool_name"] and o["arguments_json"] == call["arguments_json"]
                      and o["requested_at"] > call["requested_at"] and o["status"] == "succeeded"
                      and o["completed_at"] is not None and o["completed_at"] <= at for o in calls.values())
        return "resolved" if retried else "failed"
    return call["status"]


def run_case(seed: int, pol: Policy) -> tuple[Snapshot, Request, dict[str, Any], Assembly]:
    snap, req, ctx = random_graph(random.Random(seed))
    return snap, req, ctx, assemble(snap, req, pol)


# ---------------------------------------------------------------------------- properties
@PROPS
@given(seed=st.integers(0, 2**32 - 1), pol=policies)
def test_same_inputs_same_selection_hash_whatever_the_row_order(seed: int, pol: Policy) -> None:
    snap, req, _, a = run_case(seed, pol)
    shuffled = copy.deepcopy(snap.tables)
    rnd = random.Random(seed ^ 0x5EED)
    for rows in shuffled.values():
        rnd.shuffle(rows)
    b = assemble(Snapshot(shuffled), req, pol)
    assert a.selection_hash == b.selection_hash == selection_hash(a.records)
    assert a.records == b.records and a.decisions == b.decisions


@PROPS
@given(seed=st.integers(0, 2**32 - 1), pol=policies)
def test_one_final_decision_per_candidate(seed: int, pol: Policy) -> None:
    _, req, _, a = run_case(seed, pol)
    keys = [(r["record_kind"], r["record_id"]) for r in a.records]
    assert len(keys) == len(set(keys))
    inc = a.included()
    assert [r["position"] for r in inc] == list(range(len(inc)))
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for d in a.decisions:
        last[(d["record_kind"], d["record_id"])] = d
    assert set(last) == set(keys)
    for r in a.records:
        assert last[(r["record_kind"], r["record_id"])]["reason_code"] == r["reason_code"]
        assert (r["rendering"] is None) == (r["decision"] == "omitted")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), pol=policies)
def test_never_a_sibling_branch_foreign_private_or_audit_only_record(seed: int, pol: Policy) -> None:
    snap, req, ctx, a = run_case(seed, pol)
    lin = lineage(snap, req.branch_id)
    info = facts(snap, ctx)
    for r in a.included():
        key = (r["record_kind"], r["record_id"])
        if key not in info:
            continue  # skill states and checkpoints of the request's own run
        f = info[key]
        on = f["branch"] in lin and (lin[f["branch"]] is None or f["created"] <= lin[f["branch"]])
        shared_fill = r["record_kind"] == "tool_memory" and f["scope"] == "conversation"
        assert on or shared_fill, (key, "sibling branch")
        assert f["scope"] != "audit_only", (key, "audit only")
        owner = f["owner"] or (ctx["runs"].get(f["run"] or "") or {}).get("participant_id")
        if f["scope"] == "participant_private":
            assert owner is not None, (key, "private with no owner")
            if owner != "me":
                assert "me" in f["shared"] or is_my_child(f["run"], ctx), (key, "foreign private")
        if is_my_child(f["run"], ctx):
            assert r["reason_code"] == "promoted_child_output" and r["record_kind"] == "tool_memory"
            if pol.ownership.child_promotion == "explicit":  # promoted one level at a time
                assert child_depth(f["run"], ctx) == 1, (key, "grandchild output skipped a step")


@PROPS
@given(seed=st.integers(0, 2**32 - 1), pol=policies)
def test_protected_recovery_state_is_always_included(seed: int, pol: Policy) -> None:
    snap, req, ctx, a = run_case(seed, pol)
    lin = lineage(snap, req.branch_id)
    protected = set(pol.recovery.protected_states)
    for c in snap.tables["tool_calls"]:
        run = ctx["runs"][c["model_run_id"]]
        cut = lin.get(run["branch_id"], "off")
        on = cut != "off" and (cut is None or c["requested_at"] <= cut)
        if (run["participant_id"] == "me" and on and c["requested_at"] <= req.assembled_at
                and state_of(c, ctx["calls"], req.assembled_at) in protected):
            r = a.record(c["tool_call_id"], "tool_call")
            assert (r["decision"], r["reason_code"]) == ("included", "recovery_protected"), r


@PROPS
@given(seed=st.integers(0, 2**32 - 1), pol=policies)
def test_superseded_never_included_while_its_replacement_is(seed: int, pol: Policy) -> None:
    snap, _, _, a = run_case(seed, pol)
    included = {r["record_id"] for r in a.included() if r["record_kind"] == "tool_memory"}
    for m in snap.tables["tool_memories"]:
        replacements = {m["superseded_by"]} if m["superseded_by"] else set()
        replacements |= {n["memory_id"] for n in snap.tables["tool_memories"] if m["memory_id"] in n["supersedes"]}
        replacements.discard(m["memory_id"])
        if m["memory_id"] in included:
            assert not (replacements & included), (m["memory_id"], replacements & included)


@PROPS
@given(seed=st.integers(0, 2**32 - 1), pol=policies)
def test_budget_respected_except_by_protected_records(seed: int, pol: Policy) -> None:
    _, req, _, a = run_case(seed, pol)
    budget = pol.budget.token_budget  # the policy's, capped by the model's context limit
    if req.context_limit is not None:
        budget = min(budget, req.context_limit)
    available = budget - pol.budget.reserve_tokens
    inc = a.included()
    protected = sum(r["tokens"] for r in inc if r["reason_code"] == "recovery_protected")
    rest = sum(r["tokens"] for r in inc if r["reason_code"] != "recovery_protected")
    assert rest <= max(0, available - protected)
    assert a.assembled_tokens == protected + rest


@PROPS
@given(seed=st.integers(0, 2**32 - 1), pol=policies)
def test_never_a_hole_in_the_history_under_any_budget(seed: int, pol: Policy) -> None:
    """Once a message is dropped for the budget, no older message is kept."""
    snap, _, _, a = run_case(seed, pol)
    created = {m["message_id"]: m["created_at"] for m in snap.tables["messages"]}
    msgs = [r for r in a.records if r["record_kind"] == "message"]
    # newest first (ties by id): every kept message must come before the first dropped one
    def age(r: dict[str, Any]) -> tuple[float, str]:
        return (-created[r["record_id"]].timestamp(), r["record_id"])

    kept = [age(r) for r in msgs if r["decision"] == "included"]
    dropped = [age(r) for r in msgs if r["reason_code"] == "over_budget"]
    if dropped and kept:
        assert max(kept) < min(dropped), (max(kept), min(dropped))


@PROPS
@given(seed=st.integers(0, 2**32 - 1), pol=policies)
def test_raw_replaced_only_by_a_memory_in_the_prompt(seed: int, pol: Policy) -> None:
    _, _, _, a = run_case(seed, pol)
    included = {r["record_id"] for r in a.included() if r["record_kind"] == "tool_memory"}
    for r in a.records:
        if r["reason_code"] == "raw_replaced_by_memory":
            assert r["detail"].rsplit(" ", 1)[-1] in included, r


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), pol=policies)
def test_a_memory_replaced_by_a_hidden_record_is_never_shown_as_current(seed: int, pol: Policy) -> None:
    snap, _, _, a = run_case(seed, pol)
    final = {r["record_id"]: r for r in a.records if r["record_kind"] == "tool_memory"}
    hidden = {"participant_private", "audit_only", "owner_unknown", "provider_restricted"}
    for m in snap.tables["tool_memories"]:
        r = final.get(m["memory_id"])
        if r is None or r["decision"] != "included" or r["rendering"] != "compact_memory":
            continue
        replacements = {m["superseded_by"]} if m["superseded_by"] else set()
        replacements |= {n["memory_id"] for n in snap.tables["tool_memories"] if m["memory_id"] in n["supersedes"]}
        replacements.discard(m["memory_id"])
        for n in replacements:
            assert n not in final or final[n]["reason_code"] not in hidden, (m["memory_id"], final[n])
