"""The reference assembler on hand-built mini graphs, and the plugin entry point."""

from __future__ import annotations

import copy
import random

import pytest
from support.engine import Mini, decision, policy

from ingest.contract import INCLUDED_REASONS, OMITTED_REASONS
from ingest.errors import ContextlensError
from replay import assembler as asm_mod
from replay.assembler import (
    Assembly,
    ReferenceAssembler,
    assemble,
    available_assemblers,
    get_assembler,
    selection_hash,
)
from replay.policy import PolicyRegistry
from replay.sample.drift import InvertedSupersessionAssembler
from replay.sample.policies import POLICY_TOML
from replay.snapshot import Snapshot


def supersession_graph(direction: str) -> tuple[Mini, str, str]:
    """An obsolete memory and its replacement, linked by one or both fields."""
    m = Mini()
    g = m.g
    old = g.memory("b-main", [], "Launch on Nov 12.", "2026-01-01 00:00:03", confidence=0.9)
    new = g.memory("b-main", [], "Launch on Nov 19.", "2026-01-01 00:00:04", confidence=0.5)
    if direction in ("both", "superseded_by"):
        g.get("tool_memories", old)["superseded_by"] = new
    if direction in ("both", "supersedes"):
        g.get("tool_memories", new)["supersedes"] = [old]
    return m, old, new


@pytest.mark.parametrize("direction", ["both", "superseded_by", "supersedes"])
def test_superseded_is_dropped_and_its_replacement_kept(direction: str) -> None:
    m, old, new = supersession_graph(direction)
    a = m.assemble("2026-01-01 00:01:00")
    assert decision(a, old) == ("omitted", None, "superseded")
    assert a.record(old)["detail"] == f"superseded by {new}"
    assert decision(a, new) == ("included", "compact_memory", "compact_memory")


def test_the_direction_matters_and_the_drift_build_gets_it_wrong() -> None:
    m, old, new = supersession_graph("both")
    snap = Snapshot(m.g.tables)
    req = m.request("2026-01-01 00:01:00")
    bad = InvertedSupersessionAssembler().assemble(snap, req, policy())
    assert decision(bad, old)[0] == "included"
    assert decision(bad, new)[2] == "superseded"
    good = assemble(snap, req, policy())
    assert good.selection_hash != bad.selection_hash
    assert bad.assembler == "reference/1.0.0-bad" and good.assembler == "reference/1.0.0"


def test_supersession_waits_for_the_replacement_to_exist() -> None:
    m, old, new = supersession_graph("both")
    m.g.get("tool_memories", new)["created_at"] = m.g.get("tool_memories", old)["created_at"].replace(hour=5)
    a = m.assemble("2026-01-01 00:01:00")  # the replacement is not yet created
    assert decision(a, old)[0] == "included"
    assert new not in {r["record_id"] for r in a.records}


def test_keep_both_policy_keeps_the_obsolete_memory() -> None:
    m, old, new = supersession_graph("both")
    a = m.assemble("2026-01-01 00:01:00", policy(**{"contradiction.supersession": "keep_both"}))
    assert decision(a, old)[0] == decision(a, new)[0] == "included"


def test_contradiction_both_sides_or_the_more_confident() -> None:
    m = Mini()
    x = m.g.memory("b-main", [], "Quote $42k.", "2026-01-01 00:00:03", confidence=0.6)
    y = m.g.memory("b-main", [], "Quote $48k.", "2026-01-01 00:00:04", confidence=0.93, conflicts=(x,))
    both = m.assemble("2026-01-01 00:01:00", policy("v2"))
    assert decision(both, x)[2] == decision(both, y)[2] == "conflict_both_sides"
    one = m.assemble("2026-01-01 00:01:00", policy("v1"))
    assert decision(one, x) == ("omitted", None, "redundant")
    assert decision(one, y)[0] == "included"


