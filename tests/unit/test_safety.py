"""replay.safety: the one safety function, on the sample's recorded rows (where it must agree
with the lint's SQL invariants), on tampered rows (each finding trips), and on replays."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.engine import TestRegistry, requests_table
from support.graphs import policies, random_graph, random_requests

from ingest.store import Store
from replay.lint import SAFETY_RULES, lint
from replay.policy import load_registry
from replay.columnar import graphs_from_snapshots
from replay.safety import FINDINGS, LINT_RULES, SafetyContext, graph_findings
from replay.service import recorded_records
from replay.snapshot import Snapshot, load_snapshot, request_from_row


@pytest.fixture(scope="module")
def recorded(sample_db: Path) -> list[tuple[dict[str, Any], SafetyContext, list[dict[str, Any]]]]:
    """(request row, its SafetyContext, its recorded rows) of every recorded assembly."""
    registry = load_registry(None)
    out = []
    snapshots: dict[tuple[str, str], Snapshot] = {}
    with Store.open(sample_db) as store:
        for row in store.assembly_requests().to_pylist():
            key = (row["export_id"], row["conversation_id"])
            if key not in snapshots:
                snapshots[key] = load_snapshot(store, row["conversation_id"], row["export_id"])
            ctx = SafetyContext(snapshots[key], request_from_row(row), registry)
            out.append((row, ctx, recorded_records(store, row["assembly_id"], row["export_id"])))
    return out


def test_lint_names_every_finding() -> None:
    assert set(LINT_RULES) == set(FINDINGS)
    assert set(LINT_RULES.values()) == set(SAFETY_RULES)


def test_function_agrees_with_lint_on_every_recorded_assembly(sample_db: Path, recorded) -> None:
    with Store.open(sample_db) as store:
        linted: dict[str, set[tuple[str, str, str]]] = {}
        for f in lint(store):
            if f.rule in SAFETY_RULES:
                linted.setdefault(f.assembly_id or "", set()).add((f.rule, f.record_kind, f.record_id))
    assert linted, "the sample has safety findings (the drift story, the v5 incident)"
    for row, ctx, rows in recorded:
        mine = {(LINT_RULES[f["finding"]], f["record_kind"], f["record_id"]) for f in ctx.findings(rows)}
        assert mine == linted.get(row["assembly_id"], set()), row["assembly_id"]


def test_v5_incident_calendar_memory_is_stale_as_current(recorded) -> None:
    incident = [(row, ctx, rows) for row, ctx, rows in recorded
                if "scenario:incident_calendar_freshness" in row["tags"]]
    assert incident
    for row, ctx, rows in incident:
        found = {(f["record_id"], f["finding"]) for f in ctx.findings(rows)}
        shown = next(r for r in rows if r["record_id"] == "mem-020")
        if shown["decision"] == "included" and shown["rendering"] == "compact_memory":
            assert ("mem-020", "stale_as_current") in found, row["assembly_id"]
        else:  # v4 and v6 show it as a stale marker: safe
            assert ("mem-020", "stale_as_current") not in found, row["assembly_id"]


# an omitted record flipped to included (with this rendering) -> the finding it must raise
_TAMPER = {
    "sibling_branch": ("verbatim", "sibling_branch"),
    "participant_private": ("verbatim", "foreign_private"),
    "owner_unknown": ("verbatim", "foreign_private"),
    "audit_only": ("verbatim", "audit_only"),
    "privacy_restricted": ("verbatim", "restricted_raw"),
    "provider_restricted": ("compact_memory", "restricted_raw"),
    "superseded": ("compact_memory", "superseded"),
    "stale": ("compact_memory", "stale_as_current"),
}


def test_tampered_rows_trip_each_finding(recorded) -> None:
    """Omitted records of the faithful recordings turned into included ones: each is named
    with the finding its omission reason guarded against; the untouched records add none."""
    seen: set[str] = set()
    for row, ctx, rows in recorded:
        if "scenario:drift_supersession" in row["tags"]:
            continue  # the drift build's omissions are wrong to begin with
        for i, r in enumerate(rows):
            reason = r["reason_code"]
            if r["decision"] != "omitted" or reason not in _TAMPER:
                continue
            if reason == "superseded" and "may not see" in (r["detail"] or ""):
                continue  # its replacement is hidden from this request: not superseded for it
            rendering, finding = _TAMPER[reason]
            tampered = [dict(x) for x in rows]
            tampered[i].update(decision="included", rendering=rendering)
            before = {(f["record_id"], f["finding"]) for f in ctx.findings(rows)}
            after = {(f["record_id"], f["finding"]) for f in ctx.findings(tampered)}
            assert (r["record_id"], finding) in after, (row["assembly_id"], r["record_id"], reason)
            assert {x for x in after - before if x[0] != r["record_id"]} == set()
            seen.add(finding)
    assert seen >= {"sibling_branch", "foreign_private", "audit_only", "restricted_raw", "superseded"}


def test_only_records_in_the_prompt_are_findings(recorded) -> None:
    for _row, ctx, rows in recorded:
        omitted = [r for r in rows if r["decision"] != "included"]
        assert ctx.findings(omitted) == []


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), pols=st.lists(policies, min_size=1, max_size=3),
       n=st.integers(1, 8))
def test_sql_findings_of_a_chunk_equal_the_function_on_random_graphs(
        seed: int, pols: list, n: int) -> None:
    """Compare judges whole chunks with the SQL form of the rules (graph_findings): on
    random graphs (forks, subagents, private and audit-only records, supersession, stale
    memories, restricted classes), with every record in or out of each request at random
    and rendered at random, it must find exactly what the function finds, in the same words
    (``replay.findings_text``, whichever facts it words: the SQL's or the function's)."""
    rnd = random.Random(seed)
    snap, first, _ = random_graph(rnd, "c")
    reqs = random_requests(rnd, snap, first, n)
    for i, r in enumerate(reqs):
        r.policy_version = f"p{i % len(pols)}"
    registry = TestRegistry({f"p{i}": p for i, p in enumerate(pols)})
    ids = [(kind, row[key]) for table, kind, key in (
        ("messages", "message", "message_id"), ("tool_calls", "tool_call", "tool_call_id"),
        ("tool_artifacts", "tool_artifact", "artifact_id"),
        ("tool_memories", "tool_memory", "memory_id")) for row in snap.tables[table]]
    # two sides, as compare judges them: each request's records drawn twice
    sides: list[list[dict]] = [[], []]
    wants: list[dict] = [{}, {}]
    for req in reqs:
        for rows, want in zip(sides, wants):
            mine = [{"assembly_id": req.assembly_id, "record_kind": kind, "record_id": rid,
                     "decision": rnd.choice(["included", "included", "omitted"]),
                     "rendering": rnd.choice(RENDERINGS)} for kind, rid in ids]
            rows += mine
            want |= {(req.assembly_id, f["record_kind"], f["record_id"], f["finding"]): f["detail"]
                     for f in SafetyContext(snap, req, registry).findings(mine)}
    requests = requests_table(reqs)
    requests = requests.append_column("export_id", pa.array(["exp"] * len(reqs), pa.string()))
    found = graph_findings(duckdb.connect(), graphs_from_snapshots({"c": snap}), "exp",
                           requests, [pa.Table.from_pylist(rows) for rows in sides], registry)
    for side, want in zip(found, wants):
        got = {(f["assembly_id"], f["record_kind"], f["record_id"], f["finding"]): f["detail"]
               for f in side.to_pylist()}
        differ = sorted(set(got.items()) ^ set(want.items()))
        assert got == want, f"seed {seed}: SQL and function differ on {differ[:4]}"


RENDERINGS = ["verbatim", "rehydrated_raw", "compact_memory", "summary", "reference", None]
