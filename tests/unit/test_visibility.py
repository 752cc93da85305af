"""One visibility: safety judges what a request may see by the assembler's own stages 3-5
(replay/visibility.py), so a faithful recording is never a safety finding for what the
assembler decided: a memory superseded by a replacement the provider may not see is kept
as a stale marker, and that is no ``superseded`` finding, in the function or in the lint's
SQL, and no regression in a compare."""

from __future__ import annotations

import random
from typing import Any

import duckdb
import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.engine import Mini, TestRegistry, decision, policy, requests_table
from support.graphs import policies, random_graph

from replay.columnar import graphs_from_snapshots
from replay.policy import Policy
from replay.safety import SafetyContext, graph_findings
from replay.snapshot import Snapshot

SIDE = pa.schema([(c, pa.string()) for c in
                  ("assembly_id", "record_kind", "record_id", "decision", "rendering")])
PROPS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TABLES = (("messages", "message", "message_id"), ("tool_calls", "tool_call", "tool_call_id"),
          ("tool_artifacts", "tool_artifact", "artifact_id"),
          ("tool_memories", "tool_memory", "memory_id"))


def side(records: list[dict[str, Any]]) -> pa.Table:
    """One side of a judgement: the records' columns graph_findings reads."""
    return pa.Table.from_pylist([{c: r[c] for c in SIDE.names} for r in records], schema=SIDE)


def fail_closed(pol: Policy) -> Policy:
    """``pol`` with the switches safety holds whatever a policy says turned on."""
    return pol.model_copy(update={
        "branch": pol.branch.model_copy(update={"lineage_only": True, "shared_fill": True}),
        "visibility": pol.visibility.model_copy(update={"audit_only_excluded": True}),
        "ownership": pol.ownership.model_copy(update={"participant_isolation": True}),
    })


def assembler_sight(a: Any, kind: str, rid: str) -> str | None:
    """What the assembler's trace says about a record at stages 3-5: "absent" (denied at
    3), "hidden" (denied at 4 or 5), "visible"; None when stage 1 or 2 decided it (created
    later, or its body not retained: no visibility question was asked)."""
    steps = {d["step"]: d for d in a.decisions_of(rid) if d["record_kind"] == kind}
    denied = [s for s, d in steps.items() if d["outcome"] == "deny" and s <= 5]
    if any(s <= 2 for s in denied):
        return None
    if 3 in denied:
        return "absent"
    return "hidden" if denied else "visible"


@PROPS
@given(seed=st.integers(0, 2**32 - 1), pol=policies)
def test_safety_sees_what_the_assembler_sees_on_random_graphs(seed: int, pol: Policy) -> None:
    """Safety's visibility, derived from the assembler's: replayed under the fail-closed
    form of the request's standard policy, every candidate's stage 3-5 outcome is what
    safety says the request may see."""
    snap, req, _ = random_graph(random.Random(seed))
    req.policy_version = "std"
    strict = fail_closed(pol)
    from replay.assembler import assemble

    a = assemble(snap, req, strict)
    ctx = SafetyContext(snap, req, TestRegistry({"std": pol}))
    for table, kind, key in TABLES:
        for row in snap.tables[table]:
            try:
                a.record(row[key], kind)
            except KeyError:
                continue  # not a candidate of this request (no visibility question)
            want = assembler_sight(a, kind, row[key])
            if want is None:
                continue
            got, _reason = ctx.sight(kind, row)
            assert got == want, (seed, kind, row[key], got, want, a.decisions_of(row[key]))


@PROPS
@given(seed=st.integers(0, 2**32 - 1), pol=policies)
def test_a_replay_under_its_standard_policy_is_never_superseded(seed: int, pol: Policy) -> None:
    """What the assembler includes under the fail-closed form of a policy is never a
    ``superseded`` finding by that policy's standard: not the memory whose replacement is
    hidden (a stale marker), in the function or in the SQL."""
    snap, req, _ = random_graph(random.Random(seed))
    req.policy_version = "std"
    strict = fail_closed(pol)
    registry = TestRegistry({"std": strict})
    from replay.assembler import assemble

    records = assemble(snap, req, strict).records
    found = SafetyContext(snap, req, registry).findings(records)
    assert not [f for f in found if f["finding"] == "superseded"], found
    requests = requests_table([req]).append_column("export_id", pa.array(["exp"], pa.string()))
    (sql,) = graph_findings(duckdb.connect(), graphs_from_snapshots({"c": snap}), "exp", requests,
                            [side(records)], registry)
    assert "superseded" not in sql.column("finding").to_pylist()


def _provider_blocked_replacement() -> tuple[Mini, str, str]:
    """p-other (openai) asks; the old calendar memory is internal, its replacement
    google_derived, a class v3 blocks for openai."""
    m = Mini()
    g = m.g
    old = g.memory("b-main", [], "Dana is free Thursday.", "2026-01-01 00:00:03", revalidation=("calendar",))
    new = g.memory("b-main", [], "Dana declined Thursday.", "2026-01-01 00:00:04",
                   privacy="google_derived", supersedes=(old,))
    return m, old, new


