"""The committed sample ingests cleanly and every query answers on every assembly."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.store import Store, ingest
from ingest.validate import validate_export


@pytest.fixture(scope="module")
def store(sample_db: Path):
    with Store.open(sample_db) as s:
        yield s


def test_sample_validates_with_only_broken_provenance_warnings(sample_export: Path) -> None:
    report = validate_export(sample_export)
    assert report.warnings, "the sample tells a broken-provenance story"
    assert all(w.endswith("(broken provenance)") for w in report.warnings), report.warnings
    assert report.rows["context_assemblies"] > 0


def test_sample_reingest_is_a_no_op(sample_export: Path, tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    first = ingest(sample_export, db)
    assert first.changed
    before = db.read_bytes()
    assert not ingest(sample_export, db).changed
    assert db.read_bytes() == before


def test_every_assembly_opens(store: Store) -> None:
    listing = store.list_assemblies()
    assert listing.num_rows == store.count_assemblies() > 0
    for row in listing.to_pylist():
        aid = row["assembly_id"]
        a = store.assembly(aid)
        records = store.assembly_records(aid)
        assert records.num_rows == a["included_count"] + a["omitted_count"]
        assert all(label is not None for label in records.column("label").to_pylist())
        prompt = store.prompt_records(aid)
        assert prompt.num_rows == a["included_count"]
        positions = prompt.column("position").to_pylist()
        assert positions == sorted(positions)
        store.policy_decisions(aid)


def test_broken_provenance_is_shown_never_invented(store: Store) -> None:
    exports = store.exports()
    broken = [w for e in exports for w in e["warnings"] if "broken provenance" in w]
    assert broken
    memory_id = broken[0].split("memory_id=")[1].split(")")[0]
    missing = broken[0].split("names missing tool_artifacts ")[1].split(" ")[0]
    chain = store.provenance("tool_memory", memory_id)
    link = next(l for l in chain if l["id"] == missing)
    assert link["broken"] and link["kind"] == "tool_artifact"
    assert store.record("tool_artifact", missing) is None


def test_scenarios_and_filters_on_the_sample(store: Store) -> None:
    scenarios = store.distinct_values("scenario")
    assert scenarios
    for name in scenarios:
        assert store.count_assemblies(f"scenario:{name}") >= 1
    for version in store.distinct_values("policy_version"):
        assert store.count_assemblies(f"policy:{version}") >= 1
    total = store.count_assemblies()
    conversations = store.conversations()
    assert sum(conversations.column("assembly_count").to_pylist()) == total
    for cid in conversations.column("conversation_id").to_pylist():
        assert store.branches(cid).num_rows >= 1
        store.model_runs(cid)
        store.assemblies_of_conversation(cid)


def test_sample_blobs_read_and_verify(store: Store) -> None:
    read = 0
    for row in store.list_assemblies().to_pylist():
        for rec in store.prompt_records(row["assembly_id"]).to_pylist():
            if rec["record_kind"] == "tool_artifact" and rec["storage_ref"]:
                body = store.read_blob(row["assembly_id"], rec["storage_ref"], rec["sha256"])
                assert isinstance(body, bytes)
                read += 1
    assert read > 0


def test_one_conversation_graph_is_the_many_form_for_that_conversation(store: Store) -> None:
    """Replay reads a graph per conversation or many at once; both must hold the same rows."""
    import pyarrow.compute as pc

    convs = store.conversations().to_pylist()
    export_id = store.exports()[0]["export_id"]
    ids = [c["conversation_id"] for c in convs]
    many = store.conversation_graphs(ids, export_id)
    artifacts = 0
    for cid in ids:
        one = store.conversation_graph(cid, export_id)
        for name, table in one.items():
            part = many[name].filter(pc.equal(many[name]["graph_conversation_id"], cid))
            assert part.drop_columns(["graph_conversation_id"]).equals(table), (cid, name)
        artifacts += one["tool_artifacts"].num_rows
    assert artifacts > 0 and len(ids) > 1
