"""context_assemblies.context_limit: an optional column added to contract v1. Exports written
before it (without the column) still load, with context_limit null, and replay then uses the
policy's budget uncapped."""

from __future__ import annotations

from pathlib import Path

from support.stores import make_export, prefixed_ids, read_table, rewrite_table

from ingest.store import Store, ingest
from replay.assembler import assemble
from replay.policy import load_registry
from replay.snapshot import load_request, load_snapshot


def test_an_export_without_context_limit_loads_with_nulls_and_replays(tmp_path: Path) -> None:
    export = make_export(tmp_path / "exp", export_id="exp-old")
    table = read_table(export, "context_assemblies")
    assert "context_limit" in table.column_names
    rewrite_table(export, "context_assemblies", table.drop_columns(["context_limit"]))
    db = tmp_path / "store.duckdb"
    ingest(export, db)
    # a newer export with the column goes into the same store
    newer = make_export(tmp_path / "new", export_id="exp-new", edit=prefixed_ids("new-"))
    ingest(newer, db)
    with Store.open(db) as store:
        rows = store.assembly_requests().to_pylist()
        assert {r["export_id"] for r in rows} == {"exp-old", "exp-new"}
        assert all(r["context_limit"] is None for r in rows if r["export_id"] == "exp-old")
        aid = next(r["assembly_id"] for r in rows if r["export_id"] == "exp-old")
        req = load_request(store, aid)
        assert req.context_limit is None
        a = assemble(load_snapshot(store, req.conversation_id), req, load_registry(None).get("v4"))
        assert a.assembly_id == aid