def test_stale_memory_is_marked_or_omitted_never_current() -> None:
    m = Mini()
    mem = m.g.memory("b-main", [], "Dana is free Thu 15:00.", "2026-01-01 00:00:03",
                     freshness="volatile", revalidation=("calendar.freebusy",))
    fresh = m.assemble("2026-01-01 03:00:00", policy("v4"))
    assert decision(fresh, mem) == ("included", "compact_memory", "compact_memory")
    marked = m.assemble("2026-01-02 00:00:00", policy("v4"))
    assert decision(marked, mem) == ("included", "stale_marker", "stale_marker")
    assert "stale since 2026-01-01 06:00 UTC" in marked.record(mem)["detail"]
    assert "revalidate with calendar.freebusy" in marked.record(mem)["detail"]
    omitted = m.assemble("2026-01-02 00:00:00", policy("v1"))
    assert decision(omitted, mem) == ("omitted", None, "stale")
    # v5's wide window lets it through as current: the incident
    assert decision(m.assemble("2026-01-02 00:00:00", policy("v5")), mem)[1] == "compact_memory"


def test_durable_memory_does_not_go_stale_unless_the_policy_gives_it_a_window() -> None:
    m = Mini()
    mem = m.g.memory("b-main", [], "Owner is Ana.", "2026-01-01 00:00:03", freshness="durable")
    assert decision(m.assemble("2027-01-01 00:00:00"), mem)[1] == "compact_memory"
    pol = policy("v4", **{"freshness.durable": 24})
    assert decision(m.assemble("2027-01-01 00:00:00", pol), mem)[1] == "stale_marker"


@pytest.mark.parametrize("status, completed", [("pending", None), ("deferred", None),
                                                ("failed", "2026-01-01 00:00:06")])
def test_unresolved_tool_state_is_protected_even_over_budget(status: str, completed: str | None) -> None:
    m = Mini()
    call = m.g.call(m.run, "payments.create_invoice", {"amount": 1}, "2026-01-01 00:00:05", completed,
                    status=status, retryable=True)
    art = m.g.artifact(call, "x" * 4000, "2026-01-01 00:00:06", status=status, privacy="public")
    a = m.assemble("2026-01-01 00:01:00", policy("v4", **{"budget.token_budget": 510}))  # 10 after the reserve
    for rid in (call, art):
        assert decision(a, rid) == ("included", "verbatim", "recovery_protected")
    assert "kept although over budget" in a.record(art)["detail"]
    assert decision(a, m.user_msg) == ("omitted", None, "over_budget")


def test_a_failed_call_retried_successfully_is_resolved() -> None:
    m = Mini()
    args = {"amount": 1, "key": "k"}
    failed = m.g.call(m.run, "pay", args, "2026-01-01 00:00:05", "2026-01-01 00:00:06", status="failed")
    m.g.call(m.run, "pay", args, "2026-01-01 00:00:07", "2026-01-01 00:00:08")
    before = m.assemble("2026-01-01 00:00:07")
    assert decision(before, failed)[2] == "recovery_protected"
    after = m.assemble("2026-01-01 00:01:00")
    assert decision(after, failed) == ("omitted", None, "redundant")


def test_pending_as_of_the_assembly_even_if_it_completed_later() -> None:
    m = Mini()
    call = m.g.call(m.run, "drive.pick", {}, "2026-01-01 00:00:05", "2026-01-01 00:05:00")
    art = m.g.artifact(call, "the doc", "2026-01-01 00:05:00")
    a = m.assemble("2026-01-01 00:01:00")
    assert decision(a, call)[2] == "recovery_protected"
    assert decision(a, art) == ("omitted", None, "not_yet_created")


def test_restricted_raw_is_omitted_and_its_safe_summary_kept() -> None:
    m = Mini()
    call = m.g.call(m.run, "drive.export", {}, "2026-01-01 00:00:05", "2026-01-01 00:00:06")
    art = m.g.artifact(call, "PRD text", "2026-01-01 00:00:06", privacy="google_derived")
    mem = m.g.memory("b-main", [art], "PRD: offline mode.", "2026-01-01 00:00:07", privacy="google_derived")
    a = m.assemble("2026-01-01 00:01:00")
    assert decision(a, art) == ("omitted", None, "privacy_restricted")
    assert decision(a, mem)[0] == "included"


