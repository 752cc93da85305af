"""Reading a store with plain SQL, to check what an adapter or ingest wrote."""

from __future__ import annotations

from pathlib import Path

import duckdb


def sql(db: Path, q: str) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.sql(q).fetchall()
    finally:
        con.close()
