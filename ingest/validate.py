"""Validate an export folder against the contract, columnar and in DuckDB.

The store's ingest loads each table once (``CREATE TABLE AS ... read_parquet``) and then
checks the loaded tables with SQL: required values, closed enumerations, primary keys,
foreign keys, cycles, and the manifest's row counts and sha256s. Only when a check fails is
the offending table's Parquet read again, to name the first bad row in file order.

Every error is one line naming the export, file or table, column, row and value::

    export sample_data: table tool_memories, column freshness_class, row 12 (memory_id=m-9):
    unknown value 'fresh' (allowed: volatile, session, bounded, durable, permanent)

Row numbers are 0-based, in file order across a table's files (sorted by relative path).
Dangling soft references are warnings, e.g. a memory whose source artifact is missing is
"broken provenance"; they are listed, never repaired.
"""

from __future__ import annotations

import datetime as dt
import os
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable

import duckdb

from .contract import ENUMS, TABLES, Table
from .errors import ContextlensError
from .exportdir import ExportLayout, check_manifest, read_layout, start_hashing
from .loadtables import create_or_insert, resolve_types, select_list
from .sql import fetch_one, one_line_error, open_duckdb, q, show_value, sql_str

Progress = Callable[[str, int, int], None]

MAX_WARNINGS_PER_CHECK = 50

def _key_text(table: Table, values: tuple) -> str:
    return ", ".join(f"{k}={show_value(v)}" for k, v in zip(table.primary_key, values))

def _first_row(
    con: duckdb.DuckDBPyConnection,
    layout: ExportLayout,
    name: str,
    predicate: str,
    columns: list[str],
    params: list | None = None,
) -> tuple[int, tuple, tuple] | None:
    """The first row (file order) of table ``name``'s Parquet matching ``predicate`` over the
    contract-typed columns: (row number, key values, values of ``columns``)."""
    src = layout.tables[name]
    table = TABLES[name]
    pk = list(table.primary_key)
    cols = ", ".join(q(c) for c in pk + columns)
    sql = (
        f"SELECT filename, file_row_number, {cols} FROM ("
        f"SELECT {select_list(src)}, filename, file_row_number "
        f"FROM {src.scan_sql(', filename=true, file_row_number=true')}) "
        f"WHERE {predicate} ORDER BY filename, file_row_number LIMIT 1"
    )
    row = fetch_one(con.execute(sql, params or []))
    if row is None:
        return None
    return src.global_row(row[0], row[1]), tuple(row[2 : 2 + len(pk)]), tuple(row[2 + len(pk) :])

def _pk_distinct_expr(table: Table) -> str:
    # count(DISTINCT) is about twice as fast as GROUP BY ... HAVING on big tables (and over
    # a 64-bit hash of a composite key, twice again); the exact grouping only runs when a
    # duplicate (or a hash collision) is possible
    if len(table.primary_key) == 1:
        return f"count(DISTINCT {q(table.primary_key[0])})"
    return f"count(DISTINCT hash({', '.join(q(c) for c in table.primary_key)}))"

def check_values(
    con: duckdb.DuckDBPyConnection, layout: ExportLayout, export_id: str
) -> dict[str, tuple[int, int]]:
    """Non-null required columns, closed enumerations and JSON columns, in one aggregate
    scan per table that also counts rows and distinct primary keys (returned per table for
    ``check_primary_keys``)."""
    key_counts: dict[str, tuple[int, int]] = {}
    for name, table in TABLES.items():
        checks: list[tuple[str, str, Any]] = []  # (kind, column, sql predicate)
        for col in table.columns:
            if not col.nullable:
                checks.append(("null", col.name, f"{q(col.name)} IS NULL"))
            if col.enum:
                allowed = ", ".join(sql_str(v) for v in ENUMS[col.enum])
                checks.append(("enum", col.name, f"{q(col.name)} NOT IN ({allowed})"))
            if col.kind == "json":
                checks.append(("json", col.name, f"NOT json_valid({q(col.name)})"))
        agg = ", ".join(
            ["count(*)", _pk_distinct_expr(table)] + [f"count_if({p})" for _, _, p in checks]
        )
        counts = fetch_one(con.execute(
            f"SELECT {agg} FROM {q(name)} WHERE export_id = ?", [export_id]
        ))
        key_counts[name] = (counts[0], counts[1])
        for (kind, col_name, pred), count in zip(checks, counts[2:]):
            if not count:
                continue
            found = _first_row(con, layout, name, pred, [col_name])
            row, key, (value,) = found if found else (-1, (), (None,))
            where = f"table {name}, column {col_name}, row {row} ({_key_text(table, key)})"
            if kind == "null":
                raise layout.error(f"{where}: required value is null")
            if kind == "json":
                raise layout.error(f"{where}: not valid JSON: '{show_value(value)}'")
            allowed_text = ", ".join(ENUMS[table.column(col_name).enum])  # type: ignore[arg-type]
            raise layout.error(
                f"{where}: unknown value '{show_value(value)}' (allowed: {allowed_text})"
            )
    return key_counts

