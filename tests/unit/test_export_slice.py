"""An export slice holds the conversation as of its request, and a replay over it equals a
replay over the whole store, for every request of the sample under every policy version."""

from __future__ import annotations

from pathlib import Path

import pyarrow.compute as pc

from ingest.store import Store
from replay.assembler import get_assembler
from replay.policy import load_registry
from replay.safety import SafetyContext
from replay.snapshot import GRAPH_TABLES, Snapshot, _rows, load_snapshot, request_from_row


def _slice_snapshot(tables: dict) -> Snapshot:
    return Snapshot({name: _rows(tables[name], name) for name in GRAPH_TABLES})


def test_replays_over_every_slice_equal_replays_over_the_store(sample_db: Path) -> None:
    registry = load_registry(None)
    reference = get_assembler("reference")
    with Store.open(sample_db) as store:
        ids = store.list_assemblies(None)["assembly_id"].to_pylist()
        assert len(ids) > 40
        for aid in ids:
            row = store.assembly(aid)
            request = request_from_row(row)
            whole = load_snapshot(store, row["conversation_id"], row["export_id"])
            piece = store.export_slice(aid)
            part = _slice_snapshot(piece.tables)
            for version in registry.versions():
                policy = registry.get(version)
                a = reference.assemble(whole, request, policy)
                b = reference.assemble(part, request, policy)
                assert (aid, version, b.selection_hash, b.assembled_tokens) == (
                    aid, version, a.selection_hash, a.assembled_tokens)
                assert (SafetyContext(part, request, registry).findings(b.records)
                        == SafetyContext(whole, request, registry).findings(a.records))


def test_a_slice_is_the_conversation_as_of_its_request(sample_db: Path) -> None:
    with Store.open(sample_db) as store:
        row = store.assembly("asm-033")
        piece = store.export_slice("asm-033")
        graph = store.conversation_graph(row["conversation_id"])
    at = row["assembled_at"]
    messages = piece.tables["messages"]
    # the conversation goes on after the request; the slice stops at it
    later = graph["messages"].filter(pc.greater(graph["messages"]["created_at"], at))
    assert later.num_rows > 0
    assert not set(later["message_id"].to_pylist()) & set(messages["message_id"].to_pylist())
    assert pc.all(pc.less_equal(messages["created_at"], at)).as_py()
    # only the request itself, with its own records and trace
    assert piece.tables["context_assemblies"]["assembly_id"].to_pylist() == ["asm-033"]
    assert set(piece.tables["assembly_records"]["assembly_id"].to_pylist()) == {"asm-033"}
    assert set(piece.tables["policy_decisions"]["assembly_id"].to_pylist()) == {"asm-033"}
    # every record the request weighed is in the slice
    for kind, table, col in (("message", "messages", "message_id"),
                             ("tool_artifact", "tool_artifacts", "artifact_id"),
                             ("tool_memory", "tool_memories", "memory_id")):
        records = piece.tables["assembly_records"]
        named = set(records.filter(pc.equal(records["record_kind"], kind))["record_id"].to_pylist())
        assert named <= set(piece.tables[table][col].to_pylist())


def test_rows_after_the_request_that_it_names_are_in_the_slice(tmp_path: Path) -> None:
    """A memory written before the request names an artifact written after it: a replay
    looks the artifact up (else the memory's provenance is broken), so the slice holds it,
    and the slice is a valid export of its own."""
    from ingest.reexport import write_export
    from ingest.store import ingest
    from support.stores import make_export, ts

    def later_artifact(rows: dict) -> None:
        for call in rows["tool_calls"]:
            call["requested_at"] = call["completed_at"] = ts(3)
        for art in rows["tool_artifacts"]:
            art["created_at"] = ts(3)
        rows["assembly_records"] = [r for r in rows["assembly_records"]
                                    if r["record_kind"] not in ("tool_artifact", "tool_call")]
        rows["policy_decisions"] = [d for d in rows["policy_decisions"]
                                    if d["record_kind"] != "tool_artifact"]

    db = tmp_path / "store.duckdb"
    ingest(make_export(tmp_path / "export", edit=later_artifact), db)
    registry = load_registry(None)
    reference = get_assembler("reference")
    with Store.open(db) as store:
        row = store.assembly("as1")
        request = request_from_row(row)
        piece = store.export_slice("as1")
        whole = load_snapshot(store, row["conversation_id"], row["export_id"])
    assert "a1" in piece.tables["tool_artifacts"]["artifact_id"].to_pylist()
    part = _slice_snapshot(piece.tables)
    for version in registry.versions():
        a = reference.assemble(whole, request, registry.get(version))
        b = reference.assemble(part, request, registry.get(version))
        assert b.selection_hash == a.selection_hash, version
    out = write_export(tmp_path / "slice", "slice-1", "tests", piece.tables)
    ingest(out, tmp_path / "slice.duckdb")
    with Store.open(tmp_path / "slice.duckdb") as again:
        assert again.list_assemblies(None)["assembly_id"].to_pylist() == ["as1"]