def test_exact_evidence_rehydrated_only_when_requested_allowed_and_within_bytes() -> None:
    m = Mini()
    call = m.g.call(m.run, "sheets.export_csv", {}, "2026-01-01 00:00:05", "2026-01-01 00:00:06")
    art = m.g.artifact(call, "a,b\n1,2\n", "2026-01-01 00:00:06", content_type="text/csv")
    m.g.memory("b-main", [art], "CSV with a and b.", "2026-01-01 00:00:07")
    at = "2026-01-01 00:01:00"
    assert decision(m.assemble(at), art) == ("omitted", None, "raw_replaced_by_memory")
    assert decision(m.assemble(at, exact=(art,)), art) == ("included", "rehydrated_raw", "rehydrated_exact")
    small = policy("v4", **{"rehydration.byte_budget": 3})
    assert decision(m.assemble(at, small, exact=(art,)), art) == ("omitted", None, "byte_budget_exceeded")
    # the byte budget is the policy's: a recorded request's own byte_budget does not override it
    assert decision(m.assemble(at, small, exact=(art,), byte_budget=10**9), art)[2] == "byte_budget_exceeded"
    never = policy("v4", **{"rehydration.trigger": "never"})
    assert decision(m.assemble(at, never, exact=(art,)), art)[2] == "raw_replaced_by_memory"
    # not allowed: a restricted class is never rehydrated, even when asked
    m.g.get("tool_artifacts", art)["privacy_class"] = "secret_adjacent"
    assert decision(m.assemble(at, exact=(art,)), art)[2] == "privacy_restricted"


def test_broken_provenance_is_marked_or_omitted_never_repaired() -> None:
    m = Mini()
    mem = m.g.memory("b-main", ["art-gone"], "Legal approved.", "2026-01-01 00:00:03",
                     tools=["drive.get_file"], revalidation=("drive.get_file",))
    marked = m.assemble("2026-01-01 00:01:00", policy("v4"))
    assert decision(marked, mem) == ("included", "revalidation_hint", "stale_marker")
    assert "art-gone is missing (broken provenance)" in marked.record(mem)["detail"]
    omitted = m.assemble("2026-01-01 00:01:00", policy("v1"))
    assert decision(omitted, mem) == ("omitted", None, "broken_provenance")
    assert {r["record_id"] for r in marked.records} & {"art-gone"} == set()
    assert m.g.get("tool_memories", mem)["source_artifact_ids"] == ["art-gone"]


def test_other_participants_private_records_stay_out_unless_shared() -> None:
    m = Mini()
    other_run = m.g.run("b-main", "p-other", "2026-01-01 00:00:03", None)
    call = m.g.call(other_run, "web.search", {}, "2026-01-01 00:00:04", "2026-01-01 00:00:05")
    private = m.g.artifact(call, "scratch", "2026-01-01 00:00:05")
    shared = m.g.artifact(call, "for you", "2026-01-01 00:00:05", shared_with=("p-me",))
    note = m.g.message("b-main", "assistant", "(private)", "2026-01-01 00:00:06",
                       participant="p-other", run=other_run, vis="participant_private")
    a = m.assemble("2026-01-01 00:01:00")
    assert decision(a, private)[2] == decision(a, note)[2] == decision(a, call)[2] == "participant_private"
    assert decision(a, shared)[0] == "included"