def check_primary_keys(
    con: duckdb.DuckDBPyConnection,
    layout: ExportLayout,
    export_id: str,
    key_counts: dict[str, tuple[int, int]] | None = None,
) -> None:
    for name, table in TABLES.items():
        pk = ", ".join(q(c) for c in table.primary_key)
        if key_counts is not None and name in key_counts:
            total, distinct = key_counts[name]
        else:
            total, distinct = fetch_one(con.execute(
                f"SELECT count(*), {_pk_distinct_expr(table)} FROM {q(name)} WHERE export_id = ?",
                [export_id],
            ))
        if total == distinct:
            continue
        dup = fetch_one(con.execute(
            f"SELECT {pk} FROM {q(name)} WHERE export_id = ? GROUP BY {pk} "
            f"HAVING count(*) > 1 LIMIT 1",
            [export_id],
        ))
        if dup is None:
            continue
        src = layout.tables[name]
        match = " AND ".join(f"{q(c)} = ?" for c in table.primary_key)
        rows = con.execute(
            f"SELECT filename, file_row_number FROM ("
            f"SELECT {select_list(src)}, filename, file_row_number "
            f"FROM {src.scan_sql(', filename=true, file_row_number=true')}) WHERE {match} "
            f"ORDER BY filename, file_row_number LIMIT 5",
            list(dup),
        ).fetchall()
        where = ", ".join(str(src.global_row(f, r)) for f, r in rows)
        raise layout.error(
            f"table {name}: duplicate primary key ({_key_text(table, dup)}) at rows {where}"
        )

def _fk_predicate(fk_column: str, is_list: bool, target: str, target_col: str) -> str:
    """Rows whose reference names no row of the target table in the same export."""
    targets = f"(SELECT {q(target_col)} FROM {q(target)} WHERE export_id = ?)"
    if is_list:
        return (
            f"len(list_filter({q(fk_column)}, lambda v: v IS NOT NULL)) > 0 AND EXISTS ("
            f"SELECT 1 FROM (SELECT unnest({q(fk_column)}) AS ref) WHERE ref NOT IN {targets})"
        )
    return f"{q(fk_column)} IS NOT NULL AND {q(fk_column)} NOT IN {targets}"

# References repeated by many rows (an assembly's records and decisions)
_CLUSTERED_FKS = {("assembly_records", "assembly_id"), ("policy_decisions", "assembly_id")}

def check_foreign_keys(
    con: duckdb.DuckDBPyConnection, layout: ExportLayout, export_id: str
) -> list[str]:
    """Hard keys raise; soft keys return warnings (one per dangling reference, capped)."""
    warnings: list[str] = []
    for name, table in TABLES.items():
        for fk in table.foreign_keys:
            is_list = table.column(fk.column).kind == "list"
            col, target, tcol = q(fk.column), q(fk.table), q(fk.target)
            if is_list:
                count_sql = (
                    f"SELECT count(*) FROM (SELECT unnest({col}) AS ref FROM {q(name)} "
                    f"WHERE export_id = ?) r WHERE ref IS NOT NULL AND NOT EXISTS "
                    f"(SELECT 1 FROM {target} t WHERE t.{tcol} = r.ref AND t.export_id = ?)"
                )
            elif (name, fk.column) in _CLUSTERED_FKS:
                # many rows per key value: check each distinct value once
                count_sql = (
                    f"SELECT count(*) FROM (SELECT DISTINCT {col} AS ref FROM {q(name)} "
                    f"WHERE export_id = ?) r WHERE ref IS NOT NULL AND NOT EXISTS "
                    f"(SELECT 1 FROM {target} t WHERE t.{tcol} = r.ref AND t.export_id = ?)"
                )
            else:
                count_sql = (
                    f"SELECT count(*) FROM {q(name)} s WHERE s.export_id = ? AND s.{col} IS NOT NULL "
                    f"AND NOT EXISTS (SELECT 1 FROM {target} t WHERE t.{tcol} = s.{col} "
                    f"AND t.export_id = ?)"
                )
            dangling = fetch_one(con.execute(count_sql, [export_id, export_id]))[0]
            if not dangling:
                continue
            if not fk.soft:
                found = _first_row(
                    con, layout, name,
                    _fk_predicate(fk.column, is_list, fk.table, fk.target),
                    [fk.column], [export_id],
                )
                row, key, (value,) = found if found else (-1, (), (None,))
                raise layout.error(
                    f"table {name}, column {fk.column}, row {row} ({_key_text(table, key)}): "
                    f"'{show_value(value)}' names no row of table {fk.table}"
                )
            warnings += _soft_fk_warnings(con, layout, name, fk, is_list, export_id, dangling)
    return warnings

