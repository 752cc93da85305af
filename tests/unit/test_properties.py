"""Property tests of the reference assembler over random small valid graphs."""

from __future__ import annotations

import copy
import datetime as dt
import json
import random
from typing import Any

from support.engine import policy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.assembler import Assembly, assemble, selection_hash
from replay.policy import Policy
from replay.snapshot import Request, Snapshot

T0 = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.timezone.utc)
PRIVACY = ["public", "internal", "user_private", "oauth_derived", "google_derived", "secret_adjacent"]
SCOPES = ["participant_private", "branch", "conversation", "audit_only"]
FRESH = ["volatile", "session", "bounded", "durable", "permanent"]
ARGS = ['{"a": 1}', '{"a": 2}', '{"q": "x"}']


def t(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def random_graph(rnd: random.Random) -> tuple[Snapshot, Request, dict[str, Any]]:
    """One conversation: branches with forks, four participants (one a subagent of 'me'),
    runs, messages, calls, artifacts, memories (with supersession and conflicts, some
    dangling sources), skill states and checkpoints; plus a request of 'me'."""
    conv = "c"
    tables: dict[str, list[dict[str, Any]]] = {k: [] for k in (
        "conversations", "branches", "participants", "messages", "model_runs", "tool_calls",
        "tool_artifacts", "tool_memories", "skill_states", "checkpoints")}
    tables["conversations"].append({"conversation_id": conv, "title": "p", "owner_id": "u", "created_at": t(0)})
    parts = {"me": ("model", "anthropic"), "other": ("model", "openai"), "user": ("user", None),
             "sub": ("subagent", "anthropic"), "subsub": ("subagent", "anthropic")}
    for pid, (kind, prov) in parts.items():
        tables["participants"].append({"participant_id": pid, "conversation_id": conv, "label": pid,
                                       "kind": kind, "provider": prov, "model": prov and "m"})
    branches = ["b0"]
    tables["branches"].append({"branch_id": "b0", "conversation_id": conv, "parent_branch_id": None,
                               "fork_message_id": None, "name": "main", "created_at": t(0)})
    msgs: list[dict[str, Any]] = []

    def add_msg(branch: str, at: float) -> dict[str, Any]:
        who = rnd.choice(["me", "other", "user", "sub"])
        role = "user" if who == "user" else "assistant"
        m = {"message_id": f"msg-{len(msgs):03d}", "conversation_id": conv, "branch_id": branch,
             "parent_message_id": None, "role": role, "participant_id": who, "model_run_id": None,
             "speaker_label": None, "content": "x" * rnd.randint(1, 200),
             "content_tokens": rnd.choice([rnd.randint(1, 30), rnd.randint(1, 400)]),
             "visibility_scope": rnd.choice(["branch"] * 3 + SCOPES), "created_at": t(at)}
        msgs.append(m)
        return m

    for i in range(rnd.randint(2, 6)):
        add_msg("b0", rnd.uniform(0, 100))
    for n in range(rnd.randint(0, 2)):
        parent = rnd.choice(branches)
        candidates = [m for m in msgs if m["branch_id"] == parent]
        fork = rnd.choice(candidates) if candidates else None
        bid = f"b{n + 1}"
        created = (fork["created_at"] if fork else t(10)) + dt.timedelta(minutes=1)
        tables["branches"].append({"branch_id": bid, "conversation_id": conv, "parent_branch_id": parent,
                                   "fork_message_id": fork["message_id"] if fork else None,
                                   "name": bid, "created_at": created})
        branches.append(bid)
        for _ in range(rnd.randint(0, 4)):
            add_msg(bid, (created - T0).total_seconds() / 60 + rnd.uniform(0, 60))
    for _ in range(rnd.randint(0, 4)):
        add_msg(rnd.choice(branches), rnd.uniform(0, 160))
    tables["messages"] = msgs

    runs: list[dict[str, Any]] = []

    def add_run(pid: str, branch: str, runtime: str = "chat", parent: str | None = None) -> dict[str, Any]:
        r = {"model_run_id": f"run-{len(runs):03d}", "conversation_id": conv, "branch_id": branch,
             "participant_id": pid, "trigger_message_id": None, "runtime_kind": runtime,
             "parent_model_run_id": parent, "subagent_batch_id": None,
             "provider": parts[pid][1] or "anthropic", "model": "m", "status": "succeeded",
             "started_at": t(rnd.uniform(0, 100)), "ended_at": None}
        runs.append(r)
        return r

    mine = add_run("me", rnd.choice(branches), rnd.choice(["chat", "chat", "autonomous_discussion", "multi_model"]))
    for _ in range(rnd.randint(0, 3)):
        add_run(rnd.choice(["me", "other"]), rnd.choice(branches))
    child = add_run("sub", rnd.choice(branches), "subagent_child",
                    parent=rnd.choice([r for r in runs if r["participant_id"] == "me"])["model_run_id"])
    if rnd.random() < 0.5:  # a grandchild: a subagent spawned by the subagent
        add_run("subsub", child["branch_id"], "subagent_child", parent=child["model_run_id"])
    tables["model_runs"] = runs

    calls: list[dict[str, Any]] = []
    for _ in range(rnd.randint(0, 8)):
        run = rnd.choice(runs)
        req_at = rnd.uniform(0, 150)
        status = rnd.choice(["pending", "succeeded", "succeeded", "failed", "deferred"])
        done = None if status == "pending" or rnd.random() < 0.2 else req_at + rnd.uniform(0, 60)
        calls.append({"tool_call_id": f"call-{len(calls):03d}", "model_run_id": run["model_run_id"],
                      "tool_name": rnd.choice(["pay", "fetch"]), "arguments_json": rnd.choice(ARGS),
                      "status": status, "retryable": rnd.random() < 0.5, "parallel_group": None,
                      "requested_at": t(req_at), "completed_at": t(done) if done is not None else None})
    tables["tool_calls"] = calls
    run_by = {r["model_run_id"]: r for r in runs}
    arts: list[dict[str, Any]] = []
    for c in calls:
        for _ in range(rnd.randint(0, 2)):
            r = run_by[c["model_run_id"]]
            at = (c["completed_at"] or c["requested_at"]) + dt.timedelta(seconds=rnd.randint(0, 30))
            arts.append({
                "artifact_id": f"art-{len(arts):03d}", "tool_call_id": c["tool_call_id"],
                "tool_name": c["tool_name"], "status": c["status"], "result_preview": "p", "error": None,
                "byte_size": rnd.randint(1, 5000), "sha256": "0" * 64, "storage_ref": None,
                "content_type": "text/plain", "content_tokens": rnd.randint(1, 400),
                "privacy_class": rnd.choice(PRIVACY), "visibility_scope": rnd.choice(SCOPES),
                "owner_participant_id": r["participant_id"], "owner_model_run_id": r["model_run_id"],
                "shared_with": rnd.choice([[], [], ["me"]]), "branch_id": r["branch_id"],
                "retention_class": rnd.choice(["keep", "keep", "archive", "redact", "hash_only", "delete"]),
                "created_at": at})
    tables["tool_artifacts"] = arts
    mems: list[dict[str, Any]] = []
    for _ in range(rnd.randint(0, 7)):
        owner = rnd.choice([None, *runs, *[r for r in runs if r["runtime_kind"] == "subagent_child"] * 2])
        sources = rnd.sample([a["artifact_id"] for a in arts], k=min(len(arts), rnd.randint(0, 2)))
        if rnd.random() < 0.15:
            sources.append("art-missing")
        created = rnd.uniform(0, 160)
        mems.append({
            "memory_id": f"mem-{len(mems):03d}", "conversation_id": conv, "branch_id": rnd.choice(branches),
            "source_artifact_ids": sources, "source_tool_names": [], "summary": "s", "structured_json": None,
            "content_tokens": rnd.randint(5, 60), "confidence": round(rnd.random(), 2),
            "trust_source": "tool_result", "ambiguity_notes": None, "privacy_class": rnd.choice(PRIVACY),
            "freshness_class": rnd.choice(FRESH), "observed_at": t(created - rnd.uniform(0, 3000)),
            "stale_after": None, "revalidation_tools": rnd.choice([[], ["fetch"]]), "provenance_locators": [],
            "conflicts_with": [], "supersedes": [], "superseded_by": None,
            "promotion_policy": rnd.choice(["auto", "explicit", "never"]), "promoted": rnd.random() < 0.5,
            "visibility_scope": rnd.choice(SCOPES + ["branch"]),
            "owner_participant_id": owner["participant_id"] if owner else None,
            "owner_model_run_id": owner["model_run_id"] if owner else None, "created_at": t(created)})
    for _ in range(rnd.randint(0, 3)):
        if len(mems) < 2:
            break
        old, new = rnd.sample(mems, 2)
        link = rnd.choice(["both", "forward", "back"])
        if link in ("both", "forward"):
            old["superseded_by"] = new["memory_id"]
        if link in ("both", "back"):
            new["supersedes"].append(old["memory_id"])
    for _ in range(rnd.randint(0, 2)):
        if len(mems) < 2:
            break
        x, y = rnd.sample(mems, 2)
        x["conflicts_with"].append(y["memory_id"])
        y["conflicts_with"].append(x["memory_id"])
    tables["tool_memories"] = mems
    for i, r in enumerate(rnd.sample(runs, k=min(2, len(runs)))):
        tables["skill_states"].append({"skill_state_id": f"skill-{i}", "model_run_id": r["model_run_id"],
                                       "loaded_skills": ["s"], "active_profiles": [], "direct_tools": [],
                                       "content_tokens": rnd.randint(10, 80), "created_at": t(rnd.uniform(0, 150))})
        tables["checkpoints"].append({"checkpoint_id": f"ckpt-{i}", "model_run_id": r["model_run_id"],
                                      "kind": "continuation", "state_json": json.dumps({"i": i}),
                                      "content_tokens": rnd.randint(5, 50), "created_at": t(rnd.uniform(0, 150))})
    at = t(rnd.uniform(20, 220))
    art_ids = [a["artifact_id"] for a in arts]
    req = Request(
        assembly_id="asm-p", model_run_id=mine["model_run_id"], conversation_id=conv,
        branch_id=mine["branch_id"], participant_id="me", runtime_kind=mine["runtime_kind"],
        provider=rnd.choice(["anthropic", "openai"]), model="m", assembled_at=at, policy_version="p",
        assembler_version="p", token_budget=rnd.choice([None, 0, 300, 800, 2000, 100000]),
        byte_budget=rnd.choice([None, 0, 2000, 100000]),
        context_limit=rnd.choice([None, None, 0, 300, 800, 2000, 100000]),
        exact_evidence_ids=rnd.sample(art_ids, k=min(len(art_ids), rnd.randint(0, 2))), tags=[])
    return Snapshot(tables), req, {"runs": run_by, "calls": {c["tool_call_id"]: c for c in calls}}


policies = st.builds(
    lambda base, stale, broken, both, promo, window, trigger, tokens, nbytes: policy(base, **{
        "freshness.stale_action": stale, "freshness.broken_provenance": broken,
        "contradiction.show_both_sides": both, "ownership.child_promotion": promo,
        "window.max_messages": window, "rehydration.trigger": trigger,
        "budget.token_budget": tokens, "rehydration.byte_budget": nbytes}),
    st.sampled_from(["v1", "v3", "v4", "v5", "v6"]), st.sampled_from(["mark", "omit"]),
    st.sampled_from(["mark", "omit"]), st.booleans(), st.sampled_from(["auto", "explicit", "never"]),
    st.integers(0, 12), st.sampled_from(["exact_evidence", "never"]),
    st.sampled_from([0, 300, 600, 800, 1200, 2000, 6000, 100000]),
    st.sampled_from([0, 2000, 65536]))

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
