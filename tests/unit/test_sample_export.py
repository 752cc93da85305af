"""The sample export: deterministic, valid under the contract, and telling its stories."""

from __future__ import annotations

import hashlib
import json
import tomllib
from collections import Counter, defaultdict
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.contract import ENUMS, INCLUDED_REASONS, OMITTED_REASONS, TABLES
from replay.policy import PolicyRegistry
from replay.sample.policies import POLICY_TOML

# the effective settings of a version, its extends chain merged, as the assembler sees them
resolve = PolicyRegistry.from_texts(POLICY_TOML).settings
from replay.sample_export import SCENARIOS, selection_hash, write_sample
from sample_data import SAMPLE_DIR


def read_export(root: Path) -> dict[str, pa.Table]:
    manifest = json.loads((root / "manifest.json").read_text())
    out = {}
    for name, info in manifest["tables"].items():
        out[name] = pa.concat_tables([pq.read_table(root / f) for f in info["files"]])
    return out


def rows(t: pa.Table) -> list[dict]:
    return t.to_pylist()


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_sample(tmp_path_factory.mktemp("story") / "export", seed=7)


@pytest.fixture(scope="module")
def tables(story: Path) -> dict[str, pa.Table]:
    return read_export(story)


@pytest.fixture(scope="module")
def assemblies(tables: dict[str, pa.Table]) -> dict[str, dict]:
    return {a["assembly_id"]: a for a in rows(tables["context_assemblies"])}