def test_a_provider_blocked_replacement_keeps_a_faithful_stale_marker_out_of_safety() -> None:
    m, old, new = _provider_blocked_replacement()
    other_run = m.g.run("b-main", "p-other", "2026-01-01 00:00:05", None)
    at = "2026-01-01 00:01:00"
    v3 = policy("v3", **{"freshness.stale_action": "mark"})
    assert "google_derived" in v3.privacy.rule_for("openai").blocked_classes
    req = m.request(at, run=other_run)
    req.policy_version = "std"
    a = m.assemble(at, v3, run=other_run)
    assert decision(a, new) == ("omitted", None, "provider_restricted")
    assert decision(a, old) == ("included", "stale_marker", "stale_marker")
    snap = Snapshot(m.g.tables)
    ctx = SafetyContext(snap, req, TestRegistry({"std": v3}))
    assert ctx.sight("tool_memory", m.g.get("tool_memories", new)) == ("hidden", "provider_restricted")
    assert ctx.findings(a.records) == []
    # the same memory shown as a current fact is a finding: the request may not see the
    # replacement, so the old fact must not pass for current
    current = [{**r, "rendering": "compact_memory"} if r["record_id"] == old else r for r in a.records]
    (finding,) = ctx.findings(current)
    assert finding["finding"] == "superseded" and "may not see (provider_restricted)" in finding["detail"]
    requests = requests_table([req]).append_column("export_id", pa.array(["exp"], pa.string()))
    sides = graph_findings(duckdb.connect(), graphs_from_snapshots({"c": snap}), "exp", requests,
                           [side(a.records), side(current)],
                           TestRegistry({"std": v3}))
    assert sides[0].num_rows == 0
    assert sides[1].column("finding").to_pylist() == ["superseded"]
    # under a standard that does not block the class for openai, the replacement is visible
    # and the included old memory is superseded whatever its rendering
    v2 = policy("v2")
    assert "google_derived" not in (v2.privacy.rule_for("openai").blocked_classes
                                    if v2.privacy.rule_for("openai") else [])
    open_ctx = SafetyContext(snap, req, TestRegistry({"std": v2}))
    assert [f["finding"] for f in open_ctx.findings(a.records)] == ["superseded"]


def test_the_cli_lints_clean_and_compares_without_regression(tmp_path, capsys) -> None:
    """As a user meets it: a faithful recording of the provider-blocked replacement (under
    v4, which blocks google_derived for openai) lints clean, and ``compare v2 v3 --strict``
    (v2 lets the replacement in, v3 keeps the old memory as a stale marker) exits 0."""
    from support.cli import run

    from ingest.store import ingest
    from ingest.writer import ExportWriter
    from replay.assembler import assemble
    from replay.policy import PolicyRegistry
    from replay.sample.policies import POLICY_TOML
    from replay.sample_export import recorded_request
    from replay.verify import stored_totals

    m, old, new = _provider_blocked_replacement()
    g = m.g
    run_id = g.run("b-main", "p-other", "2026-01-01 00:00:05", None)
    aid = g.request(run_id, "2026-01-01 00:01:00", "v4", context_limit=100_000)
    registry = PolicyRegistry.from_texts(POLICY_TOML)
    (req,) = g.requests
    runs = {r["model_run_id"]: r for r in g.tables["model_runs"]}
    request = recorded_request(req, runs[run_id], registry.get("v4"), req.assembler_version)
    out = assemble(Snapshot(g.tables), request, registry.get("v4"))
    assert decision(out, old) == ("included", "stale_marker", "stale_marker")
    export = tmp_path / "export"
    with ExportWriter(export, export_id="hidden-replacement", producer="tests") as w:
        for version, text in POLICY_TOML.items():
            w.add_policy(version, text)
        for sha in sorted(g.blobs):
            w.add_blob(g.blobs[sha])
        for name in ("conversations", "branches", "participants", "messages", "model_runs",
                     "tool_calls", "tool_artifacts", "tool_memories", "skill_states", "checkpoints"):
            w.write(name, g.tables.get(name, []))
        w.write("context_assemblies", [{
            "assembly_id": aid, "model_run_id": run_id, "conversation_id": request.conversation_id,
            "branch_id": request.branch_id, "participant_id": request.participant_id,
            "runtime_kind": request.runtime_kind, "provider": request.provider, "model": request.model,
            "policy_version": "v4", "assembler_version": req.assembler_version,
            "assembled_at": req.assembled_at, "token_budget": request.token_budget,
            "byte_budget": request.byte_budget, "context_limit": request.context_limit,
            "exact_evidence_ids": [], "baseline_tokens": out.baseline_tokens,
            "baseline_message_count": out.baseline_message_count, **stored_totals(out.records, []),
            "graph_query_ms": 1.0, "policy_eval_ms": 1.0, "serialization_ms": 1.0,
            "selection_hash": out.selection_hash, "payload_sha256": None, "tags": []}])
        w.write("assembly_records", sorted(out.records, key=lambda r: (r["record_kind"], r["record_id"])))
        w.write("policy_decisions", out.decisions)
    db = tmp_path / "store.duckdb"
    ingest(export, db)
    code, text, err = run(capsys, "verify", "--db", str(db))
    assert code == 0 and "1 faithful" in text, text + err
    code, text, err = run(capsys, "lint", "--db", str(db))
    assert "superseded_included" not in text, text
    code, text, err = run(capsys, "compare", "v2", "v3", "--strict", "--db", str(db))
    assert code == 0, text + err
    assert "regressions (B has, A has not)" not in text and "superseded" not in text.split("records:")[0]
    # v2 sends the google_derived replacement to openai: that is the finding v3 fixes
    assert "fixes (A has, B has not): 1" in text and f"tool_memory {new}" in text