def _soft_fk_warnings(con, layout, name, fk, is_list, export_id, dangling) -> list[str]:
    table = TABLES[name]
    src = layout.tables[name]
    pk = list(table.primary_key)
    pk_cols = ", ".join(q(c) for c in pk)
    targets = f"(SELECT {q(fk.target)} FROM {q(fk.table)} WHERE export_id = ?)"
    ref_expr = f"unnest({q(fk.column)})" if is_list else q(fk.column)
    sql = (
        f"SELECT filename, file_row_number, {pk_cols}, ref FROM ("
        f"SELECT {pk_cols}, filename, file_row_number, {ref_expr} AS ref FROM ("
        f"SELECT {select_list(src)}, filename, file_row_number "
        f"FROM {src.scan_sql(', filename=true, file_row_number=true')})) "
        f"WHERE ref IS NOT NULL AND ref NOT IN {targets} "
        f"ORDER BY filename, file_row_number, ref LIMIT {MAX_WARNINGS_PER_CHECK}"
    )
    out = []
    provenance = fk.column == "source_artifact_ids"
    for row in con.execute(sql, [export_id]).fetchall():
        n = src.global_row(row[0], row[1])
        key = _key_text(table, tuple(row[2 : 2 + len(pk)]))
        ref = row[2 + len(pk)]
        text = f"{name} row {n} ({key}): {fk.column} names missing {fk.table} {show_value(ref)}"
        if provenance:
            text += " (broken provenance)"
        out.append(text)
    if dangling > len(out):
        out.append(
            f"{name}: {dangling - len(out)} more dangling {fk.column} references to {fk.table}"
        )
    return out

def check_cycles(con: duckdb.DuckDBPyConnection, layout: ExportLayout, export_id: str) -> None:
    """Branch parents must form a tree; supersession must not loop back on itself."""
    row = fetch_one(con.execute(
        "SELECT memory_id FROM tool_memories WHERE export_id = ? AND "
        "(superseded_by = memory_id OR list_contains(supersedes, memory_id)) "
        "ORDER BY memory_id LIMIT 1",
        [export_id],
    ))
    if row:
        raise layout.error(f"table tool_memories: memory {show_value(row[0])} supersedes itself")

    cycle = _find_cycle(
        con,
        "SELECT branch_id AS src, parent_branch_id AS dst FROM branches "
        "WHERE export_id = ? AND parent_branch_id IS NOT NULL",
        [export_id],
    )
    if cycle:
        raise layout.error(
            f"table branches: parent_branch_id forms a cycle: {_cycle_text(cycle)}"
        )
    # "a replaces b": from supersedes (m replaces each listed) and superseded_by (r replaces m)
    cycle = _find_cycle(
        con,
        "SELECT memory_id AS src, unnest(supersedes) AS dst FROM tool_memories "
        "WHERE export_id = ? UNION SELECT superseded_by AS src, memory_id AS dst "
        "FROM tool_memories WHERE export_id = ? AND superseded_by IS NOT NULL",
        [export_id, export_id],
    )
    if cycle:
        raise layout.error(
            f"table tool_memories: supersession forms a cycle: {_cycle_text(cycle)}"
        )

def _cycle_text(cycle: list[str]) -> str:
    return show_value(" -> ".join(str(c) for c in cycle), 200)

