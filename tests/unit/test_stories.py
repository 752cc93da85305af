"""Every story of the sample, replayed from the store by the reference assembler.

Each test loads the recorded request and the conversation snapshot from a store built from
the committed sample, assembles it (under its recorded policy unless the story is about a
policy change) and asserts the decisions the story is about.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Iterator

import pytest
from support.engine import policy

from ingest.store import Store
from replay.assembler import Assembly, assemble
from replay.policy import Policy, load_registry
from replay.snapshot import Snapshot, load_request, load_snapshot

REG = load_registry(None)


@pytest.fixture(scope="module")
def store(sample_db: Path) -> Iterator[Store]:
    with Store.open(sample_db) as s:
        yield s


class Replayer:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._snaps: dict[str, Snapshot] = {}

    def ids(self, scenario: str) -> list[str]:
        return self.store.list_assemblies(flt=f"scenario:{scenario}").column("assembly_id").to_pylist()

    def snapshot(self, conversation_id: str) -> Snapshot:
        if conversation_id not in self._snaps:
            self._snaps[conversation_id] = load_snapshot(self.store, conversation_id)
        return self._snaps[conversation_id]

    def run(self, assembly_id: str, version: str | Policy | None = None,
            **request_changes: Any) -> Assembly:
        req = load_request(self.store, assembly_id)
        if request_changes:
            req = dataclasses.replace(req, **request_changes)
        pol = version if isinstance(version, Policy) else REG.get(version or req.policy_version)
        return assemble(self.snapshot(req.conversation_id), req, pol)

    def rows(self, table: str, conversation_id: str) -> list[dict]:
        return self.snapshot(conversation_id).tables[table]


@pytest.fixture(scope="module")
def rp(store: Store) -> Replayer:
    return Replayer(store)


def d(a: Assembly, rid: str) -> tuple[str, str | None, str]:
    r = a.record(rid)
    return r["decision"], r["rendering"], r["reason_code"]


def by_reason(a: Assembly, reason: str, kind: str | None = None) -> list[dict]:
    return [r for r in a.records if r["reason_code"] == reason and kind in (None, r["record_kind"])]


def test_branch_isolation_sibling_records_never_leak(rp: Replayer) -> None:
    alt_id, main_id = rp.ids("branch_isolation")
    on_alt, on_main = rp.run(alt_id), rp.run(main_id)
    msgs = {m["message_id"]: m for m in rp.rows("messages", "c-launch")}
    mems = {m["memory_id"]: m for m in rp.rows("tool_memories", "c-launch")}
    # on main, nothing of b-alt
    for r in on_main.records:
        row = msgs.get(r["record_id"]) or mems.get(r["record_id"])
        if row is not None and row["branch_id"] == "b-alt":
            assert d(on_main, r["record_id"]) == ("omitted", None, "sibling_branch")
    alt_mem = next(m["memory_id"] for m in mems.values() if m["branch_id"] == "b-alt")
    assert d(on_main, alt_mem)[2] == "sibling_branch"
    # on b-alt, main's records after the fork are out, before it are inherited
    fork = next(b for b in rp.rows("branches", "c-launch") if b["branch_id"] == "b-alt")["fork_message_id"]
    for r in on_alt.included():
        if r["record_kind"] == "message" and msgs[r["record_id"]]["branch_id"] == "b-main":
            assert msgs[r["record_id"]]["created_at"] <= msgs[fork]["created_at"]
            assert r["reason_code"] in ("lineage", "in_window")
    assert by_reason(on_alt, "sibling_branch")
    # branch send: the new branch inherits the lineage only
    (send,) = rp.ids("branch_send")
    assert by_reason(rp.run(send), "sibling_branch")


def test_participant_visibility_private_scratch_never_reaches_another_participant(rp: Replayer) -> None:
    mems = rp.rows("tool_memories", "c-launch")
    scratch = next(m for m in mems if m["summary"].startswith("Scratch: Vendor B"))
    private_msg = next(m for m in rp.rows("messages", "c-launch") if m["content"].startswith("(private note)"))
    for aid in rp.ids("participant_visibility"):
        a = rp.run(aid)
        assert d(a, scratch["memory_id"]) == ("omitted", None, "participant_private")
        assert d(a, private_msg["message_id"]) == ("omitted", None, "participant_private")
        assert a.record(scratch["memory_id"])["detail"] == "private to launch-claude"
    # autonomous discussion: each speaker sees the others' turns, not their notes
    talk = [rp.run(aid) for aid in rp.ids("autonomous_discussion_attribution")]
    assert any(by_reason(a, "speaker_context") for a in talk)
    assert any(by_reason(a, "participant_private", "tool_memory") for a in talk)


def test_child_subagent_artifacts_stay_out_until_promoted(rp: Replayer) -> None:
    (resume,) = rp.ids("parent_resume")
    a = rp.run(resume)
    mems = {m["memory_id"]: m for m in rp.rows("tool_memories", "c-agents")}
    child_runs = {r["model_run_id"] for r in rp.rows("model_runs", "c-agents")
                  if r["runtime_kind"] == "subagent_child"}
    child_arts = [x["artifact_id"] for x in rp.rows("tool_artifacts", "c-agents")
                  if x["owner_model_run_id"] in child_runs]
    assert child_arts
    for aid in child_arts:
        assert d(a, aid)[0] == "omitted"
        assert d(a, aid)[2] in ("child_not_promoted", "audit_only")
    for mid, m in mems.items():
        if m["owner_model_run_id"] in child_runs:
            expected = "promoted_child_output" if m["promoted"] else "child_not_promoted"
            assert d(a, mid)[2] == expected, mid
    assert by_reason(a, "checkpoint_restore")
    # the child itself sees its own work, but never the audit-only dump
    (child,) = rp.ids("child_subagent_artifacts")
    assert by_reason(rp.run(child), "audit_only")
    (cont,) = rp.ids("subagent_continuation")
    assert by_reason(rp.run(cont), "checkpoint_restore")


def test_contradiction_and_supersession(rp: Replayer) -> None:
    (aid,) = rp.ids("contradiction_supersession")
    mems = rp.rows("tool_memories", "c-launch")
    old = next(m for m in mems if m["superseded_by"])
    new = old["superseded_by"]
    a = rp.run(aid)  # v4: both sides shown
    assert d(a, old["memory_id"]) == ("omitted", None, "superseded")
    assert a.record(old["memory_id"])["detail"] == f"superseded by {new}"
    assert d(a, new)[0] == "included"
    both = by_reason(a, "conflict_both_sides")
    assert len(both) == 2 and all(r["decision"] == "included" for r in both)
    v1 = rp.run(aid, "v1")  # v1: only the more confident side
    assert not by_reason(v1, "conflict_both_sides")
    assert by_reason(v1, "redundant", "tool_memory")
    assert d(v1, new)[0] == "included" and d(v1, old["memory_id"])[2] == "superseded"


def test_stale_connected_app_memories_are_marked_or_omitted_never_current(rp: Replayer) -> None:
    (aid,) = rp.ids("stale_connected_app_memory")
    mems = {m["memory_id"]: m for m in rp.rows("tool_memories", "c-ops")}
    stale = [mid for mid, m in mems.items() if m["freshness_class"] in ("volatile", "bounded")
             and m["created_at"] < load_request(rp.store, aid).assembled_at]
    assert len(stale) >= 3
    marked, omitted = rp.run(aid), rp.run(aid, "v1")
    for mid in stale:
        assert d(marked, mid) == ("included", "stale_marker", "stale_marker"), mid
        assert "revalidate with" in marked.record(mid)["detail"]
        assert d(omitted, mid) == ("omitted", None, "stale"), mid
        # the marker is sent with the memory: it costs the memory and its own words
        assert marked.record(mid)["tokens"] > mems[mid]["content_tokens"]


def test_retry_critical_and_deferred_tool_state_is_never_dropped(rp: Replayer) -> None:
    (aid,) = rp.ids("retry_critical_errors")
    a = rp.run(aid)
    protected = by_reason(a, "recovery_protected")
    assert {r["record_kind"] for r in protected} == {"tool_call", "tool_artifact"}
    assert all(r["decision"] == "included" for r in protected)
    assert by_reason(a, "over_budget")
    # the request's 900-token context limit caps v4's 6000-token budget
    assert load_request(rp.store, aid).context_limit == 900
    # even with a budget of nothing, the failed call stays
    starved = rp.run(aid, context_limit=0)
    assert {r["record_id"] for r in by_reason(starved, "recovery_protected")} == {r["record_id"] for r in protected}
    assert all("kept although over budget" in r["detail"] for r in by_reason(starved, "recovery_protected"))
    # the deferred picker is pending at its assembly time and kept
    first, _ = rp.ids("deferred_document_picker")
    picker = rp.run(first)
    assert any(r["record_kind"] == "tool_call" for r in by_reason(picker, "recovery_protected"))


def test_google_derived_raw_withheld_summary_per_provider(rp: Replayer) -> None:
    claude_id, gpt_id = rp.ids("google_derived_privacy")
    claude, gpt = rp.run(claude_id), rp.run(gpt_id)
    prd_art = next(x for x in rp.rows("tool_artifacts", "c-ops") if x["tool_name"] == "drive.export_doc")
    prd_mem = next(m for m in rp.rows("tool_memories", "c-ops") if m["summary"].startswith("Atlas v2 PRD"))
    assert d(claude, prd_art["artifact_id"]) == ("omitted", None, "privacy_restricted")
    assert d(claude, prd_mem["memory_id"]) == ("included", "compact_memory", "compact_memory")
    assert d(gpt, prd_art["artifact_id"])[2] == "privacy_restricted"
    assert d(gpt, prd_mem["memory_id"]) == ("omitted", None, "provider_restricted")
    # before v3, the summary could go to OpenAI
    assert d(rp.run(gpt_id, "v2"), prd_mem["memory_id"])[0] == "included"


def test_exact_csv_rehydrated_only_when_requested_allowed_and_within_bytes(rp: Replayer) -> None:
    (aid,) = rp.ids("exact_raw_csv_rehydration")
    req = load_request(rp.store, aid)
    (art,) = req.exact_evidence_ids
    size = next(x for x in rp.rows("tool_artifacts", "c-launch") if x["artifact_id"] == art)["byte_size"]
    assert d(rp.run(aid), art) == ("included", "rehydrated_raw", "rehydrated_exact")
    assert d(rp.run(aid, exact_evidence_ids=[]), art) == ("omitted", None, "raw_replaced_by_memory")
    short = policy("v4", **{"rehydration.byte_budget": size - 1})
    assert d(rp.run(aid, short), art) == ("omitted", None, "byte_budget_exceeded")
    assert d(rp.run(aid, policy("v4", **{"rehydration.byte_budget": size})), art)[0] == "included"
    # the request's recorded byte_budget is informational: the policy decides
    assert d(rp.run(aid, short, byte_budget=10**9), art)[2] == "byte_budget_exceeded"


def test_broken_provenance_marked_not_repaired(rp: Replayer) -> None:
    (aid,) = rp.ids("broken_provenance")
    arts = {x["artifact_id"] for x in rp.rows("tool_artifacts", "c-launch")}
    (mem,) = [m for m in rp.rows("tool_memories", "c-launch") if set(m["source_artifact_ids"]) - arts]
    marked = rp.run(aid)
    assert d(marked, mem["memory_id"]) == ("included", "revalidation_hint", "stale_marker")
    detail = marked.record(mem["memory_id"])["detail"]
    assert "art-purged-legal-7 is missing (broken provenance)" in detail
    assert d(rp.run(aid, "v3"), mem["memory_id"]) == ("omitted", None, "broken_provenance")
    assert mem["source_artifact_ids"] == ["art-purged-legal-7"]


def test_multi_tool_skills_scheduled_task(rp: Replayer) -> None:
    (files,) = rp.ids("multi_tool_file_generation")
    a = rp.run(files)
    assert len(by_reason(a, "compact_memory", "tool_memory")) >= 3
    assert by_reason(a, "raw_replaced_by_memory")
    (skills,) = rp.ids("multi_skill_runtime_state")
    s = rp.run(skills)
    assert by_reason(s, "skill_active") and by_reason(s, "checkpoint_restore")
    assert s.included()[0]["record_kind"] == "checkpoint"
    (sched,) = rp.ids("scheduled_task")
    assert rp.run(sched).included_count > 0


def test_every_recorded_story_assembly_replays_to_its_recorded_hash(rp: Replayer) -> None:
    for row in rp.store.assembly_requests().to_pylist():
        if "drift" in row["tags"]:
            continue
        assert rp.run(row["assembly_id"]).selection_hash == row["selection_hash"], row["assembly_id"]


def test_token_budget_growth_v4_budget_keeps_the_long_notes_v3_trims_without_holes(rp: Replayer) -> None:
    (aid,) = rp.ids("token_budget_growth")
    req = load_request(rp.store, aid)
    assert req.policy_version == "v4" and req.context_limit == 200_000
    v3, v4 = rp.run(aid, "v3"), rp.run(aid, "v4")
    assert not by_reason(v4, "over_budget") and by_reason(v3, "over_budget", "message")
    # the budget key alone makes the difference
    v4_at_4000 = rp.run(aid, policy("v4", **{"budget.token_budget": 4000}))
    assert v4_at_4000.selection_hash != v4.selection_hash
    assert {r["record_id"] for r in by_reason(v4_at_4000, "over_budget", "message")} == {
        r["record_id"] for r in by_reason(v3, "over_budget", "message")}
    assert v3.assembled_tokens <= 4000 - 500 < v4.assembled_tokens <= 6000 - 500
    # under v3 the history is cut at one point: everything older than the first drop is out
    created = {m["message_id"]: m["created_at"] for m in rp.rows("messages", "c-launch")}
    kept = [created[r["record_id"]] for r in v3.included() if r["record_kind"] == "message"]
    dropped = [created[r["record_id"]] for r in by_reason(v3, "over_budget", "message")]
    assert min(kept) > max(dropped)
    notes = next(m for m in rp.rows("messages", "c-launch") if m["content"].startswith("Launch dry-run retro"))
    assert d(v4, notes["message_id"])[0] == "included" and d(v3, notes["message_id"])[2] == "over_budget"
    # the recorded request's own budget does not override the policy
    assert rp.run(aid, "v3", token_budget=10**6).selection_hash == v3.selection_hash


def test_rehydration_byte_budget_v6_halves_it_and_the_screenshot_no_longer_fits(rp: Replayer) -> None:
    (aid,) = rp.ids("rehydration_byte_budget")
    req = load_request(rp.store, aid)
    (shot,) = req.exact_evidence_ids
    size = next(x for x in rp.rows("tool_artifacts", "c-launch") if x["artifact_id"] == shot)["byte_size"]
    assert 32768 < size <= 65536
    assert d(rp.run(aid), shot) == ("included", "rehydrated_raw", "rehydrated_exact")  # recorded v4
    v6 = rp.run(aid, "v6")
    assert d(v6, shot) == ("omitted", None, "byte_budget_exceeded")
    assert v6.record(shot)["detail"] == f"needs {size} bytes, 32768 left of the byte budget"
    # its compact memory still carries the gist
    mem = next(m for m in rp.rows("tool_memories", "c-launch") if shot in m["source_artifact_ids"])
    assert d(v6, mem["memory_id"])[0] == "included"


def test_a_tight_policy_file_extending_v6_sends_at_most_its_budget(rp: Replayer, tmp_path: Path) -> None:
    """Done when: a policy file extending v6 with a 200-token budget sends at most 200
    tokens plus protected records on a v5 incident request, and fewer than under v6."""
    (tmp_path / "v7.toml").write_text('version = "v7"\nextends = "v6"\n'
                                      'description = "tight"\n[budget]\ntoken_budget = 200\n')
    v7 = REG.resolve(str(tmp_path / "v7.toml"))
    for aid in rp.ids("incident_calendar_freshness"):
        if load_request(rp.store, aid).policy_version != "v5":
            continue
        tight, v6 = rp.run(aid, v7), rp.run(aid, "v6")
        protected = sum(r["tokens"] for r in by_reason(tight, "recovery_protected"))
        assert tight.assembled_tokens - protected <= 200
        assert tight.assembled_tokens < v6.assembled_tokens
        assert by_reason(tight, "over_budget")


def test_fail_closed_rules_hold_on_every_sample_assembly_under_every_version(rp: Replayer) -> None:
    """No raw artifact is said to be replaced by a memory that is not in the prompt."""
    for row in rp.store.assembly_requests().to_pylist():
        for version in REG.versions():
            a = rp.run(row["assembly_id"], version)
            shown = {r["record_id"] for r in a.included() if r["record_kind"] == "tool_memory"}
            for r in by_reason(a, "raw_replaced_by_memory"):
                assert r["detail"].rsplit(" ", 1)[-1] in shown, (row["assembly_id"], version, r)
