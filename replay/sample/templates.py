"""Template conversations for the scale sample: varied graphs, assembled by the oracle.

``build_template(number, seed)`` builds one conversation whose every id starts with the
placeholder ``PH`` (``@T@@@@@@@-msg-004``, ``@T@@@@@@@-conv``), so a replica is the template with
``PH`` replaced by a replica prefix: every id of a replica shares that prefix, so every
(kind, id) comparison the assembler makes comes out the same and the replica's assemblies
are the template's. Times are relative to ``BASE``; a replica shifts them by whole minutes.

What varies (drawn from the template's own seeded generator): the number of turns and of
requests, the policy version of each request, the provider, a forked branch, tool calls
that succeed, fail (and are retried), stay pending or deferred, raw artifacts of every
privacy and retention class, private artifacts of another model (some shared), memories
derived from artifacts with every freshness class and visibility, supersession (in both
link directions), conflicts, broken provenance, a subagent whose memories are promoted or
not, skill states, checkpoints, exact-evidence rehydration and small context windows.

``assemble_template`` runs the reference assembler on every request of a template and
returns the rows the recording holds (context_assemblies, assembly_records,
policy_decisions), exactly as the story sample records them.
"""

from __future__ import annotations

import datetime as dt
import json
import random
from typing import Any

from .graph import Graph

# as long as a replica's prefix (``s{r:08d}``, scale.py): a replica's texts are as long as
# its template's, so what counts their length (a reference's tokens) counts the same
PH = "@T@".ljust(9, "@")
BASE = dt.datetime(2026, 1, 5, 8, 0, 0, tzinfo=dt.timezone.utc)
VERSIONS = ("v1", "v2", "v3", "v4", "v5", "v6")
MODELS = {"anthropic": ("claude-sonnet-4-5", "claude-haiku-4-5"), "openai": ("gpt-4.1",)}
TOOLS = ("web.search", "drive.export_doc", "sheets.read_range", "calendar.freebusy",
         "crm.get_deal", "github.list_issues")
TOPICS = ("pricing", "launch date", "venue", "budget", "headcount", "roadmap", "vendor",
          "incident", "metrics", "hiring")
WORDS = ("the", "plan", "needs", "a", "review", "of", "numbers", "before", "we", "ship",
         "it", "to", "customers", "next", "week", "and", "after", "that", "retro")


class _TemplateGraph(Graph):
    """A Graph whose generated ids start with the placeholder."""

    def _new_id(self, prefix: str) -> str:
        n = self._counters.get(prefix, 0) + 1
        self._counters[prefix] = n
        return f"{PH}-{prefix}-{n:03d}"


def _stamp(seconds: float) -> str:
    return (BASE + dt.timedelta(seconds=int(seconds))).strftime("%Y-%m-%d %H:%M:%S")


