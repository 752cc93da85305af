"""Identity across exports: an export whose primary keys repeat rows another export stored is
refused whole, through the command line: exit 2, one line naming the table, the first keys
and both exports, and the store left as it was, byte for byte. The same export again is
"already up to date", and an export ingested again with other content replaces its own rows
(neither is a collision)."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import duckdb
import pytest

from ingest.store import Store
from ingest.store.database import STORE_TABLES, connect
from support.cli import run
from support.planted_ids import ASM, CONV, EXPORT, leaked, make_planted_export
from support.stores import make_export, renamed_ids


def _state(db: Path) -> dict[str, Any]:
    """The store as bytes and as rows: its sha256, each table's row count and a checksum
    over every row."""
    con = connect(db, read_only=True)  # the store's own configuration: a reader may hold it
    try:
        rows = {
            t: con.execute(f"SELECT count(*), coalesce(sum(hash(x)), 0)::VARCHAR FROM {t} AS x").fetchone()
            for t in STORE_TABLES
        }
    finally:
        con.close()
    return {"sha256": hashlib.sha256(db.read_bytes()).hexdigest(), "rows": rows,
            "files": sorted(p.name for p in db.parent.iterdir() if p.name.startswith(db.name))}


@pytest.fixture
def store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    db = tmp_path / "store.duckdb"
    code, _out, err = run(capsys, "ingest", str(make_export(tmp_path / "first", export_id="run-1")), "--db", str(db))
    assert code == 0, err
    return db


def _refused(capsys: pytest.CaptureFixture[str], export: Path, db: Path) -> str:
    before = _state(db)
    code, out, err = run(capsys, "ingest", str(export), "--db", str(db))
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and out == ""
    assert _state(db) == before  # nothing written: same bytes, same rows, no leftover file
    return lines[0]


def test_a_second_export_repeating_the_stored_ids_is_refused_and_the_store_unchanged(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    line = _refused(capsys, make_export(tmp_path / "second", export_id="run-2"), store)
    assert "table conversations (conversation_id)" in line
    assert "c1, c2" in line  # the first colliding keys, in order
    assert "run-2" in line and "run-1" in line  # both exports
    assert str(tmp_path / "first") in line  # where the stored one came from
    with Store.open(store) as s:
        assert [e["export_id"] for e in s.exports()] == ["run-1"]


@pytest.mark.parametrize(("kept", "table", "key"), [
    ({"message_id"}, "messages", "msg1"),
    ({"assembly_id"}, "context_assemblies", "as1"),
])
def test_a_collision_in_any_table_names_that_table(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], kept: set[str], table: str, key: str
) -> None:
    export = make_export(tmp_path / "second", export_id="run-2", edit=renamed_ids(suffix="-b", keep=tuple(kept)))
    line = _refused(capsys, export, store)
    assert f"table {table} (" in line and key in line


def test_an_export_with_no_shared_ids_is_added(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = make_export(tmp_path / "second", export_id="run-2", edit=renamed_ids(suffix="-b"))
    code, out, err = run(capsys, "ingest", str(export), "--db", str(store))
    assert code == 0, err
    with Store.open(store) as s:
        assert [e["export_id"] for e in s.exports()] == ["run-1", "run-2"]


def test_the_same_export_again_is_up_to_date_and_other_content_replaces_its_own_rows(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(capsys, "ingest", str(tmp_path / "first"), "--db", str(store))
    assert code == 0 and out.startswith("already up to date"), (out, err)

    def retitle(rows: dict[str, list[dict[str, Any]]]) -> None:
        rows["conversations"][0]["title"] = "Budget review, again"

    again = make_export(tmp_path / "first-v2", export_id="run-1", edit=retitle)
    code, out, err = run(capsys, "ingest", str(again), "--db", str(store))
    assert code == 0 and out.startswith("ingested"), (out, err)
    con = duckdb.connect(str(store), read_only=True)
    try:
        assert con.execute("SELECT count(*), count(DISTINCT conversation_id) FROM conversations").fetchone() == (2, 2)
    finally:
        con.close()


def test_a_store_held_open_by_a_reader_is_left_unchanged_too(
    store: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a reader in this process: the ingest writes a copy and renames it over the store
    with Store.open(store):
        line = _refused(capsys, make_export(tmp_path / "second", export_id="run-2"), store)
    assert "table conversations" in line


def test_secret_shaped_colliding_ids_are_masked_in_the_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "planted.duckdb"
    code, _out, err = run(capsys, "ingest", str(make_planted_export(tmp_path / "planted")), "--db", str(db))
    assert code == 0, err
    line = _refused(capsys, make_export(tmp_path / "again", export_id="run-2",
                                        edit=lambda rows: _plant_again(rows)), db)
    assert "table conversations" in line
    assert leaked(line) == [], line
    assert CONV not in line and ASM not in line and EXPORT not in line


def _plant_again(rows: dict[str, list[dict[str, Any]]]) -> None:
    from support import planted_ids

    planted_ids._plant(rows)
