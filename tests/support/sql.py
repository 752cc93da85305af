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
