"""SQL text helpers shared by validation and the store: quoting, one-row fetches, values
and DuckDB errors shown on one line."""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING, Any, Iterator

import duckdb

from .errors import cut

if TYPE_CHECKING:  # pragma: no cover
    import pyarrow as pa

__all__ = ["fetch_one", "one_line_error", "open_cursor", "open_duckdb", "q", "registered",
           "scratch_connection", "session", "show_value", "sql_str"]

_local = threading.local()


def scratch_connection() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB for this thread, where Arrow tables are computed on (hashes,
    comparisons): made once per thread, since a connection is not shared between threads."""
    con = getattr(_local, "con", None)
    if con is None:
        con = _local.con = open_duckdb()
    return con


# A file handed to us may be another database (SQLite, Postgres dump…): opening it must not
# make DuckDB fetch and load an extension from the network to read it
CONFIG = {"autoinstall_known_extensions": False, "autoload_known_extensions": False}


def open_duckdb(path: str = ":memory:", read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection as every one of ours is: no extension fetched or loaded on its
    own, and ``session``'s settings."""
    return session(duckdb.connect(path, read_only=read_only, config=CONFIG))


def session(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """``con`` set up as every connection of ours is (a setting of one connection, not
    inherited by its cursors: ``open_cursor``): no progress bar, which DuckDB otherwise
    draws on the process's standard output during a long query, in the middle of a
    command's JSON, and times in UTC.

    The bar's printing is what goes off (``enable_progress_bar_print``), not only the bar:
    setting ``progress_bar_time`` later, by us or a library, turns the bar back on, never
    its printing. DuckDB takes both only as a connection's setting (``connect`` refuses them
    in ``config``: "Could not set option as a global option")."""
    con.execute("SET enable_progress_bar = false")
    con.execute("SET enable_progress_bar_print = false")
    con.execute("SET TimeZone = 'UTC'")
    return con


def open_cursor(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """Another connection to ``con``'s database (``con.cursor()``) set up by ``session``:
    a cursor starts from DuckDB's defaults, not from ``con``'s settings."""
    return session(con.cursor())


@contextlib.contextmanager
def registered(con: duckdb.DuckDBPyConnection, **tables: "pa.Table") -> Iterator[None]:
    """``tables`` readable by name in ``con``'s queries for the block, and gone after it,
    whatever happens in it (a scratch connection outlives the block: a name left behind
    would be read by the next caller)."""
    for name, table in tables.items():
        con.register(name, table)
    try:
        yield
    finally:
        for name in tables:
            con.unregister(name)


def fetch_one(cursor: duckdb.DuckDBPyConnection) -> tuple | None:
    """The first row of a result, reading it to the end (DuckDB requires a finished result
    before the connection runs anything else)."""
    rows = cursor.fetchall()
    return rows[0] if rows else None

def q(name: str) -> str:
    """Quote an identifier (table or column names come from the contract or a file's schema)."""
    return '"' + name.replace('"', '""') + '"'

def sql_str(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"

def show_value(value: Any, limit: int = 80) -> str:
    text = cut(str(value), limit)
    return text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text

def one_line_error(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0] if text else type(err).__name__


# --------------------------------------------------------------------------- hashes
