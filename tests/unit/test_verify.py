"""Verify, replay and diff over the sample store; the incident; safety findings; tokens."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Iterator

import pytest

from ingest.errors import ContextlensError
from ingest.store import Store
from replay import service
from replay.assembler import selection_hash
from replay.policy import PolicyRegistry, bundled_policies_dir, load_registry

REG = load_registry(None)
INCIDENT_V5 = ["asm-033", "asm-034", "asm-035", "asm-036", "asm-037", "asm-038"]


@pytest.fixture(scope="module")
def store(sample_db: Path) -> Iterator[Store]:
    with Store.open(sample_db) as s:
        yield s


def calendar_memory(store: Store) -> str:
    graph = store.conversation_graph("c-ops").get("tool_memories").to_pylist()
    (mem,) = [m for m in graph if "calendar.freebusy" in m["source_tool_names"]]
    return mem["memory_id"]


def test_verify_finds_exactly_the_drift_story(store: Store) -> None:
    seen: list[tuple[int, int]] = []
    result = service.verify(store, REG, progress=lambda done, total: seen.append((done, total)))
    drift_ids = store.list_assemblies(flt="scenario:drift_supersession").column("assembly_id").to_pylist()
    total = store.count_assemblies()
    assert result.checked == total
    assert [d.assembly_id for d in result.results] == sorted(drift_ids) == ["asm-013", "asm-014", "asm-015"]
    assert {d.verdict for d in result.results} == {"drifted"} and result.drifted == len(drift_ids)
    assert result.faithful == total - len(drift_ids)
    assert result.inconsistent == result.not_replayable == 0 and result.missing_policies is None
    assert not result.ok and result.failed() and result.failed(strict=True)
    assert seen[0] == (0, total) and seen[-1] == (total, total)
    assert [s[0] for s in seen] == list(range(total + 1))
    for d in result.results:
        assert d.assembler_version == "ref-1.0.0-bad" and d.policy_version == "v4"
        # the recording is consistent with itself; only the replay differs
        assert d.recorded_hash == d.recomputed_hash != d.replay_hash and not d.problems
        fields = {r.record_id: {f.field: (f.recorded, f.replayed) for f in r.fields} for r in d.records}
        # the bad build kept the obsolete memory and dropped its replacement
        (kept,) = [rid for rid, f in fields.items() if f.get("decision") == ("included", "omitted")]
        (dropped,) = [rid for rid, f in fields.items() if f.get("decision") == ("omitted", "included")]
        assert fields[kept]["reason_code"] == ("compact_memory", "superseded")
        assert fields[dropped]["reason_code"] == ("superseded", "compact_memory")
        # the records after the obsolete memory moved up one position, nothing else changed
        others = {rid: f for rid, f in fields.items() if rid not in (kept, dropped)}
        assert others and all(set(f) == {"position"} for f in others.values())
        assert all(a == b + 1 for f in others.values() for a, b in [f["position"]])
    js = result.to_json()
    assert (js["checked"], js["faithful"], js["drifted"]) == (total, total - 3, 3)
    assert [r["verdict"] for r in js["results"]] == ["drifted"] * 3


def test_verify_judges_safety_with_the_one_safety_function(store: Store) -> None:
    """The drift build sent a superseded memory: verify says the recording sent it and the
    faithful replay withholds it (the same function diff and lint use)."""
    result = service.verify(store, REG)
    for item in result.results:
        assert {(f["record_id"], f["finding"]) for f in item.safety.in_recording} == {
            ("mem-005", "superseded")}
        assert {(f["record_id"], f["finding"]) for f in item.safety.fixes} == {
            ("mem-005", "superseded")}
        assert item.safety.regressions == []
        assert item.to_json()["safety"]["in_recording"][0]["finding"] == "superseded"


def test_verify_with_a_filter_and_a_missing_policy(store: Store, tmp_path: Path) -> None:
    only = service.verify(store, REG, flt="scenario:incident_calendar_freshness")
    assert only.checked == 10 and only.faithful == 10 and only.ok and not only.results
    folder = tmp_path / "policies"
    shutil.copytree(bundled_policies_dir(), folder)
    (folder / "v6.toml").unlink()
    partial = service.verify(store, PolicyRegistry(folder), flt="policy:v6")
    assert partial.checked == 2 and partial.faithful == 0 and partial.not_replayable == 2
    assert [(r.assembly_id, r.verdict) for r in partial.results] == [
        ("asm-039", "not_replayable"), ("asm-040", "not_replayable")]
    assert all(r.replay_hash is None and not r.records for r in partial.results)
    # one line for all of them, naming the version and how many requests recorded it
    assert partial.missing_policies is not None and "lacks v6 recorded by 2 requests" in partial.missing_policies
    assert partial.ok and not partial.failed() and partial.failed(strict=True)


def test_recorded_assembly_matches_the_store(store: Store) -> None:
    rec = service.recorded_assembly(store, "asm-020")
    row = store.assembly("asm-020")
    assert rec.selection_hash == row["selection_hash"] == selection_hash(rec.records)
    assert rec.assembled_tokens == row["assembled_tokens"]
    assert rec.assembler == "recorded/ref-1.0.0" and rec.policy_version == "v4"
    assert {"assembly_id", "record_kind", "record_id", "decision", "rendering", "position",
            "policy_family", "reason_code", "detail", "tokens"} == set(rec.records[0])
    assert rec.decisions and "export_id" not in rec.decisions[0]


def test_replay_under_the_recorded_policy_reproduces_records_and_baseline(store: Store) -> None:
    for row in store.assembly_requests().to_pylist():
        out = service.replay(store, row["assembly_id"], row["policy_version"], REG)
        assert out.baseline_tokens == row["baseline_tokens"], row["assembly_id"]
        assert out.baseline_message_count == row["baseline_message_count"]
        if "drift" not in row["tags"]:
            rec = service.recorded_assembly(store, row["assembly_id"])
            assert out.records == rec.records  # details too, not just the hash
            assert out.decisions == rec.decisions


@pytest.mark.parametrize("version", ["v4", "v6"])
def test_incident_replayed_under_v4_or_v6_shows_a_stale_marker(store: Store, version: str) -> None:
    mem = calendar_memory(store)
    for aid in INCIDENT_V5:
        assert store.assembly(aid)["policy_version"] == "v5"
        recorded = service.recorded_assembly(store, aid).record(mem)
        assert (recorded["rendering"], recorded["reason_code"]) == ("compact_memory", "compact_memory")
        replayed = service.replay(store, aid, version, REG).record(mem)
        assert (replayed["decision"], replayed["rendering"]) == ("included", "stale_marker")
        assert "stale since 2026-10-27 " in replayed["detail"]
        assert "revalidate with calendar.freebusy" in replayed["detail"]
        d = service.diff(store, aid, version, registry=REG)
        (change,) = [c for c in d.changes if c["record_id"] == mem]
        assert change["change"] == "rendering_changed"
        assert change["a"]["rendering"] == "compact_memory" and change["b"]["rendering"] == "stale_marker"
        assert not d.safety


def test_diff_against_another_version(store: Store) -> None:
    mem = calendar_memory(store)
    d = service.diff(store, "asm-035", "v6", against="v5", registry=REG)
    assert (d.a_label, d.b_label) == ("replay v5", "replay v6")
    (change,) = [c for c in d.changes if c["record_id"] == mem]
    assert change["change"] == "rendering_changed"
    same = service.diff(store, "asm-035", "v5", registry=REG)
    assert same.summary["counts"]["unchanged"] == len(same.changes)
    with pytest.raises(ContextlensError, match="unknown policy version 'v0'"):
        service.diff(store, "asm-035", "v0", registry=REG)
    with pytest.raises(ContextlensError, match="unknown assembly"):
        service.replay(store, "asm-999", "v4", REG)


def test_unblocking_privacy_shows_safety_findings(store: Store, tmp_path: Path) -> None:
    folder = tmp_path / "policies"
    shutil.copytree(bundled_policies_dir(), folder)
    (folder / "v7.toml").write_text(
        'version = "v7"\nextends = "v6"\ndescription = "unsafe: send everything"\n\n'
        '[privacy]\nraw_blocked_classes = []\n\n[privacy.providers.openai]\nblocked_classes = []\n'
        '\n[budget]\ntoken_budget = 100000\n')
    reg = PolicyRegistry(folder)
    claude_id, gpt_id = store.list_assemblies(flt="scenario:google_derived_privacy").column("assembly_id").to_pylist()
    gd = service.diff(store, gpt_id, "v7", registry=reg)
    regressions = gd.safety.regressions
    assert regressions and {f["finding"] for f in regressions} == {"restricted_raw"}
    by_id = {c["record_id"]: c for c in gd.changes}
    assert all(by_id[f["record_id"]]["a"]["reason_code"] == "provider_restricted" for f in regressions)
    assert all(by_id[f["record_id"]]["b"]["rendering"] == "compact_memory" for f in regressions)
    assert gd.changes[0]["safety"] and gd.changes[0]["change"] == "newly_included"
    assert [c["record_id"] for c in gd.changes[: len(regressions)]] == [f["record_id"] for f in regressions]
    # for Claude the raw PRD stays out: unblocked, it is still replaced by its summary
    cd = service.diff(store, claude_id, "v7", registry=reg)
    raw = [c for c in cd.changes if c["a"] and c["a"]["reason_code"] == "privacy_restricted"]
    assert raw and all(c["b"]["reason_code"] == "raw_replaced_by_memory" for c in raw)
    assert all(c["change"] == "reason_changed" for c in raw) and not cd.safety
    js = gd.to_json()
    assert js["summary"]["safety"] == len(js["safety"]["regressions"]) and js["a_label"] == "recorded v4"


def test_token_report_per_scenario(store: Store) -> None:
    rows = service.token_report(store)
    by = {r["scenario"]: r for r in rows}
    assert rows[-1]["scenario"] == "(all)"
    assert by["(all)"]["assemblies"] == store.count_assemblies()
    assert by["incident_calendar_freshness"]["assemblies"] == 10
    for r in rows:
        assert r["baseline_tokens"] > r["assembled_tokens"] > 0
        assert 0 < r["reduction"] < 1
        assert r["reduction"] == round(1 - r["assembled_tokens"] / r["baseline_tokens"], 4)
    assert sum(r["baseline_tokens"] for r in rows[:-1]) == by["(all)"]["baseline_tokens"]
