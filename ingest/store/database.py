"""Opening a store file: the one connect-and-check-format path, and the thread-safe query
helpers every query area of :class:`ingest.store.Store` runs its SQL through.

User text only ever reaches SQL as a bound parameter; identifiers come from the contract and
are quoted with ``q``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
from pathlib import Path
from typing import Any, Iterable, Iterator

import duckdb
import pyarrow as pa

from ..contract import TABLES
from ..errors import ContextlensError, cut
from ..filters import AssemblyFilter, parse_filter
from ..safe_files import require_not_special
from ..sql import one_line_error as _one_line, open_cursor, open_duckdb, q, registered
from .identity import damaged, is_corruption

__all__ = ["Database", "STORE_FORMAT", "STORE_VERSION", "connect", "open_store"]

STORE_FORMAT = "contextlens-store"
STORE_VERSION = "1"


def connect(path: Path, read_only: bool) -> duckdb.DuckDBPyConnection:
    return open_duckdb(str(path), read_only=read_only)


def check_is_store(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """Raise unless ``con`` holds a complete contextlens store of this ``STORE_VERSION``."""
    try:
        meta = dict(con.execute(
            "SELECT key, value FROM store_meta WHERE key IN ('format', 'version')"
        ).fetchall())
    except duckdb.Error as err:
        if is_corruption(err):
            raise damaged(path, err, "store_meta") from None
        meta = {}
    if meta.get("format") != STORE_FORMAT:
        raise ContextlensError(f"{path} is not a contextlens store")
    version = str(meta.get("version") or "")
    if not version.isdigit():
        raise ContextlensError(
            f"{path}: contextlens store of unknown version {cut(version, 40)!r}; {_rebuild(path)}"
        )
    if int(version) > int(STORE_VERSION):
        raise ContextlensError(
            f"{path} was made by a newer contextlens (store version {version}, this one "
            f"reads {STORE_VERSION}); upgrade contextlens"
        )
    if int(version) < int(STORE_VERSION):
        raise ContextlensError(
            f"{path} is a store of an older contextlens (store version {version}, this one "
            f"reads {STORE_VERSION}); {_rebuild(path)}"
        )
    have = {r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE schema_name = 'main'"
    ).fetchall()}
    missing = [t for t in STORE_TABLES if t not in have]
    if missing:
        raise ContextlensError(
            f"{path} is an incomplete contextlens store (table {missing[0]} is missing); "
            f"{_rebuild(path)}"
        )
    found: dict[str, dict[str, str]] = {}
    for table, column, typ in con.execute(
        "SELECT table_name, column_name, data_type FROM duckdb_columns() "
        "WHERE schema_name = 'main' AND table_name IN (SELECT unnest(?))",
        [[*STORE_TABLES, "store_meta"]],
    ).fetchall():
        found.setdefault(table, {})[column] = typ
    for table, columns in _store_columns().items():
        have_cols = found.get(table, {})
        for column, typ in columns.items():
            if column not in have_cols or (typ and have_cols[column] != typ):
                got = "missing" if column not in have_cols else f"of type {have_cols[column]}"
                # an ingest never alters such a table: the file is not the store it claims
                raise ContextlensError(
                    f"{path} is not a contextlens store of version {STORE_VERSION} (table "
                    f"{table}, column {column} is {got}); {_rebuild(path)}"
                )


# DuckDB names TIMESTAMPTZ this way in duckdb_columns()
_DESCRIBED = {"TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}
_BOOKKEEPING = {
    "store_meta": ("key", "value"),
    "exports": ("export_id", "source_dir", "manifest_json", "ingested_at", "producer",
                "created_at", "rows_json", "warnings_json"),
    "assembly_summary": ("assembly_id", "assembled_at", "policy_version", "included_count",
                         "omitted_count", "assembled_tokens", "search_text", "export_id"),
}


def _store_columns() -> dict[str, dict[str, str]]:
    """table -> column -> DuckDB type ("" where only the name is checked) every store table
    holds: the contract's columns with their types (a store may hold more: an export's
    extra columns), the export_id of every row, and the bookkeeping tables' columns."""
    from ..contract import DUCKDB_TYPES

    out: dict[str, dict[str, str]] = {
        name: {c: "" for c in cols} for name, cols in _BOOKKEEPING.items()
    }
    for name, table in TABLES.items():
        cols = {c.name: _DESCRIBED.get(DUCKDB_TYPES[c.kind], DUCKDB_TYPES[c.kind])
                for c in table.columns}
        out[name] = {**cols, "export_id": "VARCHAR"}
    return out


# the tables every ingested store holds
STORE_TABLES: tuple[str, ...] = ("exports", "assembly_summary", *TABLES)


def _rebuild(path: Path) -> str:
    return (
        f"rebuild it: move it aside and run `contextlens ingest EXPORT --db {path}` "
        "for each of its exports"
    )


