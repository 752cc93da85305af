"""A store with flipped bytes: an ingest refuses it in one line (exit 2) before writing
anything, and the read commands say it is damaged in one line too, never a traceback.

The bytes flipped are chosen from DuckDB's own map of the file (``pragma_storage_info``: the
block holding each table's first segment) plus the header and the catalog, so each case
damages something a read can reach. Where DuckDB happens to read a flipped copy whole, the
ingest may add to it, but must leave it readable."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import duckdb
import pytest

from support.cli import run
from support.stores import make_export, renamed_ids

# DuckDB's file: a 4 KiB main header, two 4 KiB database headers, then blocks of
# ``block_size`` bytes, each starting with an 8-byte checksum
_HEADERS = 3 * 4096
_CHECKSUM = 8
_TABLES = ("messages", "context_assemblies", "assembly_summary", "exports", "assembly_records")


def _readable(db: Path) -> set[str]:
    """The tables whose every column reads back (empty when the file does not open)."""
    try:
        con = duckdb.connect(str(db), read_only=True)
    except duckdb.Error:
        return set()
    ok = set()
    try:
        for (t,) in con.execute("SELECT table_name FROM duckdb_tables()").fetchall():
            try:
                con.execute(f'SELECT * FROM "{t}"').fetchall()
                ok.add(t)
            except duckdb.Error:
                pass
    finally:
        con.close()
    return ok


@pytest.fixture(scope="module")
def small_store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int]]:
    """A store of one small export, and the file offset of a byte inside the first segment
    of each of a few tables (besides the header's and the catalog's)."""
    root = tmp_path_factory.mktemp("damaged")
    db = root / "store.duckdb"
    from ingest.store import ingest

    ingest(make_export(root / "export", export_id="first"), db)
    con = duckdb.connect(str(db), read_only=True)
    try:
        block_size = con.execute("SELECT block_size FROM pragma_database_size()").fetchone()[0]
        offsets = {"file header": 8, "catalog": _HEADERS + _CHECKSUM + 16}
        for t in _TABLES:
            row = con.execute(
                f"SELECT block_id, block_offset FROM pragma_storage_info('{t}') "
                "WHERE block_id >= 0 ORDER BY block_id, block_offset LIMIT 1"
            ).fetchone()
            if row is not None:
                offsets[t] = _HEADERS + row[0] * block_size + _CHECKSUM + row[1] + 2
    finally:
        con.close()
    return db, offsets


def _flipped(src: Path, dst: Path, offset: int) -> Path:
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.seek(offset)
        data = f.read(16)
        f.seek(offset)
        f.write(bytes(b ^ 0x5A for b in data))
    return dst


def _one_line_or_ok(code: int, out: str, err: str) -> None:
    assert "Traceback" not in err and "internal error" not in err, err
    if code != 0:
        assert code == 2, (code, err)
        assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("where", ["file header", "catalog", *_TABLES])
def test_an_ingest_into_a_flipped_store_is_refused_before_writing(
    small_store: tuple[Path, dict[str, int]], where: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    src, offsets = small_store
    # every case damages a block of its own: a DuckDB that lays the store out otherwise
    # fails here, where a skip would test nothing and say so quietly
    assert where in offsets, f"{where}: no block of its own in pragma_storage_info"
    db = _flipped(src, tmp_path / "store.duckdb", offsets[where])
    readable_before = _readable(db)
    sha = hashlib.sha256(db.read_bytes()).hexdigest()
    export = make_export(tmp_path / "second", export_id="second",
                         edit=renamed_ids(suffix="-2"))

    code, out, err = run(capsys, "ingest", str(export), "--db", str(db))

    _one_line_or_ok(code, out, err)
    if readable_before != _readable(src):
        assert code == 2, out  # DuckDB cannot read part of it: refused, not added to
    if code == 2:
        assert "damaged" in err or "not a contextlens store" in err, err
        assert hashlib.sha256(db.read_bytes()).hexdigest() == sha  # nothing written
        assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(db.name)) == [db.name]
    else:
        # DuckDB read every block: the ingest may add to it, and it still reads back
        assert _readable(db) >= readable_before

    # the read commands: one line and exit 2 where they reach the damage, never a traceback
    for argv in (["list"], ["show", "as1"], ["why", "as1", "msg1"]):
        _one_line_or_ok(*run(capsys, *argv, "--db", str(db)))


@pytest.mark.parametrize("where", ["file header", "catalog"])
def test_open_names_a_store_that_does_not_open_before_the_app_starts(
    small_store: tuple[Path, dict[str, int]], where: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The report: `open` of such a file started the app, whose first worker died with a
    traceback (exit 1)."""
    src, offsets = small_store
    db = _flipped(src, tmp_path / "store.duckdb", offsets[where])
    code, out, err = run(capsys, "open", str(db))
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    if where == "catalog":  # (a flipped magic number is not taken for a store at all)
        assert "is damaged: DuckDB cannot read it" in err, err
