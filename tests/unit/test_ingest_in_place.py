"""Adding an export to an existing store writes it in place, in one transaction: the
previous exports keep their rows and their verify results, and a failure part way through
the write leaves none of the new export behind."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ingest.errors import ContextlensError
from ingest.store import Store, ingest
from ingest.store.database import STORE_TABLES
from replay import service
from replay.policy import load_registry
from replay.sample_export import write_sample
from support.stores import make_export, prefixed_ids, read_table, rewrite_table

REG = load_registry(None)
SCALE = 40


def _rows_by_export(db: Path) -> dict[str, dict[str, Any]]:
    """Each export's rows of each table as (count, sum of row hashes); its manifest."""
    con = duckdb.connect(str(db), read_only=True)
    try:
        out: dict[str, dict[str, Any]] = {}
        for t in STORE_TABLES:
            cols = "manifest_json" if t == "exports" else "count(*), sum(hash(x))::VARCHAR"
            group = "" if t == "exports" else " GROUP BY export_id"
            for row in con.execute(f"SELECT export_id, {cols} FROM {t} AS x{group}").fetchall():
                out.setdefault(row[0], {})[t] = list(row[1:])
        return out
    finally:
        con.close()


def _verify(db: Path) -> dict[str, Any]:
    with Store.open(db) as s:
        result = service.verify(s, REG).to_json()
    return {r["assembly_id"]: r for r in result["results"]} | {"checked": result["checked"]}


@pytest.fixture
def story_store(sample_export: Path, tmp_path: Path) -> Path:
    db = tmp_path / "s.duckdb"
    ingest(sample_export, db)
    return db


def test_an_added_export_leaves_the_previous_rows_and_verify_results_unchanged(
    story_store: Path, tmp_path: Path
) -> None:
    before = _rows_by_export(story_store)
    verified = _verify(story_store)
    inode = story_store.stat().st_ino
    scaled = write_sample(tmp_path / "scaled", scale=SCALE)

    result = ingest(scaled, story_store)

    assert result.changed and result.rows["context_assemblies"] == SCALE
    assert story_store.stat().st_ino == inode  # written in place, not replaced by a copy
    after = _rows_by_export(story_store)
    assert {k: v for k, v in after.items() if k in before} == before
    (added,) = set(after) - set(before)
    assert added == result.export_id
    assert after[added]["context_assemblies"][0] == SCALE
    # the story's verdicts are the same; the scaled export's requests are checked too
    again = _verify(story_store)
    assert again.pop("checked") == verified.pop("checked") + SCALE
    assert {k: v for k, v in again.items() if k in verified} == verified
    assert set(verified) == {"asm-013", "asm-014", "asm-015"}  # the story's drift
    with Store.open(story_store) as s:
        assert [e["export_id"] for e in s.exports()] == sorted([*before, added])
        first = pq.read_table(scaled / "context_assemblies.parquet", columns=["assembly_id"])
        assert s.assembly_records(first["assembly_id"][0].as_py()).num_rows > 0  # it answers


def test_a_failure_half_way_through_the_write_leaves_none_of_the_new_export(
    monkeypatch, story_store: Path, tmp_path: Path
) -> None:
    import ingest.store.loading as loading

    before = _rows_by_export(story_store)
    scaled = write_sample(tmp_path / "scaled", scale=SCALE)
    real = loading._add_missing_columns
    written: list[str] = []

    def fail_at_the_records(con, name, staged):
        if name == "assembly_records":  # conversations ... context_assemblies are written
            raise duckdb.IOException("Could not write file: disk I/O error")
        written.append(name)
        real(con, name, staged)

    monkeypatch.setattr(loading, "_add_missing_columns", fail_at_the_records)
    with pytest.raises(ContextlensError, match="table assembly_records"):
        ingest(scaled, story_store)
    assert "context_assemblies" in written
    assert _rows_by_export(story_store) == before
    assert not [p for p in tmp_path.iterdir() if ".tmp-" in p.name or p.suffix == ".lock"]

    monkeypatch.setattr(loading, "_add_missing_columns", real)
    assert ingest(scaled, story_store).changed  # retried, it goes in
    assert set(_rows_by_export(story_store)) == {*before, f"scale-{SCALE}-seed7"}


def test_reingesting_an_export_with_other_content_replaces_its_rows_in_one_step(
    monkeypatch, tmp_path: Path
) -> None:
    import ingest.store.loading as loading

    db = tmp_path / "s.duckdb"
    ingest(make_export(tmp_path / "v1"), db)
    before = _rows_by_export(db)

    def retitle(rows):
        rows["conversations"][0]["title"] = "Budget review, again"

    changed = make_export(tmp_path / "v2", edit=retitle)
    real = loading._add_missing_columns

    def fail_late(con, name, staged):
        if name == "exports":  # every table's old rows deleted and new ones inserted
            raise duckdb.IOException("Could not write file: disk I/O error")
        real(con, name, staged)

    monkeypatch.setattr(loading, "_add_missing_columns", fail_late)
    with pytest.raises(ContextlensError, match="table exports"):
        ingest(changed, db)
    assert _rows_by_export(db) == before  # the old rows, all of them

    monkeypatch.setattr(loading, "_add_missing_columns", real)
    assert ingest(changed, db).changed
    after = _rows_by_export(db)
    assert set(after) == {"exp-test"}
    assert after["exp-test"]["conversations"] != before["exp-test"]["conversations"]
    assert after["exp-test"]["messages"] == before["exp-test"]["messages"]
    assert json.loads(after["exp-test"]["exports"][0]) != json.loads(before["exp-test"]["exports"][0])
    with Store.open(db) as s:
        assert len(s.exports()) == 1
        assert sorted(s.conversation_graph("c1").get("conversations").column("title").to_pylist()) == [
            "Budget review, again"
        ]


@pytest.mark.parametrize("name", ["incoming.duckdb", "incoming_export.duckdb", "stage.duckdb"])
def test_a_store_named_like_the_attached_export_still_takes_a_second_export(
    name: str, tmp_path: Path
) -> None:
    db = tmp_path / name
    ingest(make_export(tmp_path / "one", export_id="exp-1"), db)
    assert ingest(make_export(tmp_path / "two", export_id="exp-2", edit=prefixed_ids("x")), db).changed
    assert set(_rows_by_export(db)) == {"exp-1", "exp-2"}


def test_an_added_export_with_an_extra_column_adds_it_to_the_store(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    ingest(make_export(tmp_path / "one", export_id="exp-1"), db)

    two = make_export(tmp_path / "two", export_id="exp-2", edit=prefixed_ids("x"))
    data = read_table(two, "messages")
    rewrite_table(two, "messages", data.append_column("sentiment", pa.array(["ok", "good"])))
    ingest(two, db)
    with Store.open(db) as store:
        assert store.record("message", "xmsg2")["sentiment"] == "good"
        assert store.record("message", "msg2")["sentiment"] is None
