"""Loading an export's tables into DuckDB: the column types the contract expects, values
that would need a lossy conversion refused, and load errors named by file, column and row."""

from __future__ import annotations

import contextlib
import functools
from typing import Iterator

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from .contract import ADDED_COLUMNS, DUCKDB_TYPES, TABLES
from .errors import ValidationError
from .exportdir import ExportLayout, TableSource
from .sql import fetch_one, one_line_error, open_duckdb, q, show_value

__all__ = ["create_or_insert", "load_error", "memory_held", "resolve_types", "select_list"]


# DuckDB spells some types differently in DESCRIBE than in DDL.
_TYPE_ALIASES = {"TIMESTAMPTZ": "TIMESTAMP WITH TIME ZONE"}

def _expected_type(kind: str) -> str:
    t = DUCKDB_TYPES[kind]
    return _TYPE_ALIASES.get(t, t)

def resolve_types(con: duckdb.DuckDBPyConnection, layout: ExportLayout) -> None:
    """Find each table's column types and decide the casts to the contract's types.

    A column of another type is accepted when every value converts; otherwise the error
    names the table, column, expected and found type, and the first value that fails.
    """
    for name, src in layout.tables.items():
        try:
            described = con.execute(f"DESCRIBE SELECT * FROM {src.scan_sql()}").fetchall()
        except duckdb.Error as err:
            raise layout.error(f"table {name}: cannot read {src.display}: {one_line_error(err)}") from None
        src.columns = {row[0]: row[1] for row in described}
        for col in TABLES[name].columns:
            found = src.columns.get(col.name)
            expected = _expected_type(col.kind)
            if found is None and (name, col.name) in ADDED_COLUMNS:
                src.absent.add(col.name)
                continue
            if found is None:
                raise layout.error(f"table {name}: missing required column {col.name}")
            if found == expected:
                continue
            target = DUCKDB_TYPES[col.kind]
            if _nests_deeper(found, target):
                _refuse_nested(con, layout, src, col.name, target, found)
            converts = f"TRY_CAST({q(col.name)} AS {target})"
            bad_when = f"{converts} IS NULL"
            if target == "BIGINT":
                # a fraction would be rounded away: only whole numbers convert
                bad_when += (
                    f" OR TRY_CAST({q(col.name)} AS DOUBLE) IS DISTINCT FROM {converts}::DOUBLE"
                )
            sql = (
                f"SELECT filename, file_row_number, {q(col.name)}::VARCHAR, {converts} IS NULL "
                f"FROM {src.scan_sql(', filename=true, file_row_number=true')} "
                f"WHERE {q(col.name)} IS NOT NULL AND ({bad_when}) "
                f"ORDER BY filename, file_row_number LIMIT 1"
            )
            try:
                bad = fetch_one(con.execute(sql))
            except duckdb.Error:
                raise layout.error(
                    f"table {name}, column {col.name}: expected {target}, found {found}"
                ) from None
            if bad is not None:
                row = src.global_row(bad[0], bad[1])
                why = "that does not convert" if bad[3] else "that is not a whole number"
                raise layout.error(
                    f"table {name}, column {col.name}, row {row}: expected {target}, "
                    f"found {found} value '{show_value(bad[2])}' {why}"
                )
            src.casts[col.name] = target

def _is_nested(duck_type: str) -> bool:
    t = duck_type.strip().upper()
    return t.endswith("]") or t.startswith(("STRUCT", "MAP", "UNION"))

def _nests_deeper(found: str, target: str) -> bool:
    """True when converting ``found`` to ``target`` would flatten nested values into text
    (a list, struct or map into a string column, a list of lists into a list of strings)."""
    if target.endswith("[]"):
        if not _is_nested(found):
            return False
        element = found.strip()[:-2] if found.strip().endswith("[]") else None
        return element is None or _is_nested(element)
    return _is_nested(found)

def _refuse_nested(
    con: duckdb.DuckDBPyConnection, layout: ExportLayout, src: TableSource, column: str,
    target: str, found: str,
) -> None:
    where = f"table {src.name}, column {column}"
    try:
        first = fetch_one(con.execute(
            f"SELECT filename, file_row_number, {q(column)}::VARCHAR "
            f"FROM {src.scan_sql(', filename=true, file_row_number=true')} "
            f"WHERE {q(column)} IS NOT NULL ORDER BY filename, file_row_number LIMIT 1"
        ))
    except duckdb.Error:
        first = None
    if first is not None:
        where += f", row {src.global_row(first[0], first[1])}"
        found += f" value '{show_value(first[2])}'"
    raise layout.error(
        f"{where}: expected {target}, found nested {found} (not flattened into text)"
    )

def select_list(src: TableSource) -> str:
    """Columns to load: the contract's, cast where needed, then any extra columns as found."""
    contract = TABLES[src.name].column_names
    parts = []
    for col in contract:
        if col in src.absent:
            parts.append(f"CAST(NULL AS {DUCKDB_TYPES[TABLES[src.name].column(col).kind]}) AS {q(col)}")
        elif col in src.casts:
            parts.append(f"CAST({q(col)} AS {src.casts[col]}) AS {q(col)}")
        else:
            parts.append(q(col))
    parts += [q(c) for c in src.columns if c not in contract and c != "export_id"]
    return ", ".join(parts)