def test_sibling_branch_records_never_leak() -> None:
    m = Mini()
    g = m.g
    fork = g.message("b-main", "assistant", "fork here", "2026-01-01 00:00:10", participant="p-me", run=m.run)
    g.branch("b-alt", "c", "alt", "2026-01-01 00:00:20", parent="b-main", fork=fork)
    after = g.message("b-main", "user", "main after fork", "2026-01-01 00:00:30", participant="p-user")
    alt_run = g.run("b-alt", "p-me", "2026-01-01 00:00:21", None)
    alt_msg = g.message("b-alt", "user", "on alt", "2026-01-01 00:00:21", participant="p-user")
    alt_mem = g.memory("b-alt", [], "alt costing", "2026-01-01 00:00:22")
    shared = g.memory("b-alt", [], "shared fact", "2026-01-01 00:00:22", vis="conversation")
    on_main = m.assemble("2026-01-01 00:01:00")
    assert decision(on_main, alt_msg)[2] == decision(on_main, alt_mem)[2] == "sibling_branch"
    assert decision(on_main, shared)[2] == "conversation_shared"
    on_alt = m.assemble("2026-01-01 00:01:00", run=alt_run)
    assert decision(on_alt, after)[2] == "sibling_branch"
    assert f"after the fork at {fork}" in on_alt.record(after)["detail"]
    assert decision(on_alt, fork) == ("included", "verbatim", "lineage")
    assert decision(on_alt, alt_msg) == ("included", "verbatim", "in_window")


def test_child_outputs_stay_out_until_promoted() -> None:
    m = Mini()
    g = m.g
    child = g.run("b-main", "p-sub", "2026-01-01 00:00:03", "2026-01-01 00:00:09",
                  runtime="subagent_child", parent_run=m.run)
    call = g.call(child, "web.fetch", {}, "2026-01-01 00:00:04", "2026-01-01 00:00:05")
    art = g.artifact(call, "page", "2026-01-01 00:00:05", privacy="public")
    scratch = g.memory("b-main", [art], "scratch", "2026-01-01 00:00:06", vis="participant_private",
                       owner_run=child, promotion="explicit")
    final = g.memory("b-main", [art], "finding", "2026-01-01 00:00:07", vis="participant_private",
                     owner_run=child, promotion="explicit", promoted=True)
    a = m.assemble("2026-01-01 00:01:00")
    for rid in (call, art, scratch):
        assert decision(a, rid) == ("omitted", None, "child_not_promoted")
    assert decision(a, final) == ("included", "compact_memory", "promoted_child_output")
    never = m.assemble("2026-01-01 00:01:00", policy("v4", **{"ownership.child_promotion": "never"}))
    assert decision(never, final)[2] == "child_not_promoted"
    auto = m.assemble("2026-01-01 00:01:00", policy("v4", **{"ownership.child_promotion": "auto"}))
    assert decision(auto, scratch)[2] == "promoted_child_output"


def test_audit_only_is_never_sent() -> None:
    m = Mini()
    call = m.g.call(m.run, "workspace.dump", {}, "2026-01-01 00:00:04", "2026-01-01 00:00:05")
    art = m.g.artifact(call, "dump", "2026-01-01 00:00:05", vis="audit_only")
    assert decision(m.assemble("2026-01-01 00:01:00"), art) == ("omitted", None, "audit_only")


def test_window_and_budget_order() -> None:
    m = Mini()
    ids = [m.g.message("b-main", "user", f"message number {i} " * 5, f"2026-01-01 00:01:{i:02d}",
                       participant="p-user") for i in range(20)]
    a = m.assemble("2026-01-01 00:02:00", policy("v1"))
    kept = [rid for rid in ids if decision(a, rid)[0] == "included"]
    assert kept == ids[-12:]
    assert decision(a, ids[0])[2] == "outside_window"
    tight = m.assemble("2026-01-01 00:02:00", policy("v1", **{"budget.token_budget": 560}))
    kept = [rid for rid in ids if decision(tight, rid)[0] == "included"]
    assert kept and kept == ids[-len(kept):] and len(kept) < 12  # the newest fit first
    assert tight.assembled_tokens <= 60


