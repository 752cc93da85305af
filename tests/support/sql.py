"""Reading a store with plain SQL, to check what an adapter or ingest wrote."""

from __future__ import annotations

from pathlib import Path

from ingest.sql import open_duckdb


def sql(db: Path, q: str) -> list[tuple]:
    # opened as the store's own connections are (one configuration per file in a process)
    con = open_duckdb(str(db), read_only=True)
    try:
        return con.sql(q).fetchall()
    finally:
        con.close()


# Bookkeeping of an ingest, not content: where the export was read from, and when.
INGEST_BOOKKEEPING = {"source_dir", "ingested_at"}


def store_tables(db: Path) -> dict[str, list[tuple]]:
    """Every table of a store, its rows sorted, without the ingest's bookkeeping columns:
    two stores of the same content compare equal."""
    found = {}
    for (name,) in sql(db, "SELECT table_name FROM information_schema.tables "
                           "WHERE table_schema = 'main' ORDER BY 1"):
        cols = [c for (c,) in sql(db, "SELECT column_name FROM information_schema.columns "
                                      f"WHERE table_name = '{name}' ORDER BY ordinal_position")
                if c not in INGEST_BOOKKEEPING]
        select = ", ".join(f'"{c}"' for c in cols)
        found[name] = sql(db, f'SELECT {select} FROM "{name}" ORDER BY ALL')
    return found