def _find_cycle(con: duckdb.DuckDBPyConnection, edges_sql: str, params: list) -> list[str] | None:
    """The smallest-id cycle in a directed graph given as (src, dst) rows, or None."""
    sql = f"""
        WITH RECURSIVE edges AS ({edges_sql}),
        walk(start, cur, path) AS (
            SELECT src, dst, [src] FROM edges WHERE dst IS NOT NULL
            UNION ALL
            SELECT w.start, e.dst, list_append(w.path, w.cur)
            FROM walk w JOIN edges e ON e.src = w.cur
            WHERE w.cur <> w.start AND NOT list_contains(w.path, w.cur)
        )
        SELECT path FROM walk WHERE cur = start ORDER BY start, len(path) LIMIT 1
    """
    row = fetch_one(con.execute(sql, params))
    if row is None:
        return None
    path = list(row[0])
    return path + [path[0]]

# A record may be stamped a little after the export was written (clocks of two machines);
# later than this, and later than the ingest itself, it is reported as in the future.
FUTURE_TOLERANCE = dt.timedelta(days=1)

# Timestamps no Python datetime can hold (e.g. nanoseconds written as microseconds)
_MAX_TIME = "TIMESTAMPTZ '9999-12-31 23:59:59.999999+00'"

_MIN_TIME = "TIMESTAMPTZ '0001-01-01 00:00:00+00'"

# Columns that name a time ahead by design
_FUTURE_ALLOWED = {("tool_memories", "stale_after")}

# (table, later column, earlier column): a row that ends before it starts contradicts itself
_ROW_ORDER = (
    ("tool_calls", "completed_at", "requested_at"),
    ("model_runs", "ended_at", "started_at"),
)

# (table, column, parent table, parent key, parent time): created before the parent, a warning
_PARENT_ORDER = (
    ("branches", "created_at", "conversations", "conversation_id", "created_at"),
    ("messages", "created_at", "conversations", "conversation_id", "created_at"),
)

def check_times(
    con: duckdb.DuckDBPyConnection,
    layout: ExportLayout,
    export_id: str,
    now: dt.datetime | None = None,
) -> list[str]:
    """Timestamps: unrepresentable values and rows that end before they start are errors;
    times in the future and records older than their conversation are warnings."""
    created = layout.manifest.created_at
    if created.tzinfo is None:
        created = created.replace(tzinfo=dt.timezone.utc)
    now = now or dt.datetime.now(dt.timezone.utc)
    # a manifest may say it was written in year 9999: the horizon stops at the last time
    latest = dt.datetime.max.replace(tzinfo=dt.timezone.utc) - FUTURE_TOLERANCE
    horizon = min(max(created, now), latest) + FUTURE_TOLERANCE
    warnings: list[str] = []
    for name, table in TABLES.items():
        cols = [c.name for c in table.columns if c.kind == "ts"]
        if not cols:
            continue
        checks: list[tuple[str, str, str]] = []
        for col in cols:
            checks.append(("range", col, f"({q(col)} > {_MAX_TIME} OR {q(col)} < {_MIN_TIME})"))
            if (name, col) not in _FUTURE_ALLOWED:
                checks.append(("future", col, f"{q(col)} > {_sql_ts(horizon)}"))
        for tname, later, earlier in _ROW_ORDER:
            if tname == name:
                checks.append(("order", later, f"{q(later)} < {q(earlier)}"))
        agg = ", ".join(f"count_if({p})" for _, _, p in checks)
        counts = fetch_one(con.execute(
            f"SELECT {agg} FROM {q(name)} WHERE export_id = ?", [export_id]
        ))
        for (kind, col, pred), count in zip(checks, counts):
            if not count:
                continue
            found = _first_row(con, layout, name, pred, [col] + _ROW_EARLIER.get((name, col), []))
            row, key, values = found if found else (-1, (), (None, None))
            where = f"table {name}, column {col}, row {row} ({_key_text(table, key)})"
            if kind == "range":
                raise layout.error(
                    f"{where}: {show_value(values[0])} is outside the years 1 to 9999 "
                    f"(a time in another unit?)"
                )
            if kind == "order":
                earlier = _ROW_EARLIER[(name, col)][0]
                raise layout.error(
                    f"{where}: {show_value(values[0])} is before {earlier} {show_value(values[1])}"
                )
            text = (
                f"{name} row {row} ({_key_text(table, key)}): {col} {show_value(values[0])} is in the "
                f"future (after the export was written, {created.isoformat()})"
            )
            if count > 1:
                text += f"; {count - 1} more such rows"
            warnings.append(text)
    for name, col, parent, fk, parent_col in _PARENT_ORDER:
        table = TABLES[name]
        src = layout.tables[name]
        early = fetch_one(con.execute(
            f"SELECT count(*) FROM {q(name)} s JOIN {q(parent)} p ON p.{q(fk)} = s.{q(fk)} "
            f"AND p.export_id = s.export_id WHERE s.export_id = ? AND s.{q(col)} < p.{q(parent_col)}",
            [export_id],
        ))[0]
        if not early:  # the common case: no second read of the Parquet
            continue
        pk = list(table.primary_key)
        pk_cols = ", ".join(f"s.{q(c)}" for c in pk)
        rows = con.execute(
            f"SELECT s.filename, s.file_row_number, s.{q(fk)}, s.{q(col)}, p.{q(parent_col)}, "
            f"{pk_cols} FROM (SELECT {select_list(src)}, filename, file_row_number "
            f"FROM {src.scan_sql(', filename=true, file_row_number=true')}) s "
            f"JOIN {q(parent)} p ON p.{q(fk)} = s.{q(fk)} AND p.export_id = ? "
            f"WHERE s.{q(col)} < p.{q(parent_col)} "
            f"ORDER BY s.filename, s.file_row_number LIMIT {MAX_WARNINGS_PER_CHECK}",
            [export_id],
        ).fetchall()
        for filename, file_row, ref, when, parent_when, *key in rows:
            warnings.append(
                f"{name} row {src.global_row(filename, file_row)} "
                f"({_key_text(table, tuple(key))}): {col} {show_value(when)} is before its "
                f"{parent[:-1]} {show_value(ref)} was created ({show_value(parent_when)})"
            )
        if early > len(rows):
            warnings.append(
                f"{name}: {early - len(rows)} more rows whose {col} is before their {parent[:-1]}'s"
            )
    return warnings