def test_one_final_row_per_candidate_with_a_matching_decision_chain() -> None:
    m, _, _ = supersession_graph("both")
    a = m.assemble("2026-01-01 00:01:00")
    keys = [(r["record_kind"], r["record_id"]) for r in a.records]
    assert len(keys) == len(set(keys))
    inc = a.included()
    assert [r["position"] for r in inc] == list(range(len(inc)))
    for r in a.records:
        chain = a.decisions_of(r["record_id"])
        assert chain and chain[-1]["reason_code"] == r["reason_code"]
        assert r["reason_code"] in (INCLUDED_REASONS if r["decision"] == "included" else OMITTED_REASONS)
    assert a.selection_hash == selection_hash(a.records)
    assert a.assembled_tokens == sum(r["tokens"] for r in inc)


def test_row_order_in_the_snapshot_does_not_matter() -> None:
    m, _, _ = supersession_graph("both")
    tables = copy.deepcopy(m.g.tables)
    for rows in tables.values():
        random.Random(3).shuffle(rows)
    req = m.request("2026-01-01 00:01:00")
    a = assemble(Snapshot(m.g.tables), req, policy())
    b = assemble(Snapshot(tables), req, policy())
    assert a == b


# ---------------------------------------------------------------------------- plugins
class UpperAssembler:
    """A second assembler: includes every candidate the reference includes, reversed."""

    name = "reversed"
    version = "0.1"

    def assemble(self, snapshot, request, policy):  # noqa: ANN001, ANN201
        ref = assemble(snapshot, request, policy)
        inc = ref.included()
        n = len(inc)
        records = [dict(r, position=n - 1 - r["position"]) if r["decision"] == "included" else r
                   for r in ref.records]
        return Assembly.from_rows(ref.assembly_id, policy.version, "reversed/0.1", records,
                                  ref.decisions, ref.baseline_tokens, ref.baseline_message_count)


class FakeEntryPoint:
    def __init__(self, name: str, obj: object) -> None:
        self.name, self.value, self._obj = name, f"tests:{name}", obj

    def load(self) -> object:
        return self._obj


def test_reference_is_registered_through_the_entry_point() -> None:
    names = {ep.name: ep.value for ep in asm_mod._entry_points()}
    assert names.get("reference") == "replay.assembler:ReferenceAssembler"
    plugin = get_assembler("reference")
    assert isinstance(plugin, ReferenceAssembler)
    assert isinstance(plugin, asm_mod.AssemblerPlugin)


def test_a_second_assembler_plugs_in(monkeypatch: pytest.MonkeyPatch) -> None:
    eps = [FakeEntryPoint("reference", ReferenceAssembler), FakeEntryPoint("reversed", UpperAssembler)]
    monkeypatch.setattr(asm_mod, "_entry_points", lambda: eps)
    assert sorted(available_assemblers()) == ["reference", "reversed"]
    plugin = get_assembler("reversed")
    m, _, _ = supersession_graph("both")
    out = plugin.assemble(Snapshot(m.g.tables), m.request("2026-01-01 00:01:00"), policy())
    ref = get_assembler().assemble(Snapshot(m.g.tables), m.request("2026-01-01 00:01:00"), policy())
    assert out.assembler == "reversed/0.1" and out.selection_hash != ref.selection_hash
    with pytest.raises(ContextlensError, match="unknown assembler 'nope' \\(known: reference, reversed\\)"):
        get_assembler("nope")