def _text(rng: random.Random, lo: int, hi: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def build_template(number: int, seed: int, candidates: int | None = None) -> Graph:
    """Template ``number`` of ``seed`` (``candidates``: one big conversation of about that
    many candidate records and a single request at its end, for benchmarks)."""
    rng = random.Random(seed * 1_000_003 + number)
    g = _TemplateGraph(rng)
    conv = g.conversation(f"{PH}-conv", f"Synthetic conversation {number}", f"{PH}-owner",
                          _stamp(0))
    main = g.branch(f"{PH}-b-main", conv, "main", _stamp(0))
    provider = rng.choice(("anthropic", "anthropic", "openai"))
    model = rng.choice(MODELS[provider])
    user = g.participant(f"{PH}-p-user", conv, "User", "user")
    me = g.participant(f"{PH}-p-model", conv, "Assistant", "model", provider, model)
    runtime = rng.choice(("chat", "chat", "chat", "multi_model", "autonomous_discussion",
                          "scheduled_task", "branch_send", "parent_resume"))
    peer = None
    if runtime in ("multi_model", "autonomous_discussion") or rng.random() < 0.2:
        peer = g.participant(f"{PH}-p-peer", conv, "Reviewer", "model", "anthropic",
                             "claude-opus-4-1")
    sub = g.participant(f"{PH}-p-sub", conv, "Researcher", "subagent", "anthropic",
                        "claude-haiku-4-5") if rng.random() < 0.35 else None

    big = candidates is not None
    turns = max(4, int(candidates / 5.4)) if big else rng.randint(3, 12)
    fork_at = rng.randint(1, turns - 2) if (not big and rng.random() < 0.4) else None
    alt: str | None = None
    n_requests = 1 if big else rng.randint(2, 8)
    request_turns = {turns - 1} if big else set(rng.sample(range(1, turns), min(n_requests, turns - 1)))
    clock = 60.0
    last_branch_msg: dict[str, str] = {}
    memories: list[tuple[str, str, str]] = []  # (memory id, topic, branch)
    artifacts: list[str] = []
    calls: list[tuple[str, str]] = []  # (call id, arguments)
    for turn in range(turns):
        branch = main
        if fork_at is not None and turn == fork_at:
            alt = g.branch(f"{PH}-b-alt", conv, "alternative", _stamp(clock),
                           parent=main, fork=last_branch_msg[main])
        if alt is not None and rng.random() < 0.5:
            branch = alt
        speaker = peer if (peer is not None and rng.random() < 0.3) else me
        text = f"Turn {turn}: {_text(rng, 4, 60 if not big else 12)}"
        umsg = g.message(branch, "user", text, _stamp(clock), participant=user)
        last_branch_msg[branch] = umsg
        run_runtime = runtime if speaker == me else "multi_model"
        run = g.run(branch, speaker, _stamp(clock + 1), None, runtime=run_runtime, trigger=umsg)
        if turn in request_turns and rng.random() < 0.3:
            g.skill(run, _stamp(clock + 1), [rng.choice(("drive-picker", "sheets", "crm"))],
                    ["planner"], [rng.choice(TOOLS)])
        if turn in request_turns and rng.random() < 0.2:
            g.checkpoint(run, rng.choice(("continuation", "parent_resume")),
                         {"turn": turn, "step": rng.randint(1, 9)}, _stamp(clock + 1))
        t = clock + 3
        n_calls = (1 if rng.random() < 0.7 else 2) if big else rng.choice((0, 1, 1, 2))
        for _ in range(n_calls):
            tool = rng.choice(TOOLS)
            args = {"item": rng.randint(1, 40), "q": rng.choice(TOPICS)}
            roll = rng.random()
            if roll < 0.68:
                status, done = "succeeded", t + rng.randint(2, 40)
            elif roll < 0.8:
                status, done = "failed", t + rng.randint(2, 20)
            elif roll < 0.9:
                status, done = "pending", None
            else:
                status, done = "deferred", t + rng.randint(600, 20_000)
            call = g.call(run, tool, args, _stamp(t), _stamp(done) if done else None,
                          status=status, retryable=status == "failed" and rng.random() < 0.7)
            calls.append((call, json.dumps(args, sort_keys=True)))
            if status == "failed" and rng.random() < 0.5:
                # a retry of the same call that succeeds later
                retry = g.call(run, tool, args, _stamp(t + 60), _stamp(t + 90))
                g.artifact(retry, json.dumps({"ok": True, "item": args["item"]}), _stamp(t + 90),
                           vis=rng.choice(("participant_private", "branch")))
            privacy = rng.choices(("internal", "public", "user_private", "google_derived",
                                   "oauth_derived", "secret_adjacent"),
                                  (50, 10, 10, 15, 8, 7))[0]
            retention = rng.choices(("keep", "archive", "hash_only", "delete"), (75, 10, 8, 7))[0]
            vis = rng.choices(("participant_private", "branch", "conversation", "audit_only"),
                              (45, 35, 15, 5))[0]
            shared = (me,) if (speaker != me and rng.random() < 0.4) else ()
            at = (done if done is not None else t + 1)
            art_status = None if status != "pending" else "pending"
            body = json.dumps({"tool": tool, "result": _text(rng, 3, 12)})
            art = g.artifact(call, body, _stamp(at), status=art_status, privacy=privacy,
                             retention=retention, vis=vis, shared_with=shared,
                             pad_tokens=rng.choice((0, 0, 20, 120, 400)) if not big else 0,
                             error="HTTP 503" if status == "failed" else None)
            artifacts.append(art)
            if status == "succeeded" and rng.random() < 0.65:
                topic = rng.choice(TOPICS)
                older = [m for m in memories if m[1] == topic]
                supersedes: tuple[str, ...] = ()
                conflicts: tuple[str, ...] = ()
                if older and rng.random() < 0.5:
                    supersedes = (older[-1][0],)
                elif older and rng.random() < 0.4:
                    conflicts = (older[-1][0],)
                sources = [art]
                if rng.random() < 0.06:
                    sources.append(f"{PH}-art-missing-{len(artifacts)}")
                mem_vis = rng.choices(("branch", "conversation", "participant_private",
                                       "audit_only"), (55, 25, 15, 5))[0]
                observed_back = rng.choice((0, 0, 3600, 5 * 3600, 30 * 3600, 100 * 3600, 400 * 3600))
                mem = g.memory(
                    branch, sources, f"{topic}: {_text(rng, 5, 25)}", _stamp(at + 1),
                    observed=_stamp(at + 1 - observed_back),
                    freshness=rng.choice(("volatile", "session", "bounded", "durable", "permanent")),
                    privacy=privacy if rng.random() < 0.7 else "internal",
                    confidence=round(rng.uniform(0.4, 0.99), 2), vis=mem_vis,
                    owner_run=run if mem_vis == "participant_private" else None,
                    revalidation=(tool,) if rng.random() < 0.7 else (),
                    supersedes=supersedes, conflicts=conflicts,
                    promotion=rng.choice(("auto", "explicit", "never")),
                    promoted=rng.random() < 0.5)
                memories.append((mem, topic, branch))
            t = at + 2
        if sub is not None and speaker == me and rng.random() < 0.4:
            child = g.run(branch, sub, _stamp(t), _stamp(t + 120), runtime="subagent_child",
                          parent_run=run, batch=f"{PH}-batch-{turn}")
            c_call = g.call(child, rng.choice(TOOLS), {"item": turn}, _stamp(t + 5), _stamp(t + 30))
            c_art = g.artifact(c_call, json.dumps({"found": _text(rng, 3, 8)}), _stamp(t + 30),
                               vis=rng.choice(("participant_private", "branch")))
            c_mem = g.memory(branch, [c_art], f"subagent finding: {_text(rng, 4, 12)}",
                             _stamp(t + 31), owner_run=child,
                             vis=rng.choice(("participant_private", "branch")),
                             promotion=rng.choice(("auto", "explicit", "never")),
                             promoted=rng.random() < 0.6)
            memories.append((c_mem, "subagent", branch))
            t += 130
        if turn in request_turns:
            policy = rng.choice(VERSIONS)
            exact: tuple[str, ...] = ()
            if artifacts and rng.random() < 0.3:
                exact = tuple(sorted(set(rng.sample(artifacts, min(len(artifacts), rng.randint(1, 2))))))
            limit = rng.choice((None, None, None, None, 2500, 1200)) if not big else 10_000_000
            tags = ("synthetic",) if branch == main else ("synthetic", "synthetic:branch")
            # the request is assembled while the tools run: some calls are still open
            g.request(run, _stamp(clock + 2 + rng.choice((0, 0, 15, 60))), policy,
                      tags=tags, exact=exact, context_limit=limit)
        reply = _text(rng, 5, 90 if not big else 12)
        amsg = g.message(branch, "assistant", reply, _stamp(t + 1), participant=speaker, run=run,
                         speaker="Reviewer" if speaker == peer else None)
        g.get("model_runs", run)["ended_at"] = (BASE + dt.timedelta(seconds=int(t + 1)))
        last_branch_msg[branch] = amsg
        clock = t + rng.choice((30, 300, 900, 3600, 4 * 3600, 12 * 3600)) if not big else t + 30
    return g


def assemble_template(g: Graph) -> list[dict[str, Any]]:
    """Every request of ``g`` assembled by the reference assembler under its own policy
    version, in assembly id order: per request its context_assemblies row (``row``), its
    records in (kind, id) order (``records``) and its decisions (``decisions``)."""
    from ..assembler import ReferenceAssembler
    from ..policy import PolicyRegistry
    from ..sample_export import ASSEMBLER_VERSION, recorded_request
    from ..snapshot import Snapshot
    from .policies import POLICY_TOML

    registry = PolicyRegistry.from_texts(POLICY_TOML)
    snapshot = Snapshot(g.tables)
    oracle = ReferenceAssembler()
    runs = {r["model_run_id"]: r for r in g.tables["model_runs"]}
    out: list[dict[str, Any]] = []
    for req in sorted(g.requests, key=lambda r: r.assembly_id):
        policy = registry.get(req.policy_version)
        run = runs[req.model_run_id]
        request = recorded_request(req, run, policy, ASSEMBLER_VERSION)
        result = oracle.assemble(snapshot, request, policy)
        records = sorted(result.records, key=lambda r: (r["record_kind"], r["record_id"]))
        row = {
            "assembly_id": req.assembly_id, "model_run_id": req.model_run_id,
            "conversation_id": request.conversation_id, "branch_id": request.branch_id,
            "participant_id": request.participant_id, "runtime_kind": request.runtime_kind,
            "provider": request.provider, "model": request.model,
            "policy_version": req.policy_version, "assembler_version": ASSEMBLER_VERSION,
            "assembled_at": req.assembled_at,
            "token_budget": request.token_budget, "byte_budget": request.byte_budget,
            "context_limit": request.context_limit,
            "exact_evidence_ids": list(req.exact_evidence_ids),
            "baseline_tokens": result.baseline_tokens,
            "baseline_message_count": result.baseline_message_count,
            "graph_query_ms": round(g.rng.uniform(1.5, 9.0), 2),
            "policy_eval_ms": round(g.rng.uniform(0.4, 3.0), 2),
            "serialization_ms": round(g.rng.uniform(0.2, 1.5), 2),
            "payload_sha256": None,
            "tags": list(req.tags),
        }
        row.update(selection_columns(records))
        out.append({"row": row, "records": records, "decisions": list(result.decisions)})
    return out


def selection_columns(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The columns of a context_assemblies row that follow from its records."""
    from ingest.contract import selection_hash

    from ..verify import stored_totals  # what verify holds the stored totals to

    return {**stored_totals(records), "selection_hash": selection_hash(records)}


def drifted(assembled: dict[str, Any]) -> dict[str, Any]:
    """The same request as a drifted build would have recorded it: the last record of the
    prompt dropped as over budget (or, with nothing in the prompt, an omitted record given
    another reason). The row's hash, tokens and counts are those of the altered records, so
    the recording is consistent with itself and differs from the replay."""
    records = [dict(r) for r in assembled["records"]]
    decisions = [dict(d) for d in assembled["decisions"]]
    inc = [r for r in records if r["decision"] == "included"]
    if inc:
        victim = max(inc, key=lambda r: r["position"])
        detail = f"over budget by {int(victim['tokens'])} tokens"
        victim.update(decision="omitted", rendering=None, position=None, policy_family="budget",
                      reason_code="over_budget", detail=detail)
        outcome = "deny"
    else:
        victim = records[-1]
        reason = "outside_window" if victim["reason_code"] != "outside_window" else "over_budget"
        family = "window" if reason == "outside_window" else "budget"
        detail = "older than the last 6 messages" if reason == "outside_window" else "over budget"
        victim.update(policy_family=family, reason_code=reason, detail=detail)
        outcome = "deny"
    aid = assembled["row"]["assembly_id"]
    last = decisions[-1]["decision_id"] if decisions else f"{aid}/d000"
    width = len(last) - len(aid) - 2
    decisions.append({
        "decision_id": f"{aid}/d{str(len(decisions) + 1).zfill(width)}", "assembly_id": aid,
        "step": 11 if victim["policy_family"] == "budget" else 10,
        "record_kind": victim["record_kind"], "record_id": victim["record_id"],
        "policy_family": victim["policy_family"], "outcome": outcome,
        "reason_code": victim["reason_code"], "detail": victim["detail"]})
    row = dict(assembled["row"])
    row.update(selection_columns(records))
    return {"row": row, "records": records, "decisions": decisions}