@pytest.fixture(scope="module")
def records(tables: dict[str, pa.Table]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = defaultdict(list)
    for r in rows(tables["assembly_records"]):
        out[r["assembly_id"]].append(r)
    return out


def by_scenario(assemblies: dict[str, dict], name: str) -> list[dict]:
    return [a for a in assemblies.values() if f"scenario:{name}" in a["tags"]]


def record(records: dict[str, list[dict]], assembly_id: str, record_id: str) -> dict:
    (r,) = [r for r in records[assembly_id] if r["record_id"] == record_id]
    return r


def check_contract(tabs: dict[str, pa.Table]) -> None:
    """Every row valid: enums closed, required columns set, keys unique, hard keys resolve."""
    for name, spec in TABLES.items():
        t = tabs[name]
        assert t.schema.names == spec.column_names, name
        for col in spec.columns:
            arr = t.column(col.name)
            if not col.nullable:
                assert arr.null_count == 0, (name, col.name)
            if col.enum:
                values = set(arr.drop_null().unique().to_pylist())
                assert values <= set(ENUMS[col.enum]), (name, col.name, values - set(ENUMS[col.enum]))
        key = t.select(list(spec.primary_key)).to_pylist()
        assert len({tuple(k.values()) for k in key}) == t.num_rows, f"{name}: duplicate keys"
        for fk in spec.foreign_keys:
            if fk.soft:
                continue
            targets = set(tabs[fk.table].column(fk.target).to_pylist())
            values = set(t.column(fk.column).drop_null().to_pylist())
            assert values <= targets, (name, fk.column, sorted(values - targets)[:3])


# ---------------------------------------------------------------------------- determinism
def test_same_seed_gives_identical_files(story: Path, tmp_path: Path) -> None:
    again = write_sample(tmp_path / "again", seed=7)
    assert (again / "manifest.json").read_bytes() == (story / "manifest.json").read_bytes()
    for blob in (story / "blobs").iterdir():
        assert (again / "blobs" / blob.name).read_bytes() == blob.read_bytes()


def test_other_seed_differs_and_is_valid(story: Path, tmp_path: Path) -> None:
    other = write_sample(tmp_path / "other", seed=8)
    a = json.loads((story / "manifest.json").read_text())["tables"]
    b = json.loads((other / "manifest.json").read_text())["tables"]
    assert any(a[t]["sha256"] != b[t]["sha256"] for t in a)
    check_contract(read_export(other))


def test_committed_sample_is_a_fresh_regeneration(tables: dict[str, pa.Table], story: Path) -> None:
    """Nobody hand-edits sample_data/: it must equal `write_sample(seed=7)` row for row."""
    committed = read_export(SAMPLE_DIR)
    for name in TABLES:
        assert committed[name].equals(tables[name]), f"sample_data/{name} differs; regenerate it"
    assert sorted(p.name for p in (SAMPLE_DIR / "blobs").iterdir()) == sorted(
        p.name for p in (story / "blobs").iterdir())
    for p in (story / "policies").iterdir():
        assert (SAMPLE_DIR / "policies" / p.name).read_text() == p.read_text()
    assert (SAMPLE_DIR / "__init__.py").exists()


def test_committed_sample_is_small() -> None:
    size = sum(p.stat().st_size for p in SAMPLE_DIR.rglob("*") if p.is_file())
    assert size < 2_000_000


def test_writing_into_a_folder_keeps_its_other_files(tmp_path: Path) -> None:
    out = tmp_path / "pkg"
    out.mkdir()
    (out / "__init__.py").write_text("# keep me\n")
    (out / "assembly_records.parquet").write_text("stale leftover")
    write_sample(out, seed=3)
    assert (out / "__init__.py").read_text() == "# keep me\n"
    check_contract(read_export(out))
    assert not any(p.name.startswith(".") for p in tmp_path.iterdir())


# ---------------------------------------------------------------------------- validity
def test_story_rows_are_valid_under_the_contract(tables: dict[str, pa.Table]) -> None:
    check_contract(tables)


def test_every_scenario_is_tagged(assemblies: dict[str, dict]) -> None:
    tagged = Counter(t for a in assemblies.values() for t in a["tags"] if t.startswith("scenario:"))
    assert set(tagged) == {f"scenario:{s}" for s in SCENARIOS}
    for a in assemblies.values():
        assert sum(t.startswith("scenario:") for t in a["tags"]) <= 1, a["assembly_id"]


def test_the_graph_has_branches_participants_and_subagents(tables: dict[str, pa.Table],
                                                           assemblies: dict[str, dict]) -> None:
    assert tables["conversations"].num_rows >= 3
    assert len(assemblies) >= 40
    branches = rows(tables["branches"])
    forks = [b for b in branches if b["parent_branch_id"]]
    assert forks and all(b["fork_message_id"] for b in forks)
    siblings = Counter(b["parent_branch_id"] for b in forks)
    assert max(siblings.values()) >= 2  # a fork with a sibling branch
    runs = rows(tables["model_runs"])
    run_ids = {r["model_run_id"] for r in runs}
    children = [r for r in runs if r["runtime_kind"] == "subagent_child"]
    assert children and all(r["parent_model_run_id"] in run_ids for r in children)
    models = defaultdict(set)
    for p in rows(tables["participants"]):
        if p["kind"] in ("model", "moderator", "subagent"):
            models[p["conversation_id"]].add(p["participant_id"])
    multi = {r["conversation_id"] for r in runs if r["runtime_kind"] in ("multi_model", "autonomous_discussion")}
    assert multi and all(len(models[c]) >= 2 for c in multi)
    assert {r["runtime_kind"] for r in runs} == set(ENUMS["runtime_kind"])


def test_records_and_counts_agree(assemblies: dict[str, dict], records: dict[str, list[dict]],
                                  tables: dict[str, pa.Table]) -> None:
    for aid, a in assemblies.items():
        recs = records[aid]
        inc = [r for r in recs if r["decision"] == "included"]
        assert a["assembled_tokens"] == sum(r["tokens"] for r in inc), aid
        assert sorted(r["position"] for r in inc) == list(range(len(inc))), aid
        assert a["assembled_message_count"] == sum(r["record_kind"] == "message" for r in inc)
        assert a["selected_memory_count"] == sum(r["record_kind"] == "tool_memory" for r in inc)
        assert a["raw_artifact_count"] == sum(r["record_kind"] == "tool_artifact" for r in inc)
        assert a["rehydrated_artifact_count"] == sum(r["rendering"] == "rehydrated_raw" for r in inc)
        assert a["selection_hash"] == selection_hash(recs), aid
        for r in recs:
            if r["decision"] == "included":
                assert r["rendering"] and r["reason_code"] in INCLUDED_REASONS, r
            else:
                assert r["rendering"] is None and r["position"] is None, r
                assert r["reason_code"] in OMITTED_REASONS and r["detail"], r
    # most requests cost far less than replaying the lineage raw
    cheaper = [a for a in assemblies.values() if a["assembled_tokens"] < a["baseline_tokens"]]
    assert len(cheaper) > len(assemblies) * 3 // 4


def test_selection_hash_is_order_free_and_canonical() -> None:
    recs = [("tool_memory", "m-2", "omitted", None, None), ("message", "m-1", "included", "verbatim", 0)]
    expected = hashlib.sha256(json.dumps(
        [["message", "m-1", "included", "verbatim", 0], ["tool_memory", "m-2", "omitted", None, None]],
        sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert selection_hash(recs) == selection_hash(list(reversed(recs))) == expected
    as_dicts = [dict(zip(("record_kind", "record_id", "decision", "rendering", "position"), r)) for r in recs]
    assert selection_hash(as_dicts) == expected
    assert selection_hash(pa.Table.from_pylist(as_dicts)) == expected


def test_policy_decisions_end_where_the_record_ends(tables: dict[str, pa.Table],
                                                    records: dict[str, list[dict]]) -> None:
    chains: dict[tuple, list[dict]] = defaultdict(list)
    for d in rows(tables["policy_decisions"]):
        chains[(d["assembly_id"], d["record_kind"], d["record_id"])].append(d)
    for aid, recs in records.items():
        for r in recs:
            chain = chains[(aid, r["record_kind"], r["record_id"])]
            assert chain, r
            steps = [d["step"] for d in chain]
            assert steps == sorted(steps) and len(set(steps)) == len(steps), chain
            last = chain[-1]
            assert (last["policy_family"], last["reason_code"]) == (r["policy_family"], r["reason_code"])
            if r["decision"] == "omitted":
                assert last["outcome"] in ("deny", "replace")


def test_records_exist_before_the_assembly_that_uses_them(tables: dict[str, pa.Table],
                                                          assemblies: dict[str, dict],
                                                          records: dict[str, list[dict]]) -> None:
    created = {}
    for kind, (table, key) in {"message": ("messages", "message_id"),
                               "tool_artifact": ("tool_artifacts", "artifact_id"),
                               "tool_memory": ("tool_memories", "memory_id"),
                               "skill_state": ("skill_states", "skill_state_id"),
                               "checkpoint": ("checkpoints", "checkpoint_id")}.items():
        for row in rows(tables[table]):
            created[(kind, row[key])] = row["created_at"]
    for row in rows(tables["tool_calls"]):
        created[("tool_call", row["tool_call_id"])] = row["requested_at"]
    for aid, recs in records.items():
        at = assemblies[aid]["assembled_at"]
        for r in recs:
            late = created[(r["record_kind"], r["record_id"])] > at
            assert late == (r["reason_code"] == "not_yet_created"), (aid, r)


# ---------------------------------------------------------------------------- the stories
def test_incident_memory_is_current_under_v5_and_stale_under_v4_and_v6(
        tables: dict[str, pa.Table], assemblies: dict[str, dict], records: dict[str, list[dict]]) -> None:
    incident = by_scenario(assemblies, "incident_calendar_freshness")
    versions = Counter(a["policy_version"] for a in incident)
    assert versions["v5"] >= 3 and versions["v4"] >= 1 and versions["v6"] >= 1
    (mem,) = [m for m in rows(tables["tool_memories"]) if "calendar.freebusy" in m["source_tool_names"]]
    assert mem["freshness_class"] in ("volatile", "bounded")
    assert mem["stale_after"] is not None
    for a in incident:
        assert mem["stale_after"] < a["assembled_at"]
        assert a["assembled_at"] - mem["observed_at"] > pa.scalar(24 * 3600 * 10**6, pa.duration("us")).as_py()
        r = record(records, a["assembly_id"], mem["memory_id"])
        assert r["decision"] == "included"
        if a["policy_version"] == "v5":
            assert (r["rendering"], r["reason_code"]) == ("compact_memory", "compact_memory")
        else:
            assert (r["rendering"], r["reason_code"]) == ("stale_marker", "stale_marker")
            assert "stale since" in r["detail"] and "calendar.freebusy" in r["detail"]
    policies = {v: resolve(v) for v in POLICY_TOML}
    assert policies["v5"]["freshness"]["volatile"] > 24 > policies["v4"]["freshness"]["volatile"]
    assert policies["v6"]["freshness"]["volatile"] <= policies["v4"]["freshness"]["volatile"]


def test_drift_build_keeps_the_obsolete_memory_and_drops_its_replacement(
        tables: dict[str, pa.Table], assemblies: dict[str, dict], records: dict[str, list[dict]]) -> None:
    drift = by_scenario(assemblies, "drift_supersession")
    assert len(drift) >= 2
    assert {a["assembler_version"] for a in drift} == {"ref-1.0.0-bad"}
    others = {a["assembler_version"] for a in assemblies.values() if a not in drift}
    assert others == {"ref-1.0.0"}
    mems = {m["memory_id"]: m for m in rows(tables["tool_memories"])}
    pairs = [(m["memory_id"], m["superseded_by"]) for m in mems.values() if m["superseded_by"]]
    assert pairs
    for old, new in pairs:
        assert old in mems[new]["supersedes"]
    for a in drift:
        old, new = pairs[0]
        assert record(records, a["assembly_id"], old)["decision"] == "included"
        r_new = record(records, a["assembly_id"], new)
        assert (r_new["decision"], r_new["reason_code"]) == ("omitted", "superseded")
    (correct,) = by_scenario(assemblies, "contradiction_supersession")
    old, new = pairs[0]
    assert record(records, correct["assembly_id"], old)["reason_code"] == "superseded"
    assert record(records, correct["assembly_id"], new)["decision"] == "included"
    both = [r for r in records[correct["assembly_id"]] if r["reason_code"] == "conflict_both_sides"]
    assert len(both) == 2


def test_csv_rehydration_uses_the_exact_blob(story: Path, tables: dict[str, pa.Table],
                                             assemblies: dict[str, dict],
                                             records: dict[str, list[dict]]) -> None:
    (a,) = by_scenario(assemblies, "exact_raw_csv_rehydration")
    (art_id,) = a["exact_evidence_ids"]
    art = {r["artifact_id"]: r for r in rows(tables["tool_artifacts"])}[art_id]
    assert art["content_type"] == "text/csv" and art["storage_ref"] == f"blobs/{art['sha256']}"
    body = (story / art["storage_ref"]).read_bytes()
    assert hashlib.sha256(body).hexdigest() == art["sha256"] and len(body) == art["byte_size"]
    assert body.startswith(b"task,owner,due,status\n")
    r = record(records, a["assembly_id"], art_id)
    assert (r["rendering"], r["reason_code"]) == ("rehydrated_raw", "rehydrated_exact")
    assert a["rehydrated_artifact_count"] == 1
    for blob in (story / "blobs").iterdir():
        assert hashlib.sha256(blob.read_bytes()).hexdigest() == blob.name


def test_deferred_picker_is_pending_at_assembly_time_and_completes_later(
        tables: dict[str, pa.Table], assemblies: dict[str, dict], records: dict[str, list[dict]]) -> None:
    calls = {c["tool_call_id"]: c for c in rows(tables["tool_calls"])}
    found = False
    for a in by_scenario(assemblies, "deferred_document_picker"):
        for r in records[a["assembly_id"]]:
            if r["record_kind"] == "tool_call" and r["reason_code"] == "recovery_protected":
                c = calls[r["record_id"]]
                assert c["requested_at"] < a["assembled_at"] < c["completed_at"]
                found = True
    assert found


def test_retry_critical_failure_is_protected_over_budget(tables: dict[str, pa.Table],
                                                         assemblies: dict[str, dict],
                                                         records: dict[str, list[dict]]) -> None:
    calls = {c["tool_call_id"]: c for c in rows(tables["tool_calls"])}
    (a,) = by_scenario(assemblies, "retry_critical_errors")
    protected = [r for r in records[a["assembly_id"]] if r["reason_code"] == "recovery_protected"]
    failed = [r for r in protected if r["record_kind"] == "tool_call"]
    assert failed and all(calls[r["record_id"]]["status"] == "failed" for r in failed)
    assert all(calls[r["record_id"]]["retryable"] for r in failed)
    assert a["assembled_tokens"] > a["token_budget"] - resolve(a["policy_version"])["budget"]["reserve_tokens"]
    assert any(r["reason_code"] == "over_budget" for r in records[a["assembly_id"]])


def test_branch_isolation_and_participant_privacy(assemblies: dict[str, dict],
                                                  records: dict[str, list[dict]]) -> None:
    for name, reason in (("branch_isolation", "sibling_branch"), ("branch_send", "sibling_branch"),
                         ("participant_visibility", "participant_private"),
                         ("autonomous_discussion_attribution", "participant_private"),
                         ("google_derived_privacy", "privacy_restricted"),
                         ("parent_resume", "child_not_promoted"),
                         ("child_subagent_artifacts", "audit_only"),
                         ("stale_connected_app_memory", "stale_marker")):
        found = {r["reason_code"] for a in by_scenario(assemblies, name) for r in records[a["assembly_id"]]}
        assert reason in found, name
    resume = by_scenario(assemblies, "parent_resume")[0]
    assert any(r["reason_code"] == "promoted_child_output" for r in records[resume["assembly_id"]])
    assert any(r["reason_code"] == "checkpoint_restore" for r in records[resume["assembly_id"]])
    google = {a["provider"]: {r["reason_code"] for r in records[a["assembly_id"]]}
              for a in by_scenario(assemblies, "google_derived_privacy")}
    assert "provider_restricted" in google["openai"] and "provider_restricted" not in google["anthropic"]
    talk = by_scenario(assemblies, "autonomous_discussion_attribution")
    assert any(r["reason_code"] == "speaker_context" for a in talk for r in records[a["assembly_id"]])


def test_broken_provenance_is_a_dangling_reference_shown_not_repaired(
        tables: dict[str, pa.Table], assemblies: dict[str, dict], records: dict[str, list[dict]]) -> None:
    arts = set(tables["tool_artifacts"].column("artifact_id").to_pylist())
    broken = [m for m in rows(tables["tool_memories"]) if set(m["source_artifact_ids"]) - arts]
    assert len(broken) == 1
    (a,) = by_scenario(assemblies, "broken_provenance")
    r = record(records, a["assembly_id"], broken[0]["memory_id"])
    assert (r["reason_code"], r["rendering"]) in (("broken_provenance", None),
                                                  ("stale_marker", "revalidation_hint"))


def test_untrusted_and_sensitive_content_is_present(tables: dict[str, pa.Table]) -> None:
    texts = (tables["messages"].column("content").to_pylist()
             + tables["tool_artifacts"].column("result_preview").to_pylist()
             + tables["tool_memories"].column("summary").to_pylist())
    assert any("[bold red]not markup[/]" in t for t in texts)
    assert any("\x1b[31m" in t for t in texts)
    assert any("\x1b]8;;" in t for t in texts)
    arts = rows(tables["tool_artifacts"])
    secret = [a for a in arts if a["privacy_class"] == "secret_adjacent"]
    assert secret and any("sk-live-" in a["result_preview"] and "Bearer " in a["result_preview"] for a in secret)
    classes = {a["privacy_class"] for a in arts} | set(tables["tool_memories"].column("privacy_class").to_pylist())
    assert {"oauth_derived", "google_derived", "secret_adjacent"} <= classes


def test_policy_files_match_and_extend(story: Path) -> None:
    names = sorted(p.stem for p in (story / "policies").glob("*.toml"))
    assert names == [f"v{i}" for i in range(1, 7)]
    for v in names:
        text = (story / "policies" / f"{v}.toml").read_text()
        assert text == POLICY_TOML[v]
        raw = tomllib.loads(text)
        assert raw["version"] == v and raw["description"]
        if v != "v1":
            assert raw["extends"] == f"v{int(v[1:]) - 1}"
    base = tomllib.loads(POLICY_TOML["v1"])  # the root of every chain states each family
    for family in ("window", "budget", "branch", "ownership", "visibility", "privacy", "freshness",
                   "contradiction", "recovery", "rehydration", "retention", "ranking"):
        assert family in base, family


# ---------------------------------------------------------------------------- scale mode
def test_scale_mode_writes_a_valid_proportional_export(tmp_path: Path) -> None:
    out = write_sample(tmp_path / "scale", seed=7, scale=200)
    tabs = read_export(out)
    check_contract(tabs)
    assert tabs["context_assemblies"].num_rows == 200
    assert 3000 <= tabs["assembly_records"].num_rows <= 5000
    for name in ("messages", "model_runs", "tool_calls", "tool_artifacts", "tool_memories"):
        assert 0 < tabs[name].num_rows <= 1000, name
    recs: dict[str, list[dict]] = defaultdict(list)
    for r in rows(tabs["assembly_records"]):
        recs[r["assembly_id"]].append(r)
    prompt_order = {"checkpoint": 0, "skill_state": 1, "tool_memory": 2, "message": 3,
                    "tool_call": 4, "tool_artifact": 5}
    for a in rows(tabs["context_assemblies"]):
        mine = recs[a["assembly_id"]]
        inc = sorted((r for r in mine if r["decision"] == "included"), key=lambda r: r["position"])
        assert [r["position"] for r in inc] == list(range(len(inc)))
        assert [prompt_order[r["record_kind"]] for r in inc] == sorted(prompt_order[r["record_kind"]] for r in inc)
        assert a["assembled_tokens"] == sum(r["tokens"] for r in inc)
        assert a["selection_hash"] == selection_hash(mine)
    reasons = set(tabs["assembly_records"].column("reason_code").to_pylist())
    assert {"in_window", "compact_memory", "not_yet_created", "sibling_branch", "superseded"} <= reasons
    again = write_sample(tmp_path / "scale-again", seed=7, scale=200)
    assert (again / "manifest.json").read_bytes() == (out / "manifest.json").read_bytes()


def test_recorded_budgets_are_the_policy_budgets_capped_by_the_context_limit(
        assemblies: dict[str, dict]) -> None:
    for a in assemblies.values():
        pol = resolve(a["policy_version"])
        assert a["context_limit"] is not None and a["context_limit"] > 0, a["assembly_id"]
        assert a["token_budget"] == min(pol["budget"]["token_budget"], a["context_limit"]), a["assembly_id"]
        assert a["byte_budget"] == pol["rehydration"]["byte_budget"], a["assembly_id"]
    (retry,) = by_scenario(assemblies, "retry_critical_errors")
    assert (retry["context_limit"], retry["token_budget"]) == (900, 900)
    gpt = [a for a in assemblies.values() if a["model"] == "gpt-4.1"]
    assert gpt and all(a["context_limit"] == 1_047_576 for a in gpt)