def test_without_package_metadata_the_builtin_reference_remains(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(asm_mod, "_entry_points", lambda: [])
    assert list(available_assemblers()) == ["reference"]
    assert isinstance(get_assembler(), ReferenceAssembler)


def test_a_broken_plugin_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        name = "broken"
        value = "x:y"

        def load(self) -> object:
            raise ImportError("no module x")

    monkeypatch.setattr(asm_mod, "_entry_points", lambda: [Broken()])
    with pytest.raises(ContextlensError, match="assembler plugin 'broken' \\(x:y\\) failed to load"):
        available_assemblers()


# ---------------------------------------------------------------------------- budgets


def long_history(m: Mini, n: int = 10, tokens: int = 100) -> list[str]:
    """``n`` user messages of about ``tokens`` tokens each, one a second, oldest first."""
    return [m.g.message("b-main", "user", f"note {i} " + "x" * (4 * tokens - 8), f"2026-01-01 00:01:{i:02d}",
                        participant="p-user") for i in range(n)]


def test_the_policy_budget_decides_capped_by_the_context_limit() -> None:
    m = Mini()
    ids = long_history(m)
    at = "2026-01-01 00:02:00"

    def kept(a: Assembly) -> int:
        return sum(decision(a, rid)[0] == "included" for rid in ids)

    big = policy("v4", **{"budget.token_budget": 100_000})
    small = policy("v4", **{"budget.token_budget": 1000})
    # a recorded request's own token_budget no longer overrides the policy
    assert kept(m.assemble(at, big, token_budget=600)) == 10
    assert kept(m.assemble(at, small, token_budget=100_000)) < 10
    # the model's context limit caps the policy's budget
    capped = m.assemble(at, big, context_limit=1000)
    assert kept(capped) == kept(m.assemble(at, small)) < 10
    assert capped.assembled_tokens <= 1000 - 500
    # a limit above the policy's budget changes nothing
    assert m.assemble(at, small, context_limit=10**6).selection_hash == m.assemble(at, small).selection_hash


def test_trimming_never_leaves_a_hole_in_the_history() -> None:
    m = Mini()
    old_small = m.g.message("b-main", "assistant", "ok", "2026-01-01 00:00:30", participant="p-me", run=m.run)
    big = m.g.message("b-main", "user", "y" * 1600, "2026-01-01 00:00:40", participant="p-user")
    newest = m.g.message("b-main", "assistant", "z" * 400, "2026-01-01 00:00:50", participant="p-me", run=m.run)
    mem = m.g.memory("b-main", [], "a short fact", "2026-01-01 00:00:20")
    # 300 tokens after the reserve: the newest message (100) fits, the big one (400) does not
    a = m.assemble("2026-01-01 00:01:00", policy("v4", **{"budget.token_budget": 800}))
    assert decision(a, newest)[0] == "included"
    assert a.record(big)["reason_code"] == "over_budget"
    assert "over budget by" in a.record(big)["detail"]
    # the older short message would fit, but keeping it would leave a hole
    assert decision(a, old_small) == ("omitted", None, "over_budget")
    assert decision(a, m.user_msg) == ("omitted", None, "over_budget")
    assert a.record(old_small)["detail"] == f"older than {big}, which did not fit; the history keeps no holes"
    # later-ranked kinds still fill what is left
    assert decision(a, mem)[0] == "included"


def test_the_lowest_ranked_records_go_first() -> None:
    m = Mini()
    msg = m.g.message("b-main", "assistant", "m" * 800, "2026-01-01 00:00:30", participant="p-me", run=m.run)
    mem = m.g.memory("b-main", [], "f" * 800, "2026-01-01 00:00:20")
    pol = policy("v4", **{"budget.token_budget": 800})  # 300 after the reserve: room for one of them
    a = m.assemble("2026-01-01 00:01:00", pol)
    assert decision(a, msg)[0] == "included" and decision(a, mem)[2] == "over_budget"
    memories_first = policy("v4", **{"budget.token_budget": 800, "ranking.order": [
        "checkpoint", "skill_state", "exact_evidence", "tool_memory", "message", "tool_artifact", "tool_call"]})
    b = m.assemble("2026-01-01 00:01:00", memories_first)
    assert decision(b, mem)[0] == "included" and decision(b, msg)[2] == "over_budget"


# ---------------------------------------------------------------------------- fail closed


def test_a_private_record_whose_owner_cannot_be_resolved_is_omitted_for_everyone() -> None:
    m = Mini()
    nobody = m.g.memory("b-main", [], "whose is this?", "2026-01-01 00:00:03", vis="participant_private")
    assert m.g.get("tool_memories", nobody)["owner_participant_id"] is None
    ghost = m.g.memory("b-main", [], "a ghost's note", "2026-01-01 00:00:03", vis="participant_private")
    m.g.get("tool_memories", ghost)["owner_participant_id"] = "p-ghost"  # no such participant
    mine = m.g.memory("b-main", [], "my note", "2026-01-01 00:00:03", vis="participant_private", owner_run=m.run)
    public = m.g.memory("b-main", [], "anyone may see", "2026-01-01 00:00:03")
    other_run = m.g.run("b-main", "p-other", "2026-01-01 00:00:04", None)
    open_policy = policy("v4", **{"ownership.participant_isolation": False})
    for run in (m.run, other_run):
        for pol in (policy(), open_policy):
            a = m.assemble("2026-01-01 00:01:00", pol, run=run)
            for rid in (nobody, ghost):
                assert decision(a, rid) == ("omitted", None, "owner_unknown"), (run, rid)
            assert decision(a, public)[0] == "included"
    assert decision(m.assemble("2026-01-01 00:01:00"), mine)[0] == "included"
    # an owner known only through the owner run is resolved
    m.g.get("tool_memories", mine)["owner_participant_id"] = None
    assert decision(m.assemble("2026-01-01 00:01:00"), mine)[0] == "included"
    assert decision(m.assemble("2026-01-01 00:01:00", run=other_run), mine)[2] == "participant_private"


def test_a_grandchild_output_reaches_the_grandparent_only_if_promoted_at_each_step() -> None:
    m = Mini()
    g = m.g
    g.participant("p-subsub", "c", "SubSub", "subagent", "anthropic", "m-s")
    child = g.run("b-main", "p-sub", "2026-01-01 00:00:03", None, runtime="subagent_child", parent_run=m.run)
    grandchild = g.run("b-main", "p-subsub", "2026-01-01 00:00:04", None, runtime="subagent_child",
                       parent_run=child)
    deep = g.memory("b-main", [], "grandchild finding", "2026-01-01 00:00:05", vis="participant_private",
                    owner_run=grandchild, promotion="explicit", promoted=True)
    shallow = g.memory("b-main", [], "child finding", "2026-01-01 00:00:06", vis="participant_private",
                       owner_run=child, promotion="explicit", promoted=True)
    # a grandchild memory in branch scope is still a subagent's output, not free for the parent
    loud = g.memory("b-main", [], "grandchild shout", "2026-01-01 00:00:05", owner_run=grandchild,
                    promotion="explicit", promoted=True)
    a = m.assemble("2026-01-01 00:01:00")
    assert decision(a, shallow) == ("included", "compact_memory", "promoted_child_output")
    for rid in (deep, loud):
        assert decision(a, rid) == ("omitted", None, "child_not_promoted")
        assert a.record(rid)["detail"] == (f"output of run {grandchild}, promoted to {child} only; "
                                           "not promoted further up to this run")
    # the child itself sees its own child's promoted output
    as_child = m.assemble("2026-01-01 00:01:00", run=child)
    assert decision(as_child, deep) == ("included", "compact_memory", "promoted_child_output")
    # auto promotes at every step
    auto = m.assemble("2026-01-01 00:01:00", policy("v4", **{"ownership.child_promotion": "auto"}))
    assert decision(auto, deep)[2] == "promoted_child_output"
    assert auto.record(deep)["detail"] == f"promoted from child run {grandchild} through {child}"


def test_a_memory_superseded_by_a_hidden_record_is_not_shown_as_current() -> None:
    m = Mini()
    g = m.g
    other_run = g.run("b-main", "p-other", "2026-01-01 00:00:03", None)
    old = g.memory("b-main", [], "Dana is free Thursday.", "2026-01-01 00:00:03", revalidation=("calendar",))
    new = g.memory("b-main", [], "Dana declined Thursday.", "2026-01-01 00:00:04", vis="participant_private",
                   owner_run=other_run, supersedes=(old,))
    at = "2026-01-01 00:01:00"
    marked = m.assemble(at, policy("v4"))  # stale_action = mark
    assert decision(marked, new) == ("omitted", None, "participant_private")
    assert decision(marked, old) == ("included", "stale_marker", "stale_marker")
    assert marked.record(old)["detail"] == (
        f"superseded by {new}, which this request may not see (participant_private); revalidate with calendar")
    omitted = m.assemble(at, policy("v1"))  # stale_action = omit
    assert decision(omitted, old) == ("omitted", None, "superseded")
    assert "may not see" in omitted.record(old)["detail"]
    # the owner of the replacement sees it, and the old memory is simply superseded
    own = m.assemble(at, run=other_run)
    assert decision(own, new)[0] == "included" and decision(own, old)[2] == "superseded"
    # a replacement on a sibling branch is not part of this history: the old fact stays current
    g.branch("b-alt", "c", "alt", "2026-01-01 00:00:03", parent="b-main", fork=m.user_msg)
    g.get("tool_memories", new).update(branch_id="b-alt", visibility_scope="branch")
    assert decision(m.assemble(at), old) == ("included", "compact_memory", "compact_memory")


def test_raw_replaced_by_memory_only_when_that_memory_is_in_the_prompt() -> None:
    m = Mini()
    call = m.g.call(m.run, "sheets.export_csv", {}, "2026-01-01 00:00:05", "2026-01-01 00:00:06")
    art = m.g.artifact(call, "a,b\n1,2\n", "2026-01-01 00:00:06", content_type="text/csv")
    mem = m.g.memory("b-main", [art], "CSV with a and b.", "2026-01-01 00:00:07", freshness="volatile")
    fresh = m.assemble("2026-01-01 00:01:00", policy("v1"))
    assert decision(fresh, mem)[0] == "included"
    assert decision(fresh, art) == ("omitted", None, "raw_replaced_by_memory")
    assert fresh.record(art)["detail"] == f"replaced by compact memory {mem}"
    # a day later the memory is stale and omitted: the raw artifact is decided on its own
    stale = m.assemble("2026-01-02 00:01:00", policy("v1"))
    assert decision(stale, mem) == ("omitted", None, "stale")
    assert decision(stale, art) == ("included", "reference", "lineage")
    assert stale.record(art)["detail"] == f"its compact memory {mem} is not in the prompt (stale); shown as a reference"
    # the memory's own budget fate counts too
    m.g.get("tool_memories", mem)["content_tokens"] = 5000
    starved = m.assemble("2026-01-01 00:01:00", policy("v1", **{"budget.token_budget": 600}))
    assert decision(starved, mem)[2] == "over_budget"
    assert decision(starved, art)[2] != "raw_replaced_by_memory"


def test_provider_rules_match_the_provider_in_any_case() -> None:
    m = Mini()
    other_run = m.g.run("b-main", "p-other", "2026-01-01 00:00:03", None)  # provider openai
    mem = m.g.memory("b-main", [], "PRD summary", "2026-01-01 00:00:04", privacy="google_derived")
    texts = {v: POLICY_TOML[v] for v in ("v1", "v2")}
    texts["v3"] = ('version = "v3"\nextends = "v2"\ndescription = "x"\n'
                   '[privacy.providers.OpenAI]\nblocked_classes = ["google_derived"]\n')
    pol = PolicyRegistry.from_texts(texts).get("v3")
    assert decision(m.assemble("2026-01-01 00:01:00", pol, run=other_run), mem)[2] == "provider_restricted"
    req = m.request("2026-01-01 00:01:00", other_run)
    req.provider = "OPENAI"
    assert decision(assemble(Snapshot(m.g.tables), req, pol), mem)[2] == "provider_restricted"