def create_or_insert(
    con: duckdb.DuckDBPyConnection, src: TableSource, export_id: str, exists: bool, order_by: str = ""
) -> None:
    """Load one table's Parquet into the store table of the same name, tagged with export_id.

    DuckDB may take most of the machine's memory by default; a load is a stream from Parquet
    into the table, so it is held to LOAD_MEMORY (beyond it DuckDB spills to its temporary
    folder) and a long session's millions of assembly rows load in bounded memory."""
    select = f"SELECT {select_list(src)}, ? AS export_id FROM {src.scan_sql()}{order_by}"
    with memory_held(con):
        _create_or_insert(con, src, export_id, exists, select)


# DuckDB's memory while a table is loaded and checked (the connection's own limit is
# restored after). A load is a stream and the checks are joins and aggregates that spill:
# for a 1,000-request session's 4.7M rows, 128 MB took 45-48 s to load and check where
# 512 MB took 37 s (one run each, loaded machine), and kept the peak ~370 MB lower; the
# ingest holds the adapted transcript too, so every MB of the cap adds to its peak.
LOAD_MEMORY = "128MB"


@contextlib.contextmanager
def memory_held(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """Within the block, a file-backed ``con`` uses at most LOAD_MEMORY of DuckDB memory
    (it spills to its temporary folder beyond); an in-memory database is left as it is."""
    where = fetch_one(con.execute(
        "SELECT path FROM duckdb_databases() WHERE database_name = current_database()"))
    if where is None or not where[0]:
        yield  # an in-memory database holds its tables in memory: no cap to spill under
        return
    before = fetch_one(con.execute("SELECT current_setting('memory_limit')"))
    con.execute(f"SET memory_limit = '{LOAD_MEMORY}'")
    try:
        yield
    finally:
        if before is None or before[0] == _default_memory_limit():
            con.execute("RESET memory_limit")  # exactly the default, not its rounded spelling
        else:  # DuckDB's own spelling of a size ('4.0 GiB'): no quote in it
            con.execute(f"SET memory_limit = '{before[0]}'")


@functools.cache
def _default_memory_limit() -> str:
    with open_duckdb() as fresh:  # as every connection of ours: no progress bar drawn
        return str(fresh.execute("SELECT current_setting('memory_limit')").fetchone()[0])


def _create_or_insert(con: duckdb.DuckDBPyConnection, src: TableSource, export_id: str,
                      exists: bool, select: str) -> None:
    try:
        if not exists:
            con.execute(f"CREATE TABLE {q(src.name)} AS {select}", [export_id])
            return
        have = {r[0] for r in con.execute(f"DESCRIBE {q(src.name)}").fetchall()}
        for col, typ in list(src.columns.items()) + [
                (c.name, DUCKDB_TYPES[c.kind]) for c in TABLES[src.name].columns if c.name in src.absent]:
            if col not in have and col != "export_id":
                con.execute(
                    f"ALTER TABLE {q(src.name)} ADD COLUMN {q(col)} {src.casts.get(col, typ)}"
                )
        con.execute(f"INSERT INTO {q(src.name)} BY NAME {select}", [export_id])
    except duckdb.Error as err:
        raise load_error(src, err) from None

def load_error(src: TableSource, err: BaseException) -> ValidationError:
    """A table that could not be loaded, named by file, column and row where we can find
    them (DuckDB's own message names neither table nor column)."""
    prefix = f"{src.label}: " if src.label else ""
    bad = _first_invalid_utf8(src)
    if bad is not None:
        rel, col, row, value = bad
        return ValidationError(
            f"{prefix}table {src.name}, column {col}, row {row} (file {rel}): not valid UTF-8: "
            f"'{show_value(value)}'"
        )
    return ValidationError(f"{prefix}table {src.name}: cannot load {src.display}: {one_line_error(err)}")

def _first_invalid_utf8(src: TableSource) -> tuple[str, str, int, str] | None:
    """(file, column, row, value shown with escapes) of the first string value that is not
    UTF-8, reading the string columns a batch at a time; only runs after a load failed."""
    offset = 0
    for path, rel, rows in zip(src.files, src.rel_files, src.file_rows):
        try:
            pf = pq.ParquetFile(path)
            names = [
                f.name for f in pf.schema_arrow
                if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
            ]
            for col in names:
                start = 0
                for batch in pf.iter_batches(columns=[col], batch_size=65536):
                    arr = batch.column(0)
                    try:
                        arr.validate(full=True)
                    except pa.ArrowInvalid:
                        raw = arr.cast(pa.binary()) if not pa.types.is_large_string(arr.type) \
                            else arr.cast(pa.large_binary())
                        for i, value in enumerate(raw.to_pylist()):
                            if value is None:
                                continue
                            try:
                                value.decode("utf-8")
                            except UnicodeDecodeError:
                                shown = value.decode("utf-8", "backslashreplace")
                                return rel, col, offset + start + i, shown
                    start += batch.num_rows
        except (pa.ArrowException, OSError):
            return None
        offset += rows
    return None
