"""A why-sentence's policy key is a true counterfactual: for every record of the sample under
every policy v1-v6 whose sentence says "Decided by policy key X", a generated policy that
changes X in the direction that would flip the record does flip it (its decision or its
rendering changes on replay). Observed runtimes name no key."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.engine import REGISTRY
from support.engine import policy as changed_policy

from ingest.store import Store
from replay.assembler import get_assembler
from replay.explain import deciding_key, explain, policy_key
from replay.policy import flatten, load_registry
from replay.snapshot import load_snapshots, request_from_row

VERSIONS = ("v1", "v2", "v3", "v4", "v5", "v6")
HUGE = 10**9


def flipped_value(version: str, key: str, rec: dict[str, Any], record: dict[str, Any]) -> Any:
    """The value of ``key`` that would flip ``rec``: the direction is decided per key."""
    now = flatten(REGISTRY.settings(version))[key]
    included = rec["decision"] == "included"
    if isinstance(now, bool):
        return not now
    if key == "window.max_messages":
        return 0 if included else HUGE
    if key in ("budget.token_budget", "rehydration.byte_budget"):
        return HUGE
    if key.startswith("freshness.") and key not in ("freshness.broken_provenance", "freshness.stale_action"):
        # a current memory goes stale at once; a stale one never goes stale
        return 0 if rec["rendering"] == "compact_memory" else None
    if key == "freshness.broken_provenance":
        return "omit" if now == "mark" else "mark"
    if key == "contradiction.supersession":
        return "keep_both" if now == "omit_obsolete" else "omit_obsolete"
    if key == "ownership.child_promotion":
        return "never" if included else "auto"
    if key == "rehydration.trigger":
        return "never" if now == "exact_evidence" else "exact_evidence"
    if key in ("privacy.raw_blocked_classes",) or key.endswith(".blocked_classes"):
        return [c for c in now if c != record.get("privacy_class")]
    if key == "retention.removed_classes":
        return [c for c in now if c != record.get("retention_class")]
    if key == "recovery.protected_states":
        return []
    raise AssertionError(f"no flip rule for policy key {key}")


@pytest.fixture(scope="module")
def sample(sample_db: Path) -> list[tuple[dict[str, Any], Any]]:
    """(request row, its conversation's snapshot) of every recorded assembly."""
    with Store.open(sample_db) as store:
        rows = store.assembly_requests().to_pylist()
        by_export: dict[str, set[str]] = {}
        for row in rows:
            by_export.setdefault(row["export_id"], set()).add(row["conversation_id"])
        snaps = {}
        for export_id, convs in by_export.items():
            for cid, snap in load_snapshots(store, sorted(convs), export_id).items():
                snaps[(export_id, cid)] = snap
    return [(row, snaps[(row["export_id"], row["conversation_id"])]) for row in rows]


def _graph_row(snapshot: Any, kind: str, rid: str) -> dict[str, Any]:
    table, key = {"message": ("messages", "message_id"), "tool_call": ("tool_calls", "tool_call_id"),
                  "tool_artifact": ("tool_artifacts", "artifact_id"),
                  "tool_memory": ("tool_memories", "memory_id"),
                  "skill_state": ("skill_states", "skill_state_id"),
                  "checkpoint": ("checkpoints", "checkpoint_id")}[kind]
    return next((r for r in snapshot.tables[table] if r[key] == rid), {})


def test_every_named_key_flips_its_record(sample) -> None:
    registry = load_registry(None)
    plugin = get_assembler("reference")
    failures: list[str] = []
    checked = 0
    named = 0
    for version in VERSIONS:
        policy = registry.get(version)
        for row, snapshot in sample:
            request = request_from_row(row)
            base = plugin.assemble(snapshot, request, policy)
            context = {**row, "policy_version": version}
            replays: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = {}
            for rec in base.records:
                record = _graph_row(snapshot, rec["record_kind"], rec["record_id"])
                key = deciding_key(snapshot, request, policy, rec, record, plugin)
                sentence = explain(context, rec, record, [], [], base.records, key=key)
                named += key is not None
                if key is None:
                    assert "Decided by policy key" not in sentence, sentence
                    continue
                assert f"Decided by policy key {key}." in sentence, sentence
                value = flipped_value(version, key, rec, record)
                memo = (key, repr(value))
                if memo not in replays:
                    changed = plugin.assemble(snapshot, request,
                                              changed_policy(version, **{key: value}))
                    replays[memo] = {(r["record_kind"], r["record_id"]): r for r in changed.records}
                after = replays[memo].get((rec["record_kind"], rec["record_id"]))
                checked += 1
                if after is None or (after["decision"], after["rendering"]) == (rec["decision"], rec["rendering"]):
                    failures.append(f"{version} {row['assembly_id']} {rec['record_kind']} {rec['record_id']} "
                                    f"{rec['reason_code']}: {key} -> {value!r} does not flip it")
    assert named == checked and checked > 1000
    assert not failures, f"{len(failures)} false counterfactuals:\n" + "\n".join(failures)


def test_observed_runtime_names_no_key() -> None:
    assembly = {"policy_version": "observed", "provider": "anthropic", "branch_id": "b",
                "assembler_version": "claude-code-adapter/1"}
    sent = {"record_kind": "message", "record_id": "m1", "decision": "included",
            "rendering": "verbatim", "reason_code": "in_window", "policy_family": "window",
            "detail": "sent in the recorded request"}
    sentence = explain(assembly, sent, {"branch_id": "b"}, [], [])
    # the runtime's own rule, not an invented policy reason
    assert "Claude Code sends the whole history since the last compaction" in sentence
    assert "No policy to explain" in sentence and "window" not in sentence
    assert "policy key" not in sentence and policy_key(assembly, sent, {}) is None
    left = {**sent, "decision": "omitted", "rendering": None, "reason_code": "compacted",
            "detail": "dropped by compaction #1 at 2025-06-01T12:01:00+00:00 (trigger auto, preTokens 5000)"}
    sentence = explain(assembly, left, {}, [], [])
    assert "compacted the conversation" in sentence and "preTokens 5000" in sentence
    assert "No policy to explain" in sentence and policy_key(assembly, left, {}) is None
    cleared = {**sent, "rendering": "cleared", "reason_code": "elided",
               "detail": "cleared by microcompaction #1 (tokensSaved 1234 recorded, 1100 estimated)"}
    sentence = explain(assembly, cleared, {}, [], [])
    assert "placeholder" in sentence and "tokensSaved 1234 recorded" in sentence
    assert "policy key" not in sentence
