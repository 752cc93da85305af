"""Random small valid conversation graphs (and policy variants) for property and
differential tests: ``random_graph`` builds one conversation and a request of 'me';
``random_requests`` adds more requests of any run, at other times."""

from __future__ import annotations

import datetime as dt
import json
import random
from typing import Any

from hypothesis import strategies as st

from replay.snapshot import Request, Snapshot
from support.engine import policy

T0 = dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.timezone.utc)
PRIVACY = ["public", "internal", "user_private", "oauth_derived", "google_derived", "secret_adjacent"]
SCOPES = ["participant_private", "branch", "conversation", "audit_only"]
FRESH = ["volatile", "session", "bounded", "durable", "permanent"]
ARGS = ['{"a": 1}', '{"a": 2}', '{"q": "x"}']


def t(minutes: float) -> dt.datetime:
    return T0 + dt.timedelta(minutes=minutes)


def random_graph(rnd: random.Random, conv: str = "c") -> tuple[Snapshot, Request, dict[str, Any]]:
    """One conversation: branches with forks, four participants (one a subagent of 'me'),
    runs, messages, calls, artifacts, memories (with supersession and conflicts, some
    dangling sources), skill states and checkpoints; plus a request of 'me'. Record ids do
    not depend on ``conv``: two conversations share them (as an artifact reachable from two
    conversations is one row in both)."""
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
                "tool_name": c["tool_name"], "status": c["status"], "error": None,
                # previews of many lengths (a reference's tokens count them); no random draw,
                # so the graphs a seed gives stay the same
                "result_preview": "p" * (len(arts) * 37 % 180),
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
            "revalidation_tools": rnd.choice([[], ["fetch"]]), "provenance_locators": [],
            "conflicts_with": [], "supersedes": [], "superseded_by": None,
            "promotion_policy": rnd.choice(["auto", "explicit", "never"]), "promoted": rnd.random() < 0.5,
            "visibility_scope": rnd.choice(SCOPES + ["branch"]),
            "owner_participant_id": owner["participant_id"] if owner else None,
            "owner_model_run_id": owner["model_run_id"] if owner else None, "created_at": t(created)})
        # what a stale marker names (its words count): a producer's stale_after or none, one
        # or two revalidation tools; derived, not drawn, so a seed's graph stays the same
        mem = mems[-1]
        n = len(mems)
        mem["stale_after"] = mem["observed_at"] + dt.timedelta(hours=n % 5) if n % 2 else None
        if mem["revalidation_tools"] and n % 3 == 0:
            mem["revalidation_tools"] = ["fetch", "calendar.availability"]
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
        assembly_id=f"asm-{conv}", model_run_id=mine["model_run_id"], conversation_id=conv,
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


def random_requests(rnd: random.Random, snap: Snapshot, first: Request, n: int) -> list[Request]:
    """``first`` and ``n - 1`` more requests of the same conversation: each of a random run
    (its participant, branch and runtime), at a random time, with its own budgets and
    exact evidence; ids ``<first>-1``, ``<first>-2``, ..."""
    runs = snap.tables["model_runs"]
    arts = [a["artifact_id"] for a in snap.tables["tool_artifacts"]]
    out = [first]
    for i in range(1, n):
        r = rnd.choice(runs)
        out.append(Request(
            assembly_id=f"{first.assembly_id}-{i}", model_run_id=r["model_run_id"], conversation_id=r["conversation_id"],
            branch_id=r["branch_id"], participant_id=r["participant_id"],
            runtime_kind=rnd.choice([r["runtime_kind"], "autonomous_discussion"]),
            provider=rnd.choice(["anthropic", "openai", "OpenAI"]), model="m",
            assembled_at=t(rnd.uniform(0, 240)), policy_version="p", assembler_version="p",
            token_budget=None, byte_budget=None,
            context_limit=rnd.choice([None, None, 0, 300, 800, 2000, 100000]),
            exact_evidence_ids=rnd.sample(arts, k=min(len(arts), rnd.randint(0, 3))), tags=[]))
    return out