_ROW_EARLIER = {(t, later): [earlier] for t, later, earlier in _ROW_ORDER}

def _sql_ts(value: dt.datetime) -> str:
    return f"TIMESTAMPTZ '{value.astimezone(dt.timezone.utc).isoformat()}'"

def check_loaded(
    con: duckdb.DuckDBPyConnection,
    layout: ExportLayout,
    export_id: str,
    hashes: dict[str, Future] | None = None,
    tick: Callable[[str], None] | None = None,
) -> tuple[dict[str, int], list[str]]:
    """Every content check over the loaded tables; raises the first error, returns
    (rows per table, warnings)."""
    tick = tick or (lambda _label: None)
    tick("checking required values and enumerations")
    key_counts = check_values(con, layout, export_id)
    tick("checking primary keys")
    check_primary_keys(con, layout, export_id, key_counts)
    tick("checking references")
    warnings = check_foreign_keys(con, layout, export_id)
    tick("checking cycles")
    check_cycles(con, layout, export_id)
    warnings += check_times(con, layout, export_id)
    tick("checking manifest row counts and sha256")
    rows = check_manifest(con, layout, export_id, hashes)
    return rows, warnings

CHECK_STEPS = 5

@dataclass(frozen=True)
class ValidationReport:
    export_id: str
    rows: dict[str, int]
    warnings: list[str]

def validate_export(export_dir: str | os.PathLike[str], progress: Progress | None = None) -> ValidationReport:
    """Validate an export without writing a store (loads it into an in-memory DuckDB)."""
    layout = read_layout(export_dir)
    export_id = layout.manifest.export_id
    con = open_duckdb()
    try:
        resolve_types(con, layout)
        total = len(layout.tables) + CHECK_STEPS
        done = 0
        with ThreadPoolExecutor(max_workers=1) as pool:
            hashes = start_hashing(layout, pool)
            for src in layout.tables.values():
                if progress:
                    progress(f"loading {src.name}", done, total)
                create_or_insert(con, src, export_id, exists=False)
                done += 1

            def tick(label: str) -> None:
                nonlocal done
                if progress:
                    progress(label, done, total)
                done += 1

            rows, warnings = check_loaded(con, layout, export_id, hashes, tick)
        if progress:
            progress("done", total, total)
        return ValidationReport(export_id, rows, warnings)
    except duckdb.Error as err:
        raise ContextlensError(f"{layout.label}: {one_line_error(err)}") from None
    finally:
        con.close()