def open_store(path: Path, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """A connection to the store file at ``path``, its format checked; one-line errors."""
    require_not_special(path, "store file")
    if not path.is_file():
        raise ContextlensError(f"no store at {path} (ingest an export first)")
    try:
        con = connect(path, read_only=read_only)
    except duckdb.Error as err:
        if "Conflicting lock" in str(err):
            # an ingest adding an export in place holds DuckDB's lock until it commits
            pid = re.search(r"\(PID (\d+)\)", str(err))
            by = f" (pid {pid.group(1)})" if pid else ""
            raise ContextlensError(
                f"store {path} is being written by another process{by}, such as an ingest; "
                "try again when it is done"
            ) from None
        if is_corruption(err):
            raise damaged(path, err) from None
        raise ContextlensError(f"{path} is not a contextlens store ({_one_line(err)})") from None
    try:
        check_is_store(con, path)
    except BaseException:
        con.close()
        raise
    return con


def as_filter(flt: AssemblyFilter | str | None) -> AssemblyFilter | None:
    if isinstance(flt, str):
        return parse_filter(flt)
    return flt


def cols_of(table: str, alias: str = "") -> str:
    """The contract columns of ``table``, quoted, optionally prefixed by ``alias``."""
    prefix = f"{alias}." if alias else ""
    return ", ".join(f"{prefix}{q(c)}" for c in TABLES[table].column_names)


_CLIP = "CASE WHEN length({e}) > {n} THEN left({e}, {m}) || '…' ELSE {e} END"


def clip(expr: str, n: int) -> str:
    """SQL for ``expr`` on one line (whitespace runs collapsed), cut to ``n`` characters."""
    flat = f"regexp_replace(coalesce({expr}, ''), '\\s+', ' ', 'g')"
    return _CLIP.format(e=flat, n=n, m=n - 1)


class Database:
    """One open store file. Thread-safe: calls are serialised on one connection."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, read_only: bool) -> None:
        self._con = con
        self.path = path
        self.read_only = read_only
        self._lock = threading.RLock()
        self._columns: dict[str, list[str]] = {}  # table_columns of a read-only store

    @classmethod
    def open(cls, db_path: str | os.PathLike[str], read_only: bool = True) -> Any:
        path = Path(db_path)
        return cls(open_store(path, read_only), path, read_only)

    def cursor(self) -> Any:
        """Another connection to this already open database, for another thread: cheap (no
        file is opened, no format checked) and not serialised with this one."""
        with self._lock, self._one_line_errors():
            con = open_cursor(self._con)
        return type(self)(con, self.path, self.read_only)

    def close(self) -> None:
        with self._lock:
            self._con.close()

    def table_columns(self, table: str) -> list[str]:
        """Column names of a store table (empty if the table does not exist). Kept once read
        when the store is open read-only (its tables cannot change then): every graph read
        asks for four tables."""
        if table in self._columns:
            return list(self._columns[table])
        t = self._arrow(
            "SELECT column_name FROM duckdb_columns() WHERE schema_name = 'main' AND table_name = ? "
            "ORDER BY column_index",
            [table],
        )
        names = [str(v) for v in t.column("column_name").to_pylist()]
        if self.read_only:
            self._columns[table] = names
        return list(names)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def _batches(self, sql: str, params: Iterable[Any], batch_rows: int) -> Iterator[pa.RecordBatch]:
        """The result as record batches of at most ``batch_rows``, read as they are needed."""
        with self._one_line_errors():
            # a relation's reader streams (an execute() result would be copied whole first)
            with self._con.sql(sql, params=list(params)).to_arrow_reader(batch_size=batch_rows) as reader:
                yield from reader

    def _arrow(self, sql: str, params: Iterable[Any] = ()) -> pa.Table:
        with self._lock, self._one_line_errors():
            return self._con.sql(sql, params=list(params)).to_arrow_table()

    @contextlib.contextmanager
    def _registered(self, **tables: pa.Table) -> Iterator[None]:
        """``tables`` readable by name in this connection's queries for the block: a list of
        thousands of ids joins faster as a table than as a bound list parameter, which is
        copied value by value."""
        with self._lock, registered(self._con, **tables):
            yield

    def _dicts(self, sql: str, params: Iterable[Any] = ()) -> list[dict[str, Any]]:
        with self._lock, self._one_line_errors():
            cur = self._con.execute(sql, list(params))
            names = [d[0] for d in cur.description]
            return [dict(zip(names, row)) for row in cur.fetchall()]

    def _one(self, sql: str, params: Iterable[Any] = ()) -> dict[str, Any] | None:
        rows = self._dicts(sql, params)
        return rows[0] if rows else None

    def _rows(self, sql: str, params: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock, self._one_line_errors():
            return self._con.execute(sql, list(params)).fetchall()

    @contextlib.contextmanager
    def _one_line_errors(self) -> Iterator[None]:
        """A DuckDB error (a damaged store, a bug of ours) reaches the user as one line."""
        try:
            yield
        except duckdb.Error as err:
            if is_corruption(err):
                raise damaged(self.path, err) from None
            raise ContextlensError(f"store {self.path}: {_one_line(err)}") from None

    def exports(self) -> list[dict[str, Any]]:
        rows = self._dicts(
            "SELECT export_id, source_dir, producer, created_at, ingested_at, rows_json, "
            "warnings_json FROM exports ORDER BY export_id"
        )
        for r in rows:
            r["rows"] = json.loads(r.pop("rows_json") or "{}")
            r["warnings"] = json.loads(r.pop("warnings_json") or "[]")
        return rows
